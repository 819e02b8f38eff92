/*
 * demo_worker.c — a worker process: its loop, the per-request protocol and the services its
 * component uses (see demo_worker.h).
 *
 * The loop: read every message in the inbox; collect the reads that landed and hand them to the
 * component; answer drains whose reads have all landed; run one component step; sleep in poll()
 * on the inbox and the manager's event fd only when there was nothing to do. At SHUTDOWN it
 * waits (a bounded time) until every tensor it produced has been acknowledged, then reports its
 * counters to the conductor and exits.
 *
 * The tensors it took in and sent out are remembered (pruned of those already freed as the list
 * grows), so that a leak found at the report is named, not only counted. The test-only faults
 * of --inject-fault are planted here too.
 */
#include "demo_worker.h"

#include "demo_link.h"

#include "core/vec.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum wstate {
    W_NONE = 0, /* nothing heard yet (or only early inputs) */
    W_OPEN,
    W_FAILED,   /* failed here (FAIL_REQUESTS sent); waiting for the conductor's drain */
    W_DRAINING, /* stopped; READS_DONE once no read of it is copying */
    W_DRAINED,  /* READS_DONE sent; waiting for the forced removal */
    W_REMOVED,
} wstate;

/* A tensor this worker took in or sent out: what names it if it is still held at the end. */
typedef struct seen_tensor {
    mstar_tensor_id uuid;
    int64_t rid;
    char signal[32]; /* the signal name, cut to fit: naming a leak is best effort */
} seen_tensor;

/* What a worker holds for requests it has not heard of yet (INPUT_SIGNALS before NEW_REQUEST):
 * any peer can send them, so the memory they take is bounded in messages and in bytes; past
 * either bound an input is acknowledged unread (its producer frees it) and counted. */
#define EARLY_MAX_MSGS  256
#define EARLY_MAX_BYTES (UINT64_C(16) << 20)

typedef struct wreq {
    wstate state;
    int32_t max_new;
    mstar__vec early; /* mstar_msg: INPUT_SIGNALS that arrived before NEW_REQUEST */
    /* An input signal whose producer offered it over the CUDA IPC route ("": none). The
     * consumer tells the api server in its RESULT_TENSORS metadata, the one message on the
     * way that carries metadata (WORKER_GRAPHS_DONE has none on the wire). */
    char cuda_ipc_signal[MSTAR_NAME_MAX + 1];
} wreq;

struct demo_worker {
    const demo_options *opts;
    const demo_config *cfg;
    int rank;
    char entity[32];
    char next[32]; /* where outputs go: the next component's worker, or the api server */
    bool last;     /* the walk's last component */
    const demo_component_ops *ops;
    void *comp;
    mstar_backend *backend;
    demo_link link;
    wreq *reqs; /* [cfg->requests], by request id */
    demo_step_stats steps;
    double busy_s;
    int64_t done, failed, removed_soft, removed_force, drained;
    int64_t draining;    /* requests in W_DRAINING */
    bool shutdown;       /* SHUTDOWN arrived: finish, then report */
    double shutdown_by;  /* ... waiting for acknowledgements until then at most */
    double report_again; /* when the report goes out (again) */
    bool bye;            /* the conductor has the report: exit */
    mstar__vec seen;     /* seen_tensor */
    size_t prune_at;     /* seen's length at which the freed ones are dropped */
    bool fault_planted;  /* the --inject-fault fault is in */
    size_t early_msgs;   /* early inputs held, all requests together */
    uint64_t early_bytes;
    int64_t early_dropped; /* early inputs refused over the bounds */
};

/* ---- naming held tensors -----------------------------------------------------------------------
 */

static bool still_held(demo_worker *w, mstar_tensor_id uuid)
{
    mstar_tensor_info info;
    return mstar_comm_tensor_info(w->link.comm, uuid, &info) == MSTAR_OK;
}

/* Remember `uuid`; when the list doubled since the last pass, forget the tensors already freed,
 * so that it stays as long as what is held (in flight) and not as the whole run. */
