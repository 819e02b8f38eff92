/*
 * mstar/core.h — the vocabulary every other mstar header speaks.
 *
 * Status codes and the thread-local last error, logging, typed environment knobs, the dtype table,
 * tensor views (the meaning of DLPack's DLTensor), tensor ids and name validation. Nothing here
 * allocates, and everything is safe to call from any thread.
 *
 * Conventions that hold across the whole library:
 *   - Every fallible call returns mstar_status; MSTAR_OK is 0 and every error is negative.
 *   - On error, mstar_last_error() names what was wrong, for the calling thread.
 *   - Handles are opaque and come in pairs: mstar_<noun>_create / mstar_<noun>_destroy.
 *   - Out-parameters come last and are written only on success.
 */
#ifndef MSTAR_CORE_H
#define MSTAR_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MSTAR_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define MSTAR_PRINTF(fmt_idx, arg_idx)
#endif

/* Marks a function of the public API. libmstar is compiled with hidden visibility, so only what
 * carries this mark is exported from libmstar.so; internal mstar__ functions and the bundled
 * msgpuck stay inside and cannot clash with a program's own copies. tests/install checks that
 * the exported list and the declarations in these headers are the same set. */
#if defined(__GNUC__)
#define MSTAR_API __attribute__((visibility("default")))
#else
#define MSTAR_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_status {
    MSTAR_OK = 0,
    MSTAR_EINVAL = -1,     /* a bad argument from the caller */
    MSTAR_ENOMEM = -2,     /* an allocation failed */
    MSTAR_EPROTO = -3,     /* malformed input from another process (message, descriptor) */
    MSTAR_ENOENT = -4,     /* no such object (file, segment, uuid, request, bucket) */
    MSTAR_EEXIST = -5,     /* already exists */
    MSTAR_EIO = -6,        /* an operating-system call failed; the message carries errno */
    MSTAR_EAGAIN = -7,     /* nothing ready yet; try again */
    MSTAR_ETIMEDOUT = -8,  /* a bounded wait ran out */
    MSTAR_ENOSPC = -9,     /* out of capacity (arena full, pool exhausted) */
    MSTAR_ENOTSUP = -10,   /* not built in, or no device present */
    MSTAR_ESTATE = -11,    /* the call is not valid in the object's current state */
    MSTAR_EDEVICE = -12,   /* the device runtime reported an error */
    MSTAR_ECLOSED = -13,   /* the handle or peer is closed */
    MSTAR_ERANGE = -14,    /* a value out of its allowed range */
    MSTAR_ECANCELED = -15, /* the operation was cancelled (abort, shutdown) */
    MSTAR_EREMOTE = -16,   /* the remote side or network engine failed the operation */
} mstar_status;

/* "MSTAR_EPROTO" for MSTAR_EPROTO; "MSTAR_E?" for an unknown code. Never NULL. */
MSTAR_API const char *mstar_status_name(mstar_status status);

/* A short English description of a status code. Never NULL. */
MSTAR_API const char *mstar_strerror(mstar_status status);

/* The message of the last error set on this thread ("" if none). Valid until the next call that
 * sets an error on this thread. */
MSTAR_API const char *mstar_last_error(void);

/* The status of the last error set on this thread (MSTAR_OK if none). */
MSTAR_API mstar_status mstar_last_status(void);

/* Record an error for this thread and return `status`, so that a failing path reads
 * `return mstar_error_set(MSTAR_EPROTO, "descriptor.dims: %d entries, at most 8", n);`.
 * Public so that user callbacks (step functions, kernels) can report through the same channel. */
MSTAR_API mstar_status mstar_error_set(mstar_status status, const char *fmt, ...)
    MSTAR_PRINTF(2, 3);

/* Prefix the current error message with context: "ctx: <old message>". Returns the last status. */
MSTAR_API mstar_status mstar_error_wrap(const char *fmt, ...) MSTAR_PRINTF(1, 2);

