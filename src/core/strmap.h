/*
 * strmap.h — map from byte-string keys to 64-bit values.
 *
 * Built on the u64 map: the map holds hash → first entry of a chain, entries live in one array
 * with a free list. Keys are copied, NUL-terminated, and may hold any bytes (their length is
 * kept). Used where keys come as names (string request ids, signal names, peers) rather than as
 * tensor ids. Not thread-safe.
 *
 * Small mode: the maps on hot paths (a request's seen set, an ACK's peers) hold a few short
 * names, such as "worker_1", so up to MSTAR__MAP_SMALL keys of at most MSTAR__STRMAP_SMALL_KEY
 * bytes are copied into the map itself and found by a linear scan, with no hashing and no
 * allocation. A put of a longer key, or of one more key, switches the map to hashed mode: the
 * small entries move into the entries array and the hash map. Clearing a map takes it back to
 * small mode and keeps the room of its entries and hash map for the next switch.
 *
 * Nothing in the map points into it, so it moves by value; a key or value pointer it hands out
 * is valid until the map changes or moves. Out of memory (MSTAR_ENOMEM) leaves the map's entries
 * as they were and the map usable.
 */
#ifndef MSTAR_CORE_STRMAP_H
#define MSTAR_CORE_STRMAP_H

#include "u64map.h"

typedef struct mstar__strmap_entry {
    char *key; /* NUL-terminated copy; NULL marks a free entry */
    size_t key_len;
    uint64_t hash;
    uint64_t val;
    uint32_t next; /* next entry of the chain or of the free list, +1; 0 = end */
} mstar__strmap_entry;

/* The longest key, in bytes, that a map in small mode holds in itself. */
enum { MSTAR__STRMAP_SMALL_KEY = 31 };

typedef struct mstar__strmap {
    mstar__u64map heads; /* hash → entry index + 1 */
    mstar__strmap_entry *entries;
    uint32_t nentries;
    uint32_t cap;
    uint32_t free_head; /* +1; 0 = none */
    size_t len;
    bool hashed; /* entries and heads hold the map; false: small mode, the small_* arrays */
    uint8_t small_lens[MSTAR__MAP_SMALL];
    uint64_t small_vals[MSTAR__MAP_SMALL];
    char small_keys[MSTAR__MAP_SMALL][MSTAR__STRMAP_SMALL_KEY + 1]; /* NUL-terminated */
} mstar__strmap;

void mstar__strmap_init(mstar__strmap *m);
/* Free everything the map holds; it is then empty, as after init. */
void mstar__strmap_free(mstar__strmap *m);
/* Remove every entry but keep the room they took: a map filled and emptied over and over (a
 * request's deliveries) then stops allocating for anything but its keys, and for nothing while
 * it holds a few short ones (small mode). */
void mstar__strmap_clear(mstar__strmap *m);
/* Pointer to the value stored under `key` (`len` bytes), or NULL. */
uint64_t *mstar__strmap_find(const mstar__strmap *m, const char *key, size_t len);
/* Insert or overwrite. MSTAR_ENOMEM leaves the entries unchanged. */
mstar_status mstar__strmap_put(mstar__strmap *m, const char *key, size_t len, uint64_t val);
/* Remove `key`; false if absent. `old` (may be NULL) receives the value. */
bool mstar__strmap_remove(mstar__strmap *m, const char *key, size_t len, uint64_t *old);
/* Iterate live entries, in no particular order: `uint32_t it = 0; while (mstar__strmap_next(m,
 * &it, &k, &klen, &v))`; any of key, len, val may be NULL. The key is NUL-terminated. Removing
 * during an iteration may skip entries: collect the keys first. */
bool mstar__strmap_next(const mstar__strmap *m, uint32_t *it, const char **key, size_t *len,
                        uint64_t *val);

static inline size_t mstar__strmap_len(const mstar__strmap *m)
{
    return m->len;
}

/* The bytes folded in eight at a time, then the u64 mixer. */
uint64_t mstar__hash_bytes(const void *data, size_t len);

#endif
