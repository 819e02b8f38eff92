/*
 * info.c — mstar_c._mstar._InfoBase, the storage under mstar_c.TensorPointerInfo.
 *
 * A descriptor crosses the C boundary several times per handoff (stored, staged and stamped,
 * sent in a message, received), and as a plain dataclass each crossing built or read its 16
 * fields as Python objects. Here a descriptor holds the library's struct itself, with a flag
 * saying whether the struct is current, and one Python value per field that may be absent:
 *   - one made by the extension (a store, a received edge) has only the struct; reading a field
 *     builds that field's value from it once;
 *   - writing a field first builds every absent value, then keeps what was written as given
 *     (a dataclass accepts anything; a bad value is refused when the descriptor is used) and
 *     marks the struct stale, so the converters read the fields by attribute again;
 *   - the converters (convert.c) copy a current struct in and out without touching the values.
 * The Python class (mstar/_types.py) is a dataclass over this type, so fields(), replace(),
 * asdict(), ==, repr and pickling work as for any dataclass. Only objects of exactly that class
 * take the struct paths: a subclass may turn a field into a property, whose reads and writes
 * must all run.
 */
#include "mstar_py.h"

#include <string.h>

typedef struct info_obj {
    PyObject ob_base;                     /* PyObject_HEAD */
    PyObject *vals[MSTARPY_INFO_NFIELDS]; /* the fields as Python values; NULL: not built */
    uint64_t version;                     /* counts writes: see mstarpy_info_cache */
    bool current;                         /* `info` holds every field */
    mstar_tensor_info info;
} info_obj;

const char *const mstarpy_info_names[MSTARPY_INFO_NFIELDS] = {
    "dims",
    "dtype",
    "stride",
    "nbytes",
    "address",
    "uuid",
    "source_session_id",
    "source_entity",
    "offset",
    "source_tp_size",
    "source_tp_rank",
    "shm_segment",
    "shm_offset",
    "source_node_name",
    "source_graph_walk",
    "remote_key",
};

/* Interned names (for a subclass's __init__) and the dataclass's defaults, set by bind. */
static PyObject *names[MSTARPY_INFO_NFIELDS];
static PyObject *defaults[MSTARPY_INFO_NFIELDS];

bool mstarpy_info_exact(PyObject *obj)
{
    return mstarpy.info_cls && (PyObject *)Py_TYPE(obj) == mstarpy.info_cls;
}

/* ---- a data class over a C base (shared with edge.c, message.c) -------------------------- */

void mstarpy_vals_clear(PyObject **vals, int n)
{
    for (int i = 0; i < n; i++)
        Py_CLEAR(vals[i]);
}

int mstarpy_vals_traverse(PyObject *obj, PyObject **vals, int n, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(obj));
    for (int i = 0; i < n; i++)
        Py_VISIT(vals[i]);
    return 0;
}

void mstarpy_gc_free(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

int mstarpy_fields_intern(const char *const *src, PyObject **names, PyGetSetDef *getset, int n)
{
    for (int i = 0; i < n; i++) {
        getset[i].name = src[i];
        if (!names[i] && !(names[i] = PyUnicode_InternFromString(src[i])))
            return -1;
    }
    return 0;
}

/* A dataclass Field's default: its value, or (when it has none and `factories` is given) its
 * factory, with bit i set in *factories. */
static PyObject *field_default(PyObject *field, int i, uint32_t *factories)
{
    PyObject *dflt = PyObject_GetAttrString(field, "default");
    PyObject *dc = dflt ? PyImport_ImportModule("dataclasses") : NULL;
    PyObject *missing = dc ? PyObject_GetAttrString(dc, "MISSING") : NULL;
    Py_XDECREF(dc);
    if (!missing) {
        Py_XDECREF(dflt);
        return NULL;
    }
    if (dflt == missing) {
        Py_CLEAR(dflt);
        if (factories) {
            dflt = PyObject_GetAttrString(field, "default_factory");
            *factories |= 1u << i;
        }
    }
    Py_DECREF(missing);
    return dflt;
}

int mstarpy_fields_bind(PyObject *cls, PyObject *const *names, int n, PyObject **defaults,
                        uint32_t *factories)
{
    PyObject *fields = PyObject_GetAttrString(cls, "__dataclass_fields__");
    if (!fields)
        return -1;
    PyObject *keys = PySequence_List(fields);
    int r = keys && PyList_Size(keys) == n ? 0 : -1;
    if (factories)
        *factories = 0;
    for (int i = 0; r == 0 && i < n; i++) {
        PyObject *field = PyObject_GetItem(fields, names[i]);
        PyObject *dflt = field ? field_default(field, i, factories) : NULL;
        Py_XDECREF(field);
        r = dflt && PyUnicode_Compare(PyList_GetItem(keys, i), names[i]) == 0 ? 0 : -1;
        Py_XDECREF(defaults[i]);
        defaults[i] = dflt;
    }
    Py_XDECREF(keys);
    Py_DECREF(fields);
    if (r < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ImportError, "%S's fields are not those of its _mstar base", cls);
    return r;
}

int mstarpy_fields_set_attrs(PyObject *obj, PyObject *const *names, int n, PyObject **v,
                             PyObject *const *defaults, uint32_t factories)
{
    for (int i = 0; i < n; i++) {
        PyObject *x = v[i]                    ? Py_NewRef(v[i])
                      : factories & (1u << i) ? PyObject_CallNoArgs(defaults[i])
                                              : Py_NewRef(defaults[i]);
        int r = x ? PyObject_SetAttr(obj, names[i], x) : -1;
        Py_XDECREF(x);
        if (r < 0)
            return -1;
    }
    return 0;
}

PyObject *mstarpy_vals_names(PyObject *const *vals, PyObject *const *names, int n)
{
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++)
        if (vals[i] && PyList_Append(out, names[i]) < 0)
            Py_CLEAR(out);
    return out;
}