/* Forget this thread's last error. */
MSTAR_API void mstar_error_clear(void);

/* ---------------------------------------------------------------------------------------------
 * Logging
 *
 * One line per call on stderr: "mstar 13:48:00.123 WARN  worker_0[1234]: message". The level
 * comes from MSTAR_LOG (error, warn, info, debug, trace; default warn). The entity is the name
 * this process has on the control mesh, set once by whoever creates the process's entity.
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_log_level {
    MSTAR_LOG_ERROR = 0,
    MSTAR_LOG_WARN = 1,
    MSTAR_LOG_INFO = 2,
    MSTAR_LOG_DEBUG = 3,
    MSTAR_LOG_TRACE = 4,
} mstar_log_level;

/* A sink receives each formatted line (without the trailing newline). Used by tests to assert
 * that bad input was logged, and by embedders that route logs elsewhere. */
typedef void (*mstar_log_sink_fn)(mstar_log_level level, const char *line, void *userdata);

/* Log one line at `level` (printf format) if the level is enabled. */
MSTAR_API void mstar_log(mstar_log_level level, const char *fmt, ...) MSTAR_PRINTF(2, 3);
MSTAR_API void mstar_logv(mstar_log_level level, const char *fmt, va_list ap);
/* True when lines at `level` are written: a caller can skip building an expensive message. */
MSTAR_API bool mstar_log_enabled(mstar_log_level level);
/* Override MSTAR_LOG for the whole process; mstar_log_get_level reads the current level. */
MSTAR_API void mstar_log_set_level(mstar_log_level level);
MSTAR_API mstar_log_level mstar_log_get_level(void);
/* The entity name shown in every line; NULL or "" shows "mstar". Copied. */
MSTAR_API void mstar_log_set_entity(const char *entity);
/* The entity name set last ("" when none). */
MSTAR_API const char *mstar_log_get_entity(void);
/* Replace the stderr sink; NULL restores it. */
MSTAR_API void mstar_log_set_sink(mstar_log_sink_fn sink, void *userdata);
/* "warn" for MSTAR_LOG_WARN. */
MSTAR_API const char *mstar_log_level_name(mstar_log_level level);

/* ---------------------------------------------------------------------------------------------
 * Environment knobs
 *
 * Each reads one variable; unset or empty gives the default. A value that does not parse or is
 * out of range returns MSTAR_EINVAL with a message naming the variable, the value and what is
 * accepted — callers decide whether that is fatal. docs/environment.md lists every knob.
 * ------------------------------------------------------------------------------------------- */

/* A decimal integer in [min, max]. */
MSTAR_API mstar_status mstar_env_get_int(const char *name, int64_t def, int64_t min, int64_t max,
                                         int64_t *out);
/* A finite number in [min, max]. */
MSTAR_API mstar_status mstar_env_get_double(const char *name, double def, double min, double max,
                                            double *out);
/* Accepts 1/0, true/false, yes/no, on/off (any case). */
MSTAR_API mstar_status mstar_env_get_bool(const char *name, bool def, bool *out);
/* One of `choices` (case-insensitive); *out is the index of the match. */
MSTAR_API mstar_status mstar_env_get_choice(const char *name, const char *const *choices,
                                            size_t nchoices, size_t def_index, size_t *out);
/* The raw value, or `def` when unset or empty. Never fails. */
MSTAR_API const char *mstar_env_get_string(const char *name, const char *def);

