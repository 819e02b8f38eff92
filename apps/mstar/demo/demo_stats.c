/*
 * demo_stats.c — step counters per bucket, edge traffic and percentiles (see demo_stats.h).
 */
#include "demo_stats.h"

#include <stdlib.h>
#include <string.h>

static demo_bucket_stats *bucket_for(demo_step_stats *s, const char *walk, int64_t bs,
                                     int64_t tokens)
{
    for (size_t i = 0; i < s->n; i++) {
        demo_bucket_stats *b = &s->b[i];
        if (strcmp(b->walk, walk) == 0 && b->bs == bs && b->tokens == tokens)
            return b;
    }
    if (s->n == DEMO_MAX_STEP_BUCKETS)
        return &s->b[s->n - 1];
    demo_bucket_stats *b = &s->b[s->n++];
    memset(b, 0, sizeof(*b));
    snprintf(b->walk, sizeof(b->walk), "%s", walk);
    b->bs = bs;
    b->tokens = tokens;
    return b;
}

void demo_step_stats_add(demo_step_stats *s, const char *walk, const demo_step_info *info)
{
    demo_bucket_stats *b = bucket_for(s, walk, info->bs, info->tokens);
    if (info->replayed)
        b->replays++;
    else
        b->eager++;
    b->rows += info->rows;
    b->real_tokens += info->real_tokens;
    b->micros += (int64_t)(info->seconds * 1e6);
}

bool demo_bucket_fit(const demo_sizes *batch_sizes, const demo_sizes *token_lengths, int64_t rows,
                     int64_t tokens, int64_t *bucket_bs, int64_t *bucket_tokens)
{
    bool found = false;
    int64_t best_bs = 0, best_tokens = 0;
    for (size_t i = 0; i < batch_sizes->n; i++) {
        int64_t bs = batch_sizes->v[i];
        size_t nt = token_lengths != NULL ? token_lengths->n : 1;
        for (size_t j = 0; j < nt; j++) {
            int64_t t = token_lengths != NULL ? token_lengths->v[j] : bs;
            /* Packed buckets carry more tokens than rows (design.md G-10). */
            if (bs < rows || t < tokens || (token_lengths != NULL && t <= bs))
                continue;
            if (!found || t < best_tokens || (t == best_tokens && bs < best_bs)) {
                found = true;
                best_bs = bs;
                best_tokens = t;
            }
        }
    }
    if (found) {
        *bucket_bs = best_bs;
        *bucket_tokens = best_tokens;
    }
    return found;
}

/* The fields of one bucket, in kv order. */
static const char *const field_names[] = { "r", "e", "rows", "tok", "us" };
#define NFIELDS (sizeof(field_names) / sizeof(field_names[0]))

static int64_t *field_at(demo_bucket_stats *b, size_t f)
{
    int64_t *fields[NFIELDS] = { &b->replays, &b->eager, &b->rows, &b->real_tokens, &b->micros };
    return fields[f];
}

mstar_status demo_step_stats_to_kv(const demo_step_stats *s, size_t *next, size_t reserve,
                                   mstar_msg *msg)
{
    while (*next < s->n && msg->nkv + NFIELDS + reserve <= MSTAR_WIRE_MAX_KV) {
        demo_bucket_stats b = s->b[*next];
        for (size_t f = 0; f < NFIELDS; f++) {
            char key[64];
            snprintf(key, sizeof(key), "%s.b%lld.t%lld.%s", b.walk, (long long)b.bs,
                     (long long)b.tokens, field_names[f]);
            mstar_status st = mstar_msg_add_kv(msg, key, *field_at(&b, f));
            if (st != MSTAR_OK)
                return st;
        }
        (*next)++;
    }
    return MSTAR_OK;
}

bool demo_step_stats_merge_kv(demo_step_stats *s, const mstar_kv *kv)
{
    char walk[DEMO_WALK_NAME_MAX], field[8];
    long long bs, tokens;
    int used = 0;
    if (sscanf(kv->key, "%15[a-z].b%lld.t%lld.%7[a-z]%n", walk, &bs, &tokens, field, &used) != 4 ||
        kv->key[used] != '\0' || bs < 0 || tokens < 0 || kv->value < 0)
        return false;
    for (size_t f = 0; f < NFIELDS; f++) {
        if (strcmp(field, field_names[f]) == 0) {
            *field_at(bucket_for(s, walk, bs, tokens), f) += kv->value;
            return true;
        }
    }
    return false;
}

static bool noted_cuda_ipc(const demo_traffic *t, const char *name)
{
    for (size_t i = 0; i < t->ncuda_ipc; i++)
        if (strcmp(t->cuda_ipc[i], name) == 0)
            return true;
    return false;
}

static demo_edge_stats *edge_for(demo_traffic *t, const char *name, const char *source,
                                 const char *dest)
{
    for (size_t i = 0; i < t->n; i++) {
        demo_edge_stats *e = &t->e[i];
        if (strcmp(e->name, name) == 0 && strcmp(e->source, source) == 0 &&
            (dest == NULL || strcmp(e->dest, dest) == 0))
            return e;
    }
    if (t->n == DEMO_MAX_EDGES)
        return NULL;
    demo_edge_stats *e = &t->e[t->n++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    snprintf(e->source, sizeof(e->source), "%s", source);
    snprintf(e->dest, sizeof(e->dest), "%s", dest != NULL ? dest : "");
    e->cuda_ipc = noted_cuda_ipc(t, name);
    return e;
}

void demo_traffic_add_tx(demo_traffic *t, const mstar_tx_info *tx, uint32_t n, const char *dest)
{
    for (uint32_t i = 0; i < n; i++) {
        demo_edge_stats *e = edge_for(t, tx[i].edge_name, tx[i].source_entity, dest);
        if (e == NULL)
            continue;
        e->tx_count += tx[i].count;
        e->tx_bytes += tx[i].num_bytes;
        e->tx_s += tx[i].time_s;
    }
}

void demo_traffic_add_rx(demo_traffic *t, const mstar_rx_info *rx, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        demo_edge_stats *e = edge_for(t, rx[i].edge_name, rx[i].source_entity, rx[i].dest_entity);
        if (e == NULL)
            continue;
        e->rx_count += rx[i].count;
        e->rx_bytes += rx[i].num_bytes;
        e->rx_s += rx[i].time_s;
    }
}

void demo_traffic_note_cuda_ipc(demo_traffic *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0)
            t->e[i].cuda_ipc = true;
    if (!noted_cuda_ipc(t, name) && t->ncuda_ipc < DEMO_MAX_EDGES)
        snprintf(t->cuda_ipc[t->ncuda_ipc++], sizeof(t->cuda_ipc[0]), "%s", name);
}

const char *demo_edge_route(const demo_edge_stats *e, demo_transport transport)
{
    if (e->cuda_ipc)
        return "cuda_ipc";
    return transport == DEMO_TRANSPORT_UCX_TCP ? "ucx" : demo_transport_name(transport);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double demo_percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}
