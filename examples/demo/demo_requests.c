/*
 * demo_requests.c — the requests of one run, drawn from the config's seed with the C library's
 * 48-bit generator (nrand48/erand48: the same sequence on every glibc), so a seed names a run.
 */
#include "demo.h"

#include <stdlib.h>
#include <string.h>

const char *demo_abort_point_name(demo_abort_point p)
{
    switch (p) {
    case DEMO_ABORT_NONE:
        return "none";
    case DEMO_ABORT_AT_SUBMIT:
        return "at_submit";
    case DEMO_ABORT_AFTER_ENCODER:
        return "after_encoder";
    case DEMO_ABORT_MID_DECODE:
        return "mid_decode";
    }
    return "?";
}

/* Uniform in [lo, hi]. */
static int32_t uniform(unsigned short state[3], int32_t lo, int32_t hi)
{
    return lo + (int32_t)(nrand48(state) % (long)(hi - lo + 1));
}

mstar_status demo_requests_generate(const demo_config *cfg, double abort_rate,
                                    demo_request_spec **out)
{
    unsigned short state[3] = { (unsigned short)cfg->seed, (unsigned short)(cfg->seed >> 16),
                                (unsigned short)(cfg->seed >> 32) ^ 0x330e };
    demo_request_spec *specs = calloc((size_t)cfg->requests, sizeof(*specs));
    if (specs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "demo: %d request specs", cfg->requests);
    for (int32_t i = 0; i < cfg->requests; i++) {
        demo_request_spec *s = &specs[i];
        s->prompt_len = uniform(state, cfg->prompt_min, cfg->prompt_max);
        s->max_new = uniform(state, cfg->output_min, cfg->output_max);
        s->prompt = malloc((size_t)s->prompt_len * sizeof(int32_t));
        if (s->prompt == NULL) {
            demo_requests_free(specs, i);
            return mstar_error_set(MSTAR_ENOMEM, "demo: prompt of %d tokens", s->prompt_len);
        }
        for (int32_t t = 0; t < s->prompt_len; t++)
            s->prompt[t] = uniform(state, 0, cfg->model.vocab - 1);
        /* Drawn for every request, so the prompts do not depend on the abort rate. */
        double roll = erand48(state);
        demo_abort_point point = (demo_abort_point)uniform(state, 1, 3);
        int32_t delay = uniform(state, 1, 20);
        if (roll < abort_rate) {
            s->abort_point = point;
            s->abort_delay_ms = delay;
        }
    }
    *out = specs;
    return MSTAR_OK;
}

void demo_requests_free(demo_request_spec *specs, int32_t n)
{
    for (int32_t i = 0; specs != NULL && i < n; i++)
        free(specs[i].prompt);
    free(specs);
}
