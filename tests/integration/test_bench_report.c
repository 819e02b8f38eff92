/*
 * test_bench_report.c — `mstar bench all --quick --out DIR` end to end: progress on stderr, the
 * report's files (report.md with every section and its plots, report.json valid with every number
 * finite, each SVG well-formed), the transport suite's scratch directories removed; a suite
 * that fails (graphs on a CUDA build without a GPU) reported while the others still run; the UCX
 * transport's run with its TCP stream baseline; device tensors over UCX and files beside host
 * tensors (the host backend standing in for a GPU); and bad options answered with a usage error
 * before anything runs. No figure is judged: speed is what the report states, never what a test
 * asserts.
 */
#include "demo_harness.h"
#include "format_check.h"

/* Each run of the transport suite names its scratch directories on stderr; all must be gone.
 * Returns how many runs said so. */
static int expect_scratch_removed(const char *err)
{
    const char *tag = "transport: scratch directories ";
    int runs = 0;
    for (const char *at = strstr(err, tag); at != NULL; at = strstr(at, tag), runs++) {
        at += strlen(tag);
        char ipc[512], shm[512];
        size_t n = strcspn(at, " ");
        assert_true(n > 0 && n < sizeof(ipc));
        memcpy(ipc, at, n);
        ipc[n] = '\0';
        at += n;
        assert_true(strncmp(at, " and ", 5) == 0);
        at += 5;
        n = strcspn(at, "\n");
        assert_true(n > 0 && n < sizeof(shm));
        memcpy(shm, at, n);
        shm[n] = '\0';
        assert_non_null(strstr(ipc, "mstar-bench-ipc-"));
        assert_non_null(strstr(shm, "mstar-bench-"));
        if (demo_path_exists(ipc) || demo_path_exists(shm))
            fail_msg("left behind: %s %s", demo_path_exists(ipc) ? ipc : "",
                     demo_path_exists(shm) ? shm : "");
    }
    return runs;
}

static char *read_report_file(const char *dir, const char *name)
{
    char path[4096 + 64]; /* a directory of up to 4096 bytes and a file name */
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (!demo_path_exists(path))
        fail_msg("%s was not written", path);
    return demo_slurp(path);
}

static void check_svg(const char *dir, const char *name)
{
    char *svg = read_report_file(dir, name);
    char why[256];
    if (!mstar_test_xml_check(svg, "svg", why, sizeof(why)))
        fail_msg("%s is not well-formed: %s", name, why);
    assert_true(strncmp(svg, "<svg", 4) == 0);
    assert_non_null(strstr(svg, "<polyline")); /* data drawn, not just axes */
    free(svg);
}

