/*
 * test_mesh_lifecycle.c — creating and destroying meshes: the ipc directory (0700) and file,
 * double binds, bad directories, the entity index, that nothing leaks (fds, files) on success or
 * failure, wake-ups from another thread, and non-blocking raw sends up to the high-water mark.
 */
#include "mstar_test.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *ipc_dir;

static int setup(void **state)
{
    (void)state;
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_ZMQ_TCP_HOST");
    unsetenv("MSTAR_ZMQ_TCP_BASE_PORT");
    unsetenv("MSTAR_IPC_DIR");
    return 0;
}

static mstar_mesh_options ipc_opts(void)
{
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    return opts;
}

/* A TCP base port unlikely to be used by a parallel run: derived from the pid. */
static mstar_mesh_options tcp_opts(void)
{
    mstar_mesh_options opts = { .transport = MSTAR_MESH_TCP,
                                .tcp_base_port = 30000 + (int)(getpid() % 20000) };
    return opts;
}

static int count_open_fds(void)
{
    return mstar_test_count_dir("/proc/self/fd");
}

static bool path_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void test_create_binds_and_destroy_removes_ipc_file(void **state)
{
    (void)state;
    char dir[512], file[600];
    snprintf(dir, sizeof(dir), "%s/a/b", ipc_dir);
    snprintf(file, sizeof(file), "%s/worker_3.ipc", dir);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create("worker_3", &opts, &mesh));
    assert_string_equal(mstar_mesh_entity(mesh), "worker_3");
    assert_int_equal(mstar_mesh_entity_index(mesh), 103);
    assert_true(mstar_mesh_inbox_fd(mesh) >= 0);
    assert_true(mstar_mesh_wake_fd(mesh) >= 0);
    assert_int_equal(mstar_mesh_dropped(mesh), 0);

    /* The directory and its missing parent were created private. */
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    char parent[520];
    snprintf(parent, sizeof(parent), "%s/a", ipc_dir);
    assert_int_equal(stat(parent, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(lstat(file, &sb), 0);
    assert_true(S_ISSOCK(sb.st_mode));

    mstar_mesh_destroy(mesh);
    assert_false(path_exists(file));
    assert_int_equal(mstar_test_count_dir(dir), 0);
    mstar_mesh_destroy(NULL);
}

static void test_entity_index_rule(void **state)
{
    (void)state;
    static const struct {
        const char *entity;
        uint16_t index;
    } cases[] = {
        { "api_server", 0 },   { "conductor", 1 },   { "api_server_preprocess_worker", 2 },
        { "worker_0", 100 },   { "worker_12", 112 }, { "ab", 1195 },
        { "tokenizer", 1987 },
    };
    mstar_mesh_options opts = ipc_opts();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mstar_mesh *mesh = NULL;
        assert_mstar_ok(mstar_mesh_create(cases[i].entity, &opts, &mesh));
        assert_int_equal(mstar_mesh_entity_index(mesh), cases[i].index);
        mstar_mesh_destroy(mesh);
    }
}

static void test_double_bind_ipc_is_a_clear_error(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *first = NULL, *second = NULL;
    assert_mstar_ok(mstar_mesh_create("conductor", &opts, &first));
    assert_mstar_status(mstar_mesh_create("conductor", &opts, &second), MSTAR_EEXIST);
    assert_null(second);
    assert_non_null(strstr(mstar_last_error(), "/conductor.ipc"));
    assert_non_null(strstr(mstar_last_error(), "already bound"));
    /* The refused create did not take the first one's file away. */
    char file[600];
    snprintf(file, sizeof(file), "%s/conductor.ipc", ipc_dir);
    assert_true(path_exists(file));
    mstar_mesh_destroy(first);
    assert_false(path_exists(file));
}

