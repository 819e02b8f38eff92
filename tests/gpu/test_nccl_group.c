/*
 * test_nccl_group.c — the NCCL rank group on 2 GPUs, one process per GPU, bootstrapped over the
 * control mesh (design.md "Rank agreement"): min and max agree, a large vector agrees, and a rank
 * that dies is an error on the other (a timeout, or NCCL's own error if it notices first), after
 * which the aborted group answers MSTAR_ECLOSED.
 *
 * Skips (77) without 2 GPUs or without libnccl.so.2. CUDA is touched only in the forked ranks:
 * a process that forks after initialising CUDA cannot use it in the child.
 */
#include "mstar_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SKIP 77
#define BIG  4096

static mstar_mesh_options mesh_opts;

/* The bootstrap group and the NCCL group of `rank`, or SKIP / 1 in *rc. */
static bool open_groups(int rank, const char *name, mstar_rank_group **boot,
                        mstar_rank_group **nccl, int *rc)
{
    mstar_device d = { MSTAR_DEVICE_CUDA, rank };
    mstar_backend *b = NULL;
    mstar_status st = mstar_backend_create(d, &b);
    if (st != MSTAR_OK) {
        fprintf(stderr, "rank %d: no cuda:%d (%s): skipped\n", rank, rank, mstar_last_error());
        *rc = SKIP;
        return false;
    }
    mstar_backend_destroy(b);
    mstar_host_group_options opts = { &mesh_opts, 30000 };
    if (mstar_rank_group_create_host(name, rank, 2, &opts, boot) != MSTAR_OK) {
        fprintf(stderr, "rank %d: bootstrap group: %s\n", rank, mstar_last_error());
        *rc = 1;
        return false;
    }
    st = mstar_rank_group_create_nccl(*boot, rank, nccl);
    if (st != MSTAR_OK) {
        fprintf(stderr, "rank %d: NCCL group: %s%s\n", rank, mstar_last_error(),
                st == MSTAR_ENOTSUP ? ": skipped" : "");
        mstar_rank_group_destroy(*boot);
        *rc = st == MSTAR_ENOTSUP ? SKIP : 1;
        return false;
    }
    return true;
}

static int agree_on_two_gpus(int rank, void *arg)
{
    (void)arg;
    mstar_rank_group *boot, *g;
    int rc;
    if (!open_groups(rank, "nccl_agree", &boot, &g, &rc))
        return rc;
    MSTAR_RANK_CHECK(rank, mstar_rank_group_rank(g) == rank && mstar_rank_group_size(g) == 2,
                     "ids");
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, NULL, 0, MSTAR_REDUCE_MIN) == MSTAR_OK,
                     "barrier");
    int64_t v[3] = { rank, 10 - rank, rank ? INT64_MIN : INT64_MAX };
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, v, 3, MSTAR_REDUCE_MIN) == MSTAR_OK, "min");
    MSTAR_RANK_CHECK(rank, v[0] == 0 && v[1] == 9 && v[2] == INT64_MIN, "min: %lld %lld %lld",
                     (long long)v[0], (long long)v[1], (long long)v[2]);
    int64_t w[3] = { rank, 10 - rank, rank ? INT64_MIN : INT64_MAX };
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, w, 3, MSTAR_REDUCE_MAX) == MSTAR_OK, "max");
    MSTAR_RANK_CHECK(rank, w[0] == 1 && w[1] == 10 && w[2] == INT64_MAX, "max");
    /* A bucket rank 1 failed is dropped on both, over a vector that grows the buffers. */
    static int64_t flags[BIG];
    for (int i = 0; i < BIG; i++)
        flags[i] = !(rank == 1 && i == 1234);
    MSTAR_RANK_CHECK(rank, mstar_agree_across_ranks(g, flags, BIG, MSTAR_REDUCE_MIN) == MSTAR_OK,
                     "big");
    for (int i = 0; i < BIG; i++)
        MSTAR_RANK_CHECK(rank, flags[i] == (i != 1234), "flag %d", i);
    mstar_rank_group_destroy(g);
    mstar_rank_group_destroy(boot);
    return 0;
}

static int dead_rank_times_out(int rank, void *arg)
{
    (void)arg;
    setenv("MSTAR_RANK_AGREE_TIMEOUT_MS", "3000", 1);
    mstar_rank_group *boot, *g;
    int rc;
    if (!open_groups(rank, "nccl_dead", &boot, &g, &rc))
        return rc;
    if (rank == 1)
        _exit(0); /* dies holding its communicator */
    int64_t v = 5;
    mstar_status st = mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN);
    /* NCCL may notice the dead peer itself (an asynchronous error) before the timeout does;
     * either way an error, not a hang. */
    MSTAR_RANK_CHECK(rank, st == MSTAR_ETIMEDOUT || st == MSTAR_EDEVICE, "wanted a timeout, got %s",
                     mstar_status_name(st));
    MSTAR_RANK_CHECK(rank, v == 5, "written on failure");
    st = mstar_agree_across_ranks(g, &v, 1, MSTAR_REDUCE_MIN);
    MSTAR_RANK_CHECK(rank, st == MSTAR_ECLOSED, "after abort: %s", mstar_status_name(st));
    mstar_rank_group_destroy(g);
    mstar_rank_group_destroy(boot);
    return 0;
}

static void run_pair(mstar_test_rank_fn fn)
{
    int codes[2];
    mstar_test_run_ranks(2, fn, NULL, 300, codes);
    if (codes[0] == SKIP && codes[1] == SKIP)
        skip();
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
}

static void test_nccl_agree_on_two_gpus(void **state)
{
    (void)state;
    run_pair(agree_on_two_gpus);
}

static void test_nccl_dead_rank_times_out(void **state)
{
    (void)state;
    run_pair(dead_rank_times_out);
}

/* Whether cuda:1 exists, asked in a child so that this process never initialises CUDA. */
static int probe_second_gpu(int rank, void *arg)
{
    (void)rank;
    (void)arg;
    mstar_device d = { MSTAR_DEVICE_CUDA, 1 };
    mstar_backend *b = NULL;
    if (mstar_backend_create(d, &b) != MSTAR_OK)
        return SKIP;
    mstar_backend_destroy(b);
    return 0;
}

int main(void)
{
    int code;
    mstar_test_run_ranks(1, probe_second_gpu, NULL, 60, &code);
    if (code == SKIP)
        mstar_test_skip("this test needs two GPUs (cuda:0 and cuda:1)");
    memset(&mesh_opts, 0, sizeof(mesh_opts));
    mesh_opts.transport = MSTAR_MESH_IPC;
    mesh_opts.ipc_dir = mstar_test_tmpdir("nccl");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nccl_agree_on_two_gpus),
        cmocka_unit_test(test_nccl_dead_rank_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
