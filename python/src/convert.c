/*
 * convert.c — between the library's wire structs (request ids, descriptors, edges, control
 * messages, profiling records) and the package's data classes (mstar/_types.py).
 *
 * Python objects are read by attribute name, so any object with the right attributes works
 * (the reference's own classes included). Every value is checked on the way in: a name that is
 * too long, a count out of range or a wrong type raises before the library sees it. The
 * exceptions are the objects that hold the library's struct themselves: a TensorPointerInfo
 * with a current struct (info.c) is copied as it is, and only the library's own checks run on
 * it; a GraphEdge (edge.c) keeps its scalars converted (by the functions here) when they were
 * written, and converts the rest and its descriptors here when used.
 */
#include "mstar_py.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- scalars -------------------------------------------------------------------------------- */

static int i64_from_py(PyObject *obj, int64_t *out, const char *what)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: an integer in int64 range is required", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int mstarpy_u64_from_py(PyObject *obj, uint64_t *out, const char *what)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: a non-negative integer below 2**64 is required", what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int i32_from_py(PyObject *obj, int32_t *out, const char *what)
{
    int64_t v;
    if (i64_from_py(obj, &v, what) < 0)
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: %lld is out of int32 range", what, (long long)v);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int mstarpy_name_from_py(PyObject *obj, char *buf, size_t size, bool none_ok, const char *what)
{
    if (obj == Py_None && none_ok) {
        buf[0] = '\0';
        return 0;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8AndSize(obj, &len) : NULL;
    if (!s) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: a str is required", what);
        return -1;
    }
    if ((size_t)len >= size) {
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: %zd bytes, at most %zu", what, len, size - 1);
        return -1;
    }
    memcpy(buf, s, (size_t)len + 1);
    return 0;
}

/* An interned attribute name, made once per call site (so `s` must be a literal): the hot path
 * reads and writes dozens of attributes per message, and looking one up by a str object skips
 * building and hashing a new str each time. NULL (with an exception) when out of memory. */
#define NAME(s)                                         \
    ({                                                  \
        static PyObject *n_;                            \
        n_ ? n_ : (n_ = PyUnicode_InternFromString(s)); \
    })

static PyObject *attr_named(PyObject *obj, PyObject *name)
{
    return name ? PyObject_GetAttr(obj, name) : NULL;
}
#define attr(obj, s) attr_named(obj, NAME(s))

/* Attribute getters: -1 with an exception when the attribute is missing or of the wrong type. */
#define GET_ATTR(obj, name, conv, ...)            \
    ({                                            \
        PyObject *a_ = attr(obj, name);           \
        int r_ = a_ ? conv(a_, __VA_ARGS__) : -1; \
        Py_XDECREF(a_);                           \
        r_;                                       \
    })

static int bool_from_py(PyObject *obj, bool *out, const char *what)
{
    int v = PyObject_IsTrue(obj);
    if (v < 0)
        return -1;
    *out = v != 0;
    return 0;
}

/* None or an int; None is -1 (the C spelling of None for a shard dim). */
static int opt_i32_from_py(PyObject *obj, int32_t *out, const char *what)
{
    if (obj == Py_None) {
        *out = -1;
        return 0;
    }
    return i32_from_py(obj, out, what);
}

static PyObject *str_or_none(const char *s)
{
    if (!s[0])
        Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

/* Set attribute `name` of an object being filled. Steals `v`. */
static int set_field_steal(PyObject *target, PyObject *name, PyObject *v)
{
    if (!v)
        return -1;
    int r = name ? PyObject_SetAttr(target, name, v) : -1;
    Py_DECREF(v);
    return r;
}
#define set_attr_steal(target, s, v) set_field_steal(target, NAME(s), v)

/* ---- a data class's __init__ ---------------------------------------------------------------- */

/* Field i of names[0..n) in a keyword: the caller's str is interned as a rule (a literal
 * keyword), so pointers are compared first. -1 when none. */
static int field_index(PyObject *key, PyObject *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (key == names[i])
            return i;
    for (int i = 0; PyUnicode_Check(key) && i < n; i++)
        if (PyUnicode_Compare(key, names[i]) == 0)
            return i;
    return -1;
}

int mstarpy_fields_from_args(PyObject *args, PyObject *kw, PyObject *const *names, int n,
                             const char *who, PyObject **v)
{
    Py_ssize_t npos = PyTuple_Size(args);
    if (npos > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", who,
                     n, npos);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        v[i] = i < npos ? PyTuple_GetItem(args, i) : NULL;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (kw && PyDict_Next(kw, &pos, &key, &val)) {
        int i = field_index(key, names, n);
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", who, key);
            return -1;
        }
        if (v[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument %R", who, key);
            return -1;
        }
        v[i] = val;
    }
    return 0;
}

/* ---- request ids ---------------------------------------------------------------------------- */

int mstarpy_rid_from_py(PyObject *obj, mstar_rid *out)
{
    if (PyLong_Check(obj)) {
        int64_t v;
        if (i64_from_py(obj, &v, "request id") < 0)
            return -1;
        *out = mstar_rid_from_int(v);
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        mstarpy_raise_msg(MSTAR_EINVAL, "a request id is an int or a str");
        return -1;
    }
    const char *s = PyUnicode_AsUTF8AndSize(obj, NULL);
    if (!s)
        return -1;
    mstar_status st = mstar_rid_from_str(s, out);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

PyObject *mstarpy_rid_to_py(const mstar_rid *rid)
{
    if (rid->is_str)
        return PyUnicode_FromString(rid->str);
    return PyLong_FromLongLong(rid->num);
}

/* ---- descriptors ---------------------------------------------------------------------------- */

static int dims_from_py(PyObject *seq, int64_t *dims, int32_t *ndim, const char *what)
{
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: a sequence of ints is required", what);
        return -1;
    }
    Py_ssize_t n = PyTuple_Size(fast);
    if (n > MSTAR_MAX_NDIM) {
        Py_DECREF(fast);
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: %zd dims, at most %d", what, n, MSTAR_MAX_NDIM);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i64_from_py(PyTuple_GetItem(fast, i), &dims[i], what) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    if (ndim)
        *ndim = (int32_t)n;
    return 0;
}

static int dtype_from_py(PyObject *obj, mstar_dtype *out, const char *what)
{
    PyObject *s = PyObject_Str(obj);
    if (!s)
        return -1;
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(s, &len);
    mstar_status st = name ? mstar_dtype_from_name(name, (size_t)len, out) : MSTAR_OK;
    Py_DECREF(s);
    if (!name)
        return -1;
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

int mstarpy_dims_from_py(PyObject *seq, int64_t *dims, int32_t *ndim, const char *what)
{
    return dims_from_py(seq, dims, ndim, what);
}

int mstarpy_dtype_from_py(PyObject *obj, mstar_dtype *out, const char *what)
{
    return dtype_from_py(obj, out, what);
}

int mstarpy_i64_from_py(PyObject *obj, int64_t *out, const char *what)
{
    return i64_from_py(obj, out, what);
}

static int remote_key_from_py(PyObject *obj, mstar_tensor_info *info, const char *what)
{
    info->remote_key_len = 0;
    if (obj == Py_None)
        return 0;
    char *data;
    Py_ssize_t len;
    if (!PyBytes_Check(obj) || PyBytes_AsStringAndSize(obj, &data, &len) < 0) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: bytes or None", what);
        return -1;
    }
    if ((size_t)len > MSTAR_REMOTE_KEY_MAX) {
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: %zd bytes, at most %d", what, len,
                          MSTAR_REMOTE_KEY_MAX);
        return -1;
    }
    memcpy(info->remote_key, data, (size_t)len);
    info->remote_key_len = (uint32_t)len;
    return 0;
}

#define NAME_FIELD(obj, info, f, none_ok)                                          \
    GET_ATTR(obj, #f, mstarpy_name_from_py, (info)->f, sizeof((info)->f), none_ok, \
             "TensorPointerInfo." #f)

/* The attribute path: any object with the data class's attributes. */
static int info_from_attrs(PyObject *obj, mstar_tensor_info *info)
{
    mstar_tensor_info_init(info);
    int32_t nstride = 0;
    if (GET_ATTR(obj, "uuid", mstarpy_u64_from_py, &info->uuid, "TensorPointerInfo.uuid") < 0 ||
        GET_ATTR(obj, "dtype", dtype_from_py, &info->dtype, "TensorPointerInfo.dtype") < 0 ||
        GET_ATTR(obj, "dims", dims_from_py, info->dims, &info->ndim, "TensorPointerInfo.dims") <
            0 ||
        GET_ATTR(obj, "stride", dims_from_py, info->stride, &nstride, "TensorPointerInfo.stride") <
            0 ||
        GET_ATTR(obj, "nbytes", mstarpy_u64_from_py, &info->nbytes, "TensorPointerInfo.nbytes") <
            0 ||
        GET_ATTR(obj, "address", mstarpy_u64_from_py, &info->address, "TensorPointerInfo.address") <
            0 ||
        GET_ATTR(obj, "offset", mstarpy_u64_from_py, &info->offset, "TensorPointerInfo.offset") <
            0 ||
        GET_ATTR(obj, "source_tp_size", i32_from_py, &info->source_tp_size,
                 "TensorPointerInfo.source_tp_size") < 0 ||
        GET_ATTR(obj, "source_tp_rank", i32_from_py, &info->source_tp_rank,
                 "TensorPointerInfo.source_tp_rank") < 0 ||
        GET_ATTR(obj, "shm_offset", mstarpy_u64_from_py, &info->shm_offset,
                 "TensorPointerInfo.shm_offset") < 0 ||
        NAME_FIELD(obj, info, source_session_id, true) < 0 ||
        NAME_FIELD(obj, info, source_entity, false) < 0 ||
        NAME_FIELD(obj, info, shm_segment, true) < 0 ||
        NAME_FIELD(obj, info, source_node_name, true) < 0 ||
        NAME_FIELD(obj, info, source_graph_walk, true) < 0 ||
        GET_ATTR(obj, "remote_key", remote_key_from_py, info, "TensorPointerInfo.remote_key") < 0)
        return -1;
    if (nstride != info->ndim) {
        mstarpy_raise_msg(MSTAR_EINVAL, "TensorPointerInfo.stride: %d entries for %d dims",
                          (int)nstride, (int)info->ndim);
        return -1;
    }
    return 0;
}

int mstarpy_info_from_py(PyObject *obj, mstar_tensor_info *info)
{
    /* A descriptor the extension made, unchanged since: its struct as it is (the checks below
     * still run: the struct is as good as the values it was made from). */
    bool copied = mstarpy_info_get_struct(obj, info);
    uint64_t version = mstarpy_info_version(obj);
    if (!copied && info_from_attrs(obj, info) < 0)
        return -1;
    mstar_status st = mstar_tensor_info_validate(info);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    if (!copied)
        mstarpy_info_cache(obj, info, version);
    return 0;
}

PyObject *mstarpy_tuple_i64(const int64_t *v, int32_t n)
{
    PyObject *t = PyTuple_New(n);
    for (int32_t i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, i, x);
    }
    return t;
}

static PyObject *remote_key_to_py(const mstar_tensor_info *info)
{
    if (info->remote_key_len == 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)info->remote_key, info->remote_key_len);
}

PyObject *mstarpy_info_field_to_py(const mstar_tensor_info *info, int i)
{
    const char *dtype;
    switch (i) {
    case MSTARPY_INFO_DIMS:
        return mstarpy_tuple_i64(info->dims, info->ndim);
    case MSTARPY_INFO_DTYPE:
        dtype = mstar_dtype_name(info->dtype);
        return PyUnicode_FromString(dtype ? dtype : "?");
    case MSTARPY_INFO_STRIDE:
        return mstarpy_tuple_i64(info->stride, info->ndim);
    case MSTARPY_INFO_NBYTES:
        return PyLong_FromUnsignedLongLong(info->nbytes);
    case MSTARPY_INFO_ADDRESS:
        return PyLong_FromUnsignedLongLong(info->address);
    case MSTARPY_INFO_UUID:
        return PyLong_FromUnsignedLongLong(info->uuid);
    case MSTARPY_INFO_SESSION:
        return PyUnicode_FromString(info->source_session_id);
    case MSTARPY_INFO_ENTITY:
        return PyUnicode_FromString(info->source_entity);
    case MSTARPY_INFO_OFFSET:
        return PyLong_FromUnsignedLongLong(info->offset);
    case MSTARPY_INFO_TP_SIZE:
        return PyLong_FromLong(info->source_tp_size);
    case MSTARPY_INFO_TP_RANK:
        return PyLong_FromLong(info->source_tp_rank);
    case MSTARPY_INFO_SHM_SEGMENT:
        return str_or_none(info->shm_segment);
    case MSTARPY_INFO_SHM_OFFSET:
        return PyLong_FromUnsignedLongLong(info->shm_offset);
    case MSTARPY_INFO_NODE:
        return str_or_none(info->source_node_name);
    case MSTARPY_INFO_WALK:
        return str_or_none(info->source_graph_walk);
    case MSTARPY_INFO_REMOTE_KEY:
        return remote_key_to_py(info);
    }
    PyErr_SetString(PyExc_SystemError, "no such TensorPointerInfo field");
    return NULL;
}

int mstarpy_info_update_py(PyObject *obj, const mstar_tensor_info *info)
{
    if (mstarpy_info_exact(obj)) {
        mstarpy_info_set_struct(obj, info);
        return 0;
    }
    /* Another class (a subclass may have properties): every field by attribute. */
    for (int i = 0; i < MSTARPY_INFO_NFIELDS; i++) {
        PyObject *v = mstarpy_info_field_to_py(info, i);
        int r = v ? PyObject_SetAttrString(obj, mstarpy_info_names[i], v) : -1;
        Py_XDECREF(v);
        if (r < 0)
            return -1;
    }
    return 0;
}

PyObject *mstarpy_info_to_py(const mstar_tensor_info *info)
{
    return mstarpy_info_new(info);
}

/* ---- edges ---------------------------------------------------------------------------------- */

static int infos_from_py(PyObject *seq, mstar_edge *edge)
{
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "GraphEdge.tensor_info: a sequence is required");
        return -1;
    }
    Py_ssize_t n = PyTuple_Size(fast);
    if (n > MSTAR_WIRE_MAX_TENSORS) {
        Py_DECREF(fast);
        mstarpy_raise_msg(MSTAR_EINVAL, "GraphEdge.tensor_info: %zd descriptors, at most %d", n,
                          MSTAR_WIRE_MAX_TENSORS);
        return -1;
    }
    if (n > 0) {
        edge->tensor_info = calloc((size_t)n, sizeof(mstar_tensor_info));
        if (!edge->tensor_info) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (mstarpy_info_from_py(PyTuple_GetItem(fast, i), &edge->tensor_info[i]) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        edge->ntensors = (uint32_t)(i + 1);
    }
    Py_DECREF(fast);
    return 0;
}

