/*
 * ucx_config.c — what the UCX engine is configured with, and the session ids it speaks.
 *
 * A session id is "ip:port" of the producer's listener, numeric only: it arrives in descriptors
 * from other processes, and a name lookup driven by a peer would be a slow, blocking call on the
 * progress thread. The host side may be IPv6 ("fd00::2:5000" splits at the last colon), which
 * keeps the id inside the name alphabet (no brackets).
 *
 * UCX reads its own UCX_* variables; the only one set here is UCX_TLS, chosen by the transport,
 * and only when the user has not set it. mstar__ucx_engine_create_from_env, at the end, makes the
 * communication manager's engine from these knobs.
 */
#include "tensors/ucx/ucx_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* UCX_TLS per transport. tcp: TCP alone, so that the bytes really cross sockets (no shared
 * memory shortcut between processes of one host). rdma: the verbs transports (rc, ud in UCX's
 * aliases, accelerated variants included when built), plus self for reads within one engine. */
static const char *const tls_for_transport[] = { "tcp", "rc,ud,self" };

void mstar__ucx_config_init(mstar__ucx_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->transport = MSTAR__UCX_TCP;
    cfg->read_protocol = MSTAR__UCX_READ_AM;
    snprintf(cfg->address, sizeof(cfg->address), "127.0.0.1");
    cfg->port = 0;
    cfg->am_eager_max = MSTAR__UCX_AM_EAGER_MAX_DEFAULT;
    cfg->read_timeout_s = MSTAR__UCX_READ_TIMEOUT_DEFAULT;
}

mstar_status mstar__ucx_config_from_env(mstar__ucx_config *cfg)
{
    static const char *const protos[] = { "am", "get" };
    mstar__ucx_config next = *cfg;
    const char *addr = mstar_env_get_string("MSTAR_UCX_ADDRESS", NULL);
    if (addr != NULL) {
        if (strlen(addr) > MSTAR__UCX_ADDRESS_MAX)
            return mstar_error_set(MSTAR_EINVAL, "MSTAR_UCX_ADDRESS=%s is longer than %d bytes",
                                   addr, MSTAR__UCX_ADDRESS_MAX);
        snprintf(next.address, sizeof(next.address), "%s", addr);
    }
    int64_t port;
    mstar_status st = mstar_env_get_int("MSTAR_UCX_PORT", next.port, 0, 65535, &port);
    if (st != MSTAR_OK)
        return st;
    next.port = (uint16_t)port;
    size_t proto;
    st = mstar_env_get_choice("MSTAR_UCX_READ_PROTOCOL", protos, 2, (size_t)next.read_protocol,
                              &proto);
    if (st != MSTAR_OK)
        return st;
    next.read_protocol = (mstar__ucx_read_protocol)proto;
    int64_t eager;
    st = mstar_env_get_int("MSTAR_UCX_AM_EAGER_MAX", (int64_t)next.am_eager_max, 0,
                           INT64_C(1) << 30, &eager);
    if (st != MSTAR_OK)
        return st;
    next.am_eager_max = (uint64_t)eager;
    st = mstar_env_get_double("MSTAR_UCX_READ_TIMEOUT_S", next.read_timeout_s, 0,
                              MSTAR__UCX_READ_TIMEOUT_MAX, &next.read_timeout_s);
    if (st != MSTAR_OK)
        return st;
    *cfg = next;
    return MSTAR_OK;
}

const char *mstar__ucx_transport_name(mstar__ucx_transport t)
{
    return t == MSTAR__UCX_RDMA ? "rdma" : "tcp";
}

const char *mstar__ucx_read_protocol_name(mstar__ucx_read_protocol p)
{
    return p == MSTAR__UCX_READ_GET ? "get" : "am";
}

mstar_status mstar__ucx_session_parse(const char *session, const char *what,
                                      struct sockaddr_storage *out, socklen_t *out_len)
{
    if (session == NULL)
        return mstar_error_set(MSTAR_EPROTO, "%s is missing", what);
    size_t len = strnlen(session, MSTAR_NAME_MAX + 1);
    if (mstar_name_validate(session, len, what) != MSTAR_OK) {
        char msg[256]; /* the message of a name error, re-issued as a protocol error */
        snprintf(msg, sizeof(msg), "%s", mstar_last_error());
        return mstar_error_set(MSTAR_EPROTO, "%s", msg);
    }
    const char *colon = strrchr(session, ':');
    if (colon == NULL || colon == session || colon[1] == '\0')
        return mstar_error_set(MSTAR_EPROTO, "%s '%s' is not of the form ip:port", what, session);
    unsigned long port = 0;
    for (const char *p = colon + 1; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || port > 65535)
            return mstar_error_set(MSTAR_EPROTO, "%s '%s': the port is not a number", what,
                                   session);
        port = port * 10 + (unsigned long)(*p - '0');
    }
    if (port == 0 || port > 65535)
        return mstar_error_set(MSTAR_EPROTO, "%s '%s': port %lu is out of range (1..65535)", what,
                               session, port);
    char host[INET6_ADDRSTRLEN];
    size_t hlen = (size_t)(colon - session);
    if (hlen >= sizeof(host))
        return mstar_error_set(MSTAR_EPROTO, "%s '%s': the host is not a numeric address", what,
                               session);
    memcpy(host, session, hlen);
    host[hlen] = '\0';
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *out_len = sizeof(*v4);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *out_len = sizeof(*v6);
    } else {
        return mstar_error_set(MSTAR_EPROTO, "%s '%s': '%s' is not a numeric IPv4/IPv6 address",
                               what, session, host);
    }
    return MSTAR_OK;
}

