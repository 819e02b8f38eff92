/*
 * engine_local.c — the no-op transfer engine of the shared-memory transports (see engine.h).
 */
#include "tensors/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct local_engine {
    mstar__transfer_engine base;
    char session_id[MSTAR_NAME_MAX + 1];
} local_engine;

static int local_register(mstar__transfer_engine *e, void *ptr, uint64_t nbytes)
{
    return 0;
}

static int local_unregister(mstar__transfer_engine *e, void *ptr)
{
    return 0;
}

static const char *local_session(const mstar__transfer_engine *e)
{
    return ((const local_engine *)e)->session_id;
}

static mstar_status local_reader(mstar__transfer_engine *e, mstar_device device,
                                 mstar__async_reader **out)
{
    *out = NULL;
    return MSTAR_OK;
}

static void local_destroy(mstar__transfer_engine *e)
{
    free(e);
}

static const mstar__transfer_engine_ops local_ops = {
    .register_memory = local_register,
    .unregister_memory = local_unregister,
    .get_session_id = local_session,
    .get_async_reader = local_reader,
    .destroy = local_destroy,
};

mstar_status mstar__local_engine_create(const char *session_id, mstar__transfer_engine **out)
{
    char host[MSTAR_NAME_MAX + 1] = "localhost";
    if (session_id == NULL) {
        if (gethostname(host, sizeof(host) - 1) != 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        session_id = host;
    }
    mstar_status st =
        mstar_name_validate(session_id, strnlen(session_id, MSTAR_NAME_MAX + 1), "session_id");
    if (st != MSTAR_OK)
        return st;
    local_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "local transfer engine");
    e->base.ops = &local_ops;
    snprintf(e->session_id, sizeof(e->session_id), "%s", session_id);
    *out = &e->base;
    return MSTAR_OK;
}
