/*
 * test_step_runner.c — resources and the step runner: dependency order and the pre-plan rule,
 * admit results, pre-plan on the plan stream (G-5) after the slot's last replay (G-4), clearing
 * one slot's pre-plan only (G-6), blocked capture resources, padding-row handles, and signals.
 */
#include "mstar_test.h"

#include "device/backend.h"
#include "step/step_runner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct res {
    const char *name;
    char *log; /* appended to by each phase */
    mstar_stream *stream_seen;
    bool pending[2];
    bool capturable;
    int64_t short_at; /* admit fails for this request */
};

static void note(struct res *r, const char *what)
{
    strcat(r->log, r->name);
    strcat(r->log, what);
    strcat(r->log, " ");
}

static mstar_status r_admit(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    struct res *r = self;
    note(r, ".admit");
    size_t n;
    const mstar_step_segment *seg = mstar_step_segments(step, &n);
    for (size_t i = 0; i < n; i++) {
        if (seg[i].request == r->short_at) {
            out->ok = false;
            out->request = seg[i].request;
            out->pages_short = 3;
            strcpy(out->reason, "no pages");
        }
    }
    return MSTAR_OK;
}

static mstar_status r_plan(void *self, mstar_step *step)
{
    struct res *r = self;
    note(r, ".plan");
    r->stream_seen = mstar_step_context(step)->stream;
    return mstar_step_set_plan_result(step, r->name, r);
}

static mstar_status r_pre_admit(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    note(self, ".pre_admit");
    return MSTAR_OK;
}

static mstar_status r_pre_plan(void *self, mstar_step *step)
{
    struct res *r = self;
    note(r, ".pre_plan");
    r->stream_seen = mstar_step_context(step)->stream;
    r->pending[mstar_step_context(step)->lease.slot] = true;
    return MSTAR_OK;
}

static void r_clear(void *self, int32_t slot)
{
    struct res *r = self;
    for (int i = 0; i < 2; i++) {
        if (slot < 0 || slot == i)
            r->pending[i] = false;
    }
}

static bool r_can_capture(void *self, const mstar_step *step)
{
    return ((struct res *)self)->capturable;
}

static const mstar_resource_ops preplan_ops = {
    .supports_preplan = true,
    .can_capture = r_can_capture,
    .admit = r_admit,
    .plan = r_plan,
    .pre_admit = r_pre_admit,
    .pre_plan = r_pre_plan,
    .clear_preplan = r_clear,
};

static const mstar_resource_ops plain_ops = {
    .admit = r_admit,
    .plan = r_plan,
};

struct fx {
    mstar_backend *b;
    mstar_stream *s;
    mstar_step_runner *sr;
    char log[512];
    struct res kv, attn, pos;
};

static int setup(void **state)
{
    static struct fx f;
    memset(&f, 0, sizeof(f));
    assert_int_equal(mstar_test_host_open(&f.b, &f.s), 0);
    assert_mstar_ok(mstar_step_runner_create(f.b, f.s, &f.sr));
    f.kv = (struct res){ "kv", f.log, NULL, { false, false }, true, -99 };
    f.attn = (struct res){ "attn", f.log, NULL, { false, false }, true, -99 };
    f.pos = (struct res){ "pos", f.log, NULL, { false, false }, true, -99 };
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    mstar_step_runner_destroy(f->sr);
    mstar_test_host_close(f->b, f->s);
    return 0;
}

