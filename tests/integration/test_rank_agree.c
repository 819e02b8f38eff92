/*
 * test_rank_agree.c — agree_across_ranks over the control mesh, one process per rank
 * (design.md "Rank agreement", hard case G-2 at the agreement level).
 *
 *   - 4 ranks agree with min and max, many rounds back to back (ranks race ahead of each other);
 *   - a rank that fails one bucket's capture: every rank drops that bucket;
 *   - a rank that dies: the others get a timeout naming it, not a hang;
 *   - the startup order across 4 ranks whose node has a whole-forward runner and a piecewise
 *     region, where rank 2 fails one bucket's capture: every rank drops that bucket in both and
 *     every lookup agrees; with MSTAR_REQUIRE_CUDA_GRAPHS=1 every rank fails startup, naming it;
 * and, with this process playing rank 1 by hand against a real rank 0:
 *   - a late value of round k is not taken for round k + 1;
 *   - stray, forged and malformed messages are dropped, a wrong value count is an error, a rank
 *     that left is noticed.
 */
#include "mstar_test.h"
#include "mstar_test_toy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_S 120

static mstar_mesh_options mesh_opts;

static void use_fresh_ipc_dir(const char *tag)
{
    memset(&mesh_opts, 0, sizeof(mesh_opts));
    mesh_opts.transport = MSTAR_MESH_IPC;
    mesh_opts.ipc_dir = mstar_test_tmpdir(tag);
}

static mstar_rank_group *join(int rank, int size, int64_t timeout_ms)
{
    mstar_host_group_options opts = { &mesh_opts, timeout_ms };
    mstar_rank_group *g = NULL;
    if (mstar_rank_group_create_host("agree", rank, size, &opts, &g) != MSTAR_OK)
        fprintf(stderr, "rank %d: create: %s\n", rank, mstar_last_error());
    return g;
}

/* fn(rank, arg) on ranks 0..n-1, each in its own process, over a fresh ipc directory named
 * after `tag`: every rank returns 0. */
static void run(const char *tag, int n, mstar_test_rank_fn fn, void *arg)
{
    use_fresh_ipc_dir(tag);
    int codes[8];
    int failed = mstar_test_run_ranks(n, fn, arg, TIMEOUT_S, codes);
    for (int r = 0; r < n; r++) {
        if (codes[r] != 0)
            fprintf(stderr, "rank %d exited with %d\n", r, codes[r]);
    }
    assert_int_equal(failed, 0);
}

/* ---- four ranks ------------------------------------------------------------------------------ */

#define ROUNDS 40

static int four_ranks_min_and_max(int rank, void *arg)
{
    (void)arg;
    mstar_rank_group *g = join(rank, 4, 30000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    MSTAR_RANK_CHECK(rank, mstar_rank_group_rank(g) == rank && mstar_rank_group_size(g) == 4,
                     "ids");
    for (int64_t k = 1; k <= ROUNDS; k++) {
        /* Values that differ per rank and per round, so a value of another round shows. */
        int64_t v[3] = { k * 100 + rank, -k * rank, rank == (int)(k % 4) ? INT64_MIN : k };
        mstar_reduce reduce = k % 2 ? MSTAR_REDUCE_MIN : MSTAR_REDUCE_MAX;
        MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, v, 3, reduce) == MSTAR_OK, "round %lld",
                         (long long)k);
        if (reduce == MSTAR_REDUCE_MIN)
            MSTAR_RANK_CHECK(rank, v[0] == k * 100 && v[1] == -k * 3 && v[2] == INT64_MIN,
                             "round %lld min: %lld %lld %lld", (long long)k, (long long)v[0],
                             (long long)v[1], (long long)v[2]);
        else
            MSTAR_RANK_CHECK(rank, v[0] == k * 100 + 3 && v[1] == 0 && v[2] == k,
                             "round %lld max: %lld %lld %lld", (long long)k, (long long)v[0],
                             (long long)v[1], (long long)v[2]);
    }
    /* An empty agreement is a barrier; it still counts as a round. */
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, NULL, 0, MSTAR_REDUCE_MIN) == MSTAR_OK,
                     "barrier");
    mstar_rank_group_destroy(g);
    return 0;
}

static void test_four_ranks_min_and_max(void **state)
{
    (void)state;
    run("agree4", 4, four_ranks_min_and_max, NULL);
}

/* ---- G-2: a bucket one rank failed is dropped on every rank -------------------------------------
 */

#define NBUCKETS 6

