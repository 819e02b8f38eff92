/*
 * test_layout.c — canonical layout (shard dim to 0) and back, strided copies, 0-dim and empty
 * tensors, and row sizes.
 */
#include "mstar_test.h"

#include "tensors/layout.h"

#include <stdlib.h>
#include <string.h>

static void fill(int32_t *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)(i * 3 + 1);
}

/* Element at index `ix` of a view. */
static int32_t at(const mstar_tensor *t, const int64_t *ix)
{
    int64_t off = 0;
    for (int32_t i = 0; i < t->ndim; i++)
        off += ix[i] * t->strides[i];
    return ((const int32_t *)mstar_tensor_ptr(t))[off];
}

static void test_canonical_roundtrip_every_dim(void **state)
{
    (void)state;
    int64_t shape[4] = { 2, 3, 4, 5 };
    int32_t src[120], canon[120], back[120];
    fill(src, 120);
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, src, mstar_device_cpu(), MSTAR_DTYPE_INT32, 4, shape));
    for (int32_t d = 0; d < 4; d++) {
        mstar_tensor cv;
        mstar__layout_to_canonical(&t, d, &cv);
        assert_int_equal(cv.shape[0], shape[d]);
        mstar__layout_copy_contiguous(&cv, canon);
        /* canonical[k, rest...] == src[... k at d ...] */
        mstar_tensor c;
        assert_mstar_ok(
            mstar_tensor_init(&c, canon, mstar_device_cpu(), MSTAR_DTYPE_INT32, 4, cv.shape));
        int64_t ix[4];
        for (ix[0] = 0; ix[0] < 2; ix[0]++)
            for (ix[1] = 0; ix[1] < 3; ix[1]++)
                for (ix[2] = 0; ix[2] < 4; ix[2]++)
                    for (ix[3] = 0; ix[3] < 5; ix[3]++) {
                        int64_t cix[4];
                        cix[0] = ix[d];
                        for (int32_t i = 0, j = 1; i < 4; i++)
                            if (i != d)
                                cix[j++] = ix[i];
                        assert_int_equal(at(&c, cix), at(&t, ix));
                    }
        /* From canonical: a strided view in the real layout, equal element by element. */
        mstar_tensor rv;
        mstar__layout_from_canonical(&c, d, &rv);
        for (int32_t i = 0; i < 4; i++)
            assert_int_equal(rv.shape[i], shape[i]);
        assert_true(d == 0 || !mstar_tensor_is_contiguous(&rv));
        mstar__layout_copy_contiguous(&rv, back);
        assert_memory_equal(back, src, sizeof(src));
    }
}

static void test_copy_into_strided_subview(void **state)
{
    (void)state;
    /* Concatenate two [2,3] blocks along dim 1 into a [2,6] output. */
    int32_t a[6], b[6], out[12];
    fill(a, 6);
    for (int i = 0; i < 6; i++)
        b[i] = -a[i];
    int64_t s23[2] = { 2, 3 }, s26[2] = { 2, 6 };
    mstar_tensor ta, tb, to;
    assert_mstar_ok(mstar_tensor_init(&ta, a, mstar_device_cpu(), MSTAR_DTYPE_INT32, 2, s23));
    assert_mstar_ok(mstar_tensor_init(&tb, b, mstar_device_cpu(), MSTAR_DTYPE_INT32, 2, s23));
    assert_mstar_ok(mstar_tensor_init(&to, out, mstar_device_cpu(), MSTAR_DTYPE_INT32, 2, s26));
    mstar_tensor sub = to;
    sub.shape[1] = 3;
    mstar__layout_copy(&ta, &sub);
    sub.byte_offset = 3 * sizeof(int32_t);
    mstar__layout_copy(&tb, &sub);
    int32_t want[12] = { a[0], a[1], a[2], b[0], b[1], b[2], a[3], a[4], a[5], b[3], b[4], b[5] };
    assert_memory_equal(out, want, sizeof(want));
    /* A non-unit inner stride on the source side (a transposed view). */
    mstar_tensor tt = ta;
    tt.shape[0] = 3;
    tt.shape[1] = 2;
    tt.strides[0] = 1;
    tt.strides[1] = 3;
    int32_t tr[6];
    mstar__layout_copy_contiguous(&tt, tr);
    int32_t want_t[6] = { a[0], a[3], a[1], a[4], a[2], a[5] };
    assert_memory_equal(tr, want_t, sizeof(want_t));
}

/* T-18: a 0-dim tensor is one element; an empty one copies nothing. */
static void test_zero_dim_and_empty(void **state)
{
    (void)state;
    double x = 2.5, y = 0;
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, &x, mstar_device_cpu(), MSTAR_DTYPE_FLOAT64, 0, NULL));
    mstar_tensor c;
    mstar__layout_to_canonical(&t, 0, &c);
    mstar__layout_copy_contiguous(&c, &y);
    assert_true(y == 2.5);
    assert_int_equal(mstar__layout_row_bytes(MSTAR_DTYPE_FLOAT64, 0, NULL), 0);
    int64_t shape[3] = { 4, 0, 2 };
    assert_mstar_ok(mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 3, shape));
    mstar__layout_to_canonical(&t, 2, &c);
    assert_int_equal(c.shape[0], 2);
    mstar__layout_copy_contiguous(&c, NULL); /* nothing to copy, nothing dereferenced */
    assert_int_equal(mstar__layout_row_bytes(MSTAR_DTYPE_FLOAT32, 3, shape), 0);
    int64_t s2[3] = { 5, 3, 2 };
    assert_int_equal(mstar__layout_row_bytes(MSTAR_DTYPE_BFLOAT16, 3, s2), 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canonical_roundtrip_every_dim),
        cmocka_unit_test(test_copy_into_strided_subview),
        cmocka_unit_test(test_zero_dim_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
