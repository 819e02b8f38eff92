/*
 * test_cuda_ipc.c — the host-side logic of the CUDA IPC route, without a GPU: the mode knob, the
 * host identity, the route choice, the device layer's export and open (the host backend's
 * in-process stand-in), and two managers in one process with MSTAR_CUDA_IPC=1 — bytes, one open
 * for many tensors in a segment, a forged handle, a segment size that lies, a producer that has
 * exited, a consumer on another host, zero-size tensors, and views (no copy; the ACK at the
 * view's release; a released tensor seen; the mapping kept). tests/gpu/test_cuda_ipc.c runs the
 * same route between processes on a GPU.
 */
#include "cuda_ipc_world.h"

#include "device/backend.h"
#include "tensors/comm_internal.h"
#include "tensors/cuda_ipc/cuda_ipc.h"
#include "tensors/cuda_ipc/cuda_ipc_test_hooks.h"
#include "tensors/cuda_ipc/nap.h"
#include "tensors/transport.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- pure parts -------------------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_host_id(void **state)
{
    (void)state;
    const char *dir = mstar_test_tmpdir("hostid");
    char path[512], id[MSTAR_HOST_ID_MAX + 1];
    snprintf(path, sizeof(path), "%s/boot_id", dir);
    write_text(path, "0b6f2c1e-7d4a-4c55-9a0e-3f1d2b8c9e71\n");
    assert_mstar_ok(mstar__host_id_read(path, id));
    assert_string_equal(id, "0b6f2c1e-7d4a-4c55-9a0e-3f1d2b8c9e71");
    write_text(path, "");
    assert_mstar_status(mstar__host_id_read(path, id), MSTAR_EPROTO);
    write_text(path, "../etc\n");
    assert_mstar_status(mstar__host_id_read(path, id), MSTAR_EPROTO);
    char big[100];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    write_text(path, big);
    assert_mstar_status(mstar__host_id_read(path, id), MSTAR_EPROTO);
    unlink(path);
    assert_mstar_status(mstar__host_id_read(path, id), MSTAR_EIO);
    rmdir(dir);
    /* The real one, on Linux. */
    assert_mstar_ok(mstar__host_id_read("/proc/sys/kernel/random/boot_id", id));
}

static void test_mode_and_choice(void **state)
{
    (void)state;
    mstar__cuda_ipc_mode m;
    unsetenv("MSTAR_CUDA_IPC");
    assert_mstar_ok(mstar__cuda_ipc_mode_get(&m));
    assert_int_equal(m, MSTAR__CUDA_IPC_AUTO);
    setenv("MSTAR_CUDA_IPC", "0", 1);
    assert_mstar_ok(mstar__cuda_ipc_mode_get(&m));
    assert_int_equal(m, MSTAR__CUDA_IPC_OFF);
    setenv("MSTAR_CUDA_IPC", "1", 1);
    assert_mstar_ok(mstar__cuda_ipc_mode_get(&m));
    assert_int_equal(m, MSTAR__CUDA_IPC_ON);
    setenv("MSTAR_CUDA_IPC", "yes", 1);
    assert_mstar_status(mstar__cuda_ipc_mode_get(&m), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_CUDA_IPC"));
    unsetenv("MSTAR_CUDA_IPC");

    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CPU, 0 }, &b));
    /* AUTO: CUDA backends only; forced: any backend that can export (the stand-in too). */
    assert_false(mstar__cuda_ipc_wanted(MSTAR__CUDA_IPC_AUTO, b));
    assert_true(mstar__cuda_ipc_wanted(MSTAR__CUDA_IPC_ON, b));
    assert_false(mstar__cuda_ipc_wanted(MSTAR__CUDA_IPC_OFF, b));
    assert_false(mstar__cuda_ipc_wanted(MSTAR__CUDA_IPC_ON, NULL));
    mstar_backend_destroy(b);

    mstar_tensor_info info;
    mstar_tensor_info_init(&info);
    assert_false(mstar__cuda_ipc_usable("host-a", &info)); /* no route */
    strcpy(info.cuda_ipc.host_id, "host-a");
    assert_true(mstar__cuda_ipc_usable("host-a", &info));
    assert_false(mstar__cuda_ipc_usable("host-b", &info));
    assert_false(mstar__cuda_ipc_usable("", &info));
}

/* ---- the device layer's export and open (host stand-in) ---------------------------------- */

