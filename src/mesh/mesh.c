/*
 * mesh.c — creating and destroying a mesh handle, and its accessors.
 *
 * A mesh owns one ZeroMQ context (so that meshes created in one process, as the tests do, are
 * independent, and a forked child never shares its parent's), the bound inbox, the peer sockets
 * and the wake-up eventfd. Destroy releases all of them on every path, including a create that
 * failed half way. A second live entity with the index of one already bound is refused here.
 */
#include "mesh_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

void mstar_mesh_destroy(mstar_mesh *mesh)
{
    if (mesh == NULL)
        return;
    mstar__peers_close(&mesh->peers);
    mstar__inbox_close(&mesh->inbox);
    /* Every socket has linger 0, so this returns at once; it also waits for ZeroMQ's I/O thread
     * to finish closing the listener, after which the ipc file is ours to check. */
    if (mesh->ctx != NULL) {
        while (zmq_ctx_term(mesh->ctx) != 0 && zmq_errno() == EINTR)
            continue;
    }
    mstar__ipc_file_remove(&mesh->inbox.file);
    if (mesh->wake_fd >= 0)
        close(mesh->wake_fd);
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
    mstar__inbox_init(&mesh->inbox);
    mstar__strmap_init(&mesh->peers);
    mesh->wake_fd = -1;

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
    return mesh ? mesh->inbox.fd : -1;
}

int mstar_mesh_wake_fd(const mstar_mesh *mesh)
{
    return mesh ? mesh->wake_fd : -1;
}
