/*
 * reader.c — the bounds-checked msgpack reader the decoders are built from (see codec.h).
 *
 * Each primitive checks the type byte, then that the header and the payload are present, and only
 * then calls msgpuck's decoder, whose own checks are debug asserts. The error says what the field
 * was expected to be and what was found.
 *
 * msgpuck's whole-value validator mp_check is not used on input: in msgpuck 1.0 it counts the
 * values still to come in an int, so a hostile container header wraps the count (a map32 claiming
 * 2^31 entries passes as empty) or overflows it (an array32 of 2^31 - 1 entries is undefined
 * behaviour; the fuzzer found it). mstar__rd_skip is the strict replacement.
 */
#include "codec.h"
#include "core/assert.h"

#include <msgpuck.h>
#include <stdio.h>
#include <string.h>

static const char *type_name(enum mp_type t)
{
    switch (t) {
    case MP_NIL:
        return "nil";
    case MP_UINT:
        return "an unsigned integer";
    case MP_INT:
        return "a negative integer";
    case MP_STR:
        return "a string";
    case MP_BIN:
        return "binary";
    case MP_ARRAY:
        return "an array";
    case MP_MAP:
        return "a map";
    case MP_BOOL:
        return "a bool";
    case MP_FLOAT:
        return "a float32";
    case MP_DOUBLE:
        return "a float64";
    case MP_EXT:
        return "an extension or reserved byte";
    }
    return "?";
}

static size_t left(const mstar__rd *r)
{
    return (size_t)(r->end - r->p);
}

static mstar_status truncated(const mstar__wpath *path)
{
    return mstar__wire_fail(MSTAR_EPROTO, path, "truncated");
}

/* The next value's type; false (with the error set) if the input ends here. */
static bool peek(const mstar__rd *r, const mstar__wpath *path, enum mp_type *t)
{
    if (r->p >= r->end) {
        truncated(path);
        return false;
    }
    *t = mp_typeof(*r->p);
    return true;
}

static mstar_status wrong_type(const mstar__wpath *path, const char *want, enum mp_type got)
{
    return mstar__wire_fail(MSTAR_EPROTO, path, "expected %s, got %s", want, type_name(got));
}

void mstar__rd_init(mstar__rd *r, const void *data, size_t len)
{
    r->p = data;
    r->end = r->p + len;
    r->tensors_left = MSTAR_WIRE_MAX_TENSORS;
}

bool mstar__rd_nil(mstar__rd *r)
{
    if (r->p >= r->end || mp_typeof(*r->p) != MP_NIL)
        return false;
    r->p++;
    return true;
}

mstar_status mstar__rd_uint(mstar__rd *r, const mstar__wpath *path, uint64_t *out)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t == MP_UINT) {
        if (mp_check_uint(r->p, r->end) > 0)
            return truncated(path);
        *out = mp_decode_uint(&r->p);
        return MSTAR_OK;
    }
    if (t == MP_INT) {
        if (mp_check_int(r->p, r->end) > 0)
            return truncated(path);
        const char *p = r->p;
        int64_t v = mp_decode_int(&p);
        if (v < 0)
            return mstar__wire_fail(MSTAR_EPROTO, path, "%lld, must be >= 0", (long long)v);
        r->p = p;
        *out = (uint64_t)v;
        return MSTAR_OK;
    }
    return wrong_type(path, "an unsigned integer", t);
}

mstar_status mstar__rd_int(mstar__rd *r, const mstar__wpath *path, int64_t *out)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t == MP_INT) {
        if (mp_check_int(r->p, r->end) > 0)
            return truncated(path);
        *out = mp_decode_int(&r->p);
        return MSTAR_OK;
    }
    if (t == MP_UINT) {
        if (mp_check_uint(r->p, r->end) > 0)
            return truncated(path);
        const char *p = r->p;
        uint64_t v = mp_decode_uint(&p);
        if (v > INT64_MAX)
            return mstar__wire_fail(MSTAR_EPROTO, path, "%llu does not fit in 64 signed bits",
                                    (unsigned long long)v);
        r->p = p;
        *out = (int64_t)v;
        return MSTAR_OK;
    }
    return wrong_type(path, "an integer", t);
}

