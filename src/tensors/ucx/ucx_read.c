/*
 * ucx_read.c — the two read protocols, on the progress thread.
 *
 * get: unpack the producer's UCX key on the endpoint and ucp_get_nbx the range. Over TCP UCX has
 * no remote read, so it emulates one with its own active messages, answered by the producer's
 * progress thread; UCX checks nothing there beyond the key. Over RDMA the NIC reads and checks.
 *
 * AM: the consumer sends {req_id, region_id, addr, len}; the producer looks the region up by id
 * in its own table, refuses anything outside a live region, and replies {req_id, code, len} with
 * the bytes as data — eager for small ones, UCX's rendezvous (the producer's memory put straight
 * into the consumer's buffer) for large ones. The consumer matches the reply by req_id and by the
 * endpoint it came on, and lands the bytes in the op's buffer.
 *
 * An op is finished once its result is decided and no UCX request references it or its buffer
 * any more; only then does it count towards its batch, and the last op wakes the batch's waiter,
 * which owns (and frees) the batch. So after the waiter returns, nothing writes its buffers.
 */
#include "tensors/ucx/ucx_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- finishing ops -------------------------------------------------------------------------- */

static void batch_done(mstar__ucx_engine *e, mstar__ucx_batch *b)
{
    pthread_mutex_lock(&e->lock);
    b->done = true;
    pthread_cond_broadcast(mstar__ucx_batch_cond(e, b));
    pthread_mutex_unlock(&e->lock);
}

static void op_finish(mstar__ucx_engine *e, mstar__ucx_op *op)
{
    op->finished = true;
    if (op->rkey != NULL) {
        ucp_rkey_destroy(op->rkey);
        op->rkey = NULL;
    }
    if (op->peer != NULL) {
        mstar__ucx_peer_op_done(op->peer);
        op->peer = NULL;
        atomic_fetch_sub(&e->stat_active, 1);
        atomic_fetch_add(&e->stat_done, 1);
    }
    mstar__ucx_batch *b = op->batch;
    if (--b->remaining == 0) {
        if (b->started) {
            *(b->aprev != NULL ? &b->aprev->anext : &e->active) = b->anext;
            if (b->anext != NULL)
                b->anext->aprev = b->aprev;
        }
        batch_done(e, b); /* the waiter frees b: touch nothing of it after this */
    }
}

static void op_settle(mstar__ucx_engine *e, mstar__ucx_op *op)
{
    if (op->decided && op->outstanding == 0 && !op->finished)
        op_finish(e, op);
}

static void op_decide(mstar__ucx_engine *e, mstar__ucx_op *op, mstar_status st)
{
    if (op->decided)
        return;
    op->decided = true;
    op->status = st;
    if (op->req_id != 0) {
        mstar__u64map_remove(&e->pending, op->req_id, NULL);
        op->req_id = 0;
    }
}

static void op_fail(mstar__ucx_engine *e, mstar__ucx_op *op, mstar_status st, const char *fmt, ...)
    MSTAR_PRINTF(4, 5);

/* Decide an op as failed; the first failure of a batch names the read and the session. Once
 * its peer has failed, every failure on it is that one (UCX then cancels what was in flight). */
