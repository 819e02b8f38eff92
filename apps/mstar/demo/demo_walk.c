/*
 * demo_walk.c — the driver's three roles in a request's walk (states in demo_run.h):
 *
 *   api server       submits requests, reads result_tensors (through the preprocess role's
 *                    manager, as the reference's api server hands them to its data worker),
 *                    and, as the client, aborts the requests the run chose to abort;
 *   conductor        starts the walk on both workers, completes it once both reported done
 *                    (soft REMOVE_REQUEST, UNPERSIST of the prompt), and tears aborted and failed
 *                    requests down through the drain barrier (DRAIN_REQUEST → READS_DONE from
 *                    every reader → REMOVE_REQUEST with force);
 *   preprocess       owns the prompt tensors (stored, staged and persisted before the conductor
 *                    hears of the request) and the result reads; answers drains like a worker.
 *
 * The roles talk through the mesh even though they share a process, so every message of the
 * protocol really travels, and the order the roles see is the mesh's (per sender only).
 */
#include "demo_run.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void demo_run_fail(demo_run *run, const char *fmt, ...)
{
    if (run->fatal[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->fatal, sizeof(run->fatal), fmt, ap);
    va_end(ap);
}

/* The request a message names, or NULL (logged) if it is none of this run's submitted ones. */
static dreq *req_of(demo_run *run, const mstar_msg *m)
{
    const mstar_rid *rid = &m->request_id;
    if (rid->is_str || rid->num < 0 || rid->num >= run->next_submit) {
        char buf[MSTAR_RID_STRLEN];
        mstar_log(MSTAR_LOG_WARN, "%s from %s names request '%s', not a submitted one",
                  mstar_msg_type_name(m->type), m->from, mstar_rid_format(rid, buf));
        return NULL;
    }
    return &run->reqs[rid->num];
}

static int rank_of(const demo_run *run, const char *entity)
{
    for (int r = 0; r < DEMO_WORKERS; r++) {
        if (strcmp(run->worker_name[r], entity) == 0)
            return r;
    }
    return -1;
}

static int32_t index_of(const demo_run *run, const dreq *r)
{
    return (int32_t)(r - run->reqs);
}

/* Where an edge's bytes go, for the traffic table. */
static const char *dest_of(const demo_run *run, const char *edge)
{
    if (strcmp(edge, DEMO_SIG_PROMPT) == 0)
        return run->worker_name[run->enc_rank];
    if (strcmp(edge, DEMO_SIG_HIDDEN) == 0)
        return run->worker_name[run->dec_rank];
    return DEMO_PREPROCESS;
}

static void add_tx(demo_run *run, const mstar_tx_info *tx, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        demo_traffic_add_tx(&run->traffic, &tx[i], 1, dest_of(run, tx[i].edge_name));
}

/* The preprocess role's own records of a request, before its teardown drops them. */
static void collect_pre_traffic(demo_run *run, const mstar_rid *rid)
{
    mstar_tx_info *tx = NULL;
    mstar_rx_info *rx = NULL;
    uint32_t ntx = 0, nrx = 0;
    if (mstar_comm_get_tx_info(run->pre.comm, rid, &tx, &ntx) == MSTAR_OK)
        add_tx(run, tx, ntx);
    if (mstar_comm_get_rx_info(run->pre.comm, rid, &rx, &nrx) == MSTAR_OK)
        demo_traffic_add_rx(&run->traffic, rx, nrx);
    free(tx);
    free(rx);
}

static void finished(demo_run *run, dreq *r, dreq_state state)
{
    r->state = state;
    r->t_end = demo_now();
    run->inflight--;
    if (state == R_DONE)
        run->done++;
    else if (state == R_ABORTED)
        run->aborted++;
    else
        run->failed++;
}

/* ---- the drain barrier (conductor) ----------------------------------------------------------- */

static void send_remove(demo_run *run, const mstar_rid *rid, const char *peer, bool force)
{
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_REMOVE_REQUEST);
    m.request_id = *rid;
    m.remove_source = MSTAR_REMOVE_FROM_CONDUCTOR;
    m.force = force;
    if (demo_send(run->cond.mesh, peer, &m) != MSTAR_OK)
        demo_run_fail(run, "conductor: %s", mstar_last_error());
    mstar_msg_clear(&m);
}

