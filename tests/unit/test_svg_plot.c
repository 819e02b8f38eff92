/*
 * test_svg_plot.c — the benchmark report's SVG writer (apps/mstar/bench/svg_plot.c): linear and log
 * scales, range fitting, ticks and their labels, escaping of text, gaps for points that cannot be
 * drawn, and a well-formed document; plus the checkers the report tests rely on
 * (tests/support/format_check.c), which must reject what is broken.
 */
#include "mstar_test.h"

#include "format_check.h"
#include "svg_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mstar__plot_axis axis(int log_base, double min, double max)
{
    mstar__plot_axis a = { "x", log_base, MSTAR__TICK_NUMBER, min, max };
    return a;
}

static void test_linear_scale(void **state)
{
    (void)state;
    mstar__plot_axis a = axis(0, 0, 8);
    assert_float_equal(mstar__axis_map(&a, 0, 100, 500), 100, 1e-9);
    assert_float_equal(mstar__axis_map(&a, 8, 100, 500), 500, 1e-9);
    assert_float_equal(mstar__axis_map(&a, 2, 100, 500), 200, 1e-9);
    /* A y axis runs from the bottom pixel up. */
    assert_float_equal(mstar__axis_map(&a, 6, 400, 0), 100, 1e-9);
    /* Outside the range maps outside the pixels (the plot clips it). */
    assert_float_equal(mstar__axis_map(&a, 16, 0, 100), 200, 1e-9);
    assert_true(isnan(mstar__axis_map(&a, NAN, 0, 100)));
    assert_true(isnan(mstar__axis_map(&a, INFINITY, 0, 100)));
    mstar__plot_axis unset = axis(0, 0, 0);
    assert_true(isnan(mstar__axis_map(&unset, 1, 0, 100)));
}

static void test_log_scale(void **state)
{
    (void)state;
    mstar__plot_axis a = axis(10, 10, 100000);
    /* Each decade takes the same width. */
    assert_float_equal(mstar__axis_map(&a, 10, 0, 400), 0, 1e-9);
    assert_float_equal(mstar__axis_map(&a, 100, 0, 400), 100, 1e-9);
    assert_float_equal(mstar__axis_map(&a, 1000, 0, 400), 200, 1e-9);
    assert_float_equal(mstar__axis_map(&a, 100000, 0, 400), 400, 1e-9);
    assert_float_equal(mstar__axis_map(&a, sqrt(10) * 10, 0, 400), 50, 1e-9);
    /* Zero and negative values have no place on a log axis. */
    assert_true(isnan(mstar__axis_map(&a, 0, 0, 400)));
    assert_true(isnan(mstar__axis_map(&a, -5, 0, 400)));
    mstar__plot_axis b = axis(2, 4096, 64.0 * 1048576);
    assert_float_equal(mstar__axis_map(&b, 65536, 0, 140), 40, 1e-9); /* 4 of 14 octaves */
    mstar__plot_axis broken = axis(10, 0, 100);
    assert_true(isnan(mstar__axis_map(&broken, 10, 0, 100)));
}

static void test_fit(void **state)
{
    (void)state;
    double x[] = { 3, 70, 1000 }, y[] = { 0.3, 6.3, 2 };
    mstar__plot p;
    mstar__plot_init(&p, "fit");
    p.x.log_base = 10;
    assert_mstar_ok(mstar__plot_add(&p, "s", x, y, 3, false));
    mstar__plot_fit(&p);
    /* Log: out to the enclosing powers; an exact power (1000) stays as it is. */
    assert_float_equal(p.x.min, 1, 1e-12);
    assert_float_equal(p.x.max, 1000, 1e-9);
    /* Linear: from 0 to a round value at or above the largest. */
    assert_float_equal(p.y.min, 0, 1e-12);
    assert_float_equal(p.y.max, 8, 1e-12);

    /* Byte sizes on a base-2 axis fit exactly; a range already set is kept. */
    double sx[] = { 4096, 65536, 67108864 }, sy[] = { -2, 0, 3 };
    mstar__plot_init(&p, "bytes");
    p.x.log_base = 2;
    p.y.min = -10;
    p.y.max = 10;
    assert_mstar_ok(mstar__plot_add(&p, "s", sx, sy, 3, false));
    mstar__plot_fit(&p);
    assert_float_equal(p.x.min, 4096, 1e-9);
    assert_float_equal(p.x.max, 67108864, 1e-3);
    assert_float_equal(p.y.min, -10, 0);
    assert_float_equal(p.y.max, 10, 0);

    /* Points that cannot be drawn do not stretch the range; with none left the range is still
     * usable. */
    double ny[] = { NAN, -1, 0 }, nx[] = { 1, 2, 4 };
    mstar__plot_init(&p, "empty");
    p.y.log_base = 10;
    assert_mstar_ok(mstar__plot_add(&p, "s", nx, ny, 3, false));
    mstar__plot_fit(&p);
    assert_true(p.y.min > 0 && p.y.min < p.y.max);
    assert_float_equal(p.x.min, 0, 0); /* a point needs both coordinates drawable */
    assert_float_equal(p.x.max, 1, 0);
}