static void op_fail(mstar__ucx_engine *e, mstar__ucx_op *op, mstar_status st, const char *fmt, ...)
{
    if (op->decided)
        return;
    mstar__ucx_batch *b = op->batch;
    if (op->peer != NULL && op->peer->failed)
        st = op->peer->fail_status;
    else if (e->shutting_down && st == MSTAR_EREMOTE)
        st = MSTAR_ECANCELED;
    op_decide(e, op, st);
    if (b->status == MSTAR_OK) {
        char msg[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (op->peer != NULL && op->peer->failed)
            snprintf(msg, sizeof(msg), "%s", op->peer->error);
        b->status = st;
        snprintf(b->error, sizeof(b->error), "ucx read %zu of %llu bytes from %s: %s",
                 (size_t)(op - b->ops), (unsigned long long)op->len, b->session, msg);
    }
}

static mstar_status status_of(ucs_status_t us)
{
    return us == UCS_ERR_CANCELED ? MSTAR_ECANCELED : MSTAR_EREMOTE;
}

void mstar__ucx_batch_fail(mstar__ucx_engine *e, mstar__ucx_batch *b, mstar_status st,
                           const char *msg)
{
    if (b->status == MSTAR_OK) {
        b->status = st;
        snprintf(b->error, sizeof(b->error), "ucx read from %s: %s", b->session, msg);
    }
    batch_done(e, b);
}

void mstar__ucx_read_fail_pending(mstar__ucx_engine *e, const mstar__ucx_peer *peer,
                                  mstar_status st, const char *msg)
{
    mstar__vec victims;
    mstar__vec_init(&victims, sizeof(mstar__ucx_op *));
    size_t it = 0;
    uint64_t id, val;
    while (mstar__u64map_next(&e->pending, &it, &id, &val)) {
        mstar__ucx_op *op = (mstar__ucx_op *)(uintptr_t)val;
        if ((peer == NULL || op->peer == peer) && mstar__vec_push(&victims, &op) != MSTAR_OK)
            mstar_log(MSTAR_LOG_ERROR, "ucx: out of memory failing reads; some may wait for "
                                       "their endpoint's close");
    }
    for (size_t i = 0; i < victims.len; i++) {
        mstar__ucx_op *op = *(mstar__ucx_op **)mstar__vec_at(&victims, i);
        op_fail(e, op, st, "%s", msg);
        op_settle(e, op);
    }
    mstar__vec_free(&victims);
}

/* ---- get ------------------------------------------------------------------------------------ */

static void on_get_done(void *request, ucs_status_t us, void *user_data)
{
    mstar__ucx_op *op = user_data;
    mstar__ucx_engine *e = op->peer->e;
    ucp_request_free(request);
    op->outstanding--;
    if (us == UCS_OK)
        op_decide(e, op, MSTAR_OK);
    else
        op_fail(e, op, status_of(us), "get: %s", ucs_status_string(us));
    op_settle(e, op);
}

static void start_get(mstar__ucx_engine *e, mstar__ucx_op *op)
{
    /* UCX reads its key without a length; the envelope's check bounds what it walks, and the
     * zeroed tail bounds what a transport's own unpack might read past its declared size. */
    uint8_t padded[MSTAR_REMOTE_KEY_MAX + 512];
    memset(padded, 0, sizeof(padded));
    memcpy(padded, op->key.ucx_rkey, op->key.ucx_rkey_len);
    ucs_status_t us = ucp_ep_rkey_unpack(op->peer->ep, padded, &op->rkey);
    if (us != UCS_OK) {
        op->rkey = NULL;
        op_fail(e, op, MSTAR_EPROTO, "remote_key: UCX cannot unpack it: %s", ucs_status_string(us));
        return;
    }
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = on_get_done;
    prm.user_data = op;
    void *req = ucp_get_nbx(op->peer->ep, op->local, op->len, op->raddr, op->rkey, &prm);
    if (req == NULL)
        op_decide(e, op, MSTAR_OK);
    else if (UCS_PTR_IS_ERR(req))
        op_fail(e, op, status_of(UCS_PTR_STATUS(req)), "get: %s",
                ucs_status_string(UCS_PTR_STATUS(req)));
    else
        op->outstanding++;
}

/* ---- AM, consumer side ---------------------------------------------------------------------- */

static void on_request_sent(void *request, ucs_status_t us, void *user_data)
{
    mstar__ucx_op *op = user_data;
    mstar__ucx_engine *e = op->peer->e;
    ucp_request_free(request);
    op->outstanding--;
    if (us != UCS_OK)
        op_fail(e, op, status_of(us), "sending the read request: %s", ucs_status_string(us));
    op_settle(e, op);
}

static void start_am(mstar__ucx_engine *e, mstar__ucx_op *op)
{
    op->req_id = ++e->next_req_id;
    if (mstar__u64map_put(&e->pending, op->req_id, (uint64_t)(uintptr_t)op) != MSTAR_OK) {
        op->req_id = 0;
        op_fail(e, op, MSTAR_ENOMEM, "out of memory");
        return;
    }
    mstar__ucx_put_u64(op->req_hdr, op->req_id);
    mstar__ucx_put_u64(op->req_hdr + 8, op->key.region_id);
    mstar__ucx_put_u64(op->req_hdr + 16, op->raddr);
    mstar__ucx_put_u64(op->req_hdr + 24, op->len);
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_REPLY;
    prm.cb.send = on_request_sent;
    prm.user_data = op;
    void *req = ucp_am_send_nbx(op->peer->ep, MSTAR__UCX_AM_READ_REQ, op->req_hdr,
                                sizeof(op->req_hdr), NULL, 0, &prm);
    if (UCS_PTR_IS_ERR(req))
        op_fail(e, op, status_of(UCS_PTR_STATUS(req)), "sending the read request: %s",
                ucs_status_string(UCS_PTR_STATUS(req)));
    else if (req != NULL)
        op->outstanding++;
}

static void on_reply_data(void *request, ucs_status_t us, size_t length, void *user_data)
{
    mstar__ucx_op *op = user_data;
    mstar__ucx_engine *e = op->peer->e;
    ucp_request_free(request);
    op->outstanding--;
    if (us != UCS_OK)
        op_fail(e, op, status_of(us), "receiving the reply: %s", ucs_status_string(us));
    else if (length != op->len)
        op_fail(e, op, MSTAR_EPROTO, "the reply carried %zu bytes", length);
    else
        op_decide(e, op, MSTAR_OK);
    op_settle(e, op);
}

static const char *refusal_reason(uint32_t code)
{
    switch (code) {
    case MSTAR__UCX_REPLY_NOT_REGISTERED:
        return "no registered region has the key's id (unregistered?)";
    case MSTAR__UCX_REPLY_OUT_OF_RANGE:
        return "the range is not inside the registered region";
    case MSTAR__UCX_REPLY_NO_REGION:
        return "no registered region holds the range";
    default:
        return "unknown reason";
    }
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    mstar__ucx_engine *e = arg;
    if (header_length != MSTAR__UCX_AM_REPLY_LEN) {
        mstar_log(MSTAR_LOG_WARN, "ucx %s: dropped a read reply with a %zu-byte header", e->session,
                  header_length);
        return UCS_OK;
    }
    const uint8_t *h = header;
    uint64_t req_id = mstar__ucx_get_u64(h);
    uint32_t code = (uint32_t)mstar__ucx_get_u64(h + 8);
    uint64_t len = mstar__ucx_get_u64(h + 16);
    uint64_t found;
    mstar__ucx_op *op = NULL;
    if (mstar__u64map_get(&e->pending, req_id, &found))
        op = (mstar__ucx_op *)(uintptr_t)found;
    ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    if (op == NULL || from != op->peer->ep) {
        /* A reply to a read that already failed or was never ours: drop it. */
        mstar_log(MSTAR_LOG_DEBUG, "ucx %s: dropped a reply to unknown read %llu", e->session,
                  (unsigned long long)req_id);
        return UCS_OK;
    }
    op->req_id = 0;
    mstar__u64map_remove(&e->pending, req_id, NULL);
    if (code != MSTAR__UCX_REPLY_OK) {
        op_fail(e, op, MSTAR_EREMOTE, "the producer refused: %s", refusal_reason(code));
    } else if (len != op->len || length != op->len) {
        op_fail(e, op, MSTAR_EPROTO, "the reply says %llu bytes and carries %zu",
                (unsigned long long)len, length);
    } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ucp_request_param_t prm;
        memset(&prm, 0, sizeof(prm));
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        prm.cb.recv_am = on_reply_data;
        prm.user_data = op;
        void *req = ucp_am_recv_data_nbx(e->worker, data, op->local, op->len, &prm);
        if (req == NULL) {
            op_decide(e, op, MSTAR_OK);
        } else if (UCS_PTR_IS_ERR(req)) {
            op_fail(e, op, status_of(UCS_PTR_STATUS(req)), "receiving the reply: %s",
                    ucs_status_string(UCS_PTR_STATUS(req)));
        } else {
            op->outstanding++;
            return UCS_INPROGRESS; /* UCX owns `data` now */
        }
    } else {
        memcpy(op->local, data, length);
        op_decide(e, op, MSTAR_OK);
    }
    op_settle(e, op);
    return UCS_OK;
}

