/*
 * test_ucx_netns.c — reads across a real interface: two network namespaces joined by a veth
 * pair, both made by this test (10.231.0.1/30 and .2/30 exist only inside them), a producer
 * process in one and this process's engine in the other. The veth's byte counters show that the
 * bytes crossed it. Everything is deleted afterwards, on failure too; namespaces left by an
 * earlier run that was killed are swept first. Skipped (77) when not root or without `ip netns`.
 */
#include "ucx_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define PREFIX "mstar-ucx-"
#define ADDR_A "10.231.0.1"
#define ADDR_B "10.231.0.2"

static char ns_a[64], ns_b[64], veth_a[16], veth_b[16];
static int home_ns = -1; /* this process's own namespace, to come back to */
static bool made;

static int sh(const char *fmt, ...) MSTAR_PRINTF(1, 2);
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static void go_home(void)
{
    if (home_ns >= 0) {
        setns(home_ns, CLONE_NEWNET);
        close(home_ns);
        home_ns = -1;
    }
}

/* Deleting a namespace deletes the veth end inside it, and with it the pair. */
static void cleanup(void)
{
    go_home();
    if (!made)
        return;
    sh("ip netns del %s >/dev/null 2>&1", ns_a);
    sh("ip netns del %s >/dev/null 2>&1", ns_b);
    made = false;
}

/* Namespaces of earlier runs whose process is gone (a run killed by a timeout). */
static void sweep_stale(void)
{
    DIR *d = opendir("/var/run/netns");
    if (d == NULL)
        return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, PREFIX, strlen(PREFIX)) != 0)
            continue;
        long pid = strtol(ent->d_name + strlen(PREFIX), NULL, 10);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            sh("ip netns del %s >/dev/null 2>&1", ent->d_name);
    }
    closedir(d);
}

static int setup(void **state)
{
    (void)state;
    if (geteuid() != 0)
        mstar_test_skip("needs root to create network namespaces");
    if (sh("ip netns list >/dev/null 2>&1") != 0)
        mstar_test_skip("`ip netns` is not available (iproute2)");
    sweep_stale();
    long pid = (long)getpid();
    snprintf(ns_a, sizeof(ns_a), PREFIX "%ld-a", pid);
    snprintf(ns_b, sizeof(ns_b), PREFIX "%ld-b", pid);
    snprintf(veth_a, sizeof(veth_a), "mua%ld", pid % 10000000);
    snprintf(veth_b, sizeof(veth_b), "mub%ld", pid % 10000000);
    atexit(cleanup);
    if (sh("ip netns add %s", ns_a) != 0)
        mstar_test_skip("cannot create a network namespace here (no CAP_SYS_ADMIN?)");
    made = true;
    /* `ip netns exec` remounts / and /sys for the namespace; where that is impossible (a chroot
     * that is not a mount point, a container without CAP_SYS_ADMIN over mounts) the test cannot
     * run here at all, which is a skip, not a failure of the code under test. */
    if (sh("ip netns exec %s true >/dev/null 2>&1", ns_a) != 0) {
        cleanup();
        mstar_test_skip("cannot enter a network namespace here (`ip netns exec` failed)");
    }
    char cmds[10][256];
    snprintf(cmds[0], 256, "ip netns add %s", ns_b);
    snprintf(cmds[1], 256, "ip link add %s type veth peer name %s", veth_a, veth_b);
    snprintf(cmds[2], 256, "ip link set %s netns %s", veth_a, ns_a);
    snprintf(cmds[3], 256, "ip link set %s netns %s", veth_b, ns_b);
    snprintf(cmds[4], 256, "ip -n %s addr add " ADDR_A "/30 dev %s", ns_a, veth_a);
    snprintf(cmds[5], 256, "ip -n %s addr add " ADDR_B "/30 dev %s", ns_b, veth_b);
    snprintf(cmds[6], 256, "ip -n %s link set %s up", ns_a, veth_a);
    snprintf(cmds[7], 256, "ip -n %s link set %s up", ns_b, veth_b);
    snprintf(cmds[8], 256, "ip -n %s link set lo up", ns_a);
    snprintf(cmds[9], 256, "ip -n %s link set lo up", ns_b);
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++)
        rc = sh("%s", cmds[i]);
    if (rc != 0) {
        cleanup();
        fail_msg("setting up the namespaces and the veth pair failed");
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cleanup();
    return 0;
}

/* Move this process into `ns` the way `ip netns exec` does: the network namespace, and a
 * private mount namespace with sysfs mounted afresh, because UCX finds its TCP devices under
 * /sys/class/net, which otherwise still lists the namespace sysfs was mounted in. */
static void enter(const char *ns)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", ns);
    home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(home_ns >= 0 && fd >= 0);
    assert_int_equal(setns(fd, CLONE_NEWNET), 0);
    close(fd);
    assert_int_equal(unshare(CLONE_NEWNS), 0);
    assert_int_equal(mount("", "/", NULL, MS_SLAVE | MS_REC, NULL), 0);
    assert_int_equal(umount2("/sys", MNT_DETACH), 0);
    assert_int_equal(mount(ns, "/sys", "sysfs", 0, NULL), 0);
}

static uint64_t rx_bytes(const char *ns, const char *dev)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ip netns exec %s cat /sys/class/net/%s/statistics/rx_bytes", ns,
             dev);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    unsigned long long v = 0;
    assert_int_equal(fscanf(f, "%llu", &v), 1);
    pclose(f);
    return v;
}

static void test_read_across_veth(void **state)
{
    (void)state;
    const uint64_t size = 16 << 20;
    ucx_test_producer p;
    ucx_test_producer_start(&p, size, 501, ADDR_A, ns_a);
    assert_non_null(strstr(p.session, ADDR_A ":"));
    enter(ns_b); /* the engine's threads start in namespace B */
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    snprintf(cfg.address, sizeof(cfg.address), ADDR_B);
    uint8_t *dst = malloc(size);
    for (int proto = 0; proto < 2; proto++) {
        cfg.read_protocol = (mstar__ucx_read_protocol)proto;
        mstar__ucx_engine *c;
        assert_mstar_ok(mstar__ucx_engine_create(&cfg, &c));
        mstar__ucx_reader *r;
        assert_mstar_ok(mstar__ucx_engine_reader(c, &r));
        uint64_t before = rx_bytes(ns_b, veth_b);
        memset(dst, 0, size);
        mstar__ucx_read_info ri[4];
        for (int i = 0; i < 4; i++) { /* four quarters in one submission */
            mstar__ucx_read_info one = {
                p.session, dst + i * (size / 4), p.addr + i * (size / 4), size / 4, p.key, p.key_len
            };
            ri[i] = one;
        }
        mstar_completion *h;
        assert_mstar_ok(mstar__ucx_reader_submit(r, ri, 4, NULL, &h));
        assert_mstar_ok(mstar_completion_wait(h, -1));
        mstar_completion_release(h);
        assert_int_equal(ucx_test_check(dst, size, 501), SIZE_MAX);
        uint64_t after = rx_bytes(ns_b, veth_b);
        if (after - before < size)
            fail_msg("%s: the veth received %llu bytes for a %llu-byte read",
                     mstar__ucx_read_protocol_name(cfg.read_protocol),
                     (unsigned long long)(after - before), (unsigned long long)size);
        mstar__ucx_engine_destroy(c);
    }
    free(dst);
    go_home();
    ucx_test_producer_stop(&p);
}

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_across_veth, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
