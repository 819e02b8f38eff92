/*
 * torch.c — torch, found in sys.modules (the package never imports it): a plain torch tensor
 * taken in by its attributes, and torch's DLPack importer and current CUDA stream for what goes
 * out (dlpack.c, the runner).
 *
 * Why a tensor is not taken through DLPack. torch's Tensor.__dlpack__ is Python code: it
 * refuses what a capsule cannot carry, then calls torch's C exporter. With torch 2.11 on the H200
 * host the method cost 2.4 us a call and the exporter 0.35, and a store of a torch tensor inside
 * a handoff loop cost 12.3 us against 4.5 for a loan. The exporter alone was then called
 * directly, but it makes a new view of the tensor for the capsule (as_strided, with its autograd
 * bookkeeping): with torch 1.13 on the CI machine that took 0.56 us of a 4 KiB handoff's store,
 * and deleting the view again more, above the library's store, stage and send together
 * (docs/python.md, "Where a round trip goes"). So a plain torch.Tensor that needs none of
 * __dlpack__'s refusals (no grad, neither the conjugate nor the negative bit, strided layout)
 * on the CPU or a CUDA device is read by its attributes (data_ptr, dtype, shape, stride), about
 * 0.2 us, and the manager holds the tensor's storage, as the capsule's view did, until it lets
 * go. Everything else takes __dlpack__, so its errors stay torch's own: other objects, a torch
 * subclass (its __torch_function__ may change what __dlpack__ does), a tensor that needs a
 * refusal, a dtype DLPack does not carry, a device other than the CPU or CUDA, a torch without a
 * storage method.
 */
#include "mstar_py.h"

#include <string.h>

/* The attributes read, interned once. */
enum {
    REQUIRES_GRAD,
    IS_CONJ,
    IS_NEG,
    LAYOUT,
    DTYPE,
    IS_CPU,
    IS_CUDA,
    GET_DEVICE,
    DATA_PTR,
    SHAPE,
    STRIDE,
    UNTYPED_STORAGE,
    STORAGE_113,
    NATTRS
};
static const char *const attr_names[NATTRS] = {
    "requires_grad", "is_conj",  "is_neg", "layout", "dtype",           "is_cpu",   "is_cuda",
    "get_device",    "data_ptr", "shape",  "stride", "untyped_storage", "_storage",
};

static struct {
    PyObject *tensor_type, *strided;    /* strong references, kept once found */
    PyObject *from_dlpack, *raw_stream; /* NULL where this torch lacks them */
    /* torch's dtype objects by mstar dtype, for those DLPack carries (dlpack.c's table), so
     * that what is stored can be read back as a torch tensor: torch.<mstar_dtype_name(d)>.
     * NULL for the others and where this torch lacks one. */
    PyObject *dtypes[MSTAR_DTYPE_COUNT_];
    PyObject *attrs[NATTRS];
    int storage; /* the method giving a tensor's storage (torch 2: untyped_storage; 1.13:
                  * _storage); NATTRS where there is none */
} torch;

static bool attrs_interned(void)
{
    for (int i = 0; i < NATTRS; i++)
        if (!torch.attrs[i] && !(torch.attrs[i] = PyUnicode_InternFromString(attr_names[i])))
            return false;
    return true;
}

static bool torch_found(void)
{
    if (torch.tensor_type)
        return true;
    PyObject *modules = PySys_GetObject("modules");                          /* borrowed */
    PyObject *mod = modules ? PyDict_GetItemString(modules, "torch") : NULL; /* borrowed */
    if (!mod || !attrs_interned()) {
        PyErr_Clear();
        return false;
    }
    PyObject *tensor = PyObject_GetAttrString(mod, "Tensor");
    PyObject *strided = PyObject_GetAttrString(mod, "strided");
    if (!tensor || !strided || !PyType_Check(tensor)) {
        PyErr_Clear(); /* a torch without them: every tensor takes __dlpack__ */
        Py_XDECREF(tensor);
        Py_XDECREF(strided);
        return false;
    }
    /* The importer and torch's current CUDA stream (the runner's replays, runner_graph.c): C
     * functions, so a replay runs no Python frame; a torch without one takes the slow way. */
    PyObject *c = PyObject_GetAttrString(mod, "_C");
    torch.from_dlpack = c ? PyObject_GetAttrString(c, "_from_dlpack") : NULL;
    PyErr_Clear();
    torch.raw_stream = c ? PyObject_GetAttrString(c, "_cuda_getCurrentRawStream") : NULL;
    PyErr_Clear();
    Py_XDECREF(c);
    for (int d = 0; d < MSTAR_DTYPE_COUNT_; d++) {
        uint8_t code, bits;
        if (!mstar_dtype_is_valid(d) || mstarpy_dtype_to_dl((mstar_dtype)d, &code, &bits) < 0)
            continue;
        torch.dtypes[d] = PyObject_GetAttrString(mod, mstar_dtype_name((mstar_dtype)d));
        PyErr_Clear();
    }
    torch.storage = NATTRS;
    for (int m = UNTYPED_STORAGE; m <= STORAGE_113 && torch.storage == NATTRS; m++)
        if (PyObject_HasAttr(tensor, torch.attrs[m]))
            torch.storage = m;
    torch.tensor_type = tensor;
    torch.strided = strided;
    return true;
}

