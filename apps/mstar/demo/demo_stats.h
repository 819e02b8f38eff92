/*
 * demo_stats.h — what the demo counts: steps per bucket (graph replays against eager steps),
 * traffic per edge (the transport's TX/RX records, design.md "Transfer statistics"), request
 * latencies.
 *
 * Workers count their steps and send the table to the driver at shutdown inside HELLO messages
 * (free-form kv: "<walk>.b<bs>.t<tokens>.<field>"), split over as many messages as it takes.
 */
#ifndef MSTAR_EXAMPLES_DEMO_STATS_H
#define MSTAR_EXAMPLES_DEMO_STATS_H

#include "demo.h"

/* One step as its component ran it. */
typedef struct demo_step_info {
    bool replayed;      /* a captured graph ran it */
    int64_t bs, tokens; /* the bucket that fits the step (captured or configured); 0, 0: none */
    int64_t rows;       /* real rows */
    int64_t real_tokens;
    double seconds;
} demo_step_info;

#define DEMO_WALK_NAME_MAX    16
#define DEMO_MAX_STEP_BUCKETS 96

typedef struct demo_bucket_stats {
    char walk[DEMO_WALK_NAME_MAX]; /* "encode", "prefill", "decode" */
    int64_t bs, tokens;
    int64_t replays, eager;
    int64_t rows, real_tokens;
    int64_t micros;
} demo_bucket_stats;

typedef struct demo_step_stats {
    demo_bucket_stats b[DEMO_MAX_STEP_BUCKETS];
    size_t n;
} demo_step_stats;

/* Count one step of `walk` (a name of at most 15 bytes). Steps past the table's size are counted
 * in its last entry. */
void demo_step_stats_add(demo_step_stats *s, const char *walk, const demo_step_info *info);

/* The smallest configured (bs, tokens) bucket that holds `rows` rows and `tokens` tokens, the
 * lexicographic tightest fit of design.md "Lookup" (fewest tokens, then fewest rows). For a
 * decode walk tokens == rows; `token_lengths` NULL means tokens == bs. false: none fits. */
bool demo_bucket_fit(const demo_sizes *batch_sizes, const demo_sizes *token_lengths, int64_t rows,
                     int64_t tokens, int64_t *bucket_bs, int64_t *bucket_tokens);

/* Append the entries [*next, ...) as kv to `msg` while they fit (MSTAR_WIRE_MAX_KV less
 * `reserve` entries); *next moves past what was appended. */
mstar_status demo_step_stats_to_kv(const demo_step_stats *s, size_t *next, size_t reserve,
                                   mstar_msg *msg);
/* Merge one kv written by demo_step_stats_to_kv; false when `kv` is not one. */
bool demo_step_stats_merge_kv(demo_step_stats *s, const mstar_kv *kv);

/* Traffic of one edge (signal) between two entities, from both ends' records. */
typedef struct demo_edge_stats {
    char name[MSTAR_NAME_MAX + 1];
    char source[MSTAR_NAME_MAX + 1];
    char dest[MSTAR_NAME_MAX + 1];
    int64_t tx_count, tx_bytes;
    double tx_s;
    int64_t rx_count, rx_bytes;
    double rx_s;
    bool cuda_ipc; /* its producer offered its tensors over the CUDA IPC route */
} demo_edge_stats;

/* The kv the last worker's RESULT_TENSORS carries, "cuda_ipc.<signal>" = 1, when the descriptors
 * of its input on that signal offered the CUDA IPC route (the TX/RX records do not say). */
#define DEMO_KV_CUDA_IPC "cuda_ipc."

#define DEMO_MAX_EDGES 16

typedef struct demo_traffic {
    demo_edge_stats e[DEMO_MAX_EDGES];
    size_t n;
    /* Signals noted as carried over the CUDA IPC route, so an edge recorded after the note is
     * marked too. */
    char cuda_ipc[DEMO_MAX_EDGES][MSTAR_NAME_MAX + 1];
    size_t ncuda_ipc;
} demo_traffic;

/* Add producer records; `dest` is where the edge goes (the records do not say). */
void demo_traffic_add_tx(demo_traffic *t, const mstar_tx_info *tx, uint32_t n, const char *dest);
void demo_traffic_add_rx(demo_traffic *t, const mstar_rx_info *rx, uint32_t n);
/* Mark the edges of signal `name`, now and once recorded, as carried over the CUDA IPC route. */
void demo_traffic_note_cuda_ipc(demo_traffic *t, const char *name);
/* The route an edge's bytes took: "cuda_ipc", or the run's transport ("files", "arena", "ucx"). */
const char *demo_edge_route(const demo_edge_stats *e, demo_transport transport);

/* The p-th percentile (0..100, nearest rank) of v[0..n) (sorted in place); 0 when n == 0. */
double demo_percentile(double *v, size_t n, double p);

#endif