static int failed_bucket_dropped_everywhere(int rank, void *arg)
{
    (void)arg;
    mstar_rank_group *g = join(rank, 4, 30000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    /* Capture success per bucket, in config order: rank 1 failed bucket 4. */
    int64_t captured[NBUCKETS];
    for (int b = 0; b < NBUCKETS; b++)
        captured[b] = !(rank == 1 && b == 4);
    MSTAR_RANK_CHECK(rank,
                     mstar_agree_across_ranks(g, captured, NBUCKETS, MSTAR_REDUCE_MIN) == MSTAR_OK,
                     "agree");
    for (int b = 0; b < NBUCKETS; b++)
        MSTAR_RANK_CHECK(rank, captured[b] == (b != 4), "bucket %d: %lld", b,
                         (long long)captured[b]);
    /* And the `wanted` flag of size_lent_captures, which any one rank raises, with max. */
    int64_t wanted = rank == 3;
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, &wanted, 1, MSTAR_REDUCE_MAX) == MSTAR_OK,
                     "max");
    MSTAR_RANK_CHECK(rank, wanted == 1, "wanted %lld", (long long)wanted);
    mstar_rank_group_destroy(g);
    return 0;
}

static void test_failed_bucket_dropped_everywhere(void **state)
{
    (void)state;
    run("agreedrop", 4, failed_bucket_dropped_everywhere, NULL);
}

/* ---- a dead rank ---------------------------------------------------------------------------- */

static int dead_rank_times_out(int rank, void *arg)
{
    (void)arg;
    if (rank == 2)
        return 0; /* dies before taking part */
    /* The live ranks must hear each other before the timeout however slowly they start (a
     * loaded CI machine, a sanitizer), or the message names them too: 2 s, not a tight bound. */
    mstar_rank_group *g = join(rank, 3, 2000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    int64_t v = rank;
    mstar_status st = mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN);
    MSTAR_RANK_CHECK(rank, st == MSTAR_ETIMEDOUT, "wanted a timeout, got %s",
                     mstar_status_name(st));
    MSTAR_RANK_CHECK(rank, strstr(mstar_last_error(), "no values from rank(s) 2 ") != NULL,
                     "message does not name rank 2: %s", mstar_last_error());
    MSTAR_RANK_CHECK(rank, v == rank, "values were written on failure");
    mstar_rank_group_destroy(g);
    return 0;
}

static void test_dead_rank_times_out(void **state)
{
    (void)state;
    run("agreedead", 3, dead_rank_times_out, NULL);
}

/* ---- the startup order across ranks (design.md "Startup", G-2) ----------------------------------
 */

/* This rank's view of every lookup: the whole-forward bucket bs for each batch size (0: eager)
 * and whether the region replays it. */
static void lookups(mstar_test_toy *t, int64_t *sig)
{
    for (int64_t n = 1; n <= 64; n++) {
        mstar_bucket_key k;
        sig[2 * (n - 1)] =
            mstar_graph_runner_select_bucket(mstar_test_toy_runner(t), "decode", n, n, NULL, &k)
                ? k.bs
                : 0;
        sig[2 * (n - 1) + 1] = mstar_piecewise_runner_can_run(mstar_test_toy_region(t), n, -1);
    }
}

