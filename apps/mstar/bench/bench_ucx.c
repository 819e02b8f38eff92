/*
 * bench_ucx.c — `mstar bench ucx`: what a remote read costs over UCX on TCP, by size, for both
 * read protocols (get, active messages), next to a raw TCP stream on loopback measured in the
 * same run — the baseline the transport is judged against (issue 4: at >= 1 MiB, at least 0.6x
 * the stream).
 *
 * Three processes, so that nothing shares a UCX worker or a socket buffer with the measurer:
 *   - a UCX producer: an engine with one registered buffer of the largest size, serving reads;
 *   - a TCP server (bench_tcp.c, the baseline): on request, streams `count` writes of `size`
 *     bytes, or answers one request with `size` bytes (for latency);
 *   - this process: the consumer. Both children are forked before this process touches UCX.
 *
 * Throughput: UCX keeps K reads of `size` bytes outstanding in one batch (K = 64 MiB / size,
 * 2..256) and repeats; the stream writes `size`-byte chunks back to back; each is the best of
 * three interleaved rounds. Latency: one read (or one request/reply) at a time, the median. All
 * read the same bytes, and the consumer checks them.
 */
#include "bench.h"
#include "bench_tcp.h"

#include "core/json.h"
#include "core/vec.h"
#include "tensors/ucx/ucx_engine.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB    (UINT64_C(1) << 20)
#define ROUNDS 3

typedef mstar_bench_ucx_options bench_opts;

/* ---- the children --------------------------------------------------------------------------- */

typedef struct ucx_child {
    pid_t pid;
    int ctl; /* write a byte (or close) to stop it */
    char session[MSTAR_NAME_MAX + 1];
    uint64_t addr;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
} ucx_child;

typedef struct ucx_child_hello {
    char session[MSTAR_NAME_MAX + 1];
    uint64_t addr;
    uint32_t key_len;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
} ucx_child_hello;

static int ucx_producer_main(int ctl, int hello_fd, uint64_t size)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar__ucx_engine *e;
    if (mstar__ucx_config_from_env(&cfg) != MSTAR_OK ||
        mstar__ucx_engine_create(&cfg, &e) != MSTAR_OK) {
        fprintf(stderr, "bench ucx producer: %s\n", mstar_last_error());
        return 1;
    }
    uint8_t *buf = malloc(size);
    ucx_child_hello h;
    memset(&h, 0, sizeof(h));
    if (buf == NULL)
        return 1;
    mstar_bench_pattern_fill(buf, size);
    if (mstar__ucx_engine_register(e, buf, size, h.key, &h.key_len) != MSTAR_OK) {
        fprintf(stderr, "bench ucx producer: %s\n", mstar_last_error());
        return 1;
    }
    snprintf(h.session, sizeof(h.session), "%s", mstar__ucx_engine_session_id(e));
    h.addr = (uint64_t)(uintptr_t)buf;
    mstar_bench_write_all(hello_fd, &h, sizeof(h));
    char c;
    while (read(ctl, &c, 1) < 0 && errno == EINTR) {
    }
    mstar__ucx_engine_unregister(e, buf);
    mstar__ucx_engine_destroy(e);
    free(buf);
    return 0;
}

static bool start_ucx_child(ucx_child *c, uint64_t size)
{
    int ctl[2], hello[2];
    if (pipe(ctl) != 0 || pipe(hello) != 0)
        return false;
    c->pid = fork();
    if (c->pid < 0)
        return false;
    if (c->pid == 0) {
        close(ctl[1]);
        close(hello[0]);
        _exit(ucx_producer_main(ctl[0], hello[1], size));
    }
    close(ctl[0]);
    close(hello[1]);
    c->ctl = ctl[1];
    ucx_child_hello h;
    bool ok = mstar_bench_read_all(hello[0], &h, sizeof(h));
    close(hello[0]);
    if (!ok)
        return false;
    memcpy(c->session, h.session, sizeof(c->session));
    c->addr = h.addr;
    c->key_len = h.key_len;
    memcpy(c->key, h.key, sizeof(c->key));
    return true;
}

/* ---- measuring ------------------------------------------------------------------------------ */

static void ucx_infos(const ucx_child *c, uint8_t *dst, uint64_t size, size_t k,
                      mstar__ucx_read_info *infos)
{
    for (size_t i = 0; i < k; i++) {
        mstar__ucx_read_info ri = { c->session, dst + i * size, c->addr, size, c->key, c->key_len };
        infos[i] = ri;
    }
}

