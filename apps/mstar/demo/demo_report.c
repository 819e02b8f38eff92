/*
 * demo_report.c — progress while the demo runs (stderr: one updating line on a terminal, a line
 * every two seconds otherwise) and the summary at the end (stdout: text, or JSON with --json).
 */
#include "demo_run.h"

#include "core/json.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- progress ------------------------------------------------------------------------------- */

void demo_report_progress(demo_run *run, bool final)
{
    static double last;
    bool tty = isatty(STDERR_FILENO);
    double now = demo_now();
    if (!final && now - last < (tty ? 0.2 : 2.0))
        return;
    last = now;
    double t = now - run->t_serve;
    fprintf(stderr,
            "%smstar demo: %5.1fs %d/%d done, %d aborted, %d failed, %d in flight, "
            "%.0f tok/s%s",
            tty ? "\r" : "", t, run->done, run->cfg->requests, run->aborted, run->failed,
            run->inflight, t > 0 ? (double)run->tokens_out / t : 0.0, tty && !final ? "   " : "\n");
    fflush(stderr);
}

/* ---- figures the summary shows ----------------------------------------------------------------
 */

typedef struct figures {
    double startup_s, serve_s, shutdown_s, check_s;
    double tok_per_s;
    int64_t dec_tokens; /* tokens the decoder produced (prefill and decode rows) */
    double dec_s, dec_tok_per_s;
    double p50_ms, p99_ms, max_ms;
    int32_t too_late;
    int32_t abort_points[4]; /* aborted requests by the point they were asked at */
} figures;

static void compute(const demo_run *run, figures *f)
{
    memset(f, 0, sizeof(*f));
    f->serve_s = run->t_end > run->t_serve ? run->t_end - run->t_serve : 0.0;
    double serving_from = run->t_serve > 0 ? run->t_serve : run->t_shutdown;
    double serving_to = run->t_end > 0 ? run->t_end : run->t_shutdown;
    f->startup_s = serving_from - run->t_start;
    f->shutdown_s = run->t_shutdown - serving_to;
    f->check_s = run->t_checked - run->t_shutdown;
    f->tok_per_s = f->serve_s > 0 ? (double)run->tokens_out / f->serve_s : 0.0;
    const demo_step_stats *st = &run->report[run->dec_rank].steps;
    int64_t us = 0;
    for (size_t i = 0; i < st->n; i++) {
        f->dec_tokens += st->b[i].rows;
        us += st->b[i].micros;
    }
    f->dec_s = (double)us * 1e-6;
    f->dec_tok_per_s = f->dec_s > 0 ? (double)f->dec_tokens / f->dec_s : 0.0;
    double *lat = malloc(((size_t)run->done + 1) * sizeof(double));
    size_t n = 0;
    for (int32_t i = 0; i < run->next_submit; i++) {
        const dreq *r = &run->reqs[i];
        if (r->state == R_DONE && lat != NULL)
            lat[n++] = (r->t_end - r->t_submit) * 1e3;
        f->too_late += r->abort_too_late;
        if (r->state == R_ABORTED)
            f->abort_points[run->specs[i].abort_point]++;
    }
    if (lat != NULL) {
        f->p50_ms = demo_percentile(lat, n, 50);
        f->p99_ms = demo_percentile(lat, n, 99);
        f->max_ms = demo_percentile(lat, n, 100);
    }
    free(lat);
}

/* Leftovers across the workers' reports and the preprocess role. */
static int64_t held_total(const demo_run *run, size_t field)
{
    int64_t sum = field == 0   ? run->pre_tensors_left
                  : field == 1 ? run->pre_live_slots
                               : run->pre_spill_files;
    for (int w = 0; w < DEMO_WORKERS; w++) {
        const demo_worker_report *r = &run->report[w];
        sum += field == 0 ? r->tensors_held : field == 1 ? r->live_slots : r->spill_files;
    }
    return sum;
}

static const char *component_of(const demo_run *run, int w)
{
    return demo_component_name(run->cfg->worker_component[w]);
}

