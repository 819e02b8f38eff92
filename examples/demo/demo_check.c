/*
 * demo_check.c — the self-check: a sample of the completed requests runs again in the driver,
 * eagerly and one request at a time (the encoder's forward, the codebook lookup, a prefill and
 * greedy decode steps through ref_eager), and must give the tokens the workers sent. It checks
 * the whole walk at once: the bytes the transport moved, the captured graphs against eager
 * steps, and that batching with other requests changed nothing.
 *
 * On the host backend the kernels sum in a fixed order, so the comparison is exact.
 */
#include "demo_decoder.h"
#include "demo_encoder.h"
#include "demo_run.h"

#include <stdlib.h>
#include <string.h>

/* Request i alone: its tokens into `out` ([max_new]). */
static mstar_status rerun(demo_encoder *enc, demo_decoder *dec, const demo_request_spec *spec,
                          int64_t handle, int32_t *out)
{
    const int32_t *prompts[1] = { spec->prompt };
    int32_t lens[1] = { spec->prompt_len };
    mstar_tensor hidden;
    demo_step_info info;
    int32_t *prompt = malloc((size_t)spec->prompt_len * sizeof(int32_t));
    if (prompt == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "self-check prompt");
    mstar_status st = demo_encoder_run(enc, prompts, lens, 1, &hidden, &info);
    if (st == MSTAR_OK)
        st = demo_decoder_codebook(dec, &hidden, prompt);
    if (st == MSTAR_OK)
        st = demo_decoder_open(dec, handle);
    if (st != MSTAR_OK) {
        free(prompt);
        return st;
    }
    int32_t span = spec->prompt_len;
    st = demo_decoder_step(dec, true, &handle, &span, 1, prompt, &out[0], &info);
    span = 1;
    for (int32_t t = 1; st == MSTAR_OK && t < spec->max_new; t++)
        st = demo_decoder_step(dec, false, &handle, &span, 1, &out[t - 1], &out[t], &info);
    mstar_status closed = demo_decoder_close(dec, handle);
    free(prompt);
    return st != MSTAR_OK ? st : closed;
}

mstar_status demo_check_eager(demo_run *run)
{
    int32_t done = run->done, want = run->cfg->check_sample < done ? run->cfg->check_sample : done;
    if (want == 0)
        return MSTAR_OK;
    mstar_backend *backend = NULL;
    demo_encoder *enc = NULL;
    demo_decoder *dec = NULL;
    int32_t *tokens = malloc((size_t)run->cfg->output_max * sizeof(int32_t));
    mstar_device dev = { run->opts->device, 0 };
    mstar_status st = tokens == NULL ? mstar_error_set(MSTAR_ENOMEM, "self-check") : MSTAR_OK;
    if (st == MSTAR_OK)
        st = mstar_backend_create(dev, &backend);
    if (st == MSTAR_OK)
        st = demo_encoder_create(backend, run->cfg, false, &enc);
    if (st == MSTAR_OK)
        st = demo_decoder_create(backend, run->cfg, &dec);
    /* Every (done / want)-th completed request: the sample spans the whole run. */
    int32_t seen = 0;
    for (int32_t i = 0; st == MSTAR_OK && i < run->next_submit && run->checked < want; i++) {
        const dreq *r = &run->reqs[i];
        if (r->state != R_DONE)
            continue;
        if ((int64_t)seen++ * want / done != (int64_t)run->checked)
            continue;
        st = rerun(enc, dec, &run->specs[i], i, tokens);
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
    demo_decoder_destroy(dec);
    demo_encoder_destroy(enc);
    mstar_backend_destroy(backend);
    free(tokens);
    if (st == MSTAR_OK && run->mismatches > 0)
        st = mstar_error_set(MSTAR_EPROTO, "%d of %d sampled requests differ; %s", run->mismatches,
                             run->checked, run->mismatch);
    return st;
}