/* Every reader answered: the producers may free everything of the request now. */
static void finish_drain(demo_run *run, dreq *r)
{
    mstar_rid rid = mstar_rid_from_int(index_of(run, r));
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (run->alive[w])
            send_remove(run, &rid, run->worker_name[w], true);
    }
    send_remove(run, &rid, DEMO_PREPROCESS, true);
    finished(run, r, r->failing ? R_FAILED : R_ABORTED);
}

static void start_drain(demo_run *run, dreq *r, bool failing, const char *reason)
{
    mstar_rid rid = mstar_rid_from_int(index_of(run, r));
    r->state = R_DRAINING;
    r->failing = failing;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    r->drain_wait = DRAIN_PRE;
    for (int w = 0; w < DEMO_WORKERS; w++) {
        if (!run->alive[w])
            continue;
        r->drain_wait |= 1u << w;
        if (demo_send_simple(run->cond.mesh, run->worker_name[w], MSTAR_MSG_DRAIN_REQUEST, &rid) !=
            MSTAR_OK)
            demo_run_fail(run, "conductor: %s", mstar_last_error());
    }
    if (demo_send_simple(run->cond.mesh, DEMO_PREPROCESS, MSTAR_MSG_DRAIN_REQUEST, &rid) !=
        MSTAR_OK)
        demo_run_fail(run, "conductor: %s", mstar_last_error());
}

static void drained_by(demo_run *run, dreq *r, unsigned bit)
{
    if (r->state != R_DRAINING || !(r->drain_wait & bit))
        return;
    r->drain_wait &= ~bit;
    if (r->drain_wait == 0)
        finish_drain(run, r);
}

void demo_walk_worker_died(demo_run *run, int rank)
{
    run->alive[rank] = false;
    for (int32_t i = 0; i < run->next_submit; i++)
        drained_by(run, &run->reqs[i], 1u << rank);
}

void demo_walk_fail_all(demo_run *run, const char *why)
{
    run->stop_submitting = true;
    for (int32_t i = 0; i < run->next_submit; i++) {
        if (run->reqs[i].state == R_RUNNING)
            start_drain(run, &run->reqs[i], true, why);
    }
}

int32_t demo_walk_unfinished(const demo_run *run)
{
    int32_t n = 0;
    for (int32_t i = 0; i < run->next_submit; i++)
        n += run->reqs[i].state == R_RUNNING || run->reqs[i].state == R_DRAINING;
    return n;
}

/* ---- the client: aborts --------------------------------------------------------------------- */

static void client_abort(demo_run *run, dreq *r)
{
    int32_t i = index_of(run, r);
    r->abort_sent = true;
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_ABORT_REQUEST);
    m.request_id = mstar_rid_from_int(i);
    snprintf(m.text, sizeof(m.text), "client abort %s",
             demo_abort_point_name(run->specs[i].abort_point));
    if (demo_send(run->api.mesh, DEMO_CONDUCTOR, &m) != MSTAR_OK)
        demo_run_fail(run, "api server: %s", mstar_last_error());
    mstar_msg_clear(&m);
}

/* ---- submitting (api server + preprocess) ---------------------------------------------------- */