static double ucx_throughput(mstar__ucx_engine *e, mstar__ucx_read_protocol proto,
                             const ucx_child *c, uint8_t *dst, uint64_t size, uint64_t volume,
                             bool *ok)
{
    uint64_t k64 = 64 * MIB / size;
    size_t k = k64 < 2 ? 2 : k64 > 256 ? 256 : (size_t)k64;
    uint64_t iters = volume / (k * size) < 2 ? 2 : volume / (k * size);
    mstar__ucx_read_info infos[256];
    ucx_infos(c, dst, size, k, infos);
    uint64_t t0 = mstar__now_ns();
    *ok = true;
    for (uint64_t i = 0; *ok && i < iters; i++)
        *ok = mstar__ucx_engine_read_with(e, proto, infos, k) == MSTAR_OK;
    uint64_t t1 = mstar__now_ns();
    for (size_t i = 0; *ok && i < k; i++)
        *ok = mstar_bench_pattern_looks_right(dst + i * size, size);
    return (double)(iters * k * size) / (double)(t1 - t0);
}

typedef struct ucx_read {
    mstar__ucx_engine *e;
    mstar__ucx_read_protocol proto;
    mstar__ucx_read_info ri;
} ucx_read;

static bool ucx_read_once(void *ctx)
{
    ucx_read *u = ctx;
    return mstar__ucx_engine_read_with(u->e, u->proto, &u->ri, 1) == MSTAR_OK;
}

static double ucx_latency(mstar__ucx_engine *e, mstar__ucx_read_protocol proto, const ucx_child *c,
                          uint8_t *dst, uint64_t size, bool *ok)
{
    ucx_read u = { e, proto, { 0 } };
    ucx_infos(c, dst, size, 1, &u.ri);
    double us = mstar_bench_latency_us(size, ucx_read_once, &u, ok);
    *ok = *ok && mstar_bench_pattern_looks_right(dst, size);
    return us;
}

static mstar_status run(const bench_opts *o, const ucx_child *uc, int tcp_fd,
                        mstar_bench_ucx_result *out)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar__ucx_engine *e;
    mstar_status st = mstar__ucx_config_from_env(&cfg);
    if (st == MSTAR_OK)
        st = mstar__ucx_engine_create(&cfg, &e);
    if (st != MSTAR_OK)
        return st;
    out->protocol = mstar__ucx_read_protocol_name(cfg.read_protocol);
    uint64_t dst_len = o->max_size * 2 > 64 * MIB ? o->max_size * 2 : 64 * MIB;
    uint8_t *dst = malloc(dst_len);
    if (dst == NULL) {
        mstar__ucx_engine_destroy(e);
        return mstar_error_set(MSTAR_ENOMEM, "bench ucx: %llu bytes to read into",
                               (unsigned long long)dst_len);
    }
    memset(dst, 0, dst_len);
    for (uint64_t s = o->min_size; s <= o->max_size && out->nrows < MSTAR_BENCH_UCX_MAX_SIZES;
         s *= 4) {
        char name[32];
        mstar_bench_size_name(s, name, sizeof(name));
        mstar_bench_progress("ucx", "%s: TCP stream, get, AM", name);
        mstar_error_clear(); /* so that a failure below is told by the error it sets, or none */
        bool ok[8];
        /* Best of ROUNDS, the three interleaved: other load on the machine lowers a point, it
         * never raises one, and interleaving exposes all three to the same conditions. */
        double bw_tcp = 0, bw_get = 0, bw_am = 0;
        for (int round = 0; round < ROUNDS; round++) {
            double t = mstar_bench_tcp_stream(tcp_fd, dst, s, o->volume / ROUNDS, &ok[0]);
            double g =
                ucx_throughput(e, MSTAR__UCX_READ_GET, uc, dst, s, o->volume / ROUNDS, &ok[1]);
            double a =
                ucx_throughput(e, MSTAR__UCX_READ_AM, uc, dst, s, o->volume / ROUNDS, &ok[2]);
            bw_tcp = t > bw_tcp ? t : bw_tcp;
            bw_get = g > bw_get ? g : bw_get;
            bw_am = a > bw_am ? a : bw_am;
        }
        mstar_bench_ucx_row *r = &out->rows[out->nrows];
        r->bytes = s;
        r->tcp_gbps = bw_tcp;
        r->get_gbps = bw_get;
        r->am_gbps = bw_am;
        r->tcp_us = mstar_bench_tcp_latency(tcp_fd, dst, s, &ok[3]);
        r->get_us = ucx_latency(e, MSTAR__UCX_READ_GET, uc, dst, s, &ok[4]);
        r->am_us = ucx_latency(e, MSTAR__UCX_READ_AM, uc, dst, s, &ok[5]);
        bool all_ok = true;
        for (int i = 0; i < 6; i++)
            all_ok = all_ok && ok[i];
        if (!all_ok) {
            /* A UCX read that failed set its error; the TCP stream and a wrong byte set none. */
            st = mstar_last_status() != MSTAR_OK
                     ? mstar_error_wrap("a read of %s failed", name)
                     : mstar_error_set(MSTAR_EREMOTE,
                                       "a read of %s failed on TCP or read wrong bytes", name);
            break;
        }
        out->nrows++;
    }
    free(dst);
    mstar__ucx_engine_destroy(e);
    return st;
}

