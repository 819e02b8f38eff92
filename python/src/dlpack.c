/*
 * dlpack.c — tensors across the boundary through DLPack, without copies.
 *
 * In: anything with __dlpack__ (torch, NumPy, ...) is taken as the producer's DLManagedTensor;
 * the manager stores a view of its memory and runs the producer's deleter when it lets go (the
 * mstar_output release), so the producer's storage is neither copied nor freed early. Objects
 * with only the buffer protocol (bytes, bytearray, memoryview) go in as 1-D uint8.
 *
 * Out: mstar_c.Tensor, a view of a tensor the manager holds. It holds one reference on the tensor
 * (mstar_comm_increment_ref) and a strong reference on the manager object, so the memory stays
 * valid while Python holds the view, and __dlpack__ hands torch / NumPy a managed tensor whose
 * deleter drops the view. The view releases its tensor reference when it goes.
 */
#include "args.h"
#include "mstar_py.h"

#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define MSTARPY_HAVE_DLPACK_H 1
#endif
#endif

#ifndef MSTARPY_HAVE_DLPACK_H
/* The unversioned DLPack ABI (capsule name "dltensor"), written out from its specification for
 * builds without libdlpack-dev. */
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;
typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6
} DLDataTypeCode;
typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif

/* DLPack's bool code, which headers before 0.8 lack. */
#define MSTARPY_DL_BOOL 6

/* ---- dtypes ----------------------------------------------------------------------------- */

static const struct {
    mstar_dtype dtype;
    uint8_t code, bits;
} dtype_table[] = {
    { MSTAR_DTYPE_BOOL, MSTARPY_DL_BOOL, 8 },  { MSTAR_DTYPE_UINT8, kDLUInt, 8 },
    { MSTAR_DTYPE_INT8, kDLInt, 8 },           { MSTAR_DTYPE_INT16, kDLInt, 16 },
    { MSTAR_DTYPE_INT32, kDLInt, 32 },         { MSTAR_DTYPE_INT64, kDLInt, 64 },
    { MSTAR_DTYPE_FLOAT16, kDLFloat, 16 },     { MSTAR_DTYPE_BFLOAT16, kDLBfloat, 16 },
    { MSTAR_DTYPE_FLOAT32, kDLFloat, 32 },     { MSTAR_DTYPE_FLOAT64, kDLFloat, 64 },
    { MSTAR_DTYPE_COMPLEX64, kDLComplex, 64 }, { MSTAR_DTYPE_COMPLEX128, kDLComplex, 128 },
};
#define NDTYPES (sizeof(dtype_table) / sizeof(dtype_table[0]))

int mstarpy_dtype_to_dl(mstar_dtype dtype, uint8_t *code, uint8_t *bits)
{
    for (size_t i = 0; i < NDTYPES; i++) {
        if (dtype_table[i].dtype == dtype) {
            *code = dtype_table[i].code;
            *bits = dtype_table[i].bits;
            return 0;
        }
    }
    return -1;
}

int mstarpy_dtype_from_dl(uint8_t code, uint8_t bits, uint16_t lanes, mstar_dtype *out)
{
    if (lanes != 1)
        return -1;
    for (size_t i = 0; i < NDTYPES; i++) {
        if (dtype_table[i].code == code && dtype_table[i].bits == bits) {
            *out = dtype_table[i].dtype;
            return 0;
        }
    }
    return -1;
}

static int device_from_dl(DLDevice d, mstar_device *out)
{
    switch ((int)d.device_type) {
    case kDLCPU:
        *out = (mstar_device){ MSTAR_DEVICE_CPU, 0 };
        return 0;
    case kDLCUDA:
        *out = (mstar_device){ MSTAR_DEVICE_CUDA, d.device_id };
        return 0;
    case kDLCUDAHost:
        *out = (mstar_device){ MSTAR_DEVICE_CUDA_HOST, 0 };
        return 0;
    default:
        return -1;
    }
}

/* ---- tensors in ----------------------------------------------------------------------------- */

static int bool_fallback(PyObject *obj, mstar_tensor *out, mstar_release_fn *release, void **ctx);

/* The manager is done with the producer's memory: run its deleter (with the GIL: NumPy's and
 * torch's deleters drop Python references). May run on any thread. */
