/*
 * mesh.c — mstar_c.Mesh (the control mesh: an entity's inbox and its sends, mstar/mesh.h) and
 * mstar_c.Completion (a read's completion handle, the reference's Future).
 *
 * Waiting calls (recv with a timeout, Completion.wait) run with the GIL released. A Mesh, like
 * the library's handle, belongs to one thread; wake() may be called from any.
 */
#include "mstar_py.h"

#include <limits.h>
#include <string.h>

typedef struct mesh_obj {
    PyObject ob_base; /* PyObject_HEAD */
    mstar_mesh *mesh;
    bool busy;
    Py_ssize_t users; /* managers sending through it */
} mesh_obj;

void mstarpy_mesh_acquire(PyObject *mesh)
{
    ((mesh_obj *)mesh)->users++;
}

void mstarpy_mesh_release(PyObject *mesh)
{
    ((mesh_obj *)mesh)->users--;
}

mstar_mesh *mstarpy_mesh_handle(PyObject *obj)
{
    if (!obj || !mstarpy.mesh_type || !PyObject_TypeCheck(obj, mstarpy.mesh_type))
        return NULL;
    return ((mesh_obj *)obj)->mesh;
}

static mstar_mesh *mesh_open(mesh_obj *self)
{
    if (!self->mesh) {
        mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
        return NULL;
    }
    if (self->busy) {
        mstarpy_raise_msg(MSTAR_ESTATE, "the mesh is in a recv or spin on another thread");
        return NULL;
    }
    return self->mesh;
}

static int mesh_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    mesh_obj *self = (mesh_obj *)obj;
    static char *kwlist[] = { "entity", "transport", "ipc_dir", "tcp_host", "tcp_base_port", NULL };
    const char *entity, *transport = NULL, *ipc_dir = NULL, *tcp_host = NULL;
    int port = 0;
    if (self->mesh)
        return mstarpy_raise_msg(MSTAR_ESTATE, "the mesh is already bound"), -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$zzzi", kwlist, &entity, &transport, &ipc_dir,
                                     &tcp_host, &port))
        return -1;
    mstar_mesh_options o = { MSTAR_MESH_DEFAULT, ipc_dir, tcp_host, port };
    if (transport && strcmp(transport, "ipc") == 0)
        o.transport = MSTAR_MESH_IPC;
    else if (transport && strcmp(transport, "tcp") == 0)
        o.transport = MSTAR_MESH_TCP;
    else if (transport && strcmp(transport, "default") != 0)
        return mstarpy_raise_msg(MSTAR_EINVAL, "mesh transport \"%s\": ipc, tcp or default",
                                 transport),
               -1;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_mesh_create(entity, &o, &self->mesh);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        self->mesh = NULL;
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

static void mesh_close_now(mesh_obj *self)
{
    if (self->mesh) {
        mstar_mesh_destroy(self->mesh);
        self->mesh = NULL;
    }
}

