/*
 * test_core.c — status codes and errors, environment knobs, dtypes, tensor views, ids, names.
 */
#include "mstar_test.h"

#include "core/str.h"
#include "core/vec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_status_names(void **state)
{
    (void)state;
    assert_string_equal(mstar_status_name(MSTAR_OK), "MSTAR_OK");
    assert_string_equal(mstar_status_name(MSTAR_EPROTO), "MSTAR_EPROTO");
    assert_string_equal(mstar_status_name((mstar_status)-999), "MSTAR_E?");
    assert_string_equal(mstar_strerror((mstar_status)-999), "unknown status");
    for (int s = 0; s >= MSTAR_EREMOTE; s--)
        assert_string_not_equal(mstar_status_name((mstar_status)s), "MSTAR_E?");
}

static void test_error_set_wrap_clear(void **state)
{
    (void)state;
    assert_int_equal(mstar_error_set(MSTAR_ERANGE, "value %d too big", 7), MSTAR_ERANGE);
    assert_string_equal(mstar_last_error(), "value 7 too big");
    assert_int_equal(mstar_last_status(), MSTAR_ERANGE);
    assert_int_equal(mstar_error_wrap("field %s", "dims"), MSTAR_ERANGE);
    assert_string_equal(mstar_last_error(), "field dims: value 7 too big");
    mstar_error_clear();
    assert_string_equal(mstar_last_error(), "");
    assert_int_equal(mstar_last_status(), MSTAR_OK);
}

static void test_env_int(void **state)
{
    (void)state;
    int64_t v;
    unsetenv("MSTAR_TEST_INT");
    assert_mstar_ok(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v));
    assert_int_equal(v, 42);
    setenv("MSTAR_TEST_INT", "17", 1);
    assert_mstar_ok(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v));
    assert_int_equal(v, 17);
    setenv("MSTAR_TEST_INT", "17x", 1);
    assert_mstar_status(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_TEST_INT=17x"));
    setenv("MSTAR_TEST_INT", "101", 1);
    assert_mstar_status(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "out of range"));
    setenv("MSTAR_TEST_INT", "99999999999999999999999", 1);
    assert_mstar_status(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v), MSTAR_EINVAL);
    setenv("MSTAR_TEST_INT", "", 1);
    assert_mstar_ok(mstar_env_get_int("MSTAR_TEST_INT", 42, 0, 100, &v));
    assert_int_equal(v, 42);
    unsetenv("MSTAR_TEST_INT");
}

static void test_env_double_bool_choice(void **state)
{
    (void)state;
    double d;
    bool b;
    size_t idx;
    static const char *const modes[] = { "0", "1", "AUTO" };
    setenv("MSTAR_TEST_D", "2.5", 1);
    assert_mstar_ok(mstar_env_get_double("MSTAR_TEST_D", 1.0, 0.0, 10.0, &d));
    assert_true(d == 2.5);
    setenv("MSTAR_TEST_D", "nan", 1);
    assert_mstar_status(mstar_env_get_double("MSTAR_TEST_D", 1.0, 0.0, 10.0, &d), MSTAR_EINVAL);
    setenv("MSTAR_TEST_B", "Yes", 1);
    assert_mstar_ok(mstar_env_get_bool("MSTAR_TEST_B", false, &b));
    assert_true(b);
    setenv("MSTAR_TEST_B", "off", 1);
    assert_mstar_ok(mstar_env_get_bool("MSTAR_TEST_B", true, &b));
    assert_false(b);
    setenv("MSTAR_TEST_B", "maybe", 1);
    assert_mstar_status(mstar_env_get_bool("MSTAR_TEST_B", true, &b), MSTAR_EINVAL);
    setenv("MSTAR_TEST_C", "auto", 1);
    assert_mstar_ok(mstar_env_get_choice("MSTAR_TEST_C", modes, 3, 0, &idx));
    assert_int_equal(idx, 2);
    setenv("MSTAR_TEST_C", "2", 1);
    assert_mstar_status(mstar_env_get_choice("MSTAR_TEST_C", modes, 3, 0, &idx), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "0, 1, AUTO"));
    unsetenv("MSTAR_TEST_C");
    assert_mstar_ok(mstar_env_get_choice("MSTAR_TEST_C", modes, 3, 1, &idx));
    assert_int_equal(idx, 1);
    assert_string_equal(mstar_env_get_string("MSTAR_TEST_UNSET_X", "dflt"), "dflt");
}

