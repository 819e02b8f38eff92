/*
 * runner.h — what the graph-runner files of the _mstar extension share (runner_step.c: the step
 * runner, its resources, steps and graph pools; runner_graph.c: the whole-forward runner over a
 * Python submodule; runner_piecewise.c: the piecewise runner over a Python region; runner_plan.c:
 * sizing, planning, rank groups and startup; runner_common.c: what the graph and piecewise runners
 * share). The Python layer over them, with the reference's
 * names, is mstar_c/graphs.py.
 *
 * Leases and bucket keys cross into Python as tuples: a key (graph_walk, bs, num_tokens,
 * cg_key_info), a lease (slot, graph_walk, bs, num_tokens, cg_key_info); a runner's lease_slot
 * returns graphs.py's SlotLease (slot, BucketKey), which every method taking a lease accepts.
 * Tensors go out as DLPack capsules (graphs.py turns them into torch tensors) that hold a reference
 * on the object owning the memory, and come in through __dlpack__ (mstarpy_tensor_in).
 */
#ifndef MSTAR_PY_RUNNER_H
#define MSTAR_PY_RUNNER_H

#include "mstar_py.h"

#define MSTARPY_MAX_RESOURCES 8

typedef struct mstarpy_step_runner {
    PyObject ob_base;
    mstar_backend *backend;
    mstar_stream *stream; /* the compute stream */
    mstar_step_runner *sr;
    mstar_kv_cache *kv[MSTARPY_MAX_RESOURCES];
    char *kv_keys[MSTARPY_MAX_RESOURCES];
    int nkv;
    mstar_positions *pos[MSTARPY_MAX_RESOURCES];
    char *pos_keys[MSTARPY_MAX_RESOURCES];
    int npos;
} mstarpy_step_runner;

typedef struct mstarpy_step {
    PyObject ob_base;
    mstar_step *step; /* NULL once a borrowed step's callback returned */
    bool owned;
    int64_t *ids; /* an owned step's request ids (set_context) */
    char *walk;
    char *lease_walk, *lease_key; /* the lease's strings (set_context with a lease) */
} mstarpy_step;

typedef struct mstarpy_pool {
    PyObject ob_base;
    mstar_graph_pool *pool;
    PyObject *step_runner; /* keeps the backend */
} mstarpy_pool;

extern PyTypeObject *mstarpy_step_runner_type;
extern PyTypeObject *mstarpy_step_type;
extern PyTypeObject *mstarpy_pool_type;
extern PyTypeObject *mstarpy_graph_runner_type;
extern PyTypeObject *mstarpy_piecewise_runner_type;

/* The graph runner of a _GraphRunner object, or NULL with an exception. */
mstar_graph_runner *mstarpy_graph_runner_handle(PyObject *obj);
/* Forget the replay records of graphs that are gone: after sizing, whose throwaway captures
 * each left one (a no-op for anything but an open _GraphRunner). */
void mstarpy_graph_runner_forget_stale(PyObject *obj);
/* The piecewise runner of a _PiecewiseRunner object, or NULL with an exception. */
mstar_piecewise_runner *mstarpy_piecewise_runner_handle(PyObject *obj);
/* The step runner of a _StepRunner object, or NULL with an exception. */
mstar_step_runner *mstarpy_step_runner_handle(PyObject *obj);

/* A Step object viewing the runner's `step` for the length of a callback: call
 * mstarpy_step_detach after, so a kept reference raises instead of touching freed state. */
PyObject *mstarpy_step_borrow(mstar_step *step);
void mstarpy_step_detach(PyObject *obj);
/* The step of a Step object, or NULL with an exception. */
mstar_step *mstarpy_step_handle(PyObject *obj);

/* Keys and leases: to Python as tuples; from Python into structs whose strings point into the
 * tuple's str objects (valid while the caller holds the tuple). 0 / -1. */
PyObject *mstarpy_key_to_py(const mstar_bucket_key *key);
PyObject *mstarpy_lease_to_py(const mstar_slot_lease *lease);
int mstarpy_key_from_py(PyObject *obj, mstar_bucket_key *out);
int mstarpy_lease_from_py(PyObject *obj, mstar_slot_lease *out);
/* A lease as graphs.py's SlotLease once _register_lease_types named it (else the tuple), for what
 * a runner's lease_slot returns. */