static void test_export_open(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CPU, 0 }, &b));
    void *p, *q;
    assert_mstar_ok(mstar_caching_alloc(b, 1000, &p));
    assert_mstar_ok(mstar_caching_alloc(b, 3000, &q));
    mstar__ipc_segment s1, s2;
    assert_mstar_ok(mstar__ipc_export(b, p, 1000, &s1));
    assert_mstar_ok(mstar__ipc_export(b, (char *)q + 8, 100, &s2));
    /* Both blocks share one 2 MiB segment: one handle. */
    assert_int_equal(s1.size, MSTAR__SEGMENT_ROUND);
    assert_ptr_equal(s1.base, s2.base);
    assert_memory_equal(s1.handle, s2.handle, MSTAR__IPC_HANDLE_BYTES);
    void *base;
    uint64_t size;
    assert_mstar_ok(mstar__ipc_open(b, s1.handle, &base, &size));
    assert_ptr_equal(base, s1.base);
    assert_int_equal(size, s1.size);
    mstar__ipc_close(b, base);
    /* A forged handle names nothing. */
    uint8_t forged[MSTAR__IPC_HANDLE_BYTES];
    memcpy(forged, s1.handle, sizeof(forged));
    forged[30] ^= 0x5a;
    assert_mstar_status(mstar__ipc_open(b, forged, &base, &size), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "no live exported segment"));
    /* Memory outside the backend's allocations, or a range past a segment's end, exports not. */
    char local[64];
    assert_mstar_status(mstar__ipc_export(b, local, sizeof(local), &s2), MSTAR_ENOENT);
    assert_mstar_status(mstar__ipc_export(b, p, MSTAR__SEGMENT_ROUND + 1, &s2), MSTAR_ENOENT);
    assert_mstar_ok(mstar_caching_free(b, p));
    assert_mstar_ok(mstar_caching_free(b, q));
    /* Once its backend is gone the handle opens nothing. */
    mstar_backend_destroy(b);
    assert_mstar_ok(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CPU, 0 }, &b));
    assert_mstar_status(mstar__ipc_open(b, s1.handle, &base, &size), MSTAR_ENOENT);
    /* Events: the stand-in's handle opens a complete event; another handle is refused. */
    mstar_event *e, *o;
    uint8_t h[MSTAR__IPC_HANDLE_BYTES];
    assert_mstar_ok(mstar__ipc_event_create(b, &e, h));
    assert_mstar_ok(mstar__ipc_event_open(b, h, &o));
    assert_mstar_ok(mstar_event_query(o));
    mstar_event_destroy(o);
    assert_mstar_status(mstar__ipc_event_open(b, forged, &o), MSTAR_ENOENT);
    mstar_event_destroy(e);
    mstar_backend_destroy(b);
}

/* ---- two managers over the route ---------------------------------------------------------- */

typedef cuda_ipc_world world;

/* `async`: both managers' streams run their work on threads of their own, so work can still be
 * queued when a tensor is staged; the spin is MSTAR_CUDA_IPC_SPIN_US: how long a small read
 * polls for its copies (0: they land in the background, finished by the route's watcher). */
static int setup(void **state)
{
    *state = cuda_ipc_world_new("cudaipc", false, "200", NULL);
    return 0;
}

static int setup_async(void **state)
{
    *state = cuda_ipc_world_new("cudaipc", true, "0", NULL);
    return 0;
}

static int setup_async_spin(void **state)
{
    *state = cuda_ipc_world_new("cudaipc", true, "20000", NULL);
    return 0;
}

static int teardown(void **state)
{
    cuda_ipc_world_free(*state);
    return 0;
}

/* Store `n` vectors of `len` floats on the producer and stamp their descriptors. */
static void produce_n(world *w, const mstar_rid *rid, uint32_t n, int64_t len, mstar_tensor *ts,
                      mstar_tensor_info *infos)
{
    for (uint32_t i = 0; i < n; i++)
        ts[i] = make_vector(MSTAR_DTYPE_FLOAT32, len, 100 + i);
    produce(w->p, rid, ts, n, 1, infos);
    mstar_edge e = edge_of("sig", "node", infos, n);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, &e, 1));
    memcpy(infos, e.tensor_info, n * sizeof(*infos));
    mstar_edge_clear(&e);
}

static void free_tensors(mstar_tensor *ts, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(ts[i].data);
}

/* Start reading `n` descriptors as one edge: copies, or views of the producer's memory. */
static mstar_status read_edge(world *w, const mstar_rid *rid, const mstar_tensor_info *infos,
                              uint32_t n, bool views)
{
    mstar_edge e = edge_of("sig", "node", infos, n);
    mstar_status st = (views ? mstar_comm_start_read_views
                             : mstar_comm_start_read_tensors)(w->c, rid, &e, 1, NULL);
    mstar_edge_clear(&e);
    return st;
}

static mstar_status read_infos(world *w, const mstar_rid *rid, const mstar_tensor_info *infos,
                               uint32_t n)
{
    return read_edge(w, rid, infos, n, false);
}

/* Bytes arrive over the route, the whole batch through one open of one segment, and the ACK
 * frees the producer's copies. */
