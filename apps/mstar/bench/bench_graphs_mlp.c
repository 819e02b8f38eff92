/*
 * bench_graphs_mlp.c — `mstar bench graphs --model mlp [--layers L] [--hidden D]`: the mlp bench
 * model (models/ref/mlp_node.h; L layers of rms_norm → linear D×D → silu → residual add, bf16 on
 * CUDA, defaults 8 × 1024) through the graph runner at batch sizes 1, 8, 32 and 64, with the
 * columns of the reference model's table (bench_graphs.c): whole steps eager and replayed, the
 * prepared step's eager forward and runner replay, the bare graph launch, and their host times.
 * The same work as a PyTorch CUDA-graph runner's 8-layer MLP step, so the two can be put side by
 * side.
 */
#include "bench.h"

#include "core/vec.h"
#include "mlp_node.h"

#include <stdio.h>
#include <string.h>

#define NSIZES MSTAR_BENCH_GRAPHS_SIZES
#define ROWS   64

static const int64_t sizes[NSIZES] = { 1, 8, 32, 64 };

typedef mstar_bench_graphs_row row;

/* `iters` whole steps back to back, one wait at the end: wall µs per step. */
static mstar_status run_steps(mlp_node *node, int32_t bs, bool graphs, int iters, double *us)
{
    uint64_t t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        bool replayed;
        mstar_status st = mlp_node_step(node, 0, bs, graphs, NULL, &replayed);
        if (st != MSTAR_OK)
            return st;
        if (graphs && !replayed)
            return mstar_error_set(MSTAR_ESTATE, "bench: bs %d did not replay", bs);
    }
    mstar_status st = mstar_stream_synchronize(mlp_node_stream(node));
    *us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    return st;
}

/* One prepared step launched `iters` times: wall µs per launch and, for a replay, the mean host
 * µs of select (lease_slot of the step's slot) + stage + launch. */
static mstar_status run_launches(mlp_node *node, int32_t bs, bool graphs, int iters, double *us,
                                 double *overhead_us)
{
    bool replayed;
    mstar_status st = mlp_node_begin(node, 0, bs, graphs, -1, &replayed);
    if (st != MSTAR_OK)
        return st;
    mstar_slot_lease begun;
    if (graphs && !mlp_node_lease(node, &begun)) {
        mlp_node_end(node, NULL);
        return mstar_error_set(MSTAR_ESTATE, "bench: bs %d did not replay", bs);
    }
    uint64_t host = 0, t0 = mstar__now_ns();
    for (int i = 0; st == MSTAR_OK && i < iters; i++) {
        uint64_t a = mstar__now_ns();
        mstar_slot_lease lease;
        if (graphs && !mstar_graph_runner_lease_slot(mlp_node_runner(node), "mlp", bs, begun.slot,
                                                     bs, NULL, &lease))
            st = mstar_error_set(MSTAR_ESTATE, "bench: bs %d lost its bucket", bs);
        if (st == MSTAR_OK)
            st = mlp_node_launch(node);
        host += mstar__now_ns() - a;
    }
    mstar_status sync = mstar_stream_synchronize(mlp_node_stream(node));
    *us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    if (overhead_us != NULL)
        *overhead_us = (double)host / 1e3 / iters;
    mstar_status ended = mlp_node_end(node, NULL);
    return st != MSTAR_OK ? st : sync != MSTAR_OK ? sync : ended;
}

