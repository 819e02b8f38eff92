/*
 * bench_tcp.c — the raw loopback TCP stream baseline (see bench_tcp.h).
 *
 * The server is a forked process: on a command {op, size, count} (three u64) it writes `count`
 * chunks of `size` bytes back to back (a stream), or `size` bytes once (a reply, for latency).
 */
#include "bench_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/vec.h"

enum { TCP_STREAM = 1, TCP_REPLY = 2 };

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 131 + 7 + (i >> 12));
}

void mstar_bench_pattern_fill(uint8_t *buf, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        buf[i] = pattern(i);
}

bool mstar_bench_pattern_looks_right(const uint8_t *buf, uint64_t n)
{
    uint64_t edge = n < 256 ? n : 256;
    for (uint64_t i = 0; i < edge; i++)
        if (buf[i] != pattern(i) || buf[n - 1 - i] != pattern(n - 1 - i))
            return false;
    return true;
}

bool mstar_bench_write_all(int fd, const void *p, size_t n)
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

bool mstar_bench_read_all(int fd, void *p, size_t n)
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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double mstar_bench_latency_us(uint64_t size, bool (*once)(void *ctx), void *ctx, bool *ok)
{
    size_t reps = size <= (UINT64_C(1) << 20) ? 200 : size <= (UINT64_C(16) << 20) ? 20 : 5;
    uint64_t *ns = calloc(reps, sizeof(*ns));
    *ok = ns != NULL;
    for (size_t i = 0; *ok && i < reps; i++) {
        uint64_t t0 = mstar__now_ns();
        *ok = once(ctx);
        ns[i] = mstar__now_ns() - t0;
    }
    double us = 0;
    if (*ok) {
        qsort(ns, reps, sizeof(*ns), cmp_u64);
        us = (double)ns[reps / 2] / 1000.0;
    }
    free(ns);
    return us;
}

/* ---- the server ----------------------------------------------------------------------------- */

static int server_main(int lfd, uint64_t max_size)
{
    int fd = accept(lfd, NULL, NULL);
    close(lfd);
    uint8_t *buf = malloc(max_size);
    if (fd < 0 || buf == NULL)
        return 1;
    mstar_bench_pattern_fill(buf, max_size);
    uint64_t cmd[3];
    while (mstar_bench_read_all(fd, cmd, sizeof(cmd))) {
        uint64_t count = cmd[0] == TCP_STREAM ? cmd[2] : 1;
        for (uint64_t i = 0; i < count; i++)
            if (cmd[1] > max_size || !mstar_bench_write_all(fd, buf, cmd[1]))
                return 1;
    }
    free(buf);
    close(fd);
    return 0;
}

int mstar_bench_tcp_start(pid_t *pid, uint64_t max_size)
{
    *pid = -1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0) {
        if (lfd >= 0)
            close(lfd);
        return -1;
    }
    *pid = fork();
    if (*pid == 0)
        _exit(server_main(lfd, max_size));
    close(lfd);
    if (*pid < 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd); /* the server's accept fails or sees EOF: it exits */
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

void mstar_bench_tcp_stop(int fd, pid_t pid)
{
    if (fd >= 0)
        close(fd);
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

/* ---- measuring ------------------------------------------------------------------------------ */

double mstar_bench_tcp_stream(int fd, uint8_t *buf, uint64_t size, uint64_t volume, bool *ok)
{
    uint64_t count = volume / size < 4 ? 4 : volume / size;
    uint64_t cmd[3] = { TCP_STREAM, size, count };
    uint64_t t0 = mstar__now_ns();
    *ok = mstar_bench_write_all(fd, cmd, sizeof(cmd));
    for (uint64_t i = 0; *ok && i < count; i++)
        *ok = mstar_bench_read_all(fd, buf, size);
    uint64_t t1 = mstar__now_ns();
    *ok = *ok && mstar_bench_pattern_looks_right(buf, size);
    return (double)(count * size) / (double)(t1 - t0);
}

typedef struct tcp_reply {
    int fd;
    uint8_t *buf;
    uint64_t size;
} tcp_reply;

static bool tcp_reply_once(void *ctx)
{
    const tcp_reply *t = ctx;
    uint64_t cmd[3] = { TCP_REPLY, t->size, 1 };
    return mstar_bench_write_all(t->fd, cmd, sizeof(cmd)) &&
           mstar_bench_read_all(t->fd, t->buf, t->size);
}

double mstar_bench_tcp_latency(int fd, uint8_t *buf, uint64_t size, bool *ok)
{
    tcp_reply t = { fd, buf, size };
    return mstar_bench_latency_us(size, tcp_reply_once, &t, ok);
}
