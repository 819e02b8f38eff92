/*
 * message.c — mstar_c._mstar._MsgBase, the storage under mstar_c.Message.
 *
 * A control message crosses the C boundary at least twice per handoff (sent, received, then
 * handled or read), and as a plain dataclass each crossing read or built all of its fields as
 * Python objects. Here a message holds one Python value per field, absent until set or read,
 * and may hold the library's struct of a received message (moved in at recv, never changed):
 *   - reading a field gives its value; an absent one is built from the struct when there is
 *     one, else it is the dataclass's default (a new list or dict for the factory fields), and
 *     is kept, so that `msg.edges.append(x)` changes what the message holds;
 *   - writing a field keeps the value as given (a dataclass accepts anything; a bad value is
 *     refused when the message is used);
 *   - turning the message into the library's (mstarpy_msg_arg_get) converts only the values
 *     that may differ from the struct's or the default's: those written, and the lists and
 *     dicts that were read (the caller may have changed them). A value read from the struct
 *     or a default that cannot change (a str, an int) counts as unchanged. So a received
 *     message forwarded as it came is sent from its struct, and one built in Python converts
 *     only what its builder gave.
 * The Python class (mstar/_types.py) is a dataclass over this type. Only objects of exactly
 * that class take the struct paths: a subclass may turn a field into a property, whose reads
 * must all run, so it is converted by attribute like any other object.
 */
#include "mstar_py.h"

#include <stdlib.h>
#include <string.h>

typedef struct msg_obj {
    PyObject ob_base;                    /* PyObject_HEAD */
    PyObject *vals[MSTARPY_MSG_NFIELDS]; /* the fields as Python values; NULL: not built */
    uint32_t same;                       /* bit i: vals[i] is the base's value (see base_of) */
    bool has_struct;                     /* *m is the base (else the defaults are) */
    /* A received message's struct (NULL for one built in Python, which stays small): never
     * changed once moved in, freed with the object. */
    mstar_msg *m;
} msg_obj;

#define BIT(i) (1u << (i))
#define ARRAYS (BIT(MSTARPY_MSG_NFIELDS) - BIT(MSTARPY_MSG_EDGES))

static const char *const field_names[MSTARPY_MSG_NFIELDS] = {
    "type",       "sender",
    "request_id", "graph_walk",
    "text",       "remove_source",
    "force",      "is_first_tp_rank",
    "round",      "rank",
    "world_size", "edges",
    "counts",     "uuids",
    "names",      "rids",
    "ints",       "rx",
    "tx",         "kv",
};

/* Interned names, and the dataclass's defaults (set by bind): a value, or for the fields with
 * a default factory (bit set in `factories`) the factory. default_msg is the scalar defaults
 * converted once: the base of a message without a struct. */
static PyObject *names[MSTARPY_MSG_NFIELDS];
static PyObject *defaults[MSTARPY_MSG_NFIELDS];
static uint32_t factories;
static mstar_msg default_msg;

PyObject *mstarpy_msg_name(int i)
{
    return names[i];
}

static bool exact(PyObject *obj)
{
    return mstarpy.msg_cls && (PyObject *)Py_TYPE(obj) == mstarpy.msg_cls;
}

static const mstar_msg *base_of(msg_obj *self)
{
    return self->has_struct ? self->m : &default_msg;
}

static void clear_vals(msg_obj *self)
{
    mstarpy_vals_clear(self->vals, MSTARPY_MSG_NFIELDS);
    self->same = 0;
}

/* The structs of received messages, kept for the next ones (with the GIL). A handoff receives
 * two messages, its signal and its ACK, and an mstar_msg (1.2 KiB) is past the blocks glibc
 * serves from its per-thread cache: each malloc and free of one went through the arena's bins,
 * on the round trip's path (docs/python.md, "Where a round trip goes"). */
#define SPARE_STRUCTS 4
static mstar_msg *spare_structs[SPARE_STRUCTS];
static int nspare_structs;
static bool spares_closed; /* the module is gone: structs are freed, not kept */

static mstar_msg *struct_get(void)
{
    return nspare_structs > 0 ? spare_structs[--nspare_structs] : malloc(sizeof(mstar_msg));
}

/* Keep or free a struct the caller cleared (NULL: nothing). */
static void struct_put(mstar_msg *m)
{
    if (m && !spares_closed && nspare_structs < SPARE_STRUCTS)
        spare_structs[nspare_structs++] = m;
    else
        free(m);
}

void mstarpy_msg_spares_free(void)
{
    while (nspare_structs > 0)
        free(spare_structs[--nspare_structs]);
    spares_closed = true;
}

/* Keep `v` (borrowed) as field i, as written: it is converted when the message is used. */
static void store(msg_obj *self, int i, PyObject *v)
{
    PyObject *old = self->vals[i];
    self->vals[i] = Py_NewRef(v);
    self->same &= ~BIT(i);
    Py_XDECREF(old);
}

/* Field i's value when none is kept: the struct's, else the default. A scalar built so is the
 * base's value and stays so while kept; a list or dict may be changed in place. */