static void release_managed(void *ctx, void *data)
{
    DLManagedTensor *m = ctx;
    if (!m->deleter || !Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    m->deleter(m);
    PyGILState_Release(g);
}

typedef struct buffer_hold {
    Py_buffer view;
} buffer_hold;

static void release_buffer(void *ctx, void *data)
{
    buffer_hold *h = ctx;
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release(&h->view);
    PyGILState_Release(g);
    free(h);
}

static int tensor_from_buffer(PyObject *obj, mstar_tensor *out, mstar_release_fn *release,
                              void **ctx)
{
    buffer_hold *h = calloc(1, sizeof(*h));
    if (!h) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyObject_GetBuffer(obj, &h->view, PyBUF_C_CONTIGUOUS) < 0) {
        free(h);
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL,
                          "a tensor is required (an object with __dlpack__ or a contiguous "
                          "buffer), not %s",
                          "this object");
        return -1;
    }
    int64_t n = (int64_t)h->view.len;
    mstar_status st =
        mstar_tensor_init(out, h->view.buf, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 1, &n);
    if (st != MSTAR_OK) {
        PyBuffer_Release(&h->view);
        free(h);
        mstarpy_raise(st);
        return -1;
    }
    *release = release_buffer;
    *ctx = h;
    return 0;
}

