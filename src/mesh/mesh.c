/*
 * mesh.c — creating and destroying a mesh handle, and its accessors.
 *
 * A mesh owns one ZeroMQ context (so that meshes created in one process, as the tests do, are
 * independent, and a forked child never shares its parent's), the bound inbox, the peer sockets
 * and the wake-up eventfd. Destroy releases all of them on every path, including a create that
 * failed half way; in a forked child it releases only the child's own (forget). A second live
 * entity with the index of one already bound is refused here.
 */
#include "mesh_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <zmq.h>

/* The destroy of a mesh inherited through fork (core/owner.h): its rings are unmapped without
 * being marked closed, its bell and inbox files stay (they are the parent's), and ZeroMQ is not
 * called at all. ZeroMQ is not fork-safe: zmq_close takes locks a parent thread may have held at
 * the fork, and zmq_ctx_term in a child returns EINTR for ever, as the context's reaper and I/O
 * threads exist only in the parent. The context, with the sockets it holds, is kept until the
 * child exits. */
static void forget(mstar_mesh *mesh)
{
    for (size_t i = 0; i < mesh->inrings.n; i++)
        mstar__ring_forget(&mesh->inrings.rings[i].ring);
    mstar__inrings_close(&mesh->inrings);
    uint32_t it = 0;
    const char *key;
    size_t len;
    uint64_t val;
    while (mstar__strmap_next(&mesh->peers, &it, &key, &len, &val)) {
        mstar__peer *p = (mstar__peer *)(uintptr_t)val;
        p->sock = NULL; /* the context's */
        mstar__ring_forget(&p->ring);
    }
    mstar__peers_close(&mesh->peers);
    if (mesh->poll_fd >= 0)
        close(mesh->poll_fd);
    if (mesh->bell_fd >= 0)
        close(mesh->bell_fd);
    if (mesh->wake_fd >= 0)
        close(mesh->wake_fd);
    mstar__owner_keep(mesh->ctx);
    free(mesh->encoded); /* this process's own copy, like the mesh itself */
    free(mesh);
}

void mstar_mesh_destroy(mstar_mesh *mesh)
{
    if (mesh == NULL)
        return;
    if (!mstar__owner_here(&mesh->owner)) {
        forget(mesh);
        return;
    }
    mstar__inrings_close(&mesh->inrings);
    mstar__peers_close(&mesh->peers);
    mstar__inbox_close(&mesh->inbox);
    if (mesh->poll_fd >= 0)
        close(mesh->poll_fd);
    if (mesh->bell_fd >= 0)
        close(mesh->bell_fd);
    mstar__ipc_file_remove(&mesh->bell_file);
    /* Every socket has linger 0, so this returns at once; it also waits for ZeroMQ's I/O thread
     * to finish closing the listener, after which the ipc file is ours to check. */
    if (mesh->ctx != NULL) {
        while (zmq_ctx_term(mesh->ctx) != 0 && zmq_errno() == EINTR)
            continue;
    }
    mstar__ipc_file_remove(&mesh->inbox.file);
    if (mesh->wake_fd >= 0)
        close(mesh->wake_fd);
    free(mesh->encoded);
    free(mesh);
}

/* An entity's index mints its tensor ids, so two live entities with one index would give one id
 * to two tensors. Over TCP the index is the port offset and the bind itself refuses the second;
 * over ipc, look for a live inbox of another name with the same index in the directory. */
static mstar_status check_index_free(const mstar_mesh *mesh)
{
    const char *dirpath = mesh->cfg.ipc_dir[0] != '\0' ? mesh->cfg.ipc_dir : "/";
    DIR *dir = opendir(dirpath);
    if (dir == NULL)
        return MSTAR_OK; /* not created yet: nobody is bound there */
    mstar_status st = MSTAR_OK;
    for (struct dirent *e; st == MSTAR_OK && (e = readdir(dir)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || len - 4 > MSTAR_NAME_MAX || strcmp(e->d_name + len - 4, ".ipc") != 0)
            continue;
        char name[MSTAR_NAME_MAX + 1];
        memcpy(name, e->d_name, len - 4);
        name[len - 4] = '\0';
        uint16_t index;
        if (strcmp(name, mesh->entity) == 0 ||
            mstar_name_validate(name, len - 4, "entity") != MSTAR_OK ||
            mstar__mesh_entity_offset(name, &index) != MSTAR_OK || index != mesh->entity_index)
            continue;
        char path[MSTAR__IPC_PATH_MAX + 2];
        if (snprintf(path, sizeof(path), "%s/%s", mesh->cfg.ipc_dir, e->d_name) >=
            (int)sizeof(path))
            continue;
        if (mstar__ipc_check_unbound(path, mesh->endpoint) == MSTAR_EEXIST)
            st = mstar_error_set(MSTAR_EEXIST,
                                 "mesh %s: entity index %u is already used by the live entity "
                                 "'%s' (%s); the tensor ids of the two would collide",
                                 mesh->entity, (unsigned)index, name, path);
    }
    closedir(dir);
    return st;
}

/* One fd for the event loop that is readable when the inbox or the bell is, or a ring's sender
 * woke us (inrings.c adds the rings' eventfds). The wake-up eventfd is in it edge-triggered, so
 * that the mesh's own wait sleeps in one epoll_wait; a loop that polls this fd sees it readable
 * once per wake, until its next receive. */
