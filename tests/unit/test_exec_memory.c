/*
 * test_exec_memory.c — ExecutableMemory (design.md "Executable memory", hard case G-29).
 *
 * The estimate on simulated free-memory series: a clean series, a rise, an outlier copy, the
 * largest-rate fallback when no count is kept, and nothing countable. Series are written as the
 * drop each copy causes (negative: free memory rose) and turned into readings here; 100 nodes per
 * graph throughout. Then the measuring loop against a simulated driver (copies held until
 * release, every copy destroyed when a step fails), and the host backend, which has nothing to
 * measure.
 */
#include "mstar_test.h"

#include "graphs/exec_memory.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define M      ((int64_t)1 << 20)
#define NODES  100
#define COPIES MSTAR_EXEC_COPIES_PER_COUNT

/* The driver maps a 2 MiB piece every second copy: 1 MiB a copy. The first copy refills a piece
 * mapped earlier, so counting starts after copy 2. Counted: 6 copies, 6 MiB; rate (6 + 2) MiB
 * over 600 nodes. */
static const int64_t clean[COPIES] = { 0, 2 * M, 0, 2 * M, 0, 2 * M, 0, 2 * M };
#define CLEAN_RATE ((double)(8 * M) / 600.0)
/* A rise (someone else freed 1 MiB) in a count that would otherwise read high: (9+2)/600. */
static const int64_t rise[COPIES] = { 0, 2 * M, 2 * M, -1 * M, 2 * M, 2 * M, 2 * M, 2 * M };
#define RISE_RATE ((double)(11 * M) / 600.0)
/* One copy took 20 MiB (someone else allocated): mean 26/6 MiB, and 20 > mean + 4. */
static const int64_t outlier[COPIES] = { 0, 2 * M, 0, 2 * M, 20 * M, 2 * M, 0, 2 * M };
#define OUTLIER_RATE ((double)(28 * M) / 600.0)

/* Fill readings for counts given as per-copy drops, counts back to back from 80 GiB. */
static void series(uint64_t *readings, const int64_t *const *counts, size_t ncounts)
{
    int64_t free_now = (int64_t)80 << 30;
    for (size_t c = 0; c < ncounts; c++) {
        uint64_t *r = readings + c * (COPIES + 1);
        r[0] = (uint64_t)free_now;
        for (size_t i = 0; i < COPIES; i++) {
            free_now -= counts[c][i];
            r[i + 1] = (uint64_t)free_now;
        }
    }
}

/* The estimate for counts given as per-copy drops (at most 3 counts). */
static mstar_exec_estimate estimate(const int64_t *const *counts, size_t ncounts)
{
    uint64_t r[3 * (COPIES + 1)];
    mstar_exec_estimate est;
    series(r, counts, ncounts);
    assert_mstar_ok(mstar_exec_memory_estimate(r, ncounts, COPIES, NODES, &est));
    return est;
}

static void assert_rate(double got, double want)
{
    if (fabs(got - want) > 1e-9 * want)
        fail_msg("per_node %.6f, wanted %.6f", got, want);
}

static void test_clean_series(void **state)
{
    (void)state;
    const int64_t *counts[3] = { clean, clean, clean };
    mstar_exec_estimate est = estimate(counts, 3);
    assert_true(est.has_per_node);
    assert_int_equal(est.kept_counts, 3);
    assert_rate(est.per_node, CLEAN_RATE);
    /* Held: 3 × 8 MiB dropped, under the cap of per_node × 100 × 24 = 32 MiB. */
    assert_int_equal(est.held, 24 * M);
}

static void test_rise_is_not_kept(void **state)
{
    (void)state;
    const int64_t *counts[3] = { rise, clean, clean };
    mstar_exec_estimate est = estimate(counts, 3);
    assert_int_equal(est.kept_counts, 2);
    /* The rising count reads higher, but only kept counts are believed. */
    assert_true(RISE_RATE > CLEAN_RATE);
    assert_rate(est.per_node, CLEAN_RATE);
}