mstar_status demo_walk_submit(demo_run *run, int32_t i)
{
    const demo_request_spec *spec = &run->specs[i];
    dreq *r = &run->reqs[i];
    mstar_rid rid = mstar_rid_from_int(i);
    r->state = R_RUNNING;
    r->t_submit = demo_now();
    run->inflight++;
    run->next_submit = i + 1;
    int64_t len = spec->prompt_len;
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = DEMO_SIG_PROMPT;
    mstar_status st =
        mstar_tensor_init(&o.tensor, spec->prompt, mstar_device_cpu(), MSTAR_DTYPE_INT32, 1, &len);
    mstar_store_params params = { DEMO_PREPROCESS, DEMO_WALK, 1, 0 };
    mstar_tensor_info info;
    mstar_edge edge;
    mstar_edge_init(&edge);
    snprintf(edge.name, sizeof(edge.name), "%s", DEMO_SIG_PROMPT);
    /* design.md "Tensor lifecycle", api-server producer: store (no hold), stage, persist, then
     * send. */
    if (st == MSTAR_OK)
        st = mstar_comm_store_and_return_tensor_info(run->pre.comm, &rid, &o, 1, &params, &info);
    if (st == MSTAR_OK &&
        (st = mstar_comm_register_for_send(run->pre.comm, &rid, &info, 1)) == MSTAR_OK)
        st = mstar_comm_set_persist(run->pre.comm, info.uuid, true);
    if (st == MSTAR_OK)
        st = mstar_edge_add_tensor(&edge, &info);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_CONDUCTOR_NEW_REQUEST);
    m.request_id = rid;
    snprintf(m.graph_walk, sizeof(m.graph_walk), "%s", DEMO_WALK);
    if (st == MSTAR_OK)
        st = mstar_msg_add_edge(&m, &edge);
    if (st == MSTAR_OK)
        st = mstar_msg_add_kv(&m, DEMO_KV_PROMPT_LEN, spec->prompt_len);
    if (st == MSTAR_OK)
        st = mstar_msg_add_kv(&m, DEMO_KV_MAX_NEW, spec->max_new);
    if (st == MSTAR_OK)
        st = demo_send(run->pre.mesh, DEMO_CONDUCTOR, &m);
    mstar_msg_clear(&m);
    mstar_edge_clear(&edge);
    if (st != MSTAR_OK) {
        /* Nobody else heard of it: tear it down here. */
        mstar_comm_force_cleanup_request(run->pre.comm, &rid);
        snprintf(r->reason, sizeof(r->reason), "submit: %s", mstar_last_error());
        finished(run, r, R_FAILED);
        return st;
    }
    if (spec->abort_point == DEMO_ABORT_AT_SUBMIT)
        client_abort(run, r);
    return MSTAR_OK;
}

/* ---- the conductor --------------------------------------------------------------------------- */

static void send_new_request(demo_run *run, dreq *r, int rank, const mstar_edge *input)
{
    int32_t i = index_of(run, r);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_NEW_REQUEST);
    m.request_id = mstar_rid_from_int(i);
    snprintf(m.graph_walk, sizeof(m.graph_walk), "%s", DEMO_WALK);
    mstar_status st = mstar_msg_add_kv(&m, DEMO_KV_PROMPT_LEN, run->specs[i].prompt_len);
    if (st == MSTAR_OK)
        st = mstar_msg_add_kv(&m, DEMO_KV_MAX_NEW, run->specs[i].max_new);
    if (st == MSTAR_OK && input != NULL)
        st = mstar_msg_add_edge(&m, input);
    if (st == MSTAR_OK)
        st = demo_send(run->cond.mesh, run->worker_name[rank], &m);
    if (st != MSTAR_OK)
        demo_run_fail(run, "conductor: NEW_REQUEST %d: %s", i, mstar_last_error());
    mstar_msg_clear(&m);
}

/* CONDUCTOR_NEW_REQUEST: the persisted prompt goes to the encoder; the decoder learns of it. */
static void on_conductor_new_request(demo_run *run, dreq *r, const mstar_msg *m)
{
    if (r->state != R_RUNNING || r->walk_started)
        return; /* aborted before the walk began: the drain tears the prompt down */
    if (m->nedges != 1 || m->edges[0].ntensors != 1 ||
        strcmp(m->edges[0].name, DEMO_SIG_PROMPT) != 0) {
        start_drain(run, r, true, "conductor: CONDUCTOR_NEW_REQUEST without one prompt");
        return;
    }
    mstar_edge input;
    if (mstar_edge_copy(&input, &m->edges[0]) != MSTAR_OK) {
        start_drain(run, r, true, "conductor: out of memory");
        return;
    }
    snprintf(input.next_node, sizeof(input.next_node), "%s", demo_component_name(DEMO_ENCODER));
    r->walk_started = true;
    r->prompt_uuid = input.tensor_info[0].uuid;
    r->prompt_sends++; /* one more read the producer will see ACKed (design.md "Persist") */
    send_new_request(run, r, run->enc_rank, &input);
    send_new_request(run, r, run->dec_rank, NULL);
    mstar_edge_clear(&input);
}

