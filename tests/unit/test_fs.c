/*
 * test_fs.c — mstar__mkdir_p (src/core/fs.c): nested creation, existing directories, and the
 * errors for a file in the way, an empty path and one that is too long; the ownership rule for
 * shared directories (mstar__dir_check_owner, mstar__mkdir_private).
 */
#include "mstar_test.h"

#include "core/fs.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void test_nested_and_existing(void **state)
{
    (void)state;
    const char *root = mstar_test_tmpdir("fs");
    char path[4096];
    snprintf(path, sizeof(path), "%s/a/b/c", root);
    assert_mstar_ok(mstar__mkdir_p("test", path, 0755));
    assert_true(is_dir(path));
    /* Again: nothing to do. A trailing slash is the same directory. */
    assert_mstar_ok(mstar__mkdir_p("test", path, 0755));
    snprintf(path, sizeof(path), "%s/a/b/", root);
    assert_mstar_ok(mstar__mkdir_p("test", path, 0755));
    /* The mode is used for what is created (less the umask). */
    snprintf(path, sizeof(path), "%s/private", root);
    assert_mstar_ok(mstar__mkdir_p("test", path, 0700));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
}

static void test_errors(void **state)
{
    (void)state;
    const char *root = mstar_test_tmpdir("fs");
    char file[4096], path[4200];
    snprintf(file, sizeof(file), "%s/file", root);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    /* A file where a directory should be: as the leaf, and as a parent. */
    assert_mstar_status(mstar__mkdir_p("--out", file, 0755), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), "--out: "));
    assert_non_null(strstr(mstar_last_error(), "not a directory"));
    snprintf(path, sizeof(path), "%s/below", file);
    assert_mstar_status(mstar__mkdir_p("--out", path, 0755), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), file));
    assert_mstar_status(mstar__mkdir_p("--out", "", 0755), MSTAR_EINVAL);
    char *long_path = malloc(PATH_MAX + 2);
    assert_non_null(long_path);
    memset(long_path, 'a', PATH_MAX + 1);
    long_path[PATH_MAX + 1] = '\0';
    assert_mstar_status(mstar__mkdir_p("--out", long_path, 0755), MSTAR_EINVAL);
    free(long_path);
}

/* Ours and private, or a root-owned system directory (sticky when others may write): accepted.
 * Writable by group or others, or another user's: refused with the path, owner and mode. */
static void test_dir_ownership_rule(void **state)
{
    (void)state;
    struct stat sb = { 0 };
    sb.st_mode = S_IFDIR | 0700;
    sb.st_uid = geteuid();
    assert_mstar_ok(mstar__dir_check_owner("shm_dir", "/x", &sb));
    sb.st_mode = S_IFDIR | 0770;
    assert_mstar_status(mstar__dir_check_owner("shm_dir", "/x", &sb), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "shm_dir: directory /x"));
    assert_non_null(strstr(mstar_last_error(), "mode 0770"));
    sb.st_mode = S_IFDIR | 0777;
    assert_mstar_status(mstar__dir_check_owner("shm_dir", "/x", &sb), MSTAR_EINVAL);
    sb.st_uid = 0;
    sb.st_mode = S_IFDIR | 01777; /* /dev/shm, /tmp */
    assert_mstar_ok(mstar__dir_check_owner("shm_dir", "/x", &sb));
    sb.st_mode = S_IFDIR | 0755;
    assert_mstar_ok(mstar__dir_check_owner("shm_dir", "/x", &sb));
    sb.st_mode = S_IFDIR | 0777; /* root's, but open to all without the sticky bit */
    assert_mstar_status(mstar__dir_check_owner("shm_dir", "/x", &sb), MSTAR_EINVAL);
    sb.st_mode = S_IFDIR | 0775;
    assert_mstar_status(mstar__dir_check_owner("shm_dir", "/x", &sb), MSTAR_EINVAL);
    sb.st_uid = geteuid() + 1;
    sb.st_mode = S_IFDIR | 0700;
    assert_mstar_status(mstar__dir_check_owner("shm_dir", "/x", &sb), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "owned by uid"));

    /* mkdir_private creates 0700 and refuses an existing directory open to others. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/p", mstar_test_tmpdir("fsown"));
    assert_mstar_ok(mstar__mkdir_private("ipc", path));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(chmod(path, 0777), 0);
    assert_mstar_status(mstar__mkdir_private("ipc", path), MSTAR_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_and_existing),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dir_ownership_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
