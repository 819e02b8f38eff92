/*
 * bench_floor.c — the floor under a handoff between two processes, and what a handoff costs
 * besides its latency (bench.h, "floor").
 *
 * The floor: two processes ping-pong 4 bytes through a page of shared memory. With the waiting
 * side asleep on a futex until the other wakes it, a round trip is two wake-ups and four
 * system calls: what any handoff that sleeps between its messages pays at least. Each side
 * posts only once the other sleeps on its futex (it said so on the page, and /proc/<pid>/stat
 * agrees), and a round trip is the two wake-ups alone, from each post to the wake-up it caused:
 * otherwise, where system calls are quick, a post mostly found the other still inside its own
 * wake call and the floor measured no wake-up at all. With both
 * sides busy-polling the page, it is two cache-line transfers: the floor of a handoff whose two
 * sides are both running. `mstar bench transport` measures both beside the handoffs and reports
 * the 4 KiB handoff as a ratio to the futex round trip.
 *
 * The costs: CPU time (user and system) and context switches of a process, read for this
 * process and for its peer alike: the CPU time from the process's CPU-time clock
 * (clock_getcpuclockid), the switches (voluntary: it slept; involuntary: it was preempted)
 * summed over its threads from /proc/<pid>/task/<tid>/status, the counters getrusage keeps.
 * Taken before and after a measured loop, their difference divided by the round trips is what
 * one round trip cost both sides. The peer's CPU time is read by the peer itself where it can
 * (mstar_bench_peer_cpu): read from outside, a peer that spun through the whole loop without a
 * tick or a switch showed none at all.
 */
#include "bench.h"

#include "core/vec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- what a process has used ---------------------------------------------------------------- */

/* The voluntary and involuntary switches of one thread, added to *vol and *invol. */
static void add_switches(const char *path, double *vol, double *invol)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return; /* the thread ended meanwhile: its switches are lost to both samples alike */
    char line[256];
    unsigned long long v;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1)
            *vol += (double)v;
        else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
            *invol += (double)v;
    }
    fclose(f);
}

/* A clock's reading in microseconds; 0 where it cannot be read. */
static double clock_us(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* A process's CPU time so far, from its CPU-time clock; 0 where it cannot be read. */
static double cpu_us_of(pid_t pid)
{
    clockid_t clock;
    return clock_getcpuclockid(pid, &clock) == 0 ? clock_us(clock) : 0;
}

void mstar_bench_usage_sample(pid_t pid, mstar_bench_usage *out)
{
    memset(out, 0, sizeof(*out));
    out->cpu_us = cpu_us_of(pid);
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[128];
        snprintf(path, sizeof(path), "%s/%.16s/status", dir, e->d_name);
        add_switches(path, &out->vol_csw, &out->invol_csw);
    }
    closedir(d);
}

void mstar_bench_usage_per(const mstar_bench_usage *before, const mstar_bench_usage *after,
                           double n, mstar_bench_usage *out)
{
    out->cpu_us = (after->cpu_us - before->cpu_us) / n;
    out->vol_csw = (after->vol_csw - before->vol_csw) / n;
    out->invol_csw = (after->invol_csw - before->invol_csw) / n;
}

void mstar_bench_cost_begin(mstar_bench_cost_clock *c, pid_t peer)
{
    c->peer = peer;
    mstar_bench_usage_sample(peer, &c->other);
    mstar_bench_usage_sample(getpid(), &c->self);
    /* This process's own clock last, as cost_end reads it first: the reads of /proc are the
     * bench's work, not the handoffs' (read inside, they added about 4 us to each handoff of a
     * --quick run's 100). */
    c->self.cpu_us = cpu_us_of(getpid());
}

void mstar_bench_cost_end(const mstar_bench_cost_clock *c, double n, mstar_bench_cost *out)
{
    mstar_bench_usage self, other;
    mstar_bench_usage_sample(getpid(), &self);
    mstar_bench_usage_sample(c->peer, &other);
    mstar_bench_usage_per(&c->self, &self, n, &out->self);
    mstar_bench_usage_per(&c->other, &other, n, &out->peer);
}