static void remember(demo_worker *w, mstar_tensor_id uuid, int64_t rid, const char *signal)
{
    seen_tensor s = { uuid, rid, "" };
    snprintf(s.signal, sizeof(s.signal), "%.31s", signal);
    if (mstar__vec_push(&w->seen, &s) != MSTAR_OK)
        return; /* naming a leak is best effort; the count still catches it */
    if (w->seen.len < w->prune_at)
        return;
    size_t keep = 0;
    for (size_t i = 0; i < w->seen.len; i++) {
        seen_tensor *t = mstar__vec_at(&w->seen, i);
        if (still_held(w, t->uuid))
            memmove(mstar__vec_at(&w->seen, keep++), t, sizeof(*t));
    }
    w->seen.len = keep;
    w->prune_at = keep < 32 ? 64 : 2 * keep;
}

/* The first remembered tensor still held, as entries of the report: its uuid, its request and
 * its signal (in the key: the report carries only integers). Nothing when none is held. */
static mstar_status report_held(demo_worker *w, mstar_msg *m)
{
    for (size_t i = 0; i < w->seen.len; i++) {
        const seen_tensor *t = mstar__vec_at(&w->seen, i);
        if (!still_held(w, t->uuid))
            continue;
        char key[sizeof(DEMO_HELD_SIGNAL_KEY) + sizeof(t->signal)];
        snprintf(key, sizeof(key), "%s%s", DEMO_HELD_SIGNAL_KEY, t->signal);
        mstar_status st = mstar_msg_add_kv(m, "held_uuid", (int64_t)t->uuid);
        if (st == MSTAR_OK)
            st = mstar_msg_add_kv(m, "held_request", t->rid);
        return st == MSTAR_OK ? mstar_msg_add_kv(m, key, 1) : st;
    }
    return MSTAR_OK;
}

/* ---- test-only faults (--inject-fault) ----------------------------------------------------------
 */

/* Whether to plant `fault` now: once, in the last component's worker, on request 0. */
static bool plant(demo_worker *w, demo_fault fault, int64_t rid)
{
    if (w->opts->inject_fault != fault || !w->last || rid != 0 || w->fault_planted)
        return false;
    w->fault_planted = true;
    return true;
}

/* CORRUPT_TOKEN: the result sent for request 0 has token 0 changed (still in the vocabulary,
 * so only the self-check can tell). `*t` is the caller's; `copy` gets the changed bytes. */
static mstar_status corrupt_token(demo_worker *w, int64_t rid, const char *signal, mstar_tensor *t,
                                  int32_t **copy)
{
    *copy = NULL;
    if (strcmp(signal, DEMO_SIG_TOKENS) != 0 || t->dtype != MSTAR_DTYPE_INT32 || t->ndim != 1 ||
        t->shape[0] < 1 || !plant(w, DEMO_FAULT_CORRUPT_TOKEN, rid))
        return MSTAR_OK;
    size_t n = (size_t)t->shape[0];
    if ((*copy = malloc(n * sizeof(int32_t))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "corrupt-token fault");
    memcpy(*copy, mstar_tensor_ptr(t), n * sizeof(int32_t));
    (*copy)[0] = ((*copy)[0] + 1) % w->cfg->model.vocab;
    t->data = *copy;
    t->byte_offset = 0;
    return MSTAR_OK;
}

/* ---- services for the component ------------------------------------------------------------- */

const demo_config *demo_worker_config(const demo_worker *w)
{
    return w->cfg;
}

mstar_backend *demo_worker_backend(demo_worker *w)
{
    return w->backend;
}

mstar_comm *demo_worker_comm(demo_worker *w)
{
    return w->link.comm;
}

bool demo_worker_graphs(const demo_worker *w)
{
    return w->opts->graphs;
}

int32_t demo_worker_max_new(const demo_worker *w, int64_t rid)
{
    return w->reqs[rid].max_new;
}

void demo_worker_count_step(demo_worker *w, const char *walk, const demo_step_info *info)
{
    demo_step_stats_add(&w->steps, walk, info);
    w->busy_s += info->seconds;
}

mstar_status demo_worker_check_input(const mstar_edge *edge, const char *who, const char *signal)
{
    if (strcmp(edge->name, signal) == 0 && edge->ntensors == 1)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EPROTO, "%s: input '%s' with %u tensors; expected '%s' with one",
                           who, edge->name, edge->ntensors, signal);
}