static int startup_across_ranks(int rank, void *arg)
{
    bool required = arg != NULL;
    if (required)
        setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "1", 1);
    mstar_test_toy_options o = { .device = mstar_device_cpu(),
                                 .row_floats = 256,
                                 .scratch_per_row = 4096,
                                 .fail_capture_bs = rank == 2 ? 16 : 0,
                                 .region = true };
    mstar_test_toy *t = NULL;
    MSTAR_RANK_CHECK(rank, mstar_test_toy_create(&o, &t) == MSTAR_OK, "toy");
    mstar_rank_group *g = join(rank, 4, 30000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    mstar_capture_report rep;
    mstar_status st = mstar_test_toy_capture_startup(t, g, &rep);
    if (required) {
        MSTAR_RANK_CHECK(rank, st == MSTAR_ESTATE, "startup: %s", mstar_status_name(st));
        MSTAR_RANK_CHECK(rank,
                         strstr(mstar_last_error(), "decode[bs=16,tokens=16]") != NULL &&
                             strstr(mstar_last_error(), "__piecewise__[bs=16,tokens=16,key=mlp]"),
                         "the message names neither dropped bucket");
    } else {
        MSTAR_RANK_CHECK(rank, st == MSTAR_OK, "startup");
        MSTAR_RANK_CHECK(rank, rep.planned == 14 && rep.captured == 12, "planned %zu, captured %zu",
                         rep.planned, rep.captured);
        mstar_bucket_key k;
        MSTAR_RANK_CHECK(rank,
                         mstar_graph_runner_select_bucket(mstar_test_toy_runner(t), "decode", 16,
                                                          16, NULL, &k) &&
                             k.bs == 32,
                         "bs 16 should fall through to 32");
        MSTAR_RANK_CHECK(rank, !mstar_piecewise_runner_can_run(mstar_test_toy_region(t), 16, -1),
                         "region bs 16");
        /* Every rank's lookups are every other rank's: min and max of them agree. */
        int64_t lo[128], hi[128];
        lookups(t, lo);
        memcpy(hi, lo, sizeof(lo));
        MSTAR_RANK_CHECK(rank,
                         mstar_agree_across_ranks(g, lo, 128, MSTAR_REDUCE_MIN) == MSTAR_OK &&
                             mstar_agree_across_ranks(g, hi, 128, MSTAR_REDUCE_MAX) == MSTAR_OK,
                         "agree lookups");
        MSTAR_RANK_CHECK(rank, memcmp(lo, hi, sizeof(lo)) == 0, "the ranks' lookups differ");
        static float x[64 * 256], y[64 * 256];
        for (int i = 0; i < 64 * 256; i++)
            x[i] = (float)(rank * 1000 + i);
        bool replayed;
        MSTAR_RANK_CHECK(rank, mstar_test_toy_step(t, x, 16, y, &replayed) == MSTAR_OK && replayed,
                         "step");
        MSTAR_RANK_CHECK(rank, memcmp(x, y, 16 * 256 * sizeof(float)) == 0, "outputs");
    }
    mstar_rank_group_destroy(g);
    mstar_test_toy_destroy(t);
    return 0;
}

static void test_startup_drops_a_failed_bucket_on_every_rank(void **state)
{
    (void)state;
    run("agreestartup", 4, startup_across_ranks, NULL);
}

static void test_startup_with_graphs_required_fails_on_every_rank(void **state)
{
    (void)state;
    static int required = 1;
    run("agreerequired", 4, startup_across_ranks, &required);
}

/* ---- design.md "Planning": size_lent_captures where the ranks' own lists differ -----------------
 */

/* Rank 1 cannot warm bs 4 (its last warm-up fails after the forward's collective), so its plan
 * leaves a bucket out and both ranks size every bucket on its own; rank 0 has bs 4 to size,
 * rank 1 not. Lent sizing runs no forward and meets no barrier, so neither rank runs a
 * collective alone: both finish with the agreed plan (bs 4 dropped everywhere) and replay a
 * step whose collective both run. */