static void test_route_bytes_one_open(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor ts[6];
    mstar_tensor_info infos[6];
    produce_n(w, &rid, 6, 37, ts, infos); /* odd sizes: 148 bytes each */
    char host[MSTAR_HOST_ID_MAX + 1];
    assert_mstar_ok(mstar__host_id_read("/proc/sys/kernel/random/boot_id", host));
    for (int i = 0; i < 6; i++) {
        assert_string_equal(infos[i].cuda_ipc.host_id, host);
        assert_int_equal(infos[i].cuda_ipc.pid, (int32_t)getpid());
        assert_memory_equal(infos[i].cuda_ipc.mem_handle, infos[0].cuda_ipc.mem_handle,
                            MSTAR_IPC_HANDLE_BYTES);
        assert_string_equal(infos[i].shm_segment, ""); /* forced: no staged copy */
        /* The descriptor survives the wire. */
        void *buf;
        size_t len;
        mstar_tensor_info back;
        assert_mstar_ok(mstar_tensor_info_encode(&infos[i], &buf, &len));
        assert_mstar_ok(mstar_tensor_info_decode(buf, len, &back));
        assert_memory_equal(&back.cuda_ipc, &infos[i].cuda_ipc, sizeof(back.cuda_ipc));
        free(buf);
    }
    assert_mstar_ok(read_infos(w, &rid, infos, 6));
    collect_ready(w->c, 1);
    for (int i = 0; i < 6; i++)
        check_bytes(w->c, infos[i].uuid, &ts[i]);
    assert_int_equal(cuda_ipc_opens(w->c), 1);
    /* A second batch in the same segment opens nothing new. */
    mstar_rid rid2 = rid_str("r2");
    mstar_tensor t2[2];
    mstar_tensor_info i2[2];
    produce_n(w, &rid2, 2, 1001, t2, i2);
    /* The producer's streams ran everything at once, so the bytes were written when staged:
     * no event to wait for (test_route_event_behind_work has the other case). */
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    assert_memory_equal(infos[0].cuda_ipc.event_handle, none, sizeof(none));
    assert_memory_equal(i2[1].cuda_ipc.event_handle, none, sizeof(none));
    assert_mstar_ok(read_infos(w, &rid2, i2, 2));
    collect_ready(w->c, 1);
    check_bytes(w->c, i2[1].uuid, &t2[1]);
    assert_int_equal(cuda_ipc_opens(w->c), 1);
    /* The ACKs reach the producer, which frees its copies. */
    assert_true(bus_ack_count(&w->b, "worker_0", infos[0].uuid) == 1);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_status(mstar_comm_get_tensor(w->p, infos[0].uuid, &ts[0]), MSTAR_ENOENT);
    free_tensors(ts, 6);
    free_tensors(t2, 2);
}

/* Store `n` vectors and stage them while the producer's staging stream is held by work that
 * runs once `gate` is written (its kernels, on a GPU); the store's own copy ran before. */
static void produce_behind_work(world *w, const mstar_rid *rid, uint32_t n, int64_t len, int gate,
                                mstar_tensor *ts, mstar_tensor_info *infos)
{
    mstar_output o[4];
    for (uint32_t i = 0; i < n; i++) {
        ts[i] = make_vector(MSTAR_DTYPE_FLOAT32, len, 100 + i);
        o[i] = output_of("sig", ts[i]);
    }
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, o, n, NULL, infos));
    for (uint32_t i = 0; i < n; i++)
        assert_mstar_ok(mstar_comm_increment_ref(w->p, infos[i].uuid, 1));
    assert_mstar_ok(mstar_launch(w->p->env.d2h, cuda_ipc_hold_stream, &gate, sizeof(gate)));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, infos, n));
    mstar_edge e = edge_of("sig", "node", infos, n);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, &e, 1));
    memcpy(infos, e.tensor_info, n * sizeof(*infos));
    mstar_edge_clear(&e);
}

/* Collect `want` edges whose reads land in the background: the manager's event fd wakes this
 * loop (the route's watcher writes it), and get_ready_tensors finds them. */
static void collect_landing(mstar_comm *c, uint32_t want)
{
    uint32_t got = 0;
    for (int tries = 0; got < want && tries < 2000; tries++) {
        mstar_ready_set set;
        assert_mstar_ok(mstar_comm_get_ready_tensors(c, &set));
        assert_int_equal(set.nfailed, 0);
        got += set.nedges;
        mstar_ready_set_clear(&set);
        struct pollfd pfd = { mstar_comm_event_fd(c), POLLIN, 0 };
        if (got < want && poll(&pfd, 1, 10) == 1)
            mstar_comm_event_drain(c);
    }
    assert_int_equal(got, want);
}

/* Staged while the producer's staging stream still has work queued: the descriptor carries an
 * interprocess event recorded behind that work, one per stage call (a batch shares one, the next
 * batch has another, so a consumer never waits for work staged after its tensor), and the read
 * waits for it. */
static void test_route_event_behind_work(void **state)
{
    world *w = *state;
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    mstar_rid rid = rid_str("r1"), rid2 = rid_str("r2");
    mstar_tensor ts[3], t2[1];
    mstar_tensor_info infos[3], i2[1];
    produce_behind_work(w, &rid, 3, 37, gate[0], ts, infos);
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    assert_memory_not_equal(infos[0].cuda_ipc.event_handle, none, sizeof(none));
    assert_memory_equal(infos[2].cuda_ipc.event_handle, infos[0].cuda_ipc.event_handle,
                        MSTAR_IPC_HANDLE_BYTES);
    assert_int_equal(write(gate[1], "x", 1), 1); /* the producer's work runs */
    produce_behind_work(w, &rid2, 1, 5, gate[0], t2, i2);
    assert_memory_not_equal(i2[0].cuda_ipc.event_handle, none, sizeof(none));
    assert_memory_not_equal(i2[0].cuda_ipc.event_handle, infos[0].cuda_ipc.event_handle,
                            MSTAR_IPC_HANDLE_BYTES);
    assert_int_equal(write(gate[1], "x", 1), 1);
    assert_mstar_ok(read_infos(w, &rid, infos, 3));
    assert_mstar_ok(read_infos(w, &rid2, i2, 1));
    collect_landing(w->c, 2);
    for (int i = 0; i < 3; i++)
        check_bytes(w->c, infos[i].uuid, &ts[i]);
    check_bytes(w->c, i2[0].uuid, &t2[0]);
    assert_mstar_ok(mstar_stream_synchronize(w->p->env.d2h)); /* done reading the gate */
    close(gate[0]);
    close(gate[1]);
    free_tensors(ts, 3);
    free_tensors(t2, 1);
}