static void test_double_bind_tcp_is_a_clear_error(void **state)
{
    (void)state;
    mstar_mesh_options opts = tcp_opts();
    mstar_mesh *first = NULL, *second = NULL;
    mstar_status st = mstar_mesh_create("worker_1", &opts, &first);
    if (st == MSTAR_EEXIST)
        skip(); /* someone else holds the port; the ipc case still ran */
    assert_mstar_ok(st);
    char want[64];
    snprintf(want, sizeof(want), "tcp://127.0.0.1:%d", opts.tcp_base_port + 101);
    assert_mstar_status(mstar_mesh_create("worker_1", &opts, &second), MSTAR_EEXIST);
    assert_null(second);
    assert_non_null(strstr(mstar_last_error(), want));
    mstar_mesh_destroy(first);
    /* The port is free again. */
    assert_mstar_ok(mstar_mesh_create("worker_1", &opts, &second));
    mstar_mesh_destroy(second);
}

static void test_stale_ipc_file_is_replaced(void **state)
{
    (void)state;
    /* A socket file left by a dead process: bound, then its socket closed without unlinking. */
    char file[600];
    snprintf(file, sizeof(file), "%s/worker_9.ipc", ipc_dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    assert_true(strlen(file) < sizeof(addr.sun_path));
    memcpy(addr.sun_path, file, strlen(file) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    close(fd);
    assert_true(path_exists(file));

    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create("worker_9", &opts, &mesh));
    mstar_mesh_destroy(mesh);
    assert_false(path_exists(file));
}

static void test_bad_directory_names_the_endpoint(void **state)
{
    (void)state;
    /* The directory path runs through a regular file. */
    char blocker[600], dir[700];
    snprintf(blocker, sizeof(blocker), "%s/not_a_dir", ipc_dir);
    FILE *f = fopen(blocker, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof(dir), "%s/sub", blocker);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    mstar_mesh *mesh = NULL;
    assert_mstar_status(mstar_mesh_create("worker_0", &opts, &mesh), MSTAR_EIO);
    assert_null(mesh);
    assert_non_null(strstr(mstar_last_error(), "ipc://"));
    assert_non_null(strstr(mstar_last_error(), "/not_a_dir/sub/worker_0.ipc"));

    /* The directory itself is a file. */
    opts.ipc_dir = blocker;
    assert_mstar_status(mstar_mesh_create("worker_0", &opts, &mesh), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), "not a directory"));
    unlink(blocker);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *mesh = NULL;
    assert_mstar_status(mstar_mesh_create(NULL, &opts, &mesh), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_create("worker_0", &opts, NULL), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_create("bad name", &opts, &mesh), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "entity name"));
    setenv("MSTAR_ZMQ_TRANSPORT", "shm", 1);
    assert_mstar_status(mstar_mesh_create("worker_0", NULL, &mesh), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_ZMQ_TRANSPORT=shm"));
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    assert_null(mesh);
}

static void test_nothing_leaks_on_any_path(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh_options bad = { .transport = MSTAR_MESH_IPC, .ipc_dir = "/proc/no/such/dir" };
    mstar_mesh *mesh = NULL, *other = NULL;
    /* Warm up whatever the libraries allocate once per process. */
    assert_mstar_ok(mstar_mesh_create("worker_0", &opts, &mesh));
    mstar_mesh_destroy(mesh);

    int fds = count_open_fds();
    int files = mstar_test_count_dir(ipc_dir);
    for (int i = 0; i < 5; i++) {
        assert_mstar_ok(mstar_mesh_create("worker_0", &opts, &mesh));
        /* Peer sockets too: one connected, one refused name. */
        assert_mstar_ok(mstar_mesh_send_raw(mesh, "worker_1", "x", 1));
        assert_mstar_status(mstar_mesh_send_raw(mesh, "no/such", "x", 1), MSTAR_EINVAL);
        assert_mstar_status(mstar_mesh_create("worker_0", &opts, &other), MSTAR_EEXIST);
        assert_mstar_status(mstar_mesh_create("worker_0", &bad, &other), MSTAR_EIO);
        mstar_mesh_destroy(mesh);
    }
    assert_int_equal(count_open_fds(), fds);
    assert_int_equal(mstar_test_count_dir(ipc_dir), files);
}

/* ---- wake-ups ------------------------------------------------------------------------------- */

