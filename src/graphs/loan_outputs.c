/*
 * loan_outputs.c — a replay's static outputs copied into loaned memory
 * (mstar_graph_runner_loan_outputs), so that a node sending them pays one copy, enqueued on the
 * compute stream, instead of the store's copy and then staging's.
 *
 * The runner never learns what a loan is: the caller's loaner lends host memory under an opaque
 * id, and gives it back on request. That keeps this folder free of the transport, which offers
 * its own loaner (mstar_comm_output_loan). Everything the caller can get wrong is checked before
 * the first loan is taken, so a refusal leaves nothing to give back.
 */
#include "graphs/runner.h"

#include <stdio.h>
#include <string.h>

/* The static output `key` of slot `s`, or NULL. */
static const mstar_tensor *static_output(const mstar_graph_slot *s, const char *key)
{
    return mstar_tensor_map_get(mstar_graph_slot_static_outputs(s), key);
}

/* Every key names a distinct, contiguous static output of the slot. */
static mstar_status check_keys(const mstar_graph_runner *r, const mstar_graph_slot *s,
                               const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL)
            return mstar_error_set(MSTAR_EINVAL, "%s: loan_outputs: keys[%zu] is NULL", r->who, i);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(keys[j], keys[i]) == 0)
                return mstar_error_set(MSTAR_EINVAL, "%s: loan_outputs: output '%s' named twice",
                                       r->who, keys[i]);
        }
        const mstar_tensor *t = static_output(s, keys[i]);
        if (t == NULL)
            return mstar_error_set(MSTAR_ENOENT, "%s: loan_outputs: the slot has no output '%s'",
                                   r->who, keys[i]);
        /* A loan is one contiguous block: a strided output would need a layout copy. */
        if (!mstar_tensor_is_contiguous(t))
            return mstar_error_set(MSTAR_EINVAL,
                                   "%s: loan_outputs: output '%s' is not contiguous, so it "
                                   "cannot be copied into a loan in one piece",
                                   r->who, keys[i]);
    }
    return MSTAR_OK;
}

/* Take loans[i] for keys[i]; a loaner with no memory now leaves that output unloaned. */
static mstar_status take_loans(const mstar_graph_slot *s, const char *const *keys, size_t n,
                               const mstar_output_loaner *loaner, mstar_output_loan *loans)
{
    for (size_t i = 0; i < n; i++) {
        const mstar_tensor *t = static_output(s, keys[i]);
        mstar_output_loan *l = &loans[i];
        mstar_status st =
            loaner->loan(loaner->user, t->dtype, t->shape, t->ndim, &l->tensor, &l->id);
        if (st == MSTAR_ENOSPC) {
            memset(l, 0, sizeof(*l)); /* the static path: stored by copy, as without a loan */
            mstar_error_clear();
            continue;
        }
        if (st == MSTAR_OK &&
            (l->id == 0 || l->tensor.data == NULL || l->tensor.device.type != MSTAR_DEVICE_CPU ||
             mstar_tensor_nbytes(&l->tensor) < mstar_tensor_nbytes(t))) {
            if (l->id != 0)
                loaner->release(loaner->user, l->id);
            st = mstar_error_set(MSTAR_EINVAL,
                                 "the loaner lent output '%s' no id or no host memory of its "
                                 "%llu bytes",
                                 keys[i], (unsigned long long)mstar_tensor_nbytes(t));
        }
        if (st != MSTAR_OK) {
            memset(l, 0, sizeof(*l));
            return st;
        }
    }
    return MSTAR_OK;
}

/* Enqueue each loaned output's copy from its static buffer, behind the replay. */
static mstar_status enqueue_copies(mstar_stream *stream, const mstar_graph_slot *s,
                                   const char *const *keys, size_t n,
                                   const mstar_output_loan *loans)
{
    for (size_t i = 0; i < n; i++) {
        if (loans[i].id == 0)
            continue;
        const mstar_tensor *t = static_output(s, keys[i]);
        mstar_memcpy_kind kind =
            t->device.type == MSTAR_DEVICE_CPU ? MSTAR_MEMCPY_H2H : MSTAR_MEMCPY_D2H;
        mstar_status st = mstar_memcpy_async(stream, loans[i].tensor.data, mstar_tensor_ptr(t),
                                             (size_t)mstar_tensor_nbytes(t), kind);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* Give back every loan of this call. The stream may still be writing them: wait for it first,
 * keeping the failure that brought us here as the thread's error. */
static mstar_status give_back(mstar_stream *stream, size_t n, const mstar_output_loaner *loaner,
                              mstar_output_loan *loans, mstar_status st)
{
    char why[512];
    snprintf(why, sizeof(why), "%s", mstar_last_error());
    if (mstar_stream_synchronize(stream) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "loan_outputs: giving loans back after a failed stream: %s",
                  mstar_last_error());
    for (size_t i = 0; i < n; i++) {
        if (loans[i].id != 0)
            loaner->release(loaner->user, loans[i].id);
        memset(&loans[i], 0, sizeof(loans[i]));
    }
    return mstar_error_set(st, "%s", why);
}

mstar_status mstar_graph_runner_loan_outputs(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                             const char *const *keys, size_t n,
                                             const mstar_output_loaner *loaner,
                                             mstar_output_loan *loans)
{
    if (r == NULL || lease == NULL || (n > 0 && (keys == NULL || loans == NULL)) ||
        loaner == NULL || loaner->loan == NULL || loaner->release == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_runner_loan_outputs: runner, lease, "
                                             "keys, loans and a loaner with both functions are "
                                             "required");
    const mstar_graph_slot *s = mstar_graph_runner_slot_for(r, lease);
    if (s == NULL)
        return mstar_error_set(
            MSTAR_ENOENT, "%s: loan_outputs: the lease names no captured bucket or slot", r->who);
    mstar_status st = check_keys(r, s, keys, n);
    if (st != MSTAR_OK)
        return st;
    if (n > 0)
        memset(loans, 0, n * sizeof(*loans));
    st = take_loans(s, keys, n, loaner, loans);
    if (st == MSTAR_OK)
        st = enqueue_copies(r->stream, s, keys, n, loans);
    if (st != MSTAR_OK)
        return give_back(r->stream, n, loaner, loans, mstar_error_wrap("%s: loan_outputs", r->who));
    return MSTAR_OK;
}