static void mesh_dealloc(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    mesh_close_now((mesh_obj *)obj);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

static PyObject *mesh_close(PyObject *obj, PyObject *unused)
{
    mesh_obj *self = (mesh_obj *)obj;
    if (self->busy)
        return mstarpy_raise_msg(MSTAR_ESTATE, "close() during a recv or spin on another thread");
    if (self->users > 0)
        return mstarpy_raise_msg(MSTAR_ESTATE,
                                 "close(): %zd communication manager(s) still send through this "
                                 "mesh; close them first",
                                 self->users);
    mesh_close_now(self);
    Py_RETURN_NONE;
}

static PyObject *mesh_exit(PyObject *obj, PyObject *args)
{
    PyObject *r = mesh_close(obj, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *mesh_enter(PyObject *obj, PyObject *unused)
{
    return Py_NewRef(obj);
}

static PyObject *mesh_send(PyObject *obj, PyObject *args)
{
    mesh_obj *self = (mesh_obj *)obj;
    const char *peer;
    PyObject *msg_obj;
    if (!PyArg_ParseTuple(args, "sO", &peer, &msg_obj))
        return NULL;
    /* A received message forwarded as it came is sent from its library struct. */
    mstarpy_msg_arg a;
    if (mstarpy_msg_arg_get(msg_obj, &a) < 0) {
        mstarpy_msg_arg_done(&a);
        return NULL;
    }
    mstarpy_msg_arg_own(&a); /* the mesh stamps its own sender on what it sends */
    mstar_mesh *mesh = mesh_open(self);
    mstar_status st = mesh ? mstar_mesh_send(mesh, peer, a.m) : MSTAR_OK;
    mstarpy_msg_arg_done(&a);
    if (!mesh)
        return NULL;
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

static PyObject *mesh_send_raw(PyObject *obj, PyObject *args)
{
    mesh_obj *self = (mesh_obj *)obj;
    const char *peer, *data;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "sy#", &peer, &data, &len))
        return NULL;
    mstar_mesh *mesh = mesh_open(self);
    if (!mesh)
        return NULL;
    mstar_status st = mstar_mesh_send_raw(mesh, peer, data, (size_t)len);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

/* recv's one argument, positional or timeout_ms=, parsed by hand: recv runs several times per
 * handoff, and the generic keyword parser costs a good part of an empty recv. */
static int recv_timeout(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int *out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "recv() takes at most one argument (timeout_ms)");
        return -1;
    }
    if (nkw == 1) {
        PyObject *name = PyTuple_GetItem(kwnames, 0);
        if (!name || PyUnicode_CompareWithASCIIString(name, "timeout_ms") != 0) {
            PyErr_Format(PyExc_TypeError, "recv() got an unexpected keyword argument %R", name);
            return -1;
        }
    }
    if (nargs + nkw == 0)
        return 0;
    long v = PyLong_AsLong(args[0]);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "recv(): timeout_ms out of int range");
        return -1;
    }
    *out = (int)v;
    return 0;
}

static PyObject *mesh_recv(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    mesh_obj *self = (mesh_obj *)obj;
    int timeout = -1;
    if (recv_timeout(args, nargs, kwnames, &timeout) < 0)
        return NULL;
    mstar_mesh *mesh = mesh_open(self);
    if (!mesh)
        return NULL;
    mstar_msg m;
    mstar_status st;
    if (timeout == 0) { /* nothing to wait for: keep the GIL */
        st = mstar_mesh_recv(mesh, 0, &m);
    } else {
        self->busy = true;
        PyThreadState *ts_ = PyEval_SaveThread();
        st = mstar_mesh_recv(mesh, timeout, &m);
        PyEval_RestoreThread(ts_);
        self->busy = false;
    }
    if (st == MSTAR_EAGAIN)
        Py_RETURN_NONE;
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    return mstarpy_msg_new(&m); /* its fields built when first read */
}

/* mstar_mesh_spin, without the GIL: the spin is a wait, and other threads may run meanwhile. */
static PyObject *mesh_spin(PyObject *obj, PyObject *unused)
{
    mesh_obj *self = (mesh_obj *)obj;
    mstar_mesh *mesh = mesh_open(self);
    if (!mesh)
        return NULL;
    self->busy = true;
    PyThreadState *ts_ = PyEval_SaveThread();
    bool found = mstar_mesh_spin(mesh);
    PyEval_RestoreThread(ts_);
    self->busy = false;
    return PyBool_FromLong(found);
}

