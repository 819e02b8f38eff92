/*
 * test_comm_arena.c — what only the arena transport does: fragmentation leading to a spill
 * (T-15), strict mode's timeout, the TTL backstop and its hazards (T-16), dedicated segments
 * for oversized tensors, eviction of mappings whose producer is gone (T-14), the orphan sweep
 * at start, two instances of one entity side by side, pinning within its budget, mixed SHM modes
 * (T-17), the device paths through the host backend, the slot stamps (a late reader of a slot
 * that was freed and reused, or freed while it was being copied, fails its read), and handoffs
 * of one size reusing their host memory.
 */
#include "comm_harness.h"

#include "core/vec.h"
#include "sanitized.h"
#include "tensors/arena/arena.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef comm_pair world;

static int setup(void **state)
{
    *state = arena_pair_new("arena", false);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "2", 1);
    return 0;
}

static int teardown(void **state)
{
    return arena_pair_teardown(state);
}

/* Store one tensor of n bytes for `rid`, hold it for one consumer, stage it. */
static mstar_tensor_info stage(mstar_comm *p, const mstar_rid *rid, int64_t n, uint32_t seed,
                               mstar_status want)
{
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, n, seed);
    mstar_output o = output_of("x", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, &o, 1, NULL, &info));
    free(t.data);
    assert_mstar_ok(mstar_comm_increment_ref(p, info.uuid, 1));
    mstar_status st = mstar_comm_register_for_send(p, rid, &info, 1);
    if (st != want)
        fail_msg("register_for_send -> %s, wanted %s (%s)", mstar_status_name(st),
                 mstar_status_name(want), mstar_last_error());
    return info;
}

/* worker_0 over an arena of one segment (1 MiB), holding `a` (768 KiB, staged in request `rid`):
 * a 512 KiB tensor no longer fits. Set the other arena knobs first. */
static mstar_comm *full_arena(world *w, const mstar_rid *rid, mstar_tensor_info *a)
{
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "1", 1);
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    *a = stage(p, rid, 768 * 1024, 1, MSTAR_OK);
    return p;
}

/* An earlier incarnation of worker_0 in another process starts a manager over `kind` (and stages
 * one tensor when `stage_one`), then dies as if killed: no destroy, no atexit. */
static void die_leaving_state(world *w, mstar_transport_kind kind, bool stage_one)
{
    pid_t pid = fork();
    if (pid == 0) {
        sender s = { NULL, "worker_0" };
        mstar_comm *p = make_comm("worker_0", kind, w->dir, &s);
        mstar_rid rid = mstar_rid_from_int(1);
        if (stage_one)
            stage(p, &rid, 100, 1, MSTAR_OK);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* This process's minor page faults so far. */
static long minor_faults(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

static void ack(mstar_comm *p, mstar_tensor_id uuid)
{
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_TENSOR_RECEIVED);
    assert_mstar_ok(mstar_msg_add_count(&m, uuid, 1));
    assert_mstar_ok(mstar_comm_handle_message(p, &m));
    mstar_msg_clear(&m);
}

static void read_back(mstar_comm *c, const mstar_rid *rid, const mstar_tensor_info *info)
{
    mstar_edge e = edge_of("x", "n", info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(c, rid, &e, 1, NULL));
    collect_ready(c, 1);
    mstar_edge_clear(&e);
    assert_mstar_ok(mstar_comm_dereference(c, info->uuid, 1));
}

/* T-15: free space exists but no block is large enough → a warning, then a spill to a file,
 * which any consumer reads and the ACK removes. */
static void test_fragmentation_spills(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "1", 1);
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(1);
    mstar_tensor_info slots[8];
    for (int i = 0; i < 8; i++)
        slots[i] = stage(p, &rid, 128 * 1024, (uint32_t)i, MSTAR_OK); /* fills the 1 MiB */
    for (int i = 0; i < 8; i += 2)
        ack(p, slots[i].uuid); /* 512 KiB free in 128 KiB holes */
    mstar_arena_stats s = arena_stats_of(p);
    assert_int_equal(s.free_bytes, 512 * 1024);
    assert_int_equal(s.largest_free_block, 128 * 1024);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_tensor_info big = stage(p, &rid, 256 * 1024, 99, MSTAR_OK);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("fragmented"));
    assert_string_equal(big.shm_segment, ""); /* spilled */
    s = arena_stats_of(p);
    assert_int_equal(s.spill_files, 1);
    assert_int_equal(s.live_slots, 4);
    read_back(c, &rid, &big);
    bus_deliver(&w->b, "worker_0", p);
    assert_int_equal(arena_stats_of(p).spill_files, 0);
    for (int i = 1; i < 8; i += 2)
        ack(p, slots[i].uuid);
    assert_int_equal(arena_stats_of(p).live_slots, 0);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
}