static void test_dependencies_and_preplan_rule(void **state)
{
    struct fx *f = *state;
    const char *deps[] = { "kv" };
    assert_mstar_status(
        mstar_step_runner_add_resource(f->sr, "attn", &preplan_ops, &f->attn, deps, 1),
        MSTAR_EINVAL); /* kv not registered yet */
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "pos", &plain_ops, &f->pos, NULL, 0));
    const char *pos_dep[] = { "pos" };
    assert_mstar_status(
        mstar_step_runner_add_resource(f->sr, "attn", &preplan_ops, &f->attn, pos_dep, 1),
        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "plan of the step still in flight"));
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "kv", &preplan_ops, &f->kv, NULL, 0));
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "attn", &preplan_ops, &f->attn, deps, 1));
    assert_mstar_status(mstar_step_runner_add_resource(f->sr, "kv", &preplan_ops, &f->kv, NULL, 0),
                        MSTAR_EEXIST);
    assert_true(mstar_step_runner_supports_preplan(f->sr));
    int32_t slots;
    unsetenv("MSTAR_NUM_SLOTS");
    assert_mstar_ok(mstar_step_runner_default_num_slots(f->sr, &slots));
    assert_int_equal(slots, 2);
    setenv("MSTAR_NUM_SLOTS", "1", 1);
    assert_mstar_ok(mstar_step_runner_default_num_slots(f->sr, &slots));
    assert_int_equal(slots, 1);
    setenv("MSTAR_NUM_SLOTS", "zero", 1);
    assert_mstar_status(mstar_step_runner_default_num_slots(f->sr, &slots), MSTAR_EINVAL);
    unsetenv("MSTAR_NUM_SLOTS");

    /* The cycle runs only the step's resources, in registration order. */
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    assert_mstar_ok(mstar_step_add_segment(step, 7, 0, 3));
    assert_mstar_status(mstar_step_add_segment(step, 7, 0, -1), MSTAR_EINVAL);
    char p = 0;
    assert_mstar_ok(mstar_step_set_resource(step, "attn", &p, 1));
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &p, 1));
    mstar_step_admit_result ar;
    assert_mstar_ok(mstar_step_runner_admit(f->sr, step, &ar));
    assert_true(ar.ok);
    assert_mstar_ok(mstar_step_runner_plan(f->sr, step));
    assert_string_equal(f->log, "kv.admit attn.admit kv.plan attn.plan ");
    assert_ptr_equal(mstar_step_plan_result(step, "kv"), &f->kv);
    assert_ptr_equal(f->kv.stream_seen, f->s);
    f->attn.short_at = 7;
    assert_mstar_ok(mstar_step_runner_admit(f->sr, step, &ar));
    assert_false(ar.ok);
    assert_int_equal(ar.pages_short, 3);
    assert_string_equal(ar.reason, "no pages");
    mstar_step_destroy(step);
}

