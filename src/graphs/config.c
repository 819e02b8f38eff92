/*
 * config.c — capture configs: defaults, validation (design.md "Graph configs") and the buckets each
 * config yields.
 *
 * Token counts in bucket keys are plan tokens: the input tokens times the config's multiplier
 * (plan_tokens_per_input_token; batched CFG packs cond and uncond into one sequence). A BATCHED
 * config's bucket for bs carries seq_len·bs·multiplier tokens; a PACKED config has one bucket per
 * (bs, capture token length).
 *
 * A PACKED pair whose token count equals its batch size is refused when the config is validated
 * (design.md "Graph configs", G-10). A resource that picks its attention plan from the bucket's
 * shape takes bs == tokens for decode (one token per row), which is wrong for packed rows of uneven
 * length ([2, 1, 1, 0]). The other way out, forcing the prefill plan kind, needs a step that can
 * say which plan kind it wants; a step here carries no plan kind, so the runner cannot force one,
 * and a silent drop would leave the user wondering why the bucket never replays.
 */
#include "graphs/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t default_sizes[] = MSTAR_DEFAULT_CAPTURE_BATCH_SIZES;
#define N_DEFAULT_SIZES (sizeof(default_sizes) / sizeof(default_sizes[0]))

void mstar_graph_config_init(mstar_graph_config *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = MSTAR_GRAPH_BATCHED;
    c->caps_eager_batch_size = true;
    c->plan_tokens_per_input_token = 1;
    c->compile_mode = MSTAR_COMPILE_NONE;
}

mstar_status mstar__check_packed_pairs(const int64_t *sizes, size_t n, const int64_t *tokens,
                                       size_t m, const char *who)
{
    if (sizes == NULL) {
        sizes = default_sizes;
        n = N_DEFAULT_SIZES;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < m; j++) {
            if (tokens[j] == sizes[i])
                return mstar_error_set(MSTAR_EINVAL,
                                       "%s: packed bucket bs=%lld tokens=%lld has as many tokens "
                                       "as rows, which a plan that goes by the bucket's shape "
                                       "takes for decode, wrong for packed rows of uneven length "
                                       "(G-10); leave %lld out of the batch sizes or the token "
                                       "lengths",
                                       who, (long long)sizes[i], (long long)tokens[j],
                                       (long long)tokens[j]);
        }
    }
    return MSTAR_OK;
}

