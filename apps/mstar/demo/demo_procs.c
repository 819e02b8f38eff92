/*
 * demo_procs.c — private directories, forking workers, signals (see demo_procs.h).
 */
#include "demo_procs.h"

#include "demo_worker.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void remove_dir(char *path);

/* parent/<prefix>-<our pid>-XXXXXX, 0700: the pid lets a later run sweep it if we are killed. */
static mstar_status make_dir(char *buf, size_t size, const char *parent, const char *prefix)
{
    snprintf(buf, size, "%s/%s-%d-XXXXXX", parent, prefix, (int)getpid());
    if (mkdtemp(buf) == NULL)
        return mstar_error_set(MSTAR_EIO, "cannot create a private directory under %s: %s", parent,
                               strerror(errno));
    return MSTAR_OK;
}

/* Remove `parent`/<prefix>-<pid>-XXXXXX directories of ours whose driver <pid> is gone (it was
 * SIGKILLed and could not clean up). A live process with that pid keeps its directory. */
static int sweep_dead_runs(const char *parent, const char *prefix)
{
    DIR *dir = opendir(parent);
    if (dir == NULL)
        return 0;
    int removed = 0;
    size_t len = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, prefix, len) != 0 || e->d_name[len] != '-')
            continue;
        char *end;
        long pid = strtol(e->d_name + len + 1, &end, 10);
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
        struct stat sb;
        if (pid <= 0 || *end != '-' || strlen(end) != 7 || lstat(path, &sb) != 0 ||
            !S_ISDIR(sb.st_mode) || sb.st_uid != getuid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        remove_dir(path);
        removed++;
    }
    closedir(dir);
    return removed;
}

mstar_status demo_dirs_create(demo_dirs *d, const char *shm_parent)
{
    memset(d, 0, sizeof(*d));
    struct stat sb;
    if (shm_parent == NULL || shm_parent[0] == '\0')
        shm_parent = mstar_env_get_string("MSTAR_SHM_DIR", "");
    if (shm_parent[0] == '\0')
        shm_parent = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    if (strlen(shm_parent) > 96)
        return mstar_error_set(MSTAR_EINVAL, "shm directory %s is longer than 96 bytes",
                               shm_parent);
    int swept =
        sweep_dead_runs(shm_parent, "mstar-demo") + sweep_dead_runs("/tmp", "mstar-demo-ipc");
    if (swept > 0)
        fprintf(stderr, "mstar demo: removed %d directories of runs whose driver was killed\n",
                swept);
    mstar_status st = make_dir(d->shm, sizeof(d->shm), shm_parent, "mstar-demo");
    if (st != MSTAR_OK) {
        d->shm[0] = '\0';
        return st;
    }
    st = make_dir(d->ipc, sizeof(d->ipc), "/tmp", "mstar-demo-ipc");
    if (st != MSTAR_OK) {
        d->ipc[0] = '\0';
        demo_dirs_remove(d);
    }
    return st;
}

/* "mstar_<entity>_0x<uuid>" or "mstar_arena_<entity>_<pid>_<token>.seg<N>" (shm.h). */
static bool made_by(const char *name, const char *entity)
{
    size_t len = strlen(entity);
    const char *rest = strncmp(name, "mstar_arena_", 12) == 0 ? name + 12
                       : strncmp(name, "mstar_", 6) == 0      ? name + 6
                                                              : NULL;
    return rest != NULL && strncmp(rest, entity, len) == 0 && rest[len] == '_';
}

int demo_dirs_count_shm(const demo_dirs *d, const char *entity)
{
    DIR *dir = opendir(d->shm);
    if (dir == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
             (entity == NULL || made_by(e->d_name, entity));
    closedir(dir);
    return n;
}

/* The directory's plain entries (no recursion: the demo creates no subdirectories). */
static void remove_dir(char *path)
{
    if (path[0] == '\0')
        return;
    DIR *dir = opendir(path);
    if (dir != NULL) {
        int fd = dirfd(dir);
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(fd, e->d_name, 0);
        }
        closedir(dir);
    }
    rmdir(path);
    path[0] = '\0';
}

void demo_dirs_remove(demo_dirs *d)
{
    remove_dir(d->shm);
    remove_dir(d->ipc);
}

mstar_status demo_spawn_worker(const demo_options *opts, int rank, const demo_dirs *dirs,
                               pid_t *pid)
{
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child < 0)
        return mstar_error_set(MSTAR_EIO, "fork of worker %d: %s", rank, strerror(errno));
    if (child > 0) {
        *pid = child;
        return MSTAR_OK;
    }
    /* The child: die with the driver; leave Ctrl-C to the driver, which shuts workers down. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    exit(demo_worker_main(opts, rank, dirs->ipc, dirs->shm));
}

static volatile sig_atomic_t pending_signal, signal_count;

static void on_signal(int sig)
{
    pending_signal = sig;
    signal_count++;
}

void demo_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int demo_signal_pending(void)
{
    return pending_signal;
}

bool demo_signal_again(void)
{
    return signal_count > 1;
}

const char *demo_describe_exit(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with code %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "ended with status 0x%x", status);
    return buf;
}