static const char *const edge_what[MSTARPY_EDGE_NFIELDS] = {
    "GraphEdge.next_node",   "GraphEdge.name",         "GraphEdge.tensor_info",
    "GraphEdge.persist",     "GraphEdge.is_streaming", "GraphEdge.persist_for_loop",
    "GraphEdge.total_fanin", "GraphEdge.shard_dim",
};

int mstarpy_edge_field_from_py(mstar_edge *e, int i, PyObject *v)
{
    const char *what = i >= 0 && i < MSTARPY_EDGE_NFIELDS ? edge_what[i] : NULL;
    switch (i) {
    case MSTARPY_EDGE_NEXT_NODE:
        return mstarpy_name_from_py(v, e->next_node, sizeof(e->next_node), true, what);
    case MSTARPY_EDGE_NAME:
        return mstarpy_name_from_py(v, e->name, sizeof(e->name), false, what);
    case MSTARPY_EDGE_TENSOR_INFO:
        return infos_from_py(v, e);
    case MSTARPY_EDGE_PERSIST:
        return bool_from_py(v, &e->persist, what);
    case MSTARPY_EDGE_IS_STREAMING:
        return bool_from_py(v, &e->is_streaming, what);
    case MSTARPY_EDGE_PERSIST_FOR_LOOP:
        return bool_from_py(v, &e->persist_for_loop, what);
    case MSTARPY_EDGE_TOTAL_FANIN:
        return i32_from_py(v, &e->total_fanin, what);
    case MSTARPY_EDGE_SHARD_DIM:
        return opt_i32_from_py(v, &e->shard_dim, what);
    }
    PyErr_SetString(PyExc_SystemError, "no such GraphEdge field");
    return -1;
}

