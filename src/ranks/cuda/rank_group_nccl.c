/*
 * rank_group_nccl.c — a rank group over NCCL: one all-reduce of an int64 vector on the device.
 *
 * libnccl.so.2 is opened at run time (dlopen), never linked, so the library builds and loads on
 * machines without NCCL; nccl.h from the CUDA toolkit gives only the types. The NCCL id travels
 * over a bootstrap group (normally the host group over the mesh): rank 0 makes it, and one max
 * agreement in which every other rank contributes INT64_MIN hands it to all. The same agreement
 * carries a failure flag, so a rank whose setup failed makes every rank fail instead of leaving
 * the others blocked in ncclCommInitRank.
 *
 * NCCL waits forever for a rank that died. So the all-reduce is enqueued and its stream polled,
 * with the communicator's asynchronous error checked on the way; past the timeout the
 * communicator is aborted and the group answers MSTAR_ECLOSED from then on.
 */
#include "ranks/rank_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/vec.h"

#define ID_WORDS ((sizeof(ncclUniqueId) + sizeof(int64_t) - 1) / sizeof(int64_t))

typedef struct nccl_api {
    void *lib;
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t *err);
    ncclResult_t (*comm_abort)(ncclComm_t comm);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    const char *(*get_error_string)(ncclResult_t result);
} nccl_api;

typedef struct nccl_group {
    mstar_rank_group base;
    nccl_api api;
    int device;
    int64_t timeout_ms;
    ncclComm_t comm;
    cudaStream_t stream;
    int64_t *dev;  /* device buffer of `cap` values */
    int64_t *host; /* pinned, so the copy back never blocks the host on a hung all-reduce */
    size_t cap;
    bool broken; /* aborted after a timeout or an NCCL error */
} nccl_group;

static mstar_status load_api(nccl_api *api)
{
    memset(api, 0, sizeof(*api));
    api->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (api->lib == NULL)
        return mstar_error_set(MSTAR_ENOTSUP, "NCCL is not available: %s", dlerror());
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        { (void **)&api->get_unique_id, "ncclGetUniqueId" },
        { (void **)&api->comm_init_rank, "ncclCommInitRank" },
        { (void **)&api->all_reduce, "ncclAllReduce" },
        { (void **)&api->comm_get_async_error, "ncclCommGetAsyncError" },
        { (void **)&api->comm_abort, "ncclCommAbort" },
        { (void **)&api->comm_destroy, "ncclCommDestroy" },
        { (void **)&api->get_error_string, "ncclGetErrorString" },
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].slot = dlsym(api->lib, syms[i].name);
        if (*syms[i].slot == NULL) {
            dlclose(api->lib);
            api->lib = NULL;
            return mstar_error_set(MSTAR_ENOTSUP, "libnccl.so.2 has no %s", syms[i].name);
        }
    }
    return MSTAR_OK;
}

static mstar_status nccl_error(nccl_group *g, ncclResult_t r, const char *what)
{
    return mstar_error_set(MSTAR_EDEVICE, "NCCL on cuda:%d: %s failed: %s", g->device, what,
                           g->api.get_error_string(r));
}

static mstar_status cuda_error(nccl_group *g, cudaError_t err, const char *what)
{
    cudaGetLastError();
    return mstar_error_set(MSTAR_EDEVICE, "NCCL group on cuda:%d: %s failed: %s", g->device, what,
                           cudaGetErrorString(err));
}

static void release_buffers(nccl_group *g)
{
    if (g->dev != NULL)
        cudaFree(g->dev);
    if (g->host != NULL)
        cudaFreeHost(g->host);
    g->dev = g->host = NULL;
    g->cap = 0;
}

static mstar_status ensure_buffers(nccl_group *g, size_t n)
{
    if (n <= g->cap)
        return MSTAR_OK;
    release_buffers(g);
    cudaError_t err = cudaMalloc((void **)&g->dev, n * sizeof(int64_t));
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaMalloc");
    err = cudaMallocHost((void **)&g->host, n * sizeof(int64_t));
    if (err != cudaSuccess) {
        release_buffers(g);
        return cuda_error(g, err, "cudaMallocHost");
    }
    g->cap = n;
    return MSTAR_OK;
}

/* Abort the communicator: after a timeout or an asynchronous error it cannot be trusted. */
static void break_group(nccl_group *g)
{
    if (!g->broken && g->comm != NULL)
        g->api.comm_abort(g->comm);
    g->comm = NULL;
    g->broken = true;
}

/* Wait for the stream without blocking in the runtime, so that a rank that never joins the
 * all-reduce is a timeout rather than a hang. */
