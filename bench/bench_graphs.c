/*
 * bench_graphs.c — `mstar bench graphs [--device host|cuda] [--json] [--quick]`: the reference
 * decode model (examples/ref_node.h, default size) through the graph runner at batch sizes 1, 8,
 * 32 and 64.
 *
 * Per batch size, with 64 requests prefilled (64 tokens each) and frozen decode steps (commit
 * false: every step rewrites the same positions, so every iteration does the same work):
 *   - eager step: the whole step run eagerly (declare, admit, plan, preprocess, forward);
 *   - replayed step: the whole step through the runner (lease, pad, declare, admit, plan,
 *     preprocess, stage, launch, commit, release);
 *   - host overhead: the runner's select + stage + launch (lease_slot, run_forward) per step;
 * against the floor measured in the same run on the same graph:
 *   - raw replay: mstar_graph_launch of the bucket's graph in a tight loop (cudaGraphLaunch on
 *     CUDA, the recorded calls on the host backend), and the host time of one launch call.
 * Steps are timed back to back with one wait at the end (no per-step wait), as a serving loop
 * that consumes its outputs on the device would run them. The bars: replayed step at most
 * 1.05x the raw replay, host overhead at most 1.5x the raw launch call (on an H200).
 */
#include "bench.h"

#include "core/vec.h"
#include "mstar/mstar.h"
#include "ref_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUESTS 64
#define PROMPT   64

static const int64_t sizes[] = { 1, 8, 32, 64 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct row {
    int64_t bs;
    double eager_us, replay_us, raw_us; /* per step / per replay, wall */
    double overhead_us, launch_us;      /* host time: select + stage + launch; one launch */
    double prepare_us;                  /* host time of the rest of the replayed step */
} row;

static int usage(void)
{
    fprintf(stderr, "usage: mstar bench graphs [--device host|cuda] [--json] [--quick]\n");
    return 2;
}

/* `iters` frozen decode steps of bs rows back to back, one wait at the end: wall µs per step,
 * and (replayed) the mean host µs of select + launch and of the rest. */
static mstar_status run_steps(ref_node *node, ref_step_request *req, int iters, double *wall_us,
                              double *overhead_us, double *prepare_us)
{
    uint64_t overhead = 0, prepare = 0, t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        ref_step_timing t;
        mstar_status st = ref_node_step(node, req, NULL, NULL, &t);
        if (st != MSTAR_OK)
            return st;
        if (req->use_graphs && !t.replayed)
            return mstar_error_set(MSTAR_ESTATE, "bench: bs %d did not replay", req->n);
        overhead += t.select_ns + t.launch_ns;
        prepare += t.prepare_ns + t.finish_ns;
    }
    mstar_status st = mstar_stream_synchronize(ref_node_stream(node));
    *wall_us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    if (overhead_us != NULL)
        *overhead_us = (double)overhead / 1e3 / iters;
    if (prepare_us != NULL)
        *prepare_us = (double)prepare / 1e3 / iters;
    return st;
}

/* The floor: the bucket's slot-0 graph launched `iters` times back to back. */
static mstar_status run_raw(ref_node *node, int64_t bs, int iters, double *wall_us,
                            double *launch_us)
{
    mstar_slot_lease lease;
    if (!mstar_graph_runner_lease_slot(ref_node_runner(node), "decode", bs, 0, bs, NULL, &lease))
        return mstar_error_set(MSTAR_ENOENT, "bench: no bucket for bs %lld", (long long)bs);
    const mstar_graph_slot *slot = mstar_graph_runner_slot_for(ref_node_runner(node), &lease);
    mstar_graph *graph = (mstar_graph *)mstar_graph_slot_graph(slot);
    mstar_stream *s = ref_node_stream(node);
    uint64_t in_launch = 0, t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        uint64_t a = mstar__now_ns();
        mstar_status st = mstar_graph_launch(graph, s);
        in_launch += mstar__now_ns() - a;
        if (st != MSTAR_OK)
            return st;
    }
    mstar_status st = mstar_stream_synchronize(s);
    *wall_us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    *launch_us = (double)in_launch / 1e3 / iters;
    return st;
}

static mstar_status measure(ref_node *node, int64_t bs, int iters, const int64_t *reqs,
                            const int32_t *ones, const int32_t *tokens, row *out)
{
    ref_step_request req = { .walk = "decode",
                             .rows = reqs,
                             .spans = ones,
                             .n = (int32_t)bs,
                             .tokens = tokens,
                             .use_graphs = false,
                             .commit = false,
                             .slot = -1 };
    double ignored;
    int warm = iters < 3 ? 1 : 3;
    out->bs = bs;
    mstar_status st = run_steps(node, &req, warm, &ignored, NULL, NULL);
    if (st == MSTAR_OK)
        st = run_steps(node, &req, iters, &out->eager_us, NULL, NULL);
    req.use_graphs = true;
    if (st == MSTAR_OK)
        st = run_steps(node, &req, warm, &ignored, NULL, NULL);
    if (st == MSTAR_OK)
        st = run_steps(node, &req, iters, &out->replay_us, &out->overhead_us, &out->prepare_us);
    if (st == MSTAR_OK)
        st = run_raw(node, bs, warm, &ignored, &ignored);
    if (st == MSTAR_OK)
        st = run_raw(node, bs, iters, &out->raw_us, &out->launch_us);
    return st;
}

