/*
 * loan.c — mstar_c.Loan: output memory a CommunicationManager lends (mstar_comm_loan_output), so
 * that a producer computes into it in place and storing it copies nothing.
 *
 * A loan exports its memory through DLPack (torch.from_dlpack / numpy.from_dlpack write into
 * it) and is stored like a tensor (store_and_return_tensor_info takes it among the outputs).
 * Lifetimes, so that no exported tensor dangles:
 *   - while an export is alive, the manager stays open (close() waits for it, as for views);
 *   - a loan is given back (release(), `with`, garbage collection) only when no export is alive;
 *   - a loan stored while exports are alive makes them hold one reference on the stored tensor,
 *     dropped when the last goes, so the slot is not freed or reused under them.
 * Once stored the bytes are the tensor's: the producer must not write them again (the library's
 * rule), and the loan exports nothing more.
 */
#include "mstar_py.h"

#include <string.h>

typedef struct loan_obj {
    PyObject ob_base;   /* PyObject_HEAD */
    mstarpy_comm *comm; /* strong reference (a PyObject) */
    mstar_tensor t;
    mstar_loan_id id; /* the open loan; 0 once stored or given back */
    bool stored;
    Py_ssize_t exports; /* DLPack capsules (and the tensors made from them) alive */
    /* stored while exported: the tensor reference the exports hold, and its request */
    mstar_tensor_id held_uuid;
    PyObject *held_rid;
} loan_obj;

PyObject *mstarpy_loan_new(mstarpy_comm *comm, const mstar_tensor *t, mstar_loan_id id)
{
    loan_obj *self = (loan_obj *)PyType_GenericAlloc(mstarpy.loan_type, 0);
    if (!self)
        return NULL;
    Py_INCREF((PyObject *)comm);
    self->comm = comm;
    self->t = *t;
    self->id = id;
    return (PyObject *)self;
}

static bool is_loan(PyObject *obj)
{
    return mstarpy.loan_type && PyObject_TypeCheck(obj, mstarpy.loan_type);
}

int mstarpy_loan_take(PyObject *obj, mstarpy_comm *comm, mstar_tensor *t, mstar_loan_id *id)
{
    if (!is_loan(obj))
        return 0;
    loan_obj *self = (loan_obj *)obj;
    if (self->comm != comm)
        return mstarpy_raise_msg(MSTAR_EINVAL, "a loan of another communication manager"), -1;
    if (self->stored)
        return mstarpy_raise_msg(MSTAR_ESTATE, "the loan is stored already"), -1;
    if (self->id == 0)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the loan was given back"), -1;
    *t = self->t;
    *id = self->id;
    return 1;
}

int mstarpy_loan_stored(PyObject *obj, PyObject *rid, mstar_tensor_id uuid)
{
    loan_obj *self = (loan_obj *)obj;
    self->id = 0;
    self->stored = true;
    if (self->exports == 0)
        return 0;
    /* The exports move from keeping the manager open to holding the tensor. */
    if (mstarpy_comm_view_take(self->comm, rid, uuid) < 0)
        return -1;
    self->held_uuid = uuid;
    self->held_rid = Py_NewRef(rid);
    mstarpy_comm_unhold(self->comm);
    return 0;
}

static void export_done(PyObject *owner)
{
    loan_obj *self = (loan_obj *)owner;
    if (--self->exports > 0)
        return;
    if (self->held_rid) {
        mstarpy_comm_view_dropped(self->comm, self->held_rid, self->held_uuid);
        Py_CLEAR(self->held_rid);
        self->held_uuid = 0;
    } else {
        mstarpy_comm_unhold(self->comm);
    }
}

/* Whether the loan's memory may be exported or described now; raises when not. */
static int usable(loan_obj *self)
{
    if (self->stored)
        return mstarpy_raise_msg(MSTAR_ESTATE,
                                 "the loan is stored: its bytes are the tensor's now (use the "
                                 "tensors made from it before storing)"),
               -1;
    if (self->id == 0 || mstarpy_comm_closed(self->comm))
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the loan was given back"), -1;
    return 0;
}

static PyObject *loan_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    loan_obj *self = (loan_obj *)obj;
    int bool_as_uint8 = mstarpy_dlpack_args(args, nargs, kwnames, "mstar_c.Loan");
    if (bool_as_uint8 < 0 || usable(self) < 0)
        return NULL;
    PyObject *cap = mstarpy_dl_export(obj, &self->t, bool_as_uint8, export_done);
    if (cap && self->exports++ == 0)
        mstarpy_comm_hold(self->comm);
    return cap;
}

static PyObject *loan_dlpack_device(PyObject *obj, PyObject *unused)
{
    return mstarpy_dl_device(&((loan_obj *)obj)->t);
}

/* Give the loan back: 0, or -1 with an exception (it stays open). */
static int give_back(loan_obj *self)
{
    if (self->stored || self->id == 0)
        return 0;
    if (self->exports > 0)
        return mstarpy_raise_msg(MSTAR_ESTATE,
                                 "release(): %zd tensor(s) made from the loan are still alive; "
                                 "drop them first (or store the loan)",
                                 self->exports),
               -1;
    if (mstarpy_comm_loan_release(self->comm, self->id) < 0)
        return -1;
    self->id = 0;
    return 0;
}

