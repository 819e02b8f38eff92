/*
 * demo_check.c — the self-check: a sample of the completed requests runs again in the driver,
 * eagerly and one request at a time — the encoder's forward, the codebook lookup, then a prefill
 * and greedy decode steps through ref_eager, the plain reference that owns its KV cache and
 * positions without any runner — and must give the tokens the workers sent. It checks the whole
 * walk at once: the bytes the transport moved, the captured graphs against eager steps, and
 * that batching with other requests changed nothing.
 *
 * On the host backend the kernels sum in a fixed order, so the comparison is exact.
 */
#include "demo_codebook.h"
#include "demo_encoder.h"
#include "demo_run.h"
#include "ref_eager.h"

#include <stdlib.h>
#include <string.h>

/* The eager reference of one request: what the driver reruns. */
typedef struct reference {
    demo_encoder *enc;
    demo_codebook *codebook;
    ref_eager *dec;
} reference;

/* One request alone: its tokens into `out` ([max_new]). */
static mstar_status rerun(reference *ref, const demo_request_spec *spec, int64_t handle,
                          int32_t *out)
{
    const int32_t *prompts[1] = { spec->prompt };
    int32_t lens[1] = { spec->prompt_len };
    mstar_tensor hidden;
    demo_step_info info;
    int32_t *prompt = malloc((size_t)spec->prompt_len * sizeof(int32_t));
    if (prompt == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "self-check prompt");
    mstar_status st = demo_encoder_run(ref->enc, prompts, lens, 1, &hidden, &info);
    if (st == MSTAR_OK)
        st = demo_codebook_lookup(ref->codebook, ref_eager_stream(ref->dec), &hidden, prompt);
    if (st == MSTAR_OK)
        st = ref_eager_open(ref->dec, handle);
    if (st != MSTAR_OK) {
        free(prompt);
        return st;
    }
    int32_t span = spec->prompt_len;
    st = ref_eager_step(ref->dec, &handle, &span, 1, prompt, NULL, &out[0]);
    span = 1;
    for (int32_t t = 1; st == MSTAR_OK && t < spec->max_new; t++)
        st = ref_eager_step(ref->dec, &handle, &span, 1, &out[t - 1], NULL, &out[t]);
    mstar_status closed = ref_eager_close(ref->dec, handle);
    free(prompt);
    return st != MSTAR_OK ? st : closed;
}

mstar_status demo_check_eager(demo_run *run)
{
    int32_t done = run->done, want = run->cfg->check_sample < done ? run->cfg->check_sample : done;
    if (want == 0)
        return MSTAR_OK;
    mstar_backend *backend = NULL;
    reference ref = { NULL, NULL, NULL };
    int32_t *tokens = malloc((size_t)run->cfg->output_max * sizeof(int32_t));
    mstar_device dev = { run->opts->device, 0 };
    const demo_config *cfg = run->cfg;
    mstar_kv_cache_config kv = { .num_pages = cfg->kv_pages,
                                 .page_size = cfg->page_size,
                                 .num_labels = 1,
                                 .max_seq_len = cfg->prompt_max + cfg->output_max };
    mstar_status st = tokens == NULL ? mstar_error_set(MSTAR_ENOMEM, "self-check") : MSTAR_OK;
    if (st == MSTAR_OK)
        st = mstar_backend_create(dev, &backend);
    if (st == MSTAR_OK)
        st = demo_encoder_create(backend, cfg, false, &ref.enc);
    if (st == MSTAR_OK)
        st = demo_codebook_create(backend, &cfg->model, &ref.codebook);
    if (st == MSTAR_OK)
        st = ref_eager_create(&cfg->model, &kv, backend, &ref.dec);
    /* Every (done / want)-th completed request: the sample spans the whole run. */
    int32_t seen = 0;
    for (int32_t i = 0; st == MSTAR_OK && i < run->next_submit && run->checked < want; i++) {
        const dreq *r = &run->reqs[i];
        if (r->state != R_DONE)
            continue;
        if ((int64_t)seen++ * want / done != (int64_t)run->checked)
            continue;
        st = rerun(&ref, &run->specs[i], i, tokens);
        if (st != MSTAR_OK)
            break;
        run->checked++;
        for (int32_t t = 0; t < r->nresult; t++) {
            if (tokens[t] == r->result[t])
                continue;
            if (run->mismatches++ == 0)
                snprintf(run->mismatch, sizeof(run->mismatch),
                         "request %d: token %d is %d from the workers, %d from the eager rerun", i,
                         t, r->result[t], tokens[t]);
            break;
        }
    }
    ref_eager_destroy(ref.dec);
    demo_codebook_destroy(ref.codebook);
    demo_encoder_destroy(ref.enc);
    mstar_backend_destroy(backend);
    free(tokens);
    if (st == MSTAR_OK && run->mismatches > 0)
        st = mstar_error_set(MSTAR_EPROTO, "%d of %d sampled requests differ; %s", run->mismatches,
                             run->checked, run->mismatch);
    return st;
}