/* ---- AM, producer side ---------------------------------------------------------------------- */

typedef struct reply_ctx {
    mstar__ucx_engine *e;
    mstar__ucx_region *region; /* NULL for a refusal */
    uint8_t hdr[MSTAR__UCX_AM_REPLY_LEN];
} reply_ctx;

static void reply_done(reply_ctx *r, ucs_status_t us)
{
    if (us != UCS_OK)
        mstar_log(MSTAR_LOG_DEBUG, "ucx %s: a read reply ended with %s", r->e->session,
                  ucs_status_string(us));
    if (r->region != NULL) {
        pthread_mutex_lock(&r->e->lock);
        if (--r->region->sending == 0)
            pthread_cond_broadcast(&r->e->cond); /* unregister may be waiting */
        pthread_mutex_unlock(&r->e->lock);
    }
    free(r);
}

static void on_reply_sent(void *request, ucs_status_t us, void *user_data)
{
    ucp_request_free(request);
    reply_done(user_data, us);
}

/* Look the range up — in the region the key named, or, without a key, in any region that holds
 * it — and on success pin that region (sending++) until the reply is sent. */
static uint32_t check_range(mstar__ucx_engine *e, uint64_t region_id, uint64_t addr, uint64_t len,
                            mstar__ucx_region **out)
{
    uint32_t code = MSTAR__UCX_REPLY_OK;
    pthread_mutex_lock(&e->lock);
    mstar__ucx_region *r = region_id != 0 ? mstar__ucx_region_by_id(e, region_id)
                                          : mstar__ucx_region_containing(e, addr, len);
    if (r == NULL)
        code = region_id != 0 ? MSTAR__UCX_REPLY_NOT_REGISTERED : MSTAR__UCX_REPLY_NO_REGION;
    else if (!mstar__ucx_region_covers(r, addr, len))
        code = MSTAR__UCX_REPLY_OUT_OF_RANGE;
    if (code == MSTAR__UCX_REPLY_OK) {
        r->sending++;
        *out = r;
    }
    pthread_mutex_unlock(&e->lock);
    return code;
}

