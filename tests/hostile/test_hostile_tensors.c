/*
 * test_hostile_tensors.c — what a careless or hostile caller of the communication manager's C API
 * can hand it (docs/security.md "Reads into the caller's buffer" and "Sizes and ranges"): a loan
 * with no shape, read-into targets whose bytes overlap, and strided outputs with negative strides
 * on the device path (the host backend stands in for a device). Each is refused with MSTAR_EINVAL
 * and a clear message, or served with exact bytes; a refusal loses nothing (the same call,
 * corrected, works).
 */
#include "comm_harness.h"

static int setup(void **state)
{
    comm_pair *w = calloc(1, sizeof(*w));
    comm_pair_init(w, "hostile_tensors");
    comm_pair_make(w, MSTAR_TRANSPORT_ARENA);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    comm_pair_fini(*state);
    free(*state);
    return 0;
}

static void expect_message(const char *needle)
{
    if (strstr(mstar_last_error(), needle) == NULL)
        fail_msg("error '%s' does not say '%s'", mstar_last_error(), needle);
}

/* A loan, and a tensor, with ndim > 0 and no shape: MSTAR_EINVAL, nothing lent. */
static void test_loan_without_shape(void **state)
{
    comm_pair *w = *state;
    mstar_tensor t;
    mstar_loan_id loan = 0;
    assert_mstar_status(mstar_comm_loan_output(w->p, MSTAR_DTYPE_FLOAT32, NULL, 2, &t, &loan),
                        MSTAR_EINVAL);
    expect_message("shape is NULL");
    assert_int_equal(loan, 0);
    assert_mstar_status(mstar_comm_output_loan(w->p, MSTAR_DTYPE_FLOAT32, NULL, 1, &t, &loan),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 3, NULL),
                        MSTAR_EINVAL);
    int64_t numel;
    assert_mstar_status(mstar_shape_numel(1, NULL, 1, &numel), MSTAR_EINVAL);
    assert_mstar_status(
        mstar_tensor_init(NULL, NULL, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 0, NULL),
        MSTAR_EINVAL);
    assert_mstar_status(mstar_tensor_validate(NULL, "t"), MSTAR_EINVAL);
    /* A 0-dim loan needs no shape; the manager still lends afterwards. */
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_FLOAT32, NULL, 0, &t, &loan));
    assert_mstar_ok(mstar_comm_loan_release(w->p, loan));
    mstar_tensor_info info;
    assert_mstar_status(mstar_comm_tensor_info(w->p, 1, NULL), MSTAR_EINVAL);
    assert_mstar_status(mstar_comm_tensor_info(w->p, 1, &info), MSTAR_ENOENT);
}

/* Two targets whose written bytes overlap are refused, whichever comes first; the corrected
 * call (touching, not overlapping) lands both tensors exactly. */
static void test_overlapping_targets(void **state)
{
    comm_pair *w = *state;
    mstar_rid rid = mstar_rid_from_int(9);
    mstar_tensor ts[2];
    mstar_tensor_info infos[2];
    mstar_edge e = produce_two_vectors(w->p, &rid, MSTAR_DTYPE_FLOAT32, 1000, MSTAR_DTYPE_UINT8,
                                       1200, 21, ts, infos);
    uint8_t *buf = malloc(4000 + 1200);
    mstar_read_target tg[2] = { { .uuid = infos[0].uuid, .data = buf, .capacity = 4000 + 1200 },
                                { .uuid = infos[1].uuid, .data = buf + 2000, .capacity = 1200 } };
    assert_mstar_status(mstar_comm_start_read_into(w->c, &rid, &e, 1, tg, 2, NULL), MSTAR_EINVAL);
    expect_message("overlap");
    /* The same the other way round, and a target inside the other. */
    mstar_read_target swapped[2] = { tg[1], tg[0] };
    swapped[0].data = buf + 3999;
    assert_mstar_status(mstar_comm_start_read_into(w->c, &rid, &e, 1, swapped, 2, NULL),
                        MSTAR_EINVAL);
    expect_message("overlap");
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    /* Touching is fine, even where the first target's capacity runs on: only the bytes written
     * count. */
    tg[1].data = buf + 4000;
    assert_mstar_ok(mstar_comm_start_read_into(w->c, &rid, &e, 1, tg, 2, NULL));
    collect_ready(w->c, 1);
    assert_memory_equal(buf, ts[0].data, 4000);
    assert_memory_equal(buf + 4000, ts[1].data, 1200);
    check_bytes(w->c, infos[0].uuid, &ts[0]);
    check_bytes(w->c, infos[1].uuid, &ts[1]);
    for (int i = 0; i < 2; i++)
        assert_mstar_ok(mstar_comm_dereference(w->c, infos[i].uuid, 1));
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    mstar_edge_clear(&e);
    free(buf);
    free(ts[0].data);
    free(ts[1].data);
}