static PyObject *infos_to_py(const mstar_edge *edge)
{
    PyObject *list = PyList_New((Py_ssize_t)edge->ntensors);
    for (uint32_t i = 0; list && i < edge->ntensors; i++) {
        PyObject *x = mstarpy_info_to_py(&edge->tensor_info[i]);
        if (!x) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, x);
    }
    return list;
}

PyObject *mstarpy_edge_field_to_py(const mstar_edge *e, int i)
{
    switch (i) {
    case MSTARPY_EDGE_NEXT_NODE:
        return PyUnicode_FromString(e->next_node);
    case MSTARPY_EDGE_NAME:
        return PyUnicode_FromString(e->name);
    case MSTARPY_EDGE_TENSOR_INFO:
        return infos_to_py(e);
    case MSTARPY_EDGE_PERSIST:
        return PyBool_FromLong(e->persist);
    case MSTARPY_EDGE_IS_STREAMING:
        return PyBool_FromLong(e->is_streaming);
    case MSTARPY_EDGE_PERSIST_FOR_LOOP:
        return PyBool_FromLong(e->persist_for_loop);
    case MSTARPY_EDGE_TOTAL_FANIN:
        return PyLong_FromLong(e->total_fanin);
    case MSTARPY_EDGE_SHARD_DIM:
        return e->shard_dim < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(e->shard_dim);
    }
    PyErr_SetString(PyExc_SystemError, "no such GraphEdge field");
    return NULL;
}