static void test_dtype_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t size;
    } want[] = { { "bool", 1 },    { "uint8", 1 },  { "int8", 1 },    { "int16", 2 },
                 { "int32", 4 },   { "int64", 8 },  { "float16", 2 }, { "bfloat16", 2 },
                 { "float32", 4 }, { "float64", 8 } };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        mstar_dtype d;
        assert_mstar_ok(mstar_dtype_from_name(want[i].name, strlen(want[i].name), &d));
        assert_int_equal(d, (int)(i + 1));
        assert_int_equal(mstar_dtype_size(d), want[i].size);
        assert_string_equal(mstar_dtype_name(d), want[i].name);
        assert_true(mstar_dtype_is_computable(d));
    }
    mstar_dtype d;
    assert_mstar_ok(mstar_dtype_from_name("torch.bfloat16", 14, &d));
    assert_int_equal(d, MSTAR_DTYPE_BFLOAT16);
    assert_mstar_ok(mstar_dtype_from_name("complex128", 10, &d));
    assert_int_equal(mstar_dtype_size(d), 16);
    assert_false(mstar_dtype_is_computable(d));
    assert_mstar_status(mstar_dtype_from_name("float", 5, &d), MSTAR_EINVAL);
    assert_mstar_status(mstar_dtype_from_name("float32x", 8, &d), MSTAR_EINVAL);
    assert_int_equal(mstar_dtype_size(MSTAR_DTYPE_INVALID), 0);
    assert_null(mstar_dtype_name((mstar_dtype)99));
}

static void test_tensor_views(void **state)
{
    (void)state;
    float buf[24];
    int64_t shape[3] = { 2, 3, 4 };
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 3, shape));
    assert_int_equal(mstar_tensor_numel(&t), 24);
    assert_int_equal(mstar_tensor_nbytes(&t), 96);
    assert_int_equal(t.strides[0], 12);
    assert_int_equal(t.strides[1], 4);
    assert_int_equal(t.strides[2], 1);
    assert_true(mstar_tensor_is_contiguous(&t));
    /* transpose the last two dims: not contiguous */
    int64_t s = t.strides[1];
    t.strides[1] = t.strides[2];
    t.strides[2] = s;
    t.shape[1] = 4;
    t.shape[2] = 3;
    assert_false(mstar_tensor_is_contiguous(&t));
    /* a scalar */
    assert_mstar_ok(mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_INT64, 0, NULL));
    assert_int_equal(mstar_tensor_numel(&t), 1);
    assert_int_equal(mstar_tensor_nbytes(&t), 8);
    /* zero-size */
    int64_t zshape[2] = { 0, 5 };
    assert_mstar_ok(
        mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, zshape));
    assert_int_equal(mstar_tensor_nbytes(&t), 0);
    assert_mstar_ok(mstar_tensor_validate(&t, "empty"));
    /* bad input */
    int64_t bad[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    assert_mstar_status(mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 9, bad),
                        MSTAR_EINVAL);
    int64_t neg[1] = { -1 };
    assert_mstar_status(mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, neg),
                        MSTAR_EINVAL);
    int64_t huge[2] = { INT64_C(1) << 40, INT64_C(1) << 30 };
    assert_mstar_status(
        mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, huge), MSTAR_ERANGE);
    /* a zero dim must not hide strides that overflow */
    int64_t hidden[3] = { INT64_C(1) << 40, 0, INT64_C(1) << 40 };
    assert_mstar_status(
        mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 3, hidden),
        MSTAR_ERANGE);
    int64_t big[1] = { INT64_C(1) << 62 };
    assert_mstar_status(mstar_tensor_init(&t, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, big),
                        MSTAR_ERANGE);
    assert_mstar_status(mstar_tensor_init(&t, buf, mstar_device_cpu(), (mstar_dtype)0, 1, shape),
                        MSTAR_EINVAL);
    int64_t one[1] = { 4 };
    assert_mstar_ok(mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, one));
    assert_mstar_status(mstar_tensor_validate(&t, "nodata"), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "nodata"));
}