/* G-4, G-5, G-6 */
static void test_preplan_stream_slot_wait_and_clear(void **state)
{
    struct fx *f = *state;
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "kv", &preplan_ops, &f->kv, NULL, 0));
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "pos", &plain_ops, &f->pos, NULL, 0));
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    char p = 0;
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &p, 1));
    assert_mstar_ok(mstar_step_set_resource(step, "pos", &p, 1));
    mstar_step_admit_result ar;
    assert_mstar_status(mstar_step_runner_pre_admit(f->sr, step, &ar), MSTAR_ESTATE); /* no lease */
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->has_lease = true;
    ctx->lease.slot = 1;
    mstar_event *done;
    assert_mstar_ok(mstar_event_create(f->b, &done));
    mstar_stream *plan = mstar_step_runner_plan_stream(f->sr);
    assert_ptr_not_equal(plan, f->s);
    /* No replay used slot 1 yet: nothing to wait for. */
    assert_mstar_ok(mstar_step_runner_pre_admit(f->sr, step, &ar));
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_ptr_equal(f->kv.stream_seen, plan); /* G-5: on the plan stream */
    assert_true(ctx->is_preplan);
    assert_null(strstr(f->log, "pos")); /* only pre-planning resources */
    assert_int_equal(plan->waits, 0);
    /* A graph of slot 1 records the slot's event at its end; capturing it is no replay yet. */
    mstar_event *replayed;
    assert_mstar_status(mstar__step_runner_replay_event(f->sr, -1, &replayed), MSTAR_EINVAL);
    assert_mstar_status(mstar__step_runner_replay_event(f->sr, MSTAR__MAX_SLOTS, &replayed),
                        MSTAR_EINVAL);
    assert_mstar_ok(mstar__step_runner_replay_event(f->sr, 1, &replayed));
    assert_mstar_status(mstar__event_record_in_capture(replayed, f->s), MSTAR_ESTATE);
    mstar_graph *g;
    assert_mstar_ok(mstar_stream_begin_capture(f->s));
    assert_mstar_ok(mstar__event_record_in_capture(replayed, f->s));
    assert_mstar_ok(mstar_stream_end_capture(f->s, &g));
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_int_equal(plan->waits, 0);
    /* Launched on slot 1: the next pre-plan of slot 1 waits for it (G-4), of slot 0 does not. */
    assert_mstar_ok(mstar_graph_launch(g, f->s));
    mstar__step_runner_replay_launched(f->sr, 1);
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_int_equal(plan->waits, 1);
    assert_ptr_equal(plan->last_waited, replayed);
    mstar__step_runner_replay_launched(f->sr, 0); /* no graph of slot 0 records an event */
    ctx->lease.slot = 0;
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_int_equal(plan->waits, 1);
    /* G-6: clearing slot 0 leaves slot 1's pending plan alone */
    assert_true(f->kv.pending[0] && f->kv.pending[1]);
    mstar_step_runner_clear_preplan(f->sr, 0);
    assert_false(f->kv.pending[0]);
    assert_true(f->kv.pending[1]);
    mstar_step_runner_clear_preplan(f->sr, -1);
    assert_false(f->kv.pending[1]);
    /* blocked capture resources */
    const char *keys[4];
    assert_int_equal(mstar_blocked_capture_resources(f->sr, step, keys, 4), 0);
    f->kv.capturable = false;
    assert_int_equal(mstar_blocked_capture_resources(f->sr, step, keys, 4), 1);
    assert_string_equal(keys[0], "kv");
    mstar_graph_destroy(g);
    mstar_event_destroy(done);
    mstar_step_destroy(step);
}

/* ---- G-4 with real streams: a slow replay and a pre-plan of its slot ----------------------------
 */

/* What the replay and the plan write: the replay's own count of finished replays, and what the
 * plan saw of it when it ran. */
struct ordering {
    atomic_int replays_done;
    int seen_by_plan[4];
    int plans;
};