static void test_ticks(void **state)
{
    (void)state;
    double t[16];
    mstar__plot_axis a = axis(10, 1, 100000);
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 6);
    for (int i = 0; i < 6; i++)
        assert_float_equal(t[i], pow(10, i), 1e-6 * pow(10, i));
    /* Fifteen decades: every other one, no more than nine ticks. */
    a = axis(10, 1e-3, 1e12);
    size_t n = mstar__axis_ticks(&a, t, 16);
    assert_true(n >= 2 && n <= 9);
    assert_float_equal(t[1] / t[0], 100, 1e-6);
    /* 4 KiB to 64 MiB by powers of two: every fourfold step. */
    a = axis(2, 4096, 67108864);
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 8);
    assert_float_equal(t[0], 4096, 0);
    assert_float_equal(t[1], 16384, 0);
    assert_float_equal(t[7], 67108864, 0);
    /* Linear: round steps, and 0 rather than -0. */
    a = axis(0, 0, 8);
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 5);
    assert_float_equal(t[4], 8, 1e-12);
    a = axis(0, -4, 4);
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 5);
    assert_float_equal(t[0], -4, 1e-12);
    assert_float_equal(t[2], 0, 0);
    assert_false(signbit(t[2]));
    a = axis(0, -0.5, 8); /* the first tick, ceil(-0.25), is -0 unless written as 0 */
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 5);
    assert_false(signbit(t[0]));
    /* The cap is respected; an unset axis has none. */
    assert_int_equal(mstar__axis_ticks(&a, t, 3), 3);
    a = axis(0, 1, 1);
    assert_int_equal(mstar__axis_ticks(&a, t, 16), 0);
}

static void test_labels(void **state)
{
    (void)state;
    char buf[32];
    mstar__plot_axis bytes = { "size", 2, MSTAR__TICK_BYTES, 1, 2 };
    mstar__axis_label(&bytes, 4096, buf, sizeof(buf));
    assert_string_equal(buf, "4 KiB");
    mstar__axis_label(&bytes, 64.0 * 1048576, buf, sizeof(buf));
    assert_string_equal(buf, "64 MiB");
    mstar__axis_label(&bytes, 512, buf, sizeof(buf));
    assert_string_equal(buf, "512 B");
    mstar__axis_label(&bytes, 1.5 * 1073741824, buf, sizeof(buf));
    assert_string_equal(buf, "1.5 GiB");
    mstar__plot_axis num = axis(10, 1, 2);
    mstar__axis_label(&num, 100000, buf, sizeof(buf));
    assert_string_equal(buf, "100000");
    mstar__axis_label(&num, 0.5, buf, sizeof(buf));
    assert_string_equal(buf, "0.5");
    mstar__axis_label(&num, 0.1 + 0.2, buf, sizeof(buf));
    assert_string_equal(buf, "0.3");
    mstar__axis_label(&bytes, 4096, buf, 3); /* truncated, still terminated */
    assert_string_equal(buf, "4 ");
}

static void test_escape(void **state)
{
    (void)state;
    char buf[64];
    const char *in = "a<b & 'c' \"d\">";
    const char *want = "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;";
    assert_int_equal(mstar__svg_escape(in, buf, sizeof(buf)), strlen(want));
    assert_string_equal(buf, want);
    /* Control characters cannot appear in XML 1.0: spaces instead. UTF-8 passes through. */
    mstar__svg_escape("x\001y\tz µs", buf, sizeof(buf));
    assert_string_equal(buf, "x y z µs");
    /* Truncation stops before an escape that does not fit, and reports the full length. */
    assert_int_equal(mstar__svg_escape("ab&cd", buf, 5), 9);
    assert_string_equal(buf, "ab");
    assert_int_equal(mstar__svg_escape("ab&cd", buf, 8), 9);
    assert_string_equal(buf, "ab&amp;");
    assert_int_equal(mstar__svg_escape("abc", NULL, 0), 3);
}

/* The plot written into memory. */
static char *render(const mstar__plot *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_mstar_ok(mstar__plot_write(p, f));
    assert_int_equal(fclose(f), 0);
    return text;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *at = strstr(text, needle); at != NULL; at = strstr(at + 1, needle))
        n++;
    return n;
}

