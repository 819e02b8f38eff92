/*
 * test_hostile_fork.c — a forked child destroying what it inherited (docs/security.md "Forked
 * children"; Python's atexit and GC do exactly this in a child after fork()). The parent makes
 * two communication managers over the arena with a tensor staged, a pair of meshes that talked
 * over a ring, and a two-rank host group that agreed once; the child destroys all of them and
 * exits normally. The child must finish (a generous 10 s bound: zmq_ctx_term in a child used to
 * spin for ever), and the parent must find every segment, bell and inbox file still there and
 * everything still working: the staged tensor reads with its bytes, the meshes talk both ways,
 * the ranks agree again (no rank was told the other left). An arena destroyed directly in a child
 * (its own destroy, not through a manager) likewise leaves its segments to the parent.
 */
#include "comm_harness.h"
#include "mesh_harness.h"

#include "tensors/arena/arena.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in `path`, sorted, one per line (the caller frees). */
static char *listing(const char *path)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        assert_true(n < 256);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), name_cmp);
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(names[i]) + 1;
    char *out = calloc(1, len);
    for (int i = 0; i < n; i++) {
        strcat(out, names[i]);
        strcat(out, "\n");
        free(names[i]);
    }
    return out;
}

typedef struct agree_arg {
    mstar_rank_group *g;
    int64_t value;
    mstar_status st;
} agree_arg;

static void *agree(void *p)
{
    agree_arg *a = p;
    a->st = mstar_agree_across_ranks(a->g, &a->value, 1, MSTAR_REDUCE_MIN);
    return NULL;
}

/* Both ranks agree on the minimum of 5 and 3. */
static void agree_round(mstar_rank_group *g[2])
{
    agree_arg a[2] = { { g[0], 5, MSTAR_OK }, { g[1], 3, MSTAR_OK } };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, agree, &a[1]), 0);
    agree(&a[0]);
    pthread_join(th, NULL);
    for (int i = 0; i < 2; i++) {
        assert_mstar_ok(a[i].st);
        assert_int_equal(a[i].value, 3);
    }
}

static void on_alarm(int sig)
{
    (void)sig; /* interrupts waitpid */
}

/* Wait for `child` for at most 10 s; its exit status, or -1 when it had to be killed. */
static int wait_child(pid_t child)
{
    struct sigaction sa = { .sa_handler = on_alarm }, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old); /* no SA_RESTART: the alarm ends the wait */
    alarm(10);
    int status = 0;
    pid_t got = waitpid(child, &status, 0);
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    if (got != child) {
        assert_int_equal(errno, EINTR);
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_child_destroys_inherited(void **state)
{
    (void)state;
    comm_pair w;
    comm_pair_init(&w, "fork_shm");
    comm_pair_make(&w, MSTAR_TRANSPORT_ARENA);
    const char *ipc = mstar_test_tmpdir("fork_ipc");
    mesh_pair m = mesh_pair_open(ipc);
    mesh_harness_send(m.tx, "worker_0", 1);
    mesh_harness_recv(m.rx, "conductor", 1);
    mesh_harness_send(m.rx, "conductor", 2);
    mesh_harness_recv(m.tx, "worker_0", 2);
    mstar_mesh_options mopts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc };
    mstar_host_group_options gopts = { .mesh = &mopts, .timeout_ms = 20000 };
    mstar_rank_group *g[2];
    for (int r = 0; r < 2; r++)
        assert_mstar_ok(mstar_rank_group_create_host("forkgrp", r, 2, &gopts, &g[r]));
    agree_round(g);

    mstar_rid rid = mstar_rid_from_int(5);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 3000, 55);
    mstar_tensor_info info;
    produce(w.p, &rid, &t, 1, 1, &info);
    char *shm_before = listing(w.dir);
    char *ipc_before = listing(ipc);
    assert_non_null(strstr(shm_before, "mstar_arena_worker_0_"));
    assert_non_null(strstr(ipc_before, "worker_0.bell"));
    assert_non_null(strstr(ipc_before, "forkgrp.rank1.ipc"));

    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        /* What the parent still uses, destroyed here as an exiting child's atexit would. */
        mstar_rank_group_destroy(g[0]);
        mstar_rank_group_destroy(g[1]);
        mesh_pair_close(&m);
        mstar_comm_destroy(w.c);
        mstar_comm_destroy(w.p);
        exit(0);
    }
    assert_int_equal(wait_child(child), 0);

    char *shm_after = listing(w.dir);
    char *ipc_after = listing(ipc);
    assert_string_equal(shm_after, shm_before);
    assert_string_equal(ipc_after, ipc_before);
    /* The staged tensor still reads, with its bytes (its arena slot's stamp is intact). */
    mstar_edge e = edge_of("sig", "node", &info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w.c, &rid, &e, 1, NULL));
    collect_ready(w.c, 1);
    check_bytes(w.c, info.uuid, &t);
    assert_mstar_ok(mstar_comm_dereference(w.c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w.b, "worker_0", w.p), 1);
    assert_int_equal(mstar_comm_num_tensors(w.p), 0);
    /* The meshes talk both ways (the ring was not marked closed), the ranks agree. */
    mesh_harness_send(m.tx, "worker_0", 3);
    mesh_harness_recv(m.rx, "conductor", 3);
    mesh_harness_send(m.rx, "conductor", 4);
    mesh_harness_recv(m.tx, "worker_0", 4);
    agree_round(g);

    mstar_edge_clear(&e);
    free(t.data);
    free(shm_before);
    free(shm_after);
    free(ipc_before);
    free(ipc_after);
    mstar_rank_group_destroy(g[0]);
    mstar_rank_group_destroy(g[1]);
    mesh_pair_close(&m);
    comm_pair_fini(&w);
    assert_int_equal(mstar_test_count_dir(ipc), 0);
}

/* An arena destroyed in a child unmaps its segments and unlinks none: the parent's bytes and
 * names stay, and its own destroy removes them. */
static void test_child_destroys_inherited_arena(void **state)
{
    (void)state;
    mstar__shm_dir dir;
    assert_mstar_ok(mstar__shm_dir_open(mstar_test_tmpdir("fork_arena"), NULL, &dir));
    mstar__arena *a;
    assert_mstar_ok(mstar__arena_create(&dir, "worker_9", 1 << 20, 2, &a));
    uint32_t seg;
    uint64_t off;
    assert_mstar_ok(mstar__arena_reserve(a, 4096, &seg, &off));
    memset(mstar__arena_ptr(a, seg, off), 0x5A, 4096);
    mstar__arena_publish(a, seg, off, 77);
    char *before = listing(dir.path);
    assert_non_null(strstr(before, "mstar_arena_worker_9_"));

    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        mstar__arena_destroy(a);
        mstar__shm_dir_close(&dir);
        exit(0);
    }
    assert_int_equal(wait_child(child), 0);
    char *after = listing(dir.path);
    assert_string_equal(after, before);
    const uint8_t *p = mstar__arena_ptr(a, seg, off);
    for (int i = 0; i < 4096; i++)
        assert_int_equal(p[i], 0x5A);
    assert_true(mstar__arena_release(a, seg, off));
    mstar__arena_destroy(a);
    assert_int_equal(mstar_test_count_dir(dir.path), 0);
    mstar__shm_dir_close(&dir);
    free(before);
    free(after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_destroys_inherited),
        cmocka_unit_test(test_child_destroys_inherited_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