/* 64 requests with 64-token prompts, prefilled eagerly. */
static mstar_status prefill(ref_node *node, int64_t *reqs, int32_t *tokens, int32_t vocab)
{
    int32_t prompt[PROMPT], len = PROMPT, next;
    for (int32_t i = 0; i < REQUESTS; i++) {
        reqs[i] = i;
        for (int32_t j = 0; j < PROMPT; j++)
            prompt[j] = (i * 131 + j * 17) % vocab;
        ref_step_request r = { .walk = "prefill",
                               .rows = &reqs[i],
                               .spans = &len,
                               .n = 1,
                               .tokens = prompt,
                               .use_graphs = false,
                               .commit = true,
                               .slot = -1 };
        mstar_status st = ref_node_open(node, reqs[i]);
        if (st == MSTAR_OK)
            st = ref_node_step(node, &r, NULL, &next, NULL);
        if (st != MSTAR_OK)
            return st;
        tokens[i] = next;
    }
    return MSTAR_OK;
}

static void print_rows(const char *device, const row *rows, size_t n, int iters, bool json)
{
    if (json) {
        printf("{\"suite\":\"graphs\",\"device\":\"%s\",\"iterations\":%d,\"results\":[", device,
               iters);
        for (size_t i = 0; i < n; i++) {
            const row *r = &rows[i];
            printf("%s{\"bs\":%lld,\"eager_step_us\":%.2f,\"replay_step_us\":%.2f,"
                   "\"raw_replay_us\":%.2f,\"replay_over_raw\":%.3f,\"host_overhead_us\":%.2f,"
                   "\"raw_launch_us\":%.2f,\"overhead_over_launch\":%.3f,"
                   "\"step_rest_us\":%.2f,\"eager_over_replay\":%.2f}",
                   i ? "," : "", (long long)r->bs, r->eager_us, r->replay_us, r->raw_us,
                   r->replay_us / r->raw_us, r->overhead_us, r->launch_us,
                   r->overhead_us / r->launch_us, r->prepare_us, r->eager_us / r->replay_us);
        }
        printf("]}\n");
        return;
    }
    printf("graphs: the reference decode model (%s), frozen decode steps, %d iterations each\n\n",
           device, iters);
    printf("  %4s %12s %12s %12s %9s %12s %12s %9s %11s\n", "bs", "eager us", "replay us", "raw us",
           "vs raw", "overhead us", "launch us", "vs launch", "eager/rep");
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        printf("  %4lld %12.1f %12.1f %12.1f %8.3fx %12.2f %12.2f %8.2fx %10.2fx\n",
               (long long)r->bs, r->eager_us, r->replay_us, r->raw_us, r->replay_us / r->raw_us,
               r->overhead_us, r->launch_us, r->overhead_us / r->launch_us,
               r->eager_us / r->replay_us);
    }
    printf("\n  replay us: a whole replayed step; raw us: one launch of the same graph back to "
           "back (the floor).\n  overhead us: the runner's select + stage + launch host time per "
           "step; launch us: one raw launch call.\n  bars (H200): replay <= 1.05x raw, overhead "
           "<= 1.5x launch.\n");
}

int mstar_bench_graphs(int argc, char **argv)
{
    bool json = false, quick = false, cuda = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "host") == 0 || strcmp(argv[i + 1], "cuda") == 0))
            cuda = strcmp(argv[++i], "cuda") == 0;
        else
            return usage();
    }
    mstar_device dev = { cuda ? MSTAR_DEVICE_CUDA : MSTAR_DEVICE_CPU, 0 };
    mstar_backend *b;
    if (mstar_backend_create(dev, &b) != MSTAR_OK) {
        fprintf(stderr, "mstar bench graphs: %s\n", mstar_last_error());
        return 1;
    }
    /* The host backend computes in fp32 on one core: far fewer iterations. */
    int iters = cuda ? (quick ? 50 : 500) : (quick ? 2 : 8);
    ref_capture_config captures[] = {
        { .walk = "decode", .batch_sizes = sizes, .n_batch_sizes = NSIZES },
    };
    ref_node_options o = { .model = ref_model_config_default(),
                           .kv = { .num_pages = REQUESTS * (PROMPT / 16 + 1) + 1,
                                   .page_size = 16,
                                   .num_labels = 1,
                                   .max_seq_len = 256 },
                           .captures = captures,
                           .n_captures = 1 };
    ref_node *node = NULL;
    int64_t reqs[REQUESTS];
    int32_t tokens[REQUESTS], ones[REQUESTS];
    for (int i = 0; i < REQUESTS; i++)
        ones[i] = 1;
    row rows[NSIZES];
    mstar_status st = ref_node_create(b, &o, &node);
    if (st == MSTAR_OK)
        st = ref_node_capture(node);
    if (st == MSTAR_OK)
        st = prefill(node, reqs, tokens, o.model.vocab);
    for (size_t i = 0; st == MSTAR_OK && i < NSIZES; i++)
        st = measure(node, sizes[i], iters, reqs, ones, tokens, &rows[i]);
    if (st != MSTAR_OK)
        fprintf(stderr, "mstar bench graphs: %s\n", mstar_last_error());
    else
        print_rows(mstar_backend_name(b), rows, NSIZES, iters, json);
    ref_node_destroy(node);
    mstar_backend_destroy(b);
    return st == MSTAR_OK ? 0 : 1;
}