static void test_ids(void **state)
{
    (void)state;
    mstar_id_gen gen;
    mstar_id_gen_init(&gen, 101);
    mstar_tensor_id a, b;
    assert_mstar_ok(mstar_id_gen_next(&gen, &a));
    assert_mstar_ok(mstar_id_gen_next(&gen, &b));
    assert_int_equal(mstar_id_entity(a), 101);
    assert_int_equal(mstar_id_counter(a), 1);
    assert_int_equal(mstar_id_counter(b), 2);
    char buf[MSTAR_ID_STRLEN];
    mstar_id_format(a, buf);
    assert_string_equal(buf, "0x0065000000000001");
    gen.next_counter = MSTAR_ID_COUNTER_MAX;
    assert_mstar_ok(mstar_id_gen_next(&gen, &a));
    assert_int_equal(mstar_id_counter(a), MSTAR_ID_COUNTER_MAX);
    assert_mstar_status(mstar_id_gen_next(&gen, &a), MSTAR_ERANGE);

    uint16_t idx;
    assert_mstar_ok(mstar_entity_index("api_server", &idx));
    assert_int_equal(idx, 0);
    assert_mstar_ok(mstar_entity_index("conductor", &idx));
    assert_int_equal(idx, 1);
    assert_mstar_ok(mstar_entity_index("api_server_preprocess_worker", &idx));
    assert_int_equal(idx, 2);
    assert_mstar_ok(mstar_entity_index("worker_0", &idx));
    assert_int_equal(idx, 100);
    assert_mstar_ok(mstar_entity_index("worker_17", &idx));
    assert_int_equal(idx, 117);
    assert_mstar_status(mstar_entity_index("worker_01", &idx), MSTAR_ENOENT);
    assert_mstar_status(mstar_entity_index("worker_x", &idx), MSTAR_ENOENT);
    assert_mstar_status(mstar_entity_index("sampler", &idx), MSTAR_ENOENT);
    assert_mstar_status(mstar_entity_index("worker_99999", &idx), MSTAR_ERANGE);
    assert_mstar_status(mstar_entity_index("../etc", &idx), MSTAR_EINVAL);
}

static void test_names(void **state)
{
    (void)state;
    assert_mstar_ok(mstar_name_validate("mstar_arena_worker_0_12_ab.seg0", 31, "segment"));
    assert_mstar_ok(mstar_name_validate("host-1:9000", 11, "session"));
    assert_mstar_status(mstar_name_validate("", 0, "segment"), MSTAR_EINVAL);
    assert_mstar_status(mstar_name_validate("a/b", 3, "segment"), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "segment"));
    assert_mstar_status(mstar_name_validate("a..b", 4, "segment"), MSTAR_EINVAL);
    assert_mstar_status(mstar_name_validate(".", 1, "segment"), MSTAR_EINVAL);
    assert_mstar_status(mstar_name_validate("a b", 3, "segment"), MSTAR_EINVAL);
    assert_mstar_status(mstar_name_validate("a\0b", 3, "segment"), MSTAR_EINVAL);
    char long_name[300];
    memset(long_name, 'a', sizeof(long_name));
    assert_mstar_ok(mstar_name_validate(long_name, 255, "name"));
    assert_mstar_status(mstar_name_validate(long_name, 256, "name"), MSTAR_EINVAL);
    /* Every byte value alone in a name ("x?y"): allowed exactly when in the alphabet. */
    for (int c = 0; c < 256; c++) {
        char name[3] = { 'x', (char)c, 'y' };
        bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '-';
        mstar_status st = mstar_name_validate(name, 3, "name");
        if ((st == MSTAR_OK) != want)
            fail_msg("byte 0x%02x: %s", c, mstar_status_name(st));
    }
}