/* A read left to land in the background that the watcher cannot take (memory running out,
 * injected) waits for its copies in the read call instead: it still lands, is ACKed exactly once
 * and leaves nothing behind; the next read goes the usual way. */
static void test_route_lands_without_watcher(void **state)
{
    world *w = *state;
    mstar__transport *route = w->c->transport;
    mstar_rid rid = rid_str("r1"), rid2 = rid_str("r2");
    mstar_tensor ts[2], t2[1];
    mstar_tensor_info infos[2], i2[1];
    produce_n(w, &rid, 2, 37, ts, infos);
    assert_int_equal(mstar__transport_cuda_ipc_fail_watch(route, 1), 0);
    assert_mstar_ok(read_infos(w, &rid, infos, 2));
    assert_int_equal(mstar__transport_cuda_ipc_fail_watch(route, 0), 0); /* it was used */
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));             /* landed in the call */
    collect_landing(w->c, 1);
    for (int i = 0; i < 2; i++)
        check_bytes(w->c, infos[i].uuid, &ts[i]);
    /* The usual way: handed to the watcher, which finishes it once its copies have run. */
    produce_n(w, &rid2, 1, 5, t2, i2);
    assert_mstar_ok(read_infos(w, &rid2, i2, 1));
    collect_landing(w->c, 1);
    check_bytes(w->c, i2[0].uuid, &t2[0]);
    mstar_ready_set set; /* nothing lands twice */
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
    assert_int_equal(set.nedges + set.nfailed, 0);
    mstar_ready_set_clear(&set);
    assert_int_equal(bus_count(&w->b, "worker_0"), 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[i].uuid), 1);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", i2[0].uuid), 1);
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 2);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    free_tensors(ts, 2);
    free_tensors(t2, 1);
}

/* Hold the consumer's copy stream until gate[1] is written (the caller closes both ends). */
static void hold_copies(world *w, int gate[2])
{
    assert_int_equal(pipe(gate), 0);
    assert_mstar_ok(mstar_launch(w->c->env.h2d, cuda_ipc_hold_stream, &gate[0], sizeof(int)));
}

/* Reads in flight finish on the route's watcher thread with nobody polling: a caller blocked on
 * their completions is woken once the copies run, and the manager's event fd says so. */
static void test_route_watcher_finishes_reads(void **state)
{
    world *w = *state;
    mstar__transport *route = w->c->transport;
    int gate[2];
    hold_copies(w, gate);
    enum { N = 3 };
    mstar_rid rids[N] = { rid_str("r1"), rid_str("r2"), rid_str("r3") };
    mstar_tensor ts[N];
    mstar_tensor_info infos[N];
    mstar_completion_list lists[N];
    for (int i = 0; i < N; i++) {
        produce_n(w, &rids[i], 1, 37 + i, &ts[i], &infos[i]);
        mstar_edge e = edge_of("sig", "node", &infos[i], 1);
        assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rids[i], &e, 1, &lists[i]));
        mstar_edge_clear(&e);
        assert_int_equal(lists[i].n, 1);
    }
    assert_int_equal(mstar__transport_cuda_ipc_watching(route), N); /* the copies are held */
    for (int i = 0; i < N; i++)
        assert_mstar_status(mstar_completion_poll(lists[i].items[0]), MSTAR_EAGAIN);
    assert_int_equal(write(gate[1], "x", 1), 1);
    for (int i = 0; i < N; i++) /* no poll, no get_ready: the watcher finishes them */
        assert_mstar_ok(mstar_completion_wait(lists[i].items[0], 10000));
    struct pollfd pfd = { mstar_comm_event_fd(w->c), POLLIN, 0 };
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    mstar_comm_event_drain(w->c);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
    assert_int_equal(set.nedges, N);
    assert_int_equal(set.nfailed, 0);
    mstar_ready_set_clear(&set);
    for (int i = 0; i < N; i++) {
        check_bytes(w->c, infos[i].uuid, &ts[i]);
        assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[i].uuid), 1);
        mstar_completion_list_clear(&lists[i]);
    }
    assert_int_equal(mstar__transport_cuda_ipc_watching(route), 0);
    close(gate[0]);
    close(gate[1]);
    free_tensors(ts, N);
}

/* A small read polls for its copies only while no earlier read is landing in the background:
 * the poll asks the copy stream, so it would wait for those copies too. Here the first read's
 * poll runs out (the stream is held) and leaves it to the watcher; the second is not polled for. */
