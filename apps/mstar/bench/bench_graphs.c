/*
 * bench_graphs.c — `mstar bench graphs [--device host|cuda] [--json] [--quick] [--profile]
 * [--model ref|mlp [--layers L] [--hidden D]]`: the reference decode model (models/ref/ref_node.h,
 * default size) through the graph runner at batch sizes 1, 8, 32 and 64, with 64 requests
 * prefilled (64 tokens each) and frozen decode steps (commit false: every step rewrites the same
 * positions, so every iteration does the same work). --quick, for tests (sanitizer builds
 * included), takes the small model and 16-token prompts. --model mlp runs the mlp bench model
 * instead (bench_graphs_mlp.c). --profile adds, per batch size, the time of each op of one eager
 * step (CUDA events around each op on CUDA, wall time on the host).
 *
 * Per batch size, each timed back to back with one wait at the end (as a serving loop that
 * consumes its outputs on the device runs them):
 *   - step, eager / replayed: a whole step (declare, admit, plan, preprocess, forward or
 *     lease + stage + replay, commit, release);
 *   - forward, eager: the prepared step's eager forward enqueued again and again;
 *   - replay, runner: the prepared step replayed through the runner again and again — select
 *     (lease_slot), stage and launch (run_forward); its host time is the runner's host overhead.
 *     The node's preprocess built the tokens in the slot's static input (zero-copy staging), so
 *     staging enqueues nothing, and the graph records its slot's replay event itself (G-4);
 * against the floor measured in the same run on the same graph:
 *   - replay, raw: mstar_graph_launch of the bucket's graph in a tight loop (cudaGraphLaunch on
 *     CUDA, the recorded calls on the host backend), and the host time of one launch call.
 * The bars, on an H200: runner replay at most 1.05x the raw replay, host overhead at most
 * 1.5x the raw launch call.
 */
#include "bench.h"

#include "core/json.h"
#include "core/vec.h"
#include "mstar/mstar.h"
#include "ref_node.h"
#include "ref_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUESTS 64
#define PROMPT   64

#define NSIZES MSTAR_BENCH_GRAPHS_SIZES
static const int64_t sizes[NSIZES] = { 1, 8, 32, 64 };

typedef mstar_bench_graphs_row row;

static int usage(void)
{
    fprintf(stderr, "usage: mstar bench graphs [--device host|cuda] [--json] [--quick] [--profile]"
                    "\n                          [--model ref|mlp [--layers L] [--hidden D]]\n");
    return 2;
}

/* `iters` whole frozen steps back to back, one wait at the end: wall µs per step. */
static mstar_status run_steps(const mstar_bench_graphs_model *m, int64_t bs, bool graphs, int iters,
                              double *wall_us)
{
    uint64_t t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        bool replayed = false;
        mstar_status st = m->step(m->self, bs, graphs, &replayed);
        if (st != MSTAR_OK)
            return st;
        if (graphs && !replayed)
            return mstar_error_set(MSTAR_ESTATE, "bench: bs %lld did not replay", (long long)bs);
    }
    mstar_status st = mstar_stream_synchronize(m->stream);
    *wall_us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    return st;
}

/* One prepared step re-launched `iters` times, one wait at the end: wall µs per launch, and for
 * a replay the mean host µs of select (lease_slot of the step's slot) + stage + launch. */
