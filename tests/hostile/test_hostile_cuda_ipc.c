/*
 * test_hostile_cuda_ipc.c — lying and late descriptors on the CUDA IPC route (docs/security.md
 * "CUDA IPC"), over the host backend's in-process stand-in: two managers in one process with
 * MSTAR_CUDA_IPC=1, as tests/unit/test_cuda_ipc.c sets them up. A descriptor may name any
 * entity, pid and handles; it must only ever read what the entity it names exported and still
 * holds (its registry, cuda_ipc_registry.h), and a forger must not grow the consumer's caches.
 */
#include "cuda_ipc_world.h"

#include "device/backend.h"
#include "tensors/comm_internal.h"
#include "tensors/cuda_ipc/cuda_ipc_registry.h"
#include "tensors/cuda_ipc/cuda_ipc_test_hooks.h"
#include "tensors/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef cuda_ipc_world world;

/* `async`: the streams run their work on threads of their own (copies can be held). */
static int setup(void **state)
{
    *state = cuda_ipc_world_new("cudaipc_hostile", false, "200", "0.2");
    return 0;
}

static int setup_async(void **state)
{
    *state = cuda_ipc_world_new("cudaipc_hostile", true, "0", "0.2");
    return 0;
}

static int teardown(void **state)
{
    cuda_ipc_world_free(*state);
    return 0;
}

/* Store a vector of `len` floats on `p` for `rid` and return its refreshed descriptor. */
static mstar_tensor_info produce_one(mstar_comm *p, const mstar_rid *rid, int64_t len,
                                     uint32_t seed, mstar_tensor *t)
{
    mstar_tensor_info info;
    *t = make_vector(MSTAR_DTYPE_FLOAT32, len, seed);
    produce(p, rid, t, 1, 1, &info);
    mstar_edge e = edge_of("sig", "node", &info, 1);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(p, &e, 1));
    info = e.tensor_info[0];
    mstar_edge_clear(&e);
    assert_true(info.cuda_ipc.host_id[0] != '\0'); /* it went over the route */
    return info;
}

static mstar_status read_info(mstar_comm *c, const mstar_rid *rid, const mstar_tensor_info *info)
{
    mstar_edge e = edge_of("sig", "node", info, 1);
    mstar_status st = mstar_comm_start_read_tensors(c, rid, &e, 1, NULL);
    mstar_edge_clear(&e);
    return st;
}

/* ---- fault 10: a handle is bound to the entity that exported it --------------------------- */

/* A descriptor that names an entity which exported nothing (with a live pid: ours) and carries
 * another producer's handle reads nothing; nor does one naming an entity that did export, but
 * not that handle; nor one naming the real producer with another live pid (so a chosen pid
 * cannot stand in for an exited producer either). */
static void test_handle_bound_to_its_exporter(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor t, t2;
    mstar_tensor_info good = produce_one(w->p, &rid, 64, 1, &t);

    mstar_tensor_info forged = good;
    strcpy(forged.source_entity, "worker_2"); /* exported nothing */
    assert_mstar_status(read_info(w->c, &rid, &forged), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "'worker_2' exported nothing"));

    /* worker_2 exports a tensor of its own: its registry holds that, not worker_0's handle. */
    sender s2 = { &w->b, "worker_2" };
    mstar_backend *b2;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b2));
    setenv("MSTAR_CUDA_IPC", "1", 1);
    mstar_comm *p2 = make_comm_with("worker_2", MSTAR_TRANSPORT_ARENA, w->dir, &s2, b2);
    unsetenv("MSTAR_CUDA_IPC");
    mstar_tensor_info other = produce_one(p2, &rid, 64, 2, &t2);
    forged.uuid = other.uuid; /* a uuid worker_2 did export, with worker_0's handle */
    assert_int_not_equal(read_info(w->c, &rid, &forged), MSTAR_OK);
    forged = good;
    strcpy(forged.source_entity, "worker_2"); /* worker_0's uuid under worker_2's name */
    assert_int_not_equal(read_info(w->c, &rid, &forged), MSTAR_OK);

    /* The real producer's name with another live process's pid. */
    pid_t sleeper = cuda_ipc_spawn_sleeper();
    forged = good;
    forged.cuda_ipc.pid = (int32_t)sleeper;
    assert_mstar_status(read_info(w->c, &rid, &forged), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "exported nothing"));
    kill(sleeper, SIGKILL);
    assert_int_equal(waitpid(sleeper, NULL, 0), sleeper);

    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_int_equal(cuda_ipc_mapped(w->c), 0); /* nothing forged was opened */
    /* The honest descriptors still read. */
    assert_mstar_ok(read_info(w->c, &rid, &good));
    assert_mstar_ok(read_info(w->c, &rid, &other));
    collect_ready(w->c, 2);
    check_bytes(w->c, good.uuid, &t);
    check_bytes(w->c, other.uuid, &t2);
    mstar_comm_destroy(p2);
    mstar_backend_destroy(b2);
    free(t.data);
    free(t2.data);
}

