/*
 * demo_harness.c — running the `mstar` binary for the demo tests and reading what it reported
 * (demo_harness.h says what each helper does).
 */
#include "demo_harness.h"

const char demo_small_config[] =
    "# the integration tests' demo: small model, 16 requests\n"
    "workers: {0: encoder, 1: decoder}\n"
    "model: {vocab: 128, hidden: 64, heads: 2, head_dim: 32, mlp: 128, layers: 2, seed: 3}\n"
    "encoder:\n"
    "  layers: 1\n"
    "  batch_sizes: [1, 2, 4]\n"
    "  token_lengths: [16, 32, 64]\n"
    "decoder:\n"
    "  batch_sizes: [1, 2, 4, 8]\n"
    "  prefill_batch_sizes: [1, 2]\n"
    "  prefill_token_lengths: [16, 32]\n"
    "  max_batch: 8\n"
    "  page_size: 8\n"
    "  kv_pages: 64\n"
    "requests:\n"
    "  count: 16\n"
    "  concurrency: 8\n"
    "  prompt_tokens: [4, 16]\n"
    "  output_tokens: [4, 12]\n"
    "  check_sample: 4\n";

const char *demo_scratch(void)
{
    static const char *dir;
    if (dir == NULL)
        dir = mstar_test_tmpdir("demo");
    return dir;
}

char *demo_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

const char *demo_write_file(const char *name, const char *text)
{
    static char path[8][4096];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 4096, "%s/%s", demo_scratch(), name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

demo_result mstar_cli_run_sig(int timeout_s, int sig, double signal_after_s, const char *command,
                              const char *const *args)
{
    const char *build = getenv("MSTAR_TEST_BUILD_DIR");
    if (build == NULL)
        mstar_test_skip("MSTAR_TEST_BUILD_DIR is not set (run through ctest)");
    char exe[4096], out_path[4096], err_path[4096];
    snprintf(exe, sizeof(exe), "%s/mstar", build);
    static int runs;
    snprintf(out_path, sizeof(out_path), "%s/stdout.%d", demo_scratch(), runs);
    snprintf(err_path, sizeof(err_path), "%s/stderr.%d", demo_scratch(), runs++);
    const char *argv[64] = { exe, command };
    int argc = 2;
    for (int i = 0; args[i] != NULL && argc < 63; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *o = freopen(out_path, "w", stdout);
        FILE *e = freopen(err_path, "w", stderr);
        if (o == NULL || e == NULL)
            _exit(126);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool signalled = false;
    demo_result r = { 0 };
    for (;;) {
        pid_t got = waitpid(pid, &r.status, WNOHANG);
        if (got == pid)
            break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double t = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
        if (sig != 0 && !signalled && t >= signal_after_s) {
            kill(pid, sig);
            signalled = true;
        }
        if (t > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &r.status, 0);
            fail_msg("mstar %s ran past %d s", command, timeout_s);
        }
        struct timespec pause = { 0, 20 * 1000 * 1000 };
        nanosleep(&pause, NULL);
    }
    r.out = demo_slurp(out_path);
    r.err = demo_slurp(err_path);
    return r;
}

demo_result demo_run_sig(int timeout_s, int sig, double signal_after_s, const char *const *args)
{
    return mstar_cli_run_sig(timeout_s, sig, signal_after_s, "demo", args);
}

demo_result demo_run(int timeout_s, const char *const *args)
{
    return demo_run_sig(timeout_s, 0, 0.0, args);
}

void mstar_cli_expect_usage_error(const char *command, const char *const *args, const char *says,
                                  size_t case_no)
{
    demo_result r = mstar_cli_run_sig(60, 0, 0, command, args);
    if (demo_exit_code(&r) != 2 || strstr(r.err, says) == NULL)
        fail_msg("mstar %s, case %zu: exit %d, want 2 and \"%s\"; stderr:\n%s", command, case_no,
                 demo_exit_code(&r), says, r.err);
    demo_result_free(&r);
}

void demo_result_free(demo_result *r)
{
    free(r->out);
    free(r->err);
}

int demo_exit_code(const demo_result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

long long demo_json_int(const demo_result *r, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *at = strstr(r->out, pat);
    if (at == NULL)
        fail_msg("no \"%s\" in the summary:\n%s\nstderr:\n%s", key, r->out, r->err);
    return strtoll(at + strlen(pat), NULL, 10);
}

const char *demo_json_str(const demo_result *r, const char *key, char *buf, size_t size)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": \"", key);
    const char *at = strstr(r->out, pat);
    if (at == NULL)
        fail_msg("no \"%s\" in the summary:\n%s", key, r->out);
    at += strlen(pat);
    size_t n = 0;
    while (at[n] != '"' && at[n] != '\0' && n + 1 < size)
        n++;
    memcpy(buf, at, n);
    buf[n] = '\0';
    return buf;
}

