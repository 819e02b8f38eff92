/*
 * bench_ucx.c — `mstar bench ucx`: what a remote read costs over UCX on TCP, by size, for both
 * read protocols (get, active messages), next to a raw TCP stream on loopback measured in the
 * same run — the baseline the transport is judged against (issue 4: at >= 1 MiB, at least 0.6x
 * the stream).
 *
 * Three processes, so that nothing shares a UCX worker or a socket buffer with the measurer:
 *   - a UCX producer: an engine with one registered buffer of the largest size, serving reads;
 *   - a TCP server: on request, streams `count` writes of `size` bytes, or answers one request
 *     with `size` bytes (for latency);
 *   - this process: the consumer. Both children are forked before this process touches UCX.
 *
 * Throughput: UCX keeps K reads of `size` bytes outstanding in one batch (K = 64 MiB / size,
 * 2..256) and repeats; the stream writes `size`-byte chunks back to back; each is the best of
 * three interleaved rounds. Latency: one read (or one request/reply) at a time, the median. All
 * read the same bytes, and the consumer checks them.
 */
#include "bench.h"

#include "core/vec.h"
#include "tensors/ucx/ucx_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB    (UINT64_C(1) << 20)
#define ROUNDS 3

typedef struct bench_opts {
    uint64_t min_size;
    uint64_t max_size;
    uint64_t volume; /* bytes moved per throughput point */
} bench_opts;

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 131 + 7 + (i >> 12));
}

static void fill(uint8_t *buf, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        buf[i] = pattern(i);
}

/* The first and last bytes of a read of [0, n) are what the producer holds. */
static bool looks_right(const uint8_t *buf, uint64_t n)
{
    uint64_t edge = n < 256 ? n : 256;
    for (uint64_t i = 0; i < edge; i++)
        if (buf[i] != pattern(i) || buf[n - 1 - i] != pattern(n - 1 - i))
            return false;
    return true;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

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
    fill(buf, size);
    if (mstar__ucx_engine_register(e, buf, size, h.key, &h.key_len) != MSTAR_OK) {
        fprintf(stderr, "bench ucx producer: %s\n", mstar_last_error());
        return 1;
    }
    snprintf(h.session, sizeof(h.session), "%s", mstar__ucx_engine_session_id(e));
    h.addr = (uint64_t)(uintptr_t)buf;
    write_all(hello_fd, &h, sizeof(h));
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
    bool ok = read_all(hello[0], &h, sizeof(h));
    close(hello[0]);
    if (!ok)
        return false;
    memcpy(c->session, h.session, sizeof(c->session));
    c->addr = h.addr;
    c->key_len = h.key_len;
    memcpy(c->key, h.key, sizeof(c->key));
    return true;
}

/* Commands to the TCP server: {op, size, count} as three u64. */
enum { TCP_STREAM = 1, TCP_REPLY = 2 };

static int tcp_server_main(int lfd, uint64_t max_size)
{
    int fd = accept(lfd, NULL, NULL);
    close(lfd);
    uint8_t *buf = malloc(max_size);
    if (fd < 0 || buf == NULL)
        return 1;
    fill(buf, max_size);
    uint64_t cmd[3];
    while (read_all(fd, cmd, sizeof(cmd))) {
        uint64_t count = cmd[0] == TCP_STREAM ? cmd[2] : 1;
        for (uint64_t i = 0; i < count; i++)
            if (!write_all(fd, buf, cmd[1]))
                return 1;
    }
    free(buf);
    close(fd);
    return 0;
}

static int start_tcp_child(pid_t *pid, uint64_t max_size)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    *pid = fork();
    if (*pid < 0)
        return -1;
    if (*pid == 0)
        _exit(tcp_server_main(lfd, max_size));
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* ---- measuring ------------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double median_us(uint64_t *ns, size_t n)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    return (double)ns[n / 2] / 1000.0;
}

static size_t latency_reps(uint64_t size)
{
    return size <= MIB ? 200 : size <= 16 * MIB ? 20 : 5;
}

