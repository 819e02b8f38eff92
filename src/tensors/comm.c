/*
 * comm.c — the communication manager: creation and destruction, the request table, the ACK
 * messages it sends and the control messages it handles, and its small getters. The producer,
 * consumer and teardown halves live in comm_store.c, comm_read.c and comm_cleanup.c.
 */
#include "tensors/comm_internal.h"

#include "core/assert.h"
#include "core/str.h"
#include "tensors/completion.h"
#include "tensors/arena/arena_transport.h"
#include "tensors/cuda_ipc/cuda_ipc.h"
#include "tensors/transport_files.h"
#include "tensors/transport_local.h"
#include "tensors/ucx/ucx_engine.h"
#include "tensors/ucx/ucx_transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

static const char *const kind_names[] = { "default", "local",   "files",
                                          "arena",   "ucx-tcp", "ucx-rdma" };
#define KIND_LAST 5

const char *mstar_transport_kind_name(mstar_transport_kind kind)
{
    if ((int)kind < 1 || (int)kind > KIND_LAST)
        return NULL;
    return kind_names[kind];
}

mstar_status mstar_transport_kind_from_name(const char *name, mstar_transport_kind *out)
{
    for (int k = 1; name != NULL && k <= KIND_LAST; k++) {
        if (strcasecmp(name, kind_names[k]) == 0) {
            *out = (mstar_transport_kind)k;
            return MSTAR_OK;
        }
    }
    return mstar_error_set(MSTAR_EINVAL,
                           "transport '%s' is not one of local, files, arena, ucx-tcp, ucx-rdma",
                           name != NULL ? name : "(null)");
}

mstar_status mstar_transport_kind_from_protocol(const char *protocol, mstar_transport_kind *out)
{
    static const struct {
        const char *name;
        mstar_transport_kind kind;
    } protocols[] = { { "shm", MSTAR_TRANSPORT_DEFAULT },
                      { "tcp", MSTAR_TRANSPORT_UCX_TCP },
                      { "rdma", MSTAR_TRANSPORT_UCX_RDMA } };
    for (size_t i = 0; protocol != NULL && i < 3; i++) {
        if (strcasecmp(protocol, protocols[i].name) == 0) {
            *out = protocols[i].kind;
            return MSTAR_OK;
        }
    }
    return mstar_error_set(MSTAR_EINVAL, "tensor comm protocol '%s' is not one of shm, tcp, rdma",
                           protocol != NULL ? protocol : "(null)");
}

static bool kind_is_ucx(mstar_transport_kind kind)
{
    return kind == MSTAR_TRANSPORT_UCX_TCP || kind == MSTAR_TRANSPORT_UCX_RDMA;
}

void mstar_comm_options_init(mstar_comm_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->entity_index = -1;
    opts->transport = MSTAR_TRANSPORT_DEFAULT;
}

/* MSTAR_SHM_ARENA: 0 files, 1 arena, AUTO arena (the arena is always built in). */
static mstar_status kind_from_env(mstar_transport_kind *out)
{
    static const char *const choices[] = { "0", "1", "AUTO" };
    size_t idx;
    mstar_status st = mstar_env_get_choice("MSTAR_SHM_ARENA", choices, 3, 0, &idx);
    if (st != MSTAR_OK)
        return st;
    *out = idx == 0 ? MSTAR_TRANSPORT_FILES : MSTAR_TRANSPORT_ARENA;
    return MSTAR_OK;
}

/* The host-local transports (files, arena) carry device tensors GPU to GPU when the route is
 * on (MSTAR_CUDA_IPC; docs/environment.md). */
static mstar_status wrap_cuda_ipc(mstar_comm *comm)
{
    mstar__cuda_ipc_mode mode;
    mstar_status st = mstar__cuda_ipc_mode_get(&mode);
    if (st != MSTAR_OK || !mstar__cuda_ipc_wanted(mode, comm->env.backend))
        return st;
    mstar__transport *inner = comm->transport;
    comm->transport = NULL;
    return mstar__transport_cuda_ipc_wrap(&comm->env, mode, inner, &comm->transport);
}

static mstar_status check_options(const mstar_comm_options *o, uint16_t *index)
{
    if (o->entity == NULL)
        return mstar_error_set(MSTAR_EINVAL, "comm options: entity is NULL");
    mstar_status st = mstar_name_validate(o->entity, strnlen(o->entity, MSTAR_NAME_MAX + 1),
                                          "comm options: entity");
    if (st != MSTAR_OK)
        return st;
    if (o->entity_index > UINT16_MAX)
        return mstar_error_set(MSTAR_EINVAL, "comm options: entity_index %d exceeds 65535",
                               (int)o->entity_index);
    if (o->entity_index >= 0) {
        *index = (uint16_t)o->entity_index;
        return MSTAR_OK;
    }
    st = mstar_entity_index(o->entity, index);
    if (st == MSTAR_ENOENT)
        return mstar_error_set(MSTAR_EINVAL,
                               "comm options: entity '%s' has no fixed index; set "
                               "entity_index (mstar_mesh_entity_index gives it)",
                               o->entity);
    return st;
}

/* The session id of the shared-memory transports: the one given, else the host name. Their
 * readers never connect to it; it names the producer's host in descriptors and logs. */