struct waker {
    mstar_mesh *mesh;
    int count;
};

static void *waker_main(void *arg)
{
    struct waker *w = arg;
    for (int i = 0; i < w->count; i++) {
        if (mstar_mesh_wake(w->mesh) != MSTAR_OK)
            return (void *)1;
        usleep(200);
    }
    return NULL;
}

static void test_wake_from_another_thread(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create("api_server", &opts, &mesh));
    assert_int_equal(mstar_mesh_wake_drain(mesh), 0);

    struct waker w = { .mesh = mesh, .count = 50 };
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, waker_main, &w), 0);
    uint64_t seen = 0;
    struct pollfd p = { .fd = mstar_mesh_wake_fd(mesh), .events = POLLIN };
    while (seen < (uint64_t)w.count) {
        int rc = poll(&p, 1, 10000);
        assert_int_equal(rc, 1); /* a wake arrives well within 10 s, or the test fails */
        uint64_t n = mstar_mesh_wake_drain(mesh);
        assert_true(n >= 1);
        seen += n;
    }
    void *ret;
    assert_int_equal(pthread_join(thread, &ret), 0);
    assert_null(ret);
    assert_int_equal(seen, (uint64_t)w.count);
    /* Drained: nothing pending, the fd is not readable. */
    assert_int_equal(mstar_mesh_wake_drain(mesh), 0);
    assert_int_equal(poll(&p, 1, 0), 0);
    mstar_mesh_destroy(mesh);
}

/* ---- raw sends ------------------------------------------------------------------------------ */

static void test_send_to_absent_peer_is_eagain_at_high_water_mark(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create("conductor", &opts, &mesh));
    /* Nobody binds worker_77: the lazily connected socket queues, then refuses without
     * blocking. */
    int sent = 0;
    mstar_status st = MSTAR_OK;
    while (sent < 1000000) {
        st = mstar_mesh_send_raw(mesh, "worker_77", "payload", 7);
        if (st != MSTAR_OK)
            break;
        sent++;
    }
    assert_mstar_status(st, MSTAR_EAGAIN);
    assert_non_null(strstr(mstar_last_error(), "worker_77"));
    assert_true(sent >= 1);
    assert_true(sent < 1000000);
    /* Still refused, still not blocking. */
    assert_mstar_status(mstar_mesh_send_raw(mesh, "worker_77", "payload", 7), MSTAR_EAGAIN);
    mstar_mesh_destroy(mesh);
}

static void test_send_raw_bad_arguments(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create("conductor", &opts, &mesh));
    assert_mstar_status(mstar_mesh_send_raw(NULL, "worker_0", "x", 1), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_send_raw(mesh, NULL, "x", 1), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_send_raw(mesh, "worker_0", NULL, 1), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_send_raw(mesh, "../x", "x", 1), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "peer"));
    /* An empty frame is a valid raw send (the receiver drops it as undecodable). */
    assert_mstar_ok(mstar_mesh_send_raw(mesh, "worker_0", NULL, 0));
    mstar_mesh_destroy(mesh);
}

int main(void)
{
    ipc_dir = mstar_test_tmpdir("mesh-lifecycle");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_create_binds_and_destroy_removes_ipc_file, setup),
        cmocka_unit_test_setup(test_entity_index_rule, setup),
        cmocka_unit_test_setup(test_double_bind_ipc_is_a_clear_error, setup),
        cmocka_unit_test_setup(test_double_bind_tcp_is_a_clear_error, setup),
        cmocka_unit_test_setup(test_stale_ipc_file_is_replaced, setup),
        cmocka_unit_test_setup(test_bad_directory_names_the_endpoint, setup),
        cmocka_unit_test_setup(test_bad_arguments, setup),
        cmocka_unit_test_setup(test_nothing_leaks_on_any_path, setup),
        cmocka_unit_test_setup(test_wake_from_another_thread, setup),
        cmocka_unit_test_setup(test_send_to_absent_peer_is_eagain_at_high_water_mark, setup),
        cmocka_unit_test_setup(test_send_raw_bad_arguments, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
