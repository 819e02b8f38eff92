/*
 * mstar_py.h — what the files of the _mstar extension share: the limited-API setup, the module's
 * state (the exception classes and data classes it builds Python objects from), the converters
 * between the library's structs and those Python objects, and the object types.
 *
 * The extension is written against the CPython stable ABI of 3.11 (Py_LIMITED_API), so one
 * build loads in every later Python. It uses only the public headers of libmstar.
 */
#ifndef MSTAR_PY_H
#define MSTAR_PY_H

#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "mstar/mstar.h"

/* Module state: filled once at import (module.c). */
typedef struct mstarpy_state {
    PyObject *errors;      /* dict status -> exception class (mstar_c._errors.BY_STATUS) */
    PyObject *error_base;  /* mstar_c.Error */
    PyObject *info_cls;    /* TensorPointerInfo */
    PyObject *edge_cls;    /* GraphEdge */
    PyObject *msg_cls;     /* Message */
    PyObject *tx_cls;      /* TxInfo */
    PyObject *rx_cls;      /* RxInfo */
    PyObject *stored_cls;  /* StoredOutputs */
    PyObject *failure_cls; /* ReadFailure */
    PyTypeObject *comm_type;
    PyTypeObject *tensor_type;
    PyTypeObject *mesh_type;
    PyTypeObject *completion_type;
    PyTypeObject *loan_type;
} mstarpy_state;

extern mstarpy_state mstarpy;

/* The exception class of `st` (borrowed); NULL with an exception set on failure. */
PyObject *mstarpy_error_class(mstar_status st);
/* Raise the exception class of `st` with the library's last error as text; returns NULL. */
PyObject *mstarpy_raise(mstar_status st);
/* Raise `st`'s class with a message of our own; returns NULL. */
PyObject *mstarpy_raise_msg(mstar_status st, const char *fmt, ...);

/* ---- converters (convert.c). Each returns 0 / a new reference, or -1 / NULL with an
 * exception set. The *_from_py functions take what Python callers pass: an object with the
 * data class's attributes. */
int mstarpy_rid_from_py(PyObject *obj, mstar_rid *out);
PyObject *mstarpy_rid_to_py(const mstar_rid *rid);
int mstarpy_name_from_py(PyObject *obj, char *buf, size_t size, bool none_ok, const char *what);
int mstarpy_u64_from_py(PyObject *obj, uint64_t *out, const char *what);
int mstarpy_i64_from_py(PyObject *obj, int64_t *out, const char *what);
/* A sequence of ints (at most MSTAR_MAX_NDIM) into dims[0..*ndim). */
int mstarpy_dims_from_py(PyObject *seq, int64_t *dims, int32_t *ndim, const char *what);
/* A dtype name ("float32") or a torch.dtype. */
int mstarpy_dtype_from_py(PyObject *obj, mstar_dtype *out, const char *what);

/* The arguments of a data class's __init__ (fields names[0..n) by position or keyword) into
 * v[0..n) as borrowed references, NULL where not given; -1 with TypeError as Python's own. */
int mstarpy_fields_from_args(PyObject *args, PyObject *kw, PyObject *const *names, int n,
                             const char *who, PyObject **v);

/* A tuple of n ints (a shape, strides). */
PyObject *mstarpy_tuple_i64(const int64_t *v, int32_t n);

/* Descriptors: a TensorPointerInfo made by the extension holds the struct (info.c); one of
 * another class, or whose fields were written in Python, is read by attribute. */
int mstarpy_info_from_py(PyObject *obj, mstar_tensor_info *out);
PyObject *mstarpy_info_to_py(const mstar_tensor_info *info);
/* Write every field of `info` onto an existing descriptor object (stamping after staging). */
int mstarpy_info_update_py(PyObject *obj, const mstar_tensor_info *info);
/* Field i (MSTARPY_INFO_*) of `info` as the Python value the data class holds. */
PyObject *mstarpy_info_field_to_py(const mstar_tensor_info *info, int i);

/* Edges built here own a malloc'd tensor_info array: release with mstarpy_edges_free. A
 * GraphEdge (exactly that class) is read from its storage (edge.c), anything else by attribute;
 * edge_to_py is a new GraphEdge. */
