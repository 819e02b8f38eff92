/*
 * mstar/mstar.h — the whole public API of libmstar.
 *
 *   core.h     status codes, errors, logging, environment knobs, dtypes, tensor views, ids
 *   wire.h     request ids, tensor descriptors, edges, control messages and their encoding
 *   mesh.h     the ZeroMQ control mesh between entities
 *   device.h   device backends (host, CUDA): streams, events, copies, memory, capture
 *   step.h     the step a runner drives: tensor maps, steps, resources, the step runner
 *   graphs.h   the accelerator graph runner: graph pools, capture, buckets, slots, padding rows
 *   piecewise.h  the piecewise runner: regions inside a step captured into the node's pool
 *   planner.h  capture memory planning and agreement across ranks
 *   resources.h  the step resources of the reference model: paged KV cache (sink page 0), positions
 *   tensors.h  tensor transport between workers: bookkeeping, staging, reading, fan-in
 */
#ifndef MSTAR_MSTAR_H
#define MSTAR_MSTAR_H

#include "mstar/core.h"
#include "mstar/wire.h"
#include "mstar/mesh.h"
#include "mstar/device.h"
#include "mstar/step.h"
#include "mstar/graphs.h"
#include "mstar/piecewise.h"
#include "mstar/planner.h"
#include "mstar/resources.h"
#include "mstar/tensors.h"

#endif /* MSTAR_MSTAR_H */