static int lent_sizing_with_different_lists(int rank, void *arg)
{
    (void)arg;
    mstar_rank_group *g = join(rank, 2, 30000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    static const int64_t sizes[] = { 1, 2, 4, 8 };
    mstar_test_toy_options o = { .device = mstar_device_cpu(),
                                 .batch_sizes = sizes,
                                 .n_batch_sizes = 4,
                                 .row_floats = 16,
                                 .scratch_per_row = 1024,
                                 .collective = g,
                                 .fail_last_warmup_bs = rank == 1 ? 4 : 0 };
    mstar_test_toy *t = NULL;
    MSTAR_RANK_CHECK(rank, mstar_test_toy_create(&o, &t) == MSTAR_OK, "toy");
    mstar_capture_report rep;
    mstar_status st = mstar_test_toy_capture_startup(t, g, &rep);
    MSTAR_RANK_CHECK(rank, st == MSTAR_OK, "startup: %s", mstar_last_error());
    MSTAR_RANK_CHECK(rank, rep.resized, "the plan left bs 4 out: every rank should resize");
    MSTAR_RANK_CHECK(rank, rep.buckets == 4 && rep.captured == 3, "buckets %zu, captured %zu",
                     rep.buckets, rep.captured);
    mstar_bucket_key k;
    MSTAR_RANK_CHECK(
        rank,
        mstar_graph_runner_select_bucket(mstar_test_toy_runner(t), "decode", 3, 3, NULL, &k) &&
            k.bs == 8,
        "bs 3 should fall through to 8");
    int64_t run, bad;
    mstar_test_toy_collectives(t, &run, &bad);
    MSTAR_RANK_CHECK(rank, bad == 0, "%lld of %lld collectives failed", (long long)bad,
                     (long long)run);
    /* Only warm-ups ran collectives: sizing's of 4 buckets, the real captures' of 3 (2 slots
     * each); no throwaway capture ran a forward. */
    MSTAR_RANK_CHECK(rank, run == (4 + 3) * 2 * MSTAR_NUM_WARMUP, "collectives %lld",
                     (long long)run);
    static float x[8 * 16], y[8 * 16];
    for (int i = 0; i < 8 * 16; i++)
        x[i] = (float)(rank * 100 + i);
    bool replayed;
    MSTAR_RANK_CHECK(rank, mstar_test_toy_step(t, x, 3, y, &replayed) == MSTAR_OK && replayed,
                     "step: %s", mstar_last_error());
    MSTAR_RANK_CHECK(rank, memcmp(x, y, 3 * 16 * sizeof(float)) == 0, "outputs");
    mstar_test_toy_collectives(t, &run, &bad);
    MSTAR_RANK_CHECK(rank, bad == 0 && run == (4 + 3) * 2 * MSTAR_NUM_WARMUP + 1,
                     "the replay's collective: %lld run, %lld bad", (long long)run, (long long)bad);
    mstar_test_toy_destroy(t);
    mstar_rank_group_destroy(g);
    return 0;
}

static void test_lent_sizing_with_different_lists(void **state)
{
    (void)state;
    run("agreelent", 2, lent_sizing_with_different_lists, NULL);
}

/* ---- the KV cache's post-warm-up TP-symmetry check (design.md "Startup") -----------------------
 */

static int kv_symmetry(int rank, void *arg)
{
    (void)arg;
    mstar_rank_group *g = join(rank, 2, 30000);
    MSTAR_RANK_CHECK(rank, g != NULL, "join");
    mstar_backend *b = NULL;
    mstar_stream *s = NULL;
    mstar_step_runner *sr = NULL;
    mstar_kv_cache *kv = NULL;
    mstar_kv_cache_config cfg = {
        .num_pages = 10, .page_size = 4, .num_labels = 1, .max_seq_len = 64
    };
    MSTAR_RANK_CHECK(rank,
                     mstar_backend_create(mstar_device_cpu(), &b) == MSTAR_OK &&
                         mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s) == MSTAR_OK &&
                         mstar_step_runner_create(b, s, &sr) == MSTAR_OK &&
                         mstar_kv_cache_create(&cfg, b, &kv) == MSTAR_OK &&
                         mstar_kv_cache_register(kv, sr, "kv") == MSTAR_OK,
                     "setup: %s", mstar_last_error());
    mstar_kv_cache_set_tp_group(kv, g);
    MSTAR_RANK_CHECK(rank, mstar_step_runner_post_warmup_validate(sr) == MSTAR_OK, "symmetric: %s",
                     mstar_last_error());
    /* Rank 1 keeps a request's 2 pages, as a capture that left padding rows resident would. */
    if (rank == 1) {
        mstar_step_segment seg = { 1, 0, 8 };
        mstar_resource_step step = { &seg, 1, true };
        mstar_step_admit_result res;
        MSTAR_RANK_CHECK(rank,
                         mstar_kv_cache_ingest(kv, 1) == MSTAR_OK &&
                             mstar_kv_cache_admit(kv, &step, &res) == MSTAR_OK && res.ok,
                         "admit");
    }
    mstar_status st = mstar_step_runner_post_warmup_validate(sr);
    MSTAR_RANK_CHECK(rank, st == MSTAR_ESTATE, "asymmetric: %s", mstar_status_name(st));
    MSTAR_RANK_CHECK(rank,
                     strstr(mstar_last_error(), "free pages differ across the TP group") &&
                         strstr(mstar_last_error(), "7 to 9"),
                     "message");
    if (rank == 1)
        MSTAR_RANK_CHECK(rank, mstar_kv_cache_remove(kv, 1) == MSTAR_OK, "remove");
    MSTAR_RANK_CHECK(rank, mstar_kv_cache_post_warmup_validate(kv) == MSTAR_OK,
                     "symmetric again: %s", mstar_last_error());
    mstar_step_runner_destroy(sr);
    mstar_kv_cache_destroy(kv);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
    mstar_rank_group_destroy(g);
    return 0;
}

/* Free pages that differ across the TP group after warm-up fail every rank, naming the fewest
 * and the most; equal ones pass. */
static void test_kv_symmetry_after_warmup(void **state)
{
    (void)state;
    run("agreekv", 2, kv_symmetry, NULL);
}

/* ---- one rank, and a process playing rank 1 by hand ------------------------------------------ */