static void test_route_no_spin_behind_reads(void **state)
{
    world *w = *state;
    mstar__transport *route = w->c->transport;
    int gate[2];
    hold_copies(w, gate);
    mstar_rid rids[2] = { rid_str("r1"), rid_str("r2") };
    mstar_tensor ts[2];
    mstar_tensor_info infos[2];
    for (int i = 0; i < 2; i++) {
        produce_n(w, &rids[i], 1, 37, &ts[i], &infos[i]);
        assert_mstar_ok(read_infos(w, &rids[i], &infos[i], 1));
        assert_int_equal(mstar__transport_cuda_ipc_spins(route), 1);
        assert_int_equal(mstar__transport_cuda_ipc_watching(route), (size_t)i + 1);
    }
    assert_int_equal(write(gate[1], "x", 1), 1);
    collect_landing(w->c, 2);
    for (int i = 0; i < 2; i++)
        check_bytes(w->c, infos[i].uuid, &ts[i]);
    /* Nothing landing any more: the next small read polls, and lands in the call. */
    mstar_rid rid3 = rid_str("r3");
    mstar_tensor t3[1];
    mstar_tensor_info i3[1];
    produce_n(w, &rid3, 1, 5, t3, i3);
    assert_mstar_ok(read_infos(w, &rid3, i3, 1));
    assert_int_equal(mstar__transport_cuda_ipc_spins(route), 2);
    collect_landing(w->c, 1);
    check_bytes(w->c, i3[0].uuid, &t3[0]);
    close(gate[0]);
    close(gate[1]);
    free_tensors(ts, 2);
    free_tensors(t3, 1);
}

/* Store output `o` for `rid`, held for one reader, stage it and return its refreshed edge (the
 * caller clears it); *info is the descriptor as stored. */
static mstar_edge stage_output(world *w, const mstar_rid *rid, const mstar_output *o,
                               mstar_tensor_info *info)
{
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, o, 1, NULL, info));
    assert_mstar_ok(mstar_comm_increment_ref(w->p, info->uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, info, 1));
    mstar_edge e = edge_of("sig", "node", info, 1);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, &e, 1));
    return e;
}

/* Host tensors pass through the route to the arena under it: a loan is an arena slot, so
 * staging it copies nothing, and the consumer reads the bytes from that slot. (Views are for
 * consumers without a backend, whose reads land in host memory.) */
static void test_route_passes_loans(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    int64_t len = 300;
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = "sig";
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_FLOAT32, &len, 1, &o.tensor, &o.loan));
    mstar_arena_stats as;
    assert_mstar_ok(mstar_comm_arena_stats(w->p, &as));
    uint64_t free_after_loan = as.free_bytes;
    assert_true(as.total_bytes - free_after_loan >= 300 * 4); /* the loan is a slot already */
    mstar_tensor want = make_vector(MSTAR_DTYPE_FLOAT32, len, 9);
    memcpy(o.tensor.data, want.data, (size_t)len * 4);
    mstar_tensor_info info;
    mstar_edge e = stage_output(w, &rid, &o, &info);
    assert_true(e.tensor_info[0].shm_segment[0] != '\0');
    assert_mstar_ok(mstar_comm_arena_stats(w->p, &as));
    assert_int_equal(as.free_bytes, free_after_loan); /* staged in place: no second slot */
    assert_string_equal(e.tensor_info[0].cuda_ipc.host_id, ""); /* no route for host bytes */
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    collect_ready(w->c, 1);
    check_bytes(w->c, info.uuid, &want);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 1);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_ok(mstar_comm_arena_stats(w->p, &as));
    assert_int_equal(as.free_bytes, as.total_bytes); /* the ACK gave the slot back */
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    mstar_edge_clear(&e);
    free(want.data);
}

/* A handle, a segment size or an offset other than the producer exported (its registry says
 * what it did) and an exited producer are each refused with a message naming the tensor; no
 * buffer is left and a good descriptor still reads afterwards. */
static void test_route_refuses(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r3");
    mstar_tensor ts[1];
    mstar_tensor_info good[1];
    produce_n(w, &rid, 1, 64, ts, good);
    mstar_tensor_info bad = good[0];
    bad.cuda_ipc.mem_handle[20] ^= 1;
    assert_mstar_status(read_infos(w, &rid, &bad, 1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "not what its producer exported"));
    bad = good[0];
    bad.cuda_ipc.segment_size *= 2; /* a claim of more than the segment holds */
    assert_mstar_status(read_infos(w, &rid, &bad, 1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "not what its producer exported"));
    bad = good[0];
    bad.cuda_ipc.segment_offset = bad.cuda_ipc.segment_size - 8; /* past the end */
    assert_mstar_status(read_infos(w, &rid, &bad, 1), MSTAR_EPROTO);
    bad = good[0];
    bad.cuda_ipc.pid = INT32_MAX; /* no such process */
    assert_mstar_status(read_infos(w, &rid, &bad, 1), MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "has exited"));
    /* From another host: not the route; forced, there is no staged copy to read instead. */
    bad = good[0];
    strcpy(bad.cuda_ipc.host_id, "another-host");
    assert_int_not_equal(read_infos(w, &rid, &bad, 1), MSTAR_OK);
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_mstar_ok(read_infos(w, &rid, good, 1));
    collect_ready(w->c, 1);
    check_bytes(w->c, good[0].uuid, &ts[0]);
    free_tensors(ts, 1);
}

