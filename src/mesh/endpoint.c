/*
 * endpoint.c — where an entity's inbox lives: the transport knobs, the TCP port map and the
 * entity index derived from it.
 *
 * Port map (architecture.md "Control mesh"): base for api_server, +1 conductor, +2
 * api_server_preprocess_worker, +100+r worker_<r>, any other name +1000 + (byte sum mod 1000).
 * The same offset is the entity's index in tensor ids, so one rule serves both and a deployment
 * whose TCP ports do not collide has unique tensor ids too (docs/architecture.md).
 */
#include "mesh_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const transport_names[] = { "ipc", "tcp" };
/* MSTAR_MESH_RING, in the order of MSTAR__RING_OFF, _ON, _AUTO. */
static const char *const ring_names[] = { "0", "1", "AUTO" };

static bool ipv6_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
           c == '.';
}

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-';
}

/* A host a peer can connect to: a name or IPv4 address ([A-Za-z0-9.-]), or an IPv6 address in
 * brackets. Anything else would change the meaning of the endpoint string. */
static mstar_status host_validate(const char *host, const char *what)
{
    size_t len = strlen(host);
    if (len == 0 || len > MSTAR__TCP_HOST_MAX)
        return mstar_error_set(MSTAR_EINVAL, "%s='%s': a host is 1..%d bytes", what, host,
                               MSTAR__TCP_HOST_MAX);
    bool ipv6 = host[0] == '[';
    if (ipv6 && (len < 3 || host[len - 1] != ']'))
        return mstar_error_set(MSTAR_EINVAL, "%s='%s': an IPv6 address needs brackets", what, host);
    size_t first = ipv6 ? 1 : 0, end = ipv6 ? len - 1 : len;
    for (size_t i = first; i < end; i++) {
        if (!(ipv6 ? ipv6_char(host[i]) : host_char(host[i])))
            return mstar_error_set(MSTAR_EINVAL,
                                   "%s='%s': byte 0x%02x at %zu (a host is a name or address of "
                                   "A-Z a-z 0-9 . -, or an IPv6 address in brackets)",
                                   what, host, (unsigned char)host[i], i);
    }
    return MSTAR_OK;
}

/* An absolute directory whose socket paths fit a Unix socket address; stored without trailing
 * slashes. The length check here is a first one; the endpoint check covers the entity too. */
static mstar_status ipc_dir_set(mstar__mesh_config *cfg, const char *dir, const char *what)
{
    size_t len = strlen(dir);
    if (dir[0] != '/')
        return mstar_error_set(MSTAR_EINVAL,
                               "%s='%s' is not an absolute path (processes with another working "
                               "directory would not meet)",
                               what, dir);
    while (len > 0 && dir[len - 1] == '/')
        len--;
    if (len + strlen("/x.ipc") > MSTAR__IPC_PATH_MAX)
        return mstar_error_set(MSTAR_EINVAL,
                               "%s='%s' is too long: a socket path is at most %d bytes", what, dir,
                               MSTAR__IPC_PATH_MAX);
    memcpy(cfg->ipc_dir, dir, len);
    cfg->ipc_dir[len] = '\0';
    return MSTAR_OK;
}

static mstar_status resolve_transport(const mstar_mesh_options *opts, mstar_mesh_transport *out)
{
    if (opts != NULL && opts->transport != MSTAR_MESH_DEFAULT) {
        if (opts->transport != MSTAR_MESH_IPC && opts->transport != MSTAR_MESH_TCP)
            return mstar_error_set(MSTAR_EINVAL,
                                   "mesh options: transport %d is not MSTAR_MESH_DEFAULT, "
                                   "MSTAR_MESH_IPC or MSTAR_MESH_TCP",
                                   (int)opts->transport);
        *out = opts->transport;
        return MSTAR_OK;
    }
    size_t index;
    mstar_status st =
        mstar_env_get_choice("MSTAR_ZMQ_TRANSPORT", transport_names,
                             sizeof(transport_names) / sizeof(transport_names[0]), 0, &index);
    if (st != MSTAR_OK)
        return st;
    *out = index == 0 ? MSTAR_MESH_IPC : MSTAR_MESH_TCP;
    return MSTAR_OK;
}

static mstar_status resolve_tcp(const mstar_mesh_options *opts, mstar__mesh_config *cfg)
{
    bool host_from_opts = opts != NULL && opts->tcp_host != NULL;
    const char *host =
        host_from_opts ? opts->tcp_host
                       : mstar_env_get_string("MSTAR_ZMQ_TCP_HOST", MSTAR__MESH_DEFAULT_TCP_HOST);
    mstar_status st =
        host_validate(host, host_from_opts ? "mesh options: tcp_host" : "MSTAR_ZMQ_TCP_HOST");
    if (st != MSTAR_OK)
        return st;
    snprintf(cfg->tcp_host, sizeof(cfg->tcp_host), "%s", host);

    if (opts != NULL && opts->tcp_base_port != 0) {
        if (opts->tcp_base_port < 1 || opts->tcp_base_port > 65535)
            return mstar_error_set(MSTAR_EINVAL, "mesh options: tcp_base_port %d is not 1..65535",
                                   opts->tcp_base_port);
        cfg->tcp_base_port = opts->tcp_base_port;
        return MSTAR_OK;
    }
    int64_t port;
    st = mstar_env_get_int("MSTAR_ZMQ_TCP_BASE_PORT", MSTAR__MESH_DEFAULT_BASE_PORT, 1, 65535,
                           &port);
    if (st != MSTAR_OK)
        return st;
    cfg->tcp_base_port = (int)port;
    return MSTAR_OK;
}