/* The attribute path (any object with GraphEdge's attributes): the scalars first, then the
 * descriptors, each checked as it is read. */
static int edge_from_attrs(PyObject *obj, mstar_edge *e)
{
    static const int order[MSTARPY_EDGE_NFIELDS] = {
        MSTARPY_EDGE_NEXT_NODE,        MSTARPY_EDGE_NAME,
        MSTARPY_EDGE_PERSIST,          MSTARPY_EDGE_IS_STREAMING,
        MSTARPY_EDGE_PERSIST_FOR_LOOP, MSTARPY_EDGE_TOTAL_FANIN,
        MSTARPY_EDGE_SHARD_DIM,        MSTARPY_EDGE_TENSOR_INFO,
    };
    for (int k = 0; k < MSTARPY_EDGE_NFIELDS; k++) {
        int i = order[k];
        PyObject *v = attr_named(obj, mstarpy_edge_name(i));
        int r = v ? mstarpy_edge_field_from_py(e, i, v) : -1;
        Py_XDECREF(v);
        if (r < 0)
            return -1;
    }
    return 0;
}

int mstarpy_edge_from_py(PyObject *obj, mstar_edge *e)
{
    mstar_edge_init(e);
    int r = mstarpy_edge_exact(obj) ? mstarpy_edge_get(obj, e) : edge_from_attrs(obj, e);
    if (r < 0)
        mstarpy_edges_free(e, 1);
    return r;
}

PyObject *mstarpy_edge_to_py(const mstar_edge *e)
{
    return mstarpy_edge_new(e);
}

void mstarpy_edges_free(mstar_edge *edges, uint32_t n)
{
    for (uint32_t i = 0; edges && i < n; i++) {
        free(edges[i].tensor_info);
        edges[i].tensor_info = NULL;
        edges[i].ntensors = 0;
    }
}

int mstarpy_edges_from_py(PyObject *seq, mstar_edge **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "edges: a sequence of GraphEdge is required");
        return -1;
    }
    Py_ssize_t len = PyTuple_Size(fast);
    if (len > MSTAR_WIRE_MAX_EDGES) {
        Py_DECREF(fast);
        mstarpy_raise_msg(MSTAR_EINVAL, "edges: %zd, at most %d", len, MSTAR_WIRE_MAX_EDGES);
        return -1;
    }
    mstar_edge *edges = calloc(len > 0 ? (size_t)len : 1, sizeof(mstar_edge));
    if (!edges) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (mstarpy_edge_from_py(PyTuple_GetItem(fast, i), &edges[i]) < 0) {
            mstarpy_edges_free(edges, (uint32_t)i);
            free(edges);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    *out = edges;
    *n = (uint32_t)len;
    return 0;
}

