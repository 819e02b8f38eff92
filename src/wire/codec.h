/*
 * codec.h — the msgpack primitives the descriptor, edge and message codecs are built from: a
 * bounds-checked reader and a growing writer, both over msgpuck.
 *
 * The reader never trusts the input: every read checks its header and payload against the bytes
 * left, every container count is checked against a limit and against the bytes left before anyone
 * allocates for it, and every failure is MSTAR_EPROTO naming the field path. Structure is checked
 * where it is read, so errors name the field; there is no separate whole-buffer pass (msgpuck's
 * mp_check is unsafe on hostile counts, reader.c says why).
 *
 * The writer grows one buffer; an allocation failure is sticky and reported once at the end, so
 * the encoders read as a plain sequence of writes.
 */
#ifndef MSTAR_WIRE_CODEC_H
#define MSTAR_WIRE_CODEC_H

#include "wire_internal.h"

/* ---- keys ------------------------------------------------------------------------------------ */

/* The key names of one kind of map, indexed by the kind's field enum. */
typedef struct mstar__wkey {
    const char *name;
    uint32_t len;
} mstar__wkey;

/* One kind of map keyed by field names: its keys, which of them a map may hold (`allowed`) and
 * which it must (`required`), as bits indexed like `keys` (so none at nkeys or above). */
typedef struct mstar__wmap {
    const mstar__wkey *keys;
    int nkeys;
    uint64_t allowed;
    uint64_t required;
} mstar__wmap;

/* Whether every bit of `fields` indexes one of the map's keys (the codec's walks over set bits
 * trust it; asserted where they start). */
static inline bool mstar__wmap_indexes(const mstar__wmap *map, uint64_t fields)
{
    return map->nkeys == 64 || fields >> map->nkeys == 0;
}

/* ---- reader ---------------------------------------------------------------------------------- */

typedef struct mstar__rd {
    const char *p;
    const char *end;
    uint32_t tensors_left; /* descriptors the rest of this message may still hold */
} mstar__rd;

void mstar__rd_init(mstar__rd *r, const void *data, size_t len);

/* Consume a nil if one is next; true if it did. */
bool mstar__rd_nil(mstar__rd *r);

/* An unsigned integer (msgpack uint, or int >= 0). */
mstar_status mstar__rd_uint(mstar__rd *r, const mstar__wpath *path, uint64_t *out);
/* A signed 64-bit integer (msgpack int, or uint <= INT64_MAX). */
mstar_status mstar__rd_int(mstar__rd *r, const mstar__wpath *path, int64_t *out);
/* A signed integer in min..max. */
mstar_status mstar__rd_int32(mstar__rd *r, const mstar__wpath *path, int32_t min, int32_t max,
                             int32_t *out);
mstar_status mstar__rd_bool(mstar__rd *r, const mstar__wpath *path, bool *out);
/* A float64, float32 or integer, as a double. */
mstar_status mstar__rd_double(mstar__rd *r, const mstar__wpath *path, double *out);
/* A string's bytes (not terminated; they stay in the input). */
mstar_status mstar__rd_str(mstar__rd *r, const mstar__wpath *path, const char **s, uint32_t *len);
mstar_status mstar__rd_bin(mstar__rd *r, const mstar__wpath *path, const char **s, uint32_t *len);
/* A valid name copied, terminated, into dst[MSTAR_NAME_MAX + 1]; with `may_be_empty`, "" too. */
mstar_status mstar__rd_name(mstar__rd *r, const mstar__wpath *path, bool may_be_empty, char *dst);
/* Printable text (reasons), copied, terminated, into dst[MSTAR_NAME_MAX + 1]. */
mstar_status mstar__rd_text(mstar__rd *r, const mstar__wpath *path, char *dst);
/* A request id: an integer or a valid name. */
mstar_status mstar__rd_rid(mstar__rd *r, const mstar__wpath *path, mstar_rid *out);

/* An array header of at most `max` entries, each at least `min_bytes` long on the wire. */
mstar_status mstar__rd_array(mstar__rd *r, const mstar__wpath *path, uint32_t max,
                             uint32_t min_bytes, uint32_t *n);
/* A map header of at most `max` entries, each (key and value) at least `min_bytes` long. */
mstar_status mstar__rd_map(mstar__rd *r, const mstar__wpath *path, uint32_t max, uint32_t min_bytes,
                           uint32_t *n);
/* Skip one value of any type, checking it as strictly as a known one (counts against bytes;
 * extension types rejected); nothing is allocated. */
mstar_status mstar__rd_skip(mstar__rd *r, const mstar__wpath *path);

/* Reads the value of a map's known key: `field` indexes the map's keys, `path` names the field. */
typedef mstar_status (*mstar__rd_field_fn)(mstar__rd *r, const mstar__wpath *path, int field,
                                           void *ctx);

