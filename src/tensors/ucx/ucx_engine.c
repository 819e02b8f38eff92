/*
 * ucx_engine.c — the UCX engine: context, worker, listener, the progress thread, registration.
 *
 * The progress thread owns the UCP worker. It sleeps in epoll on two fds — the worker's event fd
 * (armed with ucp_worker_arm) and an eventfd that other threads write after queueing a batch or
 * asking it to stop — so an idle engine costs nothing, and a producer whose reads are emulated by
 * UCX over TCP (get) or answered by active messages (AM) makes progress without its owner's help.
 *
 * Registration runs on the caller's thread: the context is created thread-safe
 * (mt_workers_shared), and the region tables are under e->lock, which the progress thread also
 * takes to check an AM request against them.
 */
#include "tensors/ucx/ucx_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* How long shutdown waits for endpoints to close before it destroys the worker anyway. */
#define SHUTDOWN_GRACE_NS (UINT64_C(5) * 1000000000)

mstar_status mstar__ucx_error(ucs_status_t us, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    mstar_status st;
    switch (us) {
    case UCS_ERR_NO_MEMORY:
        st = MSTAR_ENOMEM;
        break;
    case UCS_ERR_CANCELED:
        st = MSTAR_ECANCELED;
        break;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_UNSUPPORTED:
        st = MSTAR_ENOTSUP;
        break;
    case UCS_ERR_BUSY:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_INVALID_ADDR:
        st = MSTAR_EIO;
        break;
    default:
        st = MSTAR_EREMOTE;
        break;
    }
    return mstar_error_set(st, "%s: UCX says %s", what, ucs_status_string(us));
}

static void wake(mstar__ucx_engine *e)
{
    uint64_t one = 1;
    ssize_t n = write(e->wake_fd, &one, sizeof(one));
    (void)n; /* EAGAIN means the counter is already non-zero: the thread will wake anyway */
}

/* ---- the progress thread -------------------------------------------------------------------- */

static void drain_wake_fd(mstar__ucx_engine *e)
{
    uint64_t v;
    ssize_t n = read(e->wake_fd, &v, sizeof(v));
    (void)n;
}

/* Take the queued batches, start them (or fail them when stopping). True when asked to stop. */
static bool take_queue(mstar__ucx_engine *e)
{
    pthread_mutex_lock(&e->lock);
    mstar__ucx_batch *q = e->queue;
    e->queue = NULL;
    bool stop = e->stopping;
    pthread_mutex_unlock(&e->lock);
    while (q != NULL) {
        mstar__ucx_batch *next = q->next;
        if (stop)
            mstar__ucx_batch_fail(e, q, MSTAR_ECANCELED, "ucx engine is shutting down");
        else
            mstar__ucx_batch_start(e, q);
        q = next;
    }
    return stop;
}

static void progress_all(mstar__ucx_engine *e)
{
    while (ucp_worker_progress(e->worker) != 0) {
    }
    mstar__ucx_peer_reap(e);
}

/* Sleep until the worker has events or someone writes the eventfd (at most timeout_ms). */
static void wait_events(mstar__ucx_engine *e, int timeout_ms)
{
    if (e->reap_needed)
        return; /* a peer failed or closed since the last reap: nothing will wake us for it */
    ucs_status_t us = ucp_worker_arm(e->worker);
    if (us == UCS_ERR_BUSY)
        return; /* events arrived meanwhile: progress again */
    if (us != UCS_OK) {
        mstar_log(MSTAR_LOG_ERROR, "ucx: ucp_worker_arm: %s", ucs_status_string(us));
        timeout_ms = 1; /* keep polling rather than spin on an arm that fails */
    }
    struct epoll_event ev[2];
    int n = epoll_wait(e->epoll_fd, ev, 2, timeout_ms);
    if (n < 0 && errno != EINTR)
        mstar_log(MSTAR_LOG_ERROR, "ucx: epoll_wait: %s", strerror(errno));
    drain_wake_fd(e);
}

/* On the progress thread, after a stop request: no new connections, fail what waits for a
 * reply, close every endpoint and progress until they are closed (bounded). */