int mstarpy_edges_update_py(PyObject *seq, const mstar_edge *edges, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        PyObject *e = PySequence_GetItem(seq, (Py_ssize_t)i);
        PyObject *infos = e ? attr(e, "tensor_info") : NULL;
        Py_XDECREF(e);
        if (!infos)
            return -1;
        for (uint32_t j = 0; j < edges[i].ntensors; j++) {
            PyObject *info = PySequence_GetItem(infos, (Py_ssize_t)j);
            int r = info ? mstarpy_info_update_py(info, &edges[i].tensor_info[j]) : -1;
            Py_XDECREF(info);
            if (r < 0) {
                Py_DECREF(infos);
                return -1;
            }
        }
        Py_DECREF(infos);
    }
    return 0;
}

/* ---- profiling records ---------------------------------------------------------------------- */

PyObject *mstarpy_tx_to_py(const mstar_tx_info *tx, uint32_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *o = PyObject_CallNoArgs(mstarpy.tx_cls);
        if (!o || set_attr_steal(o, "edge_name", PyUnicode_FromString(tx[i].edge_name)) < 0 ||
            set_attr_steal(o, "source_entity", PyUnicode_FromString(tx[i].source_entity)) < 0 ||
            set_attr_steal(o, "count", PyLong_FromLongLong(tx[i].count)) < 0 ||
            set_attr_steal(o, "num_bytes", PyLong_FromLongLong(tx[i].num_bytes)) < 0 ||
            set_attr_steal(o, "time_s", PyFloat_FromDouble(tx[i].time_s)) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, o);
    }
    return list;
}

PyObject *mstarpy_rx_to_py(const mstar_rx_info *rx, uint32_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *o = PyObject_CallNoArgs(mstarpy.rx_cls);
        if (!o || set_attr_steal(o, "edge_name", PyUnicode_FromString(rx[i].edge_name)) < 0 ||
            set_attr_steal(o, "source_entity", PyUnicode_FromString(rx[i].source_entity)) < 0 ||
            set_attr_steal(o, "dest_entity", PyUnicode_FromString(rx[i].dest_entity)) < 0 ||
            set_attr_steal(o, "count", PyLong_FromLongLong(rx[i].count)) < 0 ||
            set_attr_steal(o, "num_bytes", PyLong_FromLongLong(rx[i].num_bytes)) < 0 ||
            set_attr_steal(o, "time_s", PyFloat_FromDouble(rx[i].time_s)) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, o);
    }
    return list;
}

static int tx_from_py(PyObject *o, mstar_tx_info *tx)
{
    memset(tx, 0, sizeof(*tx));
    return GET_ATTR(o, "edge_name", mstarpy_name_from_py, tx->edge_name, sizeof(tx->edge_name),
                    false, "TxInfo.edge_name") < 0 ||
                   GET_ATTR(o, "source_entity", mstarpy_name_from_py, tx->source_entity,
                            sizeof(tx->source_entity), false, "TxInfo.source_entity") < 0 ||
                   GET_ATTR(o, "count", i64_from_py, &tx->count, "TxInfo.count") < 0 ||
                   GET_ATTR(o, "num_bytes", i64_from_py, &tx->num_bytes, "TxInfo.num_bytes") < 0
               ? -1
               : 0;
}

static int rx_from_py(PyObject *o, mstar_rx_info *rx)
{
    memset(rx, 0, sizeof(*rx));
    return GET_ATTR(o, "edge_name", mstarpy_name_from_py, rx->edge_name, sizeof(rx->edge_name),
                    false, "RxInfo.edge_name") < 0 ||
                   GET_ATTR(o, "source_entity", mstarpy_name_from_py, rx->source_entity,
                            sizeof(rx->source_entity), false, "RxInfo.source_entity") < 0 ||
                   GET_ATTR(o, "dest_entity", mstarpy_name_from_py, rx->dest_entity,
                            sizeof(rx->dest_entity), false, "RxInfo.dest_entity") < 0 ||
                   GET_ATTR(o, "count", i64_from_py, &rx->count, "RxInfo.count") < 0 ||
                   GET_ATTR(o, "num_bytes", i64_from_py, &rx->num_bytes, "RxInfo.num_bytes") < 0
               ? -1
               : 0;
}

/* ---- messages ------------------------------------------------------------------------------- */

static int msg_type_from_py(PyObject *obj, mstar_msg_type *out, const char *what)
{
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8AndSize(obj, NULL) : NULL;
    if (!s) {
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: a message type name is required", what);
        return -1;
    }
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        const char *name = mstar_msg_type_name((mstar_msg_type)t);
        if (name && strcasecmp(name, s) == 0) {
            *out = (mstar_msg_type)t;
            return 0;
        }
    }
    mstarpy_raise_msg(MSTAR_EINVAL, "%s: unknown message type \"%s\"", what, s);
    return -1;
}

static int check_add(mstar_status st)
{
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

/* Apply `fn(msg, item)` to each item of the sequence `seq`. */
typedef int (*msg_item_fn)(mstar_msg *msg, PyObject *item);

static int each_item(PyObject *seq, mstar_msg *msg, msg_item_fn fn)
{
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast)
        return -1;
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyTuple_Size(fast); i++)
        r = fn(msg, PyTuple_GetItem(fast, i));
    Py_DECREF(fast);
    return r;
}