/* How many times `needle` occurs in `text`. */
static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void test_quick_report(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/nested/report", demo_scratch()); /* created with its parent */
    const char *args[] = { "all", "--quick", "--out", dir, NULL };
    /* A named interpreter that is not there: the Python suite says why it is skipped. */
    setenv("MSTAR_BENCH_PYTHON", "/nonexistent/python3", 1);
    demo_result r = mstar_cli_run_sig(600, 0, 0, "bench", args);
    unsetenv("MSTAR_BENCH_PYTHON");
    if (demo_exit_code(&r) != 0)
        fail_msg("mstar bench all exited %d\nstdout:\n%s\nstderr:\n%s", demo_exit_code(&r), r.out,
                 r.err);

    /* Progress names each suite and the sizes as they run. */
    static const char *const progress[] = {
        "wire: start",
        "bookkeeper: start",
        "transport: files, 4 KiB",
        "transport: arena, 16 MiB",
        "transport: ucx-tcp, 1 MiB",
        "transport-ucx: done",
        "ucx: 1 MiB",
        "graphs: bs 64",
        "graphs: done",
    };
    for (size_t i = 0; i < sizeof(progress) / sizeof(progress[0]); i++)
        if (strstr(r.err, progress[i]) == NULL)
            fail_msg("no progress line '%s' in:\n%s", progress[i], r.err);
    /* Built with the package: the missing interpreter is named; without it: not built. */
    if (strstr(r.err, "python: skipped: the interpreter /nonexistent/python3") == NULL &&
        strstr(r.err, "python: skipped: the Python package was not built") == NULL)
        fail_msg("no 'python: skipped' line in:\n%s", r.err);
    assert_non_null(strstr(r.out, "report.md"));

    char *md = read_report_file(dir, "report.md");
    static const char *const sections[] = {
        "# Benchmark report",
        "`mstar bench all --quick --out ",
        "## Machine",
        "| CPU |",
        "| build |",
        "## Targets",
        "arena throughput at >= 1 MiB / memcpy",
        "4 KiB arena round trip",
        "arena loan+view throughput at >= 1 MiB / memcpy",
        "bookkeeper store + dereference pairs/s",
        "UCX TCP AM read",
        "UCX TCP transport throughput",
        "runner replay / raw replay",
        "## Transport: shared-memory files and arena",
        "**arena, loans and views (no byte copied)**",
        "## Transport over UCX on TCP",
        "| size | round trip p50 µs | p99 µs | p50 / ZeroMQ | GB/s | / memcpy | TCP stream GB/s |",
        "| spin µs | p50 µs | p99 µs | mean µs | p50 / futex | CPU µs | switches |",
        "The arena's 4 KiB handoff with both ends in one process, its calls alone",
        "## UCX over TCP: remote reads",
        "## Graph runner: eager versus replay",
        "## Bookkeeper",
        "## Wire codec",
        "](transport_latency.svg)",
        "](transport_throughput.svg)",
        "](graphs_steps.svg)",
    };
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        if (strstr(md, sections[i]) == NULL)
            fail_msg("report.md has no '%s':\n%s", sections[i], md);
    assert_null(strstr(md, "**Failed**"));
    assert_null(strstr(md, "Transport of device tensors")); /* --device cuda only */
    free(md);

    char *json = read_report_file(dir, "report.json");
    char why[256];
    size_t numbers = 0;
    if (!mstar_test_json_check(json, &numbers, why, sizeof(why)))
        fail_msg("report.json: %s\n%s", why, json);
    assert_true(numbers > 100);
    assert_int_equal(strstr(json, "\"quick\":true") != NULL, 1);
    static const char *const suites[] = { "wire",          "bookkeeper", "transport",
                                          "transport-ucx", "ucx",        "graphs" };
    for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
        char key[64];
        snprintf(key, sizeof(key), "\"%s\":{\"ok\":true", suites[i]);
        if (strstr(json, key) == NULL)
            fail_msg("report.json has no %s", key);
    }
    assert_non_null(strstr(json, "\"transport-cuda\":{\"ok\":false")); /* not run */
    /* Each spin setting's mean round trip, which its CPU time per handoff compares with. */
    assert_int_equal(count_of(json, "\"rt_mean_us\":"), 2);
    /* The handoff's calls with both ends in one process, once (the arena's suite). */
    assert_int_equal(count_of(json, "\"calls_4k\":"), 1);
    free(json);

    check_svg(dir, "transport_latency.svg");
    check_svg(dir, "transport_throughput.svg");
    check_svg(dir, "graphs_steps.svg");
    /* Every host transport of one run on the plots: files, the copying arena, loans and views,
     * the mesh's ring and ZeroMQ beside the raw ZeroMQ ping-pong. */
    static const char *const lines[][2] = {
        { "transport_throughput.svg", "arena loans+views" },
        { "transport_throughput.svg", ">files<" },
        { "transport_throughput.svg", ">arena<" },
        { "transport_latency.svg", "loans+views round trip" },
        { "transport_latency.svg", "mesh ring 4 KiB msg" },
        { "transport_latency.svg", "mesh ZeroMQ 4 KiB msg" },
        { "transport_latency.svg", "ZeroMQ 64 B (base)" },
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        char *svg_text = read_report_file(dir, lines[i][0]);
        if (strstr(svg_text, lines[i][1]) == NULL)
            fail_msg("%s has no line '%s'", lines[i][0], lines[i][1]);
        free(svg_text);
    }
    char svg[4200];
    snprintf(svg, sizeof(svg), "%s/transport_cuda_throughput.svg", dir);
    assert_false(demo_path_exists(svg));

    assert_int_equal(expect_scratch_removed(r.err), 2); /* files and arena; ucx-tcp */
    demo_result_free(&r);
}