void mstar_bench_ucx_options_init(mstar_bench_ucx_options *o, bool quick)
{
    o->min_size = 4096;
    o->max_size = quick ? 4 * MIB : 64 * MIB;
    o->volume = quick ? 16 * MIB : 256 * MIB;
}

mstar_status mstar_bench_ucx_run(const mstar_bench_ucx_options *o, mstar_bench_ucx_result *out)
{
    memset(out, 0, sizeof(*out));
    out->opts = *o;
    snprintf(out->tls, sizeof(out->tls), "%s", getenv("UCX_TLS") ? getenv("UCX_TLS") : "tcp");
    if (o->min_size == 0 || o->min_size > o->max_size || o->max_size > 1024 * MIB)
        return mstar_error_set(MSTAR_EINVAL, "need 0 < min_size <= max_size <= 1 GiB");
    signal(SIGPIPE, SIG_IGN);
    ucx_child uc;
    pid_t tcp_pid = -1;
    mstar_bench_progress("ucx", "starting the producer and the TCP server");
    if (!start_ucx_child(&uc, o->max_size))
        return mstar_error_set(MSTAR_EIO, "the UCX producer process did not start");
    int tcp_fd = mstar_bench_tcp_start(&tcp_pid, o->max_size);
    mstar_status st = tcp_fd < 0 ? mstar_error_set(MSTAR_EIO, "the TCP server did not start")
                                 : run(o, &uc, tcp_fd, out);
    mstar_bench_tcp_stop(tcp_fd, tcp_pid);
    close(uc.ctl); /* the producer sees EOF and exits */
    waitpid(uc.pid, NULL, 0);
    return st;
}