/* ---------------------------------------------------------------------------------------------
 * Data types
 *
 * Codes are stable (they may be stored); the wire carries the torch name ("bfloat16").
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_dtype {
    MSTAR_DTYPE_INVALID = 0,
    MSTAR_DTYPE_BOOL = 1,
    MSTAR_DTYPE_UINT8 = 2,
    MSTAR_DTYPE_INT8 = 3,
    MSTAR_DTYPE_INT16 = 4,
    MSTAR_DTYPE_INT32 = 5,
    MSTAR_DTYPE_INT64 = 6,
    MSTAR_DTYPE_FLOAT16 = 7,
    MSTAR_DTYPE_BFLOAT16 = 8,
    MSTAR_DTYPE_FLOAT32 = 9,
    MSTAR_DTYPE_FLOAT64 = 10,
    /* Reserved codes: the names and sizes are known so descriptors carrying them travel intact;
     * no kernel in this project computes on them. */
    MSTAR_DTYPE_COMPLEX64 = 11,
    MSTAR_DTYPE_COMPLEX128 = 12,
    MSTAR_DTYPE_FLOAT8_E4M3FN = 13,
    MSTAR_DTYPE_FLOAT8_E5M2 = 14,
    MSTAR_DTYPE_COUNT_ = 15
} mstar_dtype;

/* Element size in bytes; 0 for an invalid code. */
MSTAR_API size_t mstar_dtype_size(mstar_dtype dtype);
/* The torch name ("float32"); NULL for an invalid code. */
MSTAR_API const char *mstar_dtype_name(mstar_dtype dtype);
/* Parse a torch name, with or without the "torch." prefix. MSTAR_EINVAL if unknown. */
MSTAR_API mstar_status mstar_dtype_from_name(const char *name, size_t len, mstar_dtype *out);
/* True for every code of the table (MSTAR_DTYPE_BOOL ..= MSTAR_DTYPE_FLOAT8_E5M2). */
MSTAR_API bool mstar_dtype_is_valid(int code);
/* True for the codes the project computes on (bool through float64). */
MSTAR_API bool mstar_dtype_is_computable(mstar_dtype dtype);

/* ---------------------------------------------------------------------------------------------
 * Tensor views (DLTensor's meaning: strides in elements, byte_offset added to data)
 * ------------------------------------------------------------------------------------------- */

#define MSTAR_MAX_NDIM 8

/* Device codes match DLPack's DLDeviceType. */
typedef enum mstar_device_type {
    MSTAR_DEVICE_CPU = 1,
    MSTAR_DEVICE_CUDA = 2,
    MSTAR_DEVICE_CUDA_HOST = 3, /* pinned host memory */
} mstar_device_type;

typedef struct mstar_device {
    mstar_device_type type;
    int32_t index;
} mstar_device;

typedef struct mstar_tensor {
    void *data;
    mstar_device device;
    mstar_dtype dtype;
    int32_t ndim;                    /* 0 ..= MSTAR_MAX_NDIM; 0 is a scalar of one element */
    int64_t shape[MSTAR_MAX_NDIM];   /* each >= 0 */
    int64_t strides[MSTAR_MAX_NDIM]; /* in elements */
    uint64_t byte_offset;
} mstar_tensor;

/* The host: { MSTAR_DEVICE_CPU, 0 }. */
static inline mstar_device mstar_device_cpu(void)
{
    mstar_device d = { MSTAR_DEVICE_CPU, 0 };
    return d;
}

/* Fill `t` as a contiguous C-order view. MSTAR_EINVAL on a NULL `t`, ndim out of range, a NULL
 * shape with ndim > 0, a negative dim, an invalid dtype, or a shape whose byte size overflows. */
MSTAR_API mstar_status mstar_tensor_init(mstar_tensor *t, void *data, mstar_device device,
                                         mstar_dtype dtype, int32_t ndim, const int64_t *shape);
/* Product of the shape (1 for ndim 0). Assumes a validated shape. */
MSTAR_API int64_t mstar_tensor_numel(const mstar_tensor *t);
/* numel × element size. */
MSTAR_API uint64_t mstar_tensor_nbytes(const mstar_tensor *t);
/* True when the strides are C-order contiguous (dims of size 1 may carry any stride). */
MSTAR_API bool mstar_tensor_is_contiguous(const mstar_tensor *t);
/* The first byte of the view: data + byte_offset. */
MSTAR_API void *mstar_tensor_ptr(const mstar_tensor *t);
/* Check ndim, dims, dtype, and that numel × elsize fits in 63 bits; message names `what`. */
MSTAR_API mstar_status mstar_tensor_validate(const mstar_tensor *t, const char *what);
/* numel of a shape with overflow check: MSTAR_ERANGE if the product or its byte size (with
 * `elsize`) does not fit in int64. */