/* --device cuda: without a CUDA backend a usage error; without a GPU the graphs and
 * transport-cuda suites fail, the others still run, and the report says so (exit 1); on a GPU
 * every suite passes, transport-cuda with its verdicts and plots. */
static void test_device_cuda(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/cuda", demo_scratch());
    const char *args[] = { "all", "--quick", "--device", "cuda", "--out", dir, NULL };
    demo_result r = mstar_cli_run_sig(600, 0, 0, "bench", args);
    int code = demo_exit_code(&r);
    if (!mstar_built_with_cuda()) {
        assert_int_equal(code, 2);
        assert_non_null(strstr(r.err, "no CUDA backend"));
        assert_false(demo_path_exists(dir));
        demo_result_free(&r);
        return;
    }
    if (code != 0 && code != 1)
        fail_msg("mstar bench all --device cuda exited %d:\n%s", code, r.err);
    char *md = read_report_file(dir, "report.md");
    char *json = read_report_file(dir, "report.json");
    char why[256];
    if (!mstar_test_json_check(json, NULL, why, sizeof(why)))
        fail_msg("report.json: %s\n%s", why, json);
    assert_non_null(strstr(json, "\"transport\":{\"ok\":true"));
    assert_non_null(strstr(md, "## Transport of device tensors: CUDA IPC and staged"));
    if (code == 1) {
        assert_non_null(strstr(r.err, "graphs failed: "));
        assert_non_null(strstr(r.err, "transport-cuda failed: "));
        assert_non_null(strstr(md, "**Failed**"));
        assert_non_null(strstr(json, "\"graphs\":{\"ok\":false"));
        assert_non_null(strstr(json, "\"transport-cuda\":{\"ok\":false"));
    } else {
        assert_non_null(strstr(json, "\"graphs\":{\"ok\":true"));
        assert_non_null(strstr(md, "--device cuda`: the reference decode model"));
        assert_non_null(strstr(json, "\"transport-cuda\":{\"ok\":true"));
        assert_non_null(strstr(md, "CUDA IPC route throughput at 16 MiB / copies into a buffer"));
        assert_non_null(strstr(md, "4 KiB round trip p50 over CUDA IPC / host arena"));
        /* The route's ceiling beside the baseline: the copy into a buffer per read. */
        assert_non_null(strstr(md, "| D2D spread GB/s |"));
        assert_non_null(strstr(json, "\"d2d_spread_gbps\":"));
        assert_non_null(strstr(md, "](transport_cuda_throughput.svg)"));
        /* Plotted only from a run that measured something: a failed suite has no data. */
        check_svg(dir, "transport_cuda_latency.svg");
        check_svg(dir, "transport_cuda_throughput.svg");
    }
    check_svg(dir, "transport_latency.svg");
    free(md);
    free(json);
    demo_result_free(&r);
}

/* `mstar bench <args>` exits with `code` and says `needle` on stderr. */
static void expect_refused(int code, const char *needle, const char *const *args)
{
    demo_result r = mstar_cli_run_sig(60, 0, 0, "bench", args);
    if (demo_exit_code(&r) != code || strstr(r.err, needle) == NULL)
        fail_msg("mstar bench %s ...: exit %d, wanted %d with '%s' on stderr:\n%s", args[0],
                 demo_exit_code(&r), code, needle, r.err);
    assert_null(strstr(r.err, "wire: start")); /* refused before running anything */
    demo_result_free(&r);
}

/* `mstar bench ARGS...` that must exit 0 (the caller frees the result). */
static demo_result bench_ok(const char *const *args)
{
    demo_result r = mstar_cli_run_sig(300, 0, 0, "bench", args);
    if (demo_exit_code(&r) != 0)
        fail_msg("exited %d\nstdout:\n%s\nstderr:\n%s", demo_exit_code(&r), r.out, r.err);
    return r;
}

/* bench_ok of a run with --json whose output must be valid JSON. */
static demo_result bench_json_ok(const char *const *args)
{
    demo_result r = bench_ok(args);
    char why[256];
    if (!mstar_test_json_check(r.out, NULL, why, sizeof(why)))
        fail_msg("%s\n%s", why, r.out);
    return r;
}