size_t mstar_bench_ucx_targets(const mstar_bench_ucx_result *r, mstar_bench_target *out)
{
    size_t get = SIZE_MAX, am = SIZE_MAX; /* the lowest ratio at >= 1 MiB of each */
    for (size_t i = 0; i < r->nrows; i++) {
        const mstar_bench_ucx_row *w = &r->rows[i];
        if (w->bytes < MIB)
            continue;
        if (get == SIZE_MAX ||
            w->get_gbps / w->tcp_gbps < r->rows[get].get_gbps / r->rows[get].tcp_gbps)
            get = i;
        if (am == SIZE_MAX || w->am_gbps / w->tcp_gbps < r->rows[am].am_gbps / r->rows[am].tcp_gbps)
            am = i;
    }
    if (get == SIZE_MAX)
        return 0;
    double g = r->rows[get].get_gbps / r->rows[get].tcp_gbps;
    double a = r->rows[am].am_gbps / r->rows[am].tcp_gbps;
    mstar_bench_target t[2] = {
        { "UCX TCP AM read at >= 1 MiB / raw TCP stream (lowest)", ">= 0.6x", a, "",
          a >= 0.6 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
        { "UCX TCP get at >= 1 MiB / raw TCP stream (lowest)", ">= 0.6x", g, "",
          g >= 0.6 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
    };
    char h[32];
    mstar_bench_size_name(r->rows[am].bytes, h, sizeof(h));
    snprintf(t[0].shown, sizeof(t[0].shown), "%.2fx (at %s)", a, h);
    mstar_bench_size_name(r->rows[get].bytes, h, sizeof(h));
    snprintf(t[1].shown, sizeof(t[1].shown), "%.2fx (at %s)", g, h);
    out[0] = t[0];
    out[1] = t[1];
    return 2;
}

void mstar_bench_ucx_json(const mstar_bench_ucx_result *r, FILE *out)
{
    fprintf(out, "{\"suite\":\"ucx\",\"tls\":");
    mstar__json_string(out, r->tls);
    fprintf(out, ",\"default_protocol\":");
    mstar__json_string(out, r->protocol);
    fprintf(out, ",\"volume_bytes\":%llu,\"sizes\":[", (unsigned long long)r->opts.volume);
    for (size_t i = 0; i < r->nrows; i++) {
        const mstar_bench_ucx_row *w = &r->rows[i];
        fprintf(out, "%s{\"bytes\":%llu", i ? "," : "", (unsigned long long)w->bytes);
        mstar_bench_json_field(out, "tcp_gbps", w->tcp_gbps, 4);
        mstar_bench_json_field(out, "get_gbps", w->get_gbps, 4);
        mstar_bench_json_field(out, "am_gbps", w->am_gbps, 4);
        mstar_bench_json_field(out, "get_vs_tcp", w->get_gbps / w->tcp_gbps, 3);
        mstar_bench_json_field(out, "am_vs_tcp", w->am_gbps / w->tcp_gbps, 3);
        mstar_bench_json_field(out, "tcp_us", w->tcp_us, 4);
        mstar_bench_json_field(out, "get_us", w->get_us, 4);
        mstar_bench_json_field(out, "am_us", w->am_us, 4);
        fprintf(out, "}");
    }
    fprintf(out, "]}\n");
}

static void print_table(const mstar_bench_ucx_result *r)
{
    printf("UCX over TCP on loopback (UCX_TLS=%s), %llu MiB per throughput point\n", r->tls,
           (unsigned long long)(r->opts.volume / MIB));
    printf("%-8s %11s %11s %11s %7s %7s %9s %9s %9s\n", "size", "tcp GB/s", "get GB/s", "am GB/s",
           "get/tcp", "am/tcp", "tcp us", "get us", "am us");
    for (size_t i = 0; i < r->nrows; i++) {
        const mstar_bench_ucx_row *w = &r->rows[i];
        char name[32];
        mstar_bench_size_name(w->bytes, name, sizeof(name));
        printf("%-8s %11.2f %11.2f %11.2f %7.2f %7.2f %9.1f %9.1f %9.1f\n", name, w->tcp_gbps,
               w->get_gbps, w->am_gbps, w->get_gbps / w->tcp_gbps, w->am_gbps / w->tcp_gbps,
               w->tcp_us, w->get_us, w->am_us);
    }
    printf("default read protocol: %s\n", r->protocol);
    mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
    mstar_bench_targets_print(t, mstar_bench_ucx_targets(r, t), stdout);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v == 0)
        return false;
    *out = v;
    return true;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: mstar bench ucx [--json] [--quick] [--min BYTES] [--max BYTES] "
                 "[--volume-mib N]\n"
                 "  sizes go from --min (4096) to --max (64 MiB) by x4; each throughput point\n"
                 "  moves --volume-mib (256) MiB; --quick is --max 4 MiB --volume-mib 16.\n"
                 "  UCX_* variables are passed to UCX;\n"
                 "  MSTAR_UCX_READ_PROTOCOL names the default protocol shown.\n");
}

int mstar_bench_ucx(int argc, char **argv)
{
    bench_opts o;
    mstar_bench_ucx_options_init(&o, false);
    bool json = false;
    for (int i = 1; i < argc; i++) {
        bool ok = i + 1 < argc;
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            bench_opts q;
            mstar_bench_ucx_options_init(&q, true);
            o.max_size = q.max_size;
            o.volume = q.volume;
            ok = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = ok = true;
        } else if (ok && strcmp(argv[i], "--min") == 0) {
            ok = parse_u64(argv[++i], &o.min_size);
        } else if (ok && strcmp(argv[i], "--max") == 0) {
            ok = parse_u64(argv[++i], &o.max_size);
        } else if (ok && strcmp(argv[i], "--volume-mib") == 0) {
            ok = parse_u64(argv[++i], &o.volume);
            o.volume *= MIB;
        } else {
            ok = false;
        }
        if (!ok) {
            usage(stderr);
            return 2;
        }
    }
    if (o.min_size > o.max_size || o.max_size > 1024 * MIB) {
        fprintf(stderr, "mstar bench ucx: need --min <= --max <= 1 GiB\n");
        return 2;
    }
    mstar_bench_progress_enable(!json);
    mstar_bench_ucx_result r;
    mstar_status st = mstar_bench_ucx_run(&o, &r);
    if (st != MSTAR_OK)
        fprintf(stderr, "mstar bench ucx: %s\n", mstar_last_error());
    if (json)
        mstar_bench_ucx_json(&r, stdout);
    else
        print_table(&r);
    return st == MSTAR_OK ? 0 : 1;
}
