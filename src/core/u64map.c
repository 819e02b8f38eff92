/*
 * u64map.c — see u64map.h. Load factor is kept at or below 1/2 so probe chains stay short under
 * the bookkeeper's store/dereference churn. A map in small mode (hashed false) has its entries
 * in small_keys/small_vals and any table it kept (from before a clear) empty.
 */
#include "u64map.h"

#include <stdlib.h>
#include <string.h>

void mstar__u64map_init(mstar__u64map *m)
{
    memset(m, 0, sizeof(*m));
}

void mstar__u64map_free(mstar__u64map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof(*m));
}

void mstar__u64map_clear(mstar__u64map *m)
{
    if (m->hashed)
        memset(m->used, 0, m->cap);
    m->hashed = false;
    m->len = 0;
}

static size_t slot_of(const mstar__u64map *m, uint64_t key)
{
    return (size_t)(mstar__hash_u64(key) & (m->cap - 1));
}

/* Into the table, which has room and does not hold `key`. */
static void table_insert(mstar__u64map *m, uint64_t key, uint64_t val)
{
    size_t s = slot_of(m, key);
    while (m->used[s])
        s = (s + 1) & (m->cap - 1);
    m->used[s] = 1;
    m->keys[s] = key;
    m->vals[s] = val;
}

/* A table of new_cap slots holding the entries of the old one (none in small mode: a kept table
 * is empty then). */
static mstar_status rehash(mstar__u64map *m, size_t new_cap)
{
    uint64_t *keys = malloc(new_cap * sizeof(uint64_t));
    uint64_t *vals = malloc(new_cap * sizeof(uint64_t));
    uint8_t *used = calloc(new_cap, 1);
    if (keys == NULL || vals == NULL || used == NULL) {
        free(keys);
        free(vals);
        free(used);
        return mstar_error_set(MSTAR_ENOMEM, "hash map of %zu slots", new_cap);
    }
    uint64_t *old_keys = m->keys, *old_vals = m->vals;
    uint8_t *old_used = m->used;
    size_t old_cap = m->hashed ? m->cap : 0;
    m->keys = keys;
    m->vals = vals;
    m->used = used;
    m->cap = new_cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old_used[i])
            table_insert(m, old_keys[i], old_vals[i]);
    free(old_keys);
    free(old_vals);
    free(old_used);
    return MSTAR_OK;
}

mstar_status mstar__u64map_reserve(mstar__u64map *m, size_t n)
{
    if (!m->hashed && n <= MSTAR__MAP_SMALL)
        return MSTAR_OK; /* room in the map itself */
    size_t want = 16;
    while (want < 2 * n) {
        if (want > SIZE_MAX / 4)
            return mstar_error_set(MSTAR_ENOMEM, "hash map of %zu entries", n);
        want *= 2;
    }
    if (want <= m->cap)
        return MSTAR_OK;
    return rehash(m, want);
}

/* Leave small mode: the entries held in the map move into the table, made room for one more. */
static mstar_status to_table(mstar__u64map *m)
{
    mstar_status st = mstar__u64map_reserve(m, m->len + 1);
    if (st != MSTAR_OK)
        return st;
    for (size_t i = 0; i < m->len; i++)
        table_insert(m, m->small_keys[i], m->small_vals[i]);
    m->hashed = true;
    return MSTAR_OK;
}

uint64_t *mstar__u64map_find(const mstar__u64map *m, uint64_t key)
{
    if (!m->hashed) {
        for (size_t i = 0; i < m->len; i++)
            if (m->small_keys[i] == key)
                return (uint64_t *)&m->small_vals[i]; /* the caller's map, as the table's is */
        return NULL;
    }
    if (m->len == 0)
        return NULL;
    size_t s = slot_of(m, key);
    while (m->used[s]) {
        if (m->keys[s] == key)
            return &m->vals[s];
        s = (s + 1) & (m->cap - 1);
    }
    return NULL;
}

bool mstar__u64map_get(const mstar__u64map *m, uint64_t key, uint64_t *val)
{
    uint64_t *v = mstar__u64map_find(m, key);
    if (v == NULL)
        return false;
    if (val)
        *val = *v;
    return true;
}

mstar_status mstar__u64map_put(mstar__u64map *m, uint64_t key, uint64_t val)
{
    uint64_t *v = mstar__u64map_find(m, key);
    if (v != NULL) {
        *v = val;
        return MSTAR_OK;
    }
    mstar_status st;
    if (!m->hashed) {
        if (m->len < MSTAR__MAP_SMALL) {
            m->small_keys[m->len] = key;
            m->small_vals[m->len] = val;
            m->len++;
            return MSTAR_OK;
        }
        if ((st = to_table(m)) != MSTAR_OK)
            return st;
    }
    if ((st = mstar__u64map_reserve(m, m->len + 1)) != MSTAR_OK)
        return st;
    table_insert(m, key, val);
    m->len++;
    return MSTAR_OK;
}

bool mstar__u64map_remove(mstar__u64map *m, uint64_t key, uint64_t *old)
{
    if (!m->hashed) {
        for (size_t i = 0; i < m->len; i++) {
            if (m->small_keys[i] != key)
                continue;
            if (old)
                *old = m->small_vals[i];
            /* Keep the insertion order: the later entries move down one. */
            memmove(&m->small_keys[i], &m->small_keys[i + 1], (m->len - i - 1) * sizeof(uint64_t));
            memmove(&m->small_vals[i], &m->small_vals[i + 1], (m->len - i - 1) * sizeof(uint64_t));
            m->len--;
            return true;
        }
        return false;
    }
    if (m->len == 0)
        return false;
    size_t mask = m->cap - 1;
    size_t s = slot_of(m, key);
    while (m->used[s] && m->keys[s] != key)
        s = (s + 1) & mask;
    if (!m->used[s])
        return false;
    if (old)
        *old = m->vals[s];
    /* Backward-shift: pull later members of the probe chain into the hole when their home slot
     * does not lie cyclically in (hole, current]. */
    size_t hole = s;
    size_t j = s;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j])
            break;
        size_t home = slot_of(m, m->keys[j]);
        bool stays = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        m->keys[hole] = m->keys[j];
        m->vals[hole] = m->vals[j];
        hole = j;
    }
    m->used[hole] = 0;
    m->len--;
    return true;
}

bool mstar__u64map_next(const mstar__u64map *m, size_t *it, uint64_t *key, uint64_t *val)
{
    if (!m->hashed) {
        if (*it >= m->len)
            return false;
        size_t i = (*it)++;
        if (key)
            *key = m->small_keys[i];
        if (val)
            *val = m->small_vals[i];
        return true;
    }
    while (*it < m->cap) {
        size_t i = (*it)++;
        if (m->used[i]) {
            if (key)
                *key = m->keys[i];
            if (val)
                *val = m->vals[i];
            return true;
        }
    }
    return false;
}
