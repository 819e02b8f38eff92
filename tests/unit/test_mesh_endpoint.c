/*
 * test_mesh_endpoint.c — where inboxes live: ipc and tcp endpoint strings, the TCP port map for
 * every kind of entity, the entity index derived from it, and validation of the four knobs.
 */
#include "mstar_test.h"

#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void clear_knobs(void)
{
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_ZMQ_TCP_HOST");
    unsetenv("MSTAR_ZMQ_TCP_BASE_PORT");
    unsetenv("MSTAR_IPC_DIR");
}

static int setup(void **state)
{
    (void)state;
    clear_knobs();
    return 0;
}

/* The endpoint of `entity` under `opts`, asserting success. */
static const char *endpoint_of(const mstar_mesh_options *opts, const char *entity)
{
    static char buf[512];
    assert_mstar_ok(mstar_mesh_endpoint(opts, entity, buf, sizeof(buf)));
    return buf;
}

static void test_ipc_endpoint_defaults(void **state)
{
    (void)state;
    /* The default directory is per user: another user cannot create it first. */
    char want[128];
    snprintf(want, sizeof(want), "ipc:///tmp/mstar-%u/worker_0.ipc", (unsigned)geteuid());
    assert_string_equal(endpoint_of(NULL, "worker_0"), want);
    snprintf(want, sizeof(want), "ipc:///tmp/mstar-%u/api_server.ipc", (unsigned)geteuid());
    assert_string_equal(endpoint_of(NULL, "api_server"), want);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = "/run/m*/x/" };
    assert_string_equal(endpoint_of(&opts, "conductor"), "ipc:///run/m*/x/conductor.ipc");
    setenv("MSTAR_IPC_DIR", "/var/tmp/ms", 1);
    assert_string_equal(endpoint_of(NULL, "worker_3"), "ipc:///var/tmp/ms/worker_3.ipc");
    /* Options win over the environment. */
    assert_string_equal(endpoint_of(&opts, "worker_3"), "ipc:///run/m*/x/worker_3.ipc");
}

static void test_tcp_port_map_every_kind(void **state)
{
    (void)state;
    mstar_mesh_options opts = { .transport = MSTAR_MESH_TCP };
    assert_string_equal(endpoint_of(&opts, "api_server"), "tcp://127.0.0.1:19000");
    assert_string_equal(endpoint_of(&opts, "conductor"), "tcp://127.0.0.1:19001");
    assert_string_equal(endpoint_of(&opts, "api_server_preprocess_worker"),
                        "tcp://127.0.0.1:19002");
    assert_string_equal(endpoint_of(&opts, "worker_0"), "tcp://127.0.0.1:19100");
    assert_string_equal(endpoint_of(&opts, "worker_7"), "tcp://127.0.0.1:19107");
    assert_string_equal(endpoint_of(&opts, "worker_899"), "tcp://127.0.0.1:19999");
    /* Other names: 1000 + byte sum mod 1000. "ab" = 97 + 98 = 195. */
    assert_string_equal(endpoint_of(&opts, "ab"), "tcp://127.0.0.1:20195");
    /* "tokenizer": 116+111+107+101+110+105+122+101+114 = 987. */
    assert_string_equal(endpoint_of(&opts, "tokenizer"), "tcp://127.0.0.1:20987");
    /* Names that look like workers but are not one: "worker_x", a leading zero. */
    unsigned sum = 0;
    for (const char *p = "worker_01"; *p; p++)
        sum += (unsigned char)*p;
    char want[64];
    snprintf(want, sizeof(want), "tcp://127.0.0.1:%u", 19000 + 1000 + sum % 1000);
    assert_string_equal(endpoint_of(&opts, "worker_01"), want);

    opts.tcp_host = "node-1.example";
    opts.tcp_base_port = 30000;
    assert_string_equal(endpoint_of(&opts, "worker_2"), "tcp://node-1.example:30102");
    opts.tcp_host = "[::1]";
    assert_string_equal(endpoint_of(&opts, "conductor"), "tcp://[::1]:30001");
}

static void test_tcp_knobs_from_environment(void **state)
{
    (void)state;
    setenv("MSTAR_ZMQ_TRANSPORT", "TCP", 1);
    setenv("MSTAR_ZMQ_TCP_HOST", "10.0.0.5", 1);
    setenv("MSTAR_ZMQ_TCP_BASE_PORT", "25000", 1);
    assert_string_equal(endpoint_of(NULL, "worker_1"), "tcp://10.0.0.5:25101");
    /* An explicit transport in the options beats MSTAR_ZMQ_TRANSPORT. */
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = "/tmp/x" };
    assert_string_equal(endpoint_of(&opts, "worker_1"), "ipc:///tmp/x/worker_1.ipc");
}