mstar_status mstar__rd_int32(mstar__rd *r, const mstar__wpath *path, int32_t min, int32_t max,
                             int32_t *out)
{
    int64_t v;
    mstar_status st = mstar__rd_int(r, path, &v);
    if (st != MSTAR_OK)
        return st;
    if (v < min || v > max)
        return mstar__wire_fail(MSTAR_EPROTO, path, "%lld, must be in %d..%d", (long long)v,
                                (int)min, (int)max);
    *out = (int32_t)v;
    return MSTAR_OK;
}

mstar_status mstar__rd_bool(mstar__rd *r, const mstar__wpath *path, bool *out)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t != MP_BOOL)
        return wrong_type(path, "a bool", t);
    *out = mp_decode_bool(&r->p);
    return MSTAR_OK;
}

mstar_status mstar__rd_double(mstar__rd *r, const mstar__wpath *path, double *out)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t == MP_DOUBLE) {
        if (mp_check_double(r->p, r->end) > 0)
            return truncated(path);
        *out = mp_decode_double(&r->p);
        return MSTAR_OK;
    }
    if (t == MP_FLOAT) {
        if (mp_check_float(r->p, r->end) > 0)
            return truncated(path);
        *out = mp_decode_float(&r->p);
        return MSTAR_OK;
    }
    if (t == MP_UINT || t == MP_INT) {
        int64_t v;
        mstar_status st = mstar__rd_int(r, path, &v);
        if (st != MSTAR_OK)
            return st;
        *out = (double)v;
        return MSTAR_OK;
    }
    return wrong_type(path, "a number", t);
}

/* The n bytes of a string or binary whose header ends at p: they must all be in the input. */
static mstar_status take_payload(mstar__rd *r, const mstar__wpath *path, const char *p, uint32_t n,
                                 const char **s, uint32_t *len)
{
    if (n > (size_t)(r->end - p))
        return truncated(path);
    *s = p;
    *len = n;
    r->p = p + n;
    return MSTAR_OK;
}

mstar_status mstar__rd_str(mstar__rd *r, const mstar__wpath *path, const char **s, uint32_t *len)
{
    /* Keys and names are mostly short: a fixstr (0xa0..0xbf) is its own header, the type byte
     * holding the length. */
    if (r->p < r->end && ((unsigned char)*r->p & 0xe0) == 0xa0)
        return take_payload(r, path, r->p + 1, (unsigned char)*r->p & 0x1f, s, len);
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t != MP_STR)
        return wrong_type(path, "a string", t);
    if (mp_check_strl(r->p, r->end) > 0)
        return truncated(path);
    const char *p = r->p;
    uint32_t n = mp_decode_strl(&p);
    return take_payload(r, path, p, n, s, len);
}

mstar_status mstar__rd_bin(mstar__rd *r, const mstar__wpath *path, const char **s, uint32_t *len)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t != MP_BIN)
        return wrong_type(path, "binary", t);
    /* The header's length field is 1, 2 or 4 bytes (0xc4, 0xc5, 0xc6). Checked here rather than
     * with mp_check_binl, which asserts on a type byte that ends the buffer. */
    size_t hsize = 1u << ((unsigned char)*r->p & 0x3);
    if (left(r) < 1 + hsize)
        return truncated(path);
    const char *p = r->p;
    uint32_t n = mp_decode_binl(&p);
    return take_payload(r, path, p, n, s, len);
}

mstar_status mstar__rd_name(mstar__rd *r, const mstar__wpath *path, bool may_be_empty, char *dst)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    if (!(len == 0 && may_be_empty) &&
        (st = mstar__wire_check_name(MSTAR_EPROTO, path, s, len)) != MSTAR_OK)
        return st;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return MSTAR_OK;
}

mstar_status mstar__rd_text(mstar__rd *r, const mstar__wpath *path, char *dst)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    if ((st = mstar__wire_check_text(MSTAR_EPROTO, path, s, len)) != MSTAR_OK)
        return st;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return MSTAR_OK;
}

mstar_status mstar__rd_rid(mstar__rd *r, const mstar__wpath *path, mstar_rid *out)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t == MP_STR) {
        out->is_str = true;
        out->num = 0;
        return mstar__rd_name(r, path, false, out->str);
    }
    if (t == MP_UINT || t == MP_INT) {
        out->is_str = false;
        out->str[0] = '\0';
        return mstar__rd_int(r, path, &out->num);
    }
    return wrong_type(path, "an integer or a string", t);
}

