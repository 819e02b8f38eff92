/*
 * spare_cpu.h — whether a thread that waits may spin: a spin is free only while no other task is
 * waiting for a CPU. The waits that poll before they sleep (the mesh's rings, a completion; see
 * MSTAR_RING_SPIN_US in docs/environment.md) ask this first, so that on a busy machine a spinner
 * does not take the core its peer, or anyone else, needs. And the pause each turn of such a spin
 * makes.
 */
#ifndef MSTAR_CORE_SPARE_CPU_H
#define MSTAR_CORE_SPARE_CPU_H

#include <stdbool.h>
#include <stdint.h>

/* True while the kernel's runnable tasks (the fourth field of /proc/loadavg, the caller
 * included) are no more than the CPUs this thread may run on. Read at most once a millisecond
 * per thread (`now_ns`: mstar__now_ns(), which a spinning caller has read already), the answer
 * kept in between; true where /proc/loadavg cannot be read or parsed (nothing says a CPU is
 * short). The count is the whole machine's and the CPUs are the thread's affinity: a thread
 * pinned to a few CPUs of a busy host seldom spins, and a CPU quota (cgroups) is not seen. */
bool mstar__cpu_spare(uint64_t now_ns);

/* /proc/loadavg's runnable count now (or the test file's, mstar__cpu_spare_read_from): false
 * where it cannot be read or parsed. */
bool mstar__loadavg_read(long *runnable);

/* A pause inside a spin loop: the core's hint that this thread waits on memory. */
void mstar__cpu_relax(void);

/* Tests: make mstar__cpu_spare answer `spare` (1 or 0) in every thread, or read the kernel again
 * (-1, the default). */
void mstar__cpu_spare_force(int spare);

/* Tests: read the count from `path` instead of /proc/loadavg (NULL: /proc/loadavg again). */
void mstar__cpu_spare_read_from(const char *path);

/* The runnable count of a /proc/loadavg line ("0.20 0.18 0.12 2/345 6789"): true with *out set,
 * false for a line that does not hold one (a count must be 1..2^31-1). */
bool mstar__loadavg_runnable(const char *line, long *out);

#endif
