/*
 * module.c — the _mstar extension module: its import (the exception and data classes it builds
 * objects from, the object types), raising library errors as Python exceptions, and the module
 * level functions (version, dtype names, fan-out of an edge).
 */
#include "mstar_py.h"

#include <stdarg.h>
#include <stdio.h>

mstarpy_state mstarpy;

PyObject *mstarpy_error_class(mstar_status st)
{
    PyObject *key = PyLong_FromLong((long)st);
    if (!key)
        return NULL;
    PyObject *cls = mstarpy.errors ? PyDict_GetItemWithError(mstarpy.errors, key) : NULL;
    Py_DECREF(key);
    if (!cls && !PyErr_Occurred())
        cls = mstarpy.error_base ? mstarpy.error_base : PyExc_RuntimeError;
    return cls; /* borrowed */
}

PyObject *mstarpy_raise_msg(mstar_status st, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    PyObject *cls = mstarpy_error_class(st);
    if (cls)
        PyErr_SetString(cls, buf);
    return NULL;
}

PyObject *mstarpy_raise(mstar_status st)
{
    const char *msg = mstar_last_error();
    if (!msg || !*msg || mstar_last_status() != st)
        msg = mstar_strerror(st);
    return mstarpy_raise_msg(st, "%s", msg);
}

/* ---- module functions ----------------------------------------------------------------------- */

static PyObject *py_version(PyObject *mod, PyObject *unused)
{
    return PyUnicode_FromString(mstar_version_string());
}

static PyObject *py_built_with_cuda(PyObject *mod, PyObject *unused)
{
    return PyBool_FromLong(mstar_built_with_cuda());
}

static PyObject *py_entity_index(PyObject *mod, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name)
        return NULL;
    uint16_t idx;
    mstar_status st = mstar_entity_index(name, &idx);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    return PyLong_FromLong(idx);
}

static PyObject *py_dtype_size(PyObject *mod, PyObject *arg)
{
    Py_ssize_t len;
    PyObject *s = PyObject_Str(arg);
    if (!s)
        return NULL;
    const char *name = PyUnicode_AsUTF8AndSize(s, &len);
    mstar_dtype dt;
    mstar_status st = name ? mstar_dtype_from_name(name, (size_t)len, &dt) : MSTAR_OK;
    Py_DECREF(s);
    if (!name)
        return NULL;
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    return PyLong_FromSize_t(mstar_dtype_size(dt));
}

static PyObject *py_status_name(PyObject *mod, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(mstar_status_name((mstar_status)v));
}

static PyObject *py_set_log_level(PyObject *mod, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < MSTAR_LOG_ERROR || v > MSTAR_LOG_TRACE)
        return mstarpy_raise_msg(MSTAR_EINVAL, "log level %ld: 0 (error) to 4 (trace)", v);
    mstar_log_set_level((mstar_log_level)v);
    Py_RETURN_NONE;
}

/* fanout(edge, shard_dim, src_workers, src_rank, dst_workers) -> [(worker, GraphEdge)] */
static int workers_from_py(PyObject *seq, mstar_shard_group *g, const char ***names)
{
    *names = NULL;
    if (seq == Py_None)
        return 0;
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0)
        return -1;
    if (n == 0 || n > 65536) {
        mstarpy_raise_msg(MSTAR_EINVAL, "a shard group has 1 to 65536 workers, not %zd", n);
        return -1;
    }
    *names = PyMem_Calloc((size_t)n, sizeof(char *));
    if (!*names) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PySequence_GetItem(seq, i);
        if (!w)
            return -1;
        /* The string lives as long as the sequence's element: the caller holds the sequence. */
        (*names)[i] = PyUnicode_AsUTF8AndSize(w, NULL);
        Py_DECREF(w);
        if (!(*names)[i])
            return -1;
    }
    g->tp_size = (int32_t)n;
    g->workers = *names;
    return 0;
}

static PyObject *py_fanout(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "edge", "shard_dim", "src_workers", "src_rank", "dst_workers", NULL };
    PyObject *edge_obj, *dim_obj, *src_obj = Py_None, *dst_obj = Py_None;
    int src_rank = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OiO", kwlist, &edge_obj, &dim_obj, &src_obj,
                                     &src_rank, &dst_obj))
        return NULL;
    int32_t dim = -1;
    if (dim_obj != Py_None) {
        long v = PyLong_AsLong(dim_obj);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        dim = (int32_t)v;
    }
    mstar_shard_group src = { 0 }, dst = { 0 };
    const char **src_names = NULL, **dst_names = NULL;
    mstar_edge edge;
    mstar_edge_init(&edge);
    PyObject *result = NULL;
    if (workers_from_py(src_obj, &src, &src_names) < 0 ||
        workers_from_py(dst_obj, &dst, &dst_names) < 0 || mstarpy_edge_from_py(edge_obj, &edge) < 0)
        goto out;
    mstar_fanout fo;
    mstar_status st = mstar_edge_fanout(&edge, dim, src_names ? &src : NULL, src_rank,
                                        dst_names ? &dst : NULL, &fo);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        goto out;
    }
    result = PyList_New((Py_ssize_t)fo.n);
    for (uint32_t i = 0; result && i < fo.n; i++) {
        PyObject *e = mstarpy_edge_to_py(&fo.edges[i]);
        PyObject *pair = e ? Py_BuildValue("(sN)", fo.workers[i], e) : NULL;
        if (!pair) {
            Py_CLEAR(result);
            break;
        }
        PyList_SetItem(result, (Py_ssize_t)i, pair);
    }
    mstar_fanout_clear(&fo);
