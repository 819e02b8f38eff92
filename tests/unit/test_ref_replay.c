/*
 * test_ref_replay.c — the reference model through the graph runner on the host backend, against
 * an identical twin run by the plain eager driver:
 *   - replayed outputs equal eager outputs exactly (fp32) at every batch size 1..64, padded ones
 *     included, and padding rows never touch a live request's KV pages (every page compared
 *     before and after each step; every stream compared with the twin's);
 *   - design.md G-7: free pages unchanged after a dropped speculation (pre-plan), and a
 *     kept pre-plan is promoted and replays right;
 *   - G-9: a packed bucket with fewer real tokens than it captured, next to a resident request:
 *     that request's KV is unchanged, the padded tail scatters into the sink page;
 *   - G-13 (and G-8): padding never allocates — not at capture, not at replay;
 *   - G-19: outputs held across steps must be copies: the static outputs are overwritten;
 *   - zero-copy staging: a replay's tokens are built in the static input, the launch copies
 *     nothing.
 * The batch sizes go up to MSTAR_TEST_REPLAY_MAX_BS (default 64).
 */
#include "mstar_test.h"

#include "ref_twin.h"

#include "device/backend.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_BS = 64, VOCAB = 64 };

static const mstar_kv_cache_config kv_cfg = {
    .num_pages = 400, .page_size = 16, .num_labels = 1, .max_seq_len = 256
};

static const int64_t packed_bs[] = { 2 }, packed_tokens[] = { 16 };

static ref_twin T;
static int32_t max_bs;

static int setup(void **state)
{
    (void)state;
    int64_t knob;
    if (mstar_env_get_int("MSTAR_TEST_REPLAY_MAX_BS", MAX_BS, 1, MAX_BS, &knob) != MSTAR_OK)
        return -1;
    max_bs = (int32_t)knob;
    /* Smaller than ref_model_config_small: this test runs ~5000 token forwards, under ASan too. */
    ref_model_config cfg = ref_model_config_small();
    cfg.vocab = VOCAB;
    cfg.hidden = 32;
    cfg.head_dim = 16;
    cfg.mlp = 64;
    ref_capture_config captures[] = {
        { .walk = "decode" }, /* the runner's default sizes 1, 2, 4, ..., 64 */
        { .walk = "prefill",
          .packed = true,
          .batch_sizes = packed_bs,
          .n_batch_sizes = 1,
          .token_lengths = packed_tokens,
          .n_token_lengths = 1 },
    };
    mstar_backend *b;
    if (mstar_backend_create(mstar_device_cpu(), &b) != MSTAR_OK)
        return -1;
    if (ref_twin_create(&T, b, &cfg, &kv_cfg, captures, 2, 0.0) != MSTAR_OK) {
        print_error("twin: %s\n", mstar_last_error());
        mstar_backend_destroy(b);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ref_twin_destroy(&T);
    mstar_backend_destroy(T.backend);
    return 0;
}

/* The Must-show: every batch size 1..64 replayed on the tightest bucket (padded with zero-length
 * rows when bs is not a captured size) gives the eager twin's logits and tokens bit for bit; the
 * KV streams match the twin's; between the snapshots before and after each step, no page slot
 * changed that a real row of the step does not own; and padding took no page. */
static void test_replay_equals_eager_every_batch_size(void **state)
{
    (void)state;
    int padded;
    double worst = ref_twin_replay_every_batch_size(&T, 1000, max_bs, &padded);
    assert_true(worst == 0.0);
    if (max_bs == MAX_BS)
        assert_int_equal(padded, MAX_BS - 7); /* all but 1, 2, 4, ..., 64 were padded */
}

/* Decode steps of row 0 alone until its next token starts a new page. */
static void walk_to_page_boundary(const int64_t *req, int32_t *cur)
{
    int32_t one = 1, ne;
    for (;;) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(mstar_kv_cache_stream(ref_node_kv(T.node), req[0], 0, &len, &pages, &np));
        if (len % kv_cfg.page_size == 0)
            return;
        ref_step_request r = ref_twin_request("decode", req, &one, 1, cur, true);
        assert_mstar_ok(ref_node_step(T.node, &r, NULL, NULL, NULL));
        assert_mstar_ok(ref_eager_step(T.eager, req, &one, 1, cur, NULL, &ne));
        cur[0] = ne;
    }
}