mstar_status demo_worker_emit(demo_worker *w, int64_t rid, const char *signal,
                              const mstar_tensor *t)
{
    mstar_rid r = mstar_rid_from_int(rid);
    mstar_edge edge;
    const char *next_node =
        w->last ? "emit_to_client" : demo_component_name(w->cfg->worker_component[1 - w->rank]);
    mstar_tensor out = *t;
    int32_t *corrupted = NULL;
    mstar_status st = corrupt_token(w, rid, signal, &out, &corrupted);
    if (st == MSTAR_OK)
        st = demo_link_stage_output(&w->link, &r, signal, next_node, &out, &edge);
    free(corrupted);
    if (st != MSTAR_OK)
        return st;
    for (uint32_t i = 0; i < edge.ntensors; i++)
        remember(w, edge.tensor_info[i].uuid, rid, signal);
    mstar_msg m;
    mstar_msg_init(&m, w->last ? MSTAR_MSG_RESULT_TENSORS : MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = r;
    snprintf(m.graph_walk, sizeof(m.graph_walk), "%s", DEMO_WALK);
    if (w->last)
        snprintf(m.text, sizeof(m.text), "text"); /* the modality */
    st = mstar_msg_add_edge(&m, &edge);
    if (st == MSTAR_OK && w->last && w->reqs[rid].cuda_ipc_signal[0] != '\0') {
        char key[sizeof(DEMO_KV_CUDA_IPC) + MSTAR_NAME_MAX];
        snprintf(key, sizeof(key), DEMO_KV_CUDA_IPC "%s", w->reqs[rid].cuda_ipc_signal);
        st = mstar_msg_add_kv(&m, key, 1); /* for the summary's route column */
    }
    if (st == MSTAR_OK)
        st = demo_send(w->link.mesh, w->next, &m);
    mstar_msg_clear(&m);
    mstar_edge_clear(&edge);
    return st;
}

mstar_status demo_worker_done(demo_worker *w, int64_t rid)
{
    mstar_rid r = mstar_rid_from_int(rid);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_WORKER_GRAPHS_DONE);
    m.request_id = r;
    m.is_first_tp_rank = true;
    mstar_tx_info *tx = NULL;
    mstar_rx_info *rx = NULL;
    uint32_t ntx = 0, nrx = 0;
    mstar_status st = mstar_comm_get_tx_info(w->link.comm, &r, &tx, &ntx);
    if (st == MSTAR_OK)
        st = mstar_comm_get_rx_info(w->link.comm, &r, &rx, &nrx);
    for (uint32_t i = 0; st == MSTAR_OK && i < ntx; i++)
        st = mstar_msg_add_tx(&m, &tx[i]);
    for (uint32_t i = 0; st == MSTAR_OK && i < nrx; i++)
        st = mstar_msg_add_rx(&m, &rx[i]);
    if (st == MSTAR_OK)
        st = demo_send(w->link.mesh, DEMO_CONDUCTOR, &m);
    free(tx);
    free(rx);
    mstar_msg_clear(&m);
    w->done += st == MSTAR_OK;
    return st;
}

/* Printable ASCII only, as the wire takes it. */
static void copy_reason(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < size; i++)
        dst[i] = (src[i] >= 0x20 && src[i] <= 0x7e) ? src[i] : '?';
    dst[i] = '\0';
}

