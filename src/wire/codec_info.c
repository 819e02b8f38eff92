/*
 * codec_info.c — the descriptor (TensorPointerInfo) as a msgpack map keyed by the reference's
 * field names, both ways, and the stand-alone mstar_tensor_info_encode/decode.
 *
 * Required: uuid, dims, dtype, nbytes, source_entity. Everything else is written only when it
 * differs from its default and read as the default when absent; `stride` is omitted when it is
 * the contiguous layout of `dims`. The nullable reference fields (shm_segment, _source_node_name,
 * _source_graph_walk) also accept nil. docs/wire-format.md is the table.
 */
#include "codec.h"

#include <string.h>

enum {
    F_UUID,
    F_DIMS,
    F_DTYPE,
    F_NBYTES,
    F_SOURCE_ENTITY,
    F_STRIDE,
    F_ADDRESS,
    F_OFFSET,
    F_TP_SIZE,
    F_TP_RANK,
    F_SESSION,
    F_SHM_SEGMENT,
    F_SHM_OFFSET,
    F_NODE,
    F_WALK,
    F_REMOTE_KEY,
    F_CUDA_IPC,
    F_COUNT
};

static const mstar__wkey keys[F_COUNT] = {
    [F_UUID] = { "uuid", 4 },
    [F_DIMS] = { "dims", 4 },
    [F_DTYPE] = { "dtype", 5 },
    [F_NBYTES] = { "nbytes", 6 },
    [F_SOURCE_ENTITY] = { "source_entity", 13 },
    [F_STRIDE] = { "stride", 6 },
    [F_ADDRESS] = { "address", 7 },
    [F_OFFSET] = { "offset", 6 },
    [F_TP_SIZE] = { "source_tp_size", 14 },
    [F_TP_RANK] = { "source_tp_rank", 14 },
    [F_SESSION] = { "source_session_id", 17 },
    [F_SHM_SEGMENT] = { "shm_segment", 11 },
    [F_SHM_OFFSET] = { "shm_offset", 10 },
    [F_NODE] = { "_source_node_name", 17 },
    [F_WALK] = { "_source_graph_walk", 18 },
    [F_REMOTE_KEY] = { "remote_key", 10 },
    [F_CUDA_IPC] = { "cuda_ipc", 8 },
};

#define REQUIRED                                                                    \
    ((UINT64_C(1) << F_UUID) | (UINT64_C(1) << F_DIMS) | (UINT64_C(1) << F_DTYPE) | \
     (UINT64_C(1) << F_NBYTES) | (UINT64_C(1) << F_SOURCE_ENTITY))

static const mstar__wmap info_map = { keys, F_COUNT, (UINT64_C(1) << F_COUNT) - 1, REQUIRED };

/* ---- decoding -------------------------------------------------------------------------------- */

static mstar_status read_shape(mstar__rd *r, const mstar__wpath *path, int64_t *out, int32_t *n)
{
    uint32_t count;
    mstar_status st = mstar__rd_array(r, path, MSTAR_MAX_NDIM, 1, &count);
    for (uint32_t i = 0; st == MSTAR_OK && i < count; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_int(r, &pi, &out[i]);
    }
    *n = (int32_t)count;
    return st;
}

static mstar_status read_dtype(mstar__rd *r, const mstar__wpath *path, mstar_dtype *out)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    if (mstar_dtype_from_name(s, len, out) != MSTAR_OK)
        return mstar__wire_fail(MSTAR_EPROTO, path, "unknown dtype '%.*s'",
                                (int)(len > 32 ? 32 : len), s);
    return MSTAR_OK;
}

/* A name that the reference may send as None. */
static mstar_status read_optional_name(mstar__rd *r, const mstar__wpath *path, char *dst)
{
    if (mstar__rd_nil(r)) {
        dst[0] = '\0';
        return MSTAR_OK;
    }
    return mstar__rd_name(r, path, true, dst);
}

static mstar_status read_remote_key(mstar__rd *r, const mstar__wpath *path, mstar_tensor_info *out)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_bin(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    if (len > MSTAR_REMOTE_KEY_MAX)
        return mstar__wire_fail(MSTAR_EPROTO, path, "%u bytes, at most %d", len,
                                MSTAR_REMOTE_KEY_MAX);
    memcpy(out->remote_key, s, len);
    out->remote_key_len = len;
    return MSTAR_OK;
}

/* The `cuda_ipc` map (mstar_cuda_ipc_ref): every key required. */
enum { C_HOST, C_MEM, C_EVENT, C_SEG_SIZE, C_SEG_OFFSET, C_DEVICE, C_PID, C_COUNT };