/* G-7: a pre-plan admits the pages its rows need; dropping the speculation hands exactly those
 * back. A pre-plan that is kept is promoted by the step's own plan, and the replay it feeds
 * matches the twin. */
static void test_dropped_speculation_keeps_free_pages(void **state)
{
    (void)state;
    enum { N = 5 };
    int32_t cur[N], ones[N] = { 1, 1, 1, 1, 1 }, ne[N], ng[N];
    int64_t reqs[N];
    for (int32_t i = 0; i < N; i++)
        reqs[i] = 2000 + i;
    ref_twin_open_and_prefill(&T, 2000, N, cur);
    walk_to_page_boundary(reqs, cur);
    mstar_event *plan_done;
    assert_mstar_ok(mstar_event_create(T.backend, &plan_done));

    ref_step_request r = ref_twin_request("decode", reqs, ones, 1, cur, true);
    int32_t slot, free_before = mstar_kv_cache_free_pages(ref_node_kv(T.node));
    assert_mstar_ok(ref_node_preplan(T.node, &r, plan_done, &slot));
    assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(T.node)), free_before - 1);
    assert_mstar_ok(ref_node_drop_preplan(T.node, &r, slot)); /* the speculation is dropped */
    assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(T.node)), free_before);

    /* Kept: all five rows on the padded 8-row bucket, then the step on the reserved slot. */
    r = ref_twin_request("decode", reqs, ones, N, cur, true);
    assert_mstar_ok(ref_node_preplan(T.node, &r, plan_done, &slot));
    r.slot = slot;
    r.plan_done = plan_done;
    float lg[N * VOCAB], le[N * VOCAB];
    ref_step_timing timing;
    assert_mstar_ok(ref_node_step(T.node, &r, lg, ng, &timing));
    assert_true(timing.replayed);
    assert_int_equal(timing.slot, slot);
    assert_int_equal(timing.bucket_rows, 8);
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, cur, le, ne));
    assert_memory_equal(lg, le, sizeof(lg));
    assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(T.node)),
                     mstar_kv_cache_free_pages(ref_eager_kv(T.eager)));
    mstar_event_destroy(plan_done);
    ref_twin_close(&T, 2000, N);
}

static void open_both(const int64_t *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        assert_mstar_ok(ref_node_open(T.node, reqs[i]));
        assert_mstar_ok(ref_eager_open(T.eager, reqs[i]));
    }
}

static void close_both(const int64_t *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        ref_node_close(T.node, reqs[i]);
        assert_mstar_ok(ref_eager_close(T.eager, reqs[i]));
    }
}

/* One packed prefill step of two rows through the runner and the twin; logits must agree. */
static void packed_step(const int64_t *reqs, const int32_t *spans, const int32_t *tokens)
{
    ref_step_request r = ref_twin_request("prefill", reqs, spans, 2, tokens, true);
    float lg[2 * VOCAB], le[2 * VOCAB];
    int32_t ng[2], ne[2];
    ref_step_timing timing;
    assert_mstar_ok(ref_node_step(T.node, &r, lg, ng, &timing));
    assert_true(timing.replayed); /* on the (2 rows, 16 tokens) packed bucket */
    assert_mstar_ok(ref_eager_step(T.eager, reqs, spans, 2, tokens, le, ne));
    assert_memory_equal(lg, le, sizeof(lg));
}

/* G-9: a packed step of 16 real tokens leaves real-looking ids in the static token buffer; then
 * two prompts of 5 and 4 tokens on the same (2 rows, 16 tokens) bucket, beside a resident
 * request: the resident request's KV is byte for byte what it was, only the new rows' slots
 * changed outside the sink, and every stream matches the twin's. */