static void test_port_above_65535_is_an_error(void **state)
{
    (void)state;
    char buf[128];
    mstar_mesh_options opts = { .transport = MSTAR_MESH_TCP, .tcp_base_port = 65000 };
    assert_mstar_status(mstar_mesh_endpoint(&opts, "worker_500", buf, sizeof(buf)), MSTAR_ERANGE);
    assert_non_null(strstr(mstar_last_error(), "worker_500"));
    assert_non_null(strstr(mstar_last_error(), "65600"));
    assert_string_equal(endpoint_of(&opts, "worker_435"), "tcp://127.0.0.1:65535");
}

static void test_bad_knobs_are_clear_errors(void **state)
{
    (void)state;
    char buf[256];
    setenv("MSTAR_ZMQ_TRANSPORT", "udp", 1);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_ZMQ_TRANSPORT=udp"));
    assert_non_null(strstr(mstar_last_error(), "ipc, tcp"));

    setenv("MSTAR_ZMQ_TRANSPORT", "tcp", 1);
    setenv("MSTAR_ZMQ_TCP_BASE_PORT", "70000", 1);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_ZMQ_TCP_BASE_PORT=70000"));
    setenv("MSTAR_ZMQ_TCP_BASE_PORT", "19k", 1);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_ZMQ_TCP_BASE_PORT=19k"));
    unsetenv("MSTAR_ZMQ_TCP_BASE_PORT");

    static const char *const bad_hosts[] = { "tcp://x", "a b", "host:1", "[::1", "[zz]", "[]" };
    for (size_t i = 0; i < sizeof(bad_hosts) / sizeof(bad_hosts[0]); i++) {
        setenv("MSTAR_ZMQ_TCP_HOST", bad_hosts[i], 1);
        assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
        assert_non_null(strstr(mstar_last_error(), "MSTAR_ZMQ_TCP_HOST"));
    }
    unsetenv("MSTAR_ZMQ_TCP_HOST");

    /* Only the chosen transport's knobs are read: a bad ipc dir does not matter over tcp. */
    setenv("MSTAR_IPC_DIR", "relative/dir", 1);
    assert_string_equal(endpoint_of(NULL, "worker_0"), "tcp://127.0.0.1:19100");
    setenv("MSTAR_ZMQ_TRANSPORT", "ipc", 1);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_IPC_DIR='relative/dir'"));
    assert_non_null(strstr(mstar_last_error(), "absolute"));

    char longdir[200];
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    setenv("MSTAR_IPC_DIR", longdir, 1);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "too long"));
    unsetenv("MSTAR_IPC_DIR");
}

static void test_bad_options_are_clear_errors(void **state)
{
    (void)state;
    char buf[256];
    mstar_mesh_options opts = { .transport = (mstar_mesh_transport)9 };
    assert_mstar_status(mstar_mesh_endpoint(&opts, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "transport 9"));

    opts = (mstar_mesh_options){ .transport = MSTAR_MESH_TCP, .tcp_base_port = -4 };
    assert_mstar_status(mstar_mesh_endpoint(&opts, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "tcp_base_port -4"));

    opts = (mstar_mesh_options){ .transport = MSTAR_MESH_TCP, .tcp_host = "" };
    assert_mstar_status(mstar_mesh_endpoint(&opts, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "tcp_host"));

    opts = (mstar_mesh_options){ .transport = MSTAR_MESH_IPC, .ipc_dir = "tmp" };
    assert_mstar_status(mstar_mesh_endpoint(&opts, "worker_0", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "ipc_dir='tmp'"));
}

static void test_bad_entity_and_buffer(void **state)
{
    (void)state;
    char buf[256];
    assert_mstar_status(mstar_mesh_endpoint(NULL, "../etc", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "entity name"));
    assert_mstar_status(mstar_mesh_endpoint(NULL, "a/b", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_endpoint(NULL, "", buf, sizeof(buf)), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_endpoint(NULL, NULL, buf, sizeof(buf)), MSTAR_EINVAL);
    /* An entity name too long for a socket path in this directory. */
    char name[120];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_mstar_status(mstar_mesh_endpoint(NULL, name, buf, sizeof(buf)), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "socket path"));
    /* A buffer too small is an error, not a truncated endpoint. */
    char small[10];
    assert_mstar_status(mstar_mesh_endpoint(NULL, "worker_0", small, sizeof(small)), MSTAR_ERANGE);
    assert_non_null(strstr(mstar_last_error(), "ipc:///tmp/mstar-"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ipc_endpoint_defaults, setup),
        cmocka_unit_test_setup(test_tcp_port_map_every_kind, setup),
        cmocka_unit_test_setup(test_tcp_knobs_from_environment, setup),
        cmocka_unit_test_setup(test_port_above_65535_is_an_error, setup),
        cmocka_unit_test_setup(test_bad_knobs_are_clear_errors, setup),
        cmocka_unit_test_setup(test_bad_options_are_clear_errors, setup),
        cmocka_unit_test_setup(test_bad_entity_and_buffer, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