/* GB/s of a TCP stream of `size`-byte writes. */
static double tcp_stream(int fd, uint8_t *buf, uint64_t size, uint64_t volume, bool *ok)
{
    uint64_t count = volume / size < 4 ? 4 : volume / size;
    uint64_t cmd[3] = { TCP_STREAM, size, count };
    uint64_t t0 = mstar__now_ns();
    *ok = write_all(fd, cmd, sizeof(cmd));
    for (uint64_t i = 0; *ok && i < count; i++)
        *ok = read_all(fd, buf, size);
    uint64_t t1 = mstar__now_ns();
    *ok = *ok && looks_right(buf, size);
    return (double)(count * size) / (double)(t1 - t0);
}

static double tcp_latency(int fd, uint8_t *buf, uint64_t size, bool *ok)
{
    size_t reps = latency_reps(size);
    uint64_t *ns = calloc(reps, sizeof(*ns));
    uint64_t cmd[3] = { TCP_REPLY, size, 1 };
    *ok = ns != NULL;
    for (size_t i = 0; *ok && i < reps; i++) {
        uint64_t t0 = mstar__now_ns();
        *ok = write_all(fd, cmd, sizeof(cmd)) && read_all(fd, buf, size);
        ns[i] = mstar__now_ns() - t0;
    }
    double us = *ok ? median_us(ns, reps) : 0;
    free(ns);
    return us;
}

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
        *ok = looks_right(dst + i * size, size);
    return (double)(iters * k * size) / (double)(t1 - t0);
}

static double ucx_latency(mstar__ucx_engine *e, mstar__ucx_read_protocol proto, const ucx_child *c,
                          uint8_t *dst, uint64_t size, bool *ok)
{
    size_t reps = latency_reps(size);
    uint64_t *ns = calloc(reps, sizeof(*ns));
    mstar__ucx_read_info ri;
    ucx_infos(c, dst, size, 1, &ri);
    *ok = ns != NULL;
    for (size_t i = 0; *ok && i < reps; i++) {
        uint64_t t0 = mstar__now_ns();
        *ok = mstar__ucx_engine_read_with(e, proto, &ri, 1) == MSTAR_OK;
        ns[i] = mstar__now_ns() - t0;
    }
    *ok = *ok && looks_right(dst, size);
    double us = *ok ? median_us(ns, reps) : 0;
    free(ns);
    return us;
}

static void format_size(uint64_t n, char *buf, size_t cap)
{
    if (n >= MIB)
        snprintf(buf, cap, "%llu MiB", (unsigned long long)(n / MIB));
    else
        snprintf(buf, cap, "%llu KiB", (unsigned long long)(n / 1024));
}