/* `mstar bench transport --transport ucx-tcp`: every size of the quick run carries its TCP
 * stream baseline and the ratio, and the text form states the target. */
static void test_transport_ucx(void **state)
{
    (void)state;
    const char *json_args[] = { "transport", "--transport", "ucx-tcp", "--quick", "--json", NULL };
    demo_result r = bench_json_ok(json_args);
    assert_non_null(strstr(r.out, "\"transport\":\"ucx-tcp\""));
    assert_int_equal(count_of(r.out, "\"tcp_stream_gbps\":"), 5); /* 4 KiB .. 16 MiB */
    assert_int_equal(count_of(r.out, "\"vs_tcp\":"), 5);
    demo_result_free(&r);
    const char *text_args[] = { "transport", "--transport", "ucx-tcp", "--quick", NULL };
    r = bench_ok(text_args);
    assert_non_null(strstr(r.out, "UCX TCP transport throughput at >= 1 MiB / raw TCP stream"));
    demo_result_free(&r);
}

/* `mstar bench transport --transport ucx-tcp --device host`: the device run beside host tensors
 * (the host backend standing in for the GPU, so the staged path runs without one), both runs of
 * every size in the JSON with the device/host ratios, and the text form states the two targets;
 * files prints the same table without targets (none was set). */
static void test_transport_device_pair(void **state)
{
    (void)state;
    const char *json_args[] = { "transport", "--transport", "ucx-tcp", "--device",
                                "host",      "--quick",     "--json",  NULL };
    demo_result r = bench_json_ok(json_args);
    assert_non_null(strstr(r.out, "\"transport\":\"ucx-tcp\""));
    assert_non_null(strstr(r.out, "\"tensors\":\"device\""));
    assert_non_null(strstr(r.out, "\"tensors\":\"host\""));
    assert_int_equal(count_of(r.out, "\"rt_p50_us\":"), 10); /* 4 KiB .. 16 MiB, both runs */
    assert_int_equal(count_of(r.out, "\"gbps_vs_host\":"), 5);
    demo_result_free(&r);
    const char *text_args[] = { "transport", "--transport", "ucx-tcp", "--device",
                                "host",      "--quick",     NULL };
    r = bench_ok(text_args);
    assert_non_null(strstr(r.out, "UCX TCP 4 KiB round trip p50, device / host tensors <= 2x"));
    assert_non_null(strstr(r.out, "UCX TCP throughput at >= 1 MiB, device / host tensors"));
    assert_int_equal(expect_scratch_removed(r.err), 1);
    demo_result_free(&r);
    const char *files_args[] = { "transport", "--transport", "files", "--device",
                                 "host",      "--quick",     NULL };
    r = bench_ok(files_args);
    assert_non_null(strstr(r.out, "transport files, device tensors on the host backend"));
    assert_non_null(strstr(r.out, "16 MiB"));
    assert_null(strstr(r.out, "met "));
    demo_result_free(&r);
}

/* `mstar bench transport --size`: the one size asked for, over the arena with and without loans
 * and views, as JSON rows and nothing else (no baselines, no ratios, no targets), and the scratch
 * directories removed; an odd size is measured as given. */
static void test_transport_one_size(void **state)
{
    (void)state;
    const char *json_args[] = { "transport", "--transport", "arena",  "--size",
                                "64K",       "--quick",     "--json", NULL };
    demo_result r = bench_json_ok(json_args);
    assert_non_null(strstr(r.out, "\"transport\":\"arena\""));
    assert_non_null(strstr(r.out, "\"transport\":\"arena-views\""));
    assert_int_equal(count_of(r.out, "\"bytes\":65536"), 2);
    assert_int_equal(count_of(r.out, "\"bytes\":"), 2);
    assert_null(strstr(r.out, "memcpy"));
    assert_null(strstr(r.out, "zmq"));
    demo_result_free(&r);
    const char *odd_args[] = { "transport", "--transport", "files", "--size",
                               "1000",      "--quick",     NULL };
    r = bench_ok(odd_args);
    assert_non_null(strstr(r.out, "no baselines (--size)"));
    assert_non_null(strstr(r.out, "1000 B"));
    assert_null(strstr(r.out, "met "));
    assert_int_equal(expect_scratch_removed(r.err), 1);
    demo_result_free(&r);
}