static mstar_status host_session(mstar_comm *comm, const char *given)
{
    char host[MSTAR_NAME_MAX + 1] = "localhost";
    if (given == NULL) {
        if (gethostname(host, sizeof(host) - 1) != 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        given = host;
    }
    mstar_status st = mstar_name_validate(given, strnlen(given, MSTAR_NAME_MAX + 1), "session_id");
    if (st == MSTAR_OK)
        snprintf(comm->session_id, sizeof(comm->session_id), "%s", given);
    return st;
}

static mstar_status open_shm(mstar_comm *comm, const mstar_comm_options *o)
{
    mstar_status st = mstar__shm_dir_open(o->shm_dir, o->shm_namespace, &comm->dir);
    if (st != MSTAR_OK)
        return st;
    comm->has_dir = true;
    /* What dead processes left: arena segments of pids that are gone, and this entity's own
     * per-uuid files from an earlier incarnation (tensor ids restart with the process). */
    int segs = mstar__shm_sweep_dead_segments(&comm->dir);
    int files = mstar__shm_sweep_entity_files(&comm->dir, comm->entity);
    if (segs + files > 0)
        mstar_log(MSTAR_LOG_INFO, "shm sweep in %s: %d orphan segments, %d stale files",
                  comm->dir.path, segs, files);
    return MSTAR_OK;
}

static mstar_status open_streams(mstar_comm *comm)
{
    /* The staging stream is a blocking stream: its copies are ordered after the work the
     * caller queued on the runtime's default stream. */
    mstar_status st = mstar_stream_create(comm->env.backend, MSTAR_STREAM_DEFAULT, &comm->d2h);
    if (st == MSTAR_OK)
        st = mstar_stream_create(comm->env.backend, MSTAR_STREAM_NON_BLOCKING, &comm->h2d);
    /* Device tensors go through host memory on the staged routes (files, UCX, arena spills):
     * pinned buffers kept for reuse, since pinning memory per tensor costs more than a small
     * copy. */
    if (st == MSTAR_OK)
        st = mstar__pinned_pool_create_from_env(comm->env.backend, &comm->env.pinned);
    return st;
}

/* A manager that ACKs through the mesh also learns from it whom it sent each tensor to: every
 * message the mesh sends passes its descriptors to the ACK ledger (mstar_comm_note_sent). */
static void on_mesh_sent(void *ctx, const char *peer, const mstar_msg *msg)
{
    if (mstar_comm_note_sent(ctx, peer, msg) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "ACK ledger: %s", mstar_last_error());
}

static void hook_mesh(mstar_comm *comm, const mstar_comm_options *o)
{
    if (o->send != mstar_comm_send_via_mesh || o->send_ctx == NULL)
        return;
    /* Its reads end the mesh's spin too (completion.h): the mesh outlives the manager. */
    comm->notice.mesh = o->send_ctx;
    if (mstar_mesh_set_sent_hook(o->send_ctx, on_mesh_sent, comm) == MSTAR_OK)
        comm->hooked_mesh = o->send_ctx;
    else
        mstar_log(MSTAR_LOG_WARN,
                  "comm %s: %s; ACKs are checked only against "
                  "mstar_comm_note_sent",
                  comm->entity, mstar_last_error());
}

mstar_status mstar_comm_create(const mstar_comm_options *opts, mstar_comm **out)
{
    if (opts == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "comm_create: %s is NULL",
                               opts == NULL ? "opts" : "out");
    uint16_t index;
    mstar_status st = check_options(opts, &index);
    if (st != MSTAR_OK)
        return st;
    mstar_transport_kind kind = opts->transport;
    if (kind == MSTAR_TRANSPORT_DEFAULT && (st = kind_from_env(&kind)) != MSTAR_OK)
        return st;
    if (mstar_transport_kind_name(kind) == NULL)
        return mstar_error_set(MSTAR_EINVAL, "comm options: transport %d is unknown", (int)kind);

    mstar_comm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "communication manager");
    snprintf(comm->entity, sizeof(comm->entity), "%s", opts->entity);
    mstar_id_gen_init(&comm->ids, index);
    comm->kind = kind;
    comm->enable_prof = opts->enable_prof;
    comm->send = opts->send;
    comm->send_ctx = opts->send_ctx;
    comm->event_fd = -1;
    mstar__owner_init(&comm->owner);
    mstar__bk_init(&comm->bk);
    mstar__names_init(&comm->names);
    mstar__vec_init(&comm->reqs, sizeof(mstar__req));
    mstar__vec_init(&comm->free_reqs, sizeof(uint32_t));
    mstar__u64map_init(&comm->rid_int);
    mstar__strmap_init(&comm->rid_str);
    mstar__vec_init(&comm->pending, sizeof(mstar__pending));
    mstar__vec_init(&comm->collected, sizeof(uint32_t));
    mstar__vec_init(&comm->req_slots, sizeof(uint32_t));
    mstar__vec_init(&comm->ack_retry, sizeof(mstar__ack_retry));
    mstar__vec_init(&comm->acks_owed, sizeof(mstar__ack_owed));
    mstar__vec_init(&comm->ack_aliases, 2 * sizeof(uint32_t));
    mstar__vec_init(&comm->spare_events, sizeof(mstar_event *));
    mstar__strmap_init(&comm->expected);
    mstar__u64map_init(&comm->loans);
    comm->dir.fd = -1;

    comm->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (comm->event_fd < 0) {
        st = mstar_error_set(MSTAR_EIO, "eventfd: %s", strerror(errno));
        goto fail;
    }
    if (kind_is_ucx(kind) && opts->session_id != NULL) {
        st = mstar_error_set(MSTAR_EINVAL,
                             "comm options: session_id must be NULL for %s (the "
                             "UCX listener's address is the session id; see "
                             "MSTAR_UCX_ADDRESS)",
                             mstar_transport_kind_name(kind));
        goto fail;
    }
    st = kind_is_ucx(kind)
             ? mstar__ucx_engine_create_from_env(kind == MSTAR_TRANSPORT_UCX_RDMA, &comm->env.ucx)
             : host_session(comm, opts->session_id);
    if (st != MSTAR_OK)
        goto fail;
    if (kind != MSTAR_TRANSPORT_LOCAL && !kind_is_ucx(kind) &&
        (st = open_shm(comm, opts)) != MSTAR_OK)
        goto fail;
    comm->env.entity = comm->entity;
    comm->env.dir = comm->has_dir ? &comm->dir : NULL;
    comm->env.backend = opts->backend;
    comm->notice.fd = comm->event_fd;
    comm->env.notice = &comm->notice;
    if (opts->backend != NULL && (st = open_streams(comm)) != MSTAR_OK)
        goto fail;
    comm->env.d2h = comm->d2h;
    comm->env.h2d = comm->h2d;
    switch (kind) {
    case MSTAR_TRANSPORT_LOCAL:
        st = mstar__transport_local_create(&comm->env, &comm->transport);
        break;
    case MSTAR_TRANSPORT_FILES:
        st = mstar__transport_files_create(&comm->env, &comm->transport);
        break;
    case MSTAR_TRANSPORT_UCX_TCP:
    case MSTAR_TRANSPORT_UCX_RDMA:
        st = mstar__transport_ucx_create(&comm->env, &comm->transport);
        break;
    default:
        st = mstar__transport_arena_create(&comm->env, &comm->transport);
        break;
    }
    if (st == MSTAR_OK && comm->has_dir)
        st = wrap_cuda_ipc(comm);
    if (st != MSTAR_OK)
        goto fail;
    hook_mesh(comm, opts);
    *out = comm;
    return MSTAR_OK;
fail:
    mstar_comm_destroy(comm);
    return st;
}

