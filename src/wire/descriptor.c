/*
 * descriptor.c — the tensor descriptor (reference TensorPointerInfo): defaults and the rules every
 * descriptor obeys, whether it was built in process, is about to be encoded, or was just decoded.
 *
 * The rules matter because a consumer allocates and reads with these numbers: nbytes must be what
 * the shape and dtype say (a reader trusts it as a length), offsets must not wrap, and the names
 * end up in file paths and log lines.
 */
#include "wire_internal.h"

#include "core/vec.h"

#include <string.h>

void mstar_tensor_info_init(mstar_tensor_info *info)
{
    memset(info, 0, sizeof(*info));
    info->source_tp_size = 1;
}

/* The shape fits: numel × element size fits in int64, and so does the product of the non-zero
 * dims (the largest contiguous stride, which a zero dim would otherwise hide). */
static mstar_status check_shape(mstar_status code, const mstar__wpath *path,
                                const mstar_tensor_info *info, int64_t *numel)
{
    mstar__wpath pdims = mstar__wpath_key(path, "dims");
    if (info->ndim < 0 || info->ndim > MSTAR_MAX_NDIM)
        return mstar__wire_fail(code, &pdims, "%d entries, at most %d", (int)info->ndim,
                                MSTAR_MAX_NDIM);
    uint64_t span = 1;
    for (int32_t i = 0; i < info->ndim; i++) {
        mstar__wpath pi = mstar__wpath_index(&pdims, i);
        if (info->dims[i] < 0)
            return mstar__wire_fail(code, &pi, "%lld, must be >= 0", (long long)info->dims[i]);
        if (info->dims[i] > 0 &&
            (!mstar__mul_u64(span, (uint64_t)info->dims[i], &span) || span > INT64_MAX))
            return mstar__wire_fail(code, &pi, "the shape's element count overflows 63 bits");
    }
    size_t elsize = mstar_dtype_size(info->dtype);
    if (mstar_shape_numel(info->ndim, info->dims, elsize, numel) != MSTAR_OK)
        return mstar__wire_fail(code, &pdims, "the byte size (elements × %zu) overflows 63 bits",
                                elsize);
    mstar__wpath pstride = mstar__wpath_key(path, "stride");
    for (int32_t i = 0; i < info->ndim; i++) {
        if (info->stride[i] < 0) {
            mstar__wpath pi = mstar__wpath_index(&pstride, i);
            return mstar__wire_fail(code, &pi, "%lld, must be >= 0", (long long)info->stride[i]);
        }
    }
    return MSTAR_OK;
}

/* The byte ranges a reader addresses — offset + nbytes in the source, shm_offset + offset + nbytes
 * in an arena segment, address + offset + nbytes in remote memory — must not wrap. */
static mstar_status check_ranges(mstar_status code, const mstar__wpath *path,
                                 const mstar_tensor_info *info)
{
    uint64_t end, shm_end, addr_end;
    if (!mstar__add_u64(info->offset, info->nbytes, &end)) {
        mstar__wpath p = mstar__wpath_key(path, "offset");
        return mstar__wire_fail(code, &p, "%llu + nbytes %llu overflows 64 bits",
                                (unsigned long long)info->offset, (unsigned long long)info->nbytes);
    }
    if (!mstar__add_u64(info->shm_offset, end, &shm_end)) {
        mstar__wpath p = mstar__wpath_key(path, "shm_offset");
        return mstar__wire_fail(code, &p, "%llu + offset + nbytes overflows 64 bits",
                                (unsigned long long)info->shm_offset);
    }
    if (!mstar__add_u64(info->address, end, &addr_end)) {
        mstar__wpath p = mstar__wpath_key(path, "address");
        return mstar__wire_fail(code, &p, "0x%llx + offset + nbytes overflows 64 bits",
                                (unsigned long long)info->address);
    }
    return MSTAR_OK;
}

