/*
 * spare_cpu.c — whether a waiting thread may spin, and the pause a spin makes (spare_cpu.h).
 *
 * On the 2-core VM this project measures on, a 4 KiB handoff between two spinning sides took
 * 4.7-11 µs and 16-28 µs of CPU (both sides), against 60-95 µs and 51-72 µs asleep (a wake-up
 * there costs the waker and the woken several µs each, and an idle CPU more to leave its halt).
 * With CPU-bound jobs running beside it, a sleeping handoff took 12-25 µs and a spinning one
 * 5.5-70 µs, the spinner at times holding the core its peer waited for. So spinning pays while a
 * CPU is idle, and the kernel says how many tasks want one: /proc/loadavg's runnable count, one
 * read of a small file. A read costs a few system calls, so it is made at most once a
 * millisecond per thread.
 */
#include "core/spare_cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define RECHECK_NS 1000000u

bool mstar__loadavg_runnable(const char *line, long *out)
{
    /* Three load averages, then "runnable/total". */
    const char *p = line;
    for (int field = 0; field < 3; field++) {
        while (*p == ' ')
            p++;
        if (*p == '\0' || *p == '\n')
            return false;
        while (*p != ' ' && *p != '\0' && *p != '\n')
            p++;
    }
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return false;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno != 0 || *end != '/' || v < 1 || v > INT_MAX)
        return false;
    *out = v;
    return true;
}

/* Where the count is read: /proc/loadavg but in tests (mstar__cpu_spare_read_from). */
static _Atomic(const char *) loadavg_file = "/proc/loadavg";

void mstar__cpu_spare_read_from(const char *path)
{
    atomic_store(&loadavg_file, path != NULL ? path : "/proc/loadavg");
}

bool mstar__loadavg_read(long *runnable)
{
    int fd = open(atomic_load_explicit(&loadavg_file, memory_order_relaxed), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char line[128];
    ssize_t n;
    do
        n = read(fd, line, sizeof(line) - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return false;
    line[n] = '\0';
    return mstar__loadavg_runnable(line, runnable);
}

/* Runnable tasks no more than this thread's CPUs; true when either cannot be read. */
static bool read_spare(void)
{
    long runnable;
    cpu_set_t set;
    if (!mstar__loadavg_read(&runnable) || sched_getaffinity(0, sizeof(set), &set) != 0)
        return true;
    return runnable <= CPU_COUNT(&set);
}

static _Atomic int forced = -1;

void mstar__cpu_spare_force(int spare)
{
    atomic_store(&forced, spare < 0 ? -1 : spare != 0);
}

bool mstar__cpu_spare(uint64_t now_ns)
{
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f >= 0)
        return f != 0;
    static _Thread_local uint64_t checked_ns;
    static _Thread_local bool spare;
    if (checked_ns == 0 || now_ns - checked_ns >= RECHECK_NS) {
        spare = read_spare();
        checked_ns = now_ns;
    }
    return spare;
}

void mstar__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