int mstarpy_edge_from_py(PyObject *obj, mstar_edge *out);
PyObject *mstarpy_edge_to_py(const mstar_edge *edge);
/* Field i (MSTARPY_EDGE_*) of an edge: from a Python value into *e (checked; the descriptors
 * go into e's tensor_info, which the caller left empty), or as a new Python value (the
 * descriptors as a new list of TensorPointerInfo). */
int mstarpy_edge_field_from_py(mstar_edge *e, int i, PyObject *v);
PyObject *mstarpy_edge_field_to_py(const mstar_edge *e, int i);
/* A sequence of edges: *out (malloc'd) and *n. */
int mstarpy_edges_from_py(PyObject *seq, mstar_edge **out, uint32_t *n);
void mstarpy_edges_free(mstar_edge *edges, uint32_t n);
/* Copy the descriptors of `edges` back onto the Python edges they came from. */
int mstarpy_edges_update_py(PyObject *seq, const mstar_edge *edges, uint32_t n);

/* Messages, by attribute (any object with Message's attributes): msg_from_py fills a message the
 * caller mstar_msg_clear's (also on error). msg_to_py is a new Message holding a copy of *msg. */
int mstarpy_msg_from_py(PyObject *obj, mstar_msg *out);
PyObject *mstarpy_msg_to_py(const mstar_msg *msg);
/* Field i (MSTARPY_MSG_*) of a message: from a Python value into *m (an array field appends to
 * m's, which the caller left empty), to a new Python value, copied from src into dst (arrays
 * deep). INPUT_SIGNALS's empty text becomes "default" in msg_finish, once a message is whole. */
int mstarpy_msg_field_from_py(mstar_msg *m, int i, PyObject *v);
PyObject *mstarpy_msg_field_to_py(const mstar_msg *m, int i);
int mstarpy_msg_field_copy(mstar_msg *dst, const mstar_msg *src, int i);
void mstarpy_msg_finish(mstar_msg *m);

PyObject *mstarpy_tx_to_py(const mstar_tx_info *tx, uint32_t n);
PyObject *mstarpy_rx_to_py(const mstar_rx_info *rx, uint32_t n);

/* ---- descriptor objects (info.c) -------------------------------------------------------- */

/* TensorPointerInfo's fields, in the data class's order. */
enum {
    MSTARPY_INFO_DIMS,
    MSTARPY_INFO_DTYPE,
    MSTARPY_INFO_STRIDE,
    MSTARPY_INFO_NBYTES,
    MSTARPY_INFO_ADDRESS,
    MSTARPY_INFO_UUID,
    MSTARPY_INFO_SESSION,
    MSTARPY_INFO_ENTITY,
    MSTARPY_INFO_OFFSET,
    MSTARPY_INFO_TP_SIZE,
    MSTARPY_INFO_TP_RANK,
    MSTARPY_INFO_SHM_SEGMENT,
    MSTARPY_INFO_SHM_OFFSET,
    MSTARPY_INFO_NODE,
    MSTARPY_INFO_WALK,
    MSTARPY_INFO_REMOTE_KEY,
    MSTARPY_INFO_NFIELDS
};
extern const char *const mstarpy_info_names[MSTARPY_INFO_NFIELDS];

/* What a data class over a C base shares (TensorPointerInfo, GraphEdge, Message): one Python value
 * per field in vals[0..n), NULL where absent. Clear and visit them (tp_clear, tp_traverse; the type
 * is visited too), free the object at the end of its dealloc (tp_free, then the type's
 * reference), name the getset entries and intern the names. fields_bind checks that the data
 * class `cls` has exactly the fields names[0..n) in that order and takes their defaults (new
 * references); a field with a default factory has the factory as its default and its bit set in
 * *factories, or is refused when factories is NULL. */
void mstarpy_vals_clear(PyObject **vals, int n);
int mstarpy_vals_traverse(PyObject *obj, PyObject **vals, int n, visitproc visit, void *arg);
void mstarpy_gc_free(PyObject *obj);
int mstarpy_fields_intern(const char *const *src, PyObject **names, PyGetSetDef *getset, int n);
int mstarpy_fields_bind(PyObject *cls, PyObject *const *names, int n, PyObject **defaults,
                        uint32_t *factories);
/* A subclass's __init__: every field names[i] set by attribute (so its properties run) to v[i],
 * or where NULL to defaults[i] (called, for bit i of factories). 0 / -1. */
int mstarpy_fields_set_attrs(PyObject *obj, PyObject *const *names, int n, PyObject **v,
                             PyObject *const *defaults, uint32_t factories);
