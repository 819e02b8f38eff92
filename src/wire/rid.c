/*
 * rid.c — request ids: an integer (a worker's handle) or a string (an api-server id), used as an
 * opaque key by the bookkeeping and carried in every control message.
 *
 * An integer id and a string id never compare equal, even when the string spells the number, as
 * in the reference (Python's 5 != "5").
 */
#include "wire_internal.h"

#include "core/strmap.h"

#include <stdio.h>
#include <string.h>

mstar_rid mstar_rid_from_int(int64_t num)
{
    mstar_rid rid;
    rid.is_str = false;
    rid.num = num;
    rid.str[0] = '\0';
    return rid;
}

mstar_status mstar_rid_from_str(const char *str, mstar_rid *out)
{
    mstar_status st = mstar__wire_copy_name(out->str, str, "request id");
    if (st != MSTAR_OK)
        return st;
    out->is_str = true;
    out->num = 0;
    return MSTAR_OK;
}

bool mstar_rid_equal(const mstar_rid *a, const mstar_rid *b)
{
    if (a->is_str != b->is_str)
        return false;
    return a->is_str ? strcmp(a->str, b->str) == 0 : a->num == b->num;
}

uint64_t mstar_rid_hash(const mstar_rid *rid)
{
    /* Flip a bit for strings so that 5 and "5" do not share a bucket chain by construction. */
    if (rid->is_str)
        return mstar__hash_bytes(rid->str, strlen(rid->str)) ^ UINT64_C(1);
    return mstar__hash_u64((uint64_t)rid->num);
}

const char *mstar_rid_format(const mstar_rid *rid, char buf[MSTAR_RID_STRLEN])
{
    if (rid->is_str)
        snprintf(buf, MSTAR_RID_STRLEN, "%s", rid->str);
    else
        snprintf(buf, MSTAR_RID_STRLEN, "%lld", (long long)rid->num);
    return buf;
}

mstar_status mstar__wire_check_rid(mstar_status code, const mstar__wpath *path,
                                   const mstar_rid *rid)
{
    if (!rid->is_str)
        return MSTAR_OK;
    return mstar__wire_check_cname(code, path, rid->str, sizeof(rid->str), false);
}