/* SPILL_AFTER_S: with spilling on, a full arena first waits (backpressure) for the grace
 * period, then spills. */
static void test_spill_after_grace(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_SPILL_AFTER_S", "0.05", 1);
    mstar_rid rid = mstar_rid_from_int(9);
    mstar_tensor_info a;
    mstar_comm *p = full_arena(w, &rid, &a);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    uint64_t t0 = mstar__now_ns();
    mstar_tensor_info b = stage(p, &rid, 512 * 1024, 2, MSTAR_OK);
    uint64_t waited = mstar__now_ns() - t0;
    mstar_test_log_capture_end();
    unsetenv("MSTAR_SHM_ARENA_SPILL_AFTER_S");
    assert_true(mstar_test_log_contains("backpressuring"));
    assert_true(waited >= 50 * 1000 * 1000);
    assert_string_equal(b.shm_segment, "");
    assert_int_equal(arena_stats_of(p).spill_files, 1);
    ack(p, a.uuid);
    ack(p, b.uuid);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_comm_destroy(p);
}

/* Tensor ids restart with the process, so the per-uuid files an earlier incarnation of this
 * entity left (it was killed) are removed when it starts again; other entities' stay. */
static void test_stale_files_swept_at_start(void **state)
{
    world *w = *state;
    die_leaving_state(w, MSTAR_TRANSPORT_FILES, true);
    mstar_comm *other = make_comm("worker_1", MSTAR_TRANSPORT_FILES, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor_info x = stage(other, &rid, 100, 2, MSTAR_OK);
    assert_int_equal(mstar_test_count_dir(w->dir), 2);
    mstar_comm *again = make_comm("worker_0", MSTAR_TRANSPORT_FILES, w->dir, &w->sp);
    assert_int_equal(mstar_test_count_dir(w->dir), 1);          /* worker_1's file stays */
    mstar_tensor_info y = stage(again, &rid, 100, 3, MSTAR_OK); /* the same uuid is free again */
    assert_int_equal(mstar_id_counter(y.uuid), 1);
    ack(again, y.uuid);
    ack(other, x.uuid);
    mstar_comm_destroy(again);
    mstar_comm_destroy(other);
}

/* Strict mode: no spill; a full arena fails after FULL_TIMEOUT_S and stages nothing. */
static void test_strict_mode_times_out(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_SPILL", "0", 1);
    setenv("MSTAR_SHM_ARENA_FULL_TIMEOUT_S", "0.05", 1);
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor_info a;
    mstar_comm *p = full_arena(w, &rid, &a);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_tensor_info b = stage(p, &rid, 512 * 1024, 2, MSTAR_ENOSPC);
    mstar_test_log_capture_end();
    assert_non_null(strstr(mstar_last_error(), "SHM arena full for >0.05s"));
    assert_true(mstar_test_log_contains("backpressuring"));
    assert_int_equal(arena_stats_of(p).live_slots, 1);
    assert_int_equal(mstar_test_count_dir(w->dir), 1); /* no spill file */
    ack(p, a.uuid);
    assert_mstar_ok(mstar_comm_register_for_send(p, &rid, &b, 1)); /* room now */
    assert_string_not_equal(b.shm_segment, "");
    ack(p, b.uuid);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_comm_destroy(p);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* T-16: the TTL frees a slot nobody ACKed, leaves the store entry (still registered: it is not
 * staged again), and a late ACK then frees the entry without touching whatever reuses the slot. */
static void test_ttl_backstop(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_SLOT_TTL_S", "0.05", 1);
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_rid rid = mstar_rid_from_int(3);
    mstar_tensor_info x = stage(p, &rid, 1000, 1, MSTAR_OK);
    sleep_ms(1100); /* the maintenance pass runs at most once a second */
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    collect_ready(p, 0); /* the loop's poll runs maintenance */
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("SLOT_TTL_S"));
    assert_int_equal(arena_stats_of(p).live_slots, 0);
    assert_int_equal(mstar_comm_num_tensors(p), 1);
    assert_mstar_ok(mstar_comm_register_for_send(p, &rid, &x, 1));
    assert_int_equal(arena_stats_of(p).live_slots, 0);       /* not staged again */
    mstar_tensor_info y = stage(p, &rid, 1000, 2, MSTAR_OK); /* takes the freed slot */
    assert_int_equal(y.shm_offset, 0);
    ack(p, x.uuid);
    assert_int_equal(mstar_comm_num_tensors(p), 1);
    assert_int_equal(arena_stats_of(p).live_slots, 1); /* y's slot survived x's collection */
    ack(p, y.uuid);
    assert_int_equal(arena_stats_of(p).live_slots, 0);
    mstar_comm_destroy(p);
}

/* Oversized tensors get a dedicated segment; growth stops at the cap (then spills). */
static void test_growth_and_dedicated_segment(void **state)
{
    world *w = *state;
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(4);
    mstar_tensor_info big = stage(p, &rid, 3 * 1024 * 1024 + 5, 7, MSTAR_OK);
    mstar_arena_stats s = arena_stats_of(p);
    assert_int_equal(s.segments, 2);
    assert_int_equal(s.total_bytes, 1024 * 1024 + 3 * 1024 * 1024 + 256);
    mstar_tensor_info more = stage(p, &rid, 1024 * 1024 + 1, 8, MSTAR_OK); /* at the cap: spill */
    assert_string_equal(more.shm_segment, "");
    read_back(c, &rid, &big);
    read_back(c, &rid, &more);
    assert_int_equal(arena_stats_of(c).peer_segments, 1);
    bus_deliver(&w->b, "worker_0", p);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    s = arena_stats_of(p);
    assert_int_equal(s.live_slots + s.spill_files, 0);
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
}

/* Handoffs of one size reuse the memory the last one freed: each store copies into a host
 * buffer and each read lands in one, and were a freed buffer's memory no fit for the next of its
 * size, every handoff would fault in fresh pages (at 4 MiB, 1024 a buffer; 11 ms of a 12 ms
 * round trip on the VM the bench runs on). The sanitizers' allocators quarantine freed memory:
 * there it is always fresh. */
static void test_handoffs_of_one_size_reuse_their_memory(void **state)
{
#ifdef MSTAR_TEST_SANITIZED
    skip();
#endif
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "8", 1);
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    const int64_t n = 4 << 20;
    const long pages = n / sysconf(_SC_PAGESIZE);
    long faults_before = 0;
    for (int i = 0; i < 12; i++) {
        if (i == 4) /* the first few set the allocator's thresholds and map the segment */
            faults_before = minor_faults();
        mstar_rid rid = mstar_rid_from_int(100 + i);
        mstar_tensor_info info = stage(p, &rid, n, (uint32_t)i, MSTAR_OK);
        assert_string_not_equal(info.shm_segment, ""); /* in the arena, not spilled */
        read_back(c, &rid, &info);
        bus_deliver(&w->b, "worker_0", p);
        assert_mstar_ok(mstar_comm_cleanup_request(c, &rid));
        assert_mstar_ok(mstar_comm_cleanup_request(p, &rid));
    }
    long faults = minor_faults() - faults_before;
    if (faults >= pages) /* eight handoffs: with fresh buffers, 3 x 8 x 1024 */
        fail_msg("8 handoffs of 4 MiB faulted %ld pages; one buffer is %ld", faults, pages);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
}