/* A new list of names[i] for each vals[i] held (the tests' view of what was built). */
PyObject *mstarpy_vals_names(PyObject *const *vals, PyObject *const *names, int n);

int mstarpy_add_info_type(PyObject *module);
/* Check the data class `cls` (TensorPointerInfo) against _InfoBase and take its defaults. */
int mstarpy_info_bind(PyObject *cls);
/* Whether obj is exactly TensorPointerInfo (a subclass is read and written by attribute). */
bool mstarpy_info_exact(PyObject *obj);
/* A new TensorPointerInfo holding a copy of *info; no Python value is built until read. */
PyObject *mstarpy_info_new(const mstar_tensor_info *info);
/* An exact descriptor's struct, when current: true with *out a copy of it; else false. */
bool mstarpy_info_get_struct(PyObject *obj, mstar_tensor_info *out);
/* An exact descriptor's fields become *info (the values it built are dropped). */
void mstarpy_info_set_struct(PyObject *obj, const mstar_tensor_info *info);
/* The write count of an exact descriptor (0 for others), read before converting it by
 * attribute; mstarpy_info_cache then keeps the result as its struct when nothing was written
 * since and every value is immutable, so the next use copies the struct. */
uint64_t mstarpy_info_version(PyObject *obj);
void mstarpy_info_cache(PyObject *obj, const mstar_tensor_info *info, uint64_t version);

/* ---- edge objects (edge.c) ---------------------------------------------------------------- */

/* GraphEdge's fields, in the data class's order. */
enum {
    MSTARPY_EDGE_NEXT_NODE,
    MSTARPY_EDGE_NAME,
    MSTARPY_EDGE_TENSOR_INFO,
    MSTARPY_EDGE_PERSIST,
    MSTARPY_EDGE_IS_STREAMING,
    MSTARPY_EDGE_PERSIST_FOR_LOOP,
    MSTARPY_EDGE_TOTAL_FANIN,
    MSTARPY_EDGE_SHARD_DIM,
    MSTARPY_EDGE_NFIELDS
};
/* Field i's name as an interned str (borrowed; set once the type is added). */
PyObject *mstarpy_edge_name(int i);

int mstarpy_add_edge_type(PyObject *module);
/* Check the data class `cls` (GraphEdge) against _EdgeBase and take its defaults. */
int mstarpy_edge_bind(PyObject *cls);
/* Whether obj is exactly GraphEdge (a subclass is read by attribute). */
bool mstarpy_edge_exact(PyObject *obj);
/* A new GraphEdge with the scalars of *edge and a new list of its descriptors. */
PyObject *mstarpy_edge_new(const mstar_edge *edge);
/* An exact GraphEdge into *out (mstar_edge_init'ed by the caller, who frees its descriptors
 * with mstarpy_edges_free, also on error): the scalars from its storage, the values written
 * that could not be converted then and the tensor_info list checked now. 0 / -1. */
int mstarpy_edge_get(PyObject *obj, mstar_edge *out);
/* _mstar._edge_built(edge) (tests): the names of the fields edge holds as Python values. */
PyObject *mstarpy_edge_built(PyObject *unused, PyObject *obj);

/* ---- message objects (message.c) --------------------------------------------------------- */

/* Message's fields, in the data class's order: the scalars first, then the arrays. */
enum {
    MSTARPY_MSG_TYPE,
    MSTARPY_MSG_SENDER,
    MSTARPY_MSG_REQUEST_ID,
    MSTARPY_MSG_GRAPH_WALK,
    MSTARPY_MSG_TEXT,
    MSTARPY_MSG_REMOVE_SOURCE,
    MSTARPY_MSG_FORCE,
    MSTARPY_MSG_FIRST_TP_RANK,
    MSTARPY_MSG_ROUND,
    MSTARPY_MSG_RANK,
    MSTARPY_MSG_WORLD_SIZE,
    MSTARPY_MSG_EDGES, /* the first array field */
    MSTARPY_MSG_COUNTS,
    MSTARPY_MSG_UUIDS,
    MSTARPY_MSG_NAMES,
    MSTARPY_MSG_RIDS,
    MSTARPY_MSG_INTS,
    MSTARPY_MSG_RX,
    MSTARPY_MSG_TX,
    MSTARPY_MSG_KV,
    MSTARPY_MSG_NFIELDS
};
/* Field i's name as an interned str (borrowed; set once the type is added). */
PyObject *mstarpy_msg_name(int i);

