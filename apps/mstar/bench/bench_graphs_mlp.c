/*
 * bench_graphs_mlp.c — `mstar bench graphs --model mlp [--layers L] [--hidden D]`: the mlp bench
 * model (models/ref/mlp_node.h; L layers of rms_norm → linear D×D → silu → residual add, bf16 on
 * CUDA, defaults 8 × 1024) through the graph runner at batch sizes 1, 8, 32 and 64, with the
 * columns of the reference model's table, measured by the same code (bench_graphs.c): whole
 * steps eager and replayed, the prepared step's eager forward and runner replay, the bare graph
 * launch, and their host times.
 * The same work as a PyTorch CUDA-graph runner's 8-layer MLP step, so the two can be put side by
 * side.
 */
#include "bench.h"

#include "mlp_node.h"

#include <stdio.h>
#include <string.h>

#define NSIZES MSTAR_BENCH_GRAPHS_SIZES
#define ROWS   64

static const int64_t sizes[NSIZES] = { 1, 8, 32, 64 };

/* The suite's calls on the node: rows [0, bs) of its state. */
static mstar_status mlp_bench_step(void *self, int64_t bs, bool graphs, bool *replayed)
{
    return mlp_node_step(self, 0, (int32_t)bs, graphs, NULL, replayed);
}

static mstar_status mlp_bench_begin(void *self, int64_t bs, bool graphs, int32_t *slot)
{
    mstar_status st = mlp_node_begin(self, 0, (int32_t)bs, graphs, -1, NULL);
    mstar_slot_lease lease;
    *slot = st == MSTAR_OK && mlp_node_lease(self, &lease) ? lease.slot : -1;
    return st;
}

static mstar_status mlp_bench_launch(void *self)
{
    return mlp_node_launch(self);
}

static mstar_status mlp_bench_end(void *self)
{
    return mlp_node_end(self, NULL);
}

static void mlp_bench_set_profile(void *self, ref_profile *p)
{
    ref_mlp_set_profile(mlp_node_model(self), p);
}

mstar_status mstar_bench_graphs_mlp_run(const mstar_bench_graphs_options *o,
                                        mstar_bench_graphs_result *out)
{
    mstar_backend *b;
    mstar_status st = mstar_bench_graphs_start(o, out, &b);
    if (st != MSTAR_OK)
        return st;
    /* On the host backend (fp32 on one core) --quick takes a small model unless sizes were
     * given. */
    mlp_node_options no = { .model = ref_mlp_config_default(),
                            .max_rows = ROWS,
                            .batch_sizes = sizes,
                            .n_batch_sizes = NSIZES };
    if (o->quick && !o->cuda)
        no.model.layers = 2, no.model.hidden = 64;
    if (o->layers > 0)
        no.model.layers = o->layers;
    if (o->hidden > 0)
        no.model.hidden = o->hidden;
    snprintf(out->model, sizeof(out->model),
             "mlp: %d layers of rms_norm -> linear %dx%d -> silu -> residual add, %s",
             (int)no.model.layers, (int)no.model.hidden, (int)no.model.hidden,
             o->cuda ? "bf16 (fp32 accumulation)" : "fp32");
    mstar_bench_progress("graphs", "%s: mlp model, capture %d batch sizes", out->device,
                         (int)NSIZES);
    mlp_node *node = NULL;
    ref_profile *prof = NULL;
    st = mlp_node_create(b, &no, &node);
    if (st == MSTAR_OK)
        st = mlp_node_capture(node);
    if (st == MSTAR_OK && o->profile)
        st = ref_profile_create(b, 4 * (size_t)no.model.layers + 8, &prof);
    if (st == MSTAR_OK) {
        mstar_bench_graphs_model m = { .self = node,
                                       .walk = "mlp",
                                       .stream = mlp_node_stream(node),
                                       .runner = mlp_node_runner(node),
                                       .step = mlp_bench_step,
                                       .begin = mlp_bench_begin,
                                       .launch = mlp_bench_launch,
                                       .end = mlp_bench_end,
                                       .set_profile = mlp_bench_set_profile };
        st = mstar_bench_graphs_measure_all(&m, prof, out);
    }
    ref_profile_destroy(prof);
    mlp_node_destroy(node);
    mstar_backend_destroy(b);
    return st;
}