/* The replay's work: slow, then done. */
static void slow_replay(void *p)
{
    struct ordering *o = *(struct ordering **)p;
    struct timespec ts = { 0, 30 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    atomic_fetch_add(&o->replays_done, 1);
}

/* The plan's work, on the plan stream: it writes the slot's buffers, which the replay reads. */
static void plan_writes(void *p)
{
    struct ordering *o = *(struct ordering **)p;
    o->seen_by_plan[o->plans++] = atomic_load(&o->replays_done);
}

static mstar_status r_pre_admit_nothing(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    return MSTAR_OK;
}

static mstar_status ord_pre_plan(void *self, mstar_step *step)
{
    struct ordering *o = self;
    return mstar_launch(mstar_step_context(step)->stream, plan_writes, &o, sizeof(o));
}

static const mstar_resource_ops ordering_ops = {
    .supports_preplan = true,
    .pre_admit = r_pre_admit_nothing,
    .pre_plan = ord_pre_plan,
};

/* On the host backend with asynchronous streams (each runs on a thread of its own, events are
 * real): replays of slot 1 that take 30 ms each are launched on the compute stream, and right
 * after each launch a pre-plan of slot 1 runs on the plan stream. The plan must see every
 * replay before it finished (G-4: the plan stream waits for the slot's last replay); without
 * that wait it runs at once, long before the replay's work is done. The compute stream is not
 * waited for by the host in between, so nothing else orders the two. */
static void test_preplan_waits_for_a_slow_replay(void **state)
{
    (void)state;
    mstar_backend *b;
    mstar_stream *s;
    mstar_step_runner *sr;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__host_backend_set_async(b, true);
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s));
    assert_mstar_ok(mstar_step_runner_create(b, s, &sr));
    static struct ordering o;
    memset(&o, 0, sizeof(o));
    assert_mstar_ok(mstar_step_runner_add_resource(sr, "ord", &ordering_ops, &o, NULL, 0));

    /* The slot's graph: the slow work, then the slot's replay event (as capture_run does). */
    mstar_event *replayed;
    assert_mstar_ok(mstar__step_runner_replay_event(sr, 1, &replayed));
    mstar_graph *g;
    struct ordering *op = &o;
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar_launch(s, slow_replay, &op, sizeof(op)));
    assert_mstar_ok(mstar__event_record_in_capture(replayed, s));
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    assert_int_equal(atomic_load(&o.replays_done), 0); /* captured, not run */

    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    char p = 0;
    assert_mstar_ok(mstar_step_set_resource(step, "ord", &p, 1));
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->has_lease = true;
    ctx->lease.slot = 1;
    mstar_event *done;
    assert_mstar_ok(mstar_event_create(b, &done));
    for (int k = 0; k < 3; k++) {
        assert_mstar_ok(mstar_graph_launch(g, s));
        mstar__step_runner_replay_launched(sr, 1);
        assert_mstar_ok(mstar_step_runner_pre_plan(sr, step, done));
    }
    assert_mstar_ok(mstar_event_synchronize(done));
    assert_mstar_ok(mstar_event_query(done));
    assert_int_equal(o.plans, 3);
    for (int k = 0; k < 3; k++)
        assert_int_equal(o.seen_by_plan[k], k + 1);
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(atomic_load(&o.replays_done), 3);
    mstar_event_destroy(done);
    mstar_step_destroy(step);
    mstar_graph_destroy(g);
    mstar_step_runner_destroy(sr);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

/* The asynchronous host streams themselves: work runs in order on the stream's thread and is
 * there after a synchronisation; a record completes when its stream reaches it, and a stream
 * that waits for it runs nothing after the wait before then. */
static void test_host_async_streams_and_events(void **state)
{
    (void)state;
    mstar_backend *b;
    mstar_stream *a, *c;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__host_backend_set_async(b, true);
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &a));
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &c));
    static struct ordering o;
    memset(&o, 0, sizeof(o));
    struct ordering *op = &o;
    mstar_event *e;
    assert_mstar_ok(mstar_event_create(b, &e));
    assert_mstar_ok(mstar_event_query(e)); /* nothing recorded: complete */
    for (int k = 0; k < 2; k++)
        assert_mstar_ok(mstar_launch(a, slow_replay, &op, sizeof(op)));
    assert_mstar_ok(mstar_event_record(e, a));
    assert_mstar_ok(mstar_stream_wait_event(c, e));
    assert_mstar_ok(mstar_launch(c, plan_writes, &op, sizeof(op)));
    assert_mstar_ok(mstar_stream_synchronize(c));
    assert_int_equal(o.plans, 1);
    assert_int_equal(o.seen_by_plan[0], 2); /* after both of a's, which ran in order */
    assert_mstar_ok(mstar_event_query(e));
    /* A copy is there after the stream is synchronised. */
    static int src[256], dst[256];
    for (int i = 0; i < 256; i++)
        src[i] = i * 3;
    assert_mstar_ok(mstar_memcpy_async(a, dst, src, sizeof(src), MSTAR_MEMCPY_H2H));
    assert_mstar_ok(mstar_stream_synchronize(a));
    assert_memory_equal(dst, src, sizeof(src));
    mstar_event_destroy(e);
    mstar_stream_destroy(c);
    mstar_stream_destroy(a);
    mstar_backend_destroy(b);
}