/* Descriptors forged under many entity names do not grow the consumer's caches (before the
 * binding, each (entity, handle) pair opened and kept one more mapping). */
static void test_forged_names_do_not_grow_caches(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor t;
    mstar_tensor_info good = produce_one(w->p, &rid, 64, 1, &t);
    for (int i = 0; i < 300; i++) {
        mstar_tensor_info forged = good;
        snprintf(forged.source_entity, sizeof(forged.source_entity), "forger_%d", i);
        assert_int_not_equal(read_info(w->c, &rid, &forged), MSTAR_OK);
    }
    assert_int_equal(cuda_ipc_mapped(w->c), 0);
    assert_int_equal(mstar__transport_cuda_ipc_cached(w->c->transport), 0);
    assert_mstar_ok(read_info(w->c, &rid, &good));
    collect_ready(w->c, 1);
    check_bytes(w->c, good.uuid, &t);
    free(t.data);
}

/* The caches hold at most their bound: with room for one of each, reads that alternate between
 * two producers open again what the other evicted, and still get their bytes. */
static void test_caches_are_bounded(void **state)
{
    world *w = *state;
    mstar__transport_cuda_ipc_set_cache_max(w->c->transport, 1);
    sender s2 = { &w->b, "worker_2" };
    mstar_backend *b2;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b2));
    setenv("MSTAR_CUDA_IPC", "1", 1);
    mstar_comm *p2 = make_comm_with("worker_2", MSTAR_TRANSPORT_ARENA, w->dir, &s2, b2);
    unsetenv("MSTAR_CUDA_IPC");
    for (int i = 0; i < 4; i++) {
        char r[8];
        snprintf(r, sizeof(r), "r%d", i);
        mstar_rid rid = rid_str(r);
        mstar_tensor t;
        mstar_tensor_info info = produce_one(i % 2 ? p2 : w->p, &rid, 64, (uint32_t)i, &t);
        assert_mstar_ok(read_info(w->c, &rid, &info));
        collect_ready(w->c, 1);
        check_bytes(w->c, info.uuid, &t);
        assert_int_equal(cuda_ipc_opens(w->c), (uint64_t)i + 1);
        assert_true(mstar__transport_cuda_ipc_cached(w->c->transport) <= 2); /* segment, registry */
        free(t.data);
    }
    mstar_comm_destroy(p2);
    mstar_backend_destroy(b2);
}

/* Copy the registry `from` to `to` in `dir`, with its header's pid set to `pid`. */
static void plant_registry(const char *dir, const char *from, const char *to, int64_t pid)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, from);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t len = 4096 + MSTAR__IPC_REG_SLOTS * sizeof(mstar__ipc_reg_entry);
    uint8_t *bytes = malloc(len);
    assert_int_equal(fread(bytes, 1, len, f), len);
    fclose(f);
    memcpy(bytes + offsetof(mstar__ipc_reg_header, pid), &pid, sizeof(pid));
    snprintf(path, sizeof(path), "%s/%s", dir, to);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
}

/* Registries not held by a live producer: a copy of worker_0's under another live pid (as a
 * process of this uid could plant, or a killed producer whose pid was reused leaves) is refused
 * as held by no process; one whose header names another pid than its name, as not a producer's.
 * A producer that starts removes its entity's registries of dead pids that no process holds. */
static void test_stale_and_planted_registries(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor t;
    mstar_tensor_info good = produce_one(w->p, &rid, 64, 1, &t);
    mstar_rid rid0 = rid_str("r0");
    mstar_tensor t0;
    mstar_tensor_info first = produce_one(w->p, &rid0, 64, 3, &t0);
    assert_mstar_ok(read_info(w->c, &rid0, &first)); /* worker_0's registry is mapped here now */
    collect_ready(w->c, 1);
    free(t0.data);
    char real[128], fake[128];
    snprintf(real, sizeof(real), "mstar_cudaipc_worker_0_%d", (int)getpid());
    pid_t sleeper = cuda_ipc_spawn_sleeper();
    snprintf(fake, sizeof(fake), "mstar_cudaipc_worker_0_%d", (int)sleeper);
    plant_registry(w->dir, real, fake, sleeper);
    mstar_tensor_info forged = good;
    forged.cuda_ipc.pid = (int32_t)sleeper;
    assert_mstar_status(read_info(w->c, &rid, &forged), MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "held by no process"));
    plant_registry(w->dir, real, fake, 1); /* the header's pid disagrees with the name */
    assert_mstar_status(read_info(w->c, &rid, &forged), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "lacks the header"));
    kill(sleeper, SIGKILL);
    assert_int_equal(waitpid(sleeper, NULL, 0), sleeper);
    /* worker_0 again, in a new manager of this process: the registry of the dead pid goes, and
     * the consumer maps the new registry under the old name. */
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", w->dir, fake);
    mstar_comm_destroy(w->p);
    assert_int_equal(access(path, F_OK), 0);
    setenv("MSTAR_CUDA_IPC", "1", 1);
    w->p = make_comm_with("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp, w->bp);
    unsetenv("MSTAR_CUDA_IPC");
    mstar_rid rid2 = rid_str("r2");
    mstar_tensor t2;
    mstar_tensor_info now = produce_one(w->p, &rid2, 64, 2, &t2);
    assert_int_equal(access(path, F_OK), -1);
    assert_mstar_ok(read_info(w->c, &rid2, &now));
    collect_ready(w->c, 1);
    check_bytes(w->c, now.uuid, &t2);
    free(t.data);
    free(t2.data);
}

