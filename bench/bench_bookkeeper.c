/*
 * bench_bookkeeper.c — `mstar bench bookkeeper [--json] [--quick]`: store + dereference pairs
 * per second on one core, at steady state (a window of live tensors: each step stores a new one
 * and releases the oldest, so the index never runs empty).
 *
 * Three levels, each against the same baseline measured in the same run — the bare hash map the
 * bookkeeper indexes with (put + remove of a 64-bit key):
 *   - bookkeeper: mstar__bk_put, safety hold (increment 1), dereference 1 → collected, slot
 *     recycled. This is the figure with the 5 M pairs/s target;
 *   - bookkeeper, batched: the same in batches of 64 with the uniform batch forms;
 *   - manager: mstar_comm_store_and_return_tensor_info_batch + increment/dereference batch
 *     uniform on the local transport, 64 outputs at a time (descriptors' columns, interning,
 *     ownership of the caller's memory, collection included).
 */
#include "bench.h"

#include "core/u64map.h"
#include "core/vec.h"
#include "mstar/mstar.h"
#include "tensors/bookkeeper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 4096
#define BATCH  64
#define ROUNDS 5

static volatile uint64_t sink;

typedef double (*run_fn)(long pairs); /* seconds for `pairs` pairs; < 0 on failure */

static double run_map(long pairs)
{
    mstar__u64map m;
    mstar__u64map_init(&m);
    mstar__u64map_reserve(&m, WINDOW + BATCH);
    uint64_t t0 = mstar__now_ns();
    for (long i = 0; i < pairs; i++) {
        uint64_t key = mstar_id_make(100, (uint64_t)i + 1);
        mstar__u64map_put(&m, key, (uint64_t)i);
        if (i >= WINDOW) {
            uint64_t v;
            mstar__u64map_remove(&m, mstar_id_make(100, (uint64_t)(i - WINDOW) + 1), &v);
            sink += v;
        }
    }
    double s = (double)(mstar__now_ns() - t0) * 1e-9;
    mstar__u64map_free(&m);
    return s;
}

static double run_bk(long pairs)
{
    mstar__bk bk;
    mstar__bk_init(&bk);
    mstar__vec collected;
    mstar__vec_init(&collected, sizeof(uint32_t));
    mstar__vec_reserve(&collected, BATCH);
    mstar__bk_reserve(&bk, WINDOW + BATCH);
    uint64_t t0 = mstar__now_ns();
    for (long i = 0; i < pairs; i++) {
        mstar_tensor_id uuid = mstar_id_make(100, (uint64_t)i + 1);
        uint32_t slot;
        if (mstar__bk_put(&bk, uuid, 0, &slot) != MSTAR_OK)
            return -1;
        mstar__bk_increment(&bk, uuid, 1);
        if (i >= WINDOW) {
            mstar__bk_dereference(&bk, mstar_id_make(100, (uint64_t)(i - WINDOW) + 1), 1,
                                  &collected);
            for (size_t k = 0; k < collected.len; k++)
                mstar__bk_release_slot(&bk, *(uint32_t *)mstar__vec_at(&collected, k));
            sink += collected.len;
            collected.len = 0;
        }
    }
    double s = (double)(mstar__now_ns() - t0) * 1e-9;
    mstar__vec_free(&collected);
    mstar__bk_free(&bk);
    return s;
}

static double run_bk_batch(long pairs)
{
    mstar__bk bk;
    mstar__bk_init(&bk);
    mstar__vec collected;
    mstar__vec_init(&collected, sizeof(uint32_t));
    mstar__vec_reserve(&collected, BATCH);
    mstar__bk_reserve(&bk, WINDOW + BATCH);
    mstar_tensor_id ids[BATCH], old[BATCH];
    uint64_t t0 = mstar__now_ns();
    for (long i = 0; i < pairs; i += BATCH) {
        for (int k = 0; k < BATCH; k++) {
            ids[k] = mstar_id_make(100, (uint64_t)(i + k) + 1);
            old[k] = mstar_id_make(100, (uint64_t)(i + k - WINDOW) + 1);
            uint32_t slot;
            if (mstar__bk_put(&bk, ids[k], 0, &slot) != MSTAR_OK)
                return -1;
        }
        mstar__bk_increment_batch_uniform(&bk, ids, BATCH, 1);
        if (i >= WINDOW) {
            mstar__bk_dereference_batch_uniform(&bk, old, BATCH, 1, &collected);
            for (size_t k = 0; k < collected.len; k++)
                mstar__bk_release_slot(&bk, *(uint32_t *)mstar__vec_at(&collected, k));
            sink += collected.len;
            collected.len = 0;
        }
    }
    double s = (double)(mstar__now_ns() - t0) * 1e-9;
    mstar__vec_free(&collected);
    mstar__bk_free(&bk);
    return s;
}