static void req_init_state(mstar__req *r)
{
    mstar__vec_init(&r->shards, sizeof(mstar__shard_entry));
    mstar__strmap_init(&r->seen);
    mstar__vec_init(&r->fanins, sizeof(mstar__fanin *));
    mstar__vec_init(&r->tx, sizeof(mstar_tx_info));
    mstar__vec_init(&r->rx, sizeof(mstar_rx_info));
}

static void req_free_state(mstar__req *r)
{
    mstar__comm_req_reset(r);
    mstar__vec_free(&r->shards);
    mstar__vec_free(&r->fanins);
    mstar__vec_free(&r->tx);
    mstar__vec_free(&r->rx);
    mstar__strmap_free(&r->seen);
}

/* The destroy of a manager inherited through fork (core/owner.h): everything it holds is the
 * parent's — records whose release frees arena slots (their stamps are shared memory), unlinks
 * files or sends ACKs, copies and engines whose threads run only in the parent, device streams —
 * so the child closes its own fds and keeps the rest until it exits. */
static void forget(mstar_comm *comm)
{
    if (comm->event_fd >= 0)
        close(comm->event_fd);
    comm->event_fd = -1;
    if (comm->has_dir)
        mstar__shm_dir_close(&comm->dir);
    mstar__owner_keep(comm);
}

void mstar_comm_destroy(mstar_comm *comm)
{
    if (comm == NULL)
        return;
    if (!mstar__owner_here(&comm->owner)) {
        forget(comm);
        return;
    }
    comm->destroying = true;
    if (comm->hooked_mesh != NULL)
        mstar_mesh_set_sent_hook(comm->hooked_mesh, NULL, NULL);
    for (size_t i = 0; i < comm->ack_retry.len; i++)
        mstar_msg_clear(&((mstar__ack_retry *)mstar__vec_at(&comm->ack_retry, i))->msg);
    mstar__vec_free(&comm->ack_retry);
    mstar__vec_free(&comm->acks_owed);
    mstar__vec_free(&comm->ack_aliases);
    mstar__strmap_free(&comm->expected);
    /* Copies in flight land in buffers this releases: wait for them first. */
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (p->done != NULL)
            mstar_completion_wait(p->done, -1);
        mstar__comm_pending_free(p);
    }
    mstar__vec_free(&comm->pending);
    /* Every record still held, produced or read. */
    for (uint32_t s = 0; s < comm->bk.top; s++) {
        if (mstar__bk_at(&comm->bk, s)->flags & MSTAR__BK_LIVE) {
            mstar__bk_detach(&comm->bk, s);
            mstar__vec_push(&comm->collected, &s);
        }
    }
    mstar__comm_collect(comm);
    mstar__comm_loans_free(comm);
    for (size_t i = 0; i < comm->reqs.len; i++) /* a free slot keeps its room too */
        req_free_state(mstar__vec_at(&comm->reqs, i));
    if (comm->transport != NULL)
        comm->transport->ops->destroy(comm->transport);
    mstar_stream_destroy(comm->h2d);
    for (size_t i = 0; i < comm->spare_events.len; i++)
        mstar_event_destroy(*(mstar_event **)mstar__vec_at(&comm->spare_events, i));
    mstar__vec_free(&comm->spare_events);
    mstar_stream_destroy(comm->d2h);
    mstar__ucx_engine_destroy(comm->env.ucx);
    mstar__pinned_pool_destroy(comm->env.pinned); /* after the engine's reader returned its own */
    if (comm->has_dir)
        mstar__shm_dir_close(&comm->dir);
    if (comm->event_fd >= 0)
        close(comm->event_fd);
    mstar__vec_free(&comm->collected);
    mstar__vec_free(&comm->req_slots);
    mstar__vec_free(&comm->reqs);
    mstar__vec_free(&comm->free_reqs);
    mstar__u64map_free(&comm->rid_int);
    mstar__strmap_free(&comm->rid_str);
    mstar__names_free(&comm->names);
    mstar__bk_free(&comm->bk);
    free(comm);
}

/* ---- getters -------------------------------------------------------------------------------- */

const char *mstar_comm_entity(const mstar_comm *comm)
{
    return comm->entity;
}

mstar_transport_kind mstar_comm_transport(const mstar_comm *comm)
{
    return comm->kind;
}

const char *mstar_comm_session_id(const mstar_comm *comm)
{
    return comm->env.ucx != NULL ? mstar__ucx_engine_session_id(comm->env.ucx) : comm->session_id;
}

bool mstar_comm_needs_cpu_tensor(const mstar_comm *comm)
{
    return comm->transport->ops->needs_cpu_tensor;
}

bool mstar_comm_stamps_shm_placement(const mstar_comm *comm)
{
    return comm->transport->ops->stamp != NULL;
}

size_t mstar_comm_num_tensors(const mstar_comm *comm)
{
    return mstar__bk_len(&comm->bk);
}

int mstar_comm_event_fd(const mstar_comm *comm)
{
    return comm->event_fd;
}

void mstar_comm_event_drain(mstar_comm *comm)
{
    uint64_t v;
    while (read(comm->event_fd, &v, sizeof(v)) == sizeof(v)) {
    }
}

mstar_status mstar_comm_arena_stats(mstar_comm *comm, mstar_arena_stats *out)
{
    if (comm->transport->ops->arena_stats == NULL)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "arena statistics: this manager uses the %s "
                               "transport",
                               comm->transport->ops->name);
    comm->transport->ops->arena_stats(comm->transport, out);
    return MSTAR_OK;
}

/* ---- requests ------------------------------------------------------------------------------- */

mstar__req *mstar__comm_req_at(const mstar_comm *comm, uint32_t slot)
{
    return (mstar__req *)mstar__vec_at(&comm->reqs, slot);
}

static uint64_t *rid_lookup(const mstar_comm *comm, const mstar_rid *rid)
{
    if (rid->is_str)
        return mstar__strmap_find(&comm->rid_str, rid->str, strlen(rid->str));
    return mstar__u64map_find(&comm->rid_int, (uint64_t)rid->num);
}