void demo_worker_fail(demo_worker *w, int64_t rid, const char *reason)
{
    mstar_log(MSTAR_LOG_ERROR, "request %lld failed: %s", (long long)rid, reason);
    mstar_rid r = mstar_rid_from_int(rid);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_FAIL_REQUESTS);
    copy_reason(m.text, sizeof(m.text), reason);
    if (mstar_msg_add_rid(&m, &r) != MSTAR_OK ||
        demo_send(w->link.mesh, DEMO_CONDUCTOR, &m) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "cannot report the failure of request %lld: %s", (long long)rid,
                  mstar_last_error());
    mstar_msg_clear(&m);
    w->failed++;
    w->ops->drop(w->comp, rid);
    if (w->reqs[rid].state == W_OPEN || w->reqs[rid].state == W_NONE)
        w->reqs[rid].state = W_FAILED;
}

/* ---- the request protocol -------------------------------------------------------------------- */

/* The request a message names, or NULL (logged) when it names none of this run's. */
static wreq *req_of(demo_worker *w, const mstar_msg *m)
{
    if (m->request_id.is_str || m->request_id.num < 0 || m->request_id.num >= w->cfg->requests) {
        char buf[MSTAR_RID_STRLEN];
        mstar_log(MSTAR_LOG_WARN, "%s from %s names request '%s', not one of this run's 0..%d",
                  mstar_msg_type_name(m->type), m->from, mstar_rid_format(&m->request_id, buf),
                  w->cfg->requests - 1);
        return NULL;
    }
    return &w->reqs[m->request_id.num];
}

/* The memory an early input holds: the message, its edges and their descriptors. */
static uint64_t early_size(const mstar_msg *m)
{
    uint64_t n = sizeof(*m) + (uint64_t)m->nedges * sizeof(mstar_edge);
    for (uint32_t e = 0; e < m->nedges; e++)
        n += (uint64_t)m->edges[e].ntensors * sizeof(mstar_tensor_info);
    return n;
}

/* Forget the early inputs of `r` (they were started or are being dropped). */
static void early_forget(demo_worker *w, wreq *r)
{
    for (size_t i = 0; i < r->early.len; i++) {
        mstar_msg *m = mstar__vec_at(&r->early, i);
        w->early_msgs--;
        w->early_bytes -= early_size(m);
        mstar_msg_clear(m);
    }
    r->early.len = 0;
}

static void drop_early(demo_worker *w, wreq *r, const mstar_rid *rid)
{
    for (size_t i = 0; i < r->early.len; i++) {
        mstar_msg *m = mstar__vec_at(&r->early, i);
        mstar_comm_ack_unread_tensors(w->link.comm, rid, m->edges, m->nedges);
    }
    early_forget(w, r);
}

/* Note an input signal whose producer offered it over the CUDA IPC route. */
static void note_cuda_ipc_input(demo_worker *w, const mstar_rid *rid, const mstar_msg *m)
{
    for (uint32_t e = 0; e < m->nedges; e++)
        for (uint32_t i = 0; i < m->edges[e].ntensors; i++)
            if (m->edges[e].tensor_info[i].cuda_ipc.host_id[0] != '\0')
                snprintf(w->reqs[rid->num].cuda_ipc_signal,
                         sizeof(w->reqs[rid->num].cuda_ipc_signal), "%s", m->edges[e].name);
}

static void start_reads(demo_worker *w, const mstar_rid *rid, const mstar_msg *m)
{
    if (m->nedges == 0)
        return;
    note_cuda_ipc_input(w, rid, m);
    if (mstar_comm_start_read_tensors(w->link.comm, rid, m->edges, m->nedges, NULL) != MSTAR_OK)
        demo_worker_fail(w, rid->num, mstar_last_error());
}

