/*
 * worker_world.c — one demo worker process and the entities around it, for tests that play those
 * entities message by message (see worker_world.h).
 */
#include "worker_world.h"

worker_world *worker_world_open(const worker_world_entity *ents, int n)
{
    assert_true(n > 0 && n <= WORKER_WORLD_LINKS);
    worker_world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    char *argv[] = { "demo", "--config", (char *)cfg, "--requests", "8", NULL };
    assert_int_equal(demo_options_parse(5, argv, &w->opts), 0);
    assert_mstar_ok(demo_dirs_create(&w->dirs, NULL));
    assert_mstar_ok(demo_spawn_worker(&w->opts, 1, &w->dirs, &w->pid));
    for (int i = 0; i < n; i++) {
        demo_link_options lo = { ents[i].name, w->dirs.ipc, ents[i].comm ? w->dirs.shm : NULL,
                                 DEMO_TRANSPORT_ARENA, NULL };
        assert_mstar_ok(demo_link_open(&lo, &w->links[i]));
        w->ents[i] = ents[i];
        w->nlinks++;
    }
    mstar_msg hello = worker_world_expect(w, "conductor", MSTAR_MSG_HELLO, -1);
    assert_int_equal(mstar_msg_get_kv(&hello, "rank", -1), 1);
    mstar_msg_clear(&hello);
    return w;
}

void worker_world_close(worker_world *w)
{
    for (int i = 0; i < w->nseen; i++)
        mstar_msg_clear(&w->seen[i]);
    for (int i = 0; i < w->nlinks; i++)
        demo_link_close(&w->links[i]);
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        waitpid(w->pid, NULL, 0);
    }
    demo_dirs_remove(&w->dirs);
    free(w);
}

demo_link *worker_world_link(worker_world *w, const char *entity)
{
    for (int i = 0; i < w->nlinks; i++)
        if (strcmp(w->ents[i].name, entity) == 0)
            return &w->links[i];
    fail_msg("no link for %s", entity);
    return NULL;
}

/* Receive what is pending at link `i`; whether anything was. */
static bool pump_link(worker_world *w, int i)
{
    bool any = false;
    mstar_msg m;
    while (mstar_mesh_recv(w->links[i].mesh, 0, &m) == MSTAR_OK) {
        any = true;
        if (m.type == MSTAR_MSG_TENSOR_RECEIVED && w->links[i].comm != NULL)
            assert_mstar_ok(mstar_comm_handle_message(w->links[i].comm, &m));
        if (!w->ents[i].keep) {
            mstar_msg_clear(&m);
            continue;
        }
        assert_true(w->nseen < WORKER_WORLD_SEEN);
        w->seen[w->nseen] = m;
        snprintf(w->at[w->nseen], sizeof(w->at[0]), "%s", w->ents[i].name);
        w->nseen++;
    }
    return any;
}

void worker_world_pump(worker_world *w, int timeout_ms)
{
    struct timespec pause = { 0, 2 * 1000 * 1000 };
    for (int waited = 0; waited <= timeout_ms; waited += 2) {
        bool any = false;
        for (int i = 0; i < w->nlinks; i++)
            any |= pump_link(w, i);
        if (any)
            return;
        nanosleep(&pause, NULL);
    }
}

static bool matches(const worker_world *w, int i, const char *entity, mstar_msg_type type,
                    int64_t rid)
{
    const mstar_msg *m = &w->seen[i];
    bool rid_ok = rid < 0 || (!m->request_id.is_str && m->request_id.num == rid) ||
                  (type == MSTAR_MSG_FAIL_REQUESTS && m->nrids > 0 && m->rids[0].num == rid);
    return m->type == type && strcmp(w->at[i], entity) == 0 && rid_ok;
}

