/*
 * strmap.h — map from byte-string keys to 64-bit values.
 *
 * Built on the u64 map: the map holds hash → first entry of a chain, entries live in one array
 * with a free list. Keys are copied. Used where keys come as names (string request ids, signal
 * names, peers) rather than as tensor ids. Not thread-safe.
 *
 * Small mode, as the u64 map's: the first MSTAR__MAP_SMALL entries live in the map itself, in
 * insertion order, found by a linear scan, their keys copied into small_bytes while those have
 * room (a longer key alone is copied to the heap); at the next put they move into the entries
 * and the hash map. A map that never held more than a few short keys allocates nothing. Nothing
 * in the map points into it, so it moves by value as before; a key or value pointer it hands out
 * is valid until the map changes or moves. Clearing a map takes it back to small mode and keeps
 * the room of its entries and hash map for the next switch.
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

/* The bytes of keys, their terminators included, a map in small mode holds in itself. */
enum { MSTAR__STRMAP_SMALL_BYTES = 256 };

typedef struct mstar__strmap {
    mstar__u64map heads; /* hash → entry index + 1 */
    mstar__strmap_entry *entries;
    uint32_t nentries;
    uint32_t cap;
    uint32_t free_head; /* +1; 0 = none */
    size_t len;
    bool hashed;         /* entries and heads hold the map; false: small mode, the arrays below */
    uint16_t small_used; /* bytes of small_bytes taken */
    uint16_t small_off[MSTAR__MAP_SMALL]; /* where key i is in small_bytes, unless on the heap */
    size_t small_lens[MSTAR__MAP_SMALL];
    char *small_heap[MSTAR__MAP_SMALL]; /* key i's copy when small_bytes had no room; or NULL */
    uint64_t small_vals[MSTAR__MAP_SMALL];
    char small_bytes[MSTAR__STRMAP_SMALL_BYTES];
} mstar__strmap;

void mstar__strmap_init(mstar__strmap *m);
void mstar__strmap_free(mstar__strmap *m);
/* Remove every entry but keep the room they took: a map filled and emptied over and over (a
 * request's deliveries) then stops allocating for anything but its keys, and for nothing while
 * it holds a few short ones (small mode). */
void mstar__strmap_clear(mstar__strmap *m);
uint64_t *mstar__strmap_find(const mstar__strmap *m, const char *key, size_t len);
mstar_status mstar__strmap_put(mstar__strmap *m, const char *key, size_t len, uint64_t val);
bool mstar__strmap_remove(mstar__strmap *m, const char *key, size_t len, uint64_t *old);
/* Iterate live entries: `uint32_t it = 0; while (mstar__strmap_next(m, &it, &k, &klen, &v))`. */
bool mstar__strmap_next(const mstar__strmap *m, uint32_t *it, const char **key, size_t *len,
                        uint64_t *val);

static inline size_t mstar__strmap_len(const mstar__strmap *m)
{
    return m->len;
}

/* FNV-1a over the bytes, then the u64 mixer. */
uint64_t mstar__hash_bytes(const void *data, size_t len);

#endif