/* A container header: its count, after checking the header bytes are present. */
static mstar_status container(mstar__rd *r, const mstar__wpath *path, enum mp_type want,
                              uint32_t *n)
{
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t != want)
        return wrong_type(path, want == MP_MAP ? "a map" : "an array", t);
    if (want == MP_MAP ? mp_check_map(r->p, r->end) > 0 : mp_check_array(r->p, r->end) > 0)
        return truncated(path);
    *n = want == MP_MAP ? mp_decode_map(&r->p) : mp_decode_array(&r->p);
    return MSTAR_OK;
}

/* The count against the limit and against the bytes present: n entries of at least `min_bytes`
 * each cannot fit in fewer bytes, whatever the header claims. */
static mstar_status check_count(const mstar__rd *r, const mstar__wpath *path, uint32_t n,
                                uint32_t max, uint32_t min_bytes)
{
    if (n > max)
        return mstar__wire_fail(MSTAR_EPROTO, path, "%u entries, at most %u", n, max);
    if ((uint64_t)n * min_bytes > left(r))
        return mstar__wire_fail(MSTAR_EPROTO, path,
                                "claims %u entries but only %zu bytes follow (truncated)", n,
                                left(r));
    return MSTAR_OK;
}

mstar_status mstar__rd_array(mstar__rd *r, const mstar__wpath *path, uint32_t max,
                             uint32_t min_bytes, uint32_t *n)
{
    mstar_status st = container(r, path, MP_ARRAY, n);
    if (st != MSTAR_OK)
        return st;
    return check_count(r, path, *n, max, min_bytes);
}

mstar_status mstar__rd_map(mstar__rd *r, const mstar__wpath *path, uint32_t max, uint32_t min_bytes,
                           uint32_t *n)
{
    mstar_status st = container(r, path, MP_MAP, n);
    if (st != MSTAR_OK)
        return st;
    return check_count(r, path, *n, max, min_bytes);
}

/* One scalar, read with the same checks as a known field and thrown away. */
static mstar_status skip_scalar(mstar__rd *r, const mstar__wpath *path, enum mp_type t)
{
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    const char *s;
    uint32_t len;
    switch (t) {
    case MP_NIL:
        r->p++;
        return MSTAR_OK;
    case MP_BOOL:
        return mstar__rd_bool(r, path, &b);
    case MP_UINT:
        return mstar__rd_uint(r, path, &u);
    case MP_INT:
        return mstar__rd_int(r, path, &i);
    case MP_FLOAT:
    case MP_DOUBLE:
        return mstar__rd_double(r, path, &d);
    case MP_STR:
        return mstar__rd_str(r, path, &s, &len);
    case MP_BIN:
        return mstar__rd_bin(r, path, &s, &len);
    default:
        /* Extension types (and the never-used byte 0xc1) have no place in this format. */
        return mstar__wire_fail(MSTAR_EPROTO, path, "byte 0x%02x: %s is not allowed",
                                (unsigned char)*r->p, type_name(t));
    }
}

mstar_status mstar__rd_skip(mstar__rd *r, const mstar__wpath *path)
{
    /* Iterative: `pending` values remain; a container adds its children. Each value takes at
     * least one byte, so a count is checked against the bytes left before it is added, and
     * pending never exceeds them. */
    uint64_t pending = 1;
    while (pending > 0) {
        pending--;
        enum mp_type t;
        if (!peek(r, path, &t))
            return MSTAR_EPROTO;
        mstar_status st;
        if (t != MP_ARRAY && t != MP_MAP) {
            if ((st = skip_scalar(r, path, t)) != MSTAR_OK)
                return st;
            continue;
        }
        uint32_t n;
        if ((st = container(r, path, t, &n)) != MSTAR_OK)
            return st;
        uint64_t values = t == MP_MAP ? 2 * (uint64_t)n : n;
        if (values + pending > left(r))
            return mstar__wire_fail(MSTAR_EPROTO, path,
                                    "%s claims %u entries but only %zu bytes follow "
                                    "(truncated)",
                                    t == MP_MAP ? "a map" : "an array", n, left(r));
        pending += values;
    }
    return MSTAR_OK;
}