static void on_new_request(demo_worker *w, wreq *r, const mstar_msg *m)
{
    if (r->state != W_NONE) {
        if (r->state == W_OPEN)
            mstar_log(MSTAR_LOG_WARN, "NEW_REQUEST %lld again; ignored",
                      (long long)m->request_id.num);
        else
            mstar_comm_ack_unread_tensors(w->link.comm, &m->request_id, m->edges, m->nedges);
        return;
    }
    r->state = W_OPEN;
    int64_t max_new = mstar_msg_get_kv(m, DEMO_KV_MAX_NEW, -1);
    if (max_new < 1 || max_new > w->cfg->output_max) {
        char why[128];
        snprintf(why, sizeof(why), "NEW_REQUEST: %s %lld is not in [1, %d]", DEMO_KV_MAX_NEW,
                 (long long)max_new, w->cfg->output_max);
        demo_worker_fail(w, m->request_id.num, why);
        return;
    }
    r->max_new = (int32_t)max_new;
    start_reads(w, &m->request_id, m);
    for (size_t i = 0; i < r->early.len; i++)
        start_reads(w, &m->request_id, mstar__vec_at(&r->early, i));
    early_forget(w, r);
}

/* Whether an early input fits the bounds; when it does not, it is counted and logged (the 1st,
 * 2nd, 4th, 8th... time: a flood must not flood the log too). */
static bool early_fits(demo_worker *w, const mstar_msg *m)
{
    if (w->early_msgs < EARLY_MAX_MSGS && early_size(m) <= EARLY_MAX_BYTES - w->early_bytes)
        return true;
    int64_t n = ++w->early_dropped;
    if ((n & (n - 1)) == 0)
        mstar_log(MSTAR_LOG_WARN,
                  "%s: INPUT_SIGNALS from '%s' for request %lld before its NEW_REQUEST dropped: "
                  "%zu early inputs (%llu bytes) held already (%lld dropped so far)",
                  w->entity, m->from, (long long)m->request_id.num, w->early_msgs,
                  (unsigned long long)w->early_bytes, (long long)n);
    return false;
}

/* Takes ownership of *m (moves it into the early list). */
static void on_input_signals(demo_worker *w, wreq *r, mstar_msg *m)
{
    switch (r->state) {
    case W_NONE:
        if (!early_fits(w, m)) {
            mstar_comm_ack_unread_tensors(w->link.comm, &m->request_id, m->edges, m->nedges);
            return;
        }
        if (mstar__vec_push(&r->early, m) == MSTAR_OK) {
            w->early_msgs++;
            w->early_bytes += early_size(m);
            mstar_msg_init(m, MSTAR_MSG_INVALID); /* moved */
            return;
        }
        demo_worker_fail(w, m->request_id.num, "out of memory buffering early inputs");
        mstar_comm_ack_unread_tensors(w->link.comm, &m->request_id, m->edges, m->nedges);
        return;
    case W_OPEN:
        start_reads(w, &m->request_id, m);
        return;
    default: /* drained or removed: the producer may already have freed these bytes */
        mstar_comm_ack_unread_tensors(w->link.comm, &m->request_id, m->edges, m->nedges);
        return;
    }
}

static void on_drain(demo_worker *w, wreq *r, const mstar_msg *m)
{
    w->ops->drop(w->comp, m->request_id.num);
    drop_early(w, r, &m->request_id);
    if (r->state == W_NONE || r->state == W_OPEN || r->state == W_FAILED) {
        r->state = W_DRAINING;
        w->draining++;
    } else if (r->state != W_DRAINING) /* drained or removed already: answer again */
        demo_send_simple(w->link.mesh, DEMO_CONDUCTOR, MSTAR_MSG_READS_DONE, &m->request_id);
}

static void on_remove(demo_worker *w, wreq *r, const mstar_msg *m)
{
    w->ops->drop(w->comp, m->request_id.num);
    drop_early(w, r, &m->request_id);
    if (r->state == W_DRAINING)
        w->draining--;
    mstar_status st = m->force ? mstar_comm_force_cleanup_request(w->link.comm, &m->request_id)
                               : mstar_comm_cleanup_request(w->link.comm, &m->request_id);
    if (st != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "REMOVE_REQUEST %lld%s: %s", (long long)m->request_id.num,
                  m->force ? " (force)" : "", mstar_last_error());
    if (m->force)
        w->removed_force++;
    else
        w->removed_soft++;
    r->state = W_REMOVED;
}