static PyObject *build(msg_obj *self, int i)
{
    PyObject *v;
    if (self->has_struct)
        v = mstarpy_msg_field_to_py(self->m, i);
    else if (factories & BIT(i))
        v = PyObject_CallNoArgs(defaults[i]);
    else
        v = Py_NewRef(defaults[i]);
    if (v && !(BIT(i) & ARRAYS))
        self->same |= BIT(i);
    return v;
}

static PyObject *msg_get(PyObject *obj, void *closure)
{
    msg_obj *self = (msg_obj *)obj;
    int i = (int)(intptr_t)closure;
    if (!self->vals[i] && !(self->vals[i] = build(self, i)))
        return NULL;
    return Py_NewRef(self->vals[i]);
}

static int msg_set(PyObject *obj, PyObject *v, void *closure)
{
    int i = (int)(intptr_t)closure;
    if (!v) {
        PyErr_Format(PyExc_AttributeError, "Message.%s cannot be deleted", field_names[i]);
        return -1;
    }
    store((msg_obj *)obj, i, v);
    return 0;
}

/* Message(type="HELLO", sender="", ...): by position or keyword, the dataclass's defaults for
 * the rest (built when first read). A subclass gets every field set by attribute (its
 * properties run). Running __init__ again starts over: the struct no longer counts. */
static int msg_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    PyObject *v[MSTARPY_MSG_NFIELDS];
    if (!defaults[0]) {
        PyErr_SetString(PyExc_TypeError, "_MsgBase is built through mstar_c.Message");
        return -1;
    }
    if (mstarpy_fields_from_args(args, kw, names, MSTARPY_MSG_NFIELDS, "Message", v) < 0)
        return -1;
    msg_obj *self = (msg_obj *)obj;
    if (exact(obj)) {
        /* The struct's arrays stay allocated (a call with the GIL released may use them). */
        clear_vals(self);
        self->has_struct = false;
        for (int i = 0; i < MSTARPY_MSG_NFIELDS; i++)
            if (v[i])
                store(self, i, v[i]);
        return 0;
    }
    return mstarpy_fields_set_attrs(obj, names, MSTARPY_MSG_NFIELDS, v, defaults, factories);
}

static int msg_traverse(PyObject *obj, visitproc visit, void *arg)
{
    return mstarpy_vals_traverse(obj, ((msg_obj *)obj)->vals, MSTARPY_MSG_NFIELDS, visit, arg);
}

static int msg_clear(PyObject *obj)
{
    clear_vals((msg_obj *)obj);
    return 0;
}

static void msg_dealloc(PyObject *obj)
{
    msg_obj *self = (msg_obj *)obj;
    PyObject_GC_UnTrack(obj);
    clear_vals(self);
    if (self->m) {
        mstar_msg_clear(self->m);
        struct_put(self->m);
    }
    mstarpy_gc_free(obj);
}

/* ---- what the extension uses ------------------------------------------------------------- */

PyObject *mstarpy_msg_new(mstar_msg *m)
{
    mstar_msg *own = struct_get();
    msg_obj *self = own ? (msg_obj *)PyType_GenericAlloc((PyTypeObject *)mstarpy.msg_cls, 0)
                        : (msg_obj *)PyErr_NoMemory();
    if (!self) {
        struct_put(own);
        mstar_msg_clear(m);
        return NULL;
    }
    *own = *m; /* moved: the arrays are the object's now */
    mstar_msg_init(m, MSTAR_MSG_INVALID);
    self->m = own;
    self->has_struct = true;
    return (PyObject *)self;
}

PyObject *mstarpy_msg_has_struct(PyObject *unused, PyObject *obj)
{
    return PyBool_FromLong(exact(obj) && ((msg_obj *)obj)->has_struct);
}

PyObject *mstarpy_msg_built(PyObject *unused, PyObject *obj)
{
    if (!exact(obj)) {
        PyErr_SetString(PyExc_TypeError, "a Message is required");
        return NULL;
    }
    return mstarpy_vals_names(((msg_obj *)obj)->vals, names, MSTARPY_MSG_NFIELDS);
}

/* The fields of self to convert: those kept and not known to be the base's. */
static uint32_t changed(const msg_obj *self)
{
    uint32_t mask = 0;
    for (int i = 0; i < MSTARPY_MSG_NFIELDS; i++)
        if (self->vals[i] && !(self->same & BIT(i)))
            mask |= BIT(i);
    return mask;
}

/* Convert the fields in `conv` into *m. A value's conversion may run Python code (an __index__)
 * that writes the message and lets go of the values being converted: they are held here, and
 * what is converted is what the message held when the call began. */
static int convert(msg_obj *self, uint32_t conv, mstar_msg *m)
{
    PyObject *vals[MSTARPY_MSG_NFIELDS];
    for (int i = 0; i < MSTARPY_MSG_NFIELDS; i++)
        vals[i] = conv & BIT(i) ? Py_NewRef(self->vals[i]) : NULL;
    int r = 0;
    for (int i = 0; r == 0 && i < MSTARPY_MSG_NFIELDS; i++)
        if (vals[i])
            r = mstarpy_msg_field_from_py(m, i, vals[i]);
    mstarpy_vals_clear(vals, MSTARPY_MSG_NFIELDS);
    return r;
}

