/*
 * mstar_test.c — see mstar_test.h.
 */
#include "mstar_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TMPDIRS 32
static char *tmpdirs[MAX_TMPDIRS];
static int ntmpdirs;
static pid_t owner_pid;

void mstar_test_rmtree(const char *path)
{
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[4096];
            snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
            struct stat sb;
            if (lstat(child, &sb) == 0 && S_ISDIR(sb.st_mode))
                mstar_test_rmtree(child);
            else
                unlink(child);
        }
        closedir(d);
    }
    rmdir(path);
}

static void remove_tmpdirs(void)
{
    if (getpid() != owner_pid)
        return; /* a forked child must not remove its parent's directories */
    for (int i = 0; i < ntmpdirs; i++) {
        mstar_test_rmtree(tmpdirs[i]);
        free(tmpdirs[i]);
    }
    ntmpdirs = 0;
}

const char *mstar_test_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    char tmpl[4096];
    snprintf(tmpl, sizeof(tmpl), "%s/mstar-test-%s-XXXXXX", base, tag);
    char *dir = mkdtemp(tmpl);
    if (dir == NULL || ntmpdirs == MAX_TMPDIRS) {
        fprintf(stderr, "mstar_test_tmpdir: cannot create %s\n", tmpl);
        abort();
    }
    if (ntmpdirs == 0) {
        owner_pid = getpid();
        atexit(remove_tmpdirs);
    }
    tmpdirs[ntmpdirs] = strdup(dir);
    return tmpdirs[ntmpdirs++];
}

int mstar_test_count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

/* ---- log capture ---------------------------------------------------------------------------- */

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cap_buf;
static size_t cap_len, cap_cap;
static mstar_log_level saved_level;

static void capture_sink(mstar_log_level level, const char *line, void *userdata)
{
    (void)level;
    (void)userdata;
    pthread_mutex_lock(&cap_lock);
    size_t n = strlen(line);
    if (cap_len + n + 2 > cap_cap) {
        size_t ncap = (cap_cap + n + 2) * 2;
        char *nb = realloc(cap_buf, ncap);
        if (nb == NULL) {
            pthread_mutex_unlock(&cap_lock);
            return;
        }
        cap_buf = nb;
        cap_cap = ncap;
    }
    memcpy(cap_buf + cap_len, line, n);
    cap_len += n;
    cap_buf[cap_len++] = '\n';
    cap_buf[cap_len] = '\0';
    pthread_mutex_unlock(&cap_lock);
}

void mstar_test_log_capture_begin(mstar_log_level level)
{
    pthread_mutex_lock(&cap_lock);
    cap_len = 0;
    if (cap_buf)
        cap_buf[0] = '\0';
    pthread_mutex_unlock(&cap_lock);
    saved_level = mstar_log_get_level();
    mstar_log_set_level(level);
    mstar_log_set_sink(capture_sink, NULL);
}

void mstar_test_log_capture_end(void)
{
    mstar_log_set_sink(NULL, NULL);
    mstar_log_set_level(saved_level);
}

int mstar_test_log_count(const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&cap_lock);
    for (const char *p = cap_buf; p != NULL && (p = strstr(p, needle)) != NULL; p++)
        n++;
    pthread_mutex_unlock(&cap_lock);
    return n;
}

bool mstar_test_log_contains(const char *needle)
{
    return mstar_test_log_count(needle) > 0;
}

void mstar_test_skip(const char *why)
{
    printf("SKIPPED: %s\n", why);
    fflush(stdout);
    exit(77);
}

int mstar_test_dead_pid(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    int status;
    waitpid(pid, &status, 0);
    return (int)pid;
}

uint64_t mstar_test_rand(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ULL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

mstar_backend *mstar_test_cuda_or_skip(int index)
{
    mstar_device d = { MSTAR_DEVICE_CUDA, index };
    mstar_backend *b = NULL;
    mstar_status st = mstar_backend_create(d, &b);
    if (st == MSTAR_ENOTSUP)
        mstar_test_skip(mstar_last_error());
    if (st != MSTAR_OK)
        fail_msg("mstar_backend_create(cuda:%d): %s", index, mstar_last_error());
    return b;
}

int mstar_test_host_open(mstar_backend **backend, mstar_stream **stream)
{
    *backend = NULL;
    *stream = NULL;
    if (mstar_backend_create(mstar_device_cpu(), backend) == MSTAR_OK &&
        mstar_stream_create(*backend, MSTAR_STREAM_DEFAULT, stream) == MSTAR_OK)
        return 0;
    fprintf(stderr, "host backend and stream: %s\n", mstar_last_error());
    mstar_test_host_close(*backend, *stream);
    return -1;
}

void mstar_test_host_close(mstar_backend *backend, mstar_stream *stream)
{
    mstar_stream_destroy(stream);
    mstar_backend_destroy(backend);
}

static mstar_backend *host_backend; /* the group fixtures' */

int mstar_test_host_backend_setup(void **state)
{
    (void)state;
    if (mstar_backend_create(mstar_device_cpu(), &host_backend) == MSTAR_OK)
        return 0;
    fprintf(stderr, "host backend: %s\n", mstar_last_error());
    return -1;
}

int mstar_test_host_backend_teardown(void **state)
{
    (void)state;
    mstar_backend_destroy(host_backend);
    host_backend = NULL;
    return 0;
}

mstar_backend *mstar_test_host_backend(void)
{
    return host_backend;
}

void mstar_test_append_digit(void *args)
{
    mstar_test_digit *a = args;
    *a->target = *a->target * 10 + a->digit;
}
