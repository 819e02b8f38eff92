/*
 * ucx_peer.c — endpoints of a UCX engine (progress thread only).
 *
 * Outgoing endpoints are cached per session id and created by socket address on first use.
 * Endpoints the listener accepts serve the other direction: a consumer's AM requests arrive on
 * them and the replies leave on them. Every endpoint runs in UCX's peer error mode, so a dead or
 * unreachable peer fails the requests on it instead of hanging them; the error callback then
 * takes the peer out of the cache (the next read of that session connects anew) and fails the AM
 * reads that were waiting for its reply. The endpoint itself is closed by the reap that follows,
 * outside the callback, and the peer is freed once it is closed and no read uses it.
 */
#include "tensors/ucx/ucx_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void uncache(mstar__ucx_engine *e, mstar__ucx_peer *p)
{
    if (!p->cached)
        return;
    mstar__strmap_remove(&e->sessions, p->session, strlen(p->session), NULL);
    p->cached = false;
    atomic_fetch_sub(&e->stat_peers, 1);
}

void mstar__ucx_peer_fail(mstar__ucx_engine *e, mstar__ucx_peer *p, mstar_status st,
                          const char *why)
{
    if (p->failed)
        return;
    p->failed = true;
    p->fail_status = e->shutting_down ? MSTAR_ECANCELED : st;
    e->reap_needed = true;
    snprintf(p->error, sizeof(p->error), "%s", why);
    if (p->accepted)
        mstar_log(MSTAR_LOG_DEBUG, "ucx %s: a consumer's connection ended: %s", e->session, why);
    else if (!e->shutting_down) /* reads that it fails report it; this is for the record */
        mstar_log(MSTAR_LOG_INFO, "ucx %s: connection to %s ended: %s", e->session, p->session,
                  why);
    uncache(e, p);
    mstar__ucx_read_fail_pending(e, p, p->fail_status, p->error);
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t us)
{
    mstar__ucx_peer *p = arg;
    char why[128];
    (void)ep;
    snprintf(why, sizeof(why), "connection failed: %s", ucs_status_string(us));
    mstar__ucx_peer_fail(p->e, p, MSTAR_EREMOTE, why);
}

static void on_closed(void *request, ucs_status_t us, void *user_data)
{
    mstar__ucx_peer *p = user_data;
    (void)us;
    p->ep = NULL;
    p->e->reap_needed = true;
    ucp_request_free(request);
}

/* Force mode: a closing engine or a failed peer has nothing left to flush. */
static void start_close(mstar__ucx_peer *p)
{
    if (p->closing || p->ep == NULL)
        return;
    p->closing = true;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask =
        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    prm.cb.send = on_closed;
    prm.user_data = p;
    void *req = ucp_ep_close_nbx(p->ep, &prm);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        p->ep = NULL;
}

static mstar__ucx_peer *new_peer(mstar__ucx_engine *e)
{
    mstar__ucx_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->e = e;
    return p;
}

static void link_peer(mstar__ucx_engine *e, mstar__ucx_peer *p)
{
    p->next = e->peers;
    e->peers = p;
}

mstar__ucx_peer *mstar__ucx_peer_get(mstar__ucx_engine *e, mstar__ucx_batch *b)
{
    size_t len = strlen(b->session);
    uint64_t *found = mstar__strmap_find(&e->sessions, b->session, len);
    if (found != NULL)
        return (mstar__ucx_peer *)(uintptr_t)*found;
    mstar__ucx_peer *p = new_peer(e);
    if (p == NULL) {
        snprintf(b->error, sizeof(b->error), "ucx session %s: out of memory", b->session);
        b->status = MSTAR_ENOMEM;
        return NULL;
    }
    snprintf(p->session, sizeof(p->session), "%s", b->session);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&b->addr;
    ep.sockaddr.addrlen = b->addr_len;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = p;
    ucs_status_t us = ucp_ep_create(e->worker, &ep, &p->ep);
    if (us != UCS_OK) {
        free(p);
        b->status = mstar__ucx_error(us, "ucx session %s: connecting", b->session);
        snprintf(b->error, sizeof(b->error), "%s", mstar_last_error());
        return NULL;
    }
    link_peer(e, p); /* from here on the reap closes and frees it */
    if (mstar__strmap_put(&e->sessions, p->session, len, (uint64_t)(uintptr_t)p) != MSTAR_OK) {
        mstar__ucx_peer_fail(e, p, MSTAR_ENOMEM, "out of memory for the session cache");
        b->status = MSTAR_ENOMEM;
        snprintf(b->error, sizeof(b->error), "ucx session %s: out of memory", b->session);
        return NULL;
    }
    p->cached = true;
    atomic_fetch_add(&e->stat_peers, 1);
    return p;
}

void mstar__ucx_peer_on_conn_request(ucp_conn_request_h req, void *arg)
{
    mstar__ucx_engine *e = arg;
    mstar__ucx_peer *p = e->shutting_down ? NULL : new_peer(e);
    if (p == NULL) {
        ucp_listener_reject(e->listener, req);
        return;
    }
    p->accepted = true;
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = req;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = p;
    ucs_status_t us = ucp_ep_create(e->worker, &ep, &p->ep);
    if (us != UCS_OK) {
        mstar_log(MSTAR_LOG_WARN, "ucx %s: accepting a connection: %s", e->session,
                  ucs_status_string(us));
        free(p);
        return;
    }
    atomic_fetch_add(&e->stat_accepted, 1);
    link_peer(e, p);
}

void mstar__ucx_peer_op_done(mstar__ucx_peer *p)
{
    if (--p->ops == 0 && (p->failed || p->closing))
        p->e->reap_needed = true;
}

void mstar__ucx_peer_reap(mstar__ucx_engine *e)
{
    if (!e->reap_needed)
        return;
    e->reap_needed = false;
    mstar__ucx_peer **pp = &e->peers;
    while (*pp != NULL) {
        mstar__ucx_peer *p = *pp;
        if (p->failed)
            start_close(p); /* purges its requests; may finish at once (freed just below) */
        if ((p->failed || p->closing) && p->ep == NULL && p->ops == 0) {
            *pp = p->next;
            uncache(e, p);
            if (p->accepted)
                atomic_fetch_sub(&e->stat_accepted, 1);
            free(p);
            continue;
        }
        pp = &p->next;
    }
}

void mstar__ucx_peer_close_all(mstar__ucx_engine *e)
{
    for (mstar__ucx_peer *p = e->peers; p != NULL; p = p->next) {
        uncache(e, p);
        start_close(p);
    }
    e->reap_needed = true;
}

bool mstar__ucx_peer_any(const mstar__ucx_engine *e)
{
    return e->peers != NULL;
}

void mstar__ucx_peer_free_all(mstar__ucx_engine *e)
{
    while (e->peers != NULL) {
        mstar__ucx_peer *p = e->peers;
        e->peers = p->next;
        uncache(e, p);
        if (p->accepted)
            atomic_fetch_sub(&e->stat_accepted, 1);
        free(p);
    }
}
