/*
 * test_shm.c — the shared-memory directory: per-uuid files (exclusive 0600 creation, bounds-
 * checked reads, bad names), segment-name parsing and checking, the arena's segments (growth to
 * the cap, dedicated oversized segments, full), the arena under several threads (T-13), name
 * collisions, the exit-time unlinker across fork, and the orphan sweep of dead processes' segments,
 * which keeps a segment its creator still maps whatever its pid says (T-14).
 */
#include "mstar_test.h"

#include "tensors/arena/arena.h"
#include "tensors/shm.h"

#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static mstar__shm_dir open_dir(const char *tag)
{
    mstar__shm_dir d;
    assert_mstar_ok(mstar__shm_dir_open(mstar_test_tmpdir(tag), NULL, &d));
    return d;
}

static bool exists(const mstar__shm_dir *d, const char *name)
{
    struct stat sb;
    return fstatat(d->fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

static int mode_of(const mstar__shm_dir *d, const char *name)
{
    struct stat sb;
    assert_int_equal(fstatat(d->fd, name, &sb, AT_SYMLINK_NOFOLLOW), 0);
    return (int)(sb.st_mode & 0777);
}

static void touch(const mstar__shm_dir *d, const char *name)
{
    int fd = openat(d->fd, name, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
}

static void test_dir_is_created(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof(path), "%s/a/b", mstar_test_tmpdir("shmdir"));
    mstar__shm_dir d;
    assert_mstar_ok(mstar__shm_dir_open(path, NULL, &d));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    mstar__shm_dir_close(&d);
}

static void test_file_roundtrip_and_bounds(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("shmfile");
    uint8_t data[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (uint8_t)(i * 7);
    mstar_tensor_id u = mstar_id_make(100, 42);
    assert_mstar_ok(mstar__shm_file_write(&d, "worker_0", u, data, sizeof(data)));
    char name[MSTAR__SHM_NAME_BUF];
    assert_mstar_ok(mstar__shm_file_name(&d, "worker_0", u, name));
    assert_string_equal(name, "mstar_worker_0_0x006400000000002a");
    assert_int_equal(mode_of(&d, name), 0600);
    /* Exclusive: a second write never truncates what a reader may be reading. */
    assert_mstar_status(mstar__shm_file_write(&d, "worker_0", u, data, 10), MSTAR_EEXIST);
    assert_mstar_ok(mstar__shm_file_read(&d, "worker_0", u, 0, 1000, back));
    assert_memory_equal(back, data, 1000);
    assert_mstar_ok(mstar__shm_file_read(&d, "worker_0", u, 600, 400, back));
    assert_memory_equal(back, data + 600, 400);
    /* Bad input: ranges past the end, and an offset that overflows, never read. */
    memset(back, 0xee, sizeof(back));
    assert_mstar_status(mstar__shm_file_read(&d, "worker_0", u, 601, 400, back), MSTAR_EPROTO);
    assert_mstar_status(mstar__shm_file_read(&d, "worker_0", u, UINT64_MAX - 5, 10, back),
                        MSTAR_EPROTO);
    assert_int_equal(back[0], 0xee);
    assert_mstar_status(mstar__shm_file_read(&d, "worker_0", u + 1, 0, 1, back), MSTAR_ENOENT);
    mstar__shm_file_unlink(&d, "worker_0", u);
    assert_false(exists(&d, name));
    mstar__shm_file_unlink(&d, "worker_0", u); /* missing is fine */
    mstar__shm_dir_close(&d);
}

/* T-18: an empty tensor is an empty file, read without touching the destination. */
static void test_zero_size_file(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("shmzero");
    mstar_tensor_id u = mstar_id_make(100, 1);
    assert_mstar_ok(mstar__shm_file_write(&d, "w", u, NULL, 0));
    assert_mstar_ok(mstar__shm_file_read(&d, "w", u, 0, 0, NULL));
    assert_mstar_status(mstar__shm_file_read(&d, "w", u, 0, 1, NULL), MSTAR_EPROTO);
    mstar__shm_file_unlink(&d, "w", u);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

static void test_bad_entity_names(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("shmbad");
    uint8_t b[4] = { 0 };
    const char *bad[] = { "../etc", "a/b", "..", "", "x..y", "a b" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_mstar_status(mstar__shm_file_read(&d, bad[i], 1, 0, 1, b), MSTAR_EINVAL);
        assert_mstar_status(mstar__shm_file_write(&d, bad[i], 1, b, 1), MSTAR_EINVAL);
    }
    char longname[300];
    memset(longname, 'a', 250);
    longname[250] = '\0';
    assert_mstar_status(mstar__shm_file_write(&d, longname, 1, b, 1), MSTAR_EINVAL);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

static void test_sweep_entity_files(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("shmsweep");
    touch(&d, "mstar_worker_1_0x0065000000000001");
    touch(&d, "mstar_worker_1_0x0065000000000002");
    touch(&d, "mstar_worker_10_0x006e000000000001"); /* another entity sharing a prefix */
    touch(&d, "mstar_worker_0x0065000000000001");    /* entity "worker" */
    touch(&d, "mstar_worker_1_0x00650000000000011"); /* not the shape */
    touch(&d, "unrelated");
    assert_int_equal(mstar__shm_sweep_entity_files(&d, "worker_1"), 2);
    assert_int_equal(mstar_test_count_dir(d.path), 4);
    assert_true(exists(&d, "mstar_worker_10_0x006e000000000001"));
    mstar__shm_dir_close(&d);
}

/* A second process of a live entity (its directory opened again) keeps the files of the first:
 * each sweep holds the entity's liveness lock until its directory is closed, and files are
 * removed only when nobody holds it. A process that dies drops it with its descriptors. */
static void test_sweep_keeps_live_entity_files(void **state)
{
    (void)state;
    mstar__shm_dir first = open_dir("shmlive"), again, other;
    assert_mstar_ok(mstar__shm_dir_open(first.path, NULL, &again));
    assert_mstar_ok(mstar__shm_dir_open(first.path, NULL, &other));
    assert_int_equal(mstar__shm_sweep_entity_files(&first, "worker_1"), 0);
    touch(&first, "mstar_worker_1_0x0065000000000001");
    touch(&first, "mstar_worker_2_0x0066000000000001");
    assert_int_equal(mstar__shm_sweep_entity_files(&again, "worker_1"), 0); /* first lives */
    assert_int_equal(mstar__shm_sweep_entity_files(&other, "worker_2"), 1); /* nobody did */
    mstar__shm_dir_close(&first);
    mstar__shm_dir_close(&again);
    /* Held by a child that is killed: its lock goes with it. */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        mstar__shm_dir d;
        if (mstar__shm_dir_open(other.path, NULL, &d) != MSTAR_OK)
            _exit(3);
        if (mstar__shm_sweep_entity_files(&d, "worker_1") != 1) /* first's, both now closed */
            _exit(4);
        (void)!write(ready[1], "x", 1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
    touch(&other, "mstar_worker_1_0x0065000000000002");
    mstar__shm_dir probe;
    assert_mstar_ok(mstar__shm_dir_open(other.path, NULL, &probe));
    assert_int_equal(mstar__shm_sweep_entity_files(&probe, "worker_1"), 0);
    mstar__shm_dir_close(&probe);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_mstar_ok(mstar__shm_dir_open(other.path, NULL, &probe));
    assert_int_equal(mstar__shm_sweep_entity_files(&probe, "worker_1"), 1); /* the child's */
    assert_int_equal(mstar_test_count_dir(other.path), 0);
    mstar__shm_dir_close(&probe);
    mstar__shm_dir_close(&other);
}

/* Two deployments sharing one directory, each with its namespace: the same entity and uuid
 * name different files, and a sweep stays within its namespace. */
static void test_namespaces_keep_deployments_apart(void **state)
{
    (void)state;
    const char *path = mstar_test_tmpdir("shmns");
    mstar__shm_dir a, b, plain;
    assert_mstar_ok(mstar__shm_dir_open(path, "dep1", &a));
    assert_mstar_ok(mstar__shm_dir_open(path, "dep2", &b));
    assert_mstar_ok(mstar__shm_dir_open(path, NULL, &plain));
    mstar_tensor_id u = mstar_id_make(100, 1);
    uint8_t x = 1, y = 2, z = 3, back;
    assert_mstar_ok(mstar__shm_file_write(&a, "worker_0", u, &x, 1));
    assert_mstar_ok(mstar__shm_file_write(&b, "worker_0", u, &y, 1));
    assert_mstar_ok(mstar__shm_file_write(&plain, "worker_0", u, &z, 1));
    char name[MSTAR__SHM_NAME_BUF];
    assert_mstar_ok(mstar__shm_file_name(&a, "worker_0", u, name));
    assert_string_equal(name, "mstar-dep1_worker_0_0x0064000000000001");
    assert_mstar_ok(mstar__shm_file_read(&b, "worker_0", u, 0, 1, &back));
    assert_int_equal(back, 2);
    assert_int_equal(mstar__shm_sweep_entity_files(&a, "worker_0"), 1);
    assert_int_equal(mstar__shm_sweep_entity_files(&plain, "worker_0"), 1);
    assert_int_equal(mstar_test_count_dir(path), 1);
    mstar__shm_dir bad;
    assert_mstar_status(mstar__shm_dir_open(path, "a_b", &bad), MSTAR_EINVAL);
    assert_mstar_status(mstar__shm_dir_open(path, "0123456789012345678901234567890123", &bad),
                        MSTAR_EINVAL);
    mstar__shm_dir_close(&a);
    mstar__shm_dir_close(&b);
    mstar__shm_dir_close(&plain);
}

static void test_segment_names(void **state)
{
    (void)state;
    mstar__shm_segment_name p;
    assert_mstar_ok(mstar__shm_segment_parse("mstar_arena_worker_1_1234_0a1b2c3d.seg12", &p));
    assert_string_equal(p.entity, "worker_1");
    assert_int_equal(p.pid, 1234);
    assert_int_equal(p.token, 0x0a1b2c3d);
    assert_int_equal(p.index, 12);
    assert_mstar_ok(mstar__shm_segment_parse("mstar_arena_a.seg_7_deadbeef.seg0", &p));
    assert_string_equal(p.entity, "a.seg");
    const char *bad[] = {
        "mstar_arena_w_1_0a1b2c3d.seg",     /* no index */
        "mstar_arena_w_1_0a1b2c3.seg0",     /* short token */
        "mstar_arena_w_x_0a1b2c3d.seg0",    /* pid not numeric */
        "mstar_arena__1_0a1b2c3d.seg0",     /* no entity */
        "mstar_arena_1_0a1b2c3d.seg0",      /* no entity either */
        "arena_w_1_0a1b2c3d.seg0",          /* no prefix */
        "mstar_w_1_0a1b2c3d.seg0",          /* the file prefix, not the arena's */
        "mstar_arena_../1_0a1b2c3d.seg0",   /* '/' and '..' */
        "mstar_arena_w..x_1_0a1b2c3d.seg0", /* '..' */
        "../mstar_arena_w_1_0a1b2c3d.seg0",
        "mstar_arena_w_1_0A1B2C3D.seg0", /* upper-case hex is not what we write */
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mstar_error_clear();
        if (mstar__shm_segment_parse(bad[i], &p) != MSTAR_EPROTO)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(mstar_last_error()[0] != '\0');
    }
    assert_mstar_ok(mstar__shm_segment_check("mstar_arena_worker_1_1_0a1b2c3d.seg0", "worker_1"));
    assert_mstar_status(
        mstar__shm_segment_check("mstar_arena_worker_1_1_0a1b2c3d.seg0", "worker_2"), MSTAR_EPROTO);
}

static void test_arena_growth_and_cap(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arena");
    mstar__arena *a;
    const uint64_t seg = 64 * 1024;
    assert_mstar_ok(mstar__arena_create(&d, "worker_3", seg, 3, &a));
    char name[MSTAR_NAME_MAX + 1];
    mstar__arena_segment_name(a, 0, name);
    assert_true(exists(&d, name));
    assert_int_equal(mode_of(&d, name), 0600);
    mstar__shm_segment_name p;
    assert_mstar_ok(mstar__shm_segment_parse(name, &p));
    assert_string_equal(p.entity, "worker_3");
    assert_int_equal(p.pid, getpid());
    assert_int_equal(p.index, 0);

    uint32_t s1, s2, s3, s4;
    uint64_t o1, o2, o3, o4;
    assert_mstar_ok(mstar__arena_reserve(a, seg - 256, &s1, &o1));
    assert_int_equal(s1, 0);
    memset(mstar__arena_ptr(a, s1, o1), 0x5a, seg - 256);
    assert_mstar_ok(mstar__arena_reserve(a, 512, &s2, &o2)); /* does not fit: segment 1 */
    assert_int_equal(s2, 1);
    assert_mstar_ok(mstar__arena_reserve(a, 3 * seg, &s3, &o3)); /* dedicated, oversized */
    assert_int_equal(s3, 2);
    void *base;
    uint64_t len;
    mstar__arena_segment_span(a, 2, &base, &len);
    assert_int_equal(len, 3 * seg);
    /* At the cap: a request that fits nowhere is ENOSPC, with the numbers in the message. */
    assert_mstar_status(mstar__arena_reserve(a, seg, &s4, &o4), MSTAR_ENOSPC);
    assert_non_null(strstr(mstar_last_error(), "need 65536"));
    /* Freed space is reused by first fit, the dedicated segment included. */
    assert_true(mstar__arena_release(a, s3, o3));
    assert_false(mstar__arena_release(a, s3, o3));
    assert_false(mstar__arena_release(a, 9, 0)); /* no such segment */
    assert_mstar_ok(mstar__arena_reserve(a, seg, &s4, &o4));
    assert_int_equal(s4, 2);
    mstar__arena_stats st;
    mstar__arena_stats_get(a, &st);
    assert_int_equal(st.segments, 3);
    assert_int_equal(st.total_bytes, 5 * seg);
    assert_int_equal(st.live_slots, 3);
    assert_int_equal(st.largest_free_block, 2 * seg);
    assert_int_equal(mstar_test_count_dir(d.path), 3);
    mstar__arena_destroy(a);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

/* T-13: threads reserving, filling, checking and releasing slots of one arena at once (the
 * threaded api-server's case) never get overlapping slots, grow it together without losing a
 * segment, and leave it empty. */
enum { ARENA_THREADS = 4, ARENA_ROUNDS = 3000, ARENA_HELD = 8, ARENA_MAX_LEN = 16 * 1024 };

struct arena_worker {
    mstar__arena *a;
    pthread_barrier_t *start; /* all threads begin together */
    uint8_t id;
    int bad; /* slots whose bytes another thread overwrote, or calls that failed */
};

static void *arena_worker_run(void *p)
{
    struct arena_worker *w = p;
    uint32_t seg[ARENA_HELD];
    uint64_t off[ARENA_HELD], len[ARENA_HELD];
    uint8_t want[ARENA_MAX_LEN];
    uint32_t seed = w->id;
    pthread_barrier_wait(w->start);
    for (int r = 0; r < ARENA_ROUNDS + ARENA_HELD; r++) {
        int k = r % ARENA_HELD;
        if (r >= ARENA_HELD) { /* the slot taken ARENA_HELD rounds ago: still ours? */
            memset(want, w->id + k, len[k]);
            w->bad += memcmp(mstar__arena_ptr(w->a, seg[k], off[k]), want, len[k]) != 0;
            w->bad += !mstar__arena_release(w->a, seg[k], off[k]);
        }
        if (r >= ARENA_ROUNDS)
            continue;
        seed = seed * 1103515245u + 12345u;
        len[k] = (seed >> 8) % ARENA_MAX_LEN;
        if (mstar__arena_reserve(w->a, len[k], &seg[k], &off[k]) != MSTAR_OK) {
            w->bad++;
            len[k] = 0;
            seg[k] = UINT32_MAX;
            continue;
        }
        memset(mstar__arena_ptr(w->a, seg[k], off[k]), w->id + k, len[k]);
    }
    return NULL;
}

static void test_arena_threads(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenathreads");
    mstar__arena *a;
    assert_mstar_ok(mstar__arena_create(&d, "api_server", 32 * 1024, 64, &a));
    pthread_t th[ARENA_THREADS];
    struct arena_worker w[ARENA_THREADS];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, ARENA_THREADS), 0);
    for (int i = 0; i < ARENA_THREADS; i++) {
        w[i] = (struct arena_worker){ a, &start, (uint8_t)(16 * (i + 1)), 0 };
        assert_int_equal(pthread_create(&th[i], NULL, arena_worker_run, &w[i]), 0);
    }
    for (int i = 0; i < ARENA_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].bad, 0);
    }
    pthread_barrier_destroy(&start);
    mstar__arena_stats st;
    mstar__arena_stats_get(a, &st);
    assert_true(st.segments > 1); /* one thread's first eight slots already outgrow segment 0 */
    assert_int_equal(st.live_slots, 0);
    assert_int_equal(st.free_bytes, st.total_bytes);
    assert_int_equal(mstar_test_count_dir(d.path), st.segments);
    mstar__arena_destroy(a);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

/* T-14: two arenas of one entity in one process (a restart, a second server) get distinct
 * names; neither truncates the other's segments. */
static void test_arena_names_never_collide(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenacoll");
    mstar__arena *a, *b;
    assert_mstar_ok(mstar__arena_create(&d, "w", 4096, 1, &a));
    uint32_t s;
    uint64_t o;
    assert_mstar_ok(mstar__arena_reserve(a, 8, &s, &o));
    memcpy(mstar__arena_ptr(a, s, o), "abcdefg", 8);
    assert_mstar_ok(mstar__arena_create(&d, "w", 4096, 1, &b));
    assert_string_not_equal(mstar__arena_base_name(a), mstar__arena_base_name(b));
    assert_string_equal((char *)mstar__arena_ptr(a, s, o), "abcdefg");
    assert_int_equal(mstar_test_count_dir(d.path), 2);
    mstar__arena_destroy(b);
    mstar__arena_destroy(a);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

static void test_arena_rejects_bad_config(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenabad");
    mstar__arena *a;
    assert_mstar_status(mstar__arena_create(&d, "w", 1000, 1, &a), MSTAR_EINVAL);
    assert_mstar_status(mstar__arena_create(&d, "w", 4096, 0, &a), MSTAR_EINVAL);
    assert_mstar_status(mstar__arena_create(&d, "a/b", 4096, 1, &a), MSTAR_EINVAL);
    /* Segments that cannot fit in the filesystem at all are refused up front. */
    assert_mstar_status(mstar__arena_create(&d, "w", UINT64_C(1) << 50, 1024, &a), MSTAR_ENOSPC);
    assert_int_equal(mstar_test_count_dir(d.path), 0);
    mstar__shm_dir_close(&d);
}

/* A process that exits without destroying its arena still removes its segments; a forked
 * child exiting does not remove its parent's. */
static void test_exit_unlinker(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenaexit");
    mstar__arena *parent;
    assert_mstar_ok(mstar__arena_create(&d, "parent", 4096, 2, &parent));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        mstar__arena *child;
        if (mstar__arena_create(&d, "child", 4096, 2, &child) != MSTAR_OK)
            _exit(3);
        uint32_t s;
        uint64_t o;
        if (mstar__arena_reserve(child, 8192, &s, &o) != MSTAR_OK) /* a second segment */
            _exit(4);
        exit(0); /* no destroy */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(mstar_test_count_dir(d.path), 1); /* only the parent's segment */
    char name[MSTAR_NAME_MAX + 1];
    mstar__arena_segment_name(parent, 0, name);
    assert_true(exists(&d, name));
    mstar__arena_destroy(parent);
    mstar__shm_dir_close(&d);
}

/* design.md "Transports" / T-14: segments of dead pids are swept; live ones (ours, our parent's)
 * and names that do not parse are left alone. */
static void test_orphan_sweep(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenasweep");
    char name[512];
    pid_t dead = mstar_test_dead_pid();
    snprintf(name, sizeof(name), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", (int)dead);
    touch(&d, name);
    snprintf(name, sizeof(name), "mstar_arena_worker_0_%d_0a0b0c0d.seg1", (int)dead);
    touch(&d, name);
    snprintf(name, sizeof(name), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", (int)getppid());
    touch(&d, name);
    snprintf(name, sizeof(name), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", (int)getpid());
    touch(&d, name);
    touch(&d, "mstar_arena_garbage");
    touch(&d, "mstar_worker_0_0x0064000000000001");
    assert_int_equal(mstar__shm_sweep_dead_segments(&d), 2);
    assert_int_equal(mstar_test_count_dir(d.path), 4);
    mstar__shm_dir_close(&d);
}

/* T-14: a segment whose pid looks dead here (a creator in another pid namespace sharing the
 * directory) is kept while its creator still maps it: the arena holds a shared lock on each
 * segment for as long as it is mapped, and the sweep removes only segments nobody locks. */
static void test_sweep_keeps_locked_segments(void **state)
{
    (void)state;
    mstar__shm_dir d = open_dir("arenalock");
    mstar__arena *a;
    assert_mstar_ok(mstar__arena_create(&d, "worker_0", 64 * 1024, 1, &a));
    char name[MSTAR_NAME_MAX + 1];
    mstar__arena_segment_name(a, 0, name);
    int probe = openat(d.fd, name, O_RDONLY | O_CLOEXEC);
    assert_true(probe >= 0);
    assert_int_not_equal(flock(probe, LOCK_EX | LOCK_NB), 0); /* the arena's lock */
    close(probe);
    mstar__arena_destroy(a);

    /* The other namespace's creator: a dead pid here, the file locked and mapped there. */
    snprintf(name, sizeof(name), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", mstar_test_dead_pid());
    touch(&d, name);
    int fd = openat(d.fd, name, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    assert_int_equal(flock(fd, LOCK_SH | LOCK_NB), 0);
    void *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    close(fd); /* the mapping keeps the lock */
    assert_int_equal(mstar__shm_sweep_dead_segments(&d), 0);
    assert_true(exists(&d, name));
    munmap(map, 4096); /* the creator is gone */
    assert_int_equal(mstar__shm_sweep_dead_segments(&d), 1);
    assert_false(exists(&d, name));
    mstar__shm_dir_close(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dir_is_created),
        cmocka_unit_test(test_file_roundtrip_and_bounds),
        cmocka_unit_test(test_zero_size_file),
        cmocka_unit_test(test_bad_entity_names),
        cmocka_unit_test(test_sweep_entity_files),
        cmocka_unit_test(test_sweep_keeps_live_entity_files),
        cmocka_unit_test(test_namespaces_keep_deployments_apart),
        cmocka_unit_test(test_segment_names),
        cmocka_unit_test(test_arena_growth_and_cap),
        cmocka_unit_test(test_arena_names_never_collide),
        cmocka_unit_test(test_arena_threads),
        cmocka_unit_test(test_arena_rejects_bad_config),
        cmocka_unit_test(test_exit_unlinker),
        cmocka_unit_test(test_orphan_sweep),
        cmocka_unit_test(test_sweep_keeps_locked_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