static mstar_status open_poll_fd(mstar_mesh *mesh)
{
    mesh->poll_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event in = { .events = EPOLLIN, .data.u64 = MSTAR__MESH_EV_INBOX };
    struct epoll_event bell = { .events = EPOLLIN, .data.u64 = MSTAR__MESH_EV_BELL };
    struct epoll_event wake = { .events = EPOLLIN | EPOLLET, .data.u64 = MSTAR__MESH_EV_WAKE };
    if (mesh->poll_fd < 0 || epoll_ctl(mesh->poll_fd, EPOLL_CTL_ADD, mesh->inbox.fd, &in) != 0 ||
        epoll_ctl(mesh->poll_fd, EPOLL_CTL_ADD, mesh->bell_fd, &bell) != 0 ||
        epoll_ctl(mesh->poll_fd, EPOLL_CTL_ADD, mesh->wake_fd, &wake) != 0)
        return mstar_error_set(MSTAR_EIO, "mesh %s: epoll over the inbox and the bell: %s",
                               mesh->entity, strerror(errno));
    return MSTAR_OK;
}

/* Receive rings from senders on this host: the bell they hand them to, the table that holds
 * them, and the fd that covers both the inbox and the bell. Under MSTAR_MESH_RING=AUTO a bell
 * that cannot be made only costs the rings (peers then use ZeroMQ); =1 makes it an error. */
static mstar_status open_rings(mstar_mesh *mesh)
{
    mstar_status st = mstar__bell_bind(&mesh->cfg, mesh->entity, &mesh->bell_fd, &mesh->bell_file);
    if (st != MSTAR_OK && mesh->cfg.ring == MSTAR__RING_AUTO) {
        mstar_log(MSTAR_LOG_WARN, "mesh %s: no rings, peers use ZeroMQ: %s", mesh->entity,
                  mstar_last_error());
        mstar_error_clear();
        return MSTAR_OK;
    }
    if (st != MSTAR_OK)
        return st;
    mesh->inrings.spin_ns = (uint64_t)mesh->cfg.spin_us * 1000; /* grows by near misses */
    mesh->inrings.rings = calloc(MSTAR__MESH_MAX_RINGS, sizeof(*mesh->inrings.rings));
    mesh->inrings.blobs = calloc(MSTAR__MESH_MAX_BLOBS, sizeof(*mesh->inrings.blobs));
    if (mesh->inrings.rings == NULL || mesh->inrings.blobs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mesh %s: the ring table", mesh->entity);
    return open_poll_fd(mesh);
}

mstar_status mstar_mesh_create(const char *entity, const mstar_mesh_options *opts, mstar_mesh **out)
{
    if (entity == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mesh_create: %s is NULL",
                               entity == NULL ? "entity" : "out");
    mstar_status st = mstar_name_validate(entity, strlen(entity), "entity name");
    if (st != MSTAR_OK)
        return st;

    mstar_mesh *mesh = calloc(1, sizeof(*mesh));
    if (mesh == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mesh %s: out of memory", entity);
    snprintf(mesh->entity, sizeof(mesh->entity), "%s", entity);
    snprintf(mesh->no_message, sizeof(mesh->no_message), "mesh %s: no message", entity);
    mstar__owner_init(&mesh->owner);
    mstar__inbox_init(&mesh->inbox);
    mstar__strmap_init(&mesh->peers);
    mesh->wake_fd = -1;
    mesh->bell_fd = -1;
    mesh->poll_fd = -1;
    mesh->zmq_ready = true;

    st = mstar__mesh_config_resolve(opts, &mesh->cfg);
    if (st == MSTAR_OK)
        st = mstar__mesh_entity_offset(entity, &mesh->entity_index);
    if (st == MSTAR_OK)
        st =
            mstar__mesh_endpoint_format(&mesh->cfg, entity, mesh->endpoint, sizeof(mesh->endpoint));
    if (st == MSTAR_OK)
        st = mstar__wake_open(entity, &mesh->wake_fd);
    if (st == MSTAR_OK) {
        mesh->ctx = zmq_ctx_new();
        if (mesh->ctx == NULL)
            st = mstar_error_set(MSTAR_EIO, "mesh %s: cannot create a ZeroMQ context: %s", entity,
                                 zmq_strerror(zmq_errno()));
    }
    if (st == MSTAR_OK && mesh->cfg.transport == MSTAR_MESH_IPC)
        st = check_index_free(mesh);
    if (st == MSTAR_OK)
        st = mstar__inbox_bind(&mesh->inbox, mesh->ctx, &mesh->cfg, entity, mesh->endpoint);
    if (st == MSTAR_OK && mesh->cfg.transport == MSTAR_MESH_IPC &&
        mesh->cfg.ring != MSTAR__RING_OFF)
        st = open_rings(mesh);
    if (st != MSTAR_OK) {
        mstar_mesh_destroy(mesh);
        return st;
    }
    mstar_log(MSTAR_LOG_DEBUG, "mesh %s: inbox bound at %s (entity index %u)", entity,
              mesh->endpoint, (unsigned)mesh->entity_index);
    *out = mesh;
    return MSTAR_OK;
}

const char *mstar_mesh_entity(const mstar_mesh *mesh)
{
    return mesh ? mesh->entity : "";
}

uint16_t mstar_mesh_entity_index(const mstar_mesh *mesh)
{
    return mesh ? mesh->entity_index : 0;
}

uint64_t mstar_mesh_dropped(const mstar_mesh *mesh)
{
    return mesh ? mesh->inbox.dropped : 0;
}

int mstar_mesh_inbox_fd(const mstar_mesh *mesh)
{
    if (mesh == NULL)
        return -1;
    return mesh->poll_fd >= 0 ? mesh->poll_fd : mesh->inbox.fd;
}

int mstar_mesh_wake_fd(const mstar_mesh *mesh)
{
    return mesh ? mesh->wake_fd : -1;
}
