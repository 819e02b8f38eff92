/*
 * fuzz_transport_read.c — libFuzzer target for the consumer side of the tensor transport: every
 * input is decoded as an edge (the wire decoder's checks first, as for a message off the mesh)
 * and handed to start_read_tensors of an arena consumer and of a files consumer. Whatever the
 * descriptors say — offsets, sizes, segment names, entities, ranges that wrap — a read must
 * either be refused or copy only bytes inside the mapping or file, and the consumer must be able
 * to deliver, release and tear down what it read without leaking.
 *
 * The world is real: a producer's arena segment and a producer's per-uuid file exist in a private
 * shm directory. Descriptors naming the placeholder segment "mstar_arena_worker_0_1_0000abcd.seg0"
 * are pointed at the live segment, so mutations explore offsets against a real mapping.
 *
 * Seed corpus: tests/fuzz/corpus/fuzz_transport_read/ (encoded edges: a valid arena read, a
 * spill/file read, a zero-size one, and out-of-range variants).
 */
#include "mstar/mstar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLACEHOLDER "mstar_arena_worker_0_1_0000abcd.seg0"

static char dir[] = "/tmp/mstar-fuzz-transport-XXXXXX";
static mstar_comm *producer_arena, *producer_files, *reader_arena, *reader_files;
static char segment[MSTAR_NAME_MAX + 1];
static volatile uint8_t checksum;

static mstar_status sink(void *ctx, const char *peer, mstar_msg *msg)
{
    return MSTAR_OK;
}

static void die(const char *what)
{
    fprintf(stderr, "fuzz_transport_read: %s (%s)\n", what, mstar_last_error());
    abort();
}

static mstar_comm *make(const char *entity, mstar_transport_kind kind)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = kind;
    o.shm_dir = dir;
    o.send = sink;
    mstar_comm *c;
    if (mstar_comm_create(&o, &c) != MSTAR_OK)
        die("mstar_comm_create");
    return c;
}

/* A staged 4 KiB tensor on a producer; its descriptor's placement comes back in *info. */
static void stage(mstar_comm *p, mstar_tensor_info *info)
{
    static uint8_t bytes[4096];
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = "x";
    int64_t n = sizeof(bytes);
    mstar_tensor_init(&o.tensor, bytes, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 1, &n);
    mstar_rid rid = mstar_rid_from_int(1);
    if (mstar_comm_store_and_return_tensor_info(p, &rid, &o, 1, NULL, info) != MSTAR_OK ||
        mstar_comm_register_for_send(p, &rid, info, 1) != MSTAR_OK ||
        mstar_comm_set_persist(p, info->uuid, true) != MSTAR_OK)
        die("staging");
}

static void teardown(void)
{
    mstar_comm_destroy(reader_arena);
    mstar_comm_destroy(reader_files);
    mstar_comm_destroy(producer_arena);
    mstar_comm_destroy(producer_files);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_transport_read: could not remove %s\n", dir);
}

static void init(void)
{
    if (mkdtemp(dir) == NULL)
        die("mkdtemp");
    mstar_log_set_level(MSTAR_LOG_ERROR);
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1", 1);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "2", 1);
    producer_arena = make("worker_0", MSTAR_TRANSPORT_ARENA);
    producer_files = make("worker_3", MSTAR_TRANSPORT_FILES);
    reader_arena = make("worker_1", MSTAR_TRANSPORT_ARENA);
    reader_files = make("worker_2", MSTAR_TRANSPORT_FILES);
    mstar_tensor_info a, f;
    stage(producer_arena, &a);
    stage(producer_files, &f);
    snprintf(segment, sizeof(segment), "%s", a.shm_segment);
    atexit(teardown);
}

static void read_with(mstar_comm *c, const mstar_edge *e)
{
    mstar_rid rid = mstar_rid_from_int(7);
    if (mstar_comm_start_read_tensors(c, &rid, e, 1, NULL) == MSTAR_OK) {
        mstar_ready_set set;
        if (mstar_comm_get_ready_tensors(c, &set) != MSTAR_OK)
            die("get_ready_tensors");
        /* Touch every byte delivered: the sanitizer checks the buffers are what they claim. */
        for (uint32_t k = 0; k < set.nedges; k++) {
            for (uint32_t i = 0; i < set.edges[k].ntensors; i++) {
                mstar_tensor t;
                if (mstar_comm_get_tensor(c, set.edges[k].tensor_info[i].uuid, &t) != MSTAR_OK)
                    continue;
                const uint8_t *p = mstar_tensor_ptr(&t);
                for (uint64_t b = 0; b < mstar_tensor_nbytes(&t); b++)
                    checksum += p[b];
            }
        }
        mstar_ready_set_clear(&set);
    }
    if (mstar_comm_force_cleanup_request(c, &rid) != MSTAR_OK)
        die("force_cleanup_request");
    if (mstar_comm_num_tensors(c) != 0)
        die("tensors left after force cleanup");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        init();
        ready = 1;
    }
    mstar_edge e;
    if (mstar_edge_decode(data, size, &e) != MSTAR_OK)
        return 0;
    for (uint32_t i = 0; i < e.ntensors; i++)
        if (strcmp(e.tensor_info[i].shm_segment, PLACEHOLDER) == 0)
            snprintf(e.tensor_info[i].shm_segment, sizeof(e.tensor_info[i].shm_segment), "%s",
                     segment);
    read_with(reader_arena, &e);
    read_with(reader_files, &e);
    mstar_edge_clear(&e);
    return 0;
}