static void test_packed_tail_scatters_into_sink(void **state)
{
    (void)state;
    int32_t cur[1];
    ref_twin_open_and_prefill(&T, 3000, 1, cur); /* the resident request */
    int64_t first[2] = { 3001, 3002 }, reqs[2] = { 3003, 3004 };
    int32_t full[2] = { 8, 8 }, spans[2] = { 5, 4 }, tokens[16];
    for (int i = 0; i < 16; i++)
        tokens[i] = (i * 5 + 1) % VOCAB;
    open_both(first, 2);
    open_both(reqs, 2);
    packed_step(first, full, tokens);
    int32_t resident_len, np;
    const int32_t *resident_pages;
    assert_mstar_ok(
        mstar_kv_cache_stream(ref_node_kv(T.node), 3000, 0, &resident_len, &resident_pages, &np));
    size_t all = ref_twin_pools_bytes(&T);
    char *before = malloc(all), *after = malloc(all), *twin_pools = malloc(all);
    ref_twin_read_pools(&T, true, before);
    packed_step(reqs, spans, tokens + 7);
    ref_twin_read_pools(&T, true, after);
    size_t page = ref_model_page_bytes(ref_node_model(T.node));
    size_t pool = (size_t)kv_cfg.num_pages * page;
    for (int32_t i = 0; i < T.cfg.layers * 2; i++) {
        for (int32_t p = 0; p < np; p++) {
            size_t at = (size_t)i * pool + (size_t)resident_pages[p] * page;
            assert_memory_equal(before + at, after + at, page);
        }
    }
    ref_twin_assert_only_real_rows_written(&T, before, after, reqs, 2);
    int64_t everyone[5] = { 3000, 3001, 3002, 3003, 3004 };
    ref_twin_assert_streams_match(&T, after, twin_pools, everyone, 5);
    free(before);
    free(after);
    free(twin_pools);
    ref_twin_close(&T, 3000, 1);
    close_both(first, 2);
    close_both(reqs, 2);
}

/* G-13 and G-8: captures ran on padding rows only and left no page held; a padded replay takes
 * exactly the pages its real rows need. */
static void test_padding_never_allocates(void **state)
{
    (void)state;
    assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(T.node)), kv_cfg.num_pages - 1);
    int32_t cur[3], ones[3] = { 1, 1, 1 };
    int64_t reqs[3] = { 4000, 4001, 4002 };
    ref_twin_open_and_prefill(&T, 4000, 3, cur);
    ref_step_request r = ref_twin_request("decode", reqs, ones, 3, cur, true);
    ref_step_timing timing;
    assert_mstar_ok(ref_node_step(T.node, &r, NULL, NULL, &timing));
    assert_int_equal(timing.bucket_rows, 4); /* one padding row */
    int32_t need = 0;
    for (int i = 0; i < 3; i++) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(mstar_kv_cache_stream(ref_node_kv(T.node), reqs[i], 0, &len, &pages, &np));
        need += (len + kv_cfg.page_size - 1) / kv_cfg.page_size;
    }
    assert_int_equal(kv_cfg.num_pages - 1 - mstar_kv_cache_free_pages(ref_node_kv(T.node)), need);
    ref_twin_close(&T, 4000, 3);
    assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(T.node)), kv_cfg.num_pages - 1);
}

/* The static output "next_tokens" of (bucket, slot), as run_forward hands it out: a view. */
static const int32_t *next_view(int32_t n, int32_t slot)
{
    mstar_slot_lease lease;
    assert_true(
        mstar_graph_runner_lease_slot(ref_node_runner(T.node), "decode", n, slot, n, NULL, &lease));
    const mstar_graph_slot *s = mstar_graph_runner_slot_for(ref_node_runner(T.node), &lease);
    assert_non_null(s);
    const mstar_tensor *t = mstar_tensor_map_get(mstar_graph_slot_static_outputs(s), "next_tokens");
    assert_non_null(t);
    return mstar_tensor_ptr(t); /* host backend: device memory is host memory */
}

/* G-19: a replay's outputs live in its slot's static buffers, which the slot's next replay
 * overwrites; a caller holding the view across steps reads a later step's tokens (the duplicated
 * token bug). The copy the step hands back still holds its own step's tokens. */
static void test_held_outputs_are_copies(void **state)
{
    (void)state;
    enum { N = 8 };
    int32_t cur[N], ones[N], copy_n[N], ne[N], view_then[N];
    int64_t reqs[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = 5000 + i;
        ones[i] = 1;
    }
    ref_twin_open_and_prefill(&T, 5000, N, cur);
    ref_step_request r = ref_twin_request("decode", reqs, ones, N, cur, true);
    ref_step_timing first, later;
    assert_mstar_ok(ref_node_step(T.node, &r, NULL, copy_n, &first));
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, cur, NULL, ne));
    assert_memory_equal(copy_n, ne, sizeof(ne));
    const int32_t *view = next_view(N, first.slot);
    assert_memory_equal(view, copy_n, sizeof(copy_n));
    /* Two more steps: the second lands on the first one's slot again. */
    int32_t fed[N];
    memcpy(fed, copy_n, sizeof(fed));
    for (int k = 0; k < 2; k++) {
        r = ref_twin_request("decode", reqs, ones, N, fed, true);
        assert_mstar_ok(ref_node_step(T.node, &r, NULL, view_then, &later));
        assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, fed, NULL, ne));
        memcpy(fed, ne, sizeof(fed));
    }
    assert_int_equal(later.slot, first.slot);
    assert_memory_equal(view, view_then, sizeof(view_then)); /* the view shows the later step */
    assert_memory_not_equal(view, copy_n, sizeof(copy_n));   /* the copy kept step N's */
    ref_twin_close(&T, 5000, N);
}

