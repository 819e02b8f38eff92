/*
 * counter_resource.h — a small counting resource for the runner tests (graph runner, piecewise
 * runner): per-request lengths, one page per token held until a reset frees it, and a per-slot
 * plan buffer (static, built once) that holds each row's length, which a test's forward reads at
 * a fixed address the way a captured graph reads a real plan. Pre-plan marks a slot pending; the
 * full plan promotes it. Failures can be injected into plan.
 */
#ifndef MSTAR_TEST_COUNTER_RESOURCE_H
#define MSTAR_TEST_COUNTER_RESOURCE_H

#include "mstar/mstar.h"

#define MSTAR_TEST_COUNTER_SLOTS   2
#define MSTAR_TEST_COUNTER_ROWS    64   /* real requests 0..63, and plan rows per slot */
#define MSTAR_TEST_COUNTER_PADDING 4096 /* padding handles -1 .. -4096 */

typedef struct mstar_test_counter {
    int64_t lens[MSTAR_TEST_COUNTER_ROWS];
    int64_t pad_lens[MSTAR_TEST_COUNTER_PADDING];
    int64_t
        resv[MSTAR_TEST_COUNTER_ROWS]; /* pages held per request: a reset keeps them unless freed */
    int64_t pad_resv[MSTAR_TEST_COUNTER_PADDING];
    int64_t pages_used;
    int64_t capacity;
    float *plan_buf[MSTAR_TEST_COUNTER_SLOTS]; /* static: graphs read it at fixed addresses */
    int builds;
    int capture_plans_with_dirty_rows; /* G-24: a capture-time plan saw state left over */
    int ingested;
    int plans;      /* full plans run */
    bool fail_plan; /* the next plans fail (MSTAR_EDEVICE) */
    mstar_stream *preplan_stream;
    bool pending[MSTAR_TEST_COUNTER_SLOTS];
    mstar_backend *b;
} mstar_test_counter;

extern const mstar_resource_ops mstar_test_counter_ops;

/* Zeroed, with `capacity` pages, plan buffers from `b`'s caching allocator once built. */
void mstar_test_counter_init(mstar_test_counter *c, mstar_backend *b, int64_t capacity);
/* Frees the plan buffers. */
void mstar_test_counter_free(mstar_test_counter *c);
int64_t *mstar_test_counter_len(mstar_test_counter *c, int64_t rid);
int64_t *mstar_test_counter_resv(mstar_test_counter *c, int64_t rid);
/* Pages and lengths that padding rows hold, summed: 0 when nothing of theirs is resident. */
int64_t mstar_test_counter_padding_held(const mstar_test_counter *c);

#endif