static PyObject *loan_release(PyObject *obj, PyObject *unused)
{
    return give_back((loan_obj *)obj) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *loan_enter(PyObject *obj, PyObject *unused)
{
    return Py_NewRef(obj);
}

static PyObject *loan_exit(PyObject *obj, PyObject *args)
{
    if (give_back((loan_obj *)obj) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static void loan_dealloc(PyObject *obj)
{
    loan_obj *self = (loan_obj *)obj;
    PyTypeObject *tp = Py_TYPE(obj);
    /* No export is alive (each holds a reference on this object). A manager in use by another
     * thread cannot take the loan back now: its destroy does. An exception being raised while
     * the loan goes is kept. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (give_back(self) < 0)
        PyErr_Clear();
    Py_CLEAR(self->held_rid);
    Py_CLEAR(self->comm);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
    PyErr_Restore(et, ev, tb);
}

static PyObject *loan_get_shape(PyObject *obj, void *unused)
{
    loan_obj *self = (loan_obj *)obj;
    return mstarpy_tuple_i64(self->t.shape, self->t.ndim);
}

static PyObject *loan_get_dtype(PyObject *obj, void *unused)
{
    return PyUnicode_FromString(mstar_dtype_name(((loan_obj *)obj)->t.dtype));
}

static PyObject *loan_get_ptr(PyObject *obj, void *unused)
{
    loan_obj *self = (loan_obj *)obj;
    return PyLong_FromVoidPtr((char *)self->t.data + self->t.byte_offset);
}

static PyObject *loan_get_nbytes(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(mstar_tensor_nbytes(&((loan_obj *)obj)->t));
}

static PyObject *loan_get_stored(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((loan_obj *)obj)->stored);
}

static PyObject *loan_get_open(PyObject *obj, void *unused)
{
    loan_obj *self = (loan_obj *)obj;
    return PyBool_FromLong(self->id != 0 && !mstarpy_comm_closed(self->comm));
}

static PyObject *loan_repr(PyObject *obj)
{
    loan_obj *self = (loan_obj *)obj;
    PyObject *shape = loan_get_shape(obj, NULL);
    const char *state = self->stored ? "stored" : self->id != 0 ? "open" : "given back";
    PyObject *r = shape ? PyUnicode_FromFormat("mstar_c.Loan(shape=%R, dtype=%s, %s)", shape,
                                               mstar_dtype_name(self->t.dtype), state)
                        : NULL;
    Py_XDECREF(shape);
    return r;
}

static PyMethodDef loan_methods[] = {
    { "__dlpack__", (PyCFunction)(void (*)(void))loan_dlpack, METH_FASTCALL | METH_KEYWORDS,
      "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, copy=None, "
      "bool_as_uint8=False)\n--\n\n"
      ""
      "A DLPack capsule of the lent memory, writable: compute into it in place." },
    { "__dlpack_device__", loan_dlpack_device, METH_NOARGS,
      "__dlpack_device__($self, /)\n--\n\n"
      "(device_type, device_id) as DLPack numbers them: (1, 0) for host memory." },
    { "release", loan_release, METH_NOARGS,
      "release($self, /)\n--\n\n"
      "Give the loan back unstored (nothing once stored or given back). StateError while "
      "tensors made from it are alive." },
    { "__enter__", loan_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n" },
    { "__exit__", loan_exit, METH_VARARGS, "__exit__($self, *exc)\n--\n\n" },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef loan_getset[] = {
    { "shape", loan_get_shape, NULL, "The shape.", NULL },
    { "dtype", loan_get_dtype, NULL, "The torch dtype name.", NULL },
    { "data_ptr", loan_get_ptr, NULL, "Address of the first element.", NULL },
    { "nbytes", loan_get_nbytes, NULL, "Bytes lent.", NULL },
    { "stored", loan_get_stored, NULL, "True once stored.", NULL },
    { "open", loan_get_open, NULL, "True until stored or given back.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot loan_slots[] = {
    { Py_tp_dealloc, loan_dealloc },
    { Py_tp_methods, loan_methods },
    { Py_tp_getset, loan_getset },
    { Py_tp_repr, loan_repr },
    { Py_tp_doc, "Output memory lent by CommunicationManager.loan_output: write into it through\n"
                 "torch.from_dlpack / numpy.from_dlpack, then store it among the outputs of\n"
                 "store_and_return_tensor_info; over the arena it is the slot the consumer\n"
                 "reads, so storing and staging copy nothing." },
    { 0, NULL },
};

static PyType_Spec loan_spec = {
    "mstar_c.Loan", sizeof(loan_obj), 0, Py_TPFLAGS_DEFAULT, loan_slots,
};

int mstarpy_add_loan_type(PyObject *module)
{
    mstarpy.loan_type = (PyTypeObject *)PyType_FromSpec(&loan_spec);
    if (!mstarpy.loan_type)
        return -1;
    return PyModule_AddObjectRef(module, "Loan", (PyObject *)mstarpy.loan_type);
}