/* ---- TensorPointerInfo ------------------------------------------------------------------- */

static void clear_vals(info_obj *self)
{
    mstarpy_vals_clear(self->vals, MSTARPY_INFO_NFIELDS);
}

/* Build every value still absent from the struct (nothing when the struct is stale). */
static int materialise(info_obj *self)
{
    for (int i = 0; self->current && i < MSTARPY_INFO_NFIELDS; i++) {
        if (!self->vals[i] && !(self->vals[i] = mstarpy_info_field_to_py(&self->info, i)))
            return -1;
    }
    return 0;
}

/* Keep `v` (borrowed; NULL deletes) as field i: the struct is stale from now on. */
static void store(info_obj *self, int i, PyObject *v)
{
    PyObject *old = self->vals[i];
    Py_XINCREF(v);
    self->vals[i] = v;
    self->current = false;
    self->version++;
    Py_XDECREF(old);
}

static PyObject *info_get(PyObject *obj, void *closure)
{
    info_obj *self = (info_obj *)obj;
    int i = (int)(intptr_t)closure;
    if (!self->vals[i]) {
        if (!self->current) {
            PyErr_Format(PyExc_AttributeError, "TensorPointerInfo has no value for %s",
                         mstarpy_info_names[i]);
            return NULL;
        }
        self->vals[i] = mstarpy_info_field_to_py(&self->info, i);
        if (!self->vals[i])
            return NULL;
    }
    return Py_NewRef(self->vals[i]);
}

static int info_set(PyObject *obj, PyObject *v, void *closure)
{
    info_obj *self = (info_obj *)obj;
    int i = (int)(intptr_t)closure;
    if (materialise(self) < 0)
        return -1;
    if (!v && !self->vals[i]) {
        PyErr_SetString(PyExc_AttributeError, mstarpy_info_names[i]);
        return -1;
    }
    store(self, i, v);
    return 0;
}

/* TensorPointerInfo(dims=(), dtype="float32", ...): by position or keyword, the dataclass's
 * defaults for the rest. A subclass gets its fields set by attribute (its properties run). */
static int info_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    PyObject *v[MSTARPY_INFO_NFIELDS];
    if (!defaults[0]) {
        PyErr_SetString(PyExc_TypeError, "_InfoBase is built through mstar_c.TensorPointerInfo");
        return -1;
    }
    if (mstarpy_fields_from_args(args, kw, names, MSTARPY_INFO_NFIELDS, "TensorPointerInfo", v) < 0)
        return -1;
    if (!mstarpy_info_exact(obj))
        return mstarpy_fields_set_attrs(obj, names, MSTARPY_INFO_NFIELDS, v, defaults, 0);
    for (int i = 0; i < MSTARPY_INFO_NFIELDS; i++)
        store((info_obj *)obj, i, v[i] ? v[i] : defaults[i]);
    return 0;
}

static int info_traverse(PyObject *obj, visitproc visit, void *arg)
{
    return mstarpy_vals_traverse(obj, ((info_obj *)obj)->vals, MSTARPY_INFO_NFIELDS, visit, arg);
}

static int info_clear(PyObject *obj)
{
    clear_vals((info_obj *)obj);
    return 0;
}