static void complete(demo_run *run, dreq *r)
{
    mstar_rid rid = mstar_rid_from_int(index_of(run, r));
    r->completed = true;
    for (int w = 0; w < DEMO_WORKERS; w++)
        send_remove(run, &rid, run->worker_name[w], false);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_UNPERSIST_TENSORS);
    m.request_id = rid;
    mstar_status st = mstar_msg_add_count(&m, r->prompt_uuid, r->prompt_sends);
    if (st == MSTAR_OK)
        st = demo_send(run->cond.mesh, DEMO_PREPROCESS, &m);
    mstar_msg_clear(&m);
    if (st == MSTAR_OK) {
        mstar_msg_init(&m, MSTAR_MSG_REQUEST_COMPLETE);
        m.request_id = rid;
        st = demo_send(run->cond.mesh, DEMO_API_SERVER, &m);
        mstar_msg_clear(&m);
    }
    if (st != MSTAR_OK)
        demo_run_fail(run, "conductor: completing request %d: %s", index_of(run, r),
                      mstar_last_error());
}

static void on_graphs_done(demo_run *run, dreq *r, int rank, const mstar_msg *m)
{
    add_tx(run, m->tx, m->ntx);
    demo_traffic_add_rx(&run->traffic, m->rx, m->nrx);
    if (r->state != R_RUNNING || r->done_by[rank])
        return;
    r->done_by[rank] = true;
    if (rank == run->enc_rank) {
        r->t_encoded = demo_now();
        if (run->specs[index_of(run, r)].abort_point == DEMO_ABORT_AFTER_ENCODER && !r->abort_sent)
            client_abort(run, r);
    }
    if (r->done_by[0] && r->done_by[1] && !r->completed)
        complete(run, r);
}

static void on_abort(demo_run *run, dreq *r, const mstar_msg *m)
{
    if (r->state != R_RUNNING)
        return;
    if (r->completed) {
        r->abort_too_late = true; /* the walk finished first: it completes */
        return;
    }
    start_drain(run, r, false, m->text);
}

/* A worker's report comes in parts (the first carries its counters) and is sent again until
 * the conductor acknowledges it with a second SHUTDOWN; a repeat starts over. */
static void merge_report(demo_run *run, int rank, const mstar_msg *m)
{
    demo_worker_report *rep = &run->report[rank];
    if (mstar_msg_get_kv(m, "rank", -1) >= 0)
        memset(rep, 0, sizeof(*rep));
    struct {
        const char *key;
        int64_t *dst;
    } counters[] = {
        { "tensors_held", &rep->tensors_held },
        { "live_slots", &rep->live_slots },
        { "spill_files", &rep->spill_files },
        { "open_requests", &rep->open_requests },
        { "done", &rep->done },
        { "failed", &rep->failed },
        { "removed_soft", &rep->removed_soft },
        { "removed_force", &rep->removed_force },
        { "drained", &rep->drained },
        { "early_dropped", &rep->early_dropped },
        { "busy_us", &rep->busy_us },
        { "held_uuid", &rep->held_uuid },
        { "held_request", &rep->held_request },
    };
    for (uint32_t k = 0; k < m->nkv; k++) {
        const mstar_kv *kv = &m->kv[k];
        bool known = strcmp(kv->key, "report") == 0 || strcmp(kv->key, "rank") == 0 ||
                     strcmp(kv->key, "graphs") == 0;
        size_t held = strlen(DEMO_HELD_SIGNAL_KEY);
        if (strncmp(kv->key, DEMO_HELD_SIGNAL_KEY, held) == 0) {
            snprintf(rep->held_signal, sizeof(rep->held_signal), "%s", kv->key + held);
            known = true;
        }
        if (strcmp(kv->key, "report_end") == 0) {
            rep->in = true;
            known = true;
            mstar_msg bye;
            mstar_msg_init(&bye, MSTAR_MSG_SHUTDOWN);
            snprintf(bye.text, sizeof(bye.text), "report received");
            if (demo_send(run->cond.mesh, run->worker_name[rank], &bye) != MSTAR_OK)
                demo_run_fail(run, "conductor: %s", mstar_last_error());
            mstar_msg_clear(&bye);
        }
        for (size_t c = 0; !known && c < sizeof(counters) / sizeof(counters[0]); c++) {
            if (strcmp(kv->key, counters[c].key) == 0) {
                *counters[c].dst = kv->value;
                known = true;
            }
        }
        if (!known && !demo_step_stats_merge_kv(&rep->steps, kv))
            mstar_log(MSTAR_LOG_WARN, "report of %s: unknown entry '%s'", m->from, kv->key);
    }
}

