/*
 * ctx_cuda.c — the reference model's CUDA state and GEMMs: a ref_ops_ctx holds one cuBLAS handle
 * and one workspace, both made when the model is, so a stream capture records cuBLAS kernels
 * without anything being created or allocated inside it. Also the timing events of a profile.
 *
 * GEMMs are cublasGemmEx, bf16 inputs with fp32 accumulation (CUBLAS_COMPUTE_32F); a residual
 * is added by the GEMM itself (beta = 1 with C = D = the residual stream), so it costs no kernel.
 * Built only with the CUDA backend and cuBLAS; linked to libcublas dynamically.
 */
#include "cuda/ctx_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels_cuda.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

/* cuBLAS's advice for Hopper: 32 MiB of workspace lets it pick its fastest kernels. */
#define WORKSPACE_BYTES ((size_t)32 << 20)

struct ref_ops_ctx {
    mstar_backend *backend;
    int64_t linear_rows; /* the one-kernel linear layer's row limit; 0: always cuBLAS */
    cublasHandle_t handle;
    void *workspace; /* device, WORKSPACE_BYTES */
};

static mstar_status blas_error(cublasStatus_t s, const char *what)
{
    return mstar_error_set(MSTAR_EDEVICE, "reference model: %s: %s", what,
                           cublasGetStatusString(s));
}

/* MSTAR_REF_SKINNY_GEMM: unset, the model's default row limit; 0, every linear layer on cuBLAS
 * (the switch that turns the one-kernel path off); N in [1, REF_CUDA_LINEAR_MAX_ROWS], layers of
 * up to N rows as one kernel. */
static mstar_status linear_rows_from_env(int64_t def, int64_t *out)
{
    const char *v = getenv("MSTAR_REF_SKINNY_GEMM");
    *out = def;
    if (v == NULL || *v == '\0')
        return MSTAR_OK;
    char *end;
    errno = 0;
    long long rows = strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || rows < 0 || rows > REF_CUDA_LINEAR_MAX_ROWS)
        return mstar_error_set(MSTAR_EINVAL,
                               "reference model: MSTAR_REF_SKINNY_GEMM=\"%s\": want 0 (off) or "
                               "a row limit in [1, %d]",
                               v, REF_CUDA_LINEAR_MAX_ROWS);
    *out = rows;
    return MSTAR_OK;
}

int64_t ref_cuda_ctx_linear_rows(const ref_ops_ctx *c)
{
    return c->linear_rows;
}

mstar_status ref_cuda_ctx_create(mstar_backend *backend, int64_t def_rows, ref_ops_ctx **out)
{
    int64_t linear_rows;
    if (linear_rows_from_env(def_rows, &linear_rows) != MSTAR_OK)
        return MSTAR_EINVAL;
    ref_ops_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference model: cuBLAS context");
    c->backend = backend;
    c->linear_rows = linear_rows;
    /* The workspace first: allocating through the backend makes its device the thread's current
     * one, which is the device cublasCreate binds the handle to. */
    mstar_status st = mstar_device_alloc(backend, WORKSPACE_BYTES, &c->workspace);
    if (st != MSTAR_OK) {
        free(c);
        return mstar_error_wrap("reference model: cuBLAS workspace");
    }
    cublasStatus_t bs = cublasCreate(&c->handle);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->handle = NULL;
        mstar_status err = blas_error(bs, "cublasCreate");
        ref_cuda_ctx_destroy(c);
        return err;
    }
    *out = c;
    return MSTAR_OK;
}

void ref_cuda_ctx_destroy(ref_ops_ctx *c)
{
    if (c == NULL)
        return;
    if (c->handle != NULL)
        cublasDestroy(c->handle);
    if (c->workspace != NULL)
        mstar_device_free(c->backend, c->workspace);
    free(c);
}

mstar_status ref_cuda_ctx_matmul_nt(ref_ops_ctx *c, mstar_stream *s, const void *x, const void *w,
                                    int64_t n, int64_t k, int64_t m, bool accumulate, bool out_f32,
                                    void *out)
{
    if (n == 0 || m == 0)
        return MSTAR_OK;
    if (n < 0 || k < 0 || m < 0 || n > INT_MAX || k > INT_MAX || m > INT_MAX)
        return mstar_error_set(MSTAR_ERANGE, "reference model: GEMM of %lld x %lld x %lld",
                               (long long)n, (long long)k, (long long)m);
    /* The stream first: cublasSetStream puts the handle back on cuBLAS's own workspace, so ours
     * is set again after it on every call (both are host-side settings, fine in a capture). */
    cublasStatus_t bs = cublasSetStream(c->handle, (cudaStream_t)mstar_stream_native(s));
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(c->handle, c->workspace, WORKSPACE_BYTES);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return blas_error(bs, "cuBLAS stream/workspace");
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    /* Row-major out[n, m] = x[n, k] · w[m, k]^T is column-major out^T[m, n] = w^T · x^T: w read
     * as a k-by-m column-major matrix transposed, x as k-by-n. */
    bs = cublasGemmEx(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &alpha, w,
                      CUDA_R_16BF, (int)k, x, CUDA_R_16BF, (int)k, &beta, out,
                      out_f32 ? CUDA_R_32F : CUDA_R_16BF, (int)m, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
    return bs == CUBLAS_STATUS_SUCCESS ? MSTAR_OK : blas_error(bs, "cublasGemmEx");
}

static mstar_status rt_error(cudaError_t e, const char *what)
{
    return mstar_error_set(MSTAR_EDEVICE, "profile: %s: %s", what, cudaGetErrorString(e));
}

mstar_status ref_cuda_marks_create(mstar_backend *backend, size_t count, void **out)
{
    cudaEvent_t *ev = calloc(count ? count : 1, sizeof(cudaEvent_t));
    if (ev == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "profile: %zu events", count);
    for (size_t i = 0; i < count; i++) {
        cudaError_t e = cudaEventCreate(&ev[i]); /* with timing, unlike the runtime's events */
        if (e != cudaSuccess) {
            ref_cuda_marks_destroy(ev, i);
            return rt_error(e, "cudaEventCreate");
        }
    }
    *out = ev;
    return MSTAR_OK;
}

void ref_cuda_marks_destroy(void *marks, size_t count)
{
    cudaEvent_t *ev = marks;
    for (size_t i = 0; ev != NULL && i < count; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
}

mstar_status ref_cuda_mark_record(void *marks, size_t i, mstar_stream *s)
{
    cudaError_t e = cudaEventRecord(((cudaEvent_t *)marks)[i], mstar_stream_native(s));
    return e == cudaSuccess ? MSTAR_OK : rt_error(e, "cudaEventRecord");
}

mstar_status ref_cuda_mark_elapsed_us(void *marks, size_t a, size_t b, double *out)
{
    const cudaEvent_t *ev = marks;
    float ms = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&ms, ev[a], ev[b]);
    *out = (double)ms * 1e3;
    return e == cudaSuccess ? MSTAR_OK : rt_error(e, "cudaEventElapsedTime");
}