static int fill_from_dl(const DLTensor *dl, mstar_tensor *out)
{
    memset(out, 0, sizeof(*out));
    if (mstarpy_dtype_from_dl(dl->dtype.code, dl->dtype.bits, dl->dtype.lanes, &out->dtype) < 0) {
        mstarpy_raise_msg(MSTAR_EINVAL,
                          "DLPack dtype (code %u, %u bits, %u lanes) has no mstar dtype",
                          dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
        return -1;
    }
    if (device_from_dl(dl->device, &out->device) < 0) {
        mstarpy_raise_msg(MSTAR_ENOTSUP,
                          "DLPack device type %d is not supported (CPU, CUDA, "
                          "CUDA host only)",
                          (int)dl->device.device_type);
        return -1;
    }
    if (dl->ndim < 0 || dl->ndim > MSTAR_MAX_NDIM) {
        mstarpy_raise_msg(MSTAR_EINVAL, "a tensor of %d dims: at most %d", (int)dl->ndim,
                          MSTAR_MAX_NDIM);
        return -1;
    }
    out->data = dl->data;
    out->byte_offset = dl->byte_offset;
    out->ndim = dl->ndim;
    for (int32_t i = 0; i < dl->ndim; i++)
        out->shape[i] = dl->shape[i];
    if (dl->strides)
        for (int32_t i = 0; i < dl->ndim; i++)
            out->strides[i] = dl->strides[i];
    else
        mstar_shape_contiguous_strides(out->ndim, out->shape, out->strides);
    mstar_status st = mstar_tensor_validate(out, "the stored tensor");
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

/* torch before 2.0 and NumPy before 1.25 refuse to export bool tensors through DLPack: take such
 * a tensor through a uint8 view of the same storage (still no copy) and store it as bool. Any
 * other failure of __dlpack__ is raised as it is. */
static int bool_fallback(PyObject *obj, mstar_tensor *out, mstar_release_fn *release, void **ctx)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *dtype = PyObject_GetAttrString(obj, "dtype");
    PyObject *name = dtype ? PyObject_Str(dtype) : NULL;
    Py_XDECREF(dtype);
    const char *s = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    bool is_torch = s && strcmp(s, "torch.bool") == 0, is_numpy = s && strcmp(s, "bool") == 0;
    bool is_bool = is_torch || is_numpy;
    Py_XDECREF(name);
    PyErr_Clear();
    if (!is_bool) {
        PyErr_Restore(et, ev, tb); /* __dlpack__'s own error */
        return -1;
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyObject *lib = PyImport_ImportModule(is_torch ? "torch" : "numpy");
    PyObject *u8 = lib ? PyObject_GetAttrString(lib, "uint8") : NULL;
    PyObject *view = u8 ? PyObject_CallMethod(obj, "view", "O", u8) : NULL;
    Py_XDECREF(lib);
    Py_XDECREF(u8);
    if (!view)
        return -1;
    int r = mstarpy_tensor_in(view, out, release, ctx);
    Py_DECREF(view);
    if (r == 0)
        out->dtype = MSTAR_DTYPE_BOOL;
    return r;
}

int mstarpy_tensor_in(PyObject *obj, mstar_tensor *out, mstar_release_fn *release, void **ctx)
{
    int taken = mstarpy_torch_tensor_in(obj, out, release, ctx);
    if (taken != 0)
        return taken < 0 ? -1 : 0;
    PyObject *fn = PyObject_GetAttrString(obj, "__dlpack__");
    if (!fn) {
        PyErr_Clear();
        return tensor_from_buffer(obj, out, release, ctx);
    }
    PyObject *cap = PyObject_CallNoArgs(fn);
    Py_DECREF(fn);
    if (!cap)
        return bool_fallback(obj, out, release, ctx);
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (!m) {
        Py_DECREF(cap);
        return -1;
    }
    if (fill_from_dl(&m->dl_tensor, out) < 0) {
        Py_DECREF(cap); /* still named "dltensor": its destructor runs the deleter */
        return -1;
    }
    /* Consumed: the capsule no longer owns the tensor, the manager does. */
    if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
        Py_DECREF(cap);
        return -1;
    }
    Py_DECREF(cap);
    *release = release_managed;
    *ctx = m;
    return 0;
}

/* ---- tensors out: mstar_c.Tensor ------------------------------------------------------------ */

typedef struct tensor_obj {
    PyObject ob_base;   /* PyObject_HEAD */
    mstarpy_comm *comm; /* strong reference (a PyObject) */
    PyObject *rid;
    mstar_tensor_id uuid;
    mstar_tensor t;
    bool released;
} tensor_obj;

PyObject *mstarpy_tensor_new(mstarpy_comm *comm, PyObject *rid, mstar_tensor_id uuid,
                             const mstar_tensor *t)
{
    tensor_obj *self = (tensor_obj *)PyType_GenericAlloc(mstarpy.tensor_type, 0);
    if (!self)
        return NULL;
    Py_INCREF((PyObject *)comm);
    self->comm = comm;
    self->rid = Py_NewRef(rid);
    self->uuid = uuid;
    self->t = *t;
    return (PyObject *)self;
}

static void tensor_release(tensor_obj *self)
{
    if (self->released)
        return;
    self->released = true;
    mstarpy_comm_view_dropped(self->comm, self->rid, self->uuid);
}

static void tensor_dealloc(PyObject *obj)
{
    tensor_obj *self = (tensor_obj *)obj;
    PyTypeObject *tp = Py_TYPE(obj);
    tensor_release(self);
    Py_CLEAR(self->rid);
    Py_CLEAR(self->comm);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

typedef struct export_ctx {
    DLManagedTensor managed;
    PyObject *owner; /* what keeps the memory valid: an mstar_c.Tensor or an mstar_c.Loan */
    void (*done)(PyObject *owner);
    int64_t shape[MSTAR_MAX_NDIM];
    int64_t strides[MSTAR_MAX_NDIM];
} export_ctx;

static void export_deleter(DLManagedTensor *m)
{
    export_ctx *x = m->manager_ctx;
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        if (x->done)
            x->done(x->owner);
        Py_XDECREF(x->owner);
        PyGILState_Release(g);
    }
    free(x);
}

static void capsule_destructor(PyObject *cap)
{
    /* Never consumed: the capsule still owns the managed tensor. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter)
            m->deleter(m);
    }
}

static DLDevice dl_device_of(const mstar_tensor *t)
{
    DLDevice d = { kDLCPU, 0 };
    if (t->device.type == MSTAR_DEVICE_CUDA)
        d = (DLDevice){ kDLCUDA, t->device.index };
    else if (t->device.type == MSTAR_DEVICE_CUDA_HOST)
        d = (DLDevice){ kDLCUDAHost, 0 };
    return d;
}

PyObject *mstarpy_dl_device(const mstar_tensor *t)
{
    DLDevice d = dl_device_of(t);
    return Py_BuildValue("(ii)", (int)d.device_type, (int)d.device_id);
}

/* The __dlpack__ keywords: stream, max_version, dl_device and copy are accepted (the memory is
 * ready before an object that exports it exists, so there is no producer work for a consumer
 * stream to wait for); copy=True is refused (the export is zero-copy); bool_as_uint8 serves
 * consumers without DLPack's bool (torch before 2.0). -1 with an exception, else the flag. */
int mstarpy_dlpack_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *who)
{
    static const char *const names[] = { "stream", "max_version",   "dl_device",
                                         "copy",   "bool_as_uint8", NULL };
    const mstarpy_params p = { "__dlpack__", names, 0, 0 };
    PyObject *a[5];
    int bool_as_uint8 = 0;
    if (!nargs && !kwnames)
        return 0;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
        (a[4] && mstarpy_arg_bool(a[4], &bool_as_uint8) < 0))
        return -1;
    if (a[3] && a[3] != Py_None && PyObject_IsTrue(a[3]) == 1) {
        mstarpy_raise_msg(MSTAR_ENOTSUP,
                          "%s.__dlpack__: copy=True is not supported (the export "
                          "is zero-copy)",
                          who);
        return -1;
    }
    return bool_as_uint8;
}