static mstar_status check_names(mstar_status code, const mstar__wpath *path,
                                const mstar_tensor_info *info)
{
    static const struct {
        const char *key;
        size_t offset;
        bool may_be_empty;
    } names[] = {
        { "source_entity", offsetof(mstar_tensor_info, source_entity), false },
        { "source_session_id", offsetof(mstar_tensor_info, source_session_id), true },
        { "shm_segment", offsetof(mstar_tensor_info, shm_segment), true },
        { "_source_node_name", offsetof(mstar_tensor_info, source_node_name), true },
        { "_source_graph_walk", offsetof(mstar_tensor_info, source_graph_walk), true },
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        mstar__wpath p = mstar__wpath_key(path, names[i].key);
        const char *s = (const char *)info + names[i].offset;
        mstar_status st =
            mstar__wire_check_cname(code, &p, s, MSTAR_NAME_MAX + 1, names[i].may_be_empty);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* A CUDA IPC reference names a host, a live-looking process and device, and a range inside the
 * segment: segment_offset + offset + nbytes within segment_size, without wrapping. A reader still
 * checks the size against the segment it opens; this rejects what no segment could hold. */
static mstar_status check_cuda_ipc(mstar_status code, const mstar__wpath *path,
                                   const mstar_tensor_info *info)
{
    const mstar_cuda_ipc_ref *ipc = &info->cuda_ipc;
    if (ipc->host_id[0] == '\0')
        return MSTAR_OK;
    mstar__wpath pipc = mstar__wpath_key(path, "cuda_ipc");
    mstar__wpath p = mstar__wpath_key(&pipc, "host");
    mstar_status st = mstar__wire_check_cname(code, &p, ipc->host_id, MSTAR_HOST_ID_MAX + 1, false);
    if (st != MSTAR_OK)
        return st;
    if (ipc->device < 0) {
        p = mstar__wpath_key(&pipc, "device");
        return mstar__wire_fail(code, &p, "%d, must be >= 0", (int)ipc->device);
    }
    if (ipc->pid < 1) {
        p = mstar__wpath_key(&pipc, "pid");
        return mstar__wire_fail(code, &p, "%d, must be >= 1", (int)ipc->pid);
    }
    uint64_t end;
    if (!mstar__add_u64(ipc->segment_offset, info->offset, &end) ||
        !mstar__add_u64(end, info->nbytes, &end) || end > ipc->segment_size) {
        p = mstar__wpath_key(&pipc, "segment_offset");
        return mstar__wire_fail(
            code, &p, "%llu + offset %llu + nbytes %llu runs past the segment's %llu bytes",
            (unsigned long long)ipc->segment_offset, (unsigned long long)info->offset,
            (unsigned long long)info->nbytes, (unsigned long long)ipc->segment_size);
    }
    return MSTAR_OK;
}

mstar_status mstar__wire_check_info(mstar_status code, const mstar__wpath *path,
                                    const mstar_tensor_info *info, bool names)
{
    if (!mstar_dtype_is_valid((int)info->dtype)) {
        mstar__wpath p = mstar__wpath_key(path, "dtype");
        return mstar__wire_fail(code, &p, "invalid dtype code %d", (int)info->dtype);
    }
    int64_t numel;
    mstar_status st = check_shape(code, path, info, &numel);
    if (st != MSTAR_OK)
        return st;
    uint64_t want = (uint64_t)numel * mstar_dtype_size(info->dtype);
    if (info->nbytes != want) {
        mstar__wpath p = mstar__wpath_key(path, "nbytes");
        return mstar__wire_fail(code, &p, "%llu, but dims × %s make %llu",
                                (unsigned long long)info->nbytes, mstar_dtype_name(info->dtype),
                                (unsigned long long)want);
    }
    if ((st = check_ranges(code, path, info)) != MSTAR_OK)
        return st;
    if (info->source_tp_size < 1) {
        mstar__wpath p = mstar__wpath_key(path, "source_tp_size");
        return mstar__wire_fail(code, &p, "%d, must be >= 1", (int)info->source_tp_size);
    }
    if (info->source_tp_rank < 0 || info->source_tp_rank >= info->source_tp_size) {
        mstar__wpath p = mstar__wpath_key(path, "source_tp_rank");
        return mstar__wire_fail(code, &p, "%d, must be in 0..%d", (int)info->source_tp_rank,
                                (int)info->source_tp_size - 1);
    }
    if (info->remote_key_len > MSTAR_REMOTE_KEY_MAX) {
        mstar__wpath p = mstar__wpath_key(path, "remote_key");
        return mstar__wire_fail(code, &p, "%u bytes, at most %d", info->remote_key_len,
                                MSTAR_REMOTE_KEY_MAX);
    }
    if ((st = check_cuda_ipc(code, path, info)) != MSTAR_OK)
        return st;
    return names ? check_names(code, path, info) : MSTAR_OK;
}

mstar_status mstar_tensor_info_validate(const mstar_tensor_info *info)
{
    if (info == NULL)
        return mstar_error_set(MSTAR_EINVAL, "tensor_info is NULL");
    mstar__wpath root = mstar__wpath_key(NULL, "tensor_info");
    return mstar__wire_check_info(MSTAR_EPROTO, &root, info, true);
}
