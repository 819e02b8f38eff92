/*
 * ucx_regions.c — the producer's registered memory: ucp_mem_map of existing memory, the remote
 * key of each region, and the tables an AM read request is checked against.
 *
 * A region is one (ptr, nbytes) registration. Registering the same range again counts a
 * reference; another length at a registered ptr is refused (unregister names only the ptr); a
 * sub-range at another ptr is a region of its own, with its own key. Regions are found three
 * ways, all under e->lock: by ptr (register, unregister), by id (an AM request that carries the
 * descriptor's key: a stale key, from memory unregistered and registered again, is caught), and
 * by address (an AM request without a key, as the reference's descriptors carry only an
 * address): the sorted array `by_base` and the longest region ever registered bound the search.
 */
#include "tensors/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

void mstar__ucx_regions_init(mstar__ucx_engine *e)
{
    mstar__u64map_init(&e->regions_by_ptr);
    mstar__u64map_init(&e->regions_by_id);
    mstar__vec_init(&e->regions_by_base, sizeof(mstar__ucx_region *));
}

void mstar__ucx_regions_free(mstar__ucx_engine *e)
{
    size_t left = e->regions_by_base.len;
    if (left > 0)
        mstar_log(MSTAR_LOG_WARN, "ucx: %zu regions still registered at destroy; unmapping them",
                  left);
    for (size_t i = 0; i < left; i++) {
        mstar__ucx_region *r = *(mstar__ucx_region **)mstar__vec_at(&e->regions_by_base, i);
        if (r->memh != NULL)
            ucp_mem_unmap(e->ctx, r->memh);
        free(r);
    }
    mstar__vec_free(&e->regions_by_base);
    mstar__u64map_free(&e->regions_by_ptr);
    mstar__u64map_free(&e->regions_by_id);
}