static mstar_status run_launches(const mstar_bench_graphs_model *m, int64_t bs, bool graphs,
                                 int iters, double *wall_us, double *overhead_us)
{
    int32_t slot = -1;
    mstar_status st = m->begin(m->self, bs, graphs, &slot);
    if (st != MSTAR_OK)
        return st;
    if (graphs && slot < 0) {
        m->end(m->self);
        return mstar_error_set(MSTAR_ESTATE, "bench: bs %lld did not replay", (long long)bs);
    }
    uint64_t host = 0, t0 = mstar__now_ns();
    for (int i = 0; st == MSTAR_OK && i < iters; i++) {
        uint64_t a = mstar__now_ns();
        mstar_slot_lease lease;
        if (graphs &&
            !mstar_graph_runner_lease_slot(m->runner, m->walk, bs, slot, bs, NULL, &lease))
            st = mstar_error_set(MSTAR_ESTATE, "bench: bs %lld lost its bucket", (long long)bs);
        if (st == MSTAR_OK)
            st = m->launch(m->self);
        host += mstar__now_ns() - a;
    }
    mstar_status sync = mstar_stream_synchronize(m->stream);
    *wall_us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    if (overhead_us != NULL)
        *overhead_us = (double)host / 1e3 / iters;
    mstar_status ended = m->end(m->self);
    return st != MSTAR_OK ? st : sync != MSTAR_OK ? sync : ended;
}

/* The floor: the bucket's slot-0 graph launched `iters` times back to back. */
static mstar_status run_raw(const mstar_bench_graphs_model *m, int64_t bs, int iters,
                            double *wall_us, double *launch_us, size_t *nodes)
{
    mstar_slot_lease lease;
    if (!mstar_graph_runner_lease_slot(m->runner, m->walk, bs, 0, bs, NULL, &lease))
        return mstar_error_set(MSTAR_ENOENT, "bench: no bucket for bs %lld", (long long)bs);
    const mstar_graph_slot *slot = mstar_graph_runner_slot_for(m->runner, &lease);
    mstar_graph *graph = (mstar_graph *)mstar_graph_slot_graph(slot);
    uint64_t in_launch = 0, t0 = mstar__now_ns();
    for (int i = 0; i < iters; i++) {
        uint64_t a = mstar__now_ns();
        mstar_status st = mstar_graph_launch(graph, m->stream);
        in_launch += mstar__now_ns() - a;
        if (st != MSTAR_OK)
            return st;
    }
    mstar_status st = mstar_stream_synchronize(m->stream);
    *wall_us = (double)(mstar__now_ns() - t0) / 1e3 / iters;
    *launch_us = (double)in_launch / 1e3 / iters;
    *nodes = mstar_graph_node_count(graph);
    return st;
}

static mstar_status measure(const mstar_bench_graphs_model *m, int64_t bs, int iters, row *out)
{
    double ignored;
    int warm = iters < 3 ? 1 : 3;
    out->bs = bs;
    mstar_status st = MSTAR_OK;
    /* Each measurement runs `warm` times first, untimed. */
    for (int pass = 0; st == MSTAR_OK && pass < 2; pass++) {
        int n = pass == 0 ? warm : iters;
        if ((st = run_steps(m, bs, false, n, pass ? &out->eager_step_us : &ignored)) != MSTAR_OK ||
            (st = run_steps(m, bs, true, n, pass ? &out->replay_step_us : &ignored)) != MSTAR_OK ||
            (st = run_launches(m, bs, false, n, pass ? &out->eager_fwd_us : &ignored, NULL)) !=
                MSTAR_OK ||
            (st = run_launches(m, bs, true, n, pass ? &out->runner_us : &ignored,
                               &out->overhead_us)) != MSTAR_OK)
            break;
        st = run_raw(m, bs, n, pass ? &out->raw_us : &ignored, &out->launch_us, &out->graph_nodes);
    }
    return st;
}

/* A profile's ops (after its stream has run them) as a result's rows. */
static mstar_status profile_take(const ref_profile *p, int64_t bs, mstar_bench_graphs_profile *out)
{
    ref_profile_row rows[MSTAR_BENCH_GRAPHS_MAX_OPS];
    size_t n;
    mstar_status st = ref_profile_summary(p, rows, MSTAR_BENCH_GRAPHS_MAX_OPS, &n);
    if (st != MSTAR_OK)
        return st;
    out->bs = bs;
    out->n_ops = n;
    for (size_t i = 0; i < n; i++)
        out->ops[i] = (mstar_bench_graphs_op){ rows[i].op, rows[i].calls, rows[i].total_us };
    return MSTAR_OK;
}

