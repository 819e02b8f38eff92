/*
 * strmap.c — see strmap.h. In small mode (hashed false) the entries are small_*[0, len), the
 * inline keys packed in small_bytes in the order of their entries, and entries and heads empty.
 */
#include "strmap.h"

#include "core/assert.h"

#include <stdlib.h>
#include <string.h>

uint64_t mstar__hash_bytes(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return mstar__hash_u64(h);
}

void mstar__strmap_init(mstar__strmap *m)
{
    memset(m, 0, sizeof(*m));
    mstar__u64map_init(&m->heads);
}

/* Key i of a map in small mode. */
static const char *small_key(const mstar__strmap *m, size_t i)
{
    return m->small_heap[i] != NULL ? m->small_heap[i] : &m->small_bytes[m->small_off[i]];
}

static void small_free_keys(mstar__strmap *m)
{
    for (size_t i = 0; i < m->len; i++)
        free(m->small_heap[i]);
}

void mstar__strmap_free(mstar__strmap *m)
{
    if (!m->hashed)
        small_free_keys(m);
    for (uint32_t i = 0; i < m->nentries; i++)
        free(m->entries[i].key);
    free(m->entries);
    mstar__u64map_free(&m->heads);
    memset(m, 0, sizeof(*m));
}

void mstar__strmap_clear(mstar__strmap *m)
{
    if (!m->hashed)
        small_free_keys(m);
    for (uint32_t i = 0; i < m->nentries; i++)
        free(m->entries[i].key);
    m->nentries = 0;
    m->free_head = 0;
    m->len = 0;
    m->hashed = false;
    m->small_used = 0;
    mstar__u64map_clear(&m->heads);
}