static void on_hello(demo_run *run, int rank, const mstar_msg *m)
{
    if (mstar_msg_get_kv(m, "report", 0) != 0) {
        merge_report(run, rank, m);
        return;
    }
    run->hello[rank] = true;
    run->startup_s[rank] = (double)mstar_msg_get_kv(m, "startup_us", 0) * 1e-6;
}

void demo_walk_on_conductor(demo_run *run, mstar_msg *m)
{
    int rank = rank_of(run, m->from);
    dreq *r;
    switch (m->type) {
    case MSTAR_MSG_HELLO:
        if (rank >= 0)
            on_hello(run, rank, m);
        return;
    case MSTAR_MSG_CONDUCTOR_NEW_REQUEST:
        if (strcmp(m->from, DEMO_PREPROCESS) == 0 && (r = req_of(run, m)) != NULL)
            on_conductor_new_request(run, r, m);
        return;
    case MSTAR_MSG_WORKER_GRAPHS_DONE:
        if (rank >= 0 && (r = req_of(run, m)) != NULL)
            on_graphs_done(run, r, rank, m);
        return;
    case MSTAR_MSG_ABORT_REQUEST:
        if ((r = req_of(run, m)) != NULL)
            on_abort(run, r, m);
        return;
    case MSTAR_MSG_FAIL_REQUESTS:
        for (uint32_t k = 0; k < m->nrids; k++) {
            const mstar_rid *rid = &m->rids[k];
            if (rid->is_str || rid->num < 0 || rid->num >= run->next_submit)
                continue;
            dreq *f = &run->reqs[rid->num];
            char why[600];
            snprintf(why, sizeof(why), "%s: %s", m->from, m->text);
            if (f->state == R_RUNNING)
                start_drain(run, f, true, why);
        }
        return;
    case MSTAR_MSG_READS_DONE:
        if ((r = req_of(run, m)) == NULL)
            return;
        if (rank >= 0)
            drained_by(run, r, 1u << rank);
        else if (strcmp(m->from, DEMO_PREPROCESS) == 0)
            drained_by(run, r, DRAIN_PRE);
        return;
    default:
        mstar_log(MSTAR_LOG_WARN, "conductor: %s from %s ignored", mstar_msg_type_name(m->type),
                  m->from);
        return;
    }
}

/* ---- the api server -------------------------------------------------------------------------- */

static void maybe_done(demo_run *run, dreq *r)
{
    if (r->state != R_RUNNING || !r->result_read || !r->complete_seen)
        return;
    mstar_rid rid = mstar_rid_from_int(index_of(run, r));
    collect_pre_traffic(run, &rid);
    if (mstar_comm_cleanup_request(run->pre.comm, &rid) != MSTAR_OK)
        demo_run_fail(run, "preprocess: cleanup of request %d: %s", index_of(run, r),
                      mstar_last_error());
    run->tokens_out += r->nresult;
    finished(run, r, R_DONE);
}