PyObject *mstarpy_slot_lease_to_py(const mstar_slot_lease *lease);
/* _register_lease_types, a module function. */
extern PyMethodDef mstarpy_lease_functions[];
/* A "dltensor" capsule viewing `t`, holding a reference on `owner` (the memory's keeper). */
PyObject *mstarpy_capsule(PyObject *owner, const mstar_tensor *t);
/* A dict name -> capsule over every entry of `map`. */
PyObject *mstarpy_map_to_py(PyObject *owner, const mstar_tensor_map *map);

/* What a _GraphRunner keeps between steps (runner_step_cache.c): the SlotLease objects it handed
 * out, each with its lease, and per replayed slot the torch tensors viewing the static outputs. */
#define MSTARPY_CACHED_LEASES  64
#define MSTARPY_CACHED_OUTPUTS 64
typedef struct mstarpy_cached_lease {
    PyObject *obj;          /* the SlotLease */
    mstar_slot_lease lease; /* its strings point into obj's */
} mstarpy_cached_lease;
typedef struct mstarpy_cached_outputs {
    const mstar_tensor_map *map; /* the slot's outputs, as run_forward gave them */
    size_t n;
    mstar_tensor *views; /* n: what each tensor views */
    PyObject **tensors;  /* n torch tensors */
    PyObject *dict;      /* name -> tensor */
} mstarpy_cached_outputs;
typedef struct mstarpy_step_cache {
    mstarpy_cached_lease leases[MSTARPY_CACHED_LEASES];
    size_t nleases;
    mstarpy_cached_outputs outs[MSTARPY_CACHED_OUTPUTS];
    size_t nouts;
} mstarpy_step_cache;
/* The SlotLease of `l`: the one made before for the same lease, else a new one, kept while there
 * is room. A new reference, or NULL with an exception. */
PyObject *mstarpy_step_cache_lease(mstarpy_step_cache *c, const mstar_slot_lease *l);
/* Whether `obj` is a SlotLease the cache handed out: then its lease into *out. */
bool mstarpy_step_cache_find_lease(const mstarpy_step_cache *c, PyObject *obj,
                                   mstar_slot_lease *out);
/* A new dict name -> torch tensor over the outputs `outs` of a replay, tensors holding `owner`
 * (the runner): the tensors made for the same outputs before while they still view them. NULL
 * with an exception. */
PyObject *mstarpy_step_cache_outputs(mstarpy_step_cache *c, PyObject *owner,
                                     const mstar_tensor_map *outs);
/* tp_traverse's part, for the runner `owner` (the capsule references the collector cannot see). */
int mstarpy_step_cache_traverse(mstarpy_step_cache *c, PyObject *owner, visitproc visit, void *arg);
/* Drop everything (tp_clear, close, a capture). */
void mstarpy_step_cache_clear(mstarpy_step_cache *c);
/* The first exception a runner's Python callback raised, kept until the method whose C call
 * failed because of it re-raises it (runner_common.c). Zeroed: none pending. */
typedef struct mstarpy_pending {
    PyObject *type, *value, *tb;
} mstarpy_pending;

/* A callback raised: keep its exception (the first), turn it into the library's error
 * "<what> raised <message>". */
mstar_status mstarpy_pending_keep(mstarpy_pending *p, const char *what);
void mstarpy_pending_drop(mstarpy_pending *p);
/* After a C call of a runner: raise its failure (the callback's own exception when one caused
 * it) or, on success, forget an exception the runner absorbed. NULL / None. */
PyObject *mstarpy_pending_finish(mstarpy_pending *p, mstar_status st);
/* The pending exception's value (None if none), no longer pending. */
PyObject *mstarpy_pending_take(mstarpy_pending *p);
/* Keep the replay record `rec` in `records` under `key` (a new reference, taken; NULL: fail
 * with the exception set) and launch on `stream` a host call of it at every replay; an exception
 * it raises there is kept in `pending` as "<what> raised". 0 / -1. */
int mstarpy_replay_keep(PyObject *records, PyObject *key, PyObject *rec, mstar_stream *stream,
                        mstarpy_pending *pending, const char *what);