static PyObject *mesh_wake(PyObject *obj, PyObject *unused)
{
    mesh_obj *self = (mesh_obj *)obj;
    if (!self->mesh)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
    mstar_status st = mstar_mesh_wake(self->mesh);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

static PyObject *mesh_wake_drain(PyObject *obj, PyObject *unused)
{
    mstar_mesh *mesh = mesh_open((mesh_obj *)obj);
    return mesh ? PyLong_FromUnsignedLongLong(mstar_mesh_wake_drain(mesh)) : NULL;
}

static PyObject *mesh_get_entity(PyObject *obj, void *unused)
{
    mstar_mesh *mesh = ((mesh_obj *)obj)->mesh;
    if (!mesh)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
    return PyUnicode_FromString(mstar_mesh_entity(mesh));
}

static PyObject *mesh_get_index(PyObject *obj, void *unused)
{
    mstar_mesh *mesh = ((mesh_obj *)obj)->mesh;
    if (!mesh)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
    return PyLong_FromLong(mstar_mesh_entity_index(mesh));
}

static PyObject *mesh_get_inbox_fd(PyObject *obj, void *unused)
{
    mstar_mesh *mesh = ((mesh_obj *)obj)->mesh;
    if (!mesh)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
    return PyLong_FromLong(mstar_mesh_inbox_fd(mesh));
}

static PyObject *mesh_get_wake_fd(PyObject *obj, void *unused)
{
    mstar_mesh *mesh = ((mesh_obj *)obj)->mesh;
    if (!mesh)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the mesh is closed");
    return PyLong_FromLong(mstar_mesh_wake_fd(mesh));
}

static PyObject *mesh_get_dropped(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(mstar_mesh_dropped(((mesh_obj *)obj)->mesh));
}

static PyObject *mesh_get_closed(PyObject *obj, void *unused)
{
    return PyBool_FromLong(((mesh_obj *)obj)->mesh == NULL);
}

static PyMethodDef mesh_methods[] = {
    { "send", mesh_send, METH_VARARGS,
      "send($self, peer, msg, /)\n--\n\n"
      "encode and send a Message (connects on first use). TryAgainError when "
      "the peer's queue is full." },
    { "send_raw", mesh_send_raw, METH_VARARGS,
      "send_raw($self, peer, data, /)\n--\n\n"
      "send_raw(peer, data: bytes)" },
    { "recv", (PyCFunction)(void (*)(void))mesh_recv, METH_FASTCALL | METH_KEYWORDS,
      "recv($self, timeout_ms=-1)\n--\n\n"
      ""
      "The message keeps the library's struct: each field is built when first read." },
    { "spin", mesh_spin, METH_NOARGS,
      "spin($self, /)\n--\n\n"
      "Before a loop sleeps on inbox_fd: wait up to the mesh's spin bound (MSTAR_RING_SPIN_US, "
      "doubled by each near miss up to 16 times it) for a message in a ring, while a CPU is "
      "spare. True when one waits (take it with recv(timeout_ms=0)) or a read of the manager "
      "that sends through this mesh has landed (collect it); false: sleep." },
    { "wake", mesh_wake, METH_NOARGS,
      "wake($self, /)\n--\n\n"
      "Wake a recv (any thread)." },
    { "wake_drain", mesh_wake_drain, METH_NOARGS,
      "wake_drain($self, /)\n--\n\n"
      "Drain the wake-ups; returns how many." },
    { "close", mesh_close, METH_NOARGS,
      "close($self, /)\n--\n\n"
      "Close every socket and remove the bound ipc file." },
    { "__enter__", mesh_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n" },
    { "__exit__", mesh_exit, METH_VARARGS, "__exit__($self, *exc)\n--\n\n" },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef mesh_getset[] = {
    { "entity", mesh_get_entity, NULL, "The entity whose inbox this is.", NULL },
    { "entity_index", mesh_get_index, NULL, "The entity's index for tensor ids.", NULL },
    { "inbox_fd", mesh_get_inbox_fd, NULL, "The inbox fd (edge-triggered).", NULL },
    { "wake_fd", mesh_get_wake_fd, NULL, "The wake-up eventfd.", NULL },
    { "dropped", mesh_get_dropped, NULL, "Undecodable frames dropped so far.", NULL },
    { "closed", mesh_get_closed, NULL, "True once closed.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot mesh_slots[] = {
    { Py_tp_init, mesh_init },
    { Py_tp_new, PyType_GenericNew },
    { Py_tp_dealloc, mesh_dealloc },
    { Py_tp_methods, mesh_methods },
    { Py_tp_getset, mesh_getset },
    { Py_tp_doc, "Mesh(entity, *, transport=None, ipc_dir=None, tcp_host=None, tcp_base_port=0)\n"
                 "Bind an entity's inbox on the control mesh and send/receive Message objects.\n"
                 "transport: 'ipc', 'tcp' or None (MSTAR_ZMQ_TRANSPORT, else ipc)." },
    { 0, NULL },
};

static PyType_Spec mesh_spec = {
    "mstar_c.Mesh", sizeof(mesh_obj), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, mesh_slots,
};

int mstarpy_add_mesh_type(PyObject *module)
{
    mstarpy.mesh_type = (PyTypeObject *)PyType_FromSpec(&mesh_spec);
    if (!mstarpy.mesh_type)
        return -1;
    return PyModule_AddObjectRef(module, "Mesh", (PyObject *)mstarpy.mesh_type);
}

/* ---- Completion ----------------------------------------------------------------------------- */

typedef struct completion_obj {
    PyObject ob_base; /* PyObject_HEAD */
    mstar_completion *c;
} completion_obj;

PyObject *mstarpy_completion_new(mstar_completion *c)
{
    completion_obj *self = (completion_obj *)PyType_GenericAlloc(mstarpy.completion_type, 0);
    if (self)
        self->c = c;
    return (PyObject *)self;
}

static void completion_dealloc(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    mstar_completion_release(((completion_obj *)obj)->c);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

static PyObject *completion_done(PyObject *obj, PyObject *unused)
{
    mstar_status st = mstar_completion_poll(((completion_obj *)obj)->c);
    return PyBool_FromLong(st != MSTAR_EAGAIN);
}

static PyObject *completion_result(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "timeout", NULL };
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &timeout))
        return NULL;
    int ms = -1;
    if (timeout != Py_None) {
        double s = PyFloat_AsDouble(timeout);
        if (s == -1.0 && PyErr_Occurred())
            return NULL;
        ms = s <= 0 ? 0 : s > 2e6 ? 2000000000 : (int)(s * 1000.0 + 0.5);
    }
    mstar_completion *c = ((completion_obj *)obj)->c;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_completion_wait(c, ms);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

static PyMethodDef completion_methods[] = {
    { "done", completion_done, METH_NOARGS,
      "done($self, /)\n--\n\n"
      "True once the read finished (well or not)." },
    { "result", (PyCFunction)(void (*)(void))completion_result, METH_VARARGS | METH_KEYWORDS,
      "result($self, timeout=None)\n--\n\n"
      "wait (seconds; None: forever); raise the read's error, or "
      "TimedOutError." },
    { "wait", (PyCFunction)(void (*)(void))completion_result, METH_VARARGS | METH_KEYWORDS,
      "wait($self, timeout=None)\n--\n\n"
      "The same as result()." },
    { NULL, NULL, 0, NULL },
};

static PyType_Slot completion_slots[] = {
    { Py_tp_dealloc, completion_dealloc },
    { Py_tp_methods, completion_methods },
    { Py_tp_doc, "A read still in flight (the reference's Future): done(), result(timeout)." },
    { 0, NULL },
};

static PyType_Spec completion_spec = {
    "mstar_c.Completion", sizeof(completion_obj), 0, Py_TPFLAGS_DEFAULT, completion_slots,
};

int mstarpy_add_completion_type(PyObject *module)
{
    mstarpy.completion_type = (PyTypeObject *)PyType_FromSpec(&completion_spec);
    if (!mstarpy.completion_type)
        return -1;
    return PyModule_AddObjectRef(module, "Completion", (PyObject *)mstarpy.completion_type);
}