static mstar_status check_rid(const mstar_rid *rid)
{
    if (rid == NULL)
        return mstar_error_set(MSTAR_EINVAL, "request id is NULL");
    if (rid->is_str)
        return mstar_name_validate(rid->str, strnlen(rid->str, MSTAR_NAME_MAX + 1), "request id");
    return MSTAR_OK;
}

mstar_status mstar__comm_req(mstar_comm *comm, const mstar_rid *rid, bool create, uint32_t *slot)
{
    mstar_status st = check_rid(rid);
    if (st != MSTAR_OK)
        return st;
    uint64_t *hit = rid_lookup(comm, rid);
    if (hit != NULL) {
        *slot = (uint32_t)*hit;
        if (create)
            mstar__comm_req_at(comm, *slot)->open = true;
        return MSTAR_OK;
    }
    if (!create) {
        *slot = MSTAR__BK_NONE;
        return MSTAR_OK;
    }
    uint32_t s;
    if (comm->free_reqs.len > 0) {
        s = *(uint32_t *)mstar__vec_at(&comm->free_reqs, comm->free_reqs.len - 1);
    } else {
        s = (uint32_t)comm->reqs.len;
        if ((st = mstar__vec_reserve(&comm->reqs, comm->reqs.len + 1)) != MSTAR_OK)
            return st;
    }
    if ((st = mstar__bk_add_request(&comm->bk, s)) != MSTAR_OK)
        return st;
    st = rid->is_str ? mstar__strmap_put(&comm->rid_str, rid->str, strlen(rid->str), s)
                     : mstar__u64map_put(&comm->rid_int, (uint64_t)rid->num, s);
    if (st != MSTAR_OK)
        return st;
    mstar__req *r;
    if (s == comm->reqs.len) {
        comm->reqs.len++;
        r = mstar__comm_req_at(comm, s);
        memset(r, 0, sizeof(*r));
        req_init_state(r);
    } else {
        comm->free_reqs.len--;
        r = mstar__comm_req_at(comm, s); /* empty; its maps and arrays keep their room */
    }
    r->rid = *rid;
    r->used = true;
    r->open = true;
    *slot = s;
    return MSTAR_OK;
}

void mstar__comm_req_reset(mstar__req *r)
{
    r->shards.len = 0;
    for (size_t i = 0; i < r->fanins.len; i++)
        mstar__fanin_destroy(*(mstar__fanin **)mstar__vec_at(&r->fanins, i));
    r->fanins.len = 0;
    mstar__strmap_clear(&r->seen);
    r->tx.len = 0;
    r->rx.len = 0;
}

void mstar__comm_req_maybe_free(mstar_comm *comm, uint32_t slot)
{
    mstar__req *r = mstar__comm_req_at(comm, slot);
    if (!r->used || r->open || r->npending > 0 ||
        mstar__bk_req_first(&comm->bk, slot) != MSTAR__BK_NONE)
        return;
    if (r->rid.is_str)
        mstar__strmap_remove(&comm->rid_str, r->rid.str, strlen(r->rid.str), NULL);
    else
        mstar__u64map_remove(&comm->rid_int, (uint64_t)r->rid.num, NULL);
    /* The slot's next request reuses the room of this one's deliveries, unless it took more than
     * a few (a burst would otherwise hold its memory in the slot for good). */
    mstar__comm_req_reset(r);
    if (r->seen.cap > MSTAR__REQ_KEEP_SEEN) {
        req_free_state(r);
        req_init_state(r);
    }
    r->used = false;
    if (mstar__vec_push(&comm->free_reqs, &slot) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "request table: out of memory recycling a slot");
}

int32_t mstar__comm_shard_dim(const mstar_comm *comm, const mstar__req *r, uint32_t signal)
{
    for (size_t i = 0; i < r->shards.len; i++) {
        const mstar__shard_entry *e = mstar__vec_at(&r->shards, i);
        if (e->signal == signal)
            return e->dim;
    }
    return -1;
}

mstar_status mstar_comm_register_request(mstar_comm *comm, const mstar_rid *rid,
                                         const mstar_sharding_config *config)
{
    uint32_t n = config != NULL ? config->nsignals : 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *sig = config->signals != NULL ? config->signals[i] : NULL;
        if (sig == NULL || config->shard_dims == NULL)
            return mstar_error_set(MSTAR_EINVAL, "sharding config: signal %u or its dim is NULL",
                                   i);
        mstar_status st =
            mstar_name_validate(sig, strnlen(sig, MSTAR_NAME_MAX + 1), "sharding config signal");
        if (st != MSTAR_OK)
            return st;
        if (config->shard_dims[i] < -1 || config->shard_dims[i] >= MSTAR_MAX_NDIM)
            return mstar_error_set(MSTAR_EINVAL,
                                   "sharding config: shard dim %d of '%s' is "
                                   "outside -1..%d",
                                   (int)config->shard_dims[i], sig, MSTAR_MAX_NDIM - 1);
    }
    uint32_t slot;
    mstar_status st = mstar__comm_req(comm, rid, true, &slot);
    if (st != MSTAR_OK)
        return st;
    mstar__req *r = mstar__comm_req_at(comm, slot);
    if ((st = mstar__vec_reserve(&r->shards, n)) != MSTAR_OK)
        return st;
    r->shards.len = 0;
    for (uint32_t i = 0; i < n; i++) {
        mstar__shard_entry e = { 0, config->shard_dims[i] };
        if ((st = mstar__names_intern(&comm->names, config->signals[i], &e.signal)) != MSTAR_OK)
            return st;
        if (e.dim >= 0)
            MSTAR__ASSERT_OK(mstar__vec_push(&r->shards, &e)); /* I-11 */
    }
    return MSTAR_OK;
}

/* ---- messages ------------------------------------------------------------------------------- */

static mstar_status send_msg(mstar_comm *comm, const char *peer, mstar_msg *msg)
{
    if (comm->send == NULL)
        return mstar_error_set(MSTAR_ESTATE, "no send function to reach '%s'", peer);
    /* Every sender sees this manager as the message's author: a producer's ACK ledger settles
     * deliveries by `from`, and a Python callable or other custom sender would otherwise pass
     * it on empty (the mesh stamps its own entity over it, which is the same name). */
    memcpy(msg->from, comm->entity, sizeof(msg->from));
    return comm->send(comm->send_ctx, peer, msg);
}