/* The step's phases and bad input: a phase out of order is refused, a bad token fails the step
 * with everything released, and the node steps on normally afterwards. */
static void test_step_phases_and_bad_input(void **state)
{
    (void)state;
    int32_t cur[2], ones[2] = { 1, 1 }, next[2];
    int64_t reqs[2] = { 6000, 6001 };
    ref_twin_open_and_prefill(&T, 6000, 2, cur);
    assert_mstar_status(ref_node_launch(T.node, NULL), MSTAR_ESTATE);
    assert_mstar_status(ref_node_end(T.node, NULL, NULL, NULL), MSTAR_ESTATE);
    ref_step_request r = ref_twin_request("decode", reqs, ones, 2, cur, true);
    assert_mstar_ok(ref_node_begin(T.node, &r, NULL));
    assert_mstar_status(ref_node_begin(T.node, &r, NULL), MSTAR_ESTATE);
    int32_t slot;
    assert_mstar_status(ref_node_preplan(T.node, &r, NULL, &slot), MSTAR_ESTATE);
    assert_mstar_ok(ref_node_end(T.node, NULL, NULL, NULL)); /* never launched: nothing commits */
    int64_t at;
    assert_mstar_ok(mstar_positions_get(ref_node_positions(T.node), reqs[0], &at));
    int32_t bad[2] = { cur[0], VOCAB };
    ref_step_request b = ref_twin_request("decode", reqs, ones, 2, bad, true);
    assert_mstar_status(ref_node_step(T.node, &b, NULL, next, NULL), MSTAR_EINVAL);
    b.walk = NULL;
    assert_mstar_status(ref_node_step(T.node, &b, NULL, next, NULL), MSTAR_EINVAL);
    int64_t after;
    assert_mstar_ok(mstar_positions_get(ref_node_positions(T.node), reqs[0], &after));
    assert_int_equal(after, at);
    int32_t ne[2];
    assert_mstar_ok(ref_node_step(T.node, &r, NULL, next, NULL));
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, 2, cur, NULL, ne));
    assert_memory_equal(next, ne, sizeof(ne));
    ref_twin_close(&T, 6000, 2);
}

/* Zero-copy staging in the node: a replayed step's tokens are uploaded (in preprocess) straight
 * into the slot's static input, so the launch enqueues nothing besides the graph — no staging
 * copy — and the step still gives the eager twin's tokens. */
static void test_replay_stages_in_place(void **state)
{
    (void)state;
    int32_t cur[3], ones[3] = { 1, 1, 1 }, next[3], ne[3];
    int64_t reqs[3] = { 7000, 7001, 7002 };
    ref_twin_open_and_prefill(&T, 7000, 3, cur);
    ref_step_request r = ref_twin_request("decode", reqs, ones, 3, cur, true);
    ref_step_timing t;
    assert_mstar_ok(ref_node_begin(T.node, &r, &t));
    assert_true(t.replayed);
    assert_int_equal(t.bucket_rows, 4); /* padded: the view is narrowed to the 3 real tokens */
    uint64_t before = ref_node_stream(T.node)->enqueued;
    assert_mstar_ok(ref_node_launch(T.node, NULL));
    assert_int_equal(ref_node_stream(T.node)->enqueued, before);
    assert_mstar_ok(ref_node_end(T.node, NULL, next, NULL));
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, 3, cur, NULL, ne));
    assert_memory_equal(next, ne, sizeof(ne));
    ref_twin_close(&T, 7000, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_equals_eager_every_batch_size),
        cmocka_unit_test(test_dropped_speculation_keeps_free_pages),
        cmocka_unit_test(test_packed_tail_scatters_into_sink),
        cmocka_unit_test(test_padding_never_allocates),
        cmocka_unit_test(test_held_outputs_are_copies),
        cmocka_unit_test(test_step_phases_and_bad_input),
        cmocka_unit_test(test_replay_stages_in_place),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