/* The floor: the bucket's slot-0 graph launched `iters` times back to back. */
static mstar_status run_raw(mlp_node *node, int64_t bs, int iters, double *us, double *launch_us,
                            size_t *nodes)
{
    mstar_graph_runner *r = mlp_node_runner(node);
    mstar_slot_lease lease;
    if (!mstar_graph_runner_lease_slot(r, "mlp", bs, 0, bs, NULL, &lease))
        return mstar_error_set(MSTAR_ENOENT, "bench: no bucket for bs %lld", (long long)bs);
    mstar_graph *graph =
        (mstar_graph *)mstar_graph_slot_graph(mstar_graph_runner_slot_for(r, &lease));
    mstar_stream *s = mlp_node_stream(node);
    uint64_t in_launch = 0, t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        uint64_t a = mstar__now_ns();
        mstar_status st = mstar_graph_launch(graph, s);
        in_launch += mstar__now_ns() - a;
        if (st != MSTAR_OK)
            return st;
    }
    mstar_status st = mstar_stream_synchronize(s);
    *us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    *launch_us = (double)in_launch / 1e3 / iters;
    *nodes = mstar_graph_node_count(graph);
    return st;
}

static mstar_status measure(mlp_node *node, int32_t bs, int iters, row *out)
{
    double ignored;
    int warm = iters < 3 ? 1 : 3;
    out->bs = bs;
    mstar_status st = MSTAR_OK;
    /* Each measurement runs `warm` times first, untimed. */
    for (int pass = 0; st == MSTAR_OK && pass < 2; pass++) {
        int n = pass == 0 ? warm : iters;
        if ((st = run_steps(node, bs, false, n, pass ? &out->eager_step_us : &ignored)) !=
                MSTAR_OK ||
            (st = run_steps(node, bs, true, n, pass ? &out->replay_step_us : &ignored)) !=
                MSTAR_OK ||
            (st = run_launches(node, bs, false, n, pass ? &out->eager_fwd_us : &ignored, NULL)) !=
                MSTAR_OK ||
            (st = run_launches(node, bs, true, n, pass ? &out->runner_us : &ignored,
                               &out->overhead_us)) != MSTAR_OK)
            break;
        st = run_raw(node, bs, n, pass ? &out->raw_us : &ignored, &out->launch_us,
                     &out->graph_nodes);
    }
    return st;
}

/* One eager step with each op of its forward timed. */
static mstar_status profile_step(mlp_node *node, ref_profile *p, int32_t bs,
                                 mstar_bench_graphs_profile *out)
{
    ref_profile_reset(p);
    ref_mlp_set_profile(mlp_node_model(node), p);
    mstar_status st = mlp_node_step(node, 0, bs, false, NULL, NULL);
    ref_mlp_set_profile(mlp_node_model(node), NULL);
    mstar_status sync = mstar_stream_synchronize(mlp_node_stream(node));
    st = st != MSTAR_OK ? st : sync;
    return st != MSTAR_OK ? st : mstar_bench_graphs_profile_take(p, bs, out);
}

mstar_status mstar_bench_graphs_mlp_run(const mstar_bench_graphs_options *o,
                                        mstar_bench_graphs_result *out)
{
    memset(out, 0, sizeof(*out));
    mstar_device dev = { o->cuda ? MSTAR_DEVICE_CUDA : MSTAR_DEVICE_CPU, 0 };
    mstar_backend *b;
    mstar_status st = mstar_backend_create(dev, &b);
    if (st != MSTAR_OK)
        return st;
    snprintf(out->device, sizeof(out->device), "%s", mstar_backend_name(b));
    out->cuda = o->cuda;
    /* The host backend computes in fp32 on one core: far fewer iterations, and --quick a small
     * model unless sizes were given. */
    int iters = o->cuda ? (o->quick ? 50 : 500) : (o->quick ? 2 : 8);
    out->iters = iters;
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
    for (size_t i = 0; st == MSTAR_OK && i < NSIZES; i++) {
        mstar_bench_progress("graphs", "bs %lld, %d iterations", (long long)sizes[i], iters);
        st = measure(node, (int32_t)sizes[i], iters, &out->rows[i]);
        if (st == MSTAR_OK && prof != NULL)
            st = profile_step(node, prof, (int32_t)sizes[i], &out->profiles[i]);
    }
    out->profiled = st == MSTAR_OK && prof != NULL;
    ref_profile_destroy(prof);
    mlp_node_destroy(node);
    mstar_backend_destroy(b);
    return st;
}
