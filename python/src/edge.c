/*
 * edge.c — mstar_c._mstar._EdgeBase, the storage under mstar_c.GraphEdge.
 *
 * Every message that carries tensors carries edges, so an edge crosses the C boundary on each
 * handoff: built in Python and sent, or made by the extension (a received message's edges, each
 * edge of get_ready_tensors). As a plain dataclass each crossing read its eight fields by
 * attribute or built them into an instance dict. Here an edge holds the library's struct for
 * its scalars (next_node, name, the flags, total_fanin, shard_dim; never a descriptor array)
 * and one Python value per field, absent until written or read:
 *   - an absent scalar is the struct's value; reading it builds that value once and keeps it;
 *   - writing a scalar keeps the value as given (a dataclass accepts anything) and, when it is
 *     a str, bool, int or None (which cannot change afterwards), also converts it into the
 *     struct at once; any other value, or one the converter refuses, is converted when the edge
 *     is used, and a bad one is refused then with InvalidArgumentError;
 *   - tensor_info is always a Python list the user may change in place (an edge made by the
 *     extension gets its list of TensorPointerInfo at once); it is walked when the edge is used
 *     (descriptors of exactly TensorPointerInfo copy their own struct).
 * So turning a GraphEdge into the library's edge copies the struct and walks one list, with no
 * attribute lookup. The Python class (mstar/_types.py) is a dataclass over this type. Only
 * objects of exactly that class take the struct path: a subclass may turn a field into a
 * property, whose reads must all run, so it is converted by attribute like any other object.
 */
#include "mstar_py.h"

typedef struct edge_obj {
    PyObject ob_base;                     /* PyObject_HEAD */
    PyObject *vals[MSTARPY_EDGE_NFIELDS]; /* the fields as Python values; NULL: the struct's */
    uint32_t same;                        /* bit i: vals[i] is what e holds (converted) */
    mstar_edge e;                         /* the scalars; tensor_info stays NULL */
} edge_obj;

#define BIT(i) (1u << (i))
#define INFOS  MSTARPY_EDGE_TENSOR_INFO

static const char *const field_names[MSTARPY_EDGE_NFIELDS] = {
    "next_node",        "name",        "tensor_info", "persist", "is_streaming",
    "persist_for_loop", "total_fanin", "shard_dim",
};

/* Interned names and the dataclass's defaults (set by bind): tensor_info's is its factory.
 * default_edge is the scalar defaults converted once: the struct of an edge built in Python. */
static PyObject *names[MSTARPY_EDGE_NFIELDS];
static PyObject *defaults[MSTARPY_EDGE_NFIELDS];
static mstar_edge default_edge;

PyObject *mstarpy_edge_name(int i)
{
    return names[i];
}

bool mstarpy_edge_exact(PyObject *obj)
{
    return mstarpy.edge_cls && (PyObject *)Py_TYPE(obj) == mstarpy.edge_cls;
}

/* A value whose conversion runs no Python code and which cannot change after it: converted
 * into the struct when written. */
static bool frozen(PyObject *v)
{
    return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyUnicode_CheckExact(v);
}

/* Keep `v` (borrowed) as field i, as written. */
static void store(edge_obj *self, int i, PyObject *v)
{
    PyObject *old = self->vals[i];
    self->vals[i] = Py_NewRef(v);
    self->same &= ~BIT(i);
    if (i != INFOS && frozen(v)) {
        if (mstarpy_edge_field_from_py(&self->e, i, v) == 0)
            self->same |= BIT(i);
        else
            PyErr_Clear(); /* refused when the edge is used */
    }
    Py_XDECREF(old);
}

static PyObject *edge_get(PyObject *obj, void *closure)
{
    edge_obj *self = (edge_obj *)obj;
    int i = (int)(intptr_t)closure;
    if (!self->vals[i]) {
        PyObject *v = i == INFOS ? PyObject_CallNoArgs(defaults[INFOS])
                                 : mstarpy_edge_field_to_py(&self->e, i);
        if (!v)
            return NULL;
        self->vals[i] = v;
        if (i != INFOS)
            self->same |= BIT(i);
    }
    return Py_NewRef(self->vals[i]);
}

static int edge_set(PyObject *obj, PyObject *v, void *closure)
{
    int i = (int)(intptr_t)closure;
    if (!v) {
        PyErr_Format(PyExc_AttributeError, "GraphEdge.%s cannot be deleted", field_names[i]);
        return -1;
    }
    store((edge_obj *)obj, i, v);
    return 0;
}

/* GraphEdge(next_node="", name="", tensor_info=[], ...): by position or keyword, the
 * dataclass's defaults for the rest (tensor_info's list made when first read). A subclass gets
 * every field set by attribute (its properties run). */
static int edge_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    PyObject *v[MSTARPY_EDGE_NFIELDS];
    if (!defaults[0]) {
        PyErr_SetString(PyExc_TypeError, "_EdgeBase is built through mstar_c.GraphEdge");
        return -1;
    }
    if (mstarpy_fields_from_args(args, kw, names, MSTARPY_EDGE_NFIELDS, "GraphEdge", v) < 0)
        return -1;
    edge_obj *self = (edge_obj *)obj;
    if (mstarpy_edge_exact(obj)) {
        mstarpy_vals_clear(self->vals, MSTARPY_EDGE_NFIELDS);
        self->same = 0;
        self->e = default_edge;
        for (int i = 0; i < MSTARPY_EDGE_NFIELDS; i++)
            if (v[i])
                store(self, i, v[i]);
        return 0;
    }
    return mstarpy_fields_set_attrs(obj, names, MSTARPY_EDGE_NFIELDS, v, defaults, BIT(INFOS));
}

