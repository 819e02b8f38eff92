/*
 * test_hostile_fs_tmpfs.c — the shm directory on a small tmpfs (a deployment's own mount, or a
 * local user filling /dev/shm): an arena that cannot fit is refused when the manager is created,
 * a tensor that does not fit fails its staging with MSTAR_ENOSPC and leaves nothing behind, and
 * traffic that fits still completes with every byte checked. The arena held before this work
 * (segments are committed with posix_fallocate, never faulted in); a full file write was
 * MSTAR_EIO, now MSTAR_ENOSPC like a full arena. The mount lives in a private mount namespace
 * of this process, so the test needs root (CAP_SYS_ADMIN); without it the test is skipped.
 */
#include "hostile_fs.h"

#include <errno.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

static const char *mnt;

/* A 2 MiB tmpfs at a fresh directory, in a mount namespace of our own, or skip. */
static void mount_small_tmpfs(void)
{
    if (geteuid() != 0)
        mstar_test_skip("mounting a tmpfs needs root");
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        char why[160];
        snprintf(why, sizeof(why), "no private mount namespace here (%s)", strerror(errno));
        mstar_test_skip(why);
    }
    mnt = mstar_test_tmpdir("tmpfs");
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=2m,mode=0700") != 0) {
        char why[160];
        snprintf(why, sizeof(why), "cannot mount a tmpfs (%s)", strerror(errno));
        mstar_test_skip(why);
    }
}

static mstar_comm *try_comm(const char *entity, mstar_transport_kind kind, sender *s,
                            mstar_status *st)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = kind;
    o.shm_dir = mnt;
    o.send = bus_send;
    o.send_ctx = s;
    mstar_comm *c = NULL;
    *st = mstar_comm_create(&o, &c);
    return c;
}

/* Arena segments of 1 MiB, at most 8: more than the tmpfs holds, refused at creation. */
static void test_arena_larger_than_the_tmpfs(void **state)
{
    (void)state;
    bus b = { 0 };
    sender s = { &b, "worker_0" };
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1", 1);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "8", 1);
    mstar_status st;
    mstar_comm *c = try_comm("worker_0", MSTAR_TRANSPORT_ARENA, &s, &st);
    assert_int_equal(st, MSTAR_ENOSPC);
    assert_null(c);
    assert_non_null(strstr(mstar_last_error(), mnt));
    assert_int_equal(mstar_test_count_dir(mnt), 0);
    unsetenv("MSTAR_SHM_ARENA_MAX_SEGMENTS");
    unsetenv("MSTAR_SHM_ARENA_SEGMENT_MB");
}

/* Files: a tensor larger than what is left fails its staging with ENOSPC and no partial file;
 * the next one that fits goes through. */
static void test_files_fill_the_tmpfs(void **state)
{
    (void)state;
    bus b = { 0 };
    sender sp = { &b, "worker_0" }, sc = { &b, "worker_1" };
    mstar_status st;
    mstar_comm *p = try_comm("worker_0", MSTAR_TRANSPORT_FILES, &sp, &st);
    assert_mstar_ok(st);
    mstar_comm *c = try_comm("worker_1", MSTAR_TRANSPORT_FILES, &sc, &st);
    assert_mstar_ok(st);
    legit_roundtrip_of(&b, p, c, 512 * 1024, 1);
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor big = make_vector(MSTAR_DTYPE_UINT8, 4 << 20, 2);
    mstar_output o = output_of("sig", big);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, &rid, &o, 1, NULL, &info));
    assert_mstar_status(mstar_comm_register_for_send(p, &rid, &info, 1), MSTAR_ENOSPC);
    assert_int_equal(mstar_test_count_dir(mnt), 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(p, &rid));
    free(big.data);
    legit_roundtrip_of(&b, p, c, 256 * 1024, 3);
    mstar_comm_destroy(p);
    mstar_comm_destroy(c);
    bus_clear(&b);
    assert_int_equal(mstar_test_count_dir(mnt), 0);
}

int main(void)
{
    mount_small_tmpfs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_larger_than_the_tmpfs),
        cmocka_unit_test(test_files_fill_the_tmpfs),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    umount2(mnt, MNT_DETACH);
    return failed;
}