static mstar_mesh *impostor_mesh(const char *entity)
{
    mstar_mesh *m = NULL;
    assert_mstar_ok(mstar_mesh_create(entity, &mesh_opts, &m));
    return m;
}

/* Send RANK_VALUES as rank `rank` of group `group` (world `world`). */
static void send_values(mstar_mesh *m, const char *group, int32_t rank, int32_t world,
                        int64_t round, const int64_t *values, size_t n)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_RANK_VALUES);
    snprintf(msg.text, sizeof(msg.text), "%s", group);
    msg.round = round;
    msg.rank = rank;
    msg.world_size = world;
    for (size_t i = 0; i < n; i++)
        assert_mstar_ok(mstar_msg_add_int(&msg, values[i]));
    assert_mstar_ok(mstar_mesh_send(m, "agree.rank0", &msg));
    mstar_msg_clear(&msg);
}

/* The next RANK_VALUES rank 0 sent to the impostor. */
static void expect_values(mstar_mesh *m, int64_t round, const int64_t *values, size_t n)
{
    mstar_msg in;
    mstar_msg_init(&in, MSTAR_MSG_INVALID);
    assert_mstar_ok(mstar_mesh_recv(m, 10000, &in));
    assert_int_equal(in.type, MSTAR_MSG_RANK_VALUES);
    assert_string_equal(in.from, "agree.rank0");
    assert_string_equal(in.text, "agree");
    assert_int_equal(in.round, round);
    assert_int_equal(in.rank, 0);
    assert_int_equal(in.world_size, 2);
    assert_int_equal(in.nints, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(in.ints[i], values[i]);
    mstar_msg_clear(&in);
}

static void test_late_round_is_not_mixed(void **state)
{
    (void)state;
    use_fresh_ipc_dir("agreelate");
    mstar_rank_group *g = join(0, 2, 200);
    assert_non_null(g);
    mstar_mesh *rank1 = impostor_mesh("agree.rank1");

    /* Round 1: rank 1 says nothing, so rank 0 gives up. */
    int64_t v = 10;
    assert_mstar_status(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN), MSTAR_ETIMEDOUT);
    assert_non_null(strstr(mstar_last_error(), "round 1: no values from rank(s) 1 "));
    assert_int_equal(v, 10);
    expect_values(rank1, 1, &v, 1);

    /* Rank 1's round-1 value arrives late, then its round-2 value. Round 2 takes the latter. */
    const int64_t late = 5, current = 50;
    send_values(rank1, "agree", 1, 2, 1, &late, 1);
    send_values(rank1, "agree", 1, 2, 2, &current, 1);
    v = 100;
    assert_mstar_ok(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN));
    assert_int_equal(v, 50);
    const int64_t sent = 100;
    expect_values(rank1, 2, &sent, 1);

    /* Rank 1 leaves; rank 0 leaves too, without waiting for a goodbye it already has. */
    send_values(rank1, "agree", 1, 2, 0, NULL, 0);
    mstar_rank_group_destroy(g);
    expect_values(rank1, 0, NULL, 0);
    mstar_mesh_destroy(rank1);
}