static void on_result(demo_run *run, dreq *r, const mstar_msg *m)
{
    /* The last worker says which of its inputs were offered over the CUDA IPC route. */
    size_t prefix = strlen(DEMO_KV_CUDA_IPC);
    for (uint32_t i = 0; i < m->nkv; i++)
        if (strncmp(m->kv[i].key, DEMO_KV_CUDA_IPC, prefix) == 0 && m->kv[i].value == 1)
            demo_traffic_note_cuda_ipc(&run->traffic, m->kv[i].key + prefix);
    bool take = r->state == R_RUNNING && !r->pre_draining && !r->pre_drained && !r->result_read;
    if (!take) { /* a late result: acknowledged, never read (design.md "Control messages") */
        mstar_comm_ack_unread_tensors(run->pre.comm, &m->request_id, m->edges, m->nedges);
        return;
    }
    if (m->nedges != 1 || mstar_comm_start_read_tensors(run->pre.comm, &m->request_id, m->edges, 1,
                                                        NULL) != MSTAR_OK) {
        char why[300];
        snprintf(why, sizeof(why), "api server: result_tensors: %s",
                 m->nedges != 1 ? "not exactly one edge" : mstar_last_error());
        mstar_comm_ack_unread_tensors(run->pre.comm, &m->request_id, m->edges, m->nedges);
        start_drain(run, r, true, why);
    }
}

void demo_walk_on_api(demo_run *run, mstar_msg *m)
{
    dreq *r = req_of(run, m);
    if (r == NULL)
        return;
    switch (m->type) {
    case MSTAR_MSG_RESULT_TENSORS:
        on_result(run, r, m);
        return;
    case MSTAR_MSG_REQUEST_COMPLETE:
        r->complete_seen = true;
        maybe_done(run, r);
        return;
    default:
        mstar_log(MSTAR_LOG_WARN, "api server: %s from %s ignored", mstar_msg_type_name(m->type),
                  m->from);
        return;
    }
}

/* The tokens of a landed result: int32 [max_new], each in the vocabulary. */
static void take_result(demo_run *run, dreq *r, const mstar_edge *edge)
{
    int32_t i = index_of(run, r);
    const mstar_tensor_info *info = edge->ntensors == 1 ? &edge->tensor_info[0] : NULL;
    int32_t want = run->specs[i].max_new;
    char why[256] = "";
    if (info == NULL || strcmp(edge->name, DEMO_SIG_TOKENS) != 0 ||
        info->dtype != MSTAR_DTYPE_INT32 || info->ndim != 1 || info->dims[0] != want)
        snprintf(why, sizeof(why), "api server: the result is not int32 [%d] '%s'", want,
                 DEMO_SIG_TOKENS);
    if (why[0] == '\0' && (r->result = malloc((size_t)want * sizeof(int32_t))) == NULL)
        snprintf(why, sizeof(why), "api server: out of memory");
    mstar_tensor copy;
    if (why[0] == '\0' &&
        mstar_comm_get_tensor_copy(run->pre.comm, info->uuid, r->result,
                                   (size_t)want * sizeof(int32_t), &copy) != MSTAR_OK)
        snprintf(why, sizeof(why), "api server: %s", mstar_last_error());
    for (int32_t t = 0; why[0] == '\0' && t < want; t++) {
        if (r->result[t] < 0 || r->result[t] >= run->cfg->model.vocab)
            snprintf(why, sizeof(why), "api server: result token %d is %d", t, r->result[t]);
    }
    for (uint32_t t = 0; t < edge->ntensors; t++)
        mstar_comm_dereference(run->pre.comm, edge->tensor_info[t].uuid, 1);
    if (why[0] != '\0') {
        free(r->result);
        r->result = NULL;
        start_drain(run, r, true, why);
        return;
    }
    r->nresult = want;
    r->result_read = true;
    maybe_done(run, r);
}

