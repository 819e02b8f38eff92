/*
 * bench_python.c — the Python suite of `mstar bench all`: python/bench/bench_transport.py, the
 * transport handoff driven from Python with torch CPU tensors between two processes, which
 * runs `mstar bench transport --size N --json` itself, taking turns with it size by size, so
 * that the C figures it is held against come from the same run. Built in only when CMake found
 * the Python package (python/CMakeLists.txt defines where the interpreter, the package and the
 * script are; MSTAR_BENCH_PYTHON, MSTAR_BENCH_PYTHONPATH and MSTAR_BENCH_PYTHON_SCRIPT override
 * them); otherwise it reports that it was skipped.
 *
 * It runs as a child process before any suite of this process starts a device runtime, writes
 * DIR/python.json and DIR/python.txt, and its table is appended to DIR/report.md afterwards.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifdef MSTAR_BENCH_PYTHON_EXE
/* What the suite runs: the build's interpreter, package and script, or those the environment
 * names (the build moved to another machine, or the interpreter with torch is another one). */
static const char *setting(const char *name, const char *built)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : built;
}

static const char *python_exe(void)
{
    return setting("MSTAR_BENCH_PYTHON", MSTAR_BENCH_PYTHON_EXE);
}

static const char *python_script(void)
{
    return setting("MSTAR_BENCH_PYTHON_SCRIPT", MSTAR_BENCH_PYTHON_SCRIPT);
}
#endif

bool mstar_bench_python_available(void)
{
#ifdef MSTAR_BENCH_PYTHON_EXE
    if (access(python_exe(), X_OK) != 0) {
        mstar_error_set(MSTAR_ENOENT, "the interpreter %s (MSTAR_BENCH_PYTHON): %s", python_exe(),
                        strerror(errno));
        return false;
    }
    if (access(python_script(), R_OK) != 0) {
        mstar_error_set(MSTAR_ENOENT, "the script %s (MSTAR_BENCH_PYTHON_SCRIPT): %s",
                        python_script(), strerror(errno));
        return false;
    }
    return true;
#else
    mstar_error_set(MSTAR_ENOTSUP, "the Python package was not built");
    return false;
#endif
}

#ifdef MSTAR_BENCH_PYTHON_EXE
/* The environment of the child: ours, with PYTHONPATH pointing at the built package. */
static char **child_env(char *pythonpath)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof(char *));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PYTHONPATH=", 11) != 0)
            env[k++] = environ[i];
    env[k++] = pythonpath;
    env[k] = NULL;
    return env;
}
#endif

mstar_status mstar_bench_python_run(const char *out_dir, bool quick)
{
#ifndef MSTAR_BENCH_PYTHON_EXE
    (void)out_dir;
    (void)quick;
    return mstar_error_set(MSTAR_ENOTSUP, "the Python package was not built");
#else
    char self[4096], json[4096], txt[4096], pythonpath[4200];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return mstar_error_set(MSTAR_EIO, "readlink /proc/self/exe: %s", strerror(errno));
    self[len] = '\0';
    snprintf(json, sizeof(json), "%s/python.json", out_dir);
    snprintf(txt, sizeof(txt), "%s/python.txt", out_dir);
    const char *path = setting("MSTAR_BENCH_PYTHONPATH", MSTAR_BENCH_PYTHONPATH);
    if (snprintf(pythonpath, sizeof(pythonpath), "PYTHONPATH=%s", path) >= (int)sizeof(pythonpath))
        return mstar_error_set(MSTAR_EINVAL,
                               "python suite: MSTAR_BENCH_PYTHONPATH is longer "
                               "than %zu bytes",
                               sizeof(pythonpath) - 12);
    char *argv[] = { (char *)python_exe(),
                     (char *)python_script(),
                     "--mstar",
                     self,
                     "--json",
                     json,
                     quick ? "--quick" : NULL,
                     NULL };
    char **env = child_env(pythonpath);
    if (!env)
        return mstar_error_set(MSTAR_ENOMEM, "python suite: out of memory");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (err != 0)
        return mstar_error_set(MSTAR_EIO, "python suite: spawn %s: %s", argv[0], strerror(err));
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return mstar_error_set(MSTAR_EIO, "python suite: %s failed (status %d); see stderr",
                               argv[1], status);
    return MSTAR_OK;
#endif
}

/* Append DIR/python.txt to DIR/report.md (as a section) and echo it on `out`. */
void mstar_bench_python_report(const char *out_dir, FILE *out)
{
    char txt[4096], md[4096], line[512];
    snprintf(txt, sizeof(txt), "%s/python.txt", out_dir);
    snprintf(md, sizeof(md), "%s/report.md", out_dir);
    FILE *in = fopen(txt, "r");
    if (!in)
        return;
    FILE *rep = fopen(md, "a");
    if (rep)
        fprintf(rep, "\n## Python package: the transport handoff from Python\n\n"
                     "`python/bench/bench_transport.py` (docs/python.md), with the C suite's "
                     "figures measured in the same run:\n\n```\n");
    while (fgets(line, sizeof(line), in)) {
        if (rep)
            fputs(line, rep);
        fputs(line, out);
    }
    if (rep) {
        fprintf(rep, "```\n");
        fclose(rep);
    }
    fclose(in);
}
