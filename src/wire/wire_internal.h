/*
 * wire_internal.h — what the files of src/wire share: field paths for error messages, the
 * checks that encoder and decoder both apply, and the growth rule of the arrays inside edges
 * and messages.
 *
 * Field paths. Every error names the field it is about, e.g.
 * "INPUT_SIGNALS.body.inputs[2].tensor_info[0].dims: 9 entries, at most 8". Building that string
 * for every field would cost more than decoding it, so the path is a chain of frames on the C
 * stack (a key or an array index, pointing at its parent) and is only formatted when an error is
 * reported.
 *
 * Shared checks. The decoder parses structure (types, lengths, counts, duplicates, required
 * fields) and then runs the same value checks the encoder runs before it writes anything, so a
 * peer never receives what it would reject. `code` selects the status: MSTAR_EPROTO when the
 * input came from another process, MSTAR_EINVAL when it came from the caller.
 */
#ifndef MSTAR_WIRE_INTERNAL_H
#define MSTAR_WIRE_INTERNAL_H

#include "mstar/wire.h"

/* ---- field paths ----------------------------------------------------------------------------- */

typedef struct mstar__wpath {
    const struct mstar__wpath *up; /* NULL at the root */
    const char *key;               /* ".key", or the root's name; NULL for an index frame */
    int64_t index;                 /* "[index]" when key is NULL */
} mstar__wpath;

static inline mstar__wpath mstar__wpath_key(const mstar__wpath *up, const char *key)
{
    mstar__wpath p = { up, key, 0 };
    return p;
}

static inline mstar__wpath mstar__wpath_index(const mstar__wpath *up, int64_t index)
{
    mstar__wpath p = { up, NULL, index };
    return p;
}

#define MSTAR__WPATH_MAX 512
/* Writes "INPUT_SIGNALS.body.inputs[2]" into buf (truncated to fit). Returns buf. */
const char *mstar__wpath_format(const mstar__wpath *path, char buf[MSTAR__WPATH_MAX]);

/* Set the error "<path>: <message>" with status `code` and return `code`. */
mstar_status mstar__wire_fail(mstar_status code, const mstar__wpath *path, const char *fmt, ...)
    MSTAR_PRINTF(3, 4);

/* mstar_name_validate for a field, with the field's path in the message and status `code`. */
mstar_status mstar__wire_check_name(mstar_status code, const mstar__wpath *path, const char *name,
                                    size_t len);
/* A NUL-terminated name held in a fixed buffer of `cap` bytes (at most cap - 1 bytes long).
 * `may_be_empty`: "" is allowed (it means "none"). */
mstar_status mstar__wire_check_cname(mstar_status code, const mstar__wpath *path, const char *name,
                                     size_t cap, bool may_be_empty);
/* Copy a caller's C string into dst[MSTAR_NAME_MAX + 1] if it is a valid name (EINVAL naming
 * `what` otherwise; dst untouched). */
mstar_status mstar__wire_copy_name(char *dst, const char *src, const char *what);
/* Free text (reasons): printable ASCII 0x20..0x7e, at most MSTAR_NAME_MAX bytes, may be empty. */
mstar_status mstar__wire_check_text(mstar_status code, const mstar__wpath *path, const char *text,
                                    size_t len);

/* ---- message types -------------------------------------------------------------------------- */

/* The type whose wire name is name[0..len); MSTAR_MSG_INVALID if none. */
mstar_msg_type mstar__msg_type_from_name(const char *name, size_t len);
/* Set the type of a message in init state, with the type's defaults (mstar_msg_init's). */
void mstar__msg_set_type(mstar_msg *msg, mstar_msg_type type);

/* ---- shared value checks --------------------------------------------------------------------- */

/* Every rule of a descriptor (mstar_tensor_info_validate's, with a path and a status). The
 * decoder, which validated each name as it copied it, passes names = false. */
mstar_status mstar__wire_check_info(mstar_status code, const mstar__wpath *path,
                                    const mstar_tensor_info *info, bool names);
/* The edge's own fields (not its descriptors). The decoder enforces each of these as it reads
 * the field (codec_edge.c): keep the two in step. */
mstar_status mstar__wire_check_edge(mstar_status code, const mstar__wpath *path,
                                    const mstar_edge *edge);
/* A request id held in a struct (a string one must be a valid, terminated name). */
mstar_status mstar__wire_check_rid(mstar_status code, const mstar__wpath *path,
                                   const mstar_rid *rid);

/* ---- arrays inside edges and messages ---------------------------------------------------------
 *
 * An array holding n elements always has room for mstar__wire_cap(n) of them (0 for n == 0, else
 * n rounded up to a power of two), whoever allocated it: the decoder, a copy or an append. So an
 * append grows the array only when n is 0 or a power of two, and appends cost O(1) amortized. */

static inline uint32_t mstar__wire_cap(uint32_t n)
{
    if (n == 0)
        return 0;
    uint32_t c = 1;
    while (c < n)
        c <<= 1;
    return c;
}

/* mstar_msg_encode into the caller's buffer *buf of *cap bytes (NULL and 0 at first), grown when
 * the message needs more and the caller's to keep and free whatever the outcome; *len is the
 * encoding's length. A sender of message after message (the mesh) then allocates only for one
 * larger than those before it. */
mstar_status mstar__msg_encode_into(const mstar_msg *msg, void **buf, size_t *cap, size_t *len);

/* Allocate room for mstar__wire_cap(n) elements of `elsize`, zeroed; NULL for n == 0. ENOMEM. */
mstar_status mstar__wire_alloc(uint32_t n, size_t elsize, void **out);
/* The same, not zeroed: for an array the caller fills before anyone reads it, of elements that
 * own nothing (descriptors: 2.7 KB each, which the decoder and a copy write whole anyway). */
mstar_status mstar__wire_alloc_raw(uint32_t n, size_t elsize, void **out);
/* Make room for element number n (0-based) of an array holding n. ENOMEM leaves *arr unchanged. */
mstar_status mstar__wire_grow(void **arr, uint32_t n, size_t elsize);

/* Index of the first element whose key repeats an earlier one, or -1. The elements are `stride`
 * bytes apart; their keys are NUL-terminated strings at `key_offset` (names) or uint64s at
 * `key_offset` (uuids). ENOMEM is reported as a status; *dup is written on MSTAR_OK. */
mstar_status mstar__wire_find_dup_name(const void *base, uint32_t n, size_t stride,
                                       size_t key_offset, int64_t *dup);
mstar_status mstar__wire_find_dup_u64(const void *base, uint32_t n, size_t stride,
                                      size_t key_offset, int64_t *dup);

#endif