/* T-14: a consumer's mapping of a producer's segment goes once the producer is gone. */
static void test_peer_eviction(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_PEER_SWEEP_S", "0", 1);
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(5);
    mstar_tensor_info x = stage(p, &rid, 4096, 3, MSTAR_OK);
    read_back(c, &rid, &x);
    assert_int_equal(arena_stats_of(c).peer_segments, 1);
    collect_ready(c, 0);
    assert_int_equal(arena_stats_of(c).peer_segments, 1); /* the producer lives */
    bus_clear(&w->b);
    mstar_comm_destroy(p); /* a restart gives new names; the old ones are unlinked */
    collect_ready(c, 0);
    assert_int_equal(arena_stats_of(c).peer_segments, 0);
    mstar_comm_destroy(c);
}

/* design.md "Transports" / T-14: segments a dead process left are swept when a manager starts; two
 * instances of one entity (a second server) never share names. */
static void test_orphans_and_collisions(void **state)
{
    world *w = *state;
    die_leaving_state(w, MSTAR_TRANSPORT_ARENA, false);
    assert_int_equal(mstar_test_count_dir(w->dir), 1); /* the orphan */
    mstar_comm *a = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *b = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    assert_int_equal(mstar_test_count_dir(w->dir), 2); /* orphan gone; a and b's seg0 */
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(6);
    mstar_tensor_info xa = stage(a, &rid, 100, 1, MSTAR_OK);
    mstar_tensor_info xb = stage(b, &rid, 100, 2, MSTAR_OK);
    assert_string_not_equal(xa.shm_segment, xb.shm_segment);
    assert_int_equal(xa.shm_offset, xb.shm_offset);
    mstar_edge e = edge_of("x", "n", &xa, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &rid, &e, 1, NULL));
    mstar_ready_set set;
    expect_ready(c, &set, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(c, xa.uuid, &got));
    assert_int_equal(((uint8_t *)got.data)[1], (uint8_t)(1 * 131 + 7));
    mstar_ready_set_clear(&set);
    mstar_edge_clear(&e);
    mstar_comm_destroy(c);
    mstar_comm_destroy(a);
    mstar_comm_destroy(b);
}