static void bucket_name(const demo_bucket_stats *b, char *buf, size_t size)
{
    if (b->bs == 0)
        snprintf(buf, size, "%s[none fits]", b->walk);
    else
        snprintf(buf, size, "%s[bs=%lld,tokens=%lld]", b->walk, (long long)b->bs,
                 (long long)b->tokens);
}

/* The step table in walk order (encode, prefill, decode), then largest bucket first. */
static int walk_rank(const char *walk)
{
    return strcmp(walk, "encode") == 0 ? 0 : strcmp(walk, "prefill") == 0 ? 1 : 2;
}

static int cmp_bucket(const void *pa, const void *pb)
{
    const demo_bucket_stats *a = pa, *b = pb;
    int wa = walk_rank(a->walk), wb = walk_rank(b->walk);
    if (wa != wb)
        return wa - wb;
    if (a->bs != b->bs)
        return a->bs > b->bs ? -1 : 1;
    return (a->tokens < b->tokens) - (a->tokens > b->tokens);
}

static void sort_steps(demo_run *run)
{
    for (int w = 0; w < DEMO_WORKERS; w++)
        qsort(run->report[w].steps.b, run->report[w].steps.n, sizeof(demo_bucket_stats),
              cmp_bucket);
}

/* ---- text ----------------------------------------------------------------------------------- */