static ucs_status_t on_request(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    mstar__ucx_engine *e = arg;
    (void)data;
    ucp_ep_h reply_ep =
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    if (header_length != MSTAR__UCX_AM_REQ_LEN || length != 0 || reply_ep == NULL) {
        atomic_fetch_add(&e->stat_refused, 1);
        mstar_log(MSTAR_LOG_WARN,
                  "ucx %s: dropped a malformed read request (header %zu bytes, data %zu, "
                  "reply endpoint %s)",
                  e->session, header_length, length, reply_ep ? "yes" : "no");
        return UCS_OK;
    }
    const uint8_t *h = header;
    uint64_t req_id = mstar__ucx_get_u64(h);
    uint64_t region_id = mstar__ucx_get_u64(h + 8);
    uint64_t addr = mstar__ucx_get_u64(h + 16);
    uint64_t len = mstar__ucx_get_u64(h + 24);
    reply_ctx *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        mstar_log(MSTAR_LOG_ERROR,
                  "ucx %s: out of memory answering a read request; the "
                  "consumer's read waits for the connection to end",
                  e->session);
        return UCS_OK;
    }
    r->e = e;
    uint32_t code = check_range(e, region_id, addr, len, &r->region);
    if (code != MSTAR__UCX_REPLY_OK) {
        atomic_fetch_add(&e->stat_refused, 1);
        mstar_log(MSTAR_LOG_WARN, "ucx %s: refused a read of [0x%llx, +%llu) (region id %llu): %s",
                  e->session, (unsigned long long)addr, (unsigned long long)len,
                  (unsigned long long)region_id, refusal_reason(code));
    }
    mstar__ucx_put_u64(r->hdr, req_id);
    mstar__ucx_put_u64(r->hdr + 8, code);
    mstar__ucx_put_u64(r->hdr + 16, code == MSTAR__UCX_REPLY_OK ? len : 0);
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    /* REPLY: the consumer checks which endpoint answered. The protocol is chosen here rather
     * than by UCX's threshold, which on TCP sends 16 KiB by rendezvous (measured: 3x the
     * latency of eager at 16-64 KiB). */
    prm.flags = UCP_AM_SEND_FLAG_REPLY |
                (len <= e->cfg.am_eager_max ? UCP_AM_SEND_FLAG_EAGER : UCP_AM_SEND_FLAG_RNDV);
    prm.cb.send = on_reply_sent;
    prm.user_data = r;
    void *req = ucp_am_send_nbx(reply_ep, MSTAR__UCX_AM_READ_REPLY, r->hdr, sizeof(r->hdr),
                                r->region != NULL ? (void *)(uintptr_t)addr : NULL,
                                r->region != NULL ? len : 0, &prm);
    if (!UCS_PTR_IS_PTR(req))
        reply_done(r, UCS_PTR_STATUS(req));
    return UCS_OK;
}