/* ---- the peer's own CPU time (bench.h) ----------------------------------------------------- */

struct mstar_bench_peer_cpu {
    _Atomic uint64_t mark[2];
    _Atomic uint32_t taken[2]; /* cpu_us[k] is set (release: written before) */
    double cpu_us[2];
};

mstar_bench_peer_cpu *mstar_bench_peer_cpu_create(void)
{
    void *p = mmap(NULL, sizeof(mstar_bench_peer_cpu), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    mstar_bench_peer_cpu *pc = p;
    atomic_store(&pc->mark[0], UINT64_MAX);
    atomic_store(&pc->mark[1], UINT64_MAX);
    return pc;
}

void mstar_bench_peer_cpu_destroy(mstar_bench_peer_cpu *pc)
{
    if (pc != NULL)
        munmap(pc, sizeof(*pc));
}

void mstar_bench_peer_cpu_arm(mstar_bench_peer_cpu *pc, uint64_t begin, uint64_t end)
{
    if (pc == NULL)
        return;
    for (int k = 0; k < 2; k++)
        atomic_store_explicit(&pc->taken[k], 0, memory_order_relaxed);
    atomic_store_explicit(&pc->mark[0], begin, memory_order_release);
    atomic_store_explicit(&pc->mark[1], end, memory_order_release);
}

void mstar_bench_peer_cpu_note(mstar_bench_peer_cpu *pc, uint64_t at)
{
    if (pc == NULL)
        return;
    for (int k = 0; k < 2; k++) {
        if (atomic_load_explicit(&pc->mark[k], memory_order_acquire) != at)
            continue;
        pc->cpu_us[k] = clock_us(CLOCK_PROCESS_CPUTIME_ID);
        atomic_store_explicit(&pc->taken[k], 1, memory_order_release);
    }
}

void mstar_bench_peer_cpu_apply(const mstar_bench_peer_cpu *pc, double n, mstar_bench_cost *out)
{
    if (pc == NULL || atomic_load_explicit(&pc->taken[0], memory_order_acquire) == 0 ||
        atomic_load_explicit(&pc->taken[1], memory_order_acquire) == 0)
        return;
    out->peer.cpu_us = (pc->cpu_us[1] - pc->cpu_us[0]) / n;
}

/* ---- the ping-pong -------------------------------------------------------------------------- */

/* What one process writes on the shared page, on cache lines of its own. */
typedef struct side {
    _Alignas(64) _Atomic uint32_t word; /* the sequence number it posts */
    _Atomic uint32_t waits_for;         /* futex: the number it is about to sleep for */
    _Atomic uint64_t woke_ns;           /* futex: when it woke for the other's last post */
    _Atomic uint64_t posted_ns;         /* futex: when it posted its last */
} side;

typedef struct pingpong_page {
    side ping; /* this process */
    side pong; /* the peer */
    _Alignas(64) uint32_t payload;
    _Atomic uint32_t ready;
    uint32_t wrong;        /* payloads the peer read wrong */
    double peer_settle_us; /* the peer's CPU time in until_asleep over the measured turns */
} pingpong_page;

static long futex(_Atomic uint32_t *word, int op, uint32_t val)
{
    /* Shared between processes: no FUTEX_PRIVATE_FLAG. */
    return syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

/* The pause of a spin, as the library's mstar__cpu_relax (core/spare_cpu.h): the bench's layer
 * may not include that header (tests/layout/run.sh), and the floor runs no library code. */
static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Wait until the other's word holds `want`: sleeping on the futex (saying first what for), or
 * polling. */
static void await(side *me, side *other, uint32_t want, bool busy)
{
    for (;;) {
        uint32_t v = atomic_load_explicit(&other->word, memory_order_acquire);
        if (v == want)
            return;
        if (busy) {
            cpu_relax();
        } else {
            atomic_store_explicit(&me->waits_for, want, memory_order_release);
            futex(&other->word, FUTEX_WAIT, v); /* returns at once if the word changed since */
        }
    }
}

/* The scheduler's state of the other process, from /proc/<pid>/stat: 'S' while it sleeps. */
typedef struct proc_state {
    int fd; /* -1 where /proc cannot be read */
} proc_state;

static void proc_state_open(proc_state *ps, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    ps->fd = open(path, O_RDONLY | O_CLOEXEC);
}

bool mstar_bench_stat_sleeping(const char *line)
{
    const char *end = strrchr(line, ')'); /* the name in parentheses may hold anything */
    return end != NULL && end[1] == ' ' && end[2] == 'S';
}

static bool proc_sleeping(const proc_state *ps)
{
    char buf[512];
    ssize_t n = pread(ps->fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return mstar_bench_stat_sleeping(buf);
}

/* How long until_asleep waits for the other to say it is about to sleep (a process preempted on
 * a busy machine may take a while), for /proc to show it asleep once it said so, and, where /proc
 * cannot tell, how long it lets it take to get there. */
#define SAID_GIVE_UP_NS   UINT64_C(1000000000)
#define ASLEEP_GIVE_UP_NS UINT64_C(10000000)
#define ASLEEP_BLIND_NS   UINT64_C(50000)

/* Futex mode, before a post: wait until the other process sleeps on its futex for `v` (it said
 * so, and the scheduler agrees), so that the post is a wake-up. Without this, on a machine whose
 * system calls are quick, each post mostly landed while the other was still in its own wake
 * call, found nobody asleep, and the "floor" was a ping-pong of system calls (1.3 µs, 0.27
 * context switches a round trip, against 20 µs and two switches in slower hours). A /proc that
 * never shows it asleep (not Linux's, say) is not asked again: the blind wait serves from then
 * on, rather than a give-up a post. The CPU time this waits is added to *cpu_us, and taken out
 * of the floor's cost. */
static void until_asleep(const side *other, uint32_t v, proc_state *ps, double *cpu_us)
{
    double c0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
    uint64_t start = mstar__now_ns(), now = start;
    while (atomic_load_explicit(&other->waits_for, memory_order_acquire) != v &&
           now - start < SAID_GIVE_UP_NS) {
        cpu_relax();
        now = mstar__now_ns();
    }
    uint64_t said = now;
    bool asleep = false;
    while (!asleep && now - said < (ps->fd >= 0 ? ASLEEP_GIVE_UP_NS : ASLEEP_BLIND_NS)) {
        asleep = ps->fd >= 0 && proc_sleeping(ps);
        cpu_relax();
        now = mstar__now_ns();
    }
    if (!asleep && ps->fd >= 0) {
        close(ps->fd);
        ps->fd = -1;
    }
    *cpu_us += clock_us(CLOCK_THREAD_CPUTIME_ID) - c0;
}

/* Post `v` to the other process: in futex mode once it sleeps, stamped, then woken. */
static void post(side *me, const side *other, uint32_t v, bool busy, proc_state *ps,
                 double *settle_us)
{
    if (!busy) {
        until_asleep(other, v, ps, settle_us);
        atomic_store_explicit(&me->posted_ns, mstar__now_ns(), memory_order_relaxed);
    }
    atomic_store_explicit(&me->word, v, memory_order_release);
    if (!busy)
        futex(&me->word, FUTEX_WAKE, 1);
}

/* Futex: a round trip's two wake-ups, each from a post to the wake-up it caused (`woke`: this
 * process's, for the pong). What either side did in between, waiting for the other to sleep
 * above all, is not the floor's. */
static double wakeups_ns(pingpong_page *pg, uint64_t woke)
{
    uint64_t ping = atomic_load_explicit(&pg->ping.posted_ns, memory_order_relaxed);
    uint64_t there = atomic_load_explicit(&pg->pong.woke_ns, memory_order_relaxed);
    uint64_t pong = atomic_load_explicit(&pg->pong.posted_ns, memory_order_relaxed);
    return (double)(there - ping) + (double)(woke - pong);
}

/* The peer: wait for each ping, read its 4 bytes, answer with them; exits. */
static void peer_run(pingpong_page *pg, bool busy, int iters, int warmup, mstar_bench_peer_cpu *pc)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    proc_state parent;
    proc_state_open(&parent, getppid());
    atomic_store_explicit(&pg->ready, 1, memory_order_release);
    futex(&pg->ready, FUTEX_WAKE, 1); /* the parent sleeps on it in either mode */
    double settle = 0, ignored = 0;
    for (uint32_t i = 1; i <= (uint32_t)(iters + warmup); i++) {
        await(&pg->pong, &pg->ping, i, busy);
        if (!busy)
            atomic_store_explicit(&pg->pong.woke_ns, mstar__now_ns(), memory_order_relaxed);
        mstar_bench_peer_cpu_note(pc, i);
        pg->wrong += pg->payload != i;
        post(&pg->pong, &pg->ping, i, busy, &parent, i > (uint32_t)warmup ? &settle : &ignored);
    }
    mstar_bench_peer_cpu_note(pc, (uint64_t)iters + (uint64_t)warmup + 1);
    pg->peer_settle_us = settle;
    _exit(0);
}

mstar_status mstar_bench_floor_run(bool busy, int iters, mstar_bench_floor *out)
{
    memset(out, 0, sizeof(*out));
    enum { WARMUP = 100 };
    pingpong_page *pg =
        mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED)
        return mstar_error_set(MSTAR_ENOMEM, "the ping-pong page: %s", strerror(errno));
    double *rt = calloc((size_t)iters, sizeof(double));
    if (rt == NULL) {
        munmap(pg, sizeof(*pg));
        return mstar_error_set(MSTAR_ENOMEM, "%d round trips", iters);
    }
    /* The peer's CPU from the first measured ping to after its last pong. */
    mstar_bench_peer_cpu *pc = mstar_bench_peer_cpu_create();
    mstar_bench_peer_cpu_arm(pc, WARMUP + 1, (uint64_t)iters + WARMUP + 1);
    pid_t pid = fork();
    if (pid < 0) {
        mstar_bench_peer_cpu_destroy(pc);
        free(rt);
        munmap(pg, sizeof(*pg));
        return mstar_error_set(MSTAR_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0)
        peer_run(pg, busy, iters, WARMUP, pc);
    while (atomic_load_explicit(&pg->ready, memory_order_acquire) != 1)
        futex(&pg->ready, FUTEX_WAIT, 0);
    proc_state peer;
    proc_state_open(&peer, pid);
    mstar_bench_cost_clock clock;
    double settle = 0, ignored = 0;
    for (uint32_t i = 1; i <= (uint32_t)(iters + WARMUP); i++) {
        if (i == WARMUP + 1)
            mstar_bench_cost_begin(&clock, pid);
        uint64_t t0 = mstar__now_ns();
        pg->payload = i;
        post(&pg->ping, &pg->pong, i, busy, &peer, i > WARMUP ? &settle : &ignored);
        await(&pg->ping, &pg->pong, i, busy);
        uint64_t t1 = mstar__now_ns();
        if (i <= WARMUP)
            continue;
        double ns = busy ? (double)(t1 - t0) : wakeups_ns(pg, t1);
        rt[i - WARMUP - 1] = ns * 1e-3;
    }
    mstar_bench_cost_end(&clock, iters, &out->cost);
    if (peer.fd >= 0)
        close(peer.fd);
    int status = 0;
    waitpid(pid, &status, 0);
    mstar_bench_peer_cpu_apply(pc, iters, &out->cost);
    mstar_bench_peer_cpu_destroy(pc);
    bool ok = pg->wrong == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    out->cost.self.cpu_us -= settle / iters;
    out->cost.peer.cpu_us -= pg->peer_settle_us / iters;
    munmap(pg, sizeof(*pg));
    if (!ok) {
        free(rt);
        return mstar_error_set(MSTAR_EIO, "the %s ping-pong's peer answered wrong or died",
                               busy ? "busy-poll" : "futex");
    }
    out->p50_us = mstar_bench_percentile(rt, (size_t)iters, 0.5);
    out->p99_us = mstar_bench_percentile(rt, (size_t)iters, 0.99);
    free(rt);
    return MSTAR_OK;
}