PyObject *mstarpy_dl_export(PyObject *owner, const mstar_tensor *t, int bool_as_uint8,
                            void (*done)(PyObject *owner))
{
    export_ctx *x = calloc(1, sizeof(*x));
    if (!x)
        return PyErr_NoMemory();
    DLTensor *dl = &x->managed.dl_tensor;
    /* The byte offset is folded into the pointer: older consumers ignore byte_offset. */
    dl->data = (char *)t->data + t->byte_offset;
    dl->device = dl_device_of(t);
    dl->ndim = t->ndim;
    if (mstarpy_dtype_to_dl(t->dtype, &dl->dtype.code, &dl->dtype.bits) < 0) {
        free(x);
        return mstarpy_raise_msg(MSTAR_ENOTSUP, "dtype %s has no DLPack code",
                                 mstar_dtype_name(t->dtype));
    }
    if (bool_as_uint8 && t->dtype == MSTAR_DTYPE_BOOL)
        dl->dtype.code = kDLUInt;
    dl->dtype.lanes = 1;
    memcpy(x->shape, t->shape, sizeof(x->shape));
    memcpy(x->strides, t->strides, sizeof(x->strides));
    dl->shape = x->shape;
    dl->strides = x->strides;
    dl->byte_offset = 0;
    x->managed.manager_ctx = x;
    x->managed.deleter = export_deleter;
    PyObject *cap = PyCapsule_New(&x->managed, "dltensor", capsule_destructor);
    if (!cap) {
        free(x);
        return NULL;
    }
    x->owner = Py_NewRef(owner);
    x->done = done;
    return cap;
}

static PyObject *tensor_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    tensor_obj *self = (tensor_obj *)obj;
    int bool_as_uint8 = mstarpy_dlpack_args(args, nargs, kwnames, "mstar_c.Tensor");
    if (bool_as_uint8 < 0)
        return NULL;
    if (self->released)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "tensor 0x%016llx: the view was released",
                                 (unsigned long long)self->uuid);
    return mstarpy_dl_export(obj, &self->t, bool_as_uint8, NULL);
}

static PyObject *tensor_dlpack_device(PyObject *obj, PyObject *unused)
{
    return mstarpy_dl_device(&((tensor_obj *)obj)->t);
}

static PyObject *tensor_check(PyObject *obj, PyObject *unused)
{
    tensor_obj *self = (tensor_obj *)obj;
    if (self->released)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "tensor 0x%016llx: the view was released",
                                 (unsigned long long)self->uuid);
    return mstarpy_comm_view_check(self->comm, self->uuid);
}

static PyObject *tensor_release_m(PyObject *obj, PyObject *unused)
{
    tensor_release((tensor_obj *)obj);
    Py_RETURN_NONE;
}

static PyObject *tensor_get_shape(PyObject *obj, void *unused)
{
    tensor_obj *self = (tensor_obj *)obj;
    return mstarpy_tuple_i64(self->t.shape, self->t.ndim);
}

static PyObject *tensor_get_strides(PyObject *obj, void *unused)
{
    tensor_obj *self = (tensor_obj *)obj;
    return mstarpy_tuple_i64(self->t.strides, self->t.ndim);
}

