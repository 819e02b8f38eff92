/*
 * id.c — tensor ids and the well-known entity indices.
 *
 * A tensor id is unique across a deployment because its top 16 bits name the producing entity;
 * a consumer can therefore key every store by id alone (the reference system's integer uuids
 * collided across entities; design.md "Conventions").
 */
#include "mstar/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

mstar_tensor_id mstar_id_make(uint16_t entity_index, uint64_t counter)
{
    return ((uint64_t)entity_index << MSTAR_ID_COUNTER_BITS) | (counter & MSTAR_ID_COUNTER_MAX);
}

uint16_t mstar_id_entity(mstar_tensor_id id)
{
    return (uint16_t)(id >> MSTAR_ID_COUNTER_BITS);
}

uint64_t mstar_id_counter(mstar_tensor_id id)
{
    return id & MSTAR_ID_COUNTER_MAX;
}

void mstar_id_gen_init(mstar_id_gen *gen, uint16_t entity_index)
{
    gen->entity_index = entity_index;
    gen->next_counter = 1;
}

mstar_status mstar_id_gen_next(mstar_id_gen *gen, mstar_tensor_id *out)
{
    if (gen->next_counter > MSTAR_ID_COUNTER_MAX)
        return mstar_error_set(MSTAR_ERANGE, "tensor id counter of entity %u is exhausted",
                               (unsigned)gen->entity_index);
    *out = mstar_id_make(gen->entity_index, gen->next_counter++);
    return MSTAR_OK;
}

void mstar_id_format(mstar_tensor_id id, char buf[MSTAR_ID_STRLEN])
{
    snprintf(buf, MSTAR_ID_STRLEN, "0x%016" PRIx64, id);
}

mstar_status mstar_entity_index(const char *entity, uint16_t *out)
{
    size_t len = strlen(entity);
    mstar_status st = mstar_name_validate(entity, len, "entity name");
    if (st != MSTAR_OK)
        return st;
    if (strcmp(entity, "api_server") == 0) {
        *out = MSTAR_ENTITY_INDEX_API_SERVER;
        return MSTAR_OK;
    }
    if (strcmp(entity, "conductor") == 0) {
        *out = MSTAR_ENTITY_INDEX_CONDUCTOR;
        return MSTAR_OK;
    }
    if (strcmp(entity, "api_server_preprocess_worker") == 0) {
        *out = MSTAR_ENTITY_INDEX_PREPROCESS;
        return MSTAR_OK;
    }
    static const char worker[] = "worker_";
    const size_t wlen = sizeof(worker) - 1;
    if (len > wlen && len <= wlen + 5 && memcmp(entity, worker, wlen) == 0) {
        uint32_t rank = 0;
        for (size_t i = wlen; i < len; i++) {
            if (entity[i] < '0' || entity[i] > '9')
                return mstar_error_set(MSTAR_ENOENT, "entity '%s' has no fixed index", entity);
            rank = rank * 10 + (uint32_t)(entity[i] - '0');
        }
        if (len > wlen + 1 && entity[wlen] == '0')
            return mstar_error_set(MSTAR_ENOENT, "entity '%s' has no fixed index", entity);
        if (rank + MSTAR_ENTITY_INDEX_WORKER_BASE > UINT16_MAX)
            return mstar_error_set(MSTAR_ERANGE, "worker rank %u is too large", rank);
        *out = (uint16_t)(MSTAR_ENTITY_INDEX_WORKER_BASE + rank);
        return MSTAR_OK;
    }
    return mstar_error_set(MSTAR_ENOENT, "entity '%s' has no fixed index", entity);
}