static void test_document(void **state)
{
    (void)state;
    double x[] = { 1, 2, 4, 8, 16 }, y[] = { 10, 20, NAN, 40, 50 }, base[] = { 30, 30 };
    double bx[] = { 1, 16 };
    mstar__plot p;
    mstar__plot_init(&p, "step <time> & \"more\"");
    p.x = (mstar__plot_axis){ "batch size", 2, MSTAR__TICK_NUMBER, 0, 0 };
    p.y = (mstar__plot_axis){ "µs", 10, MSTAR__TICK_NUMBER, 0, 0 };
    assert_mstar_ok(mstar__plot_add(&p, "eager & co", x, y, 5, false));
    assert_mstar_ok(mstar__plot_add(&p, "raw (base)", bx, base, 2, true));
    mstar__plot_fit(&p);
    char *svg = render(&p);
    char why[256];
    if (!mstar_test_xml_check(svg, "svg", why, sizeof(why)))
        fail_msg("%s\n%s", why, svg);
    assert_true(strncmp(svg, "<svg ", 5) == 0);
    assert_non_null(strstr(svg, "step &lt;time&gt; &amp; &quot;more&quot;"));
    assert_non_null(strstr(svg, ">eager &amp; co</text>"));
    /* The NaN splits the series in two lines; the baseline is one dashed line, no markers. */
    assert_int_equal(count(svg, "<polyline"), 3);
    assert_int_equal(count(svg, "<circle"), 4);
    assert_int_equal(count(svg, "stroke-dasharray"), 2); /* the line and its legend entry */
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    /* Tick labels of both axes. */
    assert_non_null(strstr(svg, ">16</text>"));
    assert_non_null(strstr(svg, ">100</text>"));
    free(svg);

    /* A log axis drops what it cannot draw; nothing drawable still makes a valid document. */
    double zx[] = { 1, 2 }, zy[] = { 0, -1 };
    mstar__plot_init(&p, "");
    p.y.log_base = 10;
    assert_mstar_ok(mstar__plot_add(&p, "none", zx, zy, 2, false));
    mstar__plot_fit(&p);
    svg = render(&p);
    assert_true(mstar_test_xml_check(svg, "svg", why, sizeof(why)));
    assert_int_equal(count(svg, "<polyline"), 0);
    free(svg);
}

static void test_series_limit_and_save(void **state)
{
    (void)state;
    double v[] = { 1 };
    mstar__plot p;
    mstar__plot_init(&p, "many");
    for (int i = 0; i < MSTAR__PLOT_MAX_SERIES; i++)
        assert_mstar_ok(mstar__plot_add(&p, "s", v, v, 1, false));
    assert_mstar_status(mstar__plot_add(&p, "one more", v, v, 1, false), MSTAR_ENOSPC);
    mstar__plot_fit(&p);
    char path[4096];
    snprintf(path, sizeof(path), "%s/plot.svg", mstar_test_tmpdir("svg"));
    assert_mstar_ok(mstar__plot_save(&p, path));
    assert_true(access(path, F_OK) == 0);
    snprintf(path, sizeof(path), "%s/missing/plot.svg", mstar_test_tmpdir("svg"));
    assert_mstar_status(mstar__plot_save(&p, path), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), "missing/plot.svg"));
    /* A full device fails on the final flush at the latest. */
    if (access("/dev/full", W_OK) == 0)
        assert_mstar_status(mstar__plot_save(&p, "/dev/full"), MSTAR_EIO);
}

static void test_checkers_reject(void **state)
{
    (void)state;
    char why[256];
    static const char *const bad_xml[] = {
        "",
        "<svg>",
        "<svg><g></svg></g>",
        "<g></g>",
        "<svg a=1/>",
        "<svg a=\"x<y\"/>",
        "<svg>a & b</svg>",
        "<svg></svg><svg/>",
        "<svg>< g/></svg>",
        "text<svg/>",
    };
    for (size_t i = 0; i < sizeof(bad_xml) / sizeof(bad_xml[0]); i++)
        if (mstar_test_xml_check(bad_xml[i], "svg", why, sizeof(why)))
            fail_msg("accepted XML: %s", bad_xml[i]);
    assert_true(mstar_test_xml_check(" <svg a=\"&amp;&#38;&#x26;\"><g/>t&lt;</svg>\n", "svg", why,
                                     sizeof(why)));

    static const char *const bad_json[] = {
        "",      "{",           "{\"a\":}",    "{\"a\":1,}",
        "[1 2]", "{\"a\":nan}", "{\"a\":inf}", "{\"a\":1e999}",
        "[01]",  "[1.]",        "\"a\nb\"",    "{a:1}",
        "[1]]",  "[-]",         "[\"\\x\"]",
    };
    for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++)
        if (mstar_test_json_check(bad_json[i], NULL, why, sizeof(why)))
            fail_msg("accepted JSON: %s", bad_json[i]);
    size_t numbers;
    assert_true(mstar_test_json_check(
        " {\"a\":[1,-0.5,2e-3,{\"b\":null,\"c\":true}],\"d\":\"\\u00b5\\\"\"} ", &numbers, why,
        sizeof(why)));
    assert_int_equal(numbers, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_scale),
        cmocka_unit_test(test_log_scale),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_ticks),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_document),
        cmocka_unit_test(test_series_limit_and_save),
        cmocka_unit_test(test_checkers_reject),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