static const mstar__wkey ipc_keys[C_COUNT] = {
    [C_HOST] = { "host", 4 },
    [C_MEM] = { "mem", 3 },
    [C_EVENT] = { "event", 5 },
    [C_SEG_SIZE] = { "segment_size", 12 },
    [C_SEG_OFFSET] = { "segment_offset", 14 },
    [C_DEVICE] = { "device", 6 },
    [C_PID] = { "pid", 3 },
};

static const mstar__wmap ipc_map = { ipc_keys, C_COUNT, (UINT64_C(1) << C_COUNT) - 1,
                                     (UINT64_C(1) << C_COUNT) - 1 };

/* A handle is exactly MSTAR_IPC_HANDLE_BYTES: the runtime opens whatever it is given. */
static mstar_status read_handle(mstar__rd *r, const mstar__wpath *path, uint8_t *dst)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_bin(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    if (len != MSTAR_IPC_HANDLE_BYTES)
        return mstar__wire_fail(MSTAR_EPROTO, path, "%u bytes, must be %d", len,
                                MSTAR_IPC_HANDLE_BYTES);
    memcpy(dst, s, len);
    return MSTAR_OK;
}

static mstar_status read_ipc_field(mstar__rd *r, const mstar__wpath *path, int field, void *ctx)
{
    mstar_cuda_ipc_ref *out = ctx;
    switch (field) {
    case C_HOST: {
        char name[MSTAR_NAME_MAX + 1];
        mstar_status st = mstar__rd_name(r, path, false, name);
        if (st == MSTAR_OK && strlen(name) > MSTAR_HOST_ID_MAX)
            st = mstar__wire_fail(MSTAR_EPROTO, path, "%zu bytes, at most %d", strlen(name),
                                  MSTAR_HOST_ID_MAX);
        if (st == MSTAR_OK)
            strcpy(out->host_id, name);
        return st;
    }
    case C_MEM:
        return read_handle(r, path, out->mem_handle);
    case C_EVENT:
        return read_handle(r, path, out->event_handle);
    case C_SEG_SIZE:
        return mstar__rd_uint(r, path, &out->segment_size);
    case C_SEG_OFFSET:
        return mstar__rd_uint(r, path, &out->segment_offset);
    case C_DEVICE:
        return mstar__rd_int32(r, path, 0, INT32_MAX, &out->device);
    case C_PID:
        return mstar__rd_int32(r, path, 1, INT32_MAX, &out->pid);
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

/* The descriptor being read, and how many stride entries it had (-1: none yet). */
typedef struct info_reading {
    mstar_tensor_info *info;
    int32_t nstride;
} info_reading;

static mstar_status read_field(mstar__rd *r, const mstar__wpath *path, int field, void *ctx)
{
    info_reading *in = ctx;
    mstar_tensor_info *out = in->info;
    switch (field) {
    case F_UUID:
        return mstar__rd_uint(r, path, &out->uuid);
    case F_DIMS:
        return read_shape(r, path, out->dims, &out->ndim);
    case F_DTYPE:
        return read_dtype(r, path, &out->dtype);
    case F_NBYTES:
        return mstar__rd_uint(r, path, &out->nbytes);
    case F_SOURCE_ENTITY:
        return mstar__rd_name(r, path, false, out->source_entity);
    case F_STRIDE:
        return read_shape(r, path, out->stride, &in->nstride);
    case F_ADDRESS:
        return mstar__rd_uint(r, path, &out->address);
    case F_OFFSET:
        return mstar__rd_uint(r, path, &out->offset);
    case F_TP_SIZE:
        return mstar__rd_int32(r, path, 1, INT32_MAX, &out->source_tp_size);
    case F_TP_RANK:
        return mstar__rd_int32(r, path, 0, INT32_MAX, &out->source_tp_rank);
    case F_SESSION:
        return mstar__rd_name(r, path, true, out->source_session_id);
    case F_SHM_SEGMENT:
        return read_optional_name(r, path, out->shm_segment);
    case F_SHM_OFFSET:
        return mstar__rd_uint(r, path, &out->shm_offset);
    case F_NODE:
        return read_optional_name(r, path, out->source_node_name);
    case F_WALK:
        return read_optional_name(r, path, out->source_graph_walk);
    case F_REMOTE_KEY:
        return read_remote_key(r, path, out);
    case F_CUDA_IPC:
        return mstar__rd_fields(r, path, &ipc_map, read_ipc_field, &out->cuda_ipc);
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

/* The smallest descriptor on the wire: a fixmap header and the five required fields with
 * one-byte values ("uuid" 0, "dims" [], "dtype" "bool", "nbytes" 1, "source_entity" "a"). Used
 * to reject counts that the remaining bytes cannot hold. */
#define INFO_MIN_BYTES 48

/* Read into *info, which is in init state. */
static mstar_status read_info(mstar__rd *r, const mstar__wpath *path, mstar_tensor_info *info)
{
    info_reading in = { info, -1 };
    mstar_status st = mstar__rd_fields(r, path, &info_map, read_field, &in);
    if (st != MSTAR_OK)
        return st;
    if (in.nstride >= 0 && in.nstride != info->ndim) {
        mstar__wpath pf = mstar__wpath_key(path, keys[F_STRIDE].name);
        return mstar__wire_fail(MSTAR_EPROTO, &pf, "%d entries, but dims has %d", (int)in.nstride,
                                (int)info->ndim);
    }
    if ((st = mstar__wire_check_info(MSTAR_EPROTO, path, info, false)) != MSTAR_OK)
        return st;
    if (in.nstride < 0)
        mstar_shape_contiguous_strides(info->ndim, info->dims, info->stride);
    return MSTAR_OK;
}

mstar_status mstar__info_read(mstar__rd *r, const mstar__wpath *path, mstar_tensor_info *out)
{
    mstar_tensor_info_init(out);
    mstar_status st = read_info(r, path, out);
    if (st != MSTAR_OK)
        mstar_tensor_info_init(out);
    return st;
}

mstar_status mstar__infos_read(mstar__rd *r, const mstar__wpath *path, mstar_edge *edge)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_TENSORS, INFO_MIN_BYTES, &n);
    if (st != MSTAR_OK)
        return st;
    if ((st = mstar__wire_take_tensors(MSTAR_EPROTO, path, &r->tensors_left, n)) != MSTAR_OK)
        return st;
    if ((st = mstar__wire_alloc_raw(n, sizeof(mstar_tensor_info), (void **)&edge->tensor_info)) !=
        MSTAR_OK)
        return st;
    /* The edge counts what was read (each descriptor initialized whole, even one that failed):
     * the array is not zeroed, so nothing past that may be counted. */
    for (uint32_t i = 0; i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__info_read(r, &pi, &edge->tensor_info[i]);
        edge->ntensors = i + 1;
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* ---- encoding -------------------------------------------------------------------------------- */

static bool strides_contiguous(const mstar_tensor_info *info)
{
    int64_t contiguous[MSTAR_MAX_NDIM];
    mstar_shape_contiguous_strides(info->ndim, info->dims, contiguous);
    return memcmp(contiguous, info->stride, (size_t)info->ndim * sizeof(int64_t)) == 0;
}

/* The fields that differ from their defaults, plus the required ones. */
static uint64_t present(const mstar_tensor_info *info)
{
    uint64_t m = REQUIRED;
    m |= (uint64_t)!strides_contiguous(info) << F_STRIDE;
    m |= (uint64_t)(info->address != 0) << F_ADDRESS;
    m |= (uint64_t)(info->offset != 0) << F_OFFSET;
    m |= (uint64_t)(info->source_tp_size != 1) << F_TP_SIZE;
    m |= (uint64_t)(info->source_tp_rank != 0) << F_TP_RANK;
    m |= (uint64_t)(info->source_session_id[0] != '\0') << F_SESSION;
    m |= (uint64_t)(info->shm_segment[0] != '\0') << F_SHM_SEGMENT;
    m |= (uint64_t)(info->shm_offset != 0) << F_SHM_OFFSET;
    m |= (uint64_t)(info->source_node_name[0] != '\0') << F_NODE;
    m |= (uint64_t)(info->source_graph_walk[0] != '\0') << F_WALK;
    m |= (uint64_t)(info->remote_key_len != 0) << F_REMOTE_KEY;
    m |= (uint64_t)(info->cuda_ipc.host_id[0] != '\0') << F_CUDA_IPC;
    return m;
}

static void write_shape(mstar__wr *w, const int64_t *v, int32_t n)
{
    mstar__wr_array(w, (uint32_t)n);
    for (int32_t i = 0; i < n; i++)
        mstar__wr_int(w, v[i]);
}

static mstar_status write_ipc_field(mstar__wr *w, const mstar__wpath *path, int field,
                                    const void *value)
{
    (void)path;
    const mstar_cuda_ipc_ref *ipc = value;
    switch (field) {
    case C_HOST:
        mstar__wr_cstr(w, ipc->host_id);
        break;
    case C_MEM:
        mstar__wr_bin(w, ipc->mem_handle, MSTAR_IPC_HANDLE_BYTES);
        break;
    case C_EVENT:
        mstar__wr_bin(w, ipc->event_handle, MSTAR_IPC_HANDLE_BYTES);
        break;
    case C_SEG_SIZE:
        mstar__wr_uint(w, ipc->segment_size);
        break;
    case C_SEG_OFFSET:
        mstar__wr_uint(w, ipc->segment_offset);
        break;
    case C_DEVICE:
        mstar__wr_int(w, ipc->device);
        break;
    case C_PID:
        mstar__wr_int(w, ipc->pid);
        break;
    }
    return MSTAR_OK;
}

static mstar_status write_field(mstar__wr *w, const mstar__wpath *path, int field,
                                const void *value)
{
    const mstar_tensor_info *info = value;
    switch (field) {
    case F_UUID:
        mstar__wr_uint(w, info->uuid);
        break;
    case F_DIMS:
        write_shape(w, info->dims, info->ndim);
        break;
    case F_DTYPE:
        mstar__wr_cstr(w, mstar_dtype_name(info->dtype));
        break;
    case F_NBYTES:
        mstar__wr_uint(w, info->nbytes);
        break;
    case F_SOURCE_ENTITY:
        mstar__wr_cstr(w, info->source_entity);
        break;
    case F_STRIDE:
        write_shape(w, info->stride, info->ndim);
        break;
    case F_ADDRESS:
        mstar__wr_uint(w, info->address);
        break;
    case F_OFFSET:
        mstar__wr_uint(w, info->offset);
        break;
    case F_TP_SIZE:
        mstar__wr_int(w, info->source_tp_size);
        break;
    case F_TP_RANK:
        mstar__wr_int(w, info->source_tp_rank);
        break;
    case F_SESSION:
        mstar__wr_cstr(w, info->source_session_id);
        break;
    case F_SHM_SEGMENT:
        mstar__wr_cstr(w, info->shm_segment);
        break;
    case F_SHM_OFFSET:
        mstar__wr_uint(w, info->shm_offset);
        break;
    case F_NODE:
        mstar__wr_cstr(w, info->source_node_name);
        break;
    case F_WALK:
        mstar__wr_cstr(w, info->source_graph_walk);
        break;
    case F_REMOTE_KEY:
        mstar__wr_bin(w, info->remote_key, info->remote_key_len);
        break;
    case F_CUDA_IPC:
        return mstar__wr_fields(w, path, &ipc_map, ipc_map.allowed, write_ipc_field,
                                &info->cuda_ipc);
    }
    return MSTAR_OK;
}

mstar_status mstar__info_write(mstar__wr *w, const mstar__wpath *path,
                               const mstar_tensor_info *info)
{
    mstar_status st = mstar__wire_check_info(MSTAR_EINVAL, path, info, true);
    if (st != MSTAR_OK)
        return st;
    return mstar__wr_fields(w, path, &info_map, present(info), write_field, info);
}

mstar_status mstar__infos_write(mstar__wr *w, const mstar__wpath *path, const mstar_edge *edge)
{
    mstar_status st =
        mstar__wire_take_tensors(MSTAR_EINVAL, path, &w->tensors_left, edge->ntensors);
    if (st != MSTAR_OK)
        return st;
    mstar__wr_array(w, edge->ntensors);
    for (uint32_t i = 0; i < edge->ntensors; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        if ((st = mstar__info_write(w, &pi, &edge->tensor_info[i])) != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* ---- stand-alone ----------------------------------------------------------------------------- */

static mstar_status read_root(mstar__rd *r, const mstar__wpath *path, void *out)
{
    return mstar__info_read(r, path, out);
}

static mstar_status write_root(mstar__wr *w, const mstar__wpath *path, const void *value)
{
    return mstar__info_write(w, path, value);
}

mstar_status mstar_tensor_info_encode(const mstar_tensor_info *info, void **data, size_t *len)
{
    return mstar__encode_root("tensor_info", write_root, info, data, len);
}

mstar_status mstar_tensor_info_decode(const void *data, size_t len, mstar_tensor_info *out)
{
    if (out != NULL)
        mstar_tensor_info_init(out);
    mstar_status st = mstar__decode_root("tensor_info", read_root, data, len, out);
    if (st != MSTAR_OK && out != NULL)
        mstar_tensor_info_init(out); /* e.g. bytes after a valid descriptor */
    return st;
}