/* A segment the producer gave back (trim) is not named again: the next tensor, whatever address
 * its new segment has, carries that segment's handle, and reads. */
static void test_route_segment_reused(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r5");
    mstar_tensor ts[1], t2[1];
    mstar_tensor_info infos[1], i2[1];
    produce_n(w, &rid, 1, 256, ts, infos);
    assert_mstar_ok(read_infos(w, &rid, infos, 1));
    collect_ready(w->c, 1);
    bus_deliver(&w->b, "worker_0", w->p); /* the ACK frees the producer's block */
    uint64_t released = 0;
    assert_mstar_ok(mstar_caching_trim(w->bp, &released));
    assert_true(released > 0);
    mstar_rid rid2 = rid_str("r6");
    produce_n(w, &rid2, 1, 256, t2, i2);
    assert_memory_not_equal(i2[0].cuda_ipc.mem_handle, infos[0].cuda_ipc.mem_handle,
                            MSTAR_IPC_HANDLE_BYTES);
    assert_mstar_ok(read_infos(w, &rid2, i2, 1));
    collect_ready(w->c, 1);
    check_bytes(w->c, i2[0].uuid, &t2[0]);
    free_tensors(ts, 1);
    free_tensors(t2, 1);
}

/* In AUTO the producer also stages, and a consumer that cannot use the route reads that copy:
 * a descriptor from another host is not tried, a handle that does not open falls back. */
static void test_route_auto_fallback(void **state)
{
    world *w = *state;
    mstar__transport_cuda_ipc_set_mode(w->p->transport, MSTAR__CUDA_IPC_AUTO);
    mstar__transport_cuda_ipc_set_mode(w->c->transport, MSTAR__CUDA_IPC_AUTO);
    mstar_rid rid = rid_str("r7");
    mstar_tensor ts[3];
    mstar_tensor_info infos[3];
    produce_n(w, &rid, 3, 300, ts, infos);
    for (int i = 0; i < 3; i++) {
        assert_true(infos[i].cuda_ipc.host_id[0] != '\0'); /* the route, */
        assert_true(infos[i].shm_segment[0] != '\0');      /* and the staged copy */
    }
    strcpy(infos[1].cuda_ipc.host_id, "another-host");
    infos[2].cuda_ipc.mem_handle[20] ^= 1; /* not what the producer exported */
    assert_mstar_ok(read_infos(w, &rid, infos, 3));
    collect_ready(w->c, 1);
    for (int i = 0; i < 3; i++)
        check_bytes(w->c, infos[i].uuid, &ts[i]);
    assert_int_equal(cuda_ipc_opens(w->c), 1); /* only the first went over the route */
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    free_tensors(ts, 3);
}

static void no_release(void *ctx, void *data)
{
    (void)ctx, (void)data;
}

/* Memory outside the caching allocator (here a raw allocation, handed over without a copy) may be
 * freed while a consumer maps it: it is not exported, the staged route carries it. */
/* Log lines saying the route was not offered, and the last of them. */
static int unrouted_lines;
static char unrouted_last[512];

static void unrouted_sink(mstar_log_level level, const char *line, void *userdata)
{
    (void)level;
    (void)userdata;
    if (strstr(line, "CUDA IPC route not offered") != NULL) {
        unrouted_lines++;
        snprintf(unrouted_last, sizeof(unrouted_last), "%s", line);
    }
}

static void test_route_raw_memory_staged(void **state)
{
    world *w = *state;
    /* Why the route passed the tensor by is said once (at info level), not silently. */
    mstar_log_level level = mstar_log_get_level();
    mstar_log_set_level(MSTAR_LOG_INFO);
    mstar_log_set_sink(unrouted_sink, NULL);
    mstar_rid rid = rid_str("r8");
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 64, 7);
    void *raw;
    assert_mstar_ok(mstar_device_alloc(w->bp, 256, &raw));
    memcpy(raw, t.data, 256);
    mstar_tensor dev = t;
    dev.data = raw;
    mstar_output o = output_of("sig", dev);
    o.release = no_release;
    mstar_tensor_info info;
    mstar_edge e = stage_output(w, &rid, &o, &info);
    info = e.tensor_info[0];
    mstar_edge_clear(&e);
    assert_string_equal(info.cuda_ipc.host_id, "");
    mstar_log_set_sink(NULL, NULL);
    mstar_log_set_level(level);
    assert_int_equal(unrouted_lines, 1);
    assert_non_null(strstr(unrouted_last, "not a block of the caching allocator"));
    assert_mstar_ok(read_infos(w, &rid, &info, 1));
    collect_ready(w->c, 1);
    check_bytes(w->c, info.uuid, &t);
    assert_int_equal(cuda_ipc_opens(w->c), 0);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_ok(mstar_device_free(w->bp, raw));
    free(t.data);
}

