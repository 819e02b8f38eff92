/*
 * strmap.c — see strmap.h. In small mode (hashed false) the entries are small_*[0, len) and the
 * entries array and hash map are empty (any room they have is kept from before a clear, or a
 * failed switch).
 */
#include "strmap.h"

#include "core/assert.h"

#include <stdlib.h>
#include <string.h>

uint64_t mstar__hash_bytes(const void *data, size_t len)
{
    /* Eight bytes a step: an arena segment's name of 40-odd bytes, looked up on every read of a
     * handoff, costs six steps instead of forty. The tail is a last, zero-padded word; the length
     * goes in at the end, so that keys differing only by trailing zero bytes still differ. */
    const unsigned char *p = data;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    size_t left = len;
    for (; left >= 8; left -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, sizeof(w));
        h = (h ^ w) * UINT64_C(0x9e3779b97f4a7c15);
        h ^= h >> 32;
    }
    uint64_t last = 0;
    for (size_t i = 0; i < left; i++)
        last |= (uint64_t)p[i] << (8 * i);
    h = (h ^ last) * UINT64_C(0x9e3779b97f4a7c15);
    h ^= h >> 32;
    return mstar__hash_u64(h ^ len);
}

void mstar__strmap_init(mstar__strmap *m)
{
    memset(m, 0, sizeof(*m));
    mstar__u64map_init(&m->heads);
}

void mstar__strmap_clear(mstar__strmap *m)
{
    for (uint32_t i = 0; i < m->nentries; i++)
        free(m->entries[i].key); /* NULL for a free entry */
    m->nentries = 0;
    m->free_head = 0;
    m->len = 0;
    m->hashed = false;
    mstar__u64map_clear(&m->heads);
}

void mstar__strmap_free(mstar__strmap *m)
{
    mstar__strmap_clear(m);
    free(m->entries);
    mstar__u64map_free(&m->heads);
    mstar__strmap_init(m);
}

/* The index of `key` in a map in small mode, or -1. */
static ptrdiff_t small_find(const mstar__strmap *m, const char *key, size_t len)
{
    for (size_t i = 0; i < m->len; i++)
        if (m->small_lens[i] == len && memcmp(m->small_keys[i], key, len) == 0)
            return (ptrdiff_t)i;
    return -1;
}