/* T-17: an arena producer cannot be read by a files consumer (loudly); a files producer is
 * read by an arena consumer. */
static void test_mixed_shm_modes(void **state)
{
    world *w = *state;
    mstar_comm *arena = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *files = make_comm("worker_1", MSTAR_TRANSPORT_FILES, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(7);
    mstar_tensor_info x = stage(arena, &rid, 64, 1, MSTAR_OK);
    mstar_edge e = edge_of("x", "n", &x, 1);
    assert_mstar_status(mstar_comm_start_read_tensors(files, &rid, &e, 1, NULL), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_SHM_ARENA must match"));
    assert_int_equal(mstar_comm_num_tensors(files), 0);
    mstar_edge_clear(&e);
    mstar_tensor_info y = stage(files, &rid, 64, 2, MSTAR_OK);
    read_back(arena, &rid, &y);
    bus_deliver(&w->b, "worker_1", files);
    assert_int_equal(mstar_comm_num_tensors(files), 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(arena, &rid));
    mstar_comm_destroy(files);
    mstar_comm_destroy(arena);
}

/* A descriptor naming a segment its source_entity did not make is refused, whether the reader
 * has the segment mapped yet or not (a mapped one is checked against the owner its name gave
 * when it was mapped), and the reader holds nothing of it. */
static void test_segment_of_another_producer_is_refused(void **state)
{
    world *w = *state;
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
    mstar_rid rid = mstar_rid_from_int(7);
    for (int mapped = 0; mapped < 2; mapped++) {
        mstar_tensor_info x = stage(p, &rid, 64, (uint32_t)mapped, MSTAR_OK);
        mstar_tensor_info forged = x;
        snprintf(forged.source_entity, sizeof(forged.source_entity), "worker_2");
        mstar_edge e = edge_of("x", "n", &forged, 1);
        assert_mstar_status(mstar_comm_start_read_tensors(c, &rid, &e, 1, NULL), MSTAR_EPROTO);
        if (strstr(mstar_last_error(), "belongs to 'worker_0', not to the descriptor's "
                                       "source_entity 'worker_2'") == NULL)
            fail_msg("mapped %d: %s", mapped, mstar_last_error());
        assert_int_equal(mstar_comm_num_tensors(c), 0);
        mstar_edge_clear(&e);
        read_back(c, &rid, &x); /* the real descriptor reads (and maps the segment) */
        bus_deliver(&w->b, "worker_0", p);
    }
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(c, &rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(p, &rid));
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
}

/* Device tensors through the host backend: staging copies through the backend's streams,
 * reads land in backend memory behind a completion, pinning within its budget. */
static void test_device_paths_host_backend(void **state)
{
    world *w = *state;
    setenv("MSTAR_SHM_ARENA_PIN_MAX_MB", "1", 1);
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_comm *p = make_comm_with("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp, be);
    mstar_comm *c = make_comm_with("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc, be);
    mstar_comm *f = make_comm_with("worker_2", MSTAR_TRANSPORT_FILES, w->dir, &w->sc, be);
    assert_int_equal(arena_stats_of(p).pinned_bytes, 1024 * 1024); /* segment 0, within 1 MiB */
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_tensor_info big = stage(p, &rid, 1536 * 1024, 4, MSTAR_OK); /* a 2nd segment */
    assert_true(mstar_test_log_contains("pin budget"));
    assert_int_equal(arena_stats_of(p).pinned_bytes, 1024 * 1024);
    mstar_edge e = edge_of("x", "n", &big, 1);
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &rid, &e, 1, &list));
    assert_int_equal(list.n, 1); /* the H2D copy's completion gates the ACK */
    assert_mstar_ok(mstar_completion_wait(list.items[0], -1));
    mstar_completion_list_clear(&list);
    collect_ready(c, 1);
    uint8_t *back = malloc(1536 * 1024);
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(c, big.uuid, back, 1536 * 1024, &cp));
    mstar_test_log_capture_end();
    int64_t n = 1536 * 1024;
    mstar_tensor want = make_vector(MSTAR_DTYPE_UINT8, n, 4);
    assert_memory_equal(back, want.data, 1536 * 1024);
    /* The same through a files consumer with a backend (read, then a synchronised copy). */
    assert_mstar_ok(mstar_comm_dereference(c, big.uuid, 1));
    bus_deliver(&w->b, "worker_0", p);
    mstar_comm *fp = make_comm_with("worker_3", MSTAR_TRANSPORT_FILES, w->dir, &w->sp, be);
    mstar_tensor_info y = stage(fp, &rid, 1000, 5, MSTAR_OK);
    read_back(f, &rid, &y);
    bus_deliver(&w->b, "worker_3", fp);
    assert_int_equal(mstar_comm_num_tensors(fp) + mstar_comm_num_tensors(p), 0);
    free(back);
    free(want.data);
    mstar_edge_clear(&e);
    mstar_comm_destroy(fp);
    mstar_comm_destroy(f);
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
    mstar_backend_destroy(be);
}

/* A consumer with (device) or without a backend. */
static mstar_comm *consumer(world *w, mstar_backend *be)
{
    return be != NULL ? make_comm_with("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc, be)
                      : make_comm("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc);
}

/* `c` reads `info` and the read fails with MSTAR_ENOENT saying `why`: at once, or (a device
 * copy) when its completion finishes, the edge then reported failed. `c` holds nothing after. */
static void expect_gone(mstar_comm *c, const mstar_rid *rid, const mstar_tensor_info *info,
                        const char *why)
{
    mstar_edge e = edge_of("x", "n", info, 1);
    mstar_completion_list list = { 0 };
    mstar_status st = mstar_comm_start_read_tensors(c, rid, &e, 1, &list);
    mstar_edge_clear(&e);
    const char *msg = mstar_last_error();
    mstar_ready_set set;
    if (st == MSTAR_OK) {
        assert_int_equal(list.n, 1);
        assert_mstar_status(mstar_completion_wait(list.items[0], -1), MSTAR_ENOENT);
        mstar_completion_list_clear(&list);
        expect_ready(c, &set, 0);
        assert_int_equal(set.nfailed, 1);
        assert_int_equal(set.failed[0].status, MSTAR_ENOENT);
        msg = set.failed[0].message;
    } else {
        assert_int_equal(st, MSTAR_ENOENT);
    }
    if (strstr(msg, why) == NULL)
        fail_msg("error '%s' does not say '%s'", msg, why);
    if (st == MSTAR_OK)
        mstar_ready_set_clear(&set);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
}

/* A late reader: x is freed (its ACK) and y takes its slot; reading x's descriptor now fails
 * instead of returning y's bytes, through host memory and through the backend's. y reads. */
static void test_late_reader_of_a_reused_slot(void **state)
{
    world *w = *state;
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_rid rid = mstar_rid_from_int(10);
    mstar_tensor_info x = stage(p, &rid, 4096, 1, MSTAR_OK);
    ack(p, x.uuid);
    mstar_tensor_info y = stage(p, &rid, 4096, 2, MSTAR_OK);
    assert_string_equal(y.shm_segment, x.shm_segment);
    assert_int_equal(y.shm_offset, x.shm_offset); /* x's bytes are gone: y's are there */
    for (int device = 0; device < 2; device++) {
        mstar_comm *c = consumer(w, device ? be : NULL);
        expect_gone(c, &rid, &x, "is no longer at offset 0");
        read_back(c, &rid, &y);
        mstar_comm_destroy(c);
    }
    ack(p, y.uuid); /* the first consumer's ACK went to the bus; the producer still owes one */
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    bus_clear(&w->b);
    mstar_comm_destroy(p);
    mstar_backend_destroy(be);
}

/* The consumer's read-only mapping of `seg` in this process ("r--s" in /proc/self/maps). */
static uint8_t *consumer_mapping(const char *dir, const char *seg)
{
    char want[4096], line[8192];
    snprintf(want, sizeof(want), "%s/%s", dir, seg);
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    uint8_t *base = NULL;
    while (base == NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        int at = 0;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &at) == 3 && at > 0 &&
            strcmp(perms, "r--s") == 0 && strcmp(line + at, want) == 0)
            base = (uint8_t *)lo;
    }
    fclose(f);
    assert_non_null(base);
    return base;
}

/* While a copy reads the slot, its stamp changes: the page the copy is about to read is
 * protected, and the fault (SIGSEGV) rewrites the stamp in the segment file, as the producer's
 * release would, then lets the copy go on. */
static struct {
    uint8_t *page;
    size_t page_len;
    int fd;
    off_t stamp_at;
    uint64_t value;
    volatile sig_atomic_t hits;
} flip;

static void flip_stamp(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    uint8_t *addr = info->si_addr;
    if (addr < flip.page || addr >= flip.page + flip.page_len) {
        signal(sig, SIG_DFL); /* not ours: the fault repeats and ends the test */
        return;
    }
    if (pwrite(flip.fd, &flip.value, sizeof(flip.value), flip.stamp_at) == sizeof(flip.value))
        flip.hits++;
    mprotect(flip.page, flip.page_len, PROT_READ);
}

/* Arm the flip for the slot of `info` in `dir`: the stamp becomes `value` when the copy reaches
 * the slot's second page. */
static void arm_flip(const char *dir, const mstar_tensor_info *info, uint64_t value)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, info->shm_segment);
    flip.fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(flip.fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(flip.fd, &sb), 0);
    mstar__arena_trailer t;
    assert_int_equal(pread(flip.fd, &t, sizeof(t), sb.st_size - (off_t)sizeof(t)), sizeof(t));
    flip.stamp_at = (off_t)(t.size + info->shm_offset / MSTAR__ARENA_ALIGN * sizeof(uint64_t));
    flip.value = value;
    flip.hits = 0;
    flip.page_len = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *map = consumer_mapping(dir, info->shm_segment);
    flip.page = map + (info->shm_offset + flip.page_len) / flip.page_len * flip.page_len;
    assert_int_equal(mprotect(flip.page, flip.page_len, PROT_NONE), 0);
}