static PyObject *tensor_get_dtype(PyObject *obj, void *unused)
{
    return PyUnicode_FromString(mstar_dtype_name(((tensor_obj *)obj)->t.dtype));
}

static PyObject *tensor_get_ptr(PyObject *obj, void *unused)
{
    tensor_obj *self = (tensor_obj *)obj;
    return PyLong_FromVoidPtr((char *)self->t.data + self->t.byte_offset);
}

static PyObject *tensor_get_nbytes(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(mstar_tensor_nbytes(&((tensor_obj *)obj)->t));
}

static PyObject *tensor_get_uuid(PyObject *obj, void *unused)
{
    return PyLong_FromUnsignedLongLong(((tensor_obj *)obj)->uuid);
}

static PyObject *tensor_get_device(PyObject *obj, void *unused)
{
    tensor_obj *self = (tensor_obj *)obj;
    if (self->t.device.type == MSTAR_DEVICE_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)self->t.device.index);
    return PyUnicode_FromString("cpu");
}

static PyObject *tensor_repr(PyObject *obj)
{
    tensor_obj *self = (tensor_obj *)obj;
    PyObject *shape = tensor_get_shape(obj, NULL);
    PyObject *dev = tensor_get_device(obj, NULL);
    char id[MSTAR_ID_STRLEN];
    mstar_id_format(self->uuid, id);
    PyObject *r = shape && dev
                      ? PyUnicode_FromFormat("mstar_c.Tensor(uuid=%s, shape=%R, dtype=%s, "
                                             "device=%U)",
                                             id, shape, mstar_dtype_name(self->t.dtype), dev)
                      : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(dev);
    return r;
}

static PyMethodDef tensor_methods[] = {
    { "__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
      "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, copy=None, "
      "bool_as_uint8=False)\n--\n\n"
      ""
      "A DLPack capsule viewing the manager's memory (no copy)." },
    { "__dlpack_device__", tensor_dlpack_device, METH_NOARGS,
      "__dlpack_device__($self, /)\n--\n\n"
      "(device_type, device_id) as DLPack numbers them: (1, 0) CPU, (2, n) CUDA." },
    { "check", tensor_check, METH_NOARGS,
      "check($self, /)\n--\n\n"
      "Raise NotFoundError when the tensor is a view (start_read_tensors(..., views=True))\n"
      "whose producer has freed its slot (past MSTAR_SHM_ARENA_SLOT_TTL_S, or a forced\n"
      "cleanup): its bytes may then be another tensor's. None otherwise." },
    { "release", tensor_release_m, METH_NOARGS,
      "release($self, /)\n--\n\n"
      "Drop this view's reference on the tensor now (consumers made from it must be gone)." },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef tensor_getset[] = {
    { "shape", tensor_get_shape, NULL, "The shape (real layout).", NULL },
    { "strides", tensor_get_strides, NULL, "Strides in elements.", NULL },
    { "dtype", tensor_get_dtype, NULL, "The torch dtype name.", NULL },
    { "device", tensor_get_device, NULL, "'cpu' or 'cuda:N'.", NULL },
    { "data_ptr", tensor_get_ptr, NULL, "Address of the first element.", NULL },
    { "nbytes", tensor_get_nbytes, NULL, "Bytes of the view.", NULL },
    { "uuid", tensor_get_uuid, NULL, "The tensor id.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot tensor_slots[] = {
    { Py_tp_dealloc, tensor_dealloc },
    { Py_tp_methods, tensor_methods },
    { Py_tp_getset, tensor_getset },
    { Py_tp_repr, tensor_repr },
    { Py_tp_doc, "A view of a tensor a CommunicationManager holds (get_tensor). Hand it to\n"
                 "torch.from_dlpack or numpy.from_dlpack to read it in place. It holds one\n"
                 "reference on the tensor while it (or a consumer made from it) lives." },
    { 0, NULL },
};

static PyType_Spec tensor_spec = {
    "mstar_c.Tensor", sizeof(tensor_obj), 0, Py_TPFLAGS_DEFAULT, tensor_slots,
};

int mstarpy_add_tensor_type(PyObject *module)
{
    mstarpy.tensor_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
    if (!mstarpy.tensor_type)
        return -1;
    return PyModule_AddObjectRef(module, "Tensor", (PyObject *)mstarpy.tensor_type);
}