static void text_summary(demo_run *run, const figures *f)
{
    FILE *o = stdout;
    if (run->fatal[0] == '\0')
        fprintf(o, "mstar demo: PASS\n");
    else
        fprintf(o, "mstar demo: FAILED: %s\n", run->fatal);
    fprintf(o, "  requests     %d: %d completed, %d aborted, %d failed, %d not started\n",
            run->cfg->requests, run->done, run->aborted, run->failed,
            run->cfg->requests - run->next_submit);
    if (run->aborted > 0 || f->too_late > 0)
        fprintf(o,
                "  aborts       %d at submit, %d after the encoder, %d mid-decode; %d asked too "
                "late (the walk had completed)\n",
                f->abort_points[DEMO_ABORT_AT_SUBMIT], f->abort_points[DEMO_ABORT_AFTER_ENCODER],
                f->abort_points[DEMO_ABORT_MID_DECODE], f->too_late);
    if (run->failed > 0) {
        int shown = 0;
        fprintf(o, "  failed       ");
        for (int32_t i = 0; i < run->next_submit && shown < 16; i++) {
            if (run->reqs[i].state == R_FAILED)
                fprintf(o, "%s%d", shown++ ? ", " : "", i);
        }
        fprintf(o, "%s\n", run->failed > 16 ? ", ..." : "");
    }
    fprintf(o,
            "  tokens       %lld generated in %.2f s: %.1f tok/s end to end; the decoder "
            "%.1f tok/s while stepping\n",
            (long long)run->tokens_out, f->serve_s, f->tok_per_s, f->dec_tok_per_s);
    fprintf(o, "  latency      p50 %.1f ms, p99 %.1f ms, max %.1f ms (completed requests)\n",
            f->p50_ms, f->p99_ms, f->max_ms);
    fprintf(o, "  startup      ");
    for (int w = 0; w < DEMO_WORKERS; w++)
        fprintf(o, "%s%s (%s) %.2f s", w ? ", " : "", run->worker_name[w], component_of(run, w),
                run->startup_s[w]);
    fprintf(o, " (model and graph captures)\n");
    fprintf(o, "  steps        %-34s %8s %8s %8s %8s %10s\n", "bucket", "replays", "eager", "rows",
            "tokens", "ms");
    for (int w = 0; w < DEMO_WORKERS; w++) {
        const demo_step_stats *s = &run->report[w].steps;
        for (size_t i = 0; i < s->n; i++) {
            char name[64];
            bucket_name(&s->b[i], name, sizeof(name));
            fprintf(o, "               %-34s %8lld %8lld %8lld %8lld %10.1f\n", name,
                    (long long)s->b[i].replays, (long long)s->b[i].eager, (long long)s->b[i].rows,
                    (long long)s->b[i].real_tokens, (double)s->b[i].micros * 1e-3);
        }
    }
    fprintf(o, "  edges        %-12s %-52s %-9s %8s %10s %8s %8s\n", "signal", "from -> to",
            "route", "tensors", "bytes", "tx ms", "rx ms");
    for (size_t i = 0; i < run->traffic.n; i++) {
        const demo_edge_stats *e = &run->traffic.e[i];
        char route[600];
        snprintf(route, sizeof(route), "%s -> %s", e->source, e->dest);
        fprintf(o, "               %-12s %-52s %-9s %8lld %10lld %8.2f %8.2f\n", e->name, route,
                demo_edge_route(e, run->opts->transport),
                (long long)(e->tx_count > e->rx_count ? e->tx_count : e->rx_count),
                (long long)(e->tx_bytes > e->rx_bytes ? e->tx_bytes : e->rx_bytes), e->tx_s * 1e3,
                e->rx_s * 1e3);
    }
    fprintf(o,
            "  leak check   %lld tensors held, %lld arena slots, %lld spill files, %d files in the "
            "shm directory",
            (long long)held_total(run, 0), (long long)held_total(run, 1),
            (long long)held_total(run, 2), run->shm_left);
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run->died[w] && run->swept[w] > 0)
            fprintf(o, "; %d files the dead %s left were removed", run->swept[w],
                    run->worker_name[w]);
    }
    fprintf(o, "\n  self-check   %d of %d completed requests rerun eagerly: %s\n", run->checked,
            run->done, run->mismatches == 0 ? "identical tokens" : run->mismatch);
    fprintf(o,
            "  time         startup %.2f s, serving %.2f s, shutdown %.2f s, self-check %.2f s\n",
            f->startup_s, f->serve_s, f->shutdown_s, f->check_s);
    fprintf(o, "  graphs       %s\n",
            run->opts->graphs ? "captured at startup: encoder per (batch size, tokens); decoder "
                                "decode per batch size, prefill per (batch size, tokens)"
                              : "off (--no-graphs): every step eager");
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void json_summary(demo_run *run, const figures *f)
{
    FILE *o = stdout;
    fprintf(o, "{\"ok\": %s, \"reason\": ", run->fatal[0] == '\0' ? "true" : "false");
    mstar__json_string(o, run->fatal);
    fprintf(o, ", \"device\": \"%s\", \"transport\": \"%s\", \"graphs\": %s, \"shm_dir\": ",
            run->opts->device == MSTAR_DEVICE_CUDA ? "cuda" : "host",
            demo_transport_name(run->opts->transport), run->opts->graphs ? "true" : "false");
    mstar__json_string(o, run->dirs.shm);
    fprintf(o, ", \"ipc_dir\": ");
    mstar__json_string(o, run->dirs.ipc);
    fprintf(o,
            ",\n \"time_s\": {\"startup\": %.3f, \"serve\": %.3f, \"shutdown\": %.3f, "
            "\"self_check\": %.3f},",
            f->startup_s, f->serve_s, f->shutdown_s, f->check_s);
    fprintf(o,
            "\n \"requests\": {\"total\": %d, \"completed\": %d, \"aborted\": %d, "
            "\"failed\": %d, \"not_started\": %d, \"abort_too_late\": %d},\n",
            run->cfg->requests, run->done, run->aborted, run->failed,
            run->cfg->requests - run->next_submit, f->too_late);
    fprintf(o, " \"failed_requests\": [");
    for (int32_t i = 0, k = 0; i < run->next_submit; i++) {
        if (run->reqs[i].state != R_FAILED)
            continue;
        fprintf(o, "%s{\"id\": %d, \"reason\": ", k++ ? ", " : "", i);
        mstar__json_string(o, run->reqs[i].reason);
        fputc('}', o);
    }
    fprintf(o,
            "],\n \"tokens\": {\"generated\": %lld, \"serve_s\": %.4f, \"per_s\": %.2f, "
            "\"decoder_step_tokens\": %lld, \"decoder_step_s\": %.4f, "
            "\"decoder_per_s\": %.2f},\n",
            (long long)run->tokens_out, f->serve_s, f->tok_per_s, (long long)f->dec_tokens,
            f->dec_s, f->dec_tok_per_s);
    fprintf(o, " \"latency_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f},\n", f->p50_ms,
            f->p99_ms, f->max_ms);
    fprintf(o, " \"workers\": [");
    for (int w = 0; w < DEMO_WORKERS; w++) {
        const demo_worker_report *r = &run->report[w];
        char how[96] = "";
        if (run->died[w])
            demo_describe_exit(run->exit_status[w], how, sizeof(how));
        fprintf(o,
                "%s{\"entity\": \"%s\", \"component\": \"%s\", \"startup_s\": %.4f, "
                "\"died\": %s, \"exit\": ",
                w ? ", " : "", run->worker_name[w], component_of(run, w), run->startup_s[w],
                run->died[w] ? "true" : "false");
        mstar__json_string(o, how);
        fprintf(o,
                ", \"report\": %s, \"busy_s\": %.4f, \"removed_soft\": %lld, "
                "\"removed_force\": %lld, \"drained\": %lld, \"early_dropped\": %lld}",
                r->in ? "true" : "false", (double)r->busy_us * 1e-6, (long long)r->removed_soft,
                (long long)r->removed_force, (long long)r->drained, (long long)r->early_dropped);
    }
    fprintf(o, "],\n \"steps\": [");
    int k = 0;
    for (int w = 0; w < DEMO_WORKERS; w++) {
        const demo_step_stats *s = &run->report[w].steps;
        for (size_t i = 0; i < s->n; i++) {
            const demo_bucket_stats *b = &s->b[i];
            fprintf(o,
                    "%s\n  {\"component\": \"%s\", \"walk\": \"%s\", \"bs\": %lld, "
                    "\"tokens\": %lld, \"replays\": %lld, \"eager\": %lld, \"rows\": %lld, "
                    "\"real_tokens\": %lld, \"ms\": %.3f}",
                    k++ ? "," : "", component_of(run, w), b->walk, (long long)b->bs,
                    (long long)b->tokens, (long long)b->replays, (long long)b->eager,
                    (long long)b->rows, (long long)b->real_tokens, (double)b->micros * 1e-3);
        }
    }
    fprintf(o, "],\n \"edges\": [");
    for (size_t i = 0; i < run->traffic.n; i++) {
        const demo_edge_stats *e = &run->traffic.e[i];
        fprintf(o,
                "%s\n  {\"signal\": \"%s\", \"from\": \"%s\", \"to\": \"%s\", \"route\": \"%s\", "
                "\"tx_tensors\": %lld, \"tx_bytes\": %lld, \"tx_s\": %.6f, \"rx_tensors\": %lld, "
                "\"rx_bytes\": %lld, \"rx_s\": %.6f}",
                i ? "," : "", e->name, e->source, e->dest, demo_edge_route(e, run->opts->transport),
                (long long)e->tx_count, (long long)e->tx_bytes, e->tx_s, (long long)e->rx_count,
                (long long)e->rx_bytes, e->rx_s);
    }
    fprintf(o,
            "],\n \"leaks\": {\"tensors_held\": %lld, \"live_arena_slots\": %lld, "
            "\"spill_files\": %lld, \"shm_files_left\": %d, \"swept_from_dead_workers\": %d, "
            "\"unaccounted_requests\": %d},\n",
            (long long)held_total(run, 0), (long long)held_total(run, 1),
            (long long)held_total(run, 2), run->shm_left, run->swept[0] + run->swept[1],
            demo_walk_unfinished(run));
    fprintf(o, " \"self_check\": {\"sampled\": %d, \"mismatches\": %d, \"first\": ", run->checked,
            run->mismatches);
    mstar__json_string(o, run->mismatch);
    fprintf(o, "}\n}\n");
}

void demo_report_summary(demo_run *run)
{
    figures f;
    compute(run, &f);
    sort_steps(run);
    if (run->opts->json)
        json_summary(run, &f);
    else
        text_summary(run, &f);
    fflush(stdout);
}