static void info_dealloc(PyObject *obj)
{
    PyObject_GC_UnTrack(obj);
    clear_vals((info_obj *)obj);
    mstarpy_gc_free(obj);
}

/* ---- what the converters use ------------------------------------------------------------- */

PyObject *mstarpy_info_new(const mstar_tensor_info *info)
{
    PyTypeObject *tp = (PyTypeObject *)mstarpy.info_cls;
    info_obj *self = (info_obj *)PyType_GenericAlloc(tp, 0);
    if (!self)
        return NULL;
    self->info = *info;
    self->current = true;
    return (PyObject *)self;
}

bool mstarpy_info_get_struct(PyObject *obj, mstar_tensor_info *out)
{
    if (!mstarpy_info_exact(obj) || !((info_obj *)obj)->current)
        return false;
    *out = ((info_obj *)obj)->info;
    return true;
}

void mstarpy_info_set_struct(PyObject *obj, const mstar_tensor_info *info)
{
    info_obj *self = (info_obj *)obj;
    self->info = *info;
    self->current = true;
    self->version++;
    clear_vals(self);
}

uint64_t mstarpy_info_version(PyObject *obj)
{
    return mstarpy_info_exact(obj) ? ((info_obj *)obj)->version : 0;
}

/* A value that cannot change after it was converted: a str, an int, bytes, None, or a tuple
 * of ints (exact types: a subclass may compute what it converts to). */
static bool frozen(PyObject *v)
{
    if (v == Py_None || PyLong_CheckExact(v) || PyUnicode_CheckExact(v) || PyBytes_CheckExact(v))
        return true;
    if (!PyTuple_CheckExact(v))
        return false;
    Py_ssize_t n = PyTuple_Size(v);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyLong_CheckExact(PyTuple_GetItem(v, i)))
            return false;
    return true;
}

void mstarpy_info_cache(PyObject *obj, const mstar_tensor_info *info, uint64_t version)
{
    if (!mstarpy_info_exact(obj))
        return;
    info_obj *self = (info_obj *)obj;
    /* A write during the conversion (a value's __iter__ or __str__ may run code), or a value
     * that can change in place (a list of dims), would leave the struct behind the values. */
    if (self->current || self->version != version)
        return;
    for (int i = 0; i < MSTARPY_INFO_NFIELDS; i++)
        if (!self->vals[i] || !frozen(self->vals[i]))
            return;
    self->info = *info;
    self->current = true;
}

/* ---- the type ---------------------------------------------------------------------------- */

#define FIELD(i)                                                   \
    {                                                              \
        (char *)0, info_get, info_set, NULL, (void *)(intptr_t)(i) \
    }
static PyGetSetDef info_getset[MSTARPY_INFO_NFIELDS + 1] = {
    FIELD(0),
    FIELD(1),
    FIELD(2),
    FIELD(3),
    FIELD(4),
    FIELD(5),
    FIELD(6),
    FIELD(7),
    FIELD(8),
    FIELD(9),
    FIELD(10),
    FIELD(11),
    FIELD(12),
    FIELD(13),
    FIELD(14),
    FIELD(15),
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot info_slots[] = {
    { Py_tp_new, PyType_GenericNew },
    { Py_tp_init, info_init },
    { Py_tp_dealloc, info_dealloc },
    { Py_tp_traverse, info_traverse },
    { Py_tp_clear, info_clear },
    { Py_tp_getset, info_getset },
    { Py_tp_doc, "The storage of mstar_c.TensorPointerInfo (internal): the library's descriptor "
                 "struct, its fields built as Python values on first read." },
    { 0, NULL },
};

static PyType_Spec info_spec = {
    "mstar_c.mstar_c._mstar._InfoBase",
    sizeof(info_obj),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    info_slots,
};

int mstarpy_add_info_type(PyObject *module)
{
    if (mstarpy_fields_intern(mstarpy_info_names, names, info_getset, MSTARPY_INFO_NFIELDS) < 0)
        return -1;
    PyObject *tp = PyType_FromSpec(&info_spec);
    if (!tp)
        return -1;
    int r = PyModule_AddObjectRef(module, "_InfoBase", tp);
    Py_DECREF(tp);
    return r;
}

/* The data class over _InfoBase: its fields must be this file's, in this order (the struct's
 * getters are found by name, a positional init by index); their defaults are init's. */
int mstarpy_info_bind(PyObject *cls)
{
    return mstarpy_fields_bind(cls, names, MSTARPY_INFO_NFIELDS, defaults, NULL);
}