/* The number of regions whose base is <= addr (the insertion point of addr). */
static size_t upper_bound(const mstar__ucx_engine *e, uint64_t addr)
{
    size_t lo = 0, hi = e->regions_by_base.len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((*(mstar__ucx_region **)mstar__vec_at(&e->regions_by_base, mid))->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

mstar__ucx_region *mstar__ucx_region_by_id(const mstar__ucx_engine *e, uint64_t id)
{
    uint64_t found;
    return mstar__u64map_get(&e->regions_by_id, id, &found) ? (mstar__ucx_region *)(uintptr_t)found
                                                            : NULL;
}

mstar__ucx_region *mstar__ucx_region_containing(const mstar__ucx_engine *e, uint64_t addr,
                                                uint64_t len)
{
    uint64_t end;
    if (!mstar__add_u64(addr, len, &end))
        return NULL;
    for (size_t i = upper_bound(e, addr); i > 0; i--) {
        mstar__ucx_region *r = *(mstar__ucx_region **)mstar__vec_at(&e->regions_by_base, i - 1);
        if (addr - r->base > e->regions_max_len)
            break; /* every region further down starts too early to reach addr */
        if (end <= r->base + r->len)
            return r;
    }
    return NULL;
}

bool mstar__ucx_region_covers(const mstar__ucx_region *r, uint64_t addr, uint64_t len)
{
    uint64_t end;
    return mstar__add_u64(addr, len, &end) && addr >= r->base && end <= r->base + r->len;
}

/* Put a new region into every table (e->lock held). */
static mstar_status insert(mstar__ucx_engine *e, mstar__ucx_region *r)
{
    mstar__vec *v = &e->regions_by_base;
    size_t at = upper_bound(e, r->base);
    mstar_status st = mstar__vec_grow(v, 1, NULL);
    if (st != MSTAR_OK)
        return st;
    memmove(mstar__vec_at(v, at + 1), mstar__vec_at(v, at), (v->len - 1 - at) * v->elsize);
    *(mstar__ucx_region **)mstar__vec_at(v, at) = r;
    st = mstar__u64map_put(&e->regions_by_ptr, r->base, (uint64_t)(uintptr_t)r);
    if (st == MSTAR_OK) {
        st = mstar__u64map_put(&e->regions_by_id, r->id, (uint64_t)(uintptr_t)r);
        if (st != MSTAR_OK)
            mstar__u64map_remove(&e->regions_by_ptr, r->base, NULL);
    }
    if (st != MSTAR_OK) {
        mstar__vec_remove(v, at);
        return st;
    }
    if (r->len > e->regions_max_len)
        e->regions_max_len = r->len;
    return MSTAR_OK;
}

static void remove_region(mstar__ucx_engine *e, mstar__ucx_region *r)
{
    mstar__u64map_remove(&e->regions_by_ptr, r->base, NULL);
    mstar__u64map_remove(&e->regions_by_id, r->id, NULL);
    size_t at = upper_bound(e, r->base) - 1; /* bases are unique: this is r */
    mstar__vec_remove(&e->regions_by_base, at);
}

/* A second registration of a registered ptr: the same length counts a reference, another one
 * is refused. e->lock held. */
static mstar_status register_again(mstar__ucx_region *r, void *ptr, uint64_t nbytes, uint8_t *key,
                                   uint32_t *key_len)
{
    if (r->len != nbytes)
        return mstar_error_set(MSTAR_EEXIST,
                               "ucx register: ptr %p is registered with %llu bytes, not %llu "
                               "(unregister it first)",
                               ptr, (unsigned long long)r->len, (unsigned long long)nbytes);
    r->refs++;
    memcpy(key, r->key, r->key_len);
    *key_len = r->key_len;
    return MSTAR_OK;
}

/* Map the memory and build the region's key (outside the lock: pinning can be slow). */
static mstar_status map_region(mstar__ucx_engine *e, mstar__ucx_region *r)
{
    void *packed = NULL;
    size_t packed_len = 0;
    if (r->len > 0) {
        ucp_mem_map_params_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_PROT;
        mp.address = (void *)(uintptr_t)r->base;
        mp.length = r->len;
        mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                  UCP_MEM_MAP_PROT_REMOTE_READ;
        ucs_status_t us = ucp_mem_map(e->ctx, &mp, &r->memh);
        if (us != UCS_OK) {
            r->memh = NULL;
            return mstar__ucx_error(us, "ucx register: mapping %llu bytes at 0x%llx",
                                    (unsigned long long)r->len, (unsigned long long)r->base);
        }
        us = ucp_rkey_pack(e->ctx, r->memh, &packed, &packed_len);
        if (us != UCS_OK) {
            ucp_mem_unmap(e->ctx, r->memh);
            r->memh = NULL;
            return mstar__ucx_error(us, "ucx register: packing the remote key");
        }
    }
    mstar__ucx_key_view v = { r->id, r->base, r->len, packed, (uint32_t)packed_len };
    mstar_status st =
        packed_len > MSTAR_REMOTE_KEY_MAX
            ? mstar_error_set(MSTAR_ERANGE, "ucx register: UCX key of %zu bytes", packed_len)
            : mstar__ucx_key_pack(&v, r->key, sizeof(r->key), &r->key_len);
    if (packed != NULL)
        ucp_rkey_buffer_release(packed);
    if (st != MSTAR_OK && r->memh != NULL) {
        ucp_mem_unmap(e->ctx, r->memh);
        r->memh = NULL;
    }
    return st;
}

static void unmap_and_free(mstar__ucx_engine *e, mstar__ucx_region *r)
{
    if (r->memh != NULL)
        ucp_mem_unmap(e->ctx, r->memh);
    free(r);
}

mstar_status mstar__ucx_engine_register(mstar__ucx_engine *e, void *ptr, uint64_t nbytes,
                                        uint8_t key[MSTAR_REMOTE_KEY_MAX], uint32_t *key_len)
{
    uint64_t end;
    if (e == NULL || ptr == NULL || key == NULL || key_len == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx register: engine, ptr, key and key_len are "
                                             "required");
    if (!mstar__add_u64((uint64_t)(uintptr_t)ptr, nbytes, &end))
        return mstar_error_set(MSTAR_EINVAL, "ucx register: ptr %p + nbytes %llu overflows", ptr,
                               (unsigned long long)nbytes);
    pthread_mutex_lock(&e->lock);
    uint64_t found;
    if (mstar__u64map_get(&e->regions_by_ptr, (uint64_t)(uintptr_t)ptr, &found)) {
        mstar_status st =
            register_again((mstar__ucx_region *)(uintptr_t)found, ptr, nbytes, key, key_len);
        pthread_mutex_unlock(&e->lock);
        return st;
    }
    uint64_t id = ++e->next_region_id;
    pthread_mutex_unlock(&e->lock);

    mstar__ucx_region *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx register: out of memory");
    r->id = id;
    r->base = (uint64_t)(uintptr_t)ptr;
    r->len = nbytes;
    r->refs = 1;
    mstar_status st = map_region(e, r);
    if (st != MSTAR_OK) {
        free(r);
        return st;
    }
    pthread_mutex_lock(&e->lock);
    if (mstar__u64map_get(&e->regions_by_ptr, r->base, &found)) {
        /* Another thread registered the same ptr meanwhile: use its region, drop ours. */
        st = register_again((mstar__ucx_region *)(uintptr_t)found, ptr, nbytes, key, key_len);
        pthread_mutex_unlock(&e->lock);
        unmap_and_free(e, r);
        return st;
    }
    st = insert(e, r);
    pthread_mutex_unlock(&e->lock);
    if (st != MSTAR_OK) {
        unmap_and_free(e, r);
        return mstar_error_set(MSTAR_ENOMEM, "ucx register: out of memory");
    }
    memcpy(key, r->key, r->key_len);
    *key_len = r->key_len;
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_unregister(mstar__ucx_engine *e, void *ptr)
{
    if (e == NULL || ptr == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx unregister: engine and ptr are required");
    pthread_mutex_lock(&e->lock);
    uint64_t found;
    if (!mstar__u64map_get(&e->regions_by_ptr, (uint64_t)(uintptr_t)ptr, &found)) {
        pthread_mutex_unlock(&e->lock);
        return mstar_error_set(MSTAR_ENOENT, "ucx unregister: ptr %p is not registered", ptr);
    }
    mstar__ucx_region *r = (mstar__ucx_region *)(uintptr_t)found;
    if (--r->refs > 0) {
        pthread_mutex_unlock(&e->lock);
        return MSTAR_OK;
    }
    /* No new read finds it from here on; replies already sending from it must end before the
     * caller may free the memory. */
    remove_region(e, r);
    while (r->sending > 0)
        pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    unmap_and_free(e, r);
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_key(mstar__ucx_engine *e, const void *ptr,
                                   uint8_t key[MSTAR_REMOTE_KEY_MAX], uint32_t *key_len)
{
    uint64_t found;
    pthread_mutex_lock(&e->lock);
    bool hit = mstar__u64map_get(&e->regions_by_ptr, (uint64_t)(uintptr_t)ptr, &found);
    if (hit) {
        const mstar__ucx_region *r = (const mstar__ucx_region *)(uintptr_t)found;
        memcpy(key, r->key, r->key_len);
        *key_len = r->key_len;
    }
    pthread_mutex_unlock(&e->lock);
    return hit ? MSTAR_OK : mstar_error_set(MSTAR_ENOENT, "ucx key: ptr %p is not registered", ptr);
}