/* Collect one edge that lands in the background (the route's watcher wakes the event fd). */
static void collect_landed(mstar_comm *c)
{
    uint32_t got = 0;
    for (int tries = 0; got == 0 && tries < 2000; tries++) {
        mstar_ready_set set;
        assert_mstar_ok(mstar_comm_get_ready_tensors(c, &set));
        assert_int_equal(set.nfailed, 0);
        got += set.nedges;
        mstar_ready_set_clear(&set);
        struct pollfd pfd = { mstar_comm_event_fd(c), POLLIN, 0 };
        if (got == 0 && poll(&pfd, 1, 10) == 1)
            mstar_comm_event_drain(c);
    }
    assert_int_equal(got, 1);
}

/* Store `n` vectors of 64 floats for `rid` and stage them in one call while the producer's
 * staging stream is held by work that runs once gate[1] is written: they share one event, which
 * fires only then. */
static void produce_behind_gate(world *w, const mstar_rid *rid, uint32_t n, int gate[2],
                                mstar_tensor *ts, mstar_tensor_info *infos)
{
    mstar_output o[4];
    for (uint32_t i = 0; i < n; i++) {
        ts[i] = make_vector(MSTAR_DTYPE_FLOAT32, 64, 20 + i);
        o[i] = output_of("sig", ts[i]);
    }
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, o, n, NULL, infos));
    for (uint32_t i = 0; i < n; i++)
        assert_mstar_ok(mstar_comm_increment_ref(w->p, infos[i].uuid, 1));
    assert_int_equal(pipe(gate), 0);
    assert_mstar_ok(mstar_launch(w->p->env.d2h, cuda_ipc_hold_stream, &gate[0], sizeof(int)));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, infos, n));
    mstar_edge e = edge_of("sig", "node", infos, n);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, &e, 1));
    memcpy(infos, e.tensor_info, n * sizeof(*infos));
    mstar_edge_clear(&e);
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    assert_memory_not_equal(infos[0].cuda_ipc.event_handle, none, sizeof(none));
}

/* A live producer whose event never fires (its work is stuck) costs the reading thread one
 * timeout (MSTAR_CUDA_IPC_TIMEOUT_S, 0.2 s here), not one per message: once a wait for an event
 * has timed out, later reads behind the same event fail at once until it fires; then they read. */
static void test_stuck_event_stalls_once(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor ts[3];
    mstar_tensor_info infos[3];
    int gate[2];
    produce_behind_gate(w, &rid, 3, gate, ts, infos);
    assert_mstar_status(read_info(w->c, &rid, &infos[0]), MSTAR_ETIMEDOUT);
    assert_non_null(strstr(mstar_last_error(), "has not fired within"));
    for (int i = 1; i < 3; i++) {
        assert_mstar_status(read_info(w->c, &rid, &infos[i]), MSTAR_ETIMEDOUT);
        assert_non_null(strstr(mstar_last_error(), "still not fired since a wait for it timed"));
    }
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_int_equal(write(gate[1], "x", 1), 1); /* the producer's work runs */
    assert_mstar_ok(mstar_stream_synchronize(w->p->env.d2h));
    for (int i = 0; i < 3; i++) {
        assert_mstar_ok(read_info(w->c, &rid, &infos[i]));
        collect_landed(w->c);
        check_bytes(w->c, infos[i].uuid, &ts[i]);
        free(ts[i].data);
    }
    close(gate[0]);
    close(gate[1]);
}

/* An all-zero event handle says "written at stage, nothing to wait for": only the producer can
 * say that (its registry), so a descriptor that drops the event of a tensor staged behind
 * unfinished work is refused instead of reading bytes still being written. */