static void test_outlier_copy_is_not_kept(void **state)
{
    (void)state;
    const int64_t *counts[3] = { clean, outlier, clean };
    mstar_exec_estimate est = estimate(counts, 3);
    assert_int_equal(est.kept_counts, 2);
    assert_rate(est.per_node, CLEAN_RATE);
    /* 8 + 28 + 8 MiB dropped, but the other process's 20 MiB is not our credit: the cap is
     * per_node × 100 nodes × 24 copies = 32 MiB. */
    assert_int_equal(est.held, 32 * M);

    /* Counted drops 0, 2, 0, 2, 0, x MiB: mean (4 + x)/6, and x is an outlier past mean + 4,
     * that is past 5.6 MiB. */
    int64_t big[COPIES] = { 0, 2 * M, 0, 2 * M, 0, 2 * M, 0, 5 * M };
    const int64_t *one[1] = { big };
    est = estimate(one, 1);
    assert_int_equal(est.kept_counts, 1);
    assert_rate(est.per_node, (double)(11 * M) / 600.0);
    big[7] = 6 * M;
    est = estimate(one, 1);
    assert_int_equal(est.kept_counts, 0);
}

static void test_largest_rate_fallback(void **state)
{
    (void)state;
    const int64_t *counts[3] = { rise, outlier, rise };
    mstar_exec_estimate est = estimate(counts, 3);
    assert_true(est.has_per_node);
    assert_int_equal(est.kept_counts, 0);
    assert_true(OUTLIER_RATE > RISE_RATE);
    assert_rate(est.per_node, OUTLIER_RATE);
}

static void test_nothing_countable(void **state)
{
    (void)state;
    /* Every copy fits in pieces mapped earlier: free memory never moves. */
    static const int64_t flat[COPIES] = { 0 };
    const int64_t *counts[3] = { flat, flat, flat };
    mstar_exec_estimate est = estimate(counts, 3);
    assert_false(est.has_per_node);
    assert_int_equal(est.held, 0);
    assert_int_equal(est.kept_counts, 0);

    /* Only the last copy of each count maps memory: nothing after it to count. */
    static const int64_t last[COPIES] = { 0, 0, 0, 0, 0, 0, 0, 2 * M };
    const int64_t *late[3] = { last, last, last };
    est = estimate(late, 3);
    assert_false(est.has_per_node);
    assert_int_equal(est.held, 0);

    /* One copy per count can never be counted. */
    uint64_t two[2] = { 100 * M, 98 * M };
    assert_mstar_ok(mstar_exec_memory_estimate(two, 1, 1, NODES, &est));
    assert_false(est.has_per_node);
}