/* `attr` of `obj` (called when `call`), a new reference; NULL with no exception on failure. */
static PyObject *attr_get(PyObject *obj, int attr, bool call)
{
    PyObject *name = torch.attrs[attr];
    PyObject *v = call ? PyObject_CallMethodObjArgs(obj, name, NULL) : PyObject_GetAttr(obj, name);
    if (!v)
        PyErr_Clear();
    return v;
}

static bool attr_is(PyObject *obj, int attr, bool call, PyObject *want)
{
    PyObject *v = attr_get(obj, attr, call);
    bool is = v == want;
    Py_XDECREF(v);
    return is;
}

/* A tuple of ints (torch.Size is one) into at most MSTAR_MAX_NDIM values; -1 otherwise. */
static int ints_get(PyObject *obj, int attr, bool call, int64_t *out)
{
    PyObject *t = attr_get(obj, attr, call);
    Py_ssize_t n = t && PyTuple_Check(t) ? PyTuple_Size(t) : -1;
    if (n > MSTAR_MAX_NDIM)
        n = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            n = -1;
        }
    }
    Py_XDECREF(t);
    return (int)n;
}

static bool dtype_get(PyObject *obj, mstar_dtype *out)
{
    PyObject *d = attr_get(obj, DTYPE, false);
    bool found = false;
    for (int i = 0; d && !found && i < MSTAR_DTYPE_COUNT_; i++)
        if (torch.dtypes[i] == d) {
            *out = (mstar_dtype)i;
            found = true;
        }
    Py_XDECREF(d);
    return found;
}

static bool device_get(PyObject *obj, mstar_device *out)
{
    if (attr_is(obj, IS_CPU, false, Py_True)) {
        *out = (mstar_device){ MSTAR_DEVICE_CPU, 0 };
        return true;
    }
    if (!attr_is(obj, IS_CUDA, false, Py_True))
        return false;
    PyObject *v = attr_get(obj, GET_DEVICE, true);
    long index = v ? PyLong_AsLong(v) : -1;
    Py_XDECREF(v);
    if (index < 0 || index > INT32_MAX) {
        PyErr_Clear();
        return false;
    }
    *out = (mstar_device){ MSTAR_DEVICE_CUDA, (int32_t)index };
    return true;
}

/* The manager is done with the tensor: drop the storage it held (with the GIL, as every
 * release: dlpack.c). May run on any thread. */
static void release_object(void *ctx, void *data)
{
    (void)data;
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF((PyObject *)ctx);
    PyGILState_Release(g);
}

int mstarpy_torch_tensor_in(PyObject *obj, mstar_tensor *out, mstar_release_fn *release, void **ctx)
{
    mstar_tensor t;
    memset(&t, 0, sizeof(t));
    if (!torch_found() || (PyObject *)Py_TYPE(obj) != torch.tensor_type ||
        torch.storage == NATTRS || !attr_is(obj, REQUIRES_GRAD, false, Py_False) ||
        !attr_is(obj, LAYOUT, false, torch.strided) || !dtype_get(obj, &t.dtype))
        return 0;
    /* torch sets the conjugate bit on complex tensors only (conj() of a real one is itself). */
    bool complex = t.dtype == MSTAR_DTYPE_COMPLEX64 || t.dtype == MSTAR_DTYPE_COMPLEX128;
    if ((complex && !attr_is(obj, IS_CONJ, true, Py_False)) ||
        !attr_is(obj, IS_NEG, true, Py_False) || !device_get(obj, &t.device))
        return 0;
    int ndim = ints_get(obj, SHAPE, false, t.shape);
    if (ndim < 0 || ints_get(obj, STRIDE, true, t.strides) != ndim)
        return 0;
    t.ndim = ndim;
    PyObject *p = attr_get(obj, DATA_PTR, true);
    t.data = p ? PyLong_AsVoidPtr(p) : NULL;
    Py_XDECREF(p);
    if (PyErr_Occurred() || !p) {
        PyErr_Clear();
        return 0;
    }
    mstar_status st = mstar_tensor_validate(&t, "the stored tensor");
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    /* The storage, not the tensor object: the object may be pointed at other memory later
     * (set_(), `.data =`) while the manager still reads this. */
    PyObject *storage = attr_get(obj, torch.storage, true);
    if (!storage)
        return 0;
    *out = t;
    *release = release_object;
    *ctx = storage;
    return 1;
}

PyObject *mstarpy_torch_from_capsule(PyObject *cap)
{
    if (torch_found() && torch.from_dlpack)
        return PyObject_CallFunctionObjArgs(torch.from_dlpack, cap, NULL);
    PyObject *utils = PyImport_ImportModule("torch.utils.dlpack");
    PyObject *t = utils ? PyObject_CallMethod(utils, "from_dlpack", "O", cap) : NULL;
    Py_XDECREF(utils);
    return t;
}

int mstarpy_torch_current_stream(int device_index, void **out)
{
    PyObject *v;
    if (torch_found() && torch.raw_stream) {
        v = PyObject_CallFunction(torch.raw_stream, "i", device_index);
    } else {
        PyObject *cuda = PyImport_ImportModule("torch.cuda");
        PyObject *st = cuda ? PyObject_CallMethod(cuda, "current_stream", "i", device_index) : NULL;
        v = st ? PyObject_GetAttrString(st, "cuda_stream") : NULL;
        Py_XDECREF(cuda);
        Py_XDECREF(st);
    }
    if (!v)
        return -1;
    *out = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}