/* Keep an ACK whose send failed for the next get_ready_tensors (it owns msg from here). When
 * the queue is full the oldest goes: the producer then holds those tensors until TTL or force
 * cleanup, as it would have before the queue existed. */
static void queue_ack(mstar_comm *comm, const char *peer, mstar_msg *msg)
{
    if (comm->ack_retry.len >= MSTAR__ACK_RETRY_MAX) {
        mstar__ack_retry *old = mstar__vec_at(&comm->ack_retry, 0);
        mstar_msg_clear(&old->msg);
        memmove(old, old + 1, (comm->ack_retry.len - 1) * sizeof(*old));
        comm->ack_retry.len--;
        comm->acks_lost++;
    }
    mstar__ack_retry *slot;
    if (mstar__vec_grow(&comm->ack_retry, 1, (void **)&slot) != MSTAR_OK) {
        mstar_msg_clear(msg);
        comm->acks_lost++;
        return;
    }
    snprintf(slot->peer, sizeof(slot->peer), "%s", peer);
    slot->msg = *msg;
    mstar_msg_init(msg, MSTAR_MSG_INVALID);
}

/* Send or queue `msg` to `peer`; the error of a failed send, after queueing it. */
static mstar_status send_or_queue(mstar_comm *comm, const char *peer, mstar_msg *msg)
{
    mstar_status st = send_msg(comm, peer, msg);
    if (st == MSTAR_OK)
        return MSTAR_OK;
    char r[MSTAR_RID_STRLEN];
    mstar_log(MSTAR_LOG_ERROR,
              "TENSOR_RECEIVED for request %s to '%s' not sent: %s (kept for "
              "the next get_ready_tensors)",
              mstar_rid_format(&msg->request_id, r), peer, mstar_last_error());
    st = mstar_error_wrap("TENSOR_RECEIVED to '%s'", peer);
    queue_ack(comm, peer, msg);
    return st;
}

/* Build and send the ACK of view `uuid` from `source`; false if it could not be built. */
static bool ack_one_view(mstar_comm *comm, const mstar_rid *rid, uint32_t source,
                         mstar_tensor_id uuid)
{
    mstar_tensor_info info;
    mstar_tensor_info_init(&info);
    info.uuid = uuid;
    mstar__str_copy(info.source_entity, sizeof(info.source_entity),
                    mstar__names_get(&comm->names, source));
    mstar_edge edge;
    mstar_edge_init(&edge);
    edge.ntensors = 1;
    edge.tensor_info = &info;
    const mstar_edge *list = &edge;
    bool built;
    mstar__comm_send_acks(comm, rid, &list, NULL, 1, &built);
    return built;
}

void mstar__comm_ack_view(mstar_comm *comm, const mstar__bk_rec *rec)
{
    if (!(rec->flags & MSTAR__BK_ACK_AT_FREE))
        return;
    MSTAR__ASSERT(comm->views_owing > 0);
    comm->views_owing--;
    if (comm->destroying)
        return;
    const mstar_rid *rid = &mstar__comm_req_at(comm, rec->req)->rid;
    if (ack_one_view(comm, rid, rec->source, rec->uuid))
        return; /* sent, or queued for a resend */
    mstar_log(MSTAR_LOG_ERROR, "ACK of a view not built (%s); owed to the next get_ready_tensors",
              mstar_last_error());
    mstar__ack_owed owed = { *rid, rec->source, rec->uuid };
    mstar_status st = mstar__vec_push(&comm->acks_owed, &owed);
    MSTAR__ASSERT(st == MSTAR_OK); /* I-27: room kept since the view was delivered */
    (void)st;
}

/* The owed ACKs of `rid` (all when NULL): each built and sent leaves the list. Short of memory,
 * the rest stay owed (`give_up`: they are counted lost instead). */
static mstar_status flush_owed(mstar_comm *comm, const mstar_rid *rid, bool give_up)
{
    mstar_status st = MSTAR_OK;
    size_t w = 0;
    for (size_t i = 0; i < comm->acks_owed.len; i++) {
        mstar__ack_owed *o = mstar__vec_at(&comm->acks_owed, i);
        bool mine = rid == NULL || mstar_rid_equal(&o->rid, rid);
        if (mine && st == MSTAR_OK) { /* after one fails for memory, the rest wait too */
            if (ack_one_view(comm, &o->rid, o->source, o->uuid))
                continue;
            st = mstar_error_wrap("owed ACK of a view");
        }
        if (mine && give_up) {
            comm->acks_lost++;
            continue;
        }
        *(mstar__ack_owed *)mstar__vec_at(&comm->acks_owed, w++) = *o;
    }
    comm->acks_owed.len = w;
    return st;
}

mstar_status mstar__comm_flush_acks(mstar_comm *comm)
{
    mstar_status first = comm->acks_owed.len > 0 ? flush_owed(comm, NULL, false) : MSTAR_OK;
    size_t n = comm->ack_retry.len;
    if (n == 0)
        return first; /* the common case: nothing queued, nothing allocated */
    mstar__ack_retry *q = malloc((n + 1) * sizeof(*q));
    if (q == NULL)
        return first != MSTAR_OK ? first : mstar_error_set(MSTAR_ENOMEM, "resending %zu ACKs", n);
    memcpy(q, comm->ack_retry.data, n * sizeof(*q));
    comm->ack_retry.len = 0; /* those that fail again are queued anew, in order */
    for (size_t i = 0; i < n; i++) {
        mstar_status st = send_or_queue(comm, q[i].peer, &q[i].msg);
        mstar_msg_clear(&q[i].msg);
        if (first == MSTAR_OK && st != MSTAR_OK)
            first = st;
    }
    free(q);
    return first;
}