mstar_status mstar__check_sizes(const int64_t *v, size_t n, const char *who, const char *field)
{
    if (n != 0 && v == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: %s is NULL", who, field);
    for (size_t i = 0; i < n; i++) {
        if (v[i] <= 0)
            return mstar_error_set(MSTAR_EINVAL, "%s: %s[%zu] = %lld is not positive", who, field,
                                   i, (long long)v[i]);
        for (size_t j = 0; j < i; j++) {
            if (v[j] == v[i])
                return mstar_error_set(MSTAR_EINVAL, "%s: %s lists %lld twice", who, field,
                                       (long long)v[i]);
        }
    }
    return MSTAR_OK;
}

mstar_status mstar_graph_config_validate(const mstar_graph_config *c, uint32_t idx)
{
    if (c == NULL)
        return mstar_error_set(MSTAR_EINVAL, "config %u is NULL", idx);
    if (c->capture_graph_walk == NULL)
        return mstar_error_set(MSTAR_EINVAL, "config %u: capture_graph_walk is NULL", idx);
    mstar_status st = mstar_name_validate(c->capture_graph_walk, strlen(c->capture_graph_walk),
                                          "capture_graph_walk");
    if (st != MSTAR_OK)
        return mstar_error_wrap("config %u", idx);
    if (c->n_replay_graph_walks != 0 && c->replay_graph_walks == NULL)
        return mstar_error_set(MSTAR_EINVAL, "config %u: replay_graph_walks is NULL", idx);
    for (size_t i = 0; i < c->n_replay_graph_walks; i++) {
        const char *w = c->replay_graph_walks[i];
        if (w == NULL || mstar_name_validate(w, strlen(w), "replay_graph_walks entry") != MSTAR_OK)
            return mstar_error_set(MSTAR_EINVAL,
                                   "config %u: replay_graph_walks[%zu] is not a "
                                   "valid walk name",
                                   idx, i);
    }
    if (c->kind != MSTAR_GRAPH_BATCHED && c->kind != MSTAR_GRAPH_PACKED)
        return mstar_error_set(MSTAR_EINVAL, "config %u: unknown kind %d", idx, (int)c->kind);
    if ((unsigned)c->compile_mode > MSTAR_COMPILE_MAX_AUTOTUNE_NO_GRAPHS)
        return mstar_error_set(MSTAR_EINVAL, "config %u: unknown compile_mode %d", idx,
                               (int)c->compile_mode);
    if (c->cg_key_info != NULL && c->cg_key_info[0] == '\0')
        return mstar_error_set(MSTAR_EINVAL, "config %u: cg_key_info is empty (NULL for none)",
                               idx);
    if (c->plan_tokens_per_input_token < 1)
        return mstar_error_set(MSTAR_EINVAL, "config %u: plan_tokens_per_input_token %lld < 1", idx,
                               (long long)c->plan_tokens_per_input_token);
    char who[32];
    snprintf(who, sizeof(who), "config %u", idx);
    if ((st = mstar__check_sizes(c->capture_batch_sizes, c->n_capture_batch_sizes, who,
                                 "capture_batch_sizes")) != MSTAR_OK)
        return st;
    if (c->make_node_input == NULL)
        return mstar_error_set(MSTAR_EINVAL, "config %u: make_node_input (the template) is NULL",
                               idx);
    if (c->kind == MSTAR_GRAPH_BATCHED && c->seq_len < 1)
        return mstar_error_set(MSTAR_EINVAL, "config %u: a BATCHED config needs seq_len >= 1", idx);
    if (c->kind == MSTAR_GRAPH_PACKED) {
        if (c->n_capture_token_lengths == 0 || c->capture_token_lengths == NULL)
            return mstar_error_set(MSTAR_EINVAL,
                                   "config %u: a PACKED config needs "
                                   "capture_token_lengths",
                                   idx);
        if ((st = mstar__check_sizes(c->capture_token_lengths, c->n_capture_token_lengths, who,
                                     "capture_token_lengths")) != MSTAR_OK)
            return st;
        for (size_t i = 0; i < c->n_capture_token_lengths; i++) {
            if (c->capture_token_lengths[i] % c->plan_tokens_per_input_token != 0)
                return mstar_error_set(MSTAR_EINVAL,
                                       "config %u: capture_token_lengths[%zu] = %lld is not a "
                                       "multiple of plan_tokens_per_input_token %lld",
                                       idx, i, (long long)c->capture_token_lengths[i],
                                       (long long)c->plan_tokens_per_input_token);
        }
        st = mstar__check_packed_pairs(c->capture_batch_sizes, c->n_capture_batch_sizes,
                                       c->capture_token_lengths, c->n_capture_token_lengths, who);
        if (st != MSTAR_OK)
            return st;
    }
    if (c->n_seq_dims != 0 && c->seq_dims == NULL)
        return mstar_error_set(MSTAR_EINVAL, "config %u: seq_dims is NULL", idx);
    for (size_t i = 0; i < c->n_seq_dims; i++) {
        if (c->seq_dims[i].key == NULL || c->seq_dims[i].dim < 0 ||
            c->seq_dims[i].dim >= MSTAR_MAX_NDIM)
            return mstar_error_set(MSTAR_EINVAL,
                                   "config %u: seq_dims[%zu] needs a key and a dim "
                                   "in 0..%d",
                                   idx, i, MSTAR_MAX_NDIM - 1);
    }
    return MSTAR_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *failed = true;
    return d;
}

int64_t *mstar__sorted_copy(const int64_t *v, size_t n, bool *failed)
{
    int64_t *d = malloc((n == 0 ? 1 : n) * sizeof(*d));
    if (d == NULL) {
        *failed = true;
        return NULL;
    }
    if (n != 0) {
        memcpy(d, v, n * sizeof(*d));
        qsort(d, n, sizeof(*d), cmp_i64); /* lookups and the capture order rely on it (G-22) */
    }
    return d;
}

int64_t *mstar__sorted_batch_sizes(const int64_t *v, size_t *n, bool *failed)
{
    if (v == NULL) {
        v = default_sizes;
        *n = N_DEFAULT_SIZES;
    }
    return mstar__sorted_copy(v, *n, failed);
}

void mstar__config_free(mstar_graph_config *c)
{
    free((char *)c->capture_graph_walk);
    for (size_t i = 0; i < c->n_replay_graph_walks; i++)
        free((char *)c->replay_graph_walks[i]);
    free((char **)c->replay_graph_walks);
    free((char *)c->cg_key_info);
    free((int64_t *)c->capture_batch_sizes);
    free((int64_t *)c->capture_token_lengths);
    for (size_t i = 0; i < c->n_seq_dims; i++)
        free((char *)c->seq_dims[i].key);
    free((mstar_seq_dim *)c->seq_dims);
    memset(c, 0, sizeof(*c));
}

mstar_status mstar__config_copy(const mstar_graph_config *src, uint32_t idx,
                                mstar_graph_config *dst)
{
    mstar_status st = mstar_graph_config_validate(src, idx);
    if (st != MSTAR_OK)
        return st;
    bool failed = false;
    *dst = *src;
    dst->capture_graph_walk = dup_or_null(src->capture_graph_walk, &failed);
    dst->cg_key_info = dup_or_null(src->cg_key_info, &failed);
    /* The replay walks always include the capture walk, first. */
    size_t nw = 1;
    const char **walks = calloc(src->n_replay_graph_walks + 1, sizeof(*walks));
    if (walks == NULL)
        failed = true;
    else
        walks[0] = dup_or_null(src->capture_graph_walk, &failed);
    for (size_t i = 0; walks != NULL && i < src->n_replay_graph_walks; i++) {
        if (strcmp(src->replay_graph_walks[i], src->capture_graph_walk) != 0)
            walks[nw++] = dup_or_null(src->replay_graph_walks[i], &failed);
    }
    dst->replay_graph_walks = walks;
    dst->n_replay_graph_walks = walks == NULL ? 0 : nw;
    dst->capture_batch_sizes =
        mstar__sorted_batch_sizes(src->capture_batch_sizes, &dst->n_capture_batch_sizes, &failed);
    dst->capture_token_lengths =
        mstar__sorted_copy(src->capture_token_lengths, src->n_capture_token_lengths, &failed);
    mstar_seq_dim *dims = calloc(src->n_seq_dims + 1, sizeof(*dims));
    if (dims == NULL)
        failed = true;
    for (size_t i = 0; dims != NULL && i < src->n_seq_dims; i++) {
        dims[i].key = dup_or_null(src->seq_dims[i].key, &failed);
        dims[i].dim = src->seq_dims[i].dim;
    }
    dst->seq_dims = dims;
    dst->n_seq_dims = dims == NULL ? 0 : src->n_seq_dims;
    if (failed) {
        mstar__config_free(dst);
        return mstar_error_set(MSTAR_ENOMEM, "config %u: out of memory", idx);
    }
    return MSTAR_OK;
}

int64_t mstar__config_batched_tokens(const mstar_graph_config *c, int64_t bs)
{
    return c->seq_len * bs * c->plan_tokens_per_input_token;
}

int32_t mstar__config_seq_dim(const mstar_graph_config *c, const char *key)
{
    for (size_t i = 0; i < c->n_seq_dims; i++) {
        if (strcmp(c->seq_dims[i].key, key) == 0)
            return c->seq_dims[i].dim;
    }
    return -1;
}

bool mstar__config_replays(const mstar_graph_config *c, const char *walk)
{
    for (size_t i = 0; i < c->n_replay_graph_walks; i++) {
        if (strcmp(c->replay_graph_walks[i], walk) == 0)
            return true;
    }
    return false;
}