static mstar__strmap_entry *chain_find(const mstar__strmap *m, uint64_t hash, const char *key,
                                       size_t len)
{
    uint64_t head;
    if (!mstar__u64map_get(&m->heads, hash, &head))
        return NULL;
    for (uint32_t i = (uint32_t)head; i != 0; i = m->entries[i - 1].next) {
        mstar__strmap_entry *e = &m->entries[i - 1];
        if (e->key_len == len && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

uint64_t *mstar__strmap_find(const mstar__strmap *m, const char *key, size_t len)
{
    if (!m->hashed) {
        ptrdiff_t i = small_find(m, key, len);
        return i >= 0 ? (uint64_t *)&m->small_vals[i] : NULL; /* the caller's map, as entries */
    }
    mstar__strmap_entry *e = chain_find(m, mstar__hash_bytes(key, len), key, len);
    return e ? &e->val : NULL;
}

/* A NUL-terminated heap copy of `key`, or NULL with the error set. */
static char *copy_key(const char *key, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        mstar_error_set(MSTAR_ENOMEM, "string map key of %zu bytes", len);
        return NULL;
    }
    memcpy(copy, key, len);
    copy[len] = '\0';
    return copy;
}

/* Room in the entries array for `want` entries. */
static mstar_status entries_room(mstar__strmap *m, uint32_t want)
{
    if (want <= m->cap)
        return MSTAR_OK;
    uint32_t ncap = m->cap ? m->cap * 2 : 16;
    mstar__strmap_entry *n = realloc(m->entries, ncap * sizeof(*n));
    if (n == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "string map of %u entries", ncap);
    m->entries = n;
    m->cap = ncap;
    return MSTAR_OK;
}

/* Fill entry `idx` (taken, not yet in a chain) and make it the head of its hash's chain. Fails
 * only where the hash map must grow. */
static mstar_status link_entry(mstar__strmap *m, uint32_t idx, char *key, size_t len, uint64_t hash,
                               uint64_t val)
{
    uint64_t head = 0;
    mstar__u64map_get(&m->heads, hash, &head);
    mstar_status st = mstar__u64map_put(&m->heads, hash, (uint64_t)idx + 1);
    if (st != MSTAR_OK)
        return st;
    m->entries[idx] = (mstar__strmap_entry){
        .key = key, .key_len = len, .hash = hash, .val = val, .next = (uint32_t)head
    };
    return MSTAR_OK;
}

/* Leave small mode: the small entries move into the entries array and the hash map, with room
 * for one more. Everything is allocated before anything moves, so out of memory leaves the map in
 * small mode as it was. */
static mstar_status to_hashed(mstar__strmap *m)
{
    size_t n = m->len;
    MSTAR__ASSERT(m->nentries == 0 && m->free_head == 0 && n <= MSTAR__MAP_SMALL);
    char *copies[MSTAR__MAP_SMALL] = { NULL };
    mstar_status st = entries_room(m, (uint32_t)n + 1);
    if (st == MSTAR_OK)
        st = mstar__u64map_reserve(&m->heads, n + 1);
    for (size_t i = 0; i < n && st == MSTAR_OK; i++)
        if ((copies[i] = copy_key(m->small_keys[i], m->small_lens[i])) == NULL)
            st = MSTAR_ENOMEM;
    if (st != MSTAR_OK) {
        for (size_t i = 0; i < n; i++)
            free(copies[i]);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t hash = mstar__hash_bytes(copies[i], m->small_lens[i]);
        MSTAR__ASSERT_OK(link_entry(m, m->nentries++, copies[i], m->small_lens[i], hash,
                                    m->small_vals[i])); /* reserved */
    }
    m->hashed = true;
    return MSTAR_OK;
}

mstar_status mstar__strmap_put(mstar__strmap *m, const char *key, size_t len, uint64_t val)
{
    if (!m->hashed) {
        ptrdiff_t found = small_find(m, key, len);
        if (found >= 0) {
            m->small_vals[found] = val;
            return MSTAR_OK;
        }
        if (m->len < MSTAR__MAP_SMALL && len <= MSTAR__STRMAP_SMALL_KEY) {
            size_t i = m->len++;
            memcpy(m->small_keys[i], key, len);
            m->small_keys[i][len] = '\0';
            m->small_lens[i] = (uint8_t)len;
            m->small_vals[i] = val;
            return MSTAR_OK;
        }
    }
    uint64_t hash = mstar__hash_bytes(key, len);
    mstar__strmap_entry *e = chain_find(m, hash, key, len); /* none in small mode: heads empty */
    if (e != NULL) {
        e->val = val;
        return MSTAR_OK;
    }
    char *copy = copy_key(key, len);
    if (copy == NULL)
        return MSTAR_ENOMEM;
    mstar_status st = m->hashed ? MSTAR_OK : to_hashed(m);
    /* A free entry, else one more at the end of the array; taken once the entry is in its chain,
     * which cannot fail after a switch (it made room). */
    bool reuse = m->free_head != 0;
    uint32_t idx = reuse ? m->free_head - 1 : m->nentries;
    uint32_t next_free = reuse ? m->entries[idx].next : 0;
    if (st == MSTAR_OK && !reuse)
        st = entries_room(m, idx + 1);
    if (st == MSTAR_OK)
        st = link_entry(m, idx, copy, len, hash, val);
    if (st != MSTAR_OK) {
        free(copy);
        return st;
    }
    if (reuse)
        m->free_head = next_free;
    else
        m->nentries++;
    m->len++;
    return MSTAR_OK;
}

bool mstar__strmap_remove(mstar__strmap *m, const char *key, size_t len, uint64_t *old)
{
    if (!m->hashed) {
        ptrdiff_t i = small_find(m, key, len);
        if (i < 0)
            return false;
        if (old)
            *old = m->small_vals[i];
        /* The last entry fills the hole: no caller needs the order of insertion. */
        size_t last = --m->len;
        memmove(m->small_keys[i], m->small_keys[last], (size_t)m->small_lens[last] + 1);
        m->small_lens[i] = m->small_lens[last];
        m->small_vals[i] = m->small_vals[last];
        return true;
    }
    uint64_t hash = mstar__hash_bytes(key, len);
    uint64_t head;
    if (!mstar__u64map_get(&m->heads, hash, &head))
        return false;
    uint32_t prev = 0;
    for (uint32_t i = (uint32_t)head; i != 0; prev = i, i = m->entries[i - 1].next) {
        mstar__strmap_entry *e = &m->entries[i - 1];
        if (e->key_len != len || memcmp(e->key, key, len) != 0)
            continue;
        if (old)
            *old = e->val;
        if (prev == 0) {
            if (e->next == 0)
                mstar__u64map_remove(&m->heads, hash, NULL);
            else /* an overwrite: cannot fail */
                MSTAR__ASSERT_OK(mstar__u64map_put(&m->heads, hash, e->next));
        } else {
            m->entries[prev - 1].next = e->next;
        }
        free(e->key);
        e->key = NULL;
        e->next = m->free_head;
        m->free_head = i;
        m->len--;
        return true;
    }
    return false;
}

bool mstar__strmap_next(const mstar__strmap *m, uint32_t *it, const char **key, size_t *len,
                        uint64_t *val)
{
    const char *k = NULL;
    size_t klen = 0;
    uint64_t v = 0;
    if (!m->hashed) {
        if (*it >= m->len)
            return false;
        uint32_t i = (*it)++;
        k = m->small_keys[i];
        klen = m->small_lens[i];
        v = m->small_vals[i];
    } else {
        while (*it < m->nentries && m->entries[*it].key == NULL)
            (*it)++;
        if (*it >= m->nentries)
            return false;
        const mstar__strmap_entry *e = &m->entries[(*it)++];
        k = e->key;
        klen = e->key_len;
        v = e->val;
    }
    if (key)
        *key = k;
    if (len)
        *len = klen;
    if (val)
        *val = v;
    return true;
}