void mstar__comm_settle_acks(mstar_comm *comm, const mstar_rid *rid)
{
    if (flush_owed(comm, rid, true) != MSTAR_OK) {
        char r[MSTAR_RID_STRLEN];
        mstar_log(MSTAR_LOG_WARN, "owed ACKs of views for request %s given up at its cleanup",
                  mstar_rid_format(rid, r));
    }
    size_t w = 0;
    for (size_t i = 0; i < comm->ack_retry.len; i++) {
        mstar__ack_retry *a = mstar__vec_at(&comm->ack_retry, i);
        if (!mstar_rid_equal(&a->msg.request_id, rid)) {
            *(mstar__ack_retry *)mstar__vec_at(&comm->ack_retry, w++) = *a;
            continue;
        }
        if (send_msg(comm, a->peer, &a->msg) != MSTAR_OK) {
            char r[MSTAR_RID_STRLEN];
            mstar_log(MSTAR_LOG_WARN,
                      "TENSOR_RECEIVED for request %s to '%s' given up at the request's "
                      "cleanup: %s",
                      mstar_rid_format(rid, r), a->peer, mstar_last_error());
            comm->acks_lost++;
        }
        mstar_msg_clear(&a->msg);
    }
    comm->ack_retry.len = w;
}

/* Build in *msg (initialised here; cleared on failure) the TENSOR_RECEIVED to `peer` for its
 * descriptors in `edges`. */
static mstar_status ack_build(const mstar_rid *rid, const char *peer,
                              const mstar_edge *const *edges, const bool *failed, uint32_t n,
                              mstar_msg *msg)
{
    mstar_msg_init(msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg->request_id = *rid;
    mstar__u64map at; /* uuid → index in msg->counts; no allocation for a few (small mode) */
    mstar__u64map_init(&at);
    mstar_status st = MSTAR_OK;
    int64_t delivered = 0;
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        for (uint32_t i = 0; i < edges[e]->ntensors && st == MSTAR_OK; i++) {
            const mstar_tensor_info *info = &edges[e]->tensor_info[i];
            if (strcmp(info->source_entity, peer) != 0)
                continue;
            delivered++;
            if (failed != NULL && failed[e]) {
                st = mstar_msg_add_uuid(msg, info->uuid);
                continue;
            }
            const uint64_t *idx = mstar__u64map_find(&at, info->uuid);
            if (idx != NULL) {
                msg->counts[*idx].count++;
                continue;
            }
            st = mstar__u64map_put(&at, info->uuid, msg->ncounts);
            if (st == MSTAR_OK)
                st = mstar_msg_add_count(msg, info->uuid, 1);
        }
    }
    mstar__u64map_free(&at);
    for (uint32_t k = 0; k < msg->ncounts; k++)
        delivered -= msg->counts[k].count;
    /* I-8: one ACK per delivery, nothing de-duplicated */
    MSTAR__ASSERT(st != MSTAR_OK || delivered == (int64_t)msg->nuuids);
    (void)delivered;
    if (st != MSTAR_OK)
        mstar_msg_clear(msg);
    return st;
}

void mstar__comm_ack_given_up(mstar_comm *comm, size_t nedges)
{
    mstar_log(MSTAR_LOG_ERROR, "ACKs of %zu edges given up: %s", nedges, mstar_last_error());
    comm->acks_lost++;
}

mstar_status mstar__comm_send_acks(mstar_comm *comm, const mstar_rid *rid,
                                   const mstar_edge *const *edges, const bool *failed, uint32_t n,
                                   bool *built)
{
    if (built != NULL)
        *built = false;
    /* Each distinct producer once, in order of first appearance, numbered in `peers` (no
     * allocation for a few short names: small mode). */
    mstar__strmap peers;
    mstar__strmap_init(&peers);
    uint32_t npeers = 0;
    mstar_status st = MSTAR_OK;
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        for (uint32_t i = 0; i < edges[e]->ntensors && st == MSTAR_OK; i++) {
            const char *peer = edges[e]->tensor_info[i].source_entity;
            size_t len = strnlen(peer, MSTAR_NAME_MAX + 1);
            if (strcmp(peer, comm->entity) != 0 && mstar__strmap_find(&peers, peer, len) == NULL)
                st = mstar__strmap_put(&peers, peer, len, npeers++);
        }
    }
    /* Every message is built before one is sent: short of memory, none goes, and the caller
     * can try again with nothing ACKed twice. Usually one producer: on the stack. */
    struct ack_out {
        const char *peer;
        mstar_msg msg;
    } outs_local[2];
    struct ack_out *outs = st == MSTAR_OK ? mstar__scratch_zalloc(outs_local, sizeof(outs_local),
                                                                  npeers, sizeof(*outs))
                                          : NULL;
    if (st == MSTAR_OK && outs == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "ACKs of %u edges", n);
    uint32_t nbuilt = 0;
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        for (uint32_t i = 0; i < edges[e]->ntensors && st == MSTAR_OK; i++) {
            const char *peer = edges[e]->tensor_info[i].source_entity;
            const uint64_t *num =
                mstar__strmap_find(&peers, peer, strnlen(peer, MSTAR_NAME_MAX + 1));
            if (num == NULL || *num != nbuilt)
                continue; /* this entity's own, or a producer met before */
            outs[nbuilt].peer = peer;
            st = ack_build(rid, peer, edges, failed, n, &outs[nbuilt].msg);
            nbuilt += st == MSTAR_OK;
        }
    }
    mstar__strmap_free(&peers);
    mstar_status first = st;
    for (uint32_t j = 0; j < nbuilt; j++) {
        if (st == MSTAR_OK) {
            mstar_status sent = send_or_queue(comm, outs[j].peer, &outs[j].msg);
            if (first == MSTAR_OK)
                first = sent;
        }
        mstar_msg_clear(&outs[j].msg);
    }
    mstar__scratch_free(outs, outs_local);
    if (built != NULL)
        *built = st == MSTAR_OK;
    return first;
}

/* ---- the ACK ledger ------------------------------------------------------------------------- */

mstar_status mstar_comm_note_sent(mstar_comm *comm, const char *peer, const mstar_msg *msg)
{
    if (comm == NULL || peer == NULL || msg == NULL)
        return mstar_error_set(MSTAR_EINVAL, "note_sent: an argument is NULL");
    if (strcmp(peer, comm->entity) == 0)
        return MSTAR_OK; /* this entity's own reads are never ACKed */
    uint32_t id = 0;
    for (uint32_t e = 0; e < msg->nedges; e++) {
        const mstar_edge *edge = &msg->edges[e];
        for (uint32_t i = 0; i < edge->ntensors; i++) {
            const mstar_tensor_info *info = &edge->tensor_info[i];
            uint32_t slot = mstar__bk_find(&comm->bk, info->uuid);
            if (strcmp(info->source_entity, comm->entity) != 0 || slot == MSTAR__BK_NONE ||
                (mstar__bk_at(&comm->bk, slot)->flags & MSTAR__BK_FOREIGN))
                continue;
            mstar_status st = id != 0 ? MSTAR_OK : mstar__names_intern(&comm->names, peer, &id);
            if (st == MSTAR_OK)
                st = mstar__bk_owe(&comm->bk, info->uuid, id, 1);
            if (st != MSTAR_OK)
                return mstar_error_wrap("note_sent to '%s'", peer);
            comm->ack_ledger = true;
        }
    }
    return MSTAR_OK;
}