MSTAR_API mstar_status mstar_shape_numel(int32_t ndim, const int64_t *shape, size_t elsize,
                                         int64_t *numel);
/* Contiguous element strides for a shape. */
MSTAR_API void mstar_shape_contiguous_strides(int32_t ndim, const int64_t *shape, int64_t *strides);

/* ---------------------------------------------------------------------------------------------
 * Tensor ids
 *
 * 64 bits: the top 16 are the producing entity's index (api_server 0, conductor 1, the api-server
 * preprocess worker 2, worker r → 100 + r, others assigned by the mesh), the low 48 a per-entity
 * counter starting at 1. Printed as 0x%016llx.
 * ------------------------------------------------------------------------------------------- */

typedef uint64_t mstar_tensor_id;

#define MSTAR_ID_COUNTER_BITS 48
#define MSTAR_ID_COUNTER_MAX  ((UINT64_C(1) << MSTAR_ID_COUNTER_BITS) - 1)

#define MSTAR_ENTITY_INDEX_API_SERVER  0
#define MSTAR_ENTITY_INDEX_CONDUCTOR   1
#define MSTAR_ENTITY_INDEX_PREPROCESS  2
#define MSTAR_ENTITY_INDEX_WORKER_BASE 100

typedef struct mstar_id_gen {
    uint16_t entity_index;
    uint64_t next_counter;
} mstar_id_gen;

/* The id of `entity_index`'s tensor number `counter` (its low 48 bits). */
MSTAR_API mstar_tensor_id mstar_id_make(uint16_t entity_index, uint64_t counter);
/* The producing entity's index (the top 16 bits). */
MSTAR_API uint16_t mstar_id_entity(mstar_tensor_id id);
/* The per-entity counter (the low 48 bits). */
MSTAR_API uint64_t mstar_id_counter(mstar_tensor_id id);
/* A generator of `entity_index`'s ids, the first with counter 1. Not thread-safe. */
MSTAR_API void mstar_id_gen_init(mstar_id_gen *gen, uint16_t entity_index);
/* MSTAR_ERANGE once the 48-bit counter is exhausted. */
MSTAR_API mstar_status mstar_id_gen_next(mstar_id_gen *gen, mstar_tensor_id *out);
/* Writes "0x0064000000000001" (19 bytes with the terminator). */
#define MSTAR_ID_STRLEN 19
MSTAR_API void mstar_id_format(mstar_tensor_id id, char buf[MSTAR_ID_STRLEN]);

/* The fixed index of a well-known entity name: "api_server", "conductor",
 * "api_server_preprocess_worker", "worker_<r>" (0 <= r < 65436). MSTAR_ENOENT for any other valid
 * name (the mesh assigns those), MSTAR_EINVAL for an invalid one. */
MSTAR_API mstar_status mstar_entity_index(const char *entity, uint16_t *out);

/* ---------------------------------------------------------------------------------------------
 * Names (entities, segments, signals, walks, nodes)
 * ------------------------------------------------------------------------------------------- */

#define MSTAR_NAME_MAX 255 /* bytes, without the terminator */

/* A name is 1..=MSTAR_NAME_MAX bytes of [A-Za-z0-9_.:-], and is neither "." nor "..", nor does it
 * contain "..". `len` is the byte count (the string need not be terminated). MSTAR_EINVAL with a
 * message naming `what` otherwise. */
MSTAR_API mstar_status mstar_name_validate(const char *name, size_t len, const char *what);

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

/* "0.1.0" */
MSTAR_API const char *mstar_version_string(void);
/* True when the library was built with the CUDA backend. */
MSTAR_API bool mstar_built_with_cuda(void);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_CORE_H */
