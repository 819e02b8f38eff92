/*
 * test_step_runner.c — resources and the step runner: dependency order and the pre-plan rule,
 * admit results, pre-plan on the plan stream (§8.5) after the slot's last replay (§8.4), clearing
 * one slot's pre-plan only (§8.6), blocked capture resources, padding-row handles, and signals.
 */
#include "mstar_test.h"

#include "device/backend.h"
#include "graphs/step_runner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* §8.4, §8.5, §8.6 */
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
    assert_ptr_equal(f->kv.stream_seen, plan); /* §8.5: on the plan stream */
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
    /* Launched on slot 1: the next pre-plan of slot 1 waits for it (§8.4), of slot 0 does not. */
    assert_mstar_ok(mstar_graph_launch(g, f->s));
    mstar__step_runner_replay_launched(f->sr, 1);
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_int_equal(plan->waits, 1);
    assert_ptr_equal(plan->last_waited, replayed);
    mstar__step_runner_replay_launched(f->sr, 0); /* no graph of slot 0 records an event */
    ctx->lease.slot = 0;
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, done));
    assert_int_equal(plan->waits, 1);
    /* §8.6: clearing slot 0 leaves slot 1's pending plan alone */
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
        cmocka_unit_test(test_dummy_rid_registry),
        cmocka_unit_test_setup_teardown(test_dummy_rows_pool, setup, teardown),
        cmocka_unit_test(test_signals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