mstar_status mstar_comm_accept_acks_for(mstar_comm *comm, const char *acker, const char *recipient)
{
    if (comm == NULL || acker == NULL || recipient == NULL)
        return mstar_error_set(MSTAR_EINVAL, "accept_acks_for: an argument is NULL");
    mstar_status st = mstar_name_validate(acker, strnlen(acker, MSTAR_NAME_MAX + 1), "acker");
    if (st == MSTAR_OK)
        st = mstar_name_validate(recipient, strnlen(recipient, MSTAR_NAME_MAX + 1), "recipient");
    uint32_t pair[2];
    if (st == MSTAR_OK)
        st = mstar__names_intern(&comm->names, acker, &pair[0]);
    if (st == MSTAR_OK)
        st = mstar__names_intern(&comm->names, recipient, &pair[1]);
    if (st == MSTAR_OK)
        st = mstar__vec_push(&comm->ack_aliases, pair);
    return st;
}

mstar_status mstar_comm_expect_entities(mstar_comm *comm, const char *const *entities, uint32_t n)
{
    if (comm == NULL || (n > 0 && entities == NULL))
        return mstar_error_set(MSTAR_EINVAL, "expect_entities: %s is NULL",
                               comm == NULL ? "comm" : "entities");
    mstar__strmap set;
    mstar__strmap_init(&set);
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        size_t len = entities[i] != NULL ? strnlen(entities[i], MSTAR_NAME_MAX + 1) : 0;
        st = entities[i] == NULL
                 ? mstar_error_set(MSTAR_EINVAL, "expect_entities: entities[%u] is NULL", i)
                 : mstar_name_validate(entities[i], len, "expected entity");
        if (st == MSTAR_OK)
            st = mstar__strmap_put(&set, entities[i], len, 1);
    }
    if (st != MSTAR_OK) {
        mstar__strmap_free(&set);
        return st;
    }
    mstar__strmap_free(&comm->expected);
    comm->expected = set;
    return MSTAR_OK;
}

/* Count a dropped ACK entry and log it, rate-limited to the 1st, 2nd, 4th, 8th... drop. */
static void drop_ack(mstar_comm *comm, const mstar_msg *msg, mstar_tensor_id uuid, int64_t count,
                     const char *why)
{
    uint64_t n = ++comm->acks_dropped;
    if ((n & (n - 1)) != 0)
        return;
    char r[MSTAR_RID_STRLEN];
    mstar_log(MSTAR_LOG_WARN,
              "TENSOR_RECEIVED from '%s' (request %s): count %lld for 0x%016llx dropped: %s "
              "(%llu dropped so far)",
              msg->from, mstar_rid_format(&msg->request_id, r), (long long)count,
              (unsigned long long)uuid, why, (unsigned long long)n);
}

bool mstar__comm_expects(const mstar_comm *comm, const char *entity)
{
    return mstar__strmap_len(&comm->expected) == 0 ||
           mstar__strmap_find(&comm->expected, entity, strnlen(entity, MSTAR_NAME_MAX + 1)) != NULL;
}

/* Take up to `count` of the deliveries of `uuid` that msg->from owes, itself or for a recipient
 * it acknowledges for (mstar_comm_accept_acks_for); how many were taken. */
static int64_t ledger_take(mstar_comm *comm, const mstar_msg *msg, mstar_tensor_id uuid,
                           int64_t count)
{
    uint64_t *peer =
        mstar__strmap_find(&comm->names.index, msg->from, strnlen(msg->from, MSTAR_NAME_MAX + 1));
    if (peer == NULL)
        return 0;
    int64_t taken = mstar__bk_owed_take(&comm->bk, uuid, (uint32_t)*peer, count);
    for (size_t i = 0; taken < count && i < comm->ack_aliases.len; i++) {
        const uint32_t *a = mstar__vec_at(&comm->ack_aliases, i);
        if (a[0] == (uint32_t)*peer)
            taken += mstar__bk_owed_take(&comm->bk, uuid, a[1], count - taken);
    }
    return taken;
}

/* How much of an ACK of `count` deliveries of `uuid` from msg->from to apply (I-28). Without a
 * ledger (nothing of this manager's was ever sent through the mesh or noted) the whole of it;
 * with one, what the sender still owes. A persisted tensor may be handed on by whoever it was
 * sent to (the api server's prompt goes through the conductor), so the rest is taken from its
 * UNPERSIST's grant: while the marker holds the tensor the rest is applied and charged to the
 * grant to come (K counts those reads too); once it cleared, an expected peer's rest is applied
 * up to what the grant has left. */
static int64_t ack_allowed(mstar_comm *comm, const mstar_msg *msg, mstar_tensor_id uuid,
                           int64_t count)
{
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE || !comm->ack_ledger)
        return count;
    int64_t taken = ledger_take(comm, msg, uuid, count);
    if (taken == count)
        return count;
    if (mstar__bk_at(&comm->bk, slot)->flags & MSTAR__BK_PERSIST) {
        if (mstar__bk_grant_add(&comm->bk, uuid, taken - count) != MSTAR_OK)
            mstar_log(MSTAR_LOG_WARN, "ACK ledger: %s; the grant of 0x%016llx is not reduced",
                      mstar_last_error(), (unsigned long long)uuid);
        return count;
    }
    if (mstar__comm_expects(comm, msg->from))
        taken += mstar__bk_grant_take(&comm->bk, uuid, count - taken);
    if (taken < count)
        drop_ack(comm, msg, uuid, count - taken,
                 taken == 0 ? "the sender was not sent that tensor or owes no ACK for it"
                            : "more than the sender was sent");
    return taken;
}