/* mstar__str_copy cuts and terminates as snprintf(dst, cap, "%s", src) does, and writes
 * nothing past the terminator. */
static void test_str_copy(void **state)
{
    (void)state;
    const char *srcs[] = { "", "a", "worker_1", "0123456789abcdef" };
    for (size_t s = 0; s < sizeof(srcs) / sizeof(srcs[0]); s++) {
        for (size_t cap = 1; cap <= 20; cap++) {
            char got[24], want[24];
            memset(got, '#', sizeof(got));
            memset(want, '#', sizeof(want));
            mstar__str_copy(got, cap, srcs[s]);
            snprintf(want, cap, "%s", srcs[s]);
            size_t n = strlen(want) + 1;
            if (memcmp(got, want, n) != 0 || got[n] != '#')
                fail_msg("'%s' into %zu bytes: '%s'", srcs[s], cap, got);
        }
    }
}

/* mstar__deadline_passed starts its span at the first call and only then: a span of 0 has
 * passed at once, a long one has not, and one that started long enough ago has. */
static void test_deadline_passed(void **state)
{
    (void)state;
    uint64_t d = 0;
    assert_true(mstar__deadline_passed(&d, 0));
    assert_true(d != 0);
    uint64_t later = 0;
    assert_false(mstar__deadline_passed(&later, UINT64_C(3600) * 1000000000u));
    uint64_t set = later;
    assert_false(mstar__deadline_passed(&later, 0)); /* the span is the first call's */
    assert_int_equal(later, set);
    uint64_t past = mstar__now_ns() - 1;
    assert_true(mstar__deadline_passed(&past, UINT64_C(3600) * 1000000000u));
    uint64_t soon = 0;
    assert_false(mstar__deadline_passed(&soon, 20000000)); /* 20 ms */
    struct timespec ts = { 0, 30000000 };
    nanosleep(&ts, NULL);
    assert_true(mstar__deadline_passed(&soon, 20000000));
}

static int sink_calls;
static void counting_sink(mstar_log_level level, const char *line, void *ud)
{
    (void)level;
    (void)ud;
    if (strstr(line, "entity_x[") && strstr(line, "hello 5"))
        sink_calls++;
}

static void test_logging(void **state)
{
    (void)state;
    mstar_log_set_entity("entity_x");
    mstar_log_set_level(MSTAR_LOG_INFO);
    mstar_log_set_sink(counting_sink, NULL);
    mstar_log(MSTAR_LOG_INFO, "hello %d", 5);
    mstar_log(MSTAR_LOG_DEBUG, "hello %d", 5); /* filtered */
    mstar_log_set_sink(NULL, NULL);
    assert_int_equal(sink_calls, 1);
    assert_false(mstar_log_enabled(MSTAR_LOG_DEBUG));
    assert_true(mstar_log_enabled(MSTAR_LOG_ERROR));
    assert_string_equal(mstar_log_level_name(MSTAR_LOG_WARN), "warn");
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_log(MSTAR_LOG_WARN, "captured %s", "line");
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("captured line"));
    assert_string_equal(mstar_log_get_entity(), "entity_x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_error_set_wrap_clear),
        cmocka_unit_test(test_env_int),
        cmocka_unit_test(test_env_double_bool_choice),
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_tensor_views),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_str_copy),
        cmocka_unit_test(test_logging),
        cmocka_unit_test(test_deadline_passed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
