/*
 * demo_decoder.c — the decoder's model side on the reference model's runner node (see
 * demo_decoder.h).
 */
#include "demo_decoder.h"

#include "demo_codebook.h"
#include "ref_node.h"

#include <stdlib.h>
#include <string.h>

#define PREFILL_WALK "prefill"
#define DECODE_WALK  "decode"

struct demo_decoder {
    ref_node *node;
    demo_codebook *codebook;
    bool graphs;
    int32_t page_size, num_pages;
    demo_sizes decode_sizes, prefill_sizes, prefill_tokens;
};

mstar_status demo_decoder_create(mstar_backend *backend, const demo_config *cfg, bool graphs,
                                 demo_decoder **out)
{
    demo_decoder *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "decoder");
    d->graphs = graphs;
    d->page_size = cfg->page_size;
    d->num_pages = cfg->kv_pages;
    d->decode_sizes = cfg->decode_batch_sizes;
    d->prefill_sizes = cfg->prefill_batch_sizes;
    d->prefill_tokens = cfg->prefill_token_lengths;
    const ref_capture_config captures[] = {
        { DECODE_WALK, false, d->decode_sizes.v, d->decode_sizes.n, NULL, 0 },
        { PREFILL_WALK, true, d->prefill_sizes.v, d->prefill_sizes.n, d->prefill_tokens.v,
          d->prefill_tokens.n },
    };
    ref_node_options o = {
        .model = cfg->model,
        .kv = { .num_pages = cfg->kv_pages,
                .page_size = cfg->page_size,
                .num_labels = 1,
                .max_seq_len = cfg->prompt_max + cfg->output_max },
        .captures = captures,
        .n_captures = 2,
        .num_slots = 1,
    };
    mstar_status st = ref_node_create(backend, &o, &d->node);
    if (st == MSTAR_OK)
        st = demo_codebook_create(backend, &cfg->model, &d->codebook);
    if (st == MSTAR_OK && graphs)
        st = ref_node_capture(d->node);
    if (st != MSTAR_OK) {
        demo_decoder_destroy(d);
        return mstar_error_wrap("decoder");
    }
    *out = d;
    return MSTAR_OK;
}

void demo_decoder_destroy(demo_decoder *d)
{
    if (d == NULL)
        return;
    ref_node_destroy(d->node);
    demo_codebook_destroy(d->codebook);
    free(d);
}

mstar_status demo_decoder_codebook(demo_decoder *d, const mstar_tensor *states, int32_t *tokens)
{
    return demo_codebook_lookup(d->codebook, ref_node_stream(d->node), states, tokens);
}

mstar_status demo_decoder_open(demo_decoder *d, int64_t handle)
{
    return ref_node_open(d->node, handle);
}

void demo_decoder_close(demo_decoder *d, int64_t handle)
{
    ref_node_close(d->node, handle);
}

int32_t demo_decoder_pages_for(const demo_decoder *d, int64_t tokens)
{
    return (int32_t)((tokens + d->page_size - 1) / d->page_size);
}

int32_t demo_decoder_total_pages(const demo_decoder *d)
{
    return d->num_pages - 1; /* the sink page holds no request */
}

mstar_status demo_decoder_step(demo_decoder *d, bool prefill, const int64_t *rows,
                               const int32_t *spans, int32_t n, const int32_t *tokens,
                               int32_t *next, demo_step_info *info)
{
    double t0 = demo_now();
    const char *walk = prefill ? PREFILL_WALK : DECODE_WALK;
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += spans[i];
    memset(info, 0, sizeof(*info));
    ref_step_request req = { .walk = walk,
                             .rows = rows,
                             .spans = spans,
                             .n = n,
                             .tokens = tokens,
                             .use_graphs = d->graphs,
                             .commit = true,
                             .slot = -1,
                             .plan_done = NULL };
    ref_step_timing timing;
    mstar_status st = ref_node_step(d->node, &req, NULL, next, &timing);
    if (st != MSTAR_OK)
        return mstar_error_wrap("decoder %s step of %d rows", walk, n);
    /* Name the bucket: the one the lease took (the same lookup), or the configured one that
     * would hold the step. */
    mstar_bucket_key key;
    info->replayed = timing.replayed;
    if (timing.replayed &&
        mstar_graph_runner_select_bucket(ref_node_runner(d->node), walk, n, total, NULL, &key)) {
        info->bs = key.bs;
        info->tokens = key.num_tokens;
    } else if (prefill) {
        demo_bucket_fit(&d->prefill_sizes, &d->prefill_tokens, n, total, &info->bs, &info->tokens);
    } else {
        demo_bucket_fit(&d->decode_sizes, NULL, n, n, &info->bs, &info->tokens);
    }
    info->rows = n;
    info->real_tokens = total;
    info->seconds = demo_now() - t0;
    return MSTAR_OK;
}