/* ACKs and UNPERSIST concern tensors this entity produced. A copy read from another entity is
 * held by this process's nodes alone; a message naming one is a peer's mistake and must not free
 * it under them. Unknown uuids pass (the bookkeeper logs them as no-ops). */
static bool produced_here(mstar_comm *comm, const mstar_msg *msg, mstar_tensor_id uuid)
{
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE || !(mstar__bk_at(&comm->bk, slot)->flags & MSTAR__BK_FOREIGN))
        return true;
    mstar_log(MSTAR_LOG_WARN,
              "%s from '%s' names 0x%016llx, a tensor this process read from "
              "another entity: ignored",
              mstar_msg_type_name(msg->type), msg->from, (unsigned long long)uuid);
    return false;
}

static void handle_ack(mstar_comm *comm, const mstar_msg *msg)
{
    for (uint32_t i = 0; i < msg->ncounts; i++) {
        const mstar_uuid_count *c = &msg->counts[i];
        if (c->count < 1 || c->count > MSTAR__BK_MAX_COUNT) {
            drop_ack(comm, msg, c->uuid, c->count, "a count must be 1..2^32");
            continue;
        }
        int64_t n =
            produced_here(comm, msg, c->uuid) ? ack_allowed(comm, msg, c->uuid, c->count) : 0;
        MSTAR__ASSERT(n >= 0 && n <= c->count); /* I-9, I-28: never more than the ACK names */
        if (n > 0)
            mstar__bk_dereference(&comm->bk, c->uuid, n, &comm->collected);
    }
    /* A failed read still ends that delivery: the consumer will not read it again. */
    for (uint32_t i = 0; i < msg->nuuids; i++)
        if (produced_here(comm, msg, msg->uuids[i]) &&
            ack_allowed(comm, msg, msg->uuids[i], 1) == 1)
            mstar__bk_dereference(&comm->bk, msg->uuids[i], 1, &comm->collected);
}

static void handle_unpersist(mstar_comm *comm, const mstar_msg *msg)
{
    char r[MSTAR_RID_STRLEN];
    for (uint32_t i = 0; i < msg->ncounts; i++) {
        const mstar_uuid_count *c = &msg->counts[i];
        if (c->count < 0 || c->count > MSTAR__BK_MAX_COUNT) {
            comm->bk.refused_ops++;
            mstar_log(MSTAR_LOG_WARN,
                      "UNPERSIST_TENSORS from '%s' (request %s): K %lld for "
                      "0x%016llx refused (K must be 0..2^32)",
                      msg->from, mstar_rid_format(&msg->request_id, r), (long long)c->count,
                      (unsigned long long)c->uuid);
            continue;
        }
        if (!produced_here(comm, msg, c->uuid) ||
            !mstar__bk_increment(&comm->bk, c->uuid, c->count))
            continue;
        /* I-2, I-3: K is added while the marker still holds the tensor, and adding never frees */
        MSTAR__ASSERT(mstar__bk_find(&comm->bk, c->uuid) != MSTAR__BK_NONE);
        /* The K reads may have been handed on to peers this manager never sent the tensor to:
         * their ACKs can land after the marker clears (I-28). */
        if (comm->ack_ledger && c->count > 0 &&
            mstar__bk_grant_add(&comm->bk, c->uuid, c->count) != MSTAR_OK)
            mstar_log(MSTAR_LOG_WARN,
                      "UNPERSIST_TENSORS from '%s': %s; ACKs of 0x%016llx from peers it was "
                      "not sent to will be dropped",
                      msg->from, mstar_last_error(), (unsigned long long)c->uuid);
        mstar__bk_set_persist(&comm->bk, c->uuid, false, &comm->collected);
    }
}

mstar_status mstar_comm_handle_message(mstar_comm *comm, const mstar_msg *msg)
{
    if (msg == NULL)
        return mstar_error_set(MSTAR_EINVAL, "handle_message: msg is NULL");
    if (msg->type == MSTAR_MSG_TENSOR_RECEIVED)
        handle_ack(comm, msg);
    else if (msg->type == MSTAR_MSG_UNPERSIST_TENSORS)
        handle_unpersist(comm, msg);
    else
        return mstar_error_set(MSTAR_EINVAL, "handle_message: %s is not a transport message",
                               mstar_msg_type_name(msg->type) ? mstar_msg_type_name(msg->type)
                                                              : "?");
    mstar__comm_collect(comm);
    return MSTAR_OK;
}

mstar_status mstar_comm_get_security_stats(const mstar_comm *comm, mstar_comm_security_stats *out)
{
    if (comm == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "security_stats: %s is NULL",
                               comm == NULL ? "comm" : "out");
    memset(out, 0, sizeof(*out));
    out->acks_dropped = comm->acks_dropped;
    out->counts_refused = comm->bk.refused_ops;
    out->acks_queued = comm->ack_retry.len;
    out->acks_lost = comm->acks_lost;
    out->ack_ledger = comm->ack_ledger;
    return MSTAR_OK;
}

/* ---- profiling ------------------------------------------------------------------------------ */

/* A malloc'd copy of the request's TX (or RX) records; none for an unknown request. */
static mstar_status copy_out(mstar_comm *comm, const mstar_rid *rid, bool tx, void **out,
                             uint32_t *n)
{
    uint32_t slot;
    mstar_status st = mstar__comm_req(comm, rid, false, &slot);
    if (st != MSTAR_OK)
        return st;
    *out = NULL;
    *n = 0;
    if (slot == MSTAR__BK_NONE)
        return MSTAR_OK;
    const mstar__req *r = mstar__comm_req_at(comm, slot);
    const mstar__vec *v = tx ? &r->tx : &r->rx;
    if (v->len == 0)
        return MSTAR_OK;
    void *copy = malloc(v->len * v->elsize);
    if (copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "profiling records");
    memcpy(copy, v->data, v->len * v->elsize);
    *out = copy;
    *n = (uint32_t)v->len;
    return MSTAR_OK;
}

mstar_status mstar_comm_get_tx_info(mstar_comm *comm, const mstar_rid *rid, mstar_tx_info **out,
                                    uint32_t *n)
{
    return copy_out(comm, rid, true, (void **)out, n);
}

mstar_status mstar_comm_get_rx_info(mstar_comm *comm, const mstar_rid *rid, mstar_rx_info **out,
                                    uint32_t *n)
{
    return copy_out(comm, rid, false, (void **)out, n);
}