static void shutdown_worker(mstar__ucx_engine *e)
{
    e->shutting_down = true;
    if (e->listener != NULL) {
        ucp_listener_destroy(e->listener);
        e->listener = NULL;
    }
    mstar__ucx_read_fail_pending(e, NULL, MSTAR_ECANCELED, "ucx engine is shutting down");
    mstar__ucx_peer_close_all(e);
    uint64_t deadline = mstar__now_ns() + SHUTDOWN_GRACE_NS;
    for (;;) {
        take_queue(e);
        progress_all(e);
        if (!mstar__ucx_peer_any(e))
            break;
        if (mstar__now_ns() > deadline) {
            mstar_log(MSTAR_LOG_WARN,
                      "ucx: endpoints still closing after %llu s; destroying "
                      "the worker anyway",
                      (unsigned long long)(SHUTDOWN_GRACE_NS / 1000000000));
            break;
        }
        wait_events(e, 10);
    }
}

static void *progress_main(void *arg)
{
    mstar__ucx_engine *e = arg;
    for (;;) {
        if (take_queue(e))
            break;
        progress_all(e);
        wait_events(e, mstar__ucx_batch_expire(e));
    }
    shutdown_worker(e);
    return NULL;
}

/* ---- create / destroy ----------------------------------------------------------------------- */

static mstar_status open_listener(mstar__ucx_engine *e)
{
    struct sockaddr_storage addr;
    socklen_t addr_len;
    mstar_status st = mstar__ucx_address_resolve(e->cfg.address, e->cfg.port, &addr, &addr_len);
    if (st != MSTAR_OK)
        return st;
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&addr;
    lp.sockaddr.addrlen = addr_len;
    lp.conn_handler.cb = mstar__ucx_peer_on_conn_request;
    lp.conn_handler.arg = e;
    ucs_status_t us = ucp_listener_create(e->worker, &lp, &e->listener);
    if (us != UCS_OK)
        return mstar__ucx_error(us, "ucx: listening on %s port %u", e->cfg.address,
                                (unsigned)e->cfg.port);
    ucp_listener_attr_t attr;
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    us = ucp_listener_query(e->listener, &attr);
    if (us != UCS_OK)
        return mstar__ucx_error(us, "ucx: querying the listener's address");
    return mstar__ucx_session_format((const struct sockaddr *)&attr.sockaddr, e->session,
                                     sizeof(e->session));
}

static mstar_status open_worker(mstar__ucx_engine *e)
{
    ucp_config_t *config;
    mstar_status st = mstar__ucx_config_read(e->cfg.transport, &config);
    if (st != MSTAR_OK)
        return st;
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask =
        UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1; /* registration runs on callers' threads */
    params.name = "mstar";
    ucs_status_t us = ucp_init(&params, config, &e->ctx);
    ucp_config_release(config);
    if (us != UCS_OK) {
        e->ctx = NULL;
        return mstar__ucx_error(us, "ucx: initialising UCP for transport %s",
                                mstar__ucx_transport_name(e->cfg.transport));
    }
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE; /* only the progress thread touches it */
    us = ucp_worker_create(e->ctx, &wp, &e->worker);
    if (us != UCS_OK) {
        e->worker = NULL;
        return mstar__ucx_error(us, "ucx: creating the worker");
    }
    st = mstar__ucx_read_setup(e);
    if (st != MSTAR_OK)
        return st;
    int worker_fd;
    us = ucp_worker_get_efd(e->worker, &worker_fd);
    if (us != UCS_OK)
        return mstar__ucx_error(us, "ucx: the worker's event fd");
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    if (epoll_ctl(e->epoll_fd, EPOLL_CTL_ADD, worker_fd, &ev) != 0 ||
        epoll_ctl(e->epoll_fd, EPOLL_CTL_ADD, e->wake_fd, &ev) != 0)
        return mstar_error_set(MSTAR_EIO, "ucx: epoll_ctl: %s", strerror(errno));
    return MSTAR_OK;
}

/* Batches still waiting once the worker is gone can never finish on their own: fail them, and
 * wait until every waiting reader has left e->lock. */
