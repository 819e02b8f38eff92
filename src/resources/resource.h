/*
 * resource.h — what the two reference resources share beyond their storage: the checks every
 * step they are handed must pass, and the one adapter that drives either of them from a step
 * runner (mstar/step.h).
 *
 * The KV cache and positions offer typed calls over an mstar_resource_step (admit, plan, commit,
 * ...); the step runner calls untyped ops with an mstar_step. The adapter sits between the two:
 * it reads the step's segments and payload under the key the resource was registered with, picks
 * where a plan goes (the lease's slot and bucket, or the eager state), turns an admit shortage
 * into a result rather than an error, applies clear_preplan(-1) to every slot, and sizes the
 * graph buffers from the capture jobs. A resource describes its typed calls in an
 * mstar__resource_class and embeds an mstar__resource_adapter.
 */
#ifndef MSTAR_RESOURCES_RESOURCE_H
#define MSTAR_RESOURCES_RESOURCE_H

#include "plan_store.h"

/* Check a step's shape: segments present when counted, labels below num_labels, spans in
 * [0, INT32_MAX]. MSTAR_EINVAL naming the segment, with `what` (the call) first. */
mstar_status mstar__resource_step_check(const mstar_resource_step *step, int32_t num_labels,
                                        const char *what);

/* A resource's typed calls, for the adapter. `res` is the resource. */
typedef struct mstar__resource_class {
    const char *what; /* "kv cache": how the resource's messages start */
    /* Reserve what the step will write; MSTAR_ENOSPC (with *out filled) is a shortage. NULL for
     * a resource that reserves nothing. */
    mstar_status (*admit)(void *res, const mstar_resource_step *step, mstar_step_admit_result *out);
    /* The rows and tokens a plan into the eager state needs for `step`. */
    void (*eager_size)(void *res, const mstar_resource_step *step, int64_t *rows, int64_t *tokens);
    mstar_status (*plan)(void *res, int32_t slot, const mstar_resource_step *step, int32_t rows,
                         int32_t tokens, bool preplan, mstar_stream *stream);
    mstar_status (*commit)(void *res, const mstar_resource_step *step);
    void (*clear_preplan)(void *res, int32_t slot);
    mstar_status (*ingest)(void *res, int64_t request);
    mstar_status (*reset)(void *res, int64_t request, bool free_storage);
    mstar_status (*remove)(void *res, int64_t request);
    /* Build the slot buffers: `slots` slots for up to `rows` rows and `tokens` tokens. */
    mstar_status (*build)(void *res, int32_t slots, int32_t rows, int32_t tokens);
    /* After every capture of the device (startup step 7); NULL: nothing to check. */
    mstar_status (*post_warmup_validate)(void *res);
} mstar__resource_class;

typedef struct mstar__resource_adapter {
    const mstar__resource_class *cls;
    void *res;
    const mstar__plan_store *plans; /* the resource's: its slot count bounds clear_preplan(-1) */
    char *key;                      /* what the resource was registered under; NULL before */
} mstar__resource_adapter;

void mstar__resource_adapter_init(mstar__resource_adapter *ad, const mstar__resource_class *cls,
                                  void *res, const mstar__plan_store *plans);
void mstar__resource_adapter_free(mstar__resource_adapter *ad);

/* Register the resource with a step runner under `key` (copied; no dependencies; it pre-plans).
 * MSTAR_ESTATE when it was registered already: a resource registers once. */
mstar_status mstar__resource_adapter_register(mstar__resource_adapter *ad,
                                              mstar_step_runner *step_runner, const char *key);

#endif