static int add_edge_item(mstar_msg *msg, PyObject *item)
{
    mstar_edge e;
    if (mstarpy_edge_from_py(item, &e) < 0)
        return -1;
    int r = check_add(mstar_msg_add_edge(msg, &e));
    mstarpy_edges_free(&e, 1);
    return r;
}

static int add_uuid_item(mstar_msg *msg, PyObject *item)
{
    uint64_t u;
    return mstarpy_u64_from_py(item, &u, "Message.uuids") < 0
               ? -1
               : check_add(mstar_msg_add_uuid(msg, u));
}

static int add_name_item(mstar_msg *msg, PyObject *item)
{
    char buf[MSTAR_NAME_MAX + 1];
    return mstarpy_name_from_py(item, buf, sizeof(buf), false, "Message.names") < 0
               ? -1
               : check_add(mstar_msg_add_name(msg, buf));
}

static int add_rid_item(mstar_msg *msg, PyObject *item)
{
    mstar_rid rid;
    return mstarpy_rid_from_py(item, &rid) < 0 ? -1 : check_add(mstar_msg_add_rid(msg, &rid));
}

static int add_int_item(mstar_msg *msg, PyObject *item)
{
    int64_t v;
    return i64_from_py(item, &v, "Message.ints") < 0 ? -1 : check_add(mstar_msg_add_int(msg, v));
}

static int add_tx_item(mstar_msg *msg, PyObject *item)
{
    mstar_tx_info tx;
    return tx_from_py(item, &tx) < 0 ? -1 : check_add(mstar_msg_add_tx(msg, &tx));
}

static int add_rx_item(mstar_msg *msg, PyObject *item)
{
    mstar_rx_info rx;
    return rx_from_py(item, &rx) < 0 ? -1 : check_add(mstar_msg_add_rx(msg, &rx));
}

/* counts {uuid: n} and kv {key: value}: dicts. */
static int add_counts(PyObject *d, mstar_msg *msg)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int r = PyDict_Check(d) ? 0 : (mstarpy_raise_msg(MSTAR_EINVAL, "Message.counts: a dict"), -1);
    while (r == 0 && PyDict_Check(d) && PyDict_Next(d, &pos, &k, &v)) {
        uint64_t u;
        int64_t n;
        r = mstarpy_u64_from_py(k, &u, "Message.counts key") < 0 ||
                    i64_from_py(v, &n, "Message.counts value") < 0
                ? -1
                : check_add(mstar_msg_add_count(msg, u, n));
    }
    return r;
}

static int add_kv(PyObject *d, mstar_msg *msg)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int r = PyDict_Check(d) ? 0 : (mstarpy_raise_msg(MSTAR_EINVAL, "Message.kv: a dict"), -1);
    while (r == 0 && PyDict_Check(d) && PyDict_Next(d, &pos, &k, &v)) {
        char key[64];
        int64_t n;
        r = mstarpy_name_from_py(k, key, sizeof(key), false, "Message.kv key") < 0 ||
                    i64_from_py(v, &n, "Message.kv value") < 0
                ? -1
                : check_add(mstar_msg_add_kv(msg, key, n));
    }
    return r;
}

static int remove_source_from_py(PyObject *o, mstar_remove_source *out, const char *what)
{
    int32_t v;
    if (i32_from_py(o, &v, what) < 0)
        return -1;
    if (v < MSTAR_REMOVE_FROM_CONDUCTOR || v > MSTAR_REMOVE_FROM_SELF) {
        mstarpy_raise_msg(MSTAR_EINVAL, "%s: 0, 1 or 2, not %d", what, (int)v);
        return -1;
    }
    *out = (mstar_remove_source)v;
    return 0;
}

static PyObject *list_of(uint32_t n, PyObject *(*item)(const mstar_msg *, uint32_t),
                         const mstar_msg *m)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *x = item(m, i);
        if (!x) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, x);
    }
    return list;
}

static PyObject *edge_item(const mstar_msg *m, uint32_t i)
{
    return mstarpy_edge_to_py(&m->edges[i]);
}
static PyObject *uuid_item(const mstar_msg *m, uint32_t i)
{
    return PyLong_FromUnsignedLongLong(m->uuids[i]);
}
static PyObject *name_item(const mstar_msg *m, uint32_t i)
{
    return PyUnicode_FromString(m->names[i]);
}
static PyObject *rid_item(const mstar_msg *m, uint32_t i)
{
    return mstarpy_rid_to_py(&m->rids[i]);
}
static PyObject *int_item(const mstar_msg *m, uint32_t i)
{
    return PyLong_FromLongLong(m->ints[i]);
}