/* One eager step with each op of its forward timed (the measurements before warmed it up). */
static mstar_status profile_step(const mstar_bench_graphs_model *m, ref_profile *p, int64_t bs,
                                 mstar_bench_graphs_profile *out)
{
    bool replayed;
    ref_profile_reset(p);
    m->set_profile(m->self, p);
    mstar_status st = m->step(m->self, bs, false, &replayed);
    m->set_profile(m->self, NULL);
    mstar_status sync = mstar_stream_synchronize(m->stream);
    st = st != MSTAR_OK ? st : sync;
    return st != MSTAR_OK ? st : profile_take(p, bs, out);
}

mstar_status mstar_bench_graphs_measure_all(const mstar_bench_graphs_model *m, ref_profile *prof,
                                            mstar_bench_graphs_result *out)
{
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; st == MSTAR_OK && i < NSIZES; i++) {
        mstar_bench_progress("graphs", "bs %lld, %d iterations", (long long)sizes[i], out->iters);
        st = measure(m, sizes[i], out->iters, &out->rows[i]);
        if (st == MSTAR_OK && prof != NULL)
            st = profile_step(m, prof, sizes[i], &out->profiles[i]);
    }
    out->profiled = st == MSTAR_OK && prof != NULL;
    return st;
}

mstar_status mstar_bench_graphs_start(const mstar_bench_graphs_options *o,
                                      mstar_bench_graphs_result *out, mstar_backend **b)
{
    memset(out, 0, sizeof(*out));
    mstar_device dev = { o->cuda ? MSTAR_DEVICE_CUDA : MSTAR_DEVICE_CPU, 0 };
    mstar_status st = mstar_backend_create(dev, b);
    if (st != MSTAR_OK)
        return st;
    snprintf(out->device, sizeof(out->device), "%s", mstar_backend_name(*b));
    out->cuda = o->cuda;
    /* The host backend computes in fp32 on one core: far fewer iterations. */
    out->iters = o->cuda ? (o->quick ? 50 : 500) : (o->quick ? 2 : 8);
    return MSTAR_OK;
}

/* The reference node under the suite: frozen decode steps of one token per row over the first
 * bs prefilled requests. */
typedef struct ref_bench {
    ref_node *node;
    int64_t reqs[REQUESTS];
    int32_t tokens[REQUESTS], ones[REQUESTS];
} ref_bench;

static ref_step_request decode_request(const ref_bench *rb, int64_t bs, bool graphs)
{
    return (ref_step_request){ .walk = "decode",
                               .rows = rb->reqs,
                               .spans = rb->ones,
                               .n = (int32_t)bs,
                               .tokens = rb->tokens,
                               .use_graphs = graphs,
                               .commit = false,
                               .slot = -1 };
}

static mstar_status ref_bench_step(void *self, int64_t bs, bool graphs, bool *replayed)
{
    ref_bench *rb = self;
    ref_step_request r = decode_request(rb, bs, graphs);
    ref_step_timing t;
    mstar_status st = ref_node_step(rb->node, &r, NULL, NULL, &t);
    *replayed = st == MSTAR_OK && t.replayed;
    return st;
}

static mstar_status ref_bench_begin(void *self, int64_t bs, bool graphs, int32_t *slot)
{
    ref_bench *rb = self;
    ref_step_request r = decode_request(rb, bs, graphs);
    ref_step_timing t;
    mstar_status st = ref_node_begin(rb->node, &r, &t);
    *slot = st == MSTAR_OK && t.replayed ? t.slot : -1;
    return st;
}

static mstar_status ref_bench_launch(void *self)
{
    return ref_node_launch(((ref_bench *)self)->node, NULL);
}

static mstar_status ref_bench_end(void *self)
{
    return ref_node_end(((ref_bench *)self)->node, NULL, NULL, NULL);
}

static void ref_bench_set_profile(void *self, ref_profile *p)
{
    ref_model_set_profile(ref_node_model(((ref_bench *)self)->node), p);
}