/* ---- batches -------------------------------------------------------------------------------- */

void mstar__ucx_batch_start(mstar__ucx_engine *e, mstar__ucx_batch *b)
{
    b->remaining = b->n;
    atomic_fetch_add(&e->stat_batches, 1);
    mstar__ucx_peer *peer = NULL;
    for (size_t i = 0; i < b->n; i++) {
        if (b->ops[i].len > 0) {
            peer = mstar__ucx_peer_get(e, b);
            break;
        }
    }
    b->started = true;
    b->peer = peer;
    b->timeout_ns = atomic_load(&e->read_timeout_ns);
    if (b->timeout_ns > 0)
        b->deadline_ns = mstar__now_ns() + b->timeout_ns;
    b->aprev = NULL;
    b->anext = e->active;
    if (e->active != NULL)
        e->active->aprev = b;
    e->active = b;
    /* Each op below finishes at once or later; the batch cannot complete before its last op has
     * started, and nothing touches b after that op. */
    size_t n = b->n;
    for (size_t i = 0; i < n; i++) {
        mstar__ucx_op *op = &b->ops[i];
        if (op->len == 0) {
            op_decide(e, op, MSTAR_OK);
        } else if (peer == NULL) {
            op_decide(e, op, b->status);
        } else {
            op->peer = peer;
            peer->ops++;
            atomic_fetch_add(&e->stat_active, 1);
            if (b->proto == MSTAR__UCX_READ_GET)
                start_get(e, op);
            else
                start_am(e, op);
        }
        op_settle(e, op);
    }
}

/* A peer to take for dead, and the timeout its batch ran out of (for the message). */
typedef struct expired {
    mstar__ucx_peer *peer;
    uint64_t timeout_ns;
} expired;

int mstar__ucx_batch_expire(mstar__ucx_engine *e)
{
    uint64_t now = mstar__now_ns(), next = 0;
    mstar__vec dead; /* peers to fail: failing one finishes batches, so not while walking */
    mstar__vec_init(&dead, sizeof(expired));
    for (mstar__ucx_batch *b = e->active; b != NULL; b = b->anext) {
        if (b->deadline_ns == 0 || b->peer == NULL || b->peer->failed)
            continue; /* no deadline, or already failing */
        expired x = { b->peer, b->timeout_ns };
        if (now < b->deadline_ns)
            next = (next == 0 || b->deadline_ns < next) ? b->deadline_ns : next;
        else if (mstar__vec_push(&dead, &x) != MSTAR_OK)
            next = now + 1000000; /* out of memory: try again in a millisecond */
    }
    for (size_t i = 0; i < dead.len; i++) {
        const expired *x = mstar__vec_at(&dead, i);
        char why[128];
        snprintf(why, sizeof(why),
                 "no answer within %g s (MSTAR_UCX_READ_TIMEOUT_S); closing the connection",
                 (double)x->timeout_ns / 1e9);
        mstar__ucx_peer_fail(e, x->peer, MSTAR_ETIMEDOUT, why); /* no-op for a repeated peer */
    }
    mstar__vec_free(&dead);
    if (next == 0)
        return -1;
    return (int)((next - now) / 1000000 + 1);
}

mstar_status mstar__ucx_read_setup(mstar__ucx_engine *e)
{
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.arg = e;
    hp.id = MSTAR__UCX_AM_READ_REQ;
    hp.cb = on_request;
    ucs_status_t us = ucp_worker_set_am_recv_handler(e->worker, &hp);
    if (us == UCS_OK) {
        hp.id = MSTAR__UCX_AM_READ_REPLY;
        hp.cb = on_reply;
        us = ucp_worker_set_am_recv_handler(e->worker, &hp);
    }
    if (us != UCS_OK)
        return mstar__ucx_error(us, "ucx: setting the AM handlers");
    return MSTAR_OK;
}
