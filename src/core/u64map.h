/*
 * u64map.h — open-addressing hash map from 64-bit keys to 64-bit values.
 *
 * The bookkeeper keys one record per tensor id with it, so it is built for that load: linear
 * probing over a power-of-two table, a 64-bit mixer for ids whose low bits are a counter, and
 * backward-shift deletion (no tombstones, so a long-lived map does not degrade as tensors come
 * and go). Any key is allowed, 0 included. Not thread-safe.
 *
 * Small mode: the first MSTAR__MAP_SMALL entries live in the map itself, in insertion order, and
 * are found by a linear scan; the table is made, and they move into it, at the next put (or at a
 * reserve of more). A map that never held more allocates nothing, so a map built for one call on
 * the stack costs no allocation for a few entries, and a scan of eight keys beats hashing them.
 * Nothing in the map points into it: it can be copied or moved by value (as a vector of them
 * moves) while nothing else refers to it; a pointer from find is valid until the map changes or
 * moves. Clearing a map takes it back to small mode and keeps its table for the next switch.
 *
 * Iteration: `size_t it = 0; while (mstar__u64map_next(m, &it, &k, &v)) ...`. Removing during an
 * iteration may skip or revisit entries; collect keys first.
 */
#ifndef MSTAR_CORE_U64MAP_H
#define MSTAR_CORE_U64MAP_H

#include "mstar/core.h"

/* The entries a map holds in itself before it makes its table. */
enum { MSTAR__MAP_SMALL = 8 };

typedef struct mstar__u64map {
    uint64_t *keys; /* the table: NULL until the map first needed one */
    uint64_t *vals;
    uint8_t *used;
    size_t cap; /* the table's slots: 0 or a power of two */
    size_t len;
    bool hashed; /* the entries are in the table; false: in small_keys/small_vals[0, len) */
    uint64_t small_keys[MSTAR__MAP_SMALL];
    uint64_t small_vals[MSTAR__MAP_SMALL];
} mstar__u64map;

void mstar__u64map_init(mstar__u64map *m);
void mstar__u64map_free(mstar__u64map *m);
/* Remove every entry, keeping the table (if any) for when the map next outgrows small mode. */
void mstar__u64map_clear(mstar__u64map *m);
/* Make room for `n` entries without growing again (up to MSTAR__MAP_SMALL: the room in the map). */
mstar_status mstar__u64map_reserve(mstar__u64map *m, size_t n);
/* Pointer to the value stored under `key`, or NULL. Valid until the next put or remove. */
uint64_t *mstar__u64map_find(const mstar__u64map *m, uint64_t key);
bool mstar__u64map_get(const mstar__u64map *m, uint64_t key, uint64_t *val);
/* Insert or overwrite. MSTAR_ENOMEM leaves the map unchanged. */
mstar_status mstar__u64map_put(mstar__u64map *m, uint64_t key, uint64_t val);
/* Remove `key`; false if absent. `old` (may be NULL) receives the value. */
bool mstar__u64map_remove(mstar__u64map *m, uint64_t key, uint64_t *old);
bool mstar__u64map_next(const mstar__u64map *m, size_t *it, uint64_t *key, uint64_t *val);

static inline size_t mstar__u64map_len(const mstar__u64map *m)
{
    return m->len;
}

/* The mixer, shared with the string map. */
static inline uint64_t mstar__hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

#endif