int mstarpy_msg_arg_get(PyObject *obj, mstarpy_msg_arg *a)
{
    a->m = &a->tmp;
    a->owned = true;
    a->hold = NULL;
    if (!exact(obj))
        return mstarpy_msg_from_py(obj, &a->tmp);
    msg_obj *self = (msg_obj *)obj;
    const mstar_msg *base = base_of(self);
    uint32_t conv = changed(self);
    if (!(conv & ARRAYS)) {
        /* Every array is the base's: share them (the base never changes, and hold keeps it),
         * and the base itself when no scalar was written either. */
        a->owned = false;
        a->hold = Py_NewRef(obj);
        if (!conv) {
            a->m = (mstar_msg *)base; /* callers that write to it copy it first */
            return 0;
        }
        a->tmp = *base;
    } else if (!self->has_struct) {
        a->tmp = default_msg; /* no arrays: a message of its own as it is */
    } else {
        mstar_msg_init(&a->tmp, base->type);
        for (int i = 0; i < MSTARPY_MSG_NFIELDS; i++)
            if (!(conv & BIT(i)) && mstarpy_msg_field_copy(&a->tmp, base, i) < 0)
                return -1;
    }
    if (convert(self, conv, &a->tmp) < 0)
        return -1;
    mstarpy_msg_finish(&a->tmp);
    return 0;
}

void mstarpy_msg_arg_own(mstarpy_msg_arg *a)
{
    if (a->m != &a->tmp) {
        a->tmp = *a->m;
        a->m = &a->tmp;
    }
}

void mstarpy_msg_arg_done(mstarpy_msg_arg *a)
{
    if (a->owned)
        mstar_msg_clear(&a->tmp);
    Py_CLEAR(a->hold);
}

int mstarpy_msg_struct_edges(PyObject *obj, mstar_rid *rid, mstar_edge **edges, uint32_t *n,
                             PyObject **hold)
{
    *hold = NULL;
    if (!exact(obj))
        return 0;
    msg_obj *self = (msg_obj *)obj;
    uint32_t used = BIT(MSTARPY_MSG_REQUEST_ID) | BIT(MSTARPY_MSG_EDGES);
    if (!self->has_struct || (changed(self) & used))
        return 0;
    *rid = self->m->request_id;
    *edges = self->m->edges;
    *n = self->m->nedges;
    *hold = Py_NewRef(obj);
    return 1;
}

/* ---- the type ---------------------------------------------------------------------------- */

#define FIELD(i)                                                 \
    {                                                            \
        (char *)0, msg_get, msg_set, NULL, (void *)(intptr_t)(i) \
    }
static PyGetSetDef msg_getset[MSTARPY_MSG_NFIELDS + 1] = {
    FIELD(0),  FIELD(1),  FIELD(2),
    FIELD(3),  FIELD(4),  FIELD(5),
    FIELD(6),  FIELD(7),  FIELD(8),
    FIELD(9),  FIELD(10), FIELD(11),
    FIELD(12), FIELD(13), FIELD(14),
    FIELD(15), FIELD(16), FIELD(17),
    FIELD(18), FIELD(19), { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot msg_slots[] = {
    { Py_tp_new, PyType_GenericNew },
    { Py_tp_init, msg_init },
    { Py_tp_dealloc, msg_dealloc },
    { Py_tp_traverse, msg_traverse },
    { Py_tp_clear, msg_clear },
    { Py_tp_getset, msg_getset },
    { Py_tp_doc, "The storage of mstar_c.Message (internal): a received message's library struct, "
                 "its fields built as Python values on first read." },
    { 0, NULL },
};

static PyType_Spec msg_spec = {
    "mstar_c.mstar_c._mstar._MsgBase",
    sizeof(msg_obj),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    msg_slots,
};

int mstarpy_add_msg_type(PyObject *module)
{
    if (mstarpy_fields_intern(field_names, names, msg_getset, MSTARPY_MSG_NFIELDS) < 0)
        return -1;
    PyObject *tp = PyType_FromSpec(&msg_spec);
    if (!tp)
        return -1;
    int r = PyModule_AddObjectRef(module, "_MsgBase", tp);
    Py_DECREF(tp);
    return r;
}

/* The data class over _MsgBase: its fields must be this file's, in this order (a positional
 * init goes by index); their defaults are init's, and the scalar ones make default_msg. */
int mstarpy_msg_bind(PyObject *cls)
{
    if (mstarpy_fields_bind(cls, names, MSTARPY_MSG_NFIELDS, defaults, &factories) < 0)
        return -1;
    mstar_msg_init(&default_msg, MSTAR_MSG_INVALID);
    for (int i = 0; i < MSTARPY_MSG_EDGES; i++) {
        if (factories & BIT(i)) {
            PyErr_Format(PyExc_ImportError, "Message.%s: a scalar field needs a plain default",
                         field_names[i]);
            return -1;
        }
        if (mstarpy_msg_field_from_py(&default_msg, i, defaults[i]) < 0)
            return -1;
    }
    return 0;
}
