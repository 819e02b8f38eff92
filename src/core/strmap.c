/*
 * strmap.c — see strmap.h.
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

void mstar__strmap_free(mstar__strmap *m)
{
    for (uint32_t i = 0; i < m->nentries; i++)
        free(m->entries[i].key);
    free(m->entries);
    mstar__u64map_free(&m->heads);
    memset(m, 0, sizeof(*m));
}

void mstar__strmap_clear(mstar__strmap *m)
{
    for (uint32_t i = 0; i < m->nentries; i++)
        free(m->entries[i].key);
    m->nentries = 0;
    m->free_head = 0;
    m->len = 0;
    mstar__u64map_clear(&m->heads);
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

mstar_status mstar__strmap_put(mstar__strmap *m, const char *key, size_t len, uint64_t val)
{
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

bool mstar__strmap_remove(mstar__strmap *m, const char *key, size_t len, uint64_t *old)
{
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