static void test_zero_event_needs_the_producers_word(void **state)
{
    world *w = *state;
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    mstar_rid rid = rid_str("r1");
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 64, 5);
    mstar_output o = output_of("sig", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_increment_ref(w->p, info.uuid, 1));
    assert_mstar_ok(mstar_launch(w->p->env.d2h, cuda_ipc_hold_stream, &gate[0], sizeof(int)));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, &rid, &info, 1));
    mstar_edge e = edge_of("sig", "node", &info, 1);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, &e, 1));
    info = e.tensor_info[0];
    mstar_edge_clear(&e);
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    assert_memory_not_equal(info.cuda_ipc.event_handle, none, sizeof(none));
    mstar_tensor_info forged = info;
    memset(forged.cuda_ipc.event_handle, 0, sizeof(forged.cuda_ipc.event_handle));
    assert_mstar_status(read_info(w->c, &rid, &forged), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "no event, where the producer recorded one"));
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_int_equal(write(gate[1], "x", 1), 1);
    assert_mstar_ok(read_info(w->c, &rid, &info));
    collect_landed(w->c);
    check_bytes(w->c, info.uuid, &t);
    assert_mstar_ok(mstar_stream_synchronize(w->p->env.d2h));
    close(gate[0]);
    close(gate[1]);
    free(t.data);
}

/* ---- fault 11: a late reader gets an error, never another tensor's bytes ------------------ */

/* Free `rid`'s tensors on the producer (force cleanup) and store another of the same size in
 * their place: the caching allocator hands the freed block out again. */
static mstar_tensor_info reuse_block(world *w, const mstar_rid *rid, const mstar_tensor_info *old,
                                     mstar_tensor *t2)
{
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, rid));
    mstar_rid rid2 = rid_str("r2");
    mstar_tensor_info info = produce_one(w->p, &rid2, 64, 9, t2);
    assert_memory_equal(info.cuda_ipc.mem_handle, old->cuda_ipc.mem_handle, MSTAR_IPC_HANDLE_BYTES);
    assert_int_equal(info.cuda_ipc.segment_offset, old->cuda_ipc.segment_offset);
    return info;
}

/* A read of a descriptor whose tensor was freed by a force cleanup, its block holding another
 * tensor now, fails with MSTAR_ENOENT (the arena's answer, I-26) instead of delivering the new
 * tensor's bytes; the new tensor still reads. */
static void test_late_reader_after_force_cleanup(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1"), rid2 = rid_str("r2");
    mstar_tensor t, t2;
    mstar_tensor_info old = produce_one(w->p, &rid, 64, 1, &t);
    mstar_tensor_info now = reuse_block(w, &rid, &old, &t2);
    assert_mstar_status(read_info(w->c, &rid, &old), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "released it"));
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_mstar_ok(read_info(w->c, &rid2, &now));
    collect_ready(w->c, 1);
    check_bytes(w->c, now.uuid, &t2);
    free(t.data);
    free(t2.data);
}

/* A block freed and reused while the copy of a read runs: the read passed its first check, but
 * once its copy has landed the stamp says the block changed hands, so the read fails
 * (MSTAR_ENOENT) instead of delivering what it copied. */
static void test_block_reused_during_the_copy(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("r1");
    mstar_tensor t, t2;
    mstar_tensor_info old = produce_one(w->p, &rid, 64, 1, &t);
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    assert_mstar_ok(mstar_launch(w->c->env.h2d, cuda_ipc_hold_stream, &gate[0], sizeof(int)));
    assert_mstar_ok(read_info(w->c, &rid, &old)); /* checked; its copy waits for the gate */
    assert_int_equal(mstar__transport_cuda_ipc_watching(w->c->transport), 1);
    mstar_tensor_info now = reuse_block(w, &rid, &old, &t2);
    assert_int_equal(write(gate[1], "x", 1), 1);
    mstar_ready_set set;
    int failed = 0;
    for (int tries = 0; failed == 0 && tries < 2000; tries++) {
        assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
        assert_int_equal(set.nedges, 0);
        for (uint32_t i = 0; i < set.nfailed; i++) {
            assert_int_equal(set.failed[i].status, MSTAR_ENOENT);
            assert_non_null(strstr(set.failed[i].message, "while it was copied"));
        }
        failed += (int)set.nfailed;
        mstar_ready_set_clear(&set);
        struct pollfd pfd = { mstar_comm_event_fd(w->c), POLLIN, 0 };
        if (failed == 0 && poll(&pfd, 1, 10) == 1)
            mstar_comm_event_drain(w->c);
    }
    assert_int_equal(failed, 1);
    (void)now;
    close(gate[0]);
    close(gate[1]);
    free(t.data);
    free(t2.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handle_bound_to_its_exporter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_names_do_not_grow_caches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caches_are_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_and_planted_registries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_event_needs_the_producers_word, setup_async,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stuck_event_stalls_once, setup_async, teardown),
        cmocka_unit_test_setup_teardown(test_late_reader_after_force_cleanup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_reused_during_the_copy, setup_async, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