static void handle(demo_worker *w, mstar_msg *m)
{
    switch (m->type) {
    case MSTAR_MSG_TENSOR_RECEIVED:
    case MSTAR_MSG_UNPERSIST_TENSORS:
        if (mstar_comm_handle_message(w->link.comm, m) != MSTAR_OK)
            mstar_log(MSTAR_LOG_WARN, "%s from %s: %s", mstar_msg_type_name(m->type), m->from,
                      mstar_last_error());
        return;
    case MSTAR_MSG_SHUTDOWN:
        /* The first asks for the report; the second says it arrived (demo_run.h). */
        if (w->shutdown)
            w->bye = true;
        w->shutdown = true;
        w->shutdown_by = demo_now() + 3.0;
        return;
    default:
        break;
    }
    wreq *r = NULL;
    switch (m->type) {
    case MSTAR_MSG_NEW_REQUEST:
        if ((r = req_of(w, m)) != NULL)
            on_new_request(w, r, m);
        return;
    case MSTAR_MSG_INPUT_SIGNALS:
        if ((r = req_of(w, m)) != NULL)
            on_input_signals(w, r, m);
        return;
    case MSTAR_MSG_DRAIN_REQUEST:
        if ((r = req_of(w, m)) != NULL)
            on_drain(w, r, m);
        return;
    case MSTAR_MSG_REMOVE_REQUEST:
        if ((r = req_of(w, m)) != NULL)
            on_remove(w, r, m);
        return;
    default:
        mstar_log(MSTAR_LOG_WARN, "%s from %s: not a message a worker takes; ignored",
                  mstar_msg_type_name(m->type), m->from);
        return;
    }
}

/* Hand every landed read to the component (or release it, if the request stopped meanwhile). */
static void collect_ready(demo_worker *w)
{
    mstar_ready_set set;
    if (mstar_comm_get_ready_tensors(w->link.comm, &set) != MSTAR_OK) {
        mstar_log(MSTAR_LOG_ERROR, "get_ready_tensors: %s", mstar_last_error());
        return;
    }
    for (uint32_t i = 0; i < set.nfailed; i++) {
        const mstar_read_failure *f = &set.failed[i];
        char why[600];
        snprintf(why, sizeof(why), "reading %s: %s", f->edge_name, f->message);
        if (!f->rid.is_str && f->rid.num >= 0 && f->rid.num < w->cfg->requests &&
            w->reqs[f->rid.num].state == W_OPEN)
            demo_worker_fail(w, f->rid.num, why);
    }
    for (uint32_t i = 0; i < set.nrequests; i++) {
        const mstar_rid *rid = &set.rids[i];
        bool open = !rid->is_str && rid->num >= 0 && rid->num < w->cfg->requests &&
                    w->reqs[rid->num].state == W_OPEN;
        for (uint32_t e = set.edge_start[i]; e < set.edge_start[i + 1]; e++) {
            const mstar_edge *edge = &set.edges[e];
            if (open && w->ops->input(w->comp, rid->num, edge) != MSTAR_OK) {
                demo_worker_fail(w, rid->num, mstar_last_error());
                open = false;
            }
            /* The usage references: the component has what it needs (or the request is gone).
             * LEAK_TENSOR keeps request 0's first input. */
            for (uint32_t t = 0; t < edge->ntensors; t++) {
                remember(w, edge->tensor_info[t].uuid, rid->num, edge->name);
                if (t > 0 || !open || !plant(w, DEMO_FAULT_LEAK_TENSOR, rid->num))
                    mstar_comm_dereference(w->link.comm, edge->tensor_info[t].uuid, 1);
            }
        }
    }
    mstar_ready_set_clear(&set);
}