/* A map of `map`'s kind: its header, then per entry the key (a string), looked up among the
 * allowed keys, and its value, read by `read_field` for a known key and skipped for a key this
 * build does not know. A repeated key is an error, and so is a required key missing at the end.
 * `path` names the map. Encoders write keys in table order, so the lookup tries the key after
 * the last one found first. */
mstar_status mstar__rd_fields(mstar__rd *r, const mstar__wpath *path, const mstar__wmap *map,
                              mstar__rd_field_fn read_field, void *ctx);

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct mstar__wr {
    char *data;
    size_t len;
    size_t cap;
    mstar_status status;   /* sticky: the first allocation failure */
    uint32_t tensors_left; /* descriptors the rest of this message may still hold */
} mstar__wr;

void mstar__wr_map(mstar__wr *w, uint32_t n);
void mstar__wr_array(mstar__wr *w, uint32_t n);
void mstar__wr_key(mstar__wr *w, const mstar__wkey *key);
void mstar__wr_uint(mstar__wr *w, uint64_t v);
void mstar__wr_int(mstar__wr *w, int64_t v);
void mstar__wr_bool(mstar__wr *w, bool v);
void mstar__wr_double(mstar__wr *w, double v);
void mstar__wr_str(mstar__wr *w, const char *s, size_t len);
/* A NUL-terminated string. */
void mstar__wr_cstr(mstar__wr *w, const char *s);
void mstar__wr_bin(mstar__wr *w, const void *s, size_t len);
void mstar__wr_rid(mstar__wr *w, const mstar_rid *rid);

/* Writes the value of field `field` of `value`; `path` names the field. */
typedef mstar_status (*mstar__wr_field_fn)(mstar__wr *w, const mstar__wpath *path, int field,
                                           const void *value);

/* A map of the fields of `value` whose bits are set in `present` (indexing map->keys), in key
 * order: each key, then its value through `write_field`. Stops at the first failure. */
mstar_status mstar__wr_fields(mstar__wr *w, const mstar__wpath *path, const mstar__wmap *map,
                              uint64_t present, mstar__wr_field_fn write_field, const void *value);

/* ---- the descriptor budget ---------------------------------------------------------------------
 *
 * A message holds at most MSTAR_WIRE_MAX_TENSORS descriptors in all, across its edges. Reader and
 * writer each start with that budget (tensors_left) and take every descriptor array out of it:
 * past it is `code` (EPROTO reading, EINVAL writing) naming `path`. */
mstar_status mstar__wire_take_tensors(mstar_status code, const mstar__wpath *path,
                                      uint32_t *tensors_left, uint32_t n);

/* ---- whole buffers ----------------------------------------------------------------------------
 *
 * What every public encoder and decoder does around its value: argument checks, the size limit,
 * the root of the field paths (`root`), and no bytes left over after the value. The decoder's
 * caller clears *out when this fails: `read` may have succeeded before the trailing bytes were
 * found. */

typedef mstar_status (*mstar__read_fn)(mstar__rd *r, const mstar__wpath *path, void *out);
typedef mstar_status (*mstar__write_fn)(mstar__wr *w, const mstar__wpath *path, const void *value);

mstar_status mstar__decode_root(const char *root, mstar__read_fn read, const void *data, size_t len,
                                void *out);
mstar_status mstar__encode_root(const char *root, mstar__write_fn write, const void *value,
                                void **data, size_t *len);
/* The same into the caller's buffer *buf of *cap bytes (NULL and 0 at first), which grows when
 * the encoding needs more and stays the caller's whatever the outcome. */
mstar_status mstar__encode_root_into(const char *root, mstar__write_fn write, const void *value,
                                     void **buf, size_t *cap, size_t *len);

/* ---- the codecs, for the message codec to nest ----------------------------------------------- */

/* Descriptor and edge maps. On failure the decoders leave *out in init state (a failed edge owns
 * nothing); the encoders validate first (EINVAL). */
mstar_status mstar__info_read(mstar__rd *r, const mstar__wpath *path, mstar_tensor_info *out);
mstar_status mstar__info_write(mstar__wr *w, const mstar__wpath *path,
                               const mstar_tensor_info *info);
mstar_status mstar__edge_read(mstar__rd *r, const mstar__wpath *path, mstar_edge *out);
mstar_status mstar__edge_write(mstar__wr *w, const mstar__wpath *path, const mstar_edge *edge);
/* An array of descriptors into an edge (the edge owns what was read, even on failure). */
mstar_status mstar__infos_read(mstar__rd *r, const mstar__wpath *path, mstar_edge *edge);
mstar_status mstar__infos_write(mstar__wr *w, const mstar__wpath *path, const mstar_edge *edge);

#endif
