/*
 * landing.h — a watcher that finishes device reads once their copies have landed.
 *
 * The CUDA IPC route queues a read's copies on the manager's copy stream and records a probe
 * event behind them; the read's completion must finish when the probe fires, whether or not
 * anyone polls (a caller may block in mstar_completion_wait, or sleep on the manager's event
 * fd). A stream callback per read did that, but callbacks run one at a time and each cost about
 * 45 us on an H200 host: with eight 16 MiB reads in flight they fell further behind the copies
 * with every read. The watcher is one thread per route that asks the probes in the order they
 * were recorded (a stream runs in order, so the oldest lands first), spinning while reads are in
 * flight and napping after MSTAR__CUDA_IPC_SPIN_NS, and sleeping when none are.
 *
 * The watcher owns the probes: take one, record it behind the copies, hand it back with the
 * read (or give it back unused).
 */
#ifndef MSTAR_TENSORS_LANDING_H
#define MSTAR_TENSORS_LANDING_H

#include "mstar/device.h"

typedef struct mstar__landing mstar__landing;

/* What to run on the watcher's thread once a read's probe has fired: `status` is MSTAR_OK, or
 * the error of asking the probe (the copies' fate is then unknown). It owns `ctx`. */
typedef void (*mstar__landed_fn)(void *ctx, mstar_status status);

/* A watcher for events of `backend`; its thread starts with the first read. */
mstar_status mstar__landing_create(mstar_backend *backend, mstar__landing **out);
/* A probe to record behind a read's copies: a spare one, or a new one. */
mstar_status mstar__landing_probe_take(mstar__landing *w, mstar_event **out);
/* Give back a probe that was not handed over with a read. */
void mstar__landing_probe_give(mstar__landing *w, mstar_event *probe);
/* Watch `probe` (taken from this watcher and recorded after every probe handed over before it)
 * and run fn(ctx, ...) once it has fired. On an error nothing was handed over: the caller keeps
 * `probe` and `ctx`. */
mstar_status mstar__landing_add(mstar__landing *w, mstar_event *probe, mstar__landed_fn fn,
                                void *ctx);
/* Reads handed over whose probes have not yet been seen to fire (tests). */
size_t mstar__landing_pending(mstar__landing *w);
/* Finish every read handed over (waiting for its probe), stop the thread, free the probes. */
void mstar__landing_destroy(mstar__landing *w);

#endif