/* READS_DONE for every draining request none of whose reads is still copying (I-7). */
static void answer_drains(demo_worker *w)
{
    for (int32_t i = 0; w->draining > 0 && i < w->cfg->requests; i++) {
        if (w->reqs[i].state != W_DRAINING)
            continue;
        mstar_rid rid = mstar_rid_from_int(i);
        if (mstar_comm_has_inflight_reads(w->link.comm, &rid))
            continue;
        if (demo_send_simple(w->link.mesh, DEMO_CONDUCTOR, MSTAR_MSG_READS_DONE, &rid) != MSTAR_OK)
            mstar_log(MSTAR_LOG_ERROR, "READS_DONE %d: %s", i, mstar_last_error());
        w->reqs[i].state = W_DRAINED;
        w->drained++;
        w->draining--;
    }
}

/* ---- the report --------------------------------------------------------------------------------
 */

static mstar_status report(demo_worker *w)
{
    mstar_arena_stats arena = { 0 };
    if (mstar_comm_transport(w->link.comm) == MSTAR_TRANSPORT_ARENA &&
        mstar_comm_arena_stats(w->link.comm, &arena) != MSTAR_OK)
        return mstar_error_wrap("arena stats");
    int64_t open = 0;
    for (int32_t i = 0; i < w->cfg->requests; i++)
        open += w->reqs[i].state != W_NONE && w->reqs[i].state != W_REMOVED;
    const struct {
        const char *key;
        int64_t value;
    } counters[] = {
        { "rank", w->rank },
        { "tensors_held", (int64_t)mstar_comm_num_tensors(w->link.comm) },
        { "live_slots", (int64_t)arena.live_slots },
        { "spill_files", (int64_t)arena.spill_files },
        { "open_requests", open },
        { "done", w->done },
        { "failed", w->failed },
        { "removed_soft", w->removed_soft },
        { "removed_force", w->removed_force },
        { "drained", w->drained },
        { "early_dropped", w->early_dropped },
        { "busy_us", (int64_t)(w->busy_s * 1e6) },
        { "graphs", w->opts->graphs },
    };
    size_t next = 0;
    bool first = true;
    mstar_status st = MSTAR_OK;
    while (st == MSTAR_OK && (first || next < w->steps.n)) {
        mstar_msg m;
        mstar_msg_init(&m, MSTAR_MSG_HELLO);
        st = mstar_msg_add_kv(&m, "report", 1);
        if (first && st == MSTAR_OK)
            st = report_held(w, &m);
        for (size_t i = 0; first && st == MSTAR_OK && i < sizeof(counters) / sizeof(counters[0]);
             i++)
            st = mstar_msg_add_kv(&m, counters[i].key, counters[i].value);
        if (st == MSTAR_OK)
            st = demo_step_stats_to_kv(&w->steps, &next, 1, &m);
        if (st == MSTAR_OK && next == w->steps.n)
            st = mstar_msg_add_kv(&m, "report_end", 1);
        if (st == MSTAR_OK)
            st = demo_send(w->link.mesh, DEMO_CONDUCTOR, &m);
        mstar_msg_clear(&m);
        first = false;
    }
    return st;
}

/* ---- setup and the loop ---------------------------------------------------------------------- */

static mstar_status setup(demo_worker *w, const char *ipc_dir, const char *shm_dir)
{
    mstar__vec_init(&w->seen, sizeof(seen_tensor));
    w->prune_at = 64;
    w->reqs = calloc((size_t)w->cfg->requests, sizeof(*w->reqs));
    if (w->reqs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "%d request slots", w->cfg->requests);
    for (int32_t i = 0; i < w->cfg->requests; i++)
        mstar__vec_init(&w->reqs[i].early, sizeof(mstar_msg));
    mstar_device dev = { w->opts->device, 0 };
    mstar_status st = mstar_backend_create(dev, &w->backend);
    if (st != MSTAR_OK)
        return mstar_error_wrap("device %s",
                                w->opts->device == MSTAR_DEVICE_CUDA ? "cuda" : "host");
    demo_link_options lo = { w->entity, ipc_dir, shm_dir, w->opts->transport, w->backend };
    if ((st = demo_link_open(&lo, &w->link)) != MSTAR_OK)
        return st;
    double t0 = demo_now();
    if ((st = w->ops->create(w, &w->comp)) != MSTAR_OK)
        return st;
    mstar_msg hello;
    mstar_msg_init(&hello, MSTAR_MSG_HELLO);
    st = mstar_msg_add_kv(&hello, "rank", w->rank);
    if (st == MSTAR_OK)
        st = mstar_msg_add_kv(&hello, "pid", (int64_t)getpid());
    if (st == MSTAR_OK)
        st = mstar_msg_add_kv(&hello, "startup_us", (int64_t)((demo_now() - t0) * 1e6));
    if (st == MSTAR_OK)
        st = demo_send(w->link.mesh, DEMO_CONDUCTOR, &hello);
    mstar_msg_clear(&hello);
    return st;
}