int mstarpy_add_msg_type(PyObject *module);
/* Check the data class `cls` (Message) against _MsgBase and take its defaults. */
int mstarpy_msg_bind(PyObject *cls);
/* A new Message that takes over *msg (left empty, also on failure); no field is built as a
 * Python value until read. */
PyObject *mstarpy_msg_new(mstar_msg *msg);
/* Free the received messages' spare structs (the module is unloading). */
void mstarpy_msg_spares_free(void);
/* _mstar._message_has_struct(msg) (tests): whether msg keeps a library struct. */
PyObject *mstarpy_msg_has_struct(PyObject *unused, PyObject *obj);
/* _mstar._message_built(msg) (tests): the names of the fields msg holds as Python values. */
PyObject *mstarpy_msg_built(PyObject *unused, PyObject *obj);

/* A message argument as the library's struct. For a Message (exactly that class) only the fields
 * it holds as Python values are converted; the others come from its struct (a received
 * message's) or are the defaults; for anything else every field is read by attribute. Call
 * mstarpy_msg_arg_done after, also after a failure (-1 with an exception). *m may be the
 * object's own struct, to be read only: mstarpy_msg_arg_own first makes it a copy the caller
 * may write to (its arrays still shared, and to be left alone). */
typedef struct mstarpy_msg_arg {
    mstar_msg tmp;
    mstar_msg *m;
    bool owned;     /* tmp is to be cleared (false: its arrays, if any, are the struct's) */
    PyObject *hold; /* keeps the object whose struct *m or tmp's arrays are */
} mstarpy_msg_arg;
int mstarpy_msg_arg_get(PyObject *obj, mstarpy_msg_arg *a);
void mstarpy_msg_arg_own(mstarpy_msg_arg *a);
void mstarpy_msg_arg_done(mstarpy_msg_arg *a);
/* A received message's request id and edges, when both are still its struct's (neither read
 * into a list nor written): 1 with them valid while *hold (a new reference) is held; else 0. */
int mstarpy_msg_struct_edges(PyObject *obj, mstar_rid *rid, mstar_edge **edges, uint32_t *n,
                             PyObject **hold);

/* ---- tensors in (dlpack.c) ------------------------------------------------------------------ */

/* Take a tensor from anything with __dlpack__ (or the buffer protocol, as 1-D uint8 bytes):
 * *out views the producer's memory, *release / *release_ctx hand it over (the DLPack deleter
 * runs when the manager lets go). On failure nothing is held. */
int mstarpy_tensor_in(PyObject *obj, mstar_tensor *out, mstar_release_fn *release,
                      void **release_ctx);

/* ---- torch (torch.c): found in sys.modules, never imported by the package ------------------- */

/* A plain torch tensor (exactly torch.Tensor, no grad, neither conjugate nor negative bit,
 * strided, a known dtype, on the CPU or a CUDA device) into `out`, its storage held until the
 * manager runs `release`: 1. Anything else: 0, nothing held (the caller takes it through
 * __dlpack__). -1 with an exception for a tensor the library refuses. */
int mstarpy_torch_tensor_in(PyObject *obj, mstar_tensor *out, mstar_release_fn *release,
                            void **ctx);

/* A torch tensor over a "dltensor" capsule (torch._C._from_dlpack: no Python frame; an older torch
 * goes through torch.utils.dlpack). NULL with an exception. */
PyObject *mstarpy_torch_from_capsule(PyObject *cap);
/* torch's current CUDA stream on `device_index` (NULL: the legacy default stream). 0 / -1. */
int mstarpy_torch_current_stream(int device_index, void **out);

/* ---- tensors out (dlpack.c): shared by mstar_c.Tensor and mstar_c.Loan ---------------------- */

/* __dlpack__'s keywords (a fastcall's) checked (`who` names the class in errors): bool_as_uint8
 * (0 or 1), or -1 with an exception. */
int mstarpy_dlpack_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                        const char *who);
/* A "dltensor" capsule viewing `t`; it holds a reference on `owner`, and its deleter calls
 * done(owner) (when not NULL) with the GIL before letting go of it. */
PyObject *mstarpy_dl_export(PyObject *owner, const mstar_tensor *t, int bool_as_uint8,
                            void (*done)(PyObject *owner));