static mstar_status wait_stream(nccl_group *g)
{
    uint64_t deadline = mstar__now_ns() + (uint64_t)g->timeout_ms * 1000000u;
    for (;;) {
        cudaError_t err = cudaStreamQuery(g->stream);
        if (err == cudaSuccess)
            return MSTAR_OK;
        if (err != cudaErrorNotReady) {
            mstar_status st = cuda_error(g, err, "the all-reduce's stream");
            break_group(g);
            return st;
        }
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = g->api.comm_get_async_error(g->comm, &async);
        if (r != ncclSuccess || async != ncclSuccess) {
            mstar_status st = nccl_error(g, r != ncclSuccess ? r : async, "ncclAllReduce");
            break_group(g);
            return st;
        }
        if (mstar__now_ns() >= deadline) {
            break_group(g);
            return mstar_error_set(MSTAR_ETIMEDOUT,
                                   "NCCL on cuda:%d: the all-reduce did not finish within %" PRId64
                                   " ms (a rank is dead or stuck); the communicator was aborted",
                                   g->device, g->timeout_ms);
        }
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
}

static mstar_status nccl_reduce(mstar_rank_group *base, int64_t *values, size_t n,
                                mstar_reduce reduce)
{
    nccl_group *g = (nccl_group *)base;
    if (g->broken)
        return mstar_error_set(MSTAR_ECLOSED,
                               "NCCL on cuda:%d: the communicator was aborted "
                               "after an earlier failure",
                               g->device);
    int64_t none = 0;
    if (n == 0) { /* an empty agreement is a barrier: reduce one value nobody reads */
        values = &none;
        n = 1;
    }
    cudaError_t err = cudaSetDevice(g->device);
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaSetDevice");
    mstar_status st = ensure_buffers(g, n);
    if (st != MSTAR_OK)
        return st;
    size_t bytes = n * sizeof(int64_t);
    memcpy(g->host, values, bytes);
    err = cudaMemcpyAsync(g->dev, g->host, bytes, cudaMemcpyHostToDevice, g->stream);
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaMemcpyAsync (to the device)");
    ncclResult_t r =
        g->api.all_reduce(g->dev, g->dev, n, ncclInt64,
                          reduce == MSTAR_REDUCE_MIN ? ncclMin : ncclMax, g->comm, g->stream);
    if (r != ncclSuccess) {
        st = nccl_error(g, r, "ncclAllReduce");
        break_group(g);
        return st;
    }
    err = cudaMemcpyAsync(g->host, g->dev, bytes, cudaMemcpyDeviceToHost, g->stream);
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaMemcpyAsync (to the host)");
    st = wait_stream(g);
    if (st != MSTAR_OK)
        return st;
    memcpy(values, g->host, bytes);
    return MSTAR_OK;
}

static void nccl_destroy(mstar_rank_group *base)
{
    nccl_group *g = (nccl_group *)base;
    if (cudaSetDevice(g->device) == cudaSuccess) {
        if (g->comm != NULL && !g->broken)
            g->api.comm_destroy(g->comm);
        release_buffers(g);
        if (g->stream != NULL)
            cudaStreamDestroy(g->stream);
    }
    if (g->api.lib != NULL)
        dlclose(g->api.lib);
    free(g);
}

static const mstar__rank_group_ops nccl_ops = {
    .kind = "nccl",
    .reduce = nccl_reduce,
    .destroy = nccl_destroy,
};

/* This rank's part of setup before the id exchange: the library, the device, the stream, and on
 * rank 0 the id. Its status is carried into the exchange, failure or not. */
static mstar_status local_setup(nccl_group *g, ncclUniqueId *id)
{
    mstar_status st = load_api(&g->api);
    if (st != MSTAR_OK)
        return st;
    cudaError_t err = cudaSetDevice(g->device);
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaSetDevice");
    err = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess)
        return cuda_error(g, err, "cudaStreamCreateWithFlags");
    if (g->base.rank == 0) {
        ncclResult_t r = g->api.get_unique_id(id);
        if (r != ncclSuccess)
            return nccl_error(g, r, "ncclGetUniqueId");
    }
    return MSTAR_OK;
}

/* One max agreement over the bootstrap group: [any rank failed, rank 0's id words]. */
static mstar_status exchange_id(mstar_rank_group *bootstrap, bool failed, ncclUniqueId *id)
{
    int64_t words[1 + ID_WORDS];
    words[0] = failed ? 1 : 0;
    for (size_t i = 0; i < ID_WORDS; i++)
        words[1 + i] = INT64_MIN;
    if (bootstrap->rank == 0 && !failed)
        memcpy(&words[1], id, sizeof(*id));
    mstar_status st = mstar_agree_across_ranks(bootstrap, words, 1 + ID_WORDS, MSTAR_REDUCE_MAX);
    if (st != MSTAR_OK)
        return st;
    if (words[0] != 0)
        return mstar_error_set(MSTAR_EDEVICE, "NCCL group setup failed on another rank");
    memcpy(id, &words[1], sizeof(*id));
    return MSTAR_OK;
}

mstar_status mstar_rank_group_create_nccl(mstar_rank_group *bootstrap, int device,
                                          mstar_rank_group **out)
{
    if (bootstrap == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", bootstrap == NULL ? "bootstrap" : "out");
    if (device < 0)
        return mstar_error_set(MSTAR_EINVAL, "device %d is negative", device);
    int64_t timeout_ms;
    mstar_status st = mstar__rank_agree_timeout(0, &timeout_ms);
    if (st != MSTAR_OK)
        return st;
    nccl_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "NCCL group: out of memory");
    g->base = (mstar_rank_group){ &nccl_ops, bootstrap->rank, bootstrap->size };
    g->device = device;
    g->timeout_ms = timeout_ms;

    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    mstar_status local = local_setup(g, &id);
    char local_msg[1024];
    snprintf(local_msg, sizeof(local_msg), "%s", mstar_last_error());
    st = exchange_id(bootstrap, local != MSTAR_OK, &id);
    if (local != MSTAR_OK) {
        /* This rank's own reason beats "failed on another rank". */
        mstar_error_set(local, "%s", local_msg);
        st = local;
    }
    if (st == MSTAR_OK) {
        ncclResult_t r = g->api.comm_init_rank(&g->comm, g->base.size, id, g->base.rank);
        if (r != ncclSuccess) {
            g->comm = NULL;
            st = nccl_error(g, r, "ncclCommInitRank");
        }
    }
    if (st != MSTAR_OK) {
        nccl_destroy(&g->base);
        return mstar_error_wrap("NCCL group rank %d of %d", (int)bootstrap->rank,
                                (int)bootstrap->size);
    }
    *out = &g->base;
    return MSTAR_OK;
}