/* REQUESTS requests with prompts of `len` (<= PROMPT) tokens, prefilled eagerly. */
static mstar_status prefill(ref_node *node, int32_t len, int64_t *reqs, int32_t *tokens,
                            int32_t vocab)
{
    int32_t prompt[PROMPT], next;
    for (int32_t i = 0; i < REQUESTS; i++) {
        reqs[i] = i;
        for (int32_t j = 0; j < len; j++)
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

void mstar_bench_graphs_json(const mstar_bench_graphs_result *r, FILE *out)
{
    fprintf(out, "{\"suite\":\"graphs\",\"device\":");
    mstar__json_string(out, r->device);
    fprintf(out, ",\"model\":");
    mstar__json_string(out, r->model);
    fprintf(out, ",\"iterations\":%d,\"results\":[", r->iters);
    for (size_t i = 0; i < NSIZES; i++) {
        const row *w = &r->rows[i];
        fprintf(out, "%s{\"bs\":%lld", i ? "," : "", (long long)w->bs);
        mstar_bench_json_field(out, "eager_step_us", w->eager_step_us, 5);
        mstar_bench_json_field(out, "replay_step_us", w->replay_step_us, 5);
        mstar_bench_json_field(out, "eager_forward_us", w->eager_fwd_us, 5);
        mstar_bench_json_field(out, "runner_replay_us", w->runner_us, 5);
        mstar_bench_json_field(out, "raw_replay_us", w->raw_us, 5);
        mstar_bench_json_field(out, "runner_over_raw", w->runner_us / w->raw_us, 4);
        mstar_bench_json_field(out, "host_overhead_us", w->overhead_us, 5);
        mstar_bench_json_field(out, "raw_launch_us", w->launch_us, 5);
        mstar_bench_json_field(out, "overhead_over_launch", w->overhead_us / w->launch_us, 4);
        mstar_bench_json_field(out, "eager_over_runner", w->eager_fwd_us / w->runner_us, 4);
        fprintf(out, ",\"graph_nodes\":%zu", w->graph_nodes);
        fprintf(out, "}");
    }
    fprintf(out, "]");
    if (r->profiled) {
        fprintf(out, ",\"profile\":[");
        for (size_t i = 0; i < NSIZES; i++) {
            const mstar_bench_graphs_profile *p = &r->profiles[i];
            fprintf(out, "%s{\"bs\":%lld,\"ops\":[", i ? "," : "", (long long)p->bs);
            for (size_t k = 0; k < p->n_ops; k++) {
                fprintf(out, "%s{\"op\":", k ? "," : "");
                mstar__json_string(out, p->ops[k].op);
                fprintf(out, ",\"calls\":%d", p->ops[k].calls);
                mstar_bench_json_field(out, "total_us", p->ops[k].total_us, 5);
                fprintf(out, "}");
            }
            fprintf(out, "]}");
        }
        fprintf(out, "]");
    }
    fprintf(out, "}\n");
}

size_t mstar_bench_graphs_targets(const mstar_bench_graphs_result *r, mstar_bench_target *out)
{
    size_t over = 0, replay = 0; /* the worst batch size of each */
    for (size_t i = 1; i < NSIZES; i++) {
        const row *w = &r->rows[i], *o = &r->rows[over], *p = &r->rows[replay];
        over = w->overhead_us / w->launch_us > o->overhead_us / o->launch_us ? i : over;
        replay = w->runner_us / w->raw_us > p->runner_us / p->raw_us ? i : replay;
    }
    const row *o = &r->rows[over], *p = &r->rows[replay];
    double ov = o->overhead_us / o->launch_us, rp = p->runner_us / p->raw_us;
    mstar_bench_target t[2] = {
        { "runner host overhead / raw launch call (worst bs)", "<= 1.5x", ov, "",
          !r->cuda    ? MSTAR_BENCH_NOT_APPLICABLE
          : ov <= 1.5 ? MSTAR_BENCH_MET
                      : MSTAR_BENCH_NOT_MET },
        { "runner replay / raw replay (worst bs)", "<= 1.05x", rp, "",
          !r->cuda     ? MSTAR_BENCH_NOT_APPLICABLE
          : rp <= 1.05 ? MSTAR_BENCH_MET
                       : MSTAR_BENCH_NOT_MET },
    };
    snprintf(t[0].shown, sizeof(t[0].shown), "%.2fx (bs %lld)", ov, (long long)o->bs);
    snprintf(t[1].shown, sizeof(t[1].shown), "%.3fx (bs %lld)", rp, (long long)p->bs);
    out[0] = t[0];
    out[1] = t[1];
    return 2;
}

static void print_profile(const mstar_bench_graphs_result *r)
{
    printf("\n  profile: one eager step per batch size, %s per op\n",
           r->cuda ? "GPU time (CUDA events)" : "wall time");
    for (size_t i = 0; i < NSIZES; i++) {
        const mstar_bench_graphs_profile *p = &r->profiles[i];
        double total = 0.0;
        for (size_t k = 0; k < p->n_ops; k++)
            total += p->ops[k].total_us;
        printf("\n  bs %lld: %.1f us in ops\n  %-28s %6s %11s %7s\n", (long long)p->bs, total, "op",
               "calls", "total us", "share");
        for (size_t k = 0; k < p->n_ops; k++)
            printf("  %-28s %6d %11.1f %6.1f%%\n", p->ops[k].op, p->ops[k].calls,
                   p->ops[k].total_us, total > 0 ? 100.0 * p->ops[k].total_us / total : 0.0);
    }
}

static void print_table(const mstar_bench_graphs_result *r)
{
    printf("graphs: %s (%s), %d iterations each\n  model: %s\n\n",
           strncmp(r->model, "mlp", 3) == 0 ? "the mlp bench model, frozen steps"
                                            : "the reference decode model, frozen decode steps",
           r->device, r->iters, r->model);
    printf("  %4s %11s %11s %11s %11s %11s %8s %11s %11s %8s %6s\n", "bs", "step eager",
           "step replay", "fwd eager", "replay", "raw replay", "vs raw", "overhead", "raw launch",
           "vs launch", "nodes");
    for (size_t i = 0; i < NSIZES; i++) {
        const row *w = &r->rows[i];
        printf("  %4lld %11.1f %11.1f %11.1f %11.1f %11.1f %7.3fx %11.2f %11.2f %7.2fx %6zu\n",
               (long long)w->bs, w->eager_step_us, w->replay_step_us, w->eager_fwd_us, w->runner_us,
               w->raw_us, w->runner_us / w->raw_us, w->overhead_us, w->launch_us,
               w->overhead_us / w->launch_us, w->graph_nodes);
    }
    printf(
        "\n  microseconds per step (wall, back to back). step: a whole step; fwd eager: the "
        "eager forward\n  of a prepared step; replay: the same step replayed through the "
        "runner (select + stage +\n  launch); raw replay: the same graph launched bare (the "
        "floor). overhead: the runner's host\n  time per replay; raw launch: the host time of "
        "one bare launch call. nodes: the graph's nodes\n  (kernels and copies on CUDA, recorded "
        "calls on the host).\n  bars (H200): replay <= 1.05x raw replay, overhead <= 1.5x raw "
        "launch.\n");
    if (r->profiled)
        print_profile(r);
    mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
    mstar_bench_targets_print(t, mstar_bench_graphs_targets(r, t), stdout);
}

mstar_status mstar_bench_graphs_run(const mstar_bench_graphs_options *opts,
                                    mstar_bench_graphs_result *out)
{
    if (opts->mlp)
        return mstar_bench_graphs_mlp_run(opts, out);
    mstar_backend *b;
    mstar_status st = mstar_bench_graphs_start(opts, out, &b);
    if (st != MSTAR_OK)
        return st;
    /* --quick (for tests, sanitizer builds included) takes the small model and short prompts. */
    int32_t prompt = opts->quick ? 16 : PROMPT;
    ref_capture_config captures[] = {
        { .walk = "decode", .batch_sizes = sizes, .n_batch_sizes = NSIZES },
    };
    ref_node_options o = { .model =
                               opts->quick ? ref_model_config_small() : ref_model_config_default(),
                           .kv = { .num_pages = REQUESTS * (prompt / 16 + 1) + 1,
                                   .page_size = 16,
                                   .num_labels = 1,
                                   .max_seq_len = 256 },
                           .captures = captures,
                           .n_captures = 1 };
    ref_bench rb = { .node = NULL };
    for (int i = 0; i < REQUESTS; i++)
        rb.ones[i] = 1;
    snprintf(out->model, sizeof(out->model),
             "vocab %d, hidden %d, %d heads x %d, MLP %d, %d layers; %d requests, %d-token prompts",
             (int)o.model.vocab, (int)o.model.hidden, (int)o.model.heads, (int)o.model.head_dim,
             (int)o.model.mlp, (int)o.model.layers, REQUESTS, (int)prompt);
    mstar_bench_progress("graphs", "%s: capture %d batch sizes, prefill %d requests", out->device,
                         (int)NSIZES, REQUESTS);
    st = ref_node_create(b, &o, &rb.node);
    if (st == MSTAR_OK)
        st = ref_node_capture(rb.node);
    if (st == MSTAR_OK)
        st = prefill(rb.node, prompt, rb.reqs, rb.tokens, o.model.vocab);
    ref_profile *prof = NULL;
    if (st == MSTAR_OK && opts->profile)
        st = ref_profile_create(b, 256, &prof);
    if (st == MSTAR_OK) {
        mstar_bench_graphs_model m = { .self = &rb,
                                       .walk = "decode",
                                       .stream = ref_node_stream(rb.node),
                                       .runner = ref_node_runner(rb.node),
                                       .step = ref_bench_step,
                                       .begin = ref_bench_begin,
                                       .launch = ref_bench_launch,
                                       .end = ref_bench_end,
                                       .set_profile = ref_bench_set_profile };
        st = mstar_bench_graphs_measure_all(&m, prof, out);
    }
    ref_profile_destroy(prof);
    ref_node_destroy(rb.node);
    mstar_backend_destroy(b);
    return st;
}

/* A positive size argument. */
static bool size_arg(const char *text, int32_t *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 1 || v > 65536)
        return false;
    *out = (int32_t)v;
    return true;
}

int mstar_bench_graphs(int argc, char **argv)
{
    bool json = false;
    mstar_bench_graphs_options o = { 0 };
    for (int i = 1; i < argc; i++) {
        bool more = i + 1 < argc;
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--quick") == 0)
            o.quick = true;
        else if (strcmp(argv[i], "--profile") == 0)
            o.profile = true;
        else if (strcmp(argv[i], "--device") == 0 && more &&
                 (strcmp(argv[i + 1], "host") == 0 || strcmp(argv[i + 1], "cuda") == 0))
            o.cuda = strcmp(argv[++i], "cuda") == 0;
        else if (strcmp(argv[i], "--model") == 0 && more &&
                 (strcmp(argv[i + 1], "ref") == 0 || strcmp(argv[i + 1], "mlp") == 0))
            o.mlp = strcmp(argv[++i], "mlp") == 0;
        else if (strcmp(argv[i], "--layers") == 0 && more && size_arg(argv[i + 1], &o.layers))
            i++;
        else if (strcmp(argv[i], "--hidden") == 0 && more && size_arg(argv[i + 1], &o.hidden))
            i++;
        else
            return usage();
    }
    if ((o.layers || o.hidden) && !o.mlp)
        return usage();
    mstar_bench_progress_enable(!json);
    mstar_bench_graphs_result r;
    if (mstar_bench_graphs_run(&o, &r) != MSTAR_OK) {
        fprintf(stderr, "mstar bench graphs: %s\n", mstar_last_error());
        return 1;
    }
    if (json)
        mstar_bench_graphs_json(&r, stdout);
    else
        print_table(&r);
    return 0;
}