/* Rings between the entities of one ipc directory (that is, of one host): MSTAR_MESH_RING,
 * MSTAR_RING_BYTES and MSTAR_RING_SPIN_US (docs/environment.md). */
static mstar_status resolve_ring(mstar__mesh_config *cfg)
{
    size_t index;
    mstar_status st =
        mstar_env_get_choice("MSTAR_MESH_RING", ring_names,
                             sizeof(ring_names) / sizeof(ring_names[0]), MSTAR__RING_AUTO, &index);
    if (st != MSTAR_OK)
        return st;
    cfg->ring = (int)index;
    if (cfg->ring == MSTAR__RING_OFF)
        return MSTAR_OK;
    int64_t spin;
    st = mstar__ring_capacity(&cfg->ring_cap);
    if (st == MSTAR_OK)
        st = mstar_env_get_int("MSTAR_RING_SPIN_US", MSTAR_RING_SPIN_US_DEFAULT, 0, 1000000, &spin);
    if (st == MSTAR_OK)
        cfg->spin_us = (int)spin;
    return st;
}

mstar_status mstar__mesh_config_resolve(const mstar_mesh_options *opts, mstar__mesh_config *out)
{
    mstar__mesh_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    mstar_status st = resolve_transport(opts, &cfg.transport);
    if (st != MSTAR_OK)
        return st;
    if (cfg.transport == MSTAR_MESH_TCP) {
        st = resolve_tcp(opts, &cfg);
    } else if (opts != NULL && opts->ipc_dir != NULL) {
        st = ipc_dir_set(&cfg, opts->ipc_dir, "mesh options: ipc_dir");
    } else {
        /* Per user: a shared default could be created first by another local user. */
        char def[sizeof(MSTAR__MESH_DEFAULT_IPC_DIR) + 16];
        snprintf(def, sizeof(def), MSTAR__MESH_DEFAULT_IPC_DIR "-%u", (unsigned)geteuid());
        st = ipc_dir_set(&cfg, mstar_env_get_string("MSTAR_IPC_DIR", def), "MSTAR_IPC_DIR");
    }
    if (st == MSTAR_OK && cfg.transport == MSTAR_MESH_IPC)
        st = resolve_ring(&cfg);
    if (st != MSTAR_OK)
        return st;
    *out = cfg;
    return MSTAR_OK;
}

mstar_status mstar__mesh_entity_offset(const char *entity, uint16_t *out)
{
    uint16_t index;
    mstar_status st = mstar_entity_index(entity, &index);
    if (st == MSTAR_OK) {
        *out = index;
        return MSTAR_OK;
    }
    if (st != MSTAR_ENOENT)
        return st;
    mstar_error_clear();
    unsigned sum = 0;
    for (const unsigned char *p = (const unsigned char *)entity; *p != '\0'; p++)
        sum += *p;
    *out = (uint16_t)(1000 + sum % 1000);
    return MSTAR_OK;
}

mstar_status mstar__mesh_endpoint_format(const mstar__mesh_config *cfg, const char *entity,
                                         char *buf, size_t size)
{
    char endpoint[MSTAR__MESH_ENDPOINT_MAX];
    mstar_status st = mstar_name_validate(entity, strlen(entity), "entity name");
    if (st != MSTAR_OK)
        return st;
    if (cfg->transport == MSTAR_MESH_IPC) {
        int n = snprintf(endpoint, sizeof(endpoint), "ipc://%s/%s.ipc", cfg->ipc_dir, entity);
        if (n < 0 || (size_t)n - strlen("ipc://") > MSTAR__IPC_PATH_MAX)
            return mstar_error_set(MSTAR_EINVAL,
                                   "endpoint of entity '%s' in ipc dir '%s' is longer than a "
                                   "socket path (%d bytes)",
                                   entity, cfg->ipc_dir, MSTAR__IPC_PATH_MAX);
    } else {
        uint16_t offset;
        st = mstar__mesh_entity_offset(entity, &offset);
        if (st != MSTAR_OK)
            return st;
        long port = (long)cfg->tcp_base_port + offset;
        if (port > 65535)
            return mstar_error_set(MSTAR_ERANGE,
                                   "entity '%s' maps to TCP port %ld (base %d + %u), above 65535",
                                   entity, port, cfg->tcp_base_port, (unsigned)offset);
        snprintf(endpoint, sizeof(endpoint), "tcp://%s:%ld", cfg->tcp_host, port);
    }
    size_t need = strlen(endpoint) + 1;
    if (need > size)
        return mstar_error_set(MSTAR_ERANGE, "endpoint '%s' needs %zu bytes, the buffer has %zu",
                               endpoint, need, size);
    memcpy(buf, endpoint, need);
    return MSTAR_OK;
}

mstar_status mstar_mesh_endpoint(const mstar_mesh_options *opts, const char *entity, char *buf,
                                 size_t size)
{
    if (entity == NULL || buf == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mesh_endpoint: %s is NULL",
                               entity == NULL ? "entity" : "buf");
    mstar__mesh_config cfg;
    mstar_status st = mstar__mesh_config_resolve(opts, &cfg);
    if (st != MSTAR_OK)
        return st;
    return mstar__mesh_endpoint_format(&cfg, entity, buf, size);
}