static void no_release(void *ctx, void *data)
{
    sink++;
}

static double run_comm(long pairs)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "worker_0";
    o.transport = MSTAR_TRANSPORT_LOCAL;
    mstar_comm *c;
    if (mstar_comm_create(&o, &c) != MSTAR_OK)
        return -1;
    static float payload[BATCH][4];
    int64_t shape[1] = { 4 };
    mstar_output outs[BATCH];
    for (int k = 0; k < BATCH; k++) {
        memset(&outs[k], 0, sizeof(outs[k]));
        outs[k].signal = "hidden";
        mstar_tensor_init(&outs[k].tensor, payload[k], mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1,
                          shape);
        outs[k].release = no_release;
    }
    const char *signals[1] = { "hidden" };
    mstar_rid rid = mstar_rid_from_int(1);
    mstar_tensor_id *ring = calloc(WINDOW + BATCH, sizeof(*ring));
    double s = -1;
    uint64_t t0 = mstar__now_ns();
    long i = 0;
    for (; ring != NULL && i < pairs; i += BATCH) {
        mstar_stored_outputs so;
        if (mstar_comm_store_and_return_tensor_info_batch(c, &rid, 1, outs, BATCH, signals, 1, NULL,
                                                          &so) != MSTAR_OK)
            break;
        mstar_comm_increment_ref_batch_uniform(c, so.flat_uuids, so.n, 1);
        size_t at = (size_t)(i % WINDOW);
        if (i >= WINDOW)
            mstar_comm_dereference_batch_uniform(c, &ring[at], BATCH, 1);
        memcpy(&ring[at], so.flat_uuids, BATCH * sizeof(*ring));
        mstar_stored_outputs_clear(&so);
    }
    if (i >= pairs)
        s = (double)(mstar__now_ns() - t0) * 1e-9;
    free(ring);
    mstar_comm_destroy(c);
    return s;
}

/* Pairs per second: the best of ROUNDS runs. */
static double rate(run_fn fn, long pairs)
{
    double best = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double s = fn(pairs);
        if (s <= 0)
            return -1;
        double pps = (double)pairs / s;
        best = pps > best ? pps : best;
    }
    return best;
}

int mstar_bench_bookkeeper(int argc, char **argv)
{
    bool json = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else {
            fprintf(stderr, "usage: mstar bench bookkeeper [--json] [--quick]\n");
            return 2;
        }
    }
    long pairs = quick ? 200000 : 2000000;
    struct {
        const char *name;
        run_fn fn;
        double pps;
    } rows[] = {
        { "u64map put+remove (baseline)", run_map, 0 },
        { "bookkeeper store+dereference", run_bk, 0 },
        { "bookkeeper, batches of 64", run_bk_batch, 0 },
        { "manager store_batch+dereference", run_comm, 0 },
    };
    size_t n = sizeof(rows) / sizeof(rows[0]);
    for (size_t i = 0; i < n; i++) {
        rows[i].pps = rate(rows[i].fn, pairs);
        if (rows[i].pps < 0) {
            fprintf(stderr, "mstar bench bookkeeper: %s failed: %s\n", rows[i].name,
                    mstar_last_error());
            return 1;
        }
    }
    double base = rows[0].pps;
    bool met = rows[1].pps >= 5e6;
    if (json) {
        printf("{\"suite\":\"bookkeeper\",\"window\":%d,\"pairs\":%ld,\"results\":[", WINDOW,
               pairs);
        for (size_t i = 0; i < n; i++)
            printf("%s{\"name\":\"%s\",\"pairs_per_s\":%.0f,\"ratio_to_baseline\":%.3f}",
                   i ? "," : "", rows[i].name, rows[i].pps, rows[i].pps / base);
        printf("],\"target_pairs_per_s\":5000000,\"target_met\":%s}\n", met ? "true" : "false");
        return 0;
    }
    printf("bookkeeper: store + dereference pairs per second, one core, %d tensors live\n\n",
           WINDOW);
    printf("  %-34s %14s %10s\n", "", "pairs/s", "vs map");
    for (size_t i = 0; i < n; i++)
        printf("  %-34s %14.0f %9.2fx\n", rows[i].name, rows[i].pps, rows[i].pps / base);
    printf("\n  target: bookkeeper >= 5,000,000 pairs/s: %s\n", met ? "met" : "NOT met");
    return 0;
}