static void teardown(demo_worker *w)
{
    if (w->comp != NULL)
        w->ops->destroy(w->comp);
    for (int32_t i = 0; w->reqs != NULL && i < w->cfg->requests; i++) {
        mstar_rid rid = mstar_rid_from_int(i);
        drop_early(w, &w->reqs[i], &rid);
        mstar__vec_free(&w->reqs[i].early);
    }
    free(w->reqs);
    mstar__vec_free(&w->seen);
    demo_link_close(&w->link);
    mstar_backend_destroy(w->backend);
}

static void wait_for_work(demo_worker *w, int timeout_ms)
{
    struct pollfd fds[2] = {
        { mstar_mesh_inbox_fd(w->link.mesh), POLLIN, 0 },
        { mstar_comm_event_fd(w->link.comm), POLLIN, 0 },
    };
    poll(fds, fds[1].fd >= 0 ? 2 : 1, timeout_ms);
    if (fds[1].fd >= 0 && (fds[1].revents & POLLIN))
        mstar_comm_event_drain(w->link.comm);
}

static mstar_status run(demo_worker *w)
{
    for (;;) {
        mstar_msg m;
        while (mstar_mesh_recv(w->link.mesh, 0, &m) == MSTAR_OK) {
            handle(w, &m);
            mstar_msg_clear(&m);
        }
        collect_ready(w);
        answer_drains(w);
        bool worked = false;
        mstar_status st = w->ops->step(w->comp, &worked);
        if (st != MSTAR_OK)
            return st;
        if (w->bye)
            return MSTAR_OK;
        double now = demo_now();
        if (w->shutdown && !worked && now >= w->report_again &&
            (mstar_comm_num_tensors(w->link.comm) == 0 || now > w->shutdown_by)) {
            /* Sent again until acknowledged: a mesh drops what is queued when it closes. */
            if ((st = report(w)) != MSTAR_OK)
                return st;
            w->report_again = now + 1.0;
            if (now > w->shutdown_by + 10.0)
                return mstar_error_set(MSTAR_ETIMEDOUT, "the conductor did not acknowledge the "
                                                        "report");
        }
        if (!worked)
            wait_for_work(w, 50);
    }
}

int demo_worker_main(const demo_options *opts, int rank, const char *ipc_dir, const char *shm_dir)
{
    demo_worker w;
    memset(&w, 0, sizeof(w));
    w.opts = opts;
    w.cfg = &opts->cfg;
    w.rank = rank;
    demo_worker_entity(rank, w.entity);
    mstar_log_set_entity(w.entity);
    demo_component comp = w.cfg->worker_component[rank];
    w.ops = comp == DEMO_ENCODER ? &demo_encoder_component : &demo_decoder_component;
    w.last = comp == DEMO_DECODER;
    if (w.last)
        snprintf(w.next, sizeof(w.next), "%s", DEMO_API_SERVER);
    else
        demo_worker_entity(demo_config_worker_of(w.cfg, DEMO_DECODER), w.next);
    mstar_status st = setup(&w, ipc_dir, shm_dir);
    if (st == MSTAR_OK)
        st = run(&w);
    if (st != MSTAR_OK)
        fprintf(stderr, "mstar demo: %s (%s): %s\n", w.entity, demo_component_name(comp),
                mstar_last_error());
    teardown(&w);
    return st == MSTAR_OK ? 0 : 1;
}