static void test_bad_options(void **state)
{
    (void)state;
    const char *usage = "usage: mstar bench all";
    const char *bogus[] = { "all", "--bogus", NULL };
    expect_refused(2, usage, bogus);
    const char *device[] = { "all", "--device", "gpu", NULL };
    expect_refused(2, usage, device);
    const char *no_dir[] = { "all", "--quick", "--out", NULL };
    expect_refused(2, usage, no_dir);
    const char *empty_dir[] = { "all", "--out", "", NULL };
    expect_refused(2, usage, empty_dir);
    const char *stray[] = { "all", "quick", NULL };
    expect_refused(2, usage, stray);

    /* A directory that cannot be made fails at once, naming it. */
    const char *file = demo_write_file("not_a_dir", "x\n");
    char below[4200];
    snprintf(below, sizeof(below), "%s/report", file);
    const char *unwritable[] = { "all", "--quick", "--out", below, NULL };
    expect_refused(1, "not_a_dir", unwritable);
    assert_false(demo_path_exists(below));

    const char *suite[] = { "nosuch", NULL };
    expect_refused(2, "unknown suite 'nosuch'", suite);
    const char *wire[] = { "wire", "--bogus", NULL };
    expect_refused(2, "usage: mstar bench wire", wire);
    const char *local_kind[] = { "transport", "--transport", "local", NULL };
    expect_refused(2, "--transport files|arena|ucx-tcp", local_kind);
    const char *standin_arena[] = { "transport", "--device", "host", NULL };
    expect_refused(2, "--device host needs --transport files|ucx-tcp", standin_arena);
    const char *bad_device[] = { "transport", "--device", "gpu", NULL };
    expect_refused(2, "--device cpu|cuda|host", bad_device);
    const char *size_unit[] = { "transport", "--transport", "arena", "--size", "4Q", NULL };
    expect_refused(2, "--size 4Q: want bytes", size_unit);
    const char *size_negative[] = { "transport", "--transport", "arena", "--size", "-1", NULL };
    expect_refused(2, "--size -1: want bytes", size_negative);
    const char *size_zero[] = { "transport", "--transport", "arena", "--size", "0", NULL };
    expect_refused(2, "--size 0: want bytes", size_zero);
    const char *size_overflow[] = { "transport", "--transport",           "arena",
                                    "--size",    "18446744073709551615G", NULL };
    expect_refused(2, "want bytes", size_overflow);
    const char *size_huge[] = { "transport", "--transport", "arena", "--size", "1G", NULL };
    expect_refused(1, "want 1 byte to 67108864 bytes", size_huge);
    const char *size_ucx[] = { "transport", "--transport", "ucx-tcp", "--size", "4K", NULL };
    expect_refused(1, "the transport is ucx-tcp, want files or arena", size_ucx);
    const char *size_two_kinds[] = { "transport", "--size", "4K", NULL };
    expect_refused(2, "--size needs --transport files|arena", size_two_kinds);
    /* Device tensors of one size: only the arena's CUDA IPC route (tests/gpu runs it). */
    const char *size_device[] = { "transport", "--transport", "files", "--device",
                                  "cuda",      "--size",      "4K",    NULL };
    expect_refused(2, "--size needs --transport files|arena", size_device);
    const char *size_standin[] = { "transport", "--transport", "arena", "--device",
                                   "host",      "--size",      "4K",    NULL };
    expect_refused(2, "(device tensors: --device cuda --transport arena)", size_standin);

    const char *help[] = { "all", "--help", NULL };
    demo_result r = mstar_cli_run_sig(60, 0, 0, "bench", help);
    assert_int_equal(demo_exit_code(&r), 0);
    assert_non_null(strstr(r.out, usage));
    demo_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options),           cmocka_unit_test(test_transport_ucx),
        cmocka_unit_test(test_transport_device_pair), cmocka_unit_test(test_quick_report),
        cmocka_unit_test(test_device_cuda),           cmocka_unit_test(test_transport_one_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