static int edge_traverse(PyObject *obj, visitproc visit, void *arg)
{
    return mstarpy_vals_traverse(obj, ((edge_obj *)obj)->vals, MSTARPY_EDGE_NFIELDS, visit, arg);
}

static int edge_clear(PyObject *obj)
{
    mstarpy_vals_clear(((edge_obj *)obj)->vals, MSTARPY_EDGE_NFIELDS);
    return 0;
}

static void edge_dealloc(PyObject *obj)
{
    PyObject_GC_UnTrack(obj);
    mstarpy_vals_clear(((edge_obj *)obj)->vals, MSTARPY_EDGE_NFIELDS);
    mstarpy_gc_free(obj);
}

/* ---- what the converters use ------------------------------------------------------------- */

PyObject *mstarpy_edge_new(const mstar_edge *e)
{
    edge_obj *self = (edge_obj *)PyType_GenericAlloc((PyTypeObject *)mstarpy.edge_cls, 0);
    if (!self)
        return NULL;
    self->e = *e;
    self->e.tensor_info = NULL;
    self->e.ntensors = 0;
    self->vals[INFOS] = mstarpy_edge_field_to_py(e, INFOS);
    if (!self->vals[INFOS])
        Py_CLEAR(self);
    return (PyObject *)self;
}

int mstarpy_edge_get(PyObject *obj, mstar_edge *out)
{
    edge_obj *self = (edge_obj *)obj;
    /* A value's conversion may run Python code (an __index__, a subclass's property) that
     * writes this edge and lets go of the values being converted: they are held here, and what
     * is converted is what the edge held when the call began. */
    PyObject *vals[MSTARPY_EDGE_NFIELDS];
    for (int i = 0; i < MSTARPY_EDGE_NFIELDS; i++)
        vals[i] = self->vals[i] && !(self->same & BIT(i)) ? Py_NewRef(self->vals[i]) : NULL;
    *out = self->e;
    int r = 0;
    for (int i = 0; r == 0 && i < MSTARPY_EDGE_NFIELDS; i++)
        if (vals[i] && i != INFOS)
            r = mstarpy_edge_field_from_py(out, i, vals[i]);
    if (r == 0 && vals[INFOS])
        r = mstarpy_edge_field_from_py(out, INFOS, vals[INFOS]);
    mstarpy_vals_clear(vals, MSTARPY_EDGE_NFIELDS);
    return r;
}

PyObject *mstarpy_edge_built(PyObject *unused, PyObject *obj)
{
    if (!mstarpy_edge_exact(obj)) {
        PyErr_SetString(PyExc_TypeError, "a GraphEdge is required");
        return NULL;
    }
    return mstarpy_vals_names(((edge_obj *)obj)->vals, names, MSTARPY_EDGE_NFIELDS);
}

/* ---- the type ---------------------------------------------------------------------------- */

#define FIELD(i)                                                   \
    {                                                              \
        (char *)0, edge_get, edge_set, NULL, (void *)(intptr_t)(i) \
    }
static PyGetSetDef edge_getset[MSTARPY_EDGE_NFIELDS + 1] = {
    FIELD(0), FIELD(1), FIELD(2),
    FIELD(3), FIELD(4), FIELD(5),
    FIELD(6), FIELD(7), { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot edge_slots[] = {
    { Py_tp_new, PyType_GenericNew },
    { Py_tp_init, edge_init },
    { Py_tp_dealloc, edge_dealloc },
    { Py_tp_traverse, edge_traverse },
    { Py_tp_clear, edge_clear },
    { Py_tp_getset, edge_getset },
    { Py_tp_doc, "The storage of mstar_c.GraphEdge (internal): the library's edge struct for the "
                 "scalars, their Python values built on first read, and the tensor_info list." },
    { 0, NULL },
};

static PyType_Spec edge_spec = {
    "mstar_c.mstar_c._mstar._EdgeBase",
    sizeof(edge_obj),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    edge_slots,
};

int mstarpy_add_edge_type(PyObject *module)
{
    if (mstarpy_fields_intern(field_names, names, edge_getset, MSTARPY_EDGE_NFIELDS) < 0)
        return -1;
    PyObject *tp = PyType_FromSpec(&edge_spec);
    if (!tp)
        return -1;
    int r = PyModule_AddObjectRef(module, "_EdgeBase", tp);
    Py_DECREF(tp);
    return r;
}

/* The data class over _EdgeBase: its fields must be this file's, in this order (a positional
 * init goes by index). tensor_info needs a default factory that makes an empty list (an edge
 * whose list was never read has no descriptors); the other defaults make default_edge. */
int mstarpy_edge_bind(PyObject *cls)
{
    uint32_t factories;
    if (mstarpy_fields_bind(cls, names, MSTARPY_EDGE_NFIELDS, defaults, &factories) < 0)
        return -1;
    PyObject *probe = factories == BIT(INFOS) ? PyObject_CallNoArgs(defaults[INFOS]) : NULL;
    bool empty_list = probe && PyList_CheckExact(probe) && PyList_Size(probe) == 0;
    Py_XDECREF(probe);
    if (!empty_list) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ImportError,
                            "GraphEdge: only tensor_info may have a default factory, list");
        return -1;
    }
    mstar_edge_init(&default_edge);
    for (int i = 0; i < MSTARPY_EDGE_NFIELDS; i++)
        if (i != INFOS && mstarpy_edge_field_from_py(&default_edge, i, defaults[i]) < 0)
            return -1;
    return 0;
}