static void test_dummy_rid_registry(void **state)
{
    int64_t a, b, a2;
    assert_mstar_ok(mstar_dummy_rid_handle("__cg_test_a__", &a));
    assert_mstar_ok(mstar_dummy_rid_handle("__cg_test_b__", &b));
    assert_mstar_ok(mstar_dummy_rid_handle("__cg_test_a__", &a2));
    assert_true(a < 0 && b < 0);
    assert_int_equal(a, a2);
    assert_int_equal(b, a - 1);
    assert_string_equal(mstar_dummy_rid_name(b), "__cg_test_b__");
    assert_null(mstar_dummy_rid_name(5));
    assert_null(mstar_dummy_rid_name(-100000));
    assert_mstar_status(mstar_dummy_rid_handle("", &a), MSTAR_EINVAL);
    mstar_forward_info info = mstar_dummy_metadata("decode");
    assert_string_equal(info.graph_walk, "decode");
    assert_false(info.requires_cfg);
    assert_int_equal(info.max_tokens, 1);
}

static int ingests;
static mstar_status count_ingest(void *self, int64_t rid)
{
    ingests++;
    return MSTAR_OK;
}

static void test_dummy_rows_pool(void **state)
{
    struct fx *f = *state;
    static const mstar_resource_ops ops = { .ingest_request = count_ingest };
    assert_mstar_ok(mstar_step_runner_add_resource(f->sr, "kv", &ops, NULL, NULL, 0));
    mstar_dummy_rows *rows, *other;
    assert_mstar_ok(mstar_dummy_rows_create("node", f->sr, &rows));
    assert_mstar_ok(mstar_dummy_rows_create("node2", f->sr, &other));
    const int64_t *h8, *h2, *o2;
    ingests = 0;
    assert_mstar_ok(mstar_dummy_rows_ensure(rows, "0_slot0", 8, &h8));
    assert_int_equal(ingests, 8);
    assert_mstar_ok(mstar_dummy_rows_ensure(rows, "0_slot0", 2, &h2)); /* a prefix, no re-ingest */
    assert_int_equal(ingests, 8);
    assert_int_equal(h2[1], h8[1]);
    assert_mstar_ok(mstar_dummy_rows_handles(other, "0_slot0", 2, &o2));
    assert_int_equal(ingests, 8);
    assert_true(o2[0] != h8[0] && o2[1] != h8[1]); /* never collide across pools */
    assert_string_equal(mstar_dummy_rid_name(h8[3]), "__cg_node_0_slot0_3__");
    assert_mstar_ok(mstar_dummy_rows_reset(rows, h8, 8, false));
    assert_mstar_ok(mstar_dummy_rows_release_all(rows));
    mstar_dummy_rows_destroy(rows);
    mstar_dummy_rows_destroy(other);
}

static void *setter(void *p)
{
    mstar_signal_set(p);
    return NULL;
}

static void test_signals(void **state)
{
    mstar_signal *s;
    assert_mstar_ok(mstar_signal_create(&s));
    assert_false(mstar_signal_is_set(s));
    assert_mstar_status(mstar_signal_wait(s, 10), MSTAR_ETIMEDOUT);
    pthread_t t;
    pthread_create(&t, NULL, setter, s);
    assert_mstar_ok(mstar_signal_wait(s, -1));
    pthread_join(t, NULL);
    mstar_signal_reset(s);
    assert_false(mstar_signal_is_set(s));
    mstar_signal_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dependencies_and_preplan_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preplan_stream_slot_wait_and_clear, setup, teardown),
        cmocka_unit_test(test_preplan_waits_for_a_slow_replay),
        cmocka_unit_test(test_host_async_streams_and_events),
        cmocka_unit_test(test_dummy_rid_registry),
        cmocka_unit_test_setup_teardown(test_dummy_rows_pool, setup, teardown),
        cmocka_unit_test(test_signals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