/* __dlpack_device__'s (device_type, device_id) of `t`. */
PyObject *mstarpy_dl_device(const mstar_tensor *t);

/* ---- object types ------------------------------------------------------------------------- */

int mstarpy_add_comm_type(PyObject *module);
int mstarpy_add_tensor_type(PyObject *module);
int mstarpy_add_mesh_type(PyObject *module);
int mstarpy_add_completion_type(PyObject *module);
int mstarpy_add_loan_type(PyObject *module);
/* The graph runner's types and functions (runner_*.c, runner.h). */
int mstarpy_add_runner_types(PyObject *module);

/* A Comm object's manager handle (NULL with ClosedError when closed, TypeError otherwise). */
typedef struct mstarpy_comm mstarpy_comm;
/* A new mstar_c.Tensor viewing `t` (a held tensor of `comm`, of request `rid`); it holds one
 * reference on the tensor and on `comm` until it goes. */
PyObject *mstarpy_tensor_new(mstarpy_comm *comm, PyObject *rid, mstar_tensor_id uuid,
                             const mstar_tensor *t);
/* The view bookkeeping of the manager (comm.c): a view of `rid` came or went. */
int mstarpy_comm_view_added(mstarpy_comm *comm, PyObject *rid);
void mstarpy_comm_view_dropped(mstarpy_comm *comm, PyObject *rid, mstar_tensor_id uuid);
/* A view's mstar_comm_view_check as None or an exception (NULL). */
PyObject *mstarpy_comm_view_check(mstarpy_comm *comm, mstar_tensor_id uuid);
/* Keep the manager open (close() deferred) while something outside its views, a loan's DLPack
 * exports, points into its memory: hold / unhold. */
void mstarpy_comm_hold(mstarpy_comm *comm);
void mstarpy_comm_unhold(mstarpy_comm *comm);
/* Whether close() ran (the manager's memory, loans included, is gone or going). */
bool mstarpy_comm_closed(mstarpy_comm *comm);
/* Give a loan back: 0 (also when the manager is closed: its destroy did), or -1 with an
 * exception (in use by another call, or the library's error). */
int mstarpy_comm_loan_release(mstarpy_comm *comm, mstar_loan_id id);
/* Count a new holder of tensor `uuid` of request `rid` as a view (one tensor reference taken;
 * given back by mstarpy_comm_view_dropped). Runs inside a call of the manager. 0 / -1. */
int mstarpy_comm_view_take(mstarpy_comm *comm, PyObject *rid, mstar_tensor_id uuid);

/* ---- loans (loan.c) ---- */
/* A new mstar_c.Loan of `comm` for the lent tensor `t`; it holds a strong reference on `comm`. */
PyObject *mstarpy_loan_new(mstarpy_comm *comm, const mstar_tensor *t, mstar_loan_id id);
/* Whether obj is an mstar_c.Loan: 1 with *t and *id its tensor and loan when it is open and of
 * `comm`; 0 when it is no loan; -1 with an exception for a loan that cannot be stored here. */
int mstarpy_loan_take(PyObject *obj, mstarpy_comm *comm, mstar_tensor *t, mstar_loan_id *id);
/* The store took the loan as tensor `uuid` of request `rid`: it is closed, and DLPack exports
 * still alive keep the tensor (one reference) until the last goes. 0, or -1 with an exception
 * (the loan is stored all the same). */
int mstarpy_loan_stored(PyObject *obj, PyObject *rid, mstar_tensor_id uuid);

/* A completion handle as a Python object (takes ownership of `c`). */
PyObject *mstarpy_completion_new(mstar_completion *c);
/* The mesh handle behind a Mesh object, or NULL (no exception) for anything else. */
mstar_mesh *mstarpy_mesh_handle(PyObject *obj);
/* A manager sends through this Mesh from now on (acquire) / no more (release): close() refuses
 * while one does, so the handle cannot go from under it. */
void mstarpy_mesh_acquire(PyObject *mesh);
void mstarpy_mesh_release(PyObject *mesh);

/* dtype <-> DLPack's (code, bits); 0 / -1. */
int mstarpy_dtype_to_dl(mstar_dtype dtype, uint8_t *code, uint8_t *bits);
int mstarpy_dtype_from_dl(uint8_t code, uint8_t bits, uint16_t lanes, mstar_dtype *out);

#endif /* MSTAR_PY_H */