static void test_stray_messages_are_dropped(void **state)
{
    (void)state;
    use_fresh_ipc_dir("agreestray");
    mstar_rank_group *g = join(0, 2, 1000);
    assert_non_null(g);
    mstar_mesh *rank1 = impostor_mesh("agree.rank1");
    mstar_mesh *intruder = impostor_mesh("intruder");
    const int64_t bad = -100, late = 3, two = 7, three = 9, dup = -50, pair[2] = { 1, 2 };

    /* Round 1 gets only junk, from two senders; it times out after taking all of it in. */
    send_values(intruder, "agree", 1, 2, 1, &bad, 1); /* claims rank 1 */
    mstar_msg hello;
    mstar_msg_init(&hello, MSTAR_MSG_HELLO);
    assert_mstar_ok(mstar_mesh_send(rank1, "agree.rank0", &hello)); /* not RANK_VALUES */
    mstar_msg_clear(&hello);
    send_values(rank1, "other", 1, 2, 1, &bad, 1); /* another group */
    send_values(rank1, "agree", 1, 3, 1, &bad, 1); /* another world size */
    send_values(rank1, "agree", 0, 2, 1, &bad, 1); /* claims rank 0 */
    send_values(rank1, "agree", 1, 2, 5, &bad, 1); /* a round far ahead */
    send_values(rank1, "agree", 1, 2, 0, &bad, 1); /* round 0 is for leaving, without values */
    assert_mstar_ok(mstar_mesh_send_raw(rank1, "agree.rank0", "\xc1garbage", 8));
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    int64_t v = 10;
    assert_mstar_status(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN), MSTAR_ETIMEDOUT);
    mstar_test_log_capture_end();
    assert_int_equal(v, 10);
    assert_true(mstar_test_log_contains("from intruder claiming rank 1"));
    assert_true(mstar_test_log_contains("dropped a HELLO message from agree.rank1"));
    assert_true(mstar_test_log_contains("for group other of 2 ranks"));
    assert_true(mstar_test_log_contains("for group agree of 3 ranks"));
    assert_true(mstar_test_log_contains("claiming rank 0"));
    assert_true(mstar_test_log_contains("values of round 5"));
    assert_true(mstar_test_log_contains("values of round 0"));

    /* Round 2: rank 1's late round-1 value, then round 3 early (kept) and a duplicate of it
     * (dropped), then round 2. */
    send_values(rank1, "agree", 1, 2, 1, &late, 1);
    send_values(rank1, "agree", 1, 2, 3, &three, 1);
    send_values(rank1, "agree", 1, 2, 3, &dup, 1);
    send_values(rank1, "agree", 1, 2, 2, &two, 1);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    v = 10;
    assert_mstar_ok(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN));
    assert_int_equal(v, 7);
    v = 10;
    assert_mstar_ok(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN));
    assert_int_equal(v, 9);
    mstar_test_log_capture_end();
    assert_int_equal(mstar_test_log_count("dropped a duplicate from rank 1 (round 3)"), 1);

    /* A different number of values is an error at once, naming the rank. */
    send_values(rank1, "agree", 1, 2, 4, pair, 2);
    v = 10;
    assert_mstar_status(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "rank 1 sent 2 values, this rank has 1"));
    assert_int_equal(v, 10);

    /* A rank that left is noticed in the next round it misses. */
    send_values(rank1, "agree", 1, 2, 0, NULL, 0);
    assert_mstar_status(mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MAX), MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "rank 1 left the group"));

    mstar_rank_group_destroy(g);
    mstar_mesh_destroy(intruder);
    mstar_mesh_destroy(rank1);
}

static void test_create_checks_its_arguments(void **state)
{
    (void)state;
    use_fresh_ipc_dir("agreeargs");
    mstar_rank_group *g = NULL;
    assert_mstar_status(mstar_rank_group_create_host("g", 2, 2, NULL, &g), MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_host("g", -1, 2, NULL, &g), MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_host("g", 0, 0, NULL, &g), MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_host("a/b", 0, 1, NULL, &g), MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_host(NULL, 0, 1, NULL, &g), MSTAR_EINVAL);
    char longname[251];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    mstar_host_group_options opts = { &mesh_opts, 0 };
    assert_mstar_status(mstar_rank_group_create_host(longname, 0, 1, &opts, &g), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "too long"));
    opts.timeout_ms = -1;
    assert_mstar_status(mstar_rank_group_create_host("g", 0, 1, &opts, &g), MSTAR_EINVAL);
    assert_null(g);

    /* A group of one over the mesh agrees with itself. */
    opts.timeout_ms = 0;
    assert_mstar_ok(mstar_rank_group_create_host("g", 0, 1, &opts, &g));
    int64_t v[2] = { 4, 5 };
    assert_mstar_ok(mstar_agree_across_ranks(g, v, 2, MSTAR_REDUCE_MIN));
    assert_true(v[0] == 4 && v[1] == 5);
    /* A second rank 0 of the same group cannot bind the same entity. */
    mstar_rank_group *twin = NULL;
    assert_true(mstar_rank_group_create_host("g", 0, 1, &opts, &twin) != MSTAR_OK);
    assert_null(twin);
    mstar_rank_group_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_ranks_min_and_max),
        cmocka_unit_test(test_failed_bucket_dropped_everywhere),
        cmocka_unit_test(test_dead_rank_times_out),
        cmocka_unit_test(test_startup_drops_a_failed_bucket_on_every_rank),
        cmocka_unit_test(test_startup_with_graphs_required_fails_on_every_rank),
        cmocka_unit_test(test_lent_sizing_with_different_lists),
        cmocka_unit_test(test_kv_symmetry_after_warmup),
        cmocka_unit_test(test_late_round_is_not_mixed),
        cmocka_unit_test(test_stray_messages_are_dropped),
        cmocka_unit_test(test_create_checks_its_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
