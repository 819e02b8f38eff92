/*
 * demo_requests.c — the requests of one run, drawn from the config's seed with the C library's
 * 48-bit generator (nrand48/erand48: the same sequence on every glibc), so a seed names a run.
 * One stream draws the prompts and lengths, another the aborts.
 */
#include "demo.h"

#include "core/u64map.h"

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

/* A generator state from a seed, mixed first: nearby seeds (7, 8) must not give correlated
 * sequences, and the raw 48-bit LCG's first draws from a small seed are poorly spread. */
static void seed_state(uint64_t seed, unsigned short state[3])
{
    uint64_t mixed = mstar__hash_u64(seed + UINT64_C(0x9e3779b97f4a7c15));
    state[0] = (unsigned short)mixed;
    state[1] = (unsigned short)(mixed >> 16);
    state[2] = (unsigned short)(mixed >> 32);
}

/* Uniform in [lo, hi]. */
static int32_t uniform(unsigned short state[3], int32_t lo, int32_t hi)
{
    return lo + (int32_t)(nrand48(state) % (long)(hi - lo + 1));
}

mstar_status demo_requests_generate(const demo_config *cfg, double abort_rate,
                                    demo_request_spec **out)
{
    unsigned short state[3], aborts[3];
    seed_state(cfg->seed, state);
    seed_state(cfg->seed ^ UINT64_C(0xab0127), aborts);
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
        /* A stream of their own, drawn for every request: the prompts do not depend on the
         * abort rate, nor the aborts on the prompt lengths. */
        double roll = erand48(aborts);
        demo_abort_point point = (demo_abort_point)uniform(aborts, 1, 3);
        int32_t delay = uniform(aborts, 1, 20);
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
