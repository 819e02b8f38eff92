/*
 * comm_internal.h — what the files of mstar_c.CommunicationManager's C core share (comm.c,
 * comm_store.c, comm_refs.c, comm_send.c, comm_read.c, comm_teardown.c): the object, the busy
 * marking every call goes through, the argument converters, and each file's methods for
 * comm.c's method table.
 */
#ifndef MSTARPY_COMM_INTERNAL_H
#define MSTARPY_COMM_INTERNAL_H

#include "mstar_py.h"

struct mstarpy_comm {
    PyObject ob_base; /* PyObject_HEAD */
    mstar_comm *comm;
    mstar_backend *backend; /* owned, destroyed after the manager */
    bool uses_mesh;         /* send_obj is a Mesh this manager holds acquired */
    PyObject *send_obj;     /* the Mesh or the callable; kept alive */
    /* the manager's sender (its options' send and send_ctx), for what the package sends in the
     * manager's name (send_outputs); NULL: none */
    mstar_comm_send_fn send;
    void *send_ctx;
    PyObject *views; /* dict rid -> live view count */
    Py_ssize_t nviews;
    bool closing;
    bool busy;
    /* dereferences of views that went while busy */
    mstar_tensor_id *deferred;
    size_t ndeferred, cap_deferred;
    /* an exception raised by the Python send callback during the running call */
    PyObject *send_exc_type, *send_exc_value, *send_exc_tb;
};

typedef struct mstarpy_comm comm_obj;

/* comm.c */
int mstarpy_comm_enter(comm_obj *self);
PyObject *mstarpy_comm_fail(comm_obj *self, mstar_status st);
PyObject *mstarpy_comm_leave(comm_obj *self, PyObject *result);
int mstarpy_comm_opt_str(PyObject *obj, const char **out);
int mstarpy_comm_rid_arg(PyObject *obj, mstar_rid *rid);
int mstarpy_comm_uuid_arg(PyObject *obj, mstar_tensor_id *uuid);

/* comm_store.c */
/* The outputs one call stores: a handoff's few in the struct itself, more on the heap. An array
 * on the heap of the first eight (3 KiB), and the descriptors the store returns (2.7 KiB each),
 * are past the blocks glibc serves from its per-thread cache: their malloc and free went through
 * the arena's bins on every handoff. The inline outputs and descriptors take 12 KiB of the
 * caller's stack. Made by mstarpy_outputs_init, not copied after. */
#define MSTARPY_OUTPUTS_INLINE 4
typedef struct mstarpy_outputs {
    mstar_output *v; /* inline_v, or the heap once more are taken */
    size_t n, cap;
    mstar_output inline_v[MSTARPY_OUTPUTS_INLINE];
} mstarpy_outputs;
void mstarpy_outputs_init(mstarpy_outputs *o);
/* Free the array (what the outputs hold is mstarpy_comm_outputs_release's). */
void mstarpy_outputs_free(mstarpy_outputs *o);
/* Descriptors for n outputs: `inline_infos` (MSTARPY_OUTPUTS_INLINE of them) when they fit, else
 * a new zeroed array; NULL with MemoryError. */
mstar_tensor_info *mstarpy_infos_for(size_t n, mstar_tensor_info *inline_infos);
void mstarpy_infos_free(mstar_tensor_info *infos, const mstar_tensor_info *inline_infos);

int mstarpy_comm_outputs_take(comm_obj *self, PyObject *dict, uint32_t request,
                              mstarpy_outputs *outs, PyObject *keep, PyObject *hold);
void mstarpy_comm_outputs_release(mstarpy_outputs *outs);
int mstarpy_comm_loans_stored(PyObject *kept, PyObject *rid_obj, const mstar_tensor_info *infos);
int mstarpy_comm_store_params(PyObject *node, PyObject *walk, int tp_size, int tp_rank,
                              mstar_store_params *p);
PyObject *mstarpy_comm_loan_output(PyObject *obj, PyObject *args, PyObject *kw);
int mstarpy_comm_reference_kw(PyObject *skip_cuda_sync, PyObject *cpu_tensors);
PyObject *mstarpy_comm_register_request(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mstarpy_comm_store(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *mstarpy_comm_store_batch(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mstarpy_comm_tensor_info(PyObject *obj, PyObject *arg);

/* comm_refs.c */
PyObject *mstarpy_comm_dereference(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames);
PyObject *mstarpy_comm_dereference_batch(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mstarpy_comm_dereference_batch_uniform(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mstarpy_comm_increment_ref(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames);
PyObject *mstarpy_comm_increment_ref_batch(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mstarpy_comm_set_output_ref_counts(PyObject *obj, PyObject *args);
PyObject *mstarpy_comm_set_persist(PyObject *obj, PyObject *args, PyObject *kw);
int mstarpy_comm_uuids_from_py(PyObject *seq, mstar_tensor_id **out, uint32_t *n);

/* comm_send.c */
PyObject *mstarpy_comm_handle_message(PyObject *obj, PyObject *arg);
PyObject *mstarpy_comm_note_sent(PyObject *obj, PyObject *args);
PyObject *mstarpy_comm_refresh_shm_placement(PyObject *obj, PyObject *arg);
PyObject *mstarpy_comm_register_for_send(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames);
PyObject *mstarpy_comm_register_for_send_uuids(PyObject *obj, PyObject *args);

/* comm_read.c */
PyObject *mstarpy_comm_ack_unread_tensors(PyObject *obj, PyObject *args);
PyObject *mstarpy_comm_get_ready_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames);
PyObject *mstarpy_comm_get_tensor(PyObject *obj, PyObject *const *args, Py_ssize_t nargs);
PyObject *mstarpy_comm_has_inflight_reads(PyObject *obj, PyObject *arg);
PyObject *mstarpy_comm_start_read_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames);

/* comm_handoff.c */
PyObject *mstarpy_comm_send_outputs(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames);

/* comm_teardown.c */
PyObject *mstarpy_comm_arena_stats(PyObject *obj, PyObject *unused);
PyObject *mstarpy_comm_cleanup_request(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames);
PyObject *mstarpy_comm_event_drain(PyObject *obj, PyObject *unused);
PyObject *mstarpy_comm_force_cleanup_request(PyObject *obj, PyObject *arg);
PyObject *mstarpy_comm_get_rx_info(PyObject *obj, PyObject *arg);
PyObject *mstarpy_comm_get_tx_info(PyObject *obj, PyObject *arg);

#endif