mstar_msg worker_world_expect(worker_world *w, const char *entity, mstar_msg_type type, int64_t rid)
{
    for (int round = 0; round < 3000; round++) {
        for (int i = 0; i < w->nseen; i++) {
            if (!matches(w, i, entity, type, rid))
                continue;
            mstar_msg out = w->seen[i];
            size_t rest = (size_t)(w->nseen - i - 1);
            memmove(&w->seen[i], &w->seen[i + 1], rest * sizeof(w->seen[0]));
            memmove(&w->at[i], &w->at[i + 1], rest * sizeof(w->at[0]));
            w->nseen--;
            return out;
        }
        worker_world_pump(w, 10);
    }
    fail_msg("no %s for request %lld at %s", mstar_msg_type_name(type), (long long)rid, entity);
    mstar_msg none; /* not reached: fail_msg ends the test */
    mstar_msg_init(&none, MSTAR_MSG_INVALID);
    return none;
}

bool worker_world_seen(worker_world *w, const char *entity, mstar_msg_type type, int64_t rid)
{
    worker_world_pump(w, 200);
    for (int i = 0; i < w->nseen; i++)
        if (matches(w, i, entity, type, rid))
            return true;
    return false;
}

void worker_world_send(demo_link *from, const char *peer, mstar_msg *m)
{
    assert_mstar_ok(demo_send(from->mesh, peer, m));
    mstar_msg_clear(m);
}

void worker_world_send_input(worker_world *w, int64_t rid, const char *signal,
                             const mstar_tensor *t)
{
    demo_link *enc = worker_world_link(w, "worker_0");
    mstar_rid r = mstar_rid_from_int(rid);
    mstar_edge edge;
    assert_mstar_ok(demo_link_stage_output(enc, &r, signal, "decoder", t, &edge));
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = r;
    assert_mstar_ok(mstar_msg_add_edge(&m, &edge));
    mstar_edge_clear(&edge);
    worker_world_send(enc, "worker_1", &m);
}

void worker_world_drain(worker_world *w, int64_t rid)
{
    demo_link *cond = worker_world_link(w, "conductor");
    mstar_rid r = mstar_rid_from_int(rid);
    assert_mstar_ok(demo_send_simple(cond->mesh, "worker_1", MSTAR_MSG_DRAIN_REQUEST, &r));
    mstar_msg done = worker_world_expect(w, "conductor", MSTAR_MSG_READS_DONE, rid);
    assert_string_equal(done.from, "worker_1");
    mstar_msg_clear(&done);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_REMOVE_REQUEST);
    m.request_id = r;
    m.force = true;
    worker_world_send(cond, "worker_1", &m);
}

mstar_msg worker_world_report(worker_world *w)
{
    demo_link *cond = worker_world_link(w, "conductor");
    assert_mstar_ok(demo_send_simple(cond->mesh, "worker_1", MSTAR_MSG_SHUTDOWN, NULL));
    for (;;) { /* the startup HELLO is gone; the report's first part carries the counters */
        mstar_msg rep = worker_world_expect(w, "conductor", MSTAR_MSG_HELLO, -1);
        if (mstar_msg_get_kv(&rep, "rank", -1) != 1) {
            mstar_msg_clear(&rep);
            continue;
        }
        assert_int_equal(mstar_msg_get_kv(&rep, "report", 0), 1);
        assert_int_equal(mstar_msg_get_kv(&rep, "tensors_held", -1), 0);
        assert_int_equal(mstar_msg_get_kv(&rep, "open_requests", -1), 0);
        return rep;
    }
}

void worker_world_exits(worker_world *w)
{
    /* Not acknowledged yet: the worker keeps running (and sends the report again). */
    int status = 0;
    assert_int_equal(waitpid(w->pid, &status, WNOHANG), 0);
    mstar_msg bye;
    mstar_msg_init(&bye, MSTAR_MSG_SHUTDOWN);
    worker_world_send(worker_world_link(w, "conductor"), "worker_1", &bye);
    for (int i = 0; i < 3000 && waitpid(w->pid, &status, WNOHANG) == 0; i++)
        worker_world_pump(w, 10);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    w->pid = 0;
    /* Everything the worker staged is gone with it. */
    assert_int_equal(demo_dirs_count_shm(&w->dirs, "worker_1"), 0);
}