/* Zero-size tensors have no bytes to reach: the staged route carries them. */
static void test_route_zero_size(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r4");
    mstar_tensor ts[1];
    mstar_tensor_info infos[1];
    produce_n(w, &rid, 1, 0, ts, infos);
    assert_string_equal(infos[0].cuda_ipc.host_id, "");
    assert_mstar_ok(read_infos(w, &rid, infos, 1));
    collect_ready(w->c, 1);
    check_bytes(w->c, infos[0].uuid, &ts[0]);
    free_tensors(ts, 1);
}

/* ---- the bounded wait for a producer's event --------------------------------------------- */

/* An event recorded behind work that never finishes by itself, as a killed producer's is: the
 * wait returns once the producer is gone (reaped, or a zombie) or the timeout passes, never
 * hangs; once the work has run, it returns MSTAR_OK. */
static void test_event_wait_bounded(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__host_backend_set_async(b, true);
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    mstar_event *e;
    assert_mstar_ok(mstar_event_create(b, &e));
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    assert_mstar_ok(mstar_launch(s, cuda_ipc_hold_stream, &gate[0], sizeof(gate[0])));
    assert_mstar_ok(mstar_event_record(e, s));
    assert_mstar_status(mstar_event_query(e), MSTAR_EAGAIN);

    /* Alive but stuck: the timeout. */
    pid_t alive = cuda_ipc_spawn_sleeper();
    assert_mstar_status(mstar__cuda_ipc_wait_event(e, alive, 0.05, "tensor 7 from 'w0'"),
                        MSTAR_ETIMEDOUT);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_CUDA_IPC_TIMEOUT_S"));
    assert_non_null(strstr(mstar_last_error(), "tensor 7 from 'w0'"));
    /* Killed, not yet reaped (a zombie): gone, with no limit set. */
    kill(alive, SIGKILL);
    siginfo_t info;
    assert_int_equal(waitid(P_PID, (id_t)alive, &info, WEXITED | WNOWAIT), 0);
    assert_mstar_status(mstar__cuda_ipc_wait_event(e, alive, 0, "tensor 7 from 'w0'"),
                        MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "exited before its event fired"));
    /* Reaped: gone too. */
    assert_int_equal(waitpid(alive, NULL, 0), alive);
    assert_mstar_status(mstar__cuda_ipc_wait_event(e, alive, 0, "tensor 7 from 'w0'"),
                        MSTAR_ECLOSED);

    /* The work runs: the event has fired, whoever the producer is. */
    assert_int_equal(write(gate[1], "x", 1), 1);
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_mstar_ok(mstar__cuda_ipc_wait_event(e, getpid(), 0.05, "tensor 7 from 'w0'"));
    close(gate[0]);
    close(gate[1]);
    mstar_event_destroy(e);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

/* The wait's pacing: polling without sleeping for the whole spin (a producer's event that is
 * a little late must not cost a sleep's timer slack), then naps doubling to 1 ms. */
static void test_event_wait_backoff(void **state)
{
    (void)state;
    assert_int_equal(mstar__cuda_ipc_nap_ns(0, 0), 0);
    assert_int_equal(mstar__cuda_ipc_nap_ns(200000, 0), 0); /* 200 us in: still polling */
    assert_int_equal(mstar__cuda_ipc_nap_ns(MSTAR__CUDA_IPC_SPIN_NS - 1, 0), 0);
    long nap = mstar__cuda_ipc_nap_ns(MSTAR__CUDA_IPC_SPIN_NS, 0);
    assert_int_equal(nap, MSTAR__CUDA_IPC_NAP_FIRST_NS);
    for (int i = 0; i < 20; i++) {
        long next = mstar__cuda_ipc_nap_ns(MSTAR__CUDA_IPC_SPIN_NS, nap);
        assert_true(next == 2 * nap || next == MSTAR__CUDA_IPC_NAP_MAX_NS);
        assert_true(next >= nap && next <= MSTAR__CUDA_IPC_NAP_MAX_NS);
        nap = next;
    }
    assert_int_equal(nap, MSTAR__CUDA_IPC_NAP_MAX_NS);
}

/* start_read_views over the route copies nothing: the consumer's tensors are the producer's
 * memory (the stand-in's mapping is the exporter's own pointer), the read is done at once, the
 * ACK waits for each view's release, and the producer keeps its tensors until then. */