out:
    mstarpy_edges_free(&edge, 1);
    PyMem_Free(src_names);
    PyMem_Free(dst_names);
    return result;
}

/* The exception classes, at import. */
static int load_errors(void)
{
    PyObject *errors = PyImport_ImportModule("mstar_c._errors");
    if (!errors)
        return -1;
    mstarpy.errors = PyObject_GetAttrString(errors, "BY_STATUS");
    mstarpy.error_base = PyObject_GetAttrString(errors, "Error");
    Py_DECREF(errors);
    return PyErr_Occurred() ? -1 : 0;
}

/* _bind_types(module): the data classes the extension builds objects of. mstar_c._types calls
 * it once it has made them: TensorPointerInfo is a subclass of this module's _InfoBase (and
 * GraphEdge of _EdgeBase, Message of _MsgBase), so
 * that module cannot be imported from here while this one is being made. */
static PyObject *py_bind_types(PyObject *mod, PyObject *types)
{
    static struct {
        PyObject **slot;
        const char *name;
    } const classes[] = {
        { &mstarpy.info_cls, "TensorPointerInfo" },
        { &mstarpy.edge_cls, "GraphEdge" },
        { &mstarpy.msg_cls, "Message" },
        { &mstarpy.tx_cls, "TxInfo" },
        { &mstarpy.rx_cls, "RxInfo" },
        { &mstarpy.stored_cls, "StoredOutputs" },
        { &mstarpy.failure_cls, "ReadFailure" },
    };
    PyObject *got[sizeof(classes) / sizeof(classes[0])] = { NULL };
    size_t n = sizeof(classes) / sizeof(classes[0]);
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = (got[i] = PyObject_GetAttrString(types, classes[i].name)) ? 0 : -1;
    if (r == 0)
        r = mstarpy_info_bind(got[0]);
    if (r == 0)
        r = mstarpy_edge_bind(got[1]);
    if (r == 0)
        r = mstarpy_msg_bind(got[2]);
    for (size_t i = 0; i < n; i++) {
        if (r == 0) {
            Py_XDECREF(*classes[i].slot);
            *classes[i].slot = got[i];
        } else {
            Py_XDECREF(got[i]);
        }
    }
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    { "version", py_version, METH_NOARGS,
      "version($module, /)\n--\n\n"
      "libmstar's version." },
    { "built_with_cuda", py_built_with_cuda, METH_NOARGS,
      "built_with_cuda($module, /)\n--\n\n"
      "whether libmstar has the CUDA backend." },
    { "entity_index", py_entity_index, METH_O,
      "entity_index($module, name, /)\n--\n\n"
      "the fixed tensor-id index of a well-known entity name." },
    { "dtype_size", py_dtype_size, METH_O,
      "dtype_size($module, dtype, /)\n--\n\n"
      "bytes per element of a torch dtype name." },
    { "status_name", py_status_name, METH_O,
      "status_name($module, code, /)\n--\n\n"
      "The status name of a code, e.g. 'MSTAR_EINVAL'." },
    { "set_log_level", py_set_log_level, METH_O,
      "set_log_level($module, level, /)\n--\n\n"
      "0 error, 1 warn, 2 info, 3 debug, 4 trace (overrides MSTAR_LOG)." },
    { "fanout", (PyCFunction)(void (*)(void))py_fanout, METH_VARARGS | METH_KEYWORDS,
      "fanout($module, edge, shard_dim, src_workers=None, src_rank=0, dst_workers=None)\n--\n\n"
      ""
      "-> list[(worker, GraphEdge)]: the per-destination clones of an edge (the reference's\n"
      "fanout_graph_edges). shard_dim None: replicated." },
    { "_bind_types", py_bind_types, METH_O,
      "_bind_types(mstar_c._types): the data classes objects are built of (internal)." },
    { "_message_has_struct", mstarpy_msg_has_struct, METH_O,
      "Whether a Message keeps a received message's library struct (tests)." },
    { "_message_built", mstarpy_msg_built, METH_O,
      "The fields a Message holds as Python values (tests)." },
    { "_edge_built", mstarpy_edge_built, METH_O,
      "The fields a GraphEdge holds as Python values (tests)." },
    { NULL, NULL, 0, NULL },
};

static void module_free(void *unused)
{
    (void)unused;
    mstarpy_msg_spares_free();
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_mstar",
    "The C core of the mstar_c package (see the mstar_c package for the documented API).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    module_free,
};

PyMODINIT_FUNC PyInit__mstar(void)
{
    if (load_errors() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (mstarpy_add_comm_type(m) < 0 || mstarpy_add_tensor_type(m) < 0 ||
        mstarpy_add_mesh_type(m) < 0 || mstarpy_add_completion_type(m) < 0 ||
        mstarpy_add_msg_type(m) < 0 || mstarpy_add_loan_type(m) < 0 ||
        mstarpy_add_info_type(m) < 0 || mstarpy_add_edge_type(m) < 0 ||
        mstarpy_add_runner_types(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