/* A 4x4 int32 view of `base` with strides `s` whose element (i, j) is base[want(i, j)]. */
static mstar_tensor strided_view(int32_t *base, int64_t s0, int64_t s1)
{
    int64_t shape[2] = { 4, 4 };
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, base, mstar_device_cpu(), MSTAR_DTYPE_INT32, 2, shape));
    t.strides[0] = s0;
    t.strides[1] = s1;
    /* The origin is the element the negative strides count back from. */
    t.byte_offset = (uint64_t)((s0 < 0 ? 3 * -s0 : 0) + (s1 < 0 ? 3 * -s1 : 0)) * sizeof(int32_t);
    return t;
}

/* Store a negatively strided 4x4 view through a manager whose backend (the host one) makes the
 * output a device tensor: its stored bytes are the view's elements in C order, exactly. The
 * source is a heap block of exactly 16 values, so a read outside it is an ASan error. */
static void store_strided(mstar_comm *p, int64_t s0, int64_t s1, const mstar_rid *rid)
{
    int32_t *base = malloc(16 * sizeof(int32_t));
    for (int k = 0; k < 16; k++)
        base[k] = 100 + k;
    mstar_tensor v = strided_view(base, s0, s1);
    mstar_output o = output_of("x", v);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, &o, 1, NULL, &info));
    int32_t got[16];
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(p, info.uuid, got, sizeof(got), &cp));
    const int32_t *origin = (const int32_t *)mstar_tensor_ptr(&v);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            assert_int_equal(got[i * 4 + j], origin[i * s0 + j * s1]);
    free(base);
}

static void test_negative_strides_device_path(void **state)
{
    comm_pair *w = *state;
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_comm *p = make_comm_with("worker_2", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp, be);
    mstar_rid rid = mstar_rid_from_int(13);
    store_strided(p, 4, -1, &rid);
    store_strided(p, -4, 1, &rid);
    store_strided(p, -4, -1, &rid);
    store_strided(p, -1, -4, &rid);
    store_strided(p, 1, 4, &rid); /* a transpose, for comparison */
    /* The host path (no backend) copies the same views exactly. */
    store_strided(w->p, 4, -1, &rid);
    store_strided(w->p, -4, 1, &rid);
    /* A view whose extent cannot be addressed is refused, not copied. */
    int32_t one = 7;
    mstar_tensor v = strided_view(&one, INT64_MAX / 2, 1);
    mstar_output o = output_of("x", v);
    mstar_tensor_info info;
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(p, &rid, &o, 1, NULL, &info),
                        MSTAR_EINVAL);
    expect_message("stride");
    assert_mstar_ok(mstar_comm_force_cleanup_request(p, &rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_int_equal(mstar_comm_num_tensors(p) + mstar_comm_num_tensors(w->p), 0);
    mstar_comm_destroy(p);
    mstar_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_loan_without_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlapping_targets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_negative_strides_device_path, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