static void release_waiters(mstar__ucx_engine *e)
{
    pthread_mutex_lock(&e->lock);
    for (mstar__ucx_batch *b = e->waiting; b != NULL; b = b->wnext) {
        if (!b->done) {
            b->done = true;
            pthread_cond_broadcast(mstar__ucx_batch_cond(e, b));
            if (b->status == MSTAR_OK) {
                b->status = MSTAR_ECANCELED;
                snprintf(b->error, sizeof(b->error),
                         "ucx read from %s: ucx engine destroyed "
                         "during the read",
                         b->session);
            }
        }
    }
    pthread_cond_broadcast(&e->cond);
    while (e->waiting != NULL)
        pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

void mstar__ucx_engine_destroy(mstar__ucx_engine *e)
{
    if (e == NULL)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->lock);
        e->stopping = true;
        pthread_mutex_unlock(&e->lock);
        wake(e);
        /* Its threads' reads fail from here on, so this returns once their current batches
         * are failed by the progress thread. */
        mstar__ucx_reader_destroy(e->reader);
        pthread_join(e->thread, NULL);
    }
    if (e->listener != NULL)
        ucp_listener_destroy(e->listener);
    if (e->worker != NULL)
        ucp_worker_destroy(e->worker); /* callbacks of requests it purges run here */
    mstar__ucx_peer_free_all(e);
    release_waiters(e);
    mstar__ucx_regions_free(e);
    if (e->ctx != NULL)
        ucp_cleanup(e->ctx);
    mstar__strmap_free(&e->sessions);
    mstar__u64map_free(&e->pending);
    if (e->epoll_fd >= 0)
        close(e->epoll_fd);
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static mstar_status check_timeout(double seconds, const char *what)
{
    if (!(seconds >= 0 && seconds <= MSTAR__UCX_READ_TIMEOUT_MAX)) /* NaN fails too */
        return mstar_error_set(MSTAR_EINVAL, "ucx engine: %s %g s is not in 0..%g (0 = none)", what,
                               seconds, MSTAR__UCX_READ_TIMEOUT_MAX);
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_create(const mstar__ucx_config *cfg, mstar__ucx_engine **out)
{
    if (cfg == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx engine: cfg and out are required");
    if (cfg->transport != MSTAR__UCX_TCP && cfg->transport != MSTAR__UCX_RDMA)
        return mstar_error_set(MSTAR_EINVAL, "ucx engine: cfg.transport %d is not tcp or rdma",
                               (int)cfg->transport);
    if (cfg->read_protocol != MSTAR__UCX_READ_AM && cfg->read_protocol != MSTAR__UCX_READ_GET)
        return mstar_error_set(MSTAR_EINVAL, "ucx engine: cfg.read_protocol %d is not am or get",
                               (int)cfg->read_protocol);
    mstar_status st = check_timeout(cfg->read_timeout_s, "cfg.read_timeout_s");
    if (st == MSTAR_OK && cfg->transport == MSTAR__UCX_RDMA)
        st = mstar__ucx_rdma_available();
    if (st != MSTAR_OK)
        return st;
    mstar__ucx_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx engine: out of memory");
    e->cfg = *cfg;
    e->cfg.address[MSTAR__UCX_ADDRESS_MAX] = '\0';
    atomic_init(&e->read_timeout_ns, (uint64_t)(cfg->read_timeout_s * 1e9));
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    mstar__ucx_regions_init(e);
    mstar__u64map_init(&e->pending);
    mstar__strmap_init(&e->sessions);
    if (e->wake_fd < 0 || e->epoll_fd < 0)
        st = mstar_error_set(MSTAR_EIO, "ucx engine: eventfd/epoll: %s", strerror(errno));
    if (st == MSTAR_OK)
        st = open_worker(e);
    if (st == MSTAR_OK)
        st = open_listener(e);
    if (st == MSTAR_OK) {
        int rc = pthread_create(&e->thread, NULL, progress_main, e);
        if (rc != 0)
            st = mstar_error_set(MSTAR_EIO, "ucx engine: starting the progress thread: %s",
                                 strerror(rc));
        else
            e->thread_started = true;
    }
    if (st != MSTAR_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", mstar_last_error());
        mstar__ucx_engine_destroy(e);
        return mstar_error_set(st, "%s", msg);
    }
    mstar_log(MSTAR_LOG_INFO, "ucx: engine %s up (transport %s, reads by %s)", e->session,
              mstar__ucx_transport_name(e->cfg.transport),
              mstar__ucx_read_protocol_name(e->cfg.read_protocol));
    *out = e;
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_reader(mstar__ucx_engine *e, mstar__ucx_reader **out)
{
    if (e == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx engine reader: engine and out are required");
    mstar_status st = MSTAR_OK;
    pthread_mutex_lock(&e->lock);
    if (e->reader == NULL)
        st = mstar__ucx_reader_create(e, MSTAR__UCX_READER_THREADS, MSTAR__UCX_READER_BATCH,
                                      &e->reader);
    if (st == MSTAR_OK)
        *out = e->reader;
    pthread_mutex_unlock(&e->lock);
    return st;
}

const char *mstar__ucx_engine_session_id(const mstar__ucx_engine *e)
{
    return e->session;
}

const mstar__ucx_config *mstar__ucx_engine_config(const mstar__ucx_engine *e)
{
    return &e->cfg;
}

mstar_status mstar__ucx_engine_set_read_timeout(mstar__ucx_engine *e, double seconds)
{
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx engine: engine is required");
    mstar_status st = check_timeout(seconds, "read timeout");
    if (st == MSTAR_OK)
        atomic_store(&e->read_timeout_ns, (uint64_t)(seconds * 1e9));
    return st;
}

void mstar__ucx_engine_get_stats(mstar__ucx_engine *e, mstar__ucx_engine_stats *out)
{
    pthread_mutex_lock(&e->lock);
    out->regions = mstar__u64map_len(&e->regions_by_ptr);
    pthread_mutex_unlock(&e->lock);
    out->peers = atomic_load(&e->stat_peers);
    out->accepted = atomic_load(&e->stat_accepted);
    out->reads_active = atomic_load(&e->stat_active);
    out->reads_done = atomic_load(&e->stat_done);
    out->batches = atomic_load(&e->stat_batches);
    out->am_refused = atomic_load(&e->stat_refused);
}

/* ---- reads ---------------------------------------------------------------------------------- */

/* Check one read against its key before anything touches the network. Without a key only
 * the AM protocol can read (the producer finds the region by address). */
static mstar_status prepare_op(mstar__ucx_op *op, const mstar__ucx_read_info *info, size_t i,
                               mstar__ucx_read_protocol proto)
{
    char what[64];
    snprintf(what, sizeof(what), "read %zu: remote_key", i);
    op->local = info->local_ptr;
    op->raddr = info->remote_addr;
    op->len = info->nbytes;
    if (op->len == 0)
        return MSTAR_OK; /* nothing to read: nothing to check but the session */
    if (op->local == NULL)
        return mstar_error_set(MSTAR_EINVAL, "read %zu: local_ptr is NULL for %llu bytes", i,
                               (unsigned long long)op->len);
    uint64_t end;
    if (!mstar__add_u64(op->raddr, op->len, &end))
        return mstar_error_set(MSTAR_EPROTO, "read %zu: address 0x%llx + %llu bytes overflows", i,
                               (unsigned long long)op->raddr, (unsigned long long)op->len);
    if (info->remote_key_len == 0 && proto == MSTAR__UCX_READ_AM)
        return MSTAR_OK; /* region_id 0: look it up by address */
    if (info->remote_key_len == 0)
        return mstar_error_set(MSTAR_EPROTO,
                               "%s is missing: the get protocol needs the producer's key (the AM "
                               "protocol reads by address)",
                               what);
    mstar_status st = mstar__ucx_key_parse(info->remote_key, info->remote_key_len, what, &op->key);
    if (st != MSTAR_OK)
        return st;
    if (op->raddr < op->key.base || end > op->key.base + op->key.len)
        return mstar_error_set(MSTAR_EPROTO,
                               "read %zu: [0x%llx, +%llu) is outside the key's region [0x%llx, "
                               "+%llu)",
                               i, (unsigned long long)op->raddr, (unsigned long long)op->len,
                               (unsigned long long)op->key.base, (unsigned long long)op->key.len);
    return MSTAR_OK;
}

static mstar_status make_batch(const mstar__ucx_read_info *infos, size_t n,
                               mstar__ucx_read_protocol proto, mstar__ucx_batch **out)
{
    const char *session = infos[0].session;
    for (size_t i = 1; i < n; i++)
        if (infos[i].session == NULL || session == NULL || strcmp(infos[i].session, session) != 0)
            return mstar_error_set(MSTAR_EINVAL,
                                   "ucx read: read %zu names another session than "
                                   "read 0 (one batch, one session)",
                                   i);
    mstar__ucx_batch *b = calloc(1, sizeof(*b));
    mstar__ucx_op *ops = calloc(n, sizeof(*ops));
    if (b == NULL || ops == NULL) {
        free(b);
        free(ops);
        return mstar_error_set(MSTAR_ENOMEM, "ucx read: out of memory for %zu reads", n);
    }
    b->ops = ops;
    b->n = n;
    b->proto = proto;
    b->session = session;
    mstar_status st =
        mstar__ucx_session_parse(session, "source_session_id", &b->addr, &b->addr_len);
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        ops[i].batch = b;
        st = prepare_op(&ops[i], &infos[i], i, proto);
    }
    if (st != MSTAR_OK) {
        free(ops);
        free(b);
        return st;
    }
    *out = b;
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_read_begin(mstar__ucx_engine *e, mstar__ucx_read_protocol proto,
                                          const mstar__ucx_read_info *infos, size_t n,
                                          mstar__ucx_batch **out)
{
    *out = NULL;
    if (e == NULL || infos == NULL || n == 0)
        return mstar_error_set(MSTAR_EINVAL, "ucx read: engine and infos are required");
    if (proto != MSTAR__UCX_READ_AM && proto != MSTAR__UCX_READ_GET)
        return mstar_error_set(MSTAR_EINVAL, "ucx read: protocol %d is not am or get", (int)proto);
    mstar__ucx_batch *b = NULL;
    mstar_status st = make_batch(infos, n, proto, &b);
    if (st != MSTAR_OK)
        return st;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        free(b->ops);
        free(b);
        return mstar_error_set(MSTAR_ECANCELED, "ucx read: the engine is shutting down");
    }
    b->next = e->queue;
    e->queue = b;
    b->wnext = e->waiting;
    e->waiting = b;
    pthread_mutex_unlock(&e->lock);
    wake(e);
    *out = b;
    return MSTAR_OK;
}

size_t mstar__ucx_engine_read_wait_any(mstar__ucx_engine *e, mstar__ucx_batch *const *batches,
                                       size_t n, pthread_cond_t *wake, bool (*interrupt)(void *ctx),
                                       void *ctx)
{
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < n; i++)
        batches[i]->wake = wake; /* their finish wakes this caller alone */
    size_t i = 0;
    for (;;) {
        for (i = 0; i < n && !batches[i]->done; i++) {
        }
        if (i < n || (interrupt != NULL && interrupt(ctx)))
            break;
        pthread_cond_wait(wake, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return i;
}

void mstar__ucx_engine_read_kick(mstar__ucx_engine *e, pthread_cond_t *wake)
{
    pthread_mutex_lock(&e->lock);
    pthread_cond_signal(wake);
    pthread_mutex_unlock(&e->lock);
}

mstar_status mstar__ucx_engine_read_end(mstar__ucx_engine *e, mstar__ucx_batch *b)
{
    pthread_mutex_lock(&e->lock);
    while (!b->done)
        pthread_cond_wait(mstar__ucx_batch_cond(e, b), &e->lock);
    mstar__ucx_batch **pp = &e->waiting;
    while (*pp != b)
        pp = &(*pp)->wnext;
    *pp = b->wnext;
    if (e->waiting == NULL)
        pthread_cond_broadcast(&e->cond); /* destroy may be waiting for the last reader */
    pthread_mutex_unlock(&e->lock);
    mstar_status st = b->status;
    if (st != MSTAR_OK)
        mstar_error_set(st, "%s", b->error);
    free(b->ops);
    free(b);
    return st;
}

mstar_status mstar__ucx_engine_read_with(mstar__ucx_engine *e, mstar__ucx_read_protocol proto,
                                         const mstar__ucx_read_info *infos, size_t n)
{
    if (e == NULL || (infos == NULL && n > 0))
        return mstar_error_set(MSTAR_EINVAL, "ucx read: engine and infos are required");
    if (proto != MSTAR__UCX_READ_AM && proto != MSTAR__UCX_READ_GET)
        return mstar_error_set(MSTAR_EINVAL, "ucx read: protocol %d is not am or get", (int)proto);
    if (n == 0)
        return MSTAR_OK;
    mstar__ucx_batch *b;
    mstar_status st = mstar__ucx_engine_read_begin(e, proto, infos, n, &b);
    return st == MSTAR_OK ? mstar__ucx_engine_read_end(e, b) : st;
}

mstar_status mstar__ucx_engine_read(mstar__ucx_engine *e, const mstar__ucx_read_info *infos,
                                    size_t n)
{
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx read: engine is required");
    return mstar__ucx_engine_read_with(e, e->cfg.read_protocol, infos, n);
}