/* The keys of one map being read: which were seen (a repeat is an error) and which come after
 * the last one found, where the next is looked for first. */
typedef struct read_keys {
    const mstar__wmap *map;
    uint64_t seen;
    uint64_t later;
} read_keys;

/* The index of the key s[0..len) among the keys whose bits are set in `keys`, or -1. Only those
 * are tried, lowest first: a map allows a few of its table's keys (a message body, 6 of 30).
 * Inline: it runs for every key read, and gcc -O2 does not inline it unasked. */
static inline int find_key(const mstar__wmap *map, uint64_t keys, const char *s, uint32_t len)
{
    for (; keys != 0; keys &= keys - 1) {
        int f = __builtin_ctzll(keys);
        const mstar__wkey *k = &map->keys[f];
        if (k->len == len && k->name[0] == s[0] && memcmp(k->name, s, len) == 0)
            return f;
    }
    return -1;
}

/* Read a map key (a string) and look it up among the allowed keys: *field is its index, or -1
 * for a key this build does not know. `path` names the map. */
static mstar_status read_key(mstar__rd *r, const mstar__wpath *path, read_keys *km, int *field)
{
    *field = -1;
    enum mp_type t;
    if (!peek(r, path, &t))
        return MSTAR_EPROTO;
    if (t != MP_STR)
        return mstar__wire_fail(MSTAR_EPROTO, path, "a key is %s, expected a string", type_name(t));
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    const mstar__wmap *map = km->map;
    int f = find_key(map, map->allowed & km->later, s, len);
    if (f < 0)
        f = find_key(map, map->allowed & ~km->later, s, len);
    if (f < 0)
        return MSTAR_OK;
    if (km->seen >> f & 1)
        return mstar__wire_fail(MSTAR_EPROTO, path, "duplicate key '%s'", map->keys[f].name);
    km->seen |= UINT64_C(1) << f;
    /* The bits above f (none when f is 63: 2 << 63 wraps to 0, and ~(0 - 1) is 0). */
    km->later = ~((UINT64_C(2) << f) - 1);
    *field = f;
    return MSTAR_OK;
}

mstar_status mstar__rd_fields(mstar__rd *r, const mstar__wpath *path, const mstar__wmap *map,
                              mstar__rd_field_fn read_field, void *ctx)
{
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    if (st != MSTAR_OK)
        return st;
    MSTAR__ASSERT(mstar__wmap_indexes(map, map->allowed));
    read_keys km = { map, 0, ~UINT64_C(0) };
    for (uint32_t i = 0; i < n; i++) {
        int field;
        if ((st = read_key(r, path, &km, &field)) != MSTAR_OK)
            return st;
        if (field < 0) {
            st = mstar__rd_skip(r, path);
        } else {
            mstar__wpath pf = mstar__wpath_key(path, map->keys[field].name);
            st = read_field(r, &pf, field, ctx);
        }
        if (st != MSTAR_OK)
            return st;
    }
    uint64_t missing = map->required & ~km.seen;
    if (missing == 0)
        return MSTAR_OK;
    return mstar__wire_fail(MSTAR_EPROTO, path, "missing required field '%s'",
                            map->keys[__builtin_ctzll(missing)].name);
}

mstar_status mstar__decode_root(const char *root, mstar__read_fn read, const void *data, size_t len,
                                void *out)
{
    if ((data == NULL && len > 0) || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "decoding %s: NULL argument", root);
    if (len > MSTAR_WIRE_MAX_MESSAGE)
        return mstar_error_set(MSTAR_EPROTO, "%s: %zu bytes, at most %u", root, len,
                               MSTAR_WIRE_MAX_MESSAGE);
    if (len == 0)
        return mstar_error_set(MSTAR_EPROTO, "%s: empty input", root);
    mstar__rd r;
    mstar__rd_init(&r, data, len);
    mstar__wpath path = mstar__wpath_key(NULL, root);
    mstar_status st = read(&r, &path, out);
    if (st == MSTAR_OK && r.p != r.end)
        st = mstar_error_set(MSTAR_EPROTO, "%s: %zu bytes after the end of the value", root,
                             left(&r));
    return st;
}