/* The index of `key` in a map in small mode, or -1. */
static ptrdiff_t small_find(const mstar__strmap *m, const char *key, size_t len)
{
    for (size_t i = 0; i < m->len; i++)
        if (m->small_lens[i] == len && memcmp(small_key(m, i), key, len) == 0)
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

static mstar_status take_entry(mstar__strmap *m, uint32_t *index)
{
    if (m->free_head != 0) {
        *index = m->free_head - 1;
        m->free_head = m->entries[*index].next;
        return MSTAR_OK;
    }
    if (m->nentries == m->cap) {
        uint32_t ncap = m->cap ? m->cap * 2 : 16;
        mstar__strmap_entry *n = realloc(m->entries, ncap * sizeof(*n));
        if (n == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "string map of %u entries", ncap);
        m->entries = n;
        m->cap = ncap;
    }
    *index = m->nentries++;
    return MSTAR_OK;
}

/* A map in small mode with room for one more entry: append `key`. */
static mstar_status small_put(mstar__strmap *m, const char *key, size_t len, uint64_t val)
{
    size_t i = m->len;
    m->small_heap[i] = NULL;
    if (len < sizeof(m->small_bytes) - m->small_used) {
        m->small_off[i] = m->small_used;
        memcpy(&m->small_bytes[m->small_used], key, len);
        m->small_bytes[m->small_used + len] = '\0';
        m->small_used = (uint16_t)(m->small_used + len + 1);
    } else {
        char *copy = malloc(len + 1);
        if (copy == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "string map key of %zu bytes", len);
        memcpy(copy, key, len);
        copy[len] = '\0';
        m->small_heap[i] = copy;
        m->small_off[i] = 0;
    }
    m->small_lens[i] = len;
    m->small_vals[i] = val;
    m->len++;
    return MSTAR_OK;
}

/* Leave small mode: the entries held in the map move into the entries and the hash map, with
 * room for one more. Out of memory leaves the map as it was. */
static mstar_status to_table(mstar__strmap *m)
{
    size_t n = m->len;
    MSTAR__ASSERT(m->nentries == 0 && m->free_head == 0 && n < 16);
    if (m->cap < 16) {
        mstar__strmap_entry *e = realloc(m->entries, 16 * sizeof(*e));
        if (e == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "string map of %u entries", 16u);
        m->entries = e;
        m->cap = 16;
    }
    mstar_status st = mstar__u64map_reserve(&m->heads, n + 1);
    if (st != MSTAR_OK)
        return st;
    char *copies[MSTAR__MAP_SMALL] = { NULL };
    for (size_t i = 0; i < n && st == MSTAR_OK; i++) {
        if (m->small_heap[i] != NULL)
            continue;
        if ((copies[i] = malloc(m->small_lens[i] + 1)) == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "string map key of %zu bytes", m->small_lens[i]);
        else
            memcpy(copies[i], small_key(m, i), m->small_lens[i] + 1);
    }
    if (st != MSTAR_OK) {
        for (size_t i = 0; i < n; i++)
            free(copies[i]);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = m->nentries++;
        mstar__strmap_entry *e = &m->entries[idx];
        e->key = m->small_heap[i] != NULL ? m->small_heap[i] : copies[i];
        e->key_len = m->small_lens[i];
        e->hash = mstar__hash_bytes(e->key, e->key_len);
        e->val = m->small_vals[i];
        uint64_t head = 0;
        mstar__u64map_get(&m->heads, e->hash, &head);
        e->next = (uint32_t)head;
        MSTAR__ASSERT_OK(mstar__u64map_put(&m->heads, e->hash, (uint64_t)idx + 1)); /* reserved */
    }
    m->hashed = true;
    m->small_used = 0;
    return MSTAR_OK;
}

mstar_status mstar__strmap_put(mstar__strmap *m, const char *key, size_t len, uint64_t val)
{
    if (!m->hashed) {
        ptrdiff_t i = small_find(m, key, len);
        if (i >= 0) {
            m->small_vals[i] = val;
            return MSTAR_OK;
        }
        if (m->len < MSTAR__MAP_SMALL)
            return small_put(m, key, len, val);
        mstar_status st = to_table(m);
        if (st != MSTAR_OK)
            return st;
    }
    uint64_t hash = mstar__hash_bytes(key, len);
    mstar__strmap_entry *e = chain_find(m, hash, key, len);
    if (e != NULL) {
        e->val = val;
        return MSTAR_OK;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "string map key of %zu bytes", len);
    memcpy(copy, key, len);
    copy[len] = '\0';
    uint32_t idx = 0;
    mstar_status st = take_entry(m, &idx);
    if (st != MSTAR_OK) {
        free(copy);
        return st;
    }
    uint64_t head = 0;
    mstar__u64map_get(&m->heads, hash, &head);
    st = mstar__u64map_put(&m->heads, hash, (uint64_t)idx + 1);
    if (st != MSTAR_OK) {
        free(copy);
        m->entries[idx].key = NULL;
        m->entries[idx].next = m->free_head;
        m->free_head = idx + 1;
        return st;
    }
    mstar__strmap_entry *ne = &m->entries[idx];
    ne->key = copy;
    ne->key_len = len;
    ne->hash = hash;
    ne->val = val;
    ne->next = (uint32_t)head;
    m->len++;
    return MSTAR_OK;
}

/* Remove entry i of a map in small mode, keeping the order of the others and packing the inline
 * keys after its own down over it. */
static void small_remove(mstar__strmap *m, size_t i)
{
    if (m->small_heap[i] != NULL) {
        free(m->small_heap[i]);
    } else {
        size_t gone = m->small_lens[i] + 1, from = m->small_off[i] + gone;
        memmove(&m->small_bytes[m->small_off[i]], &m->small_bytes[from], m->small_used - from);
        m->small_used = (uint16_t)(m->small_used - gone);
        for (size_t j = i + 1; j < m->len; j++)
            if (m->small_heap[j] == NULL)
                m->small_off[j] = (uint16_t)(m->small_off[j] - gone);
    }
    size_t after = m->len - i - 1;
    memmove(&m->small_off[i], &m->small_off[i + 1], after * sizeof(m->small_off[0]));
    memmove(&m->small_lens[i], &m->small_lens[i + 1], after * sizeof(m->small_lens[0]));
    memmove(&m->small_heap[i], &m->small_heap[i + 1], after * sizeof(m->small_heap[0]));
    memmove(&m->small_vals[i], &m->small_vals[i + 1], after * sizeof(m->small_vals[0]));
    m->len--;
}

bool mstar__strmap_remove(mstar__strmap *m, const char *key, size_t len, uint64_t *old)
{
    if (!m->hashed) {
        ptrdiff_t i = small_find(m, key, len);
        if (i < 0)
            return false;
        if (old)
            *old = m->small_vals[i];
        small_remove(m, (size_t)i);
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
    if (!m->hashed) {
        if (*it >= m->len)
            return false;
        uint32_t i = (*it)++;
        if (key)
            *key = small_key(m, i);
        if (len)
            *len = m->small_lens[i];
        if (val)
            *val = m->small_vals[i];
        return true;
    }
    while (*it < m->nentries) {
        const mstar__strmap_entry *e = &m->entries[(*it)++];
        if (e->key == NULL)
            continue;
        if (key)
            *key = e->key;
        if (len)
            *len = e->key_len;
        if (val)
            *val = e->val;
        return true;
    }
    return false;
}
