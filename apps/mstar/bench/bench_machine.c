/*
 * bench_machine.c — the machine summary at the top of the benchmark report: cores, CPU model,
 * memory, kernel, date, the source tree's commit and how the binary was built. Figures from a
 * 2-core shared machine and from an H200 host are not comparable without it.
 */
#include "bench_report.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* Set by CMake for this target. */
#ifndef MSTAR_BENCH_BUILD_TYPE
#define MSTAR_BENCH_BUILD_TYPE ""
#endif
#ifndef MSTAR_BENCH_SANITIZE
#define MSTAR_BENCH_SANITIZE ""
#endif
#ifndef MSTAR_BENCH_SOURCE_DIR
#define MSTAR_BENCH_SOURCE_DIR ""
#endif

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, cap, "%s", colon);
        break;
    }
    fclose(f);
}

/* The first line `cmd` prints, or "" (git missing, not a checkout). */
static void first_line(const char *cmd, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return;
    if (fgets(buf, (int)cap, p) == NULL)
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    while (fgetc(p) != EOF) { /* let the command finish writing */
    }
    pclose(p);
}

static void source_commit(char *buf, size_t cap)
{
    const char *dir = MSTAR_BENCH_SOURCE_DIR;
    buf[0] = '\0';
    if (dir[0] == '\0' || strchr(dir, '\'') != NULL)
        return;
    char cmd[1024], hash[48], dirty[8];
    snprintf(cmd, sizeof(cmd), "git -C '%s' rev-parse --short=12 HEAD 2>/dev/null", dir);
    first_line(cmd, hash, sizeof(hash));
    if (hash[0] == '\0')
        return;
    snprintf(cmd, sizeof(cmd),
             "git -C '%s' status --porcelain --untracked-files=no 2>/dev/null | head -c 1", dir);
    first_line(cmd, dirty, sizeof(dirty));
    snprintf(buf, cap, "%s%s", hash, dirty[0] != '\0' ? " (with uncommitted changes)" : "");
}

void mstar_bench_machine_read(mstar_bench_machine *m)
{
    memset(m, 0, sizeof(*m));
    m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_model(m->cpu, sizeof(m->cpu));
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    m->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(m->kernel, sizeof(m->kernel), "%s %s %s", u.sysname, u.release, u.machine);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->date, sizeof(m->date), "%Y-%m-%d %H:%M:%S UTC", &tm);
    source_commit(m->commit, sizeof(m->commit));
    snprintf(m->build, sizeof(m->build), "%s%s%s, CUDA backend %s",
             MSTAR_BENCH_BUILD_TYPE[0] ? MSTAR_BENCH_BUILD_TYPE : "unknown build type",
             MSTAR_BENCH_SANITIZE[0] ? ", sanitizers " : "", MSTAR_BENCH_SANITIZE,
             mstar_built_with_cuda() ? "built" : "not built");
}
