/*
 * ucx_test.c — see ucx_test.h.
 *
 * The producer is this same test program re-executed with "--ucx-producer" (a fork of a process
 * that already holds UCX state would share it half-copied); it reports its session, address and
 * key on stdout and serves until its stdin says stop or closes.
 */
#include "ucx_test.h"

#include "tensors/comm_internal.h"
#include "tensors/ucx/ucx_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UCX_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UCX_TEST_SANITIZED 1
#endif
#endif

static int producer_main(int argc, char **argv);

void ucx_test_setup(int argc, char **argv)
{
#ifdef UCX_TEST_SANITIZED
    /* UCX's memory hooks replace malloc/free through the relocation table and patch mmap; under
     * ASan that mixes two allocators. UCX reads these when it loads, hence the re-exec. */
    if (getenv("MSTAR_UCX_TEST_REEXEC") == NULL) {
        setenv("UCX_MEM_MALLOC_HOOKS", "no", 1);
        setenv("UCX_MEM_MALLOC_RELOC", "no", 1);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("MSTAR_UCX_TEST_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "ucx_test_setup: re-exec failed: %s\n", strerror(errno));
        exit(1);
    }
#endif
    if (argc >= 2 && strcmp(argv[1], "--ucx-producer") == 0)
        exit(producer_main(argc, argv));
}

/* Whether UCX's own "async" thread (global, shared by every context) is running. */
static bool ucx_async_thread_alive(void)
{
    DIR *d = opendir("/proc/self/task");
    bool alive = false;
    struct dirent *ent;
    while (d != NULL && !alive && (ent = readdir(d)) != NULL) {
        char path[300], name[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", ent->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            alive = fgets(name, sizeof(name), f) != NULL && strcmp(name, "async\n") == 0;
            fclose(f);
        }
    }
    if (d != NULL)
        closedir(d);
    return alive;
}

/* UCX runs one "async" thread per process, shared by every UCP context: it starts with the first
 * handler registered in thread mode and stops with the last. When that last removal happens on
 * the async thread itself, UCX detaches it and it exits on its own time, so a census taken
 * after the last engine is gone may or may not count it (and its epoll fd and wake-up pipe) —
 * on a loaded machine well past any fixed wait. The census therefore holds a sentinel UCP
 * context and worker (whose TCP interface registers in thread mode) from the first count to the
 * end of the process: the async thread runs throughout, and every count includes it alike. */
static ucp_context_h sentinel_ctx;
static ucp_worker_h sentinel_worker;

static void sentinel_release(void)
{
    ucp_worker_destroy(sentinel_worker);
    ucp_cleanup(sentinel_ctx);
}

static void sentinel_hold(void)
{
    if (sentinel_ctx != NULL)
        return;
    ucp_config_t *config;
    assert_mstar_ok(mstar__ucx_config_read(MSTAR__UCX_TCP, &config));
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    ucs_status_t us = ucp_init(&params, config, &sentinel_ctx);
    ucp_config_release(config);
    assert_int_equal(us, UCS_OK);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    assert_int_equal(ucp_worker_create(sentinel_ctx, &wp, &sentinel_worker), UCS_OK);
    atexit(sentinel_release);
    if (!ucx_async_thread_alive())
        fail_msg("UCX's async thread does not run with the census's sentinel context");
}

int ucx_test_threads(void)
{
    sentinel_hold();
    return mstar_test_count_dir("/proc/self/task");
}

int ucx_test_fds(void)
{
    sentinel_hold();
    return mstar_test_count_dir("/proc/self/fd");
}

static uint8_t pattern_byte(uint64_t seed, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + seed * 0xbf58476d1ce4e5b9ULL;
    return (uint8_t)(x >> 56 ^ x >> 24 ^ i);
}

void ucx_test_fill(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p[i] = pattern_byte(seed, i);
}

size_t ucx_test_check_at(const void *buf, size_t n, uint64_t seed, size_t offset)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern_byte(seed, offset + i))
            return i;
    return SIZE_MAX;
}

size_t ucx_test_check(const void *buf, size_t n, uint64_t seed)
{
    return ucx_test_check_at(buf, n, seed, 0);
}

int ucx_test_blackhole(char session_out[MSTAR_NAME_MAX + 1])
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(session_out, MSTAR_NAME_MAX + 1, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    return fd;
}

/* ---- the producer process ------------------------------------------------------------------- */