/* A replay on CUDA in order with torch: the compute stream first waits for what torch's current
 * stream has queued (staging reads the inputs torch wrote), and torch's stream then waits for the
 * replay (torch reads the outputs). Events, recorded and waited on from C, so a step runs no
 * Python frame; the wrapper over torch's stream is remade only when torch's current stream
 * changes. */
typedef struct mstarpy_torch_order {
    mstar_stream *theirs; /* torch's current stream when last asked (mstar_stream_wrap) */
    void *native;
    mstar_event *before, *after;
    bool implicit; /* torch's stream is the legacy default stream: no event needed */
} mstarpy_torch_order;

void mstarpy_torch_order_close(mstarpy_torch_order *o);

/* What a _GraphRunner and a _PiecewiseRunner object both hold: the step runner and pool objects
 * (keeping the backend and the pool), the Python callbacks, the replay records, the pending
 * exception, whether the backend is the host's (replays re-enter Python), and on CUDA the order
 * of replays with torch's stream. */
typedef struct mstarpy_runner_refs {
    PyObject *sro, *poolo, *cb;
    PyObject *records;
    mstarpy_pending pending;
    bool host;
    mstarpy_torch_order order;
} mstarpy_runner_refs;

/* A runner constructor's common arguments, checked before the object exists: the step runner of
 * `sro` into *sr, `poolo` a graph pool, `autocast` (None: MSTAR_DTYPE_INVALID) into *dt. 0 / -1. */
int mstarpy_runner_args(PyObject *sro, PyObject *poolo, PyObject *autocast, mstar_step_runner **sr,
                        mstar_dtype *dt);
/* Take references on the arguments and make the records dict (NULL when out of memory, with the
 * exception set). */
void mstarpy_runner_refs_init(mstarpy_runner_refs *b, PyObject *sro, PyObject *poolo, PyObject *cb,
                              mstar_step_runner *sr);
int mstarpy_runner_refs_traverse(mstarpy_runner_refs *b, visitproc visit, void *arg);
/* Before a replay: on CUDA the runner's compute stream waits for torch's current stream. After
 * it: torch's current stream waits for the compute stream. Nothing on the host backend. 0 / -1. */
int mstarpy_runner_after_torch(mstarpy_runner_refs *b);
int mstarpy_runner_before_torch(mstarpy_runner_refs *b);
/* tp_clear's part: the references that can make cycles (callbacks, records). */
void mstarpy_runner_refs_clear(mstarpy_runner_refs *b);
/* The end of a runner object's dealloc, after its own state is gone: release everything in `b`
 * (the pending exception included), then free `obj` (untracked) and drop its type. */
void mstarpy_runner_free(PyObject *obj, mstarpy_runner_refs *b);

/* Bucket keys as a list of key tuples. */
PyObject *mstarpy_keys_to_py(const mstar_bucket_key *k, size_t n);
/* `planned` (a sequence of key tuples, or None: *seq and *out NULL, *n 0) into a calloc'd array
 * *out whose strings point into *seq, a snapshot list the caller keeps while it uses them. The
 * caller frees *out and releases *seq on both paths. 0 / -1. */
int mstarpy_keys_from_py(PyObject *planned, PyObject **seq, mstar_bucket_key **out, size_t *n);

/* One entry of a dict of tensors: `t` viewed from Python, kept alive until fn(ctx, NULL) (fn may
 * be NULL), which the visitor calls (or hands on) on every path. 0 / -1 with the exception set. */
typedef int (*mstarpy_tensor_visit)(void *user, const char *name, const mstar_tensor *t,
                                    mstar_release_fn fn, void *ctx);
/* Visit each entry of the dict `d` (over a snapshot of its items) until a visit fails; TypeError
 * (msg) when `d` is no dict. 0 / -1. */
int mstarpy_dict_tensors(PyObject *d, const char *msg, mstarpy_tensor_visit visit, void *user);

/* Any sequence as a new list (a snapshot), or NULL with TypeError(msg). */
PyObject *mstarpy_seq_list(PyObject *obj, const char *msg);

int mstarpy_add_runner_step_types(PyObject *module);
int mstarpy_add_runner_graph_types(PyObject *module);
int mstarpy_add_runner_piecewise_types(PyObject *module);
int mstarpy_add_runner_plan_functions(PyObject *module);

#endif