static void test_route_views_in_place(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("v1");
    mstar_tensor ts[2];
    mstar_tensor_info infos[2];
    produce_n(w, &rid, 2, 1000, ts, infos);
    mstar_comm_event_drain(w->c);
    assert_mstar_ok(read_edge(w, &rid, infos, 2, true));
    /* Ready when its call returned, as a host read is: nothing to wake a loop for. */
    struct pollfd pfd = { mstar_comm_event_fd(w->c), POLLIN, 0 };
    assert_int_equal(poll(&pfd, 1, 0), 0);
    collect_ready(w->c, 1);
    for (int i = 0; i < 2; i++) {
        mstar_tensor mine, theirs;
        assert_mstar_ok(mstar_comm_get_tensor(w->c, infos[i].uuid, &mine));
        assert_mstar_ok(mstar_comm_get_tensor(w->p, infos[i].uuid, &theirs));
        assert_ptr_equal(mstar_tensor_ptr(&mine), mstar_tensor_ptr(&theirs));
        check_bytes(w->c, infos[i].uuid, &ts[i]);
        assert_mstar_ok(mstar_comm_view_check(w->c, infos[i].uuid));
    }
    assert_int_equal(cuda_ipc_opens(w->c), 1);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[0].uuid), 0);
    /* One view let go: its ACK goes, and the producer frees that tensor alone. */
    assert_mstar_ok(mstar_comm_dereference(w->c, infos[0].uuid, 1));
    assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[0].uuid), 1);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[1].uuid), 0);
    bus_deliver(&w->b, "worker_0", w->p);
    mstar_tensor t;
    assert_mstar_status(mstar_comm_get_tensor(w->p, infos[0].uuid, &t), MSTAR_ENOENT);
    assert_mstar_ok(mstar_comm_get_tensor(w->p, infos[1].uuid, &t));
    assert_mstar_ok(mstar_comm_dereference(w->c, infos[1].uuid, 1));
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    free_tensors(ts, 2);
}

/* A view whose producer force-cleaned its request shows memory the producer no longer holds:
 * mstar_comm_view_check says so, as it does for an arena slot freed under a view. */
static void test_route_view_of_released_tensor(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("v2");
    mstar_tensor t;
    mstar_tensor_info info;
    produce_n(w, &rid, 1, 64, &t, &info);
    assert_mstar_ok(read_edge(w, &rid, &info, 1, true));
    collect_ready(w->c, 1);
    assert_mstar_ok(mstar_comm_view_check(w->c, info.uuid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_mstar_status(mstar_comm_view_check(w->c, info.uuid), MSTAR_ENOENT);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->c, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    bus_drop(&w->b, "worker_0");
    free(t.data);
    /* Not a view at all: a copied read. */
    mstar_rid rid2 = rid_str("v3");
    produce_n(w, &rid2, 1, 64, &t, &info);
    assert_mstar_ok(read_infos(w, &rid2, &info, 1));
    collect_ready(w->c, 1);
    assert_mstar_status(mstar_comm_view_check(w->c, info.uuid), MSTAR_EINVAL);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->c, &rid2));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid2));
    bus_drop(&w->b, "worker_0");
    free(t.data);
}

/* A mapping a view shows stays open while the view lives, however full the cache: a read from
 * another segment with a cache of one maps that segment beside it, and the cache shrinks back
 * once the view is let go and another segment is opened. */
static void test_route_view_keeps_its_mapping(void **state)
{
    world *w = *state;
    mstar__transport_cuda_ipc_set_cache_max(w->c->transport, 1);
    mstar_rid rid = rid_str("v4");
    mstar_tensor t;
    mstar_tensor_info info;
    produce_n(w, &rid, 1, 1000, &t, &info);
    assert_mstar_ok(read_edge(w, &rid, &info, 1, true));
    collect_ready(w->c, 1);
    /* Another segment: an allocation too large for the first one. */
    mstar_rid rid2 = rid_str("v5");
    mstar_tensor big;
    mstar_tensor_info binfo;
    produce_n(w, &rid2, 1, 4 << 20, &big, &binfo);
    assert_memory_not_equal(binfo.cuda_ipc.mem_handle, info.cuda_ipc.mem_handle,
                            MSTAR_IPC_HANDLE_BYTES);
    assert_mstar_ok(read_infos(w, &rid2, &binfo, 1));
    collect_landing(w->c, 1);
    assert_int_equal(cuda_ipc_mapped(w->c), 2); /* the viewed one was not evicted */
    check_bytes(w->c, info.uuid, &t);
    assert_mstar_ok(mstar_comm_view_check(w->c, info.uuid));
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->c, &rid2));
    /* Let go: the next open evicts down to the bound again. */
    mstar_rid rid3 = rid_str("v6");
    mstar_tensor t3;
    mstar_tensor_info i3;
    produce_n(w, &rid3, 1, 8 << 20, &t3, &i3);
    assert_mstar_ok(read_infos(w, &rid3, &i3, 1));
    collect_landing(w->c, 1);
    assert_int_equal(cuda_ipc_mapped(w->c), 1);
    check_bytes(w->c, i3.uuid, &t3);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->c, &rid3));
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid2));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid3));
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    free(t.data);
    free(big.data);
    free(t3.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_id),
        cmocka_unit_test(test_mode_and_choice),
        cmocka_unit_test(test_export_open),
        cmocka_unit_test(test_event_wait_bounded),
        cmocka_unit_test(test_event_wait_backoff),
        cmocka_unit_test_setup_teardown(test_route_bytes_one_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_event_behind_work, setup_async, teardown),
        cmocka_unit_test_setup_teardown(test_route_lands_without_watcher, setup_async, teardown),
        cmocka_unit_test_setup_teardown(test_route_watcher_finishes_reads, setup_async, teardown),
        cmocka_unit_test_setup_teardown(test_route_no_spin_behind_reads, setup_async_spin,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_route_passes_loans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_zero_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_segment_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_auto_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_raw_memory_staged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_views_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_view_of_released_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_view_keeps_its_mapping, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