/* A slot freed (stamp 0) or freed and reused (another uuid) while the consumer copies it: the
 * copy ran to its end, but the read fails as torn, through host memory (the check after the
 * copy) and through the backend's (the check when the copy landed). */
static void test_slot_freed_during_the_copy(void **state)
{
    world *w = *state;
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_rid rid = mstar_rid_from_int(11);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = flip_stamp;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    for (int device = 0; device < 2; device++) {
        mstar_comm *c = consumer(w, device ? be : NULL);
        mstar_tensor_info x = stage(p, &rid, 64 * 1024, 3, MSTAR_OK);
        read_back(c, &rid, &x); /* maps the segment; x stays staged (its ACK is on the bus) */
        arm_flip(w->dir, &x, device ? 0 : x.uuid + 1);
        assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
        expect_gone(c, &rid, &x, "while it was being copied");
        assert_int_equal(sigaction(SIGSEGV, &old, NULL), 0);
        assert_int_equal(flip.hits, 1); /* the stamp changed once, mid-copy */
        close(flip.fd);
        bus_clear(&w->b);
        ack(p, x.uuid);
        mstar_comm_destroy(c);
    }
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_comm_destroy(p);
    mstar_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fragmentation_spills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strict_mode_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spill_after_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_files_swept_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_backstop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_and_dedicated_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handoffs_of_one_size_reuse_their_memory, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_peer_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orphans_and_collisions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_shm_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_segment_of_another_producer_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_device_paths_host_backend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_reader_of_a_reused_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slot_freed_during_the_copy, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