static void collect_results(demo_run *run)
{
    mstar_ready_set set;
    if (mstar_comm_get_ready_tensors(run->pre.comm, &set) != MSTAR_OK) {
        demo_run_fail(run, "api server: get_ready_tensors: %s", mstar_last_error());
        return;
    }
    for (uint32_t k = 0; k < set.nfailed; k++) {
        const mstar_read_failure *f = &set.failed[k];
        if (f->rid.is_str || f->rid.num < 0 || f->rid.num >= run->next_submit)
            continue;
        char why[600];
        snprintf(why, sizeof(why), "api server: reading %s: %s", f->edge_name, f->message);
        if (run->reqs[f->rid.num].state == R_RUNNING)
            start_drain(run, &run->reqs[f->rid.num], true, why);
    }
    for (uint32_t k = 0; k < set.nrequests; k++) {
        const mstar_rid *rid = &set.rids[k];
        dreq *r = !rid->is_str && rid->num >= 0 && rid->num < run->next_submit
                      ? &run->reqs[rid->num]
                      : NULL;
        for (uint32_t e = set.edge_start[k]; e < set.edge_start[k + 1]; e++) {
            const mstar_edge *edge = &set.edges[e];
            if (r != NULL && r->state == R_RUNNING && !r->result_read) {
                take_result(run, r, edge);
                continue;
            }
            for (uint32_t t = 0; t < edge->ntensors; t++)
                mstar_comm_dereference(run->pre.comm, edge->tensor_info[t].uuid, 1);
        }
    }
    mstar_ready_set_clear(&set);
}

/* ---- the preprocess role -----------------------------------------------------------------------
 */

void demo_walk_on_preprocess(demo_run *run, mstar_msg *m)
{
    dreq *r;
    switch (m->type) {
    case MSTAR_MSG_TENSOR_RECEIVED:
    case MSTAR_MSG_UNPERSIST_TENSORS:
        if (mstar_comm_handle_message(run->pre.comm, m) != MSTAR_OK)
            mstar_log(MSTAR_LOG_WARN, "preprocess: %s from %s: %s", mstar_msg_type_name(m->type),
                      m->from, mstar_last_error());
        return;
    case MSTAR_MSG_DRAIN_REQUEST:
        if ((r = req_of(run, m)) == NULL)
            return;
        if (r->pre_drained) /* answered already: answer again */
            demo_send_simple(run->pre.mesh, DEMO_CONDUCTOR, MSTAR_MSG_READS_DONE, &m->request_id);
        else
            r->pre_draining = true;
        return;
    case MSTAR_MSG_REMOVE_REQUEST:
        if ((r = req_of(run, m)) == NULL)
            return;
        collect_pre_traffic(run, &m->request_id);
        if ((m->force ? mstar_comm_force_cleanup_request(run->pre.comm, &m->request_id)
                      : mstar_comm_cleanup_request(run->pre.comm, &m->request_id)) != MSTAR_OK)
            demo_run_fail(run, "preprocess: REMOVE_REQUEST %lld: %s", (long long)m->request_id.num,
                          mstar_last_error());
        return;
    default:
        mstar_log(MSTAR_LOG_WARN, "preprocess: %s from %s ignored", mstar_msg_type_name(m->type),
                  m->from);
        return;
    }
}

void demo_walk_poll(demo_run *run)
{
    collect_results(run);
    double now = demo_now();
    for (int32_t i = 0; i < run->next_submit; i++) {
        dreq *r = &run->reqs[i];
        mstar_rid rid = mstar_rid_from_int(i);
        if (r->pre_draining && !mstar_comm_has_inflight_reads(run->pre.comm, &rid)) {
            r->pre_draining = false;
            r->pre_drained = true;
            if (demo_send_simple(run->pre.mesh, DEMO_CONDUCTOR, MSTAR_MSG_READS_DONE, &rid) !=
                MSTAR_OK)
                demo_run_fail(run, "preprocess: %s", mstar_last_error());
        }
        const demo_request_spec *s = &run->specs[i];
        if (r->state == R_RUNNING && s->abort_point == DEMO_ABORT_MID_DECODE && !r->abort_sent &&
            r->t_encoded > 0 && now >= r->t_encoded + s->abort_delay_ms * 1e-3)
            client_abort(run, r);
    }
}
