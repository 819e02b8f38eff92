/*
 * test_hostile_fs_ipc.c — another local user against the ipc inboxes (issue 29, fault 4): a
 * root-owned sticky directory (like /tmp) as the ipc directory, where anyone may bind a socket
 * under an entity's name first, and a socket of another user (or a non-socket) planted under a
 * peer's inbox name. The first is refused when the mesh starts; a sender refuses the second
 * before ZeroMQ connects to it, so nothing of ours reaches the planted socket. The threat model
 * is docs/security.md ("Directories").
 *
 * The other user is uid 65534 (nobody) when running as root; without root the planted name is a
 * regular file, and the sticky directory is /tmp when it is a root-owned sticky one.
 */
#include "mesh_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define ATTACKER_UID 65534

/* A root-owned sticky directory open to everyone: made here as root, else /tmp if it is one;
 * NULL when neither is available. */
static const char *sticky_dir(char *buf, size_t size)
{
    if (geteuid() == 0) {
        snprintf(buf, size, "%s/sticky", mstar_test_tmpdir("hostile-ipcdir"));
        assert_int_equal(mkdir(buf, 0700), 0);
        assert_int_equal(chmod(buf, 01777), 0);
        return buf;
    }
    struct stat sb;
    if (stat("/tmp", &sb) == 0 && sb.st_uid == 0 && (sb.st_mode & 01777) == 01777)
        return "/tmp";
    return NULL;
}

/* Fault 4: the root-owned sticky exception of shm directories does not hold for the ipc
 * directory: anyone may bind <dir>/worker_1.ipc there before us and receive our traffic. */
static void test_sticky_ipc_dir_is_refused(void **state)
{
    (void)state;
    char buf[4096];
    const char *dir = sticky_dir(buf, sizeof(buf));
    if (dir == NULL) {
        print_message("skipped: no root-owned sticky directory\n");
        return;
    }
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    mstar_mesh *m = NULL;
    mstar_status st = mstar_mesh_create("worker_1", &opts, &m);
    if (st == MSTAR_OK)
        mstar_mesh_destroy(m);
    assert_mstar_status(st, MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), dir));
    assert_non_null(strstr(mstar_last_error(), "mode 1777"));
    if (dir == buf)
        assert_int_equal(rmdir(buf), 0);
}

/* A listening Unix stream socket at `path`, handed to the attacker when we are root. */
static int plant_socket(const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    assert_true(strlen(path) < sizeof(addr.sun_path));
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    assert_int_equal(bind(s, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(s, 8), 0);
    assert_int_equal(lchown(path, ATTACKER_UID, ATTACKER_UID), 0);
    return s;
}

/* Fault 4: a sender checks what sits at a peer's inbox name before connecting: another user's
 * socket (or a planted file) is refused with a clear error and never connected to; once the
 * name is free and the real peer binds, the same sender reaches it. */
static void test_foreign_inbox_socket_is_refused(void **state)
{
    (void)state;
    const char *dir = mstar_test_tmpdir("hostile-ipcsock");
    char path[512];
    snprintf(path, sizeof(path), "%s/worker_1.ipc", dir);
    mstar_mesh *tx = mesh_harness_open(dir, "worker_0");
    int planted = -1;
    const char *why;
    if (geteuid() == 0) {
        planted = plant_socket(path);
        why = "owned by uid 65534";
    } else {
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
        why = "not a socket";
    }
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg.request_id = mstar_rid_from_int(1);
    assert_mstar_status(mstar_mesh_send(tx, "worker_1", &msg), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), path));
    assert_non_null(strstr(mstar_last_error(), why));
    assert_int_equal(mstar_mesh_num_peers(tx), 0);
    if (planted >= 0) {
        /* ZeroMQ connects in the background: had it been asked to, the connection would wait
         * in the backlog by the time a second refused send returns. */
        assert_mstar_status(mstar_mesh_send(tx, "worker_1", &msg), MSTAR_EPROTO);
        usleep(100 * 1000);
        assert_int_equal(accept(planted, NULL, NULL), -1);
        assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
        close(planted);
    }
    assert_int_equal(unlink(path), 0);

    mstar_mesh *rx = mesh_harness_open(dir, "worker_1");
    assert_mstar_ok(mstar_mesh_send(tx, "worker_1", &msg));
    mstar_msg_clear(&msg);
    mesh_harness_recv(rx, "worker_0", 1);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

int main(void)
{
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sticky_ipc_dir_is_refused),
        cmocka_unit_test(test_foreign_inbox_socket_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