static void test_only_rising_counts(void **state)
{
    (void)state;
    /* Free memory ends above where counting began: the rate is clamped at 0, not negative. */
    static const int64_t up[COPIES] = { 2 * M, 0, -8 * M, 0, 0, 0, 0, 0 };
    const int64_t *counts[1] = { up };
    mstar_exec_estimate est = estimate(counts, 1);
    assert_true(est.has_per_node);
    assert_int_equal(est.kept_counts, 0);
    assert_true(est.per_node == 0.0);
    assert_int_equal(est.held, 0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    uint64_t r[COPIES + 1] = { 0 };
    mstar_exec_estimate est;
    assert_mstar_status(mstar_exec_memory_estimate(r, 1, COPIES, 0, &est), MSTAR_EINVAL);
    assert_mstar_status(mstar_exec_memory_estimate(r, 0, COPIES, NODES, &est), MSTAR_EINVAL);
    assert_mstar_status(mstar_exec_memory_estimate(r, 1, 0, NODES, &est), MSTAR_EINVAL);
    assert_mstar_status(mstar_exec_memory_estimate(NULL, 1, COPIES, NODES, &est), MSTAR_EINVAL);
    assert_mstar_status(mstar_exec_memory_estimate(r, 1, COPIES, NODES, NULL), MSTAR_EINVAL);
    assert_mstar_status(mstar_exec_memory_estimate(r, SIZE_MAX / 4, COPIES, NODES, &est),
                        MSTAR_ERANGE);
}

/* ---- the measuring loop, against a simulated driver ------------------------------------------ */

/* Maps executable memory in 2 MiB pieces, fills them copy by copy, and never gives memory back
 * on destroy (the driver keeps it for reuse). */
typedef struct sim_driver {
    uint64_t free;
    uint64_t piece_left; /* bytes left in the last mapped piece */
    uint64_t per_copy;
    int live;
    int made;
    int fail_instantiate_at; /* 1-based copy that fails; 0 = never */
    int fail_reading_at;     /* 1-based reading that fails; 0 = never */
    int readings;
} sim_driver;

static mstar_status sim_instantiate(mstar__exec_probe *p, void **copy)
{
    sim_driver *d = p->user;
    if (++d->made == d->fail_instantiate_at)
        return mstar_error_set(MSTAR_EDEVICE, "simulated cudaGraphInstantiate failure");
    uint64_t need = d->per_copy;
    while (need > d->piece_left) {
        need -= d->piece_left;
        d->free -= MSTAR_EXEC_PIECE_BYTES;
        d->piece_left = MSTAR_EXEC_PIECE_BYTES;
    }
    d->piece_left -= need;
    d->live++;
    *copy = (void *)(uintptr_t)d->made;
    return MSTAR_OK;
}

static void sim_destroy(mstar__exec_probe *p, void *copy)
{
    sim_driver *d = p->user;
    assert_non_null(copy);
    d->live--;
}

static mstar_status sim_free_bytes(mstar__exec_probe *p, uint64_t *out)
{
    sim_driver *d = p->user;
    if (++d->readings == d->fail_reading_at)
        return mstar_error_set(MSTAR_EDEVICE, "simulated cuMemGetInfo failure");
    *out = d->free;
    return MSTAR_OK;
}

static mstar__exec_probe sim_probe(sim_driver *d)
{
    mstar__exec_probe p = { .instantiate = sim_instantiate,
                            .destroy = sim_destroy,
                            .free_bytes = sim_free_bytes,
                            .user = d };
    return p;
}

static void test_copies_are_held_until_release(void **state)
{
    (void)state;
    /* A 1000-node graph at 3 KiB a node (more than a piece per copy), starting 1.5 MiB into a
     * piece mapped earlier. Every copy maps, so each count counts 7 copies. */
    const uint64_t nodes = 1000, per_copy = 3000 << 10;
    sim_driver d = { .free = (uint64_t)80 << 30, .piece_left = 3 * M / 2, .per_copy = per_copy };
    mstar__exec_probe probe = sim_probe(&d);
    mstar_exec_memory *em;
    assert_mstar_ok(mstar_exec_memory_create(&em));
    assert_false(mstar_exec_memory_per_node(em, NULL));
    assert_mstar_ok(mstar__exec_memory_measure_with(em, &probe, nodes));
    assert_int_equal(d.live, MSTAR_EXEC_COUNTS * MSTAR_EXEC_COPIES_PER_COUNT);
    assert_int_equal(mstar_exec_memory_copies(em), d.live);
    double per_node = 0;
    assert_true(mstar_exec_memory_per_node(em, &per_node));
    /* Counted bytes are the truth give or take the two partial pieces at the ends; with the
     * added piece, never below the truth and at most two pieces above it. */
    assert_true(per_node >= 3072.0);
    assert_true(per_node <= 3072.0 + (double)(4 * M) / (7.0 * (double)nodes));
    /* Held: what the copies took from free memory, whole pieces, at most the copies' bytes plus
     * the last partial piece. */
    uint64_t held = mstar_exec_memory_held(em);
    assert_true(held > 0 && held % MSTAR_EXEC_PIECE_BYTES == 0);
    assert_true(held <= 24 * per_copy + 2 * M);

    /* A second measurement while copies are held would read low: refused. */
    assert_mstar_status(mstar__exec_memory_measure_with(em, &probe, nodes), MSTAR_ESTATE);
    assert_int_equal(d.live, 24);

    mstar_exec_memory_release(em);
    assert_int_equal(d.live, 0);
    assert_int_equal(mstar_exec_memory_copies(em), 0);
    assert_int_equal(mstar_exec_memory_held(em), 0);
    assert_true(mstar_exec_memory_per_node(em, NULL)); /* the rate outlives the copies */
    mstar_exec_memory_release(em);                     /* twice is fine */
    mstar_exec_memory_destroy(em);
}

static void test_failure_destroys_every_copy(void **state)
{
    (void)state;
    sim_driver d = { .free = (uint64_t)80 << 30, .per_copy = M, .fail_instantiate_at = 10 };
    mstar__exec_probe probe = sim_probe(&d);
    mstar_exec_memory *em;
    assert_mstar_ok(mstar_exec_memory_create(&em));
    assert_mstar_status(mstar__exec_memory_measure_with(em, &probe, NODES), MSTAR_EDEVICE);
    assert_non_null(strstr(mstar_last_error(), "copy 10 of 24"));
    assert_non_null(strstr(mstar_last_error(), "simulated cudaGraphInstantiate failure"));
    assert_int_equal(d.live, 0);
    assert_int_equal(mstar_exec_memory_copies(em), 0);
    assert_false(mstar_exec_memory_per_node(em, NULL));

    /* A failed reading in the second count: the 8 copies of the first are destroyed too. */
    d = (sim_driver){ .free = (uint64_t)80 << 30, .per_copy = M, .fail_reading_at = 10 };
    probe = sim_probe(&d);
    assert_mstar_status(mstar__exec_memory_measure_with(em, &probe, NODES), MSTAR_EDEVICE);
    assert_int_equal(d.live, 0);

    /* Destroying with copies held destroys them (ASan would see a leak otherwise). */
    d = (sim_driver){ .free = (uint64_t)80 << 30, .per_copy = M };
    probe = sim_probe(&d);
    assert_mstar_ok(mstar__exec_memory_measure_with(em, &probe, NODES));
    assert_int_equal(d.live, 24);
    assert_mstar_status(mstar__exec_memory_measure_with(em, &probe, 0), MSTAR_ESTATE);
    mstar_exec_memory_destroy(em);
    assert_int_equal(d.live, 0);
}

static void noop(void *args)
{
    (void)args;
}

static void test_host_backend_has_nothing_to_measure(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s));
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar_launch(s, noop, NULL, 0));
    mstar_graph *g;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    assert_mstar_ok(mstar_graph_instantiate(g, true));

    mstar_exec_memory *em;
    assert_mstar_ok(mstar_exec_memory_create(&em));
    assert_mstar_ok(mstar_exec_memory_measure(em, g));
    assert_false(mstar_exec_memory_per_node(em, NULL));
    assert_int_equal(mstar_exec_memory_held(em), 0);
    assert_int_equal(mstar_exec_memory_copies(em), 0);
    assert_mstar_status(mstar_exec_memory_measure(em, NULL), MSTAR_EINVAL);
    mstar_exec_memory_destroy(em);
    mstar_exec_memory_destroy(NULL);

    mstar_graph_destroy(g);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_series),
        cmocka_unit_test(test_rise_is_not_kept),
        cmocka_unit_test(test_outlier_copy_is_not_kept),
        cmocka_unit_test(test_largest_rate_fallback),
        cmocka_unit_test(test_nothing_countable),
        cmocka_unit_test(test_only_rising_counts),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_copies_are_held_until_release),
        cmocka_unit_test(test_failure_destroys_every_copy),
        cmocka_unit_test(test_host_backend_has_nothing_to_measure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