static bool is_wildcard(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(a);
}

mstar_status mstar__ucx_address_resolve(const char *address, uint16_t port,
                                        struct sockaddr_storage *out, socklen_t *out_len)
{
    if (address == NULL || address[0] == '\0')
        return mstar_error_set(MSTAR_EINVAL, "ucx address is empty");
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(address, NULL, &hints, &res);
    if (rc != 0)
        return mstar_error_set(MSTAR_EIO, "ucx address '%s' does not resolve: %s", address,
                               gai_strerror(rc));
    mstar_status st = MSTAR_OK;
    if (res->ai_family != AF_INET && res->ai_family != AF_INET6) {
        st = mstar_error_set(MSTAR_EINVAL, "ucx address '%s' is not an IP address", address);
    } else if (is_wildcard(res->ai_addr)) {
        st = mstar_error_set(MSTAR_EINVAL,
                             "ucx address '%s' is a wildcard; give one peers can reach (it "
                             "becomes the session id)",
                             address);
    } else if (res->ai_family == AF_INET6 &&
               ((struct sockaddr_in6 *)res->ai_addr)->sin6_scope_id != 0) {
        st = mstar_error_set(MSTAR_EINVAL,
                             "ucx address '%s' is a scoped (link-local) IPv6 address; use a "
                             "global one",
                             address);
    } else {
        memset(out, 0, sizeof(*out));
        memcpy(out, res->ai_addr, res->ai_addrlen);
        *out_len = (socklen_t)res->ai_addrlen;
        if (res->ai_family == AF_INET)
            ((struct sockaddr_in *)out)->sin_port = htons(port);
        else
            ((struct sockaddr_in6 *)out)->sin6_port = htons(port);
    }
    freeaddrinfo(res);
    return st;
}

mstar_status mstar__ucx_session_format(const struct sockaddr *sa, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN];
    uint16_t port;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
        port = ntohs(v4->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
        port = ntohs(v6->sin6_port);
    } else {
        return mstar_error_set(MSTAR_EINVAL, "ucx listener: address family %d", sa->sa_family);
    }
    int n = snprintf(buf, cap, "%s:%u", host, (unsigned)port);
    if (n < 0 || (size_t)n >= cap)
        return mstar_error_set(MSTAR_ERANGE, "ucx session id for %s is too long", host);
    return MSTAR_OK;
}

mstar_status mstar__ucx_config_read(mstar__ucx_transport transport, ucp_config_t **out)
{
    ucp_config_t *config = NULL;
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK)
        return mstar__ucx_error(us, "ucx: reading UCX_* settings");
    const char *user_tls = getenv("UCX_TLS");
    if (user_tls != NULL && user_tls[0] != '\0') {
        mstar_log(MSTAR_LOG_INFO, "ucx: UCX_TLS=%s set by the user; transport %s not applied",
                  user_tls, mstar__ucx_transport_name(transport));
    } else {
        us = ucp_config_modify(config, "TLS", tls_for_transport[transport]);
        if (us != UCS_OK) {
            ucp_config_release(config);
            return mstar__ucx_error(us, "ucx: setting TLS=%s", tls_for_transport[transport]);
        }
    }
    *out = config;
    return MSTAR_OK;
}

mstar_status mstar__ucx_rdma_available(void)
{
    /* libibverbs enumerates the same directory; an empty or missing one means no device. */
    static const char dir_path[] = "/sys/class/infiniband";
    DIR *d = opendir(dir_path);
    int n = 0;
    if (d != NULL) {
        struct dirent *ent;
        while ((ent = readdir(d)) != NULL)
            if (ent->d_name[0] != '.')
                n++;
        closedir(d);
    }
    if (n == 0)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "tensor comm protocol rdma: no RDMA verbs device on this machine "
                               "(%s is empty or missing); use tcp",
                               dir_path);
    return MSTAR_OK;
}

mstar_status mstar__ucx_engine_create_from_env(bool rdma, mstar__ucx_engine **out)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar_status st = mstar__ucx_config_from_env(&cfg);
    if (st != MSTAR_OK)
        return st;
    cfg.transport = rdma ? MSTAR__UCX_RDMA : MSTAR__UCX_TCP;
    return mstar__ucx_engine_create(&cfg, out);
}