static PyObject *counts_to_py(const mstar_msg *m)
{
    PyObject *d = PyDict_New();
    for (uint32_t i = 0; d && i < m->ncounts; i++) {
        PyObject *k = PyLong_FromUnsignedLongLong(m->counts[i].uuid);
        PyObject *v = PyLong_FromLongLong(m->counts[i].count);
        if (!k || !v || PyDict_SetItem(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *kv_to_py(const mstar_msg *m)
{
    PyObject *d = PyDict_New();
    for (uint32_t i = 0; d && i < m->nkv; i++) {
        PyObject *v = PyLong_FromLongLong(m->kv[i].value);
        if (!v || PyDict_SetItemString(d, m->kv[i].key, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* Field i (MSTARPY_MSG_*) of a message, one at a time: message.c converts only the fields a
 * Message object holds as Python values, and takes the others from a struct. */
int mstarpy_msg_field_from_py(mstar_msg *m, int i, PyObject *v)
{
    switch (i) {
    case MSTARPY_MSG_TYPE:
        return msg_type_from_py(v, &m->type, "Message.type");
    case MSTARPY_MSG_SENDER:
        /* the wire's `from`: a producer's ACK ledger settles deliveries by it, so a received
         * message handed to handle_message keeps it (a mesh stamps its own on send) */
        return mstarpy_name_from_py(v, m->from, sizeof(m->from), true, "Message.sender");
    case MSTARPY_MSG_REQUEST_ID:
        return mstarpy_rid_from_py(v, &m->request_id);
    case MSTARPY_MSG_GRAPH_WALK:
        return mstarpy_name_from_py(v, m->graph_walk, sizeof(m->graph_walk), true,
                                    "Message.graph_walk");
    case MSTARPY_MSG_TEXT:
        return mstarpy_name_from_py(v, m->text, sizeof(m->text), true, "Message.text");
    case MSTARPY_MSG_REMOVE_SOURCE:
        return remove_source_from_py(v, &m->remove_source, "Message.remove_source");
    case MSTARPY_MSG_FORCE:
        return bool_from_py(v, &m->force, "Message.force");
    case MSTARPY_MSG_FIRST_TP_RANK:
        return bool_from_py(v, &m->is_first_tp_rank, "Message.is_first_tp_rank");
    case MSTARPY_MSG_ROUND:
        return i64_from_py(v, &m->round, "Message.round");
    case MSTARPY_MSG_RANK:
        return i32_from_py(v, &m->rank, "Message.rank");
    case MSTARPY_MSG_WORLD_SIZE:
        return i32_from_py(v, &m->world_size, "Message.world_size");
    case MSTARPY_MSG_EDGES:
        return each_item(v, m, add_edge_item);
    case MSTARPY_MSG_COUNTS:
        if (!PyDict_Check(v))
            return mstarpy_raise_msg(MSTAR_EINVAL, "Message.counts: a dict"), -1;
        return add_counts(v, m);
    case MSTARPY_MSG_UUIDS:
        return each_item(v, m, add_uuid_item);
    case MSTARPY_MSG_NAMES:
        return each_item(v, m, add_name_item);
    case MSTARPY_MSG_RIDS:
        return each_item(v, m, add_rid_item);
    case MSTARPY_MSG_INTS:
        return each_item(v, m, add_int_item);
    case MSTARPY_MSG_RX:
        return each_item(v, m, add_rx_item);
    case MSTARPY_MSG_TX:
        return each_item(v, m, add_tx_item);
    case MSTARPY_MSG_KV:
        if (!PyDict_Check(v))
            return mstarpy_raise_msg(MSTAR_EINVAL, "Message.kv: a dict"), -1;
        return add_kv(v, m);
    }
    PyErr_SetString(PyExc_SystemError, "no such Message field");
    return -1;
}

PyObject *mstarpy_msg_field_to_py(const mstar_msg *m, int i)
{
    const char *type;
    switch (i) {
    case MSTARPY_MSG_TYPE:
        type = mstar_msg_type_name(m->type);
        return PyUnicode_FromString(type ? type : "INVALID");
    case MSTARPY_MSG_SENDER:
        return PyUnicode_FromString(m->from);
    case MSTARPY_MSG_REQUEST_ID:
        return mstarpy_rid_to_py(&m->request_id);
    case MSTARPY_MSG_GRAPH_WALK:
        return PyUnicode_FromString(m->graph_walk);
    case MSTARPY_MSG_TEXT:
        return PyUnicode_FromString(m->text);
    case MSTARPY_MSG_REMOVE_SOURCE:
        return PyLong_FromLong((long)m->remove_source);
    case MSTARPY_MSG_FORCE:
        return PyBool_FromLong(m->force);
    case MSTARPY_MSG_FIRST_TP_RANK:
        return PyBool_FromLong(m->is_first_tp_rank);
    case MSTARPY_MSG_ROUND:
        return PyLong_FromLongLong(m->round);
    case MSTARPY_MSG_RANK:
        return PyLong_FromLong(m->rank);
    case MSTARPY_MSG_WORLD_SIZE:
        return PyLong_FromLong(m->world_size);
    case MSTARPY_MSG_EDGES:
        return list_of(m->nedges, edge_item, m);
    case MSTARPY_MSG_COUNTS:
        return counts_to_py(m);
    case MSTARPY_MSG_UUIDS:
        return list_of(m->nuuids, uuid_item, m);
    case MSTARPY_MSG_NAMES:
        return list_of(m->nnames, name_item, m);
    case MSTARPY_MSG_RIDS:
        return list_of(m->nrids, rid_item, m);
    case MSTARPY_MSG_INTS:
        return list_of(m->nints, int_item, m);
    case MSTARPY_MSG_RX:
        return mstarpy_rx_to_py(m->rx, m->nrx);
    case MSTARPY_MSG_TX:
        return mstarpy_tx_to_py(m->tx, m->ntx);
    case MSTARPY_MSG_KV:
        return kv_to_py(m);
    }
    PyErr_SetString(PyExc_SystemError, "no such Message field");
    return NULL;
}

/* Append src's array of field `i` to dst's (deep: edges bring their descriptors). */
static mstar_status copy_array(mstar_msg *dst, const mstar_msg *src, int i)
{
    mstar_status st = MSTAR_OK;
    switch (i) {
    case MSTARPY_MSG_EDGES:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nedges; k++)
            st = mstar_msg_add_edge(dst, &src->edges[k]);
        break;
    case MSTARPY_MSG_COUNTS:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->ncounts; k++)
            st = mstar_msg_add_count(dst, src->counts[k].uuid, src->counts[k].count);
        break;
    case MSTARPY_MSG_UUIDS:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nuuids; k++)
            st = mstar_msg_add_uuid(dst, src->uuids[k]);
        break;
    case MSTARPY_MSG_NAMES:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nnames; k++)
            st = mstar_msg_add_name(dst, src->names[k]);
        break;
    case MSTARPY_MSG_RIDS:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nrids; k++)
            st = mstar_msg_add_rid(dst, &src->rids[k]);
        break;
    case MSTARPY_MSG_INTS:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nints; k++)
            st = mstar_msg_add_int(dst, src->ints[k]);
        break;
    case MSTARPY_MSG_RX:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nrx; k++)
            st = mstar_msg_add_rx(dst, &src->rx[k]);
        break;
    case MSTARPY_MSG_TX:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->ntx; k++)
            st = mstar_msg_add_tx(dst, &src->tx[k]);
        break;
    case MSTARPY_MSG_KV:
        for (uint32_t k = 0; st == MSTAR_OK && k < src->nkv; k++)
            st = mstar_msg_add_kv(dst, src->kv[k].key, src->kv[k].value);
        break;
    }
    return st;
}