static int run(const bench_opts *o, const ucx_child *uc, int tcp_fd)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar__ucx_engine *e;
    if (mstar__ucx_config_from_env(&cfg) != MSTAR_OK ||
        mstar__ucx_engine_create(&cfg, &e) != MSTAR_OK) {
        fprintf(stderr, "mstar bench ucx: %s\n", mstar_last_error());
        return 1;
    }
    uint64_t dst_len = o->max_size * 2 > 64 * MIB ? o->max_size * 2 : 64 * MIB;
    uint8_t *dst = malloc(dst_len);
    if (dst == NULL) {
        mstar__ucx_engine_destroy(e);
        return 1;
    }
    memset(dst, 0, dst_len);
    printf("UCX over TCP on loopback (UCX_TLS=%s), %llu MiB per throughput point\n",
           getenv("UCX_TLS") ? getenv("UCX_TLS") : "tcp", (unsigned long long)(o->volume / MIB));
    printf("%-8s %11s %11s %11s %7s %7s %9s %9s %9s\n", "size", "tcp GB/s", "get GB/s", "am GB/s",
           "get/tcp", "am/tcp", "tcp us", "get us", "am us");
    double worst[2] = { 1e9, 1e9 };
    bool all_ok = true;
    for (uint64_t s = o->min_size; s <= o->max_size; s *= 4) {
        bool ok[8];
        /* Best of ROUNDS, the three interleaved: other load on the machine lowers a point, it
         * never raises one, and interleaving exposes all three to the same conditions. */
        double bw_tcp = 0, bw_get = 0, bw_am = 0;
        for (int round = 0; round < ROUNDS; round++) {
            double t = tcp_stream(tcp_fd, dst, s, o->volume / ROUNDS, &ok[0]);
            double g =
                ucx_throughput(e, MSTAR__UCX_READ_GET, uc, dst, s, o->volume / ROUNDS, &ok[1]);
            double a =
                ucx_throughput(e, MSTAR__UCX_READ_AM, uc, dst, s, o->volume / ROUNDS, &ok[2]);
            bw_tcp = t > bw_tcp ? t : bw_tcp;
            bw_get = g > bw_get ? g : bw_get;
            bw_am = a > bw_am ? a : bw_am;
        }
        double lat_tcp = tcp_latency(tcp_fd, dst, s, &ok[3]);
        double lat_get = ucx_latency(e, MSTAR__UCX_READ_GET, uc, dst, s, &ok[4]);
        double lat_am = ucx_latency(e, MSTAR__UCX_READ_AM, uc, dst, s, &ok[5]);
        for (int i = 0; i < 6; i++)
            all_ok = all_ok && ok[i];
        if (!all_ok) {
            fprintf(stderr,
                    "mstar bench ucx: a read at %llu bytes failed or read wrong bytes: "
                    "%s\n",
                    (unsigned long long)s, mstar_last_error());
            break;
        }
        char name[32];
        format_size(s, name, sizeof(name));
        printf("%-8s %11.2f %11.2f %11.2f %7.2f %7.2f %9.1f %9.1f %9.1f\n", name, bw_tcp, bw_get,
               bw_am, bw_get / bw_tcp, bw_am / bw_tcp, lat_tcp, lat_get, lat_am);
        if (s >= MIB) {
            worst[0] = bw_get / bw_tcp < worst[0] ? bw_get / bw_tcp : worst[0];
            worst[1] = bw_am / bw_tcp < worst[1] ? bw_am / bw_tcp : worst[1];
        }
        fflush(stdout);
    }
    if (all_ok && worst[0] < 1e9)
        printf("lowest ratio to the TCP stream at >= 1 MiB: get %.2f, am %.2f (target 0.60; "
               "default protocol: %s)\n",
               worst[0], worst[1], mstar__ucx_read_protocol_name(cfg.read_protocol));
    free(dst);
    mstar__ucx_engine_destroy(e);
    return all_ok ? 0 : 1;
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
    fprintf(out, "usage: mstar bench ucx [--quick] [--min BYTES] [--max BYTES] [--volume-mib N]\n"
                 "  sizes go from --min (4096) to --max (64 MiB) by x4; each throughput point\n"
                 "  moves --volume-mib (256) MiB; --quick is --max 4 MiB --volume-mib 32.\n"
                 "  UCX_* variables are passed to UCX;\n"
                 "  MSTAR_UCX_READ_PROTOCOL names the default protocol shown.\n");
}

int mstar_bench_ucx(int argc, char **argv)
{
    bench_opts o = { 4096, 64 * MIB, 256 * MIB };
    for (int i = 1; i < argc; i++) {
        bool ok = i + 1 < argc;
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            o.max_size = 4 * MIB;
            o.volume = 32 * MIB;
            ok = true;
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
    signal(SIGPIPE, SIG_IGN);
    ucx_child uc;
    pid_t tcp_pid = -1;
    if (!start_ucx_child(&uc, o.max_size)) {
        fprintf(stderr, "mstar bench ucx: the producer process did not start\n");
        return 1;
    }
    int tcp_fd = start_tcp_child(&tcp_pid, o.max_size);
    int rc = tcp_fd < 0 ? 1 : run(&o, &uc, tcp_fd);
    if (tcp_fd >= 0)
        close(tcp_fd); /* the server sees EOF and exits */
    close(uc.ctl);     /* so does the producer */
    waitpid(uc.pid, NULL, 0);
    if (tcp_pid > 0)
        waitpid(tcp_pid, NULL, 0);
    return rc;
}