/* argv: self --ucx-producer nbytes seed address */
static int producer_main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    uint64_t nbytes = strtoull(argv[2], NULL, 10);
    uint64_t seed = strtoull(argv[3], NULL, 10);
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    if (mstar__ucx_config_from_env(&cfg) != MSTAR_OK)
        return 3;
    snprintf(cfg.address, sizeof(cfg.address), "%s", argv[4]);
    mstar__ucx_engine *e;
    if (mstar__ucx_engine_create(&cfg, &e) != MSTAR_OK) {
        fprintf(stderr, "producer: %s\n", mstar_last_error());
        return 4;
    }
    uint8_t *buf = malloc(nbytes > 0 ? nbytes : 1);
    ucx_test_fill(buf, nbytes, seed);
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
    if (mstar__ucx_engine_register(e, buf, nbytes, key, &key_len) != MSTAR_OK) {
        fprintf(stderr, "producer: %s\n", mstar_last_error());
        return 5;
    }
    printf("%s %llu %llu ", mstar__ucx_engine_session_id(e), (unsigned long long)(uintptr_t)buf,
           (unsigned long long)nbytes);
    for (uint32_t i = 0; i < key_len; i++)
        printf("%02x", key[i]);
    printf("\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) < 0 && errno == EINTR) {
    }
    int rc = 0;
    if (mstar__ucx_engine_unregister(e, buf) != MSTAR_OK)
        rc = 6;
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(e, &st);
    if (st.regions != 0)
        rc = 7;
    mstar__ucx_engine_destroy(e);
    free(buf);
    return rc;
}

void ucx_test_producer_start(ucx_test_producer *p, uint64_t nbytes, uint64_t seed,
                             const char *address, const char *netns)
{
    int down[2], up[2];
    assert_int_equal(pipe2(down, O_CLOEXEC), 0);
    assert_int_equal(pipe2(up, O_CLOEXEC), 0);
    char a_nbytes[32], a_seed[32];
    snprintf(a_nbytes, sizeof(a_nbytes), "%llu", (unsigned long long)nbytes);
    snprintf(a_seed, sizeof(a_seed), "%llu", (unsigned long long)seed);
    char self[4096];
    ssize_t self_len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(self_len > 0);
    self[self_len] = '\0';
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(down[0], 0);
        dup2(up[1], 1);
        char *addr = (char *)(address != NULL ? address : "127.0.0.1");
        if (netns != NULL) {
            /* ip netns exec also mounts the namespace's own /sys, where UCX finds its devices */
            char *args[] = { "ip",     "netns", "exec", (char *)netns, self, "--ucx-producer",
                             a_nbytes, a_seed,  addr,   NULL };
            execvp("ip", args);
        } else {
            char *args[] = { self, "--ucx-producer", a_nbytes, a_seed, addr, NULL };
            execv(self, args);
        }
        _exit(10);
    }
    close(down[0]);
    close(up[1]);
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    p->to_child = down[1];
    p->from_child = up[0];
    char line[4096];
    size_t len = 0;
    while (len + 1 < sizeof(line)) {
        ssize_t n = read(p->from_child, line + len, 1);
        if (n <= 0 || line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    char hex[2 * MSTAR_REMOTE_KEY_MAX + 1];
    unsigned long long addr, nb;
    if (sscanf(line, "%255s %llu %llu %2048s", p->session, &addr, &nb, hex) != 4)
        fail_msg("producer did not start (said '%s')", line);
    p->addr = addr;
    p->nbytes = nb;
    p->key_len = (uint32_t)(strlen(hex) / 2);
    for (uint32_t i = 0; i < p->key_len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        p->key[i] = (uint8_t)v;
    }
}

static int reap(ucx_test_producer *p)
{
    int status = 0;
    while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(p->to_child);
    close(p->from_child);
    p->pid = 0;
    return status;
}

void ucx_test_producer_stop(ucx_test_producer *p)
{
    char c = 's';
    assert_int_equal(write(p->to_child, &c, 1), 1);
    int status = reap(p);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

void ucx_test_producer_kill(ucx_test_producer *p, int sig)
{
    kill(p->pid, sig);
    if (sig == SIGSTOP || sig == SIGCONT)
        return;
    reap(p);
}

size_t regions_of(mstar_comm *c)
{
    mstar__ucx_engine *ue = c->env.ucx;
    if (ue == NULL)
        return 0;
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(ue, &st);
    return st.regions;
}