int mstarpy_msg_field_copy(mstar_msg *dst, const mstar_msg *src, int i)
{
    switch (i) {
    case MSTARPY_MSG_TYPE:
        dst->type = src->type;
        return 0;
    case MSTARPY_MSG_SENDER:
        memcpy(dst->from, src->from, sizeof(dst->from));
        return 0;
    case MSTARPY_MSG_REQUEST_ID:
        dst->request_id = src->request_id;
        return 0;
    case MSTARPY_MSG_GRAPH_WALK:
        memcpy(dst->graph_walk, src->graph_walk, sizeof(dst->graph_walk));
        return 0;
    case MSTARPY_MSG_TEXT:
        memcpy(dst->text, src->text, sizeof(dst->text));
        return 0;
    case MSTARPY_MSG_REMOVE_SOURCE:
        dst->remove_source = src->remove_source;
        return 0;
    case MSTARPY_MSG_FORCE:
        dst->force = src->force;
        return 0;
    case MSTARPY_MSG_FIRST_TP_RANK:
        dst->is_first_tp_rank = src->is_first_tp_rank;
        return 0;
    case MSTARPY_MSG_ROUND:
        dst->round = src->round;
        return 0;
    case MSTARPY_MSG_RANK:
        dst->rank = src->rank;
        return 0;
    case MSTARPY_MSG_WORLD_SIZE:
        dst->world_size = src->world_size;
        return 0;
    }
    return check_add(copy_array(dst, src, i));
}

void mstarpy_msg_finish(mstar_msg *m)
{
    /* INPUT_SIGNALS defaults text to "default" (mstar_msg_init); keep it when left empty. */
    if (m->type == MSTAR_MSG_INPUT_SIGNALS && !m->text[0])
        snprintf(m->text, sizeof(m->text), "default");
}

/* The attribute path: any object with Message's attributes (a subclass of Message, whose
 * fields may be properties, included). */
int mstarpy_msg_from_py(PyObject *obj, mstar_msg *m)
{
    mstar_msg_type type;
    if (GET_ATTR(obj, "type", msg_type_from_py, &type, "Message.type") < 0) {
        mstar_msg_init(m, MSTAR_MSG_INVALID);
        return -1;
    }
    mstar_msg_init(m, type);
    for (int i = MSTARPY_MSG_TYPE + 1; i < MSTARPY_MSG_NFIELDS; i++) {
        PyObject *v = attr_named(obj, mstarpy_msg_name(i));
        int r = v ? mstarpy_msg_field_from_py(m, i, v) : -1;
        Py_XDECREF(v);
        if (r < 0)
            return -1;
    }
    mstarpy_msg_finish(m);
    return 0;
}

PyObject *mstarpy_msg_to_py(const mstar_msg *m)
{
    mstar_msg copy;
    mstar_msg_init(&copy, m->type);
    for (int i = 0; i < MSTARPY_MSG_NFIELDS; i++) {
        if (mstarpy_msg_field_copy(&copy, m, i) < 0) {
            mstar_msg_clear(&copy);
            return NULL;
        }
    }
    return mstarpy_msg_new(&copy);
}