long long demo_json_steps(const demo_result *r, const char *walk, const char *field)
{
    char pat[64], fpat[64];
    snprintf(pat, sizeof(pat), "\"walk\": \"%s\"", walk);
    snprintf(fpat, sizeof(fpat), "\"%s\": ", field);
    long long sum = 0;
    for (const char *at = strstr(r->out, pat); at != NULL; at = strstr(at + 1, pat)) {
        const char *f = strstr(at, fpat);
        assert_non_null(f);
        sum += strtoll(f + strlen(fpat), NULL, 10);
    }
    return sum;
}

const char *demo_json_edge_route(const demo_result *r, const char *signal, char *buf, size_t size)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "{\"signal\": \"%s\"", signal);
    const char *at = strstr(r->out, pat), *route = at != NULL ? strstr(at, "\"route\": \"") : NULL;
    const char *end = route != NULL ? strchr(route + 10, '"') : NULL;
    size_t n = 0;
    if (end != NULL && end < strchr(at, '}')) {
        route += 10;
        n = (size_t)(end - route) < size - 1 ? (size_t)(end - route) : size - 1;
        memcpy(buf, route, n);
    }
    buf[n] = '\0';
    return buf;
}

bool demo_path_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

pid_t demo_worker_pid(const demo_result *r, int w)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "worker_%d (", w);
    const char *at = strstr(r->err, pat);
    assert_non_null(at);
    at = strstr(at, " pid ");
    assert_non_null(at);
    pid_t pid = (pid_t)strtol(at + 5, NULL, 10);
    assert_true(pid > 0);
    return pid;
}

const char *demo_startup_dir(const demo_result *r, const char *which, char *buf, size_t size)
{
    char pat[16];
    snprintf(pat, sizeof(pat), "; %s ", which);
    const char *at = strstr(r->err, pat);
    assert_non_null(at);
    at += strlen(pat);
    size_t n = strcspn(at, ";\n");
    assert_true(n > 0 && n < size);
    memcpy(buf, at, n);
    buf[n] = '\0';
    return buf;
}

bool demo_pid_gone(pid_t pid)
{
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *state = strrchr(buf, ')');
    return state != NULL && state[1] == ' ' && state[2] == 'Z';
}

void demo_expect_clean(const demo_result *r)
{
    char shm[256], ipc[256];
    demo_json_str(r, "shm_dir", shm, sizeof(shm));
    demo_json_str(r, "ipc_dir", ipc, sizeof(ipc));
    assert_true(strncmp(shm, "/", 1) == 0 && strstr(shm, "mstar-demo-") != NULL);
    assert_false(demo_path_exists(shm));
    assert_false(demo_path_exists(ipc));
    for (int w = 0; w < 2; w++)
        assert_true(demo_pid_gone(demo_worker_pid(r, w)));
}

void demo_expect_pass(const demo_result *r, long long requests)
{
    if (demo_exit_code(r) != 0)
        fail_msg("mstar demo exited with %d\nstdout:\n%s\nstderr:\n%s", demo_exit_code(r), r->out,
                 r->err);
    assert_non_null(strstr(r->out, "\"ok\": true"));
    assert_int_equal(demo_json_int(r, "total"), requests);
    assert_int_equal(demo_json_int(r, "completed") + demo_json_int(r, "aborted"), requests);
    assert_int_equal(demo_json_int(r, "failed"), 0);
    assert_int_equal(demo_json_int(r, "tensors_held"), 0);
    assert_int_equal(demo_json_int(r, "live_arena_slots"), 0);
    assert_int_equal(demo_json_int(r, "spill_files"), 0);
    assert_int_equal(demo_json_int(r, "shm_files_left"), 0);
    assert_int_equal(demo_json_int(r, "unaccounted_requests"), 0);
    assert_int_equal(demo_json_int(r, "mismatches"), 0);
    if (demo_json_int(r, "completed") > 0)
        assert_true(demo_json_int(r, "sampled") > 0);
    demo_expect_clean(r);
}
