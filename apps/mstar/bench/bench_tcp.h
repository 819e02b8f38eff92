/*
 * bench_tcp.h — the raw loopback TCP stream that the remote-transport benchmarks are judged
 * against (issue 4: at >= 1 MiB, at least 0.6x its throughput), measured in the same run, and
 * what its measurements share with theirs: a byte pattern the consumer checks, whole-buffer
 * socket I/O, medians. Used by `mstar bench ucx` (bench_ucx.c) and `mstar bench transport
 * --transport ucx-tcp` (bench_transport.c).
 */
#ifndef MSTAR_BENCH_TCP_H
#define MSTAR_BENCH_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The bench's byte pattern over [0, n), and a check of the first and last bytes of a read of
 * [0, n) against it. */
void mstar_bench_pattern_fill(uint8_t *buf, uint64_t n);
bool mstar_bench_pattern_looks_right(const uint8_t *buf, uint64_t n);

/* The whole buffer or false (EOF, error). */
bool mstar_bench_write_all(int fd, const void *p, size_t n);
bool mstar_bench_read_all(int fd, void *p, size_t n);

/* The median µs of `once` (one request answered, one read of `size` bytes), run as many times
 * as a latency point at this size takes; *ok is false when a call returned false. */
double mstar_bench_latency_us(uint64_t size, bool (*once)(void *ctx), void *ctx, bool *ok);

/* A TCP server process on 127.0.0.1 holding max_size patterned bytes, and this process's
 * connection to it (TCP_NODELAY). Fork it before this process uses UCX. Returns the fd, or -1
 * (then *pid is -1 or a child that exits on its own). */
int mstar_bench_tcp_start(pid_t *pid, uint64_t max_size);
/* Close the connection (the server sees EOF and exits) and reap the server. */
void mstar_bench_tcp_stop(int fd, pid_t pid);

/* GB/s of a stream of `size`-byte writes, at least 4 of them and about `volume` bytes, read
 * into buf (size bytes) and checked. */
double mstar_bench_tcp_stream(int fd, uint8_t *buf, uint64_t size, uint64_t volume, bool *ok);
/* The median µs of one request answered with `size` bytes. */
double mstar_bench_tcp_latency(int fd, uint8_t *buf, uint64_t size, bool *ok);

#endif
