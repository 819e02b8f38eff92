/*
 * demo_options.c — the command line of `mstar demo`.
 *
 * Values come from three layers, later ones winning: the built-in defaults, the --config file,
 * then the options that restate a config key (--requests, --seed). Every bad value is a usage
 * error (exit code 2) whose message names the option.
 */
#include "demo.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

const char *demo_transport_name(demo_transport t)
{
    switch (t) {
    case DEMO_TRANSPORT_FILES:
        return "files";
    case DEMO_TRANSPORT_ARENA:
        return "arena";
    case DEMO_TRANSPORT_UCX_TCP:
        return "ucx-tcp";
    }
    return "?";
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mstar demo [options]\n"
            "\n"
            "Serve a composite model across two worker processes (an encoder and the reference\n"
            "decode model), check every result against an eager run and that nothing leaked.\n"
            "\n"
            "options:\n"
            "  --device host|cuda        where the components compute (default host)\n"
            "  --transport files|arena|ucx-tcp\n"
            "                            how tensors move between processes (default arena)\n"
            "  --requests N              requests to serve (default 64, or the config's)\n"
            "  --abort-rate R            share of requests aborted mid-walk, 0..1 (default 0)\n"
            "  --seed S                  seed of prompts, lengths and aborts (default 7)\n"
            "  --no-graphs               run every step eagerly (no captured graphs)\n"
            "  --config FILE             YAML: workers, model, encoder, decoder, requests\n"
            "  --json                    print the summary as JSON on stdout\n"
            "  --timeout SECONDS         give up on the run after this long (default 120)\n"
            "  --kill-worker RANK        fault injection: SIGKILL worker RANK mid-run\n"
            "  --kill-after N            ... once N requests completed (default 4)\n"
            "  --inject-fault corrupt-token|leak-tensor\n"
            "                            test only: plant a fault the run's checks must catch\n"
            "  --shm-dir DIR             make the run's shm directory in DIR (default\n"
            "                            $MSTAR_SHM_DIR, else /dev/shm, else /tmp)\n"
            "  --help                    this text\n"
            "\n"
            "Exit code: 0 when every request completed or was aborted as asked, the self-check\n"
            "matched and nothing leaked; 1 on a mismatch, a leak, a failed worker or a timeout;\n"
            "2 on a usage or config error. docs/demo.md describes the config file.\n");
}

static int bad(const char *fmt, const char *opt, const char *value)
{
    fprintf(stderr, "mstar demo: ");
    fprintf(stderr, fmt, opt, value);
    fprintf(stderr, "\n(see mstar demo --help)\n");
    return 2;
}

static bool parse_long(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

enum {
    OPT_DEVICE = 1000,
    OPT_TRANSPORT,
    OPT_REQUESTS,
    OPT_ABORT_RATE,
    OPT_SEED,
    OPT_NO_GRAPHS,
    OPT_CONFIG,
    OPT_JSON,
    OPT_TIMEOUT,
    OPT_KILL_WORKER,
    OPT_KILL_AFTER,
    OPT_INJECT_FAULT,
    OPT_SHM_DIR,
    OPT_HELP,
};

static const struct option long_opts[] = {
    { "device", required_argument, NULL, OPT_DEVICE },
    { "transport", required_argument, NULL, OPT_TRANSPORT },
    { "requests", required_argument, NULL, OPT_REQUESTS },
    { "abort-rate", required_argument, NULL, OPT_ABORT_RATE },
    { "seed", required_argument, NULL, OPT_SEED },
    { "no-graphs", no_argument, NULL, OPT_NO_GRAPHS },
    { "config", required_argument, NULL, OPT_CONFIG },
    { "json", no_argument, NULL, OPT_JSON },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "kill-worker", required_argument, NULL, OPT_KILL_WORKER },
    { "kill-after", required_argument, NULL, OPT_KILL_AFTER },
    { "inject-fault", required_argument, NULL, OPT_INJECT_FAULT },
    { "shm-dir", required_argument, NULL, OPT_SHM_DIR },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 },
};

int demo_options_parse(int argc, char **argv, demo_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    demo_config_defaults(&opts->cfg);
    opts->device = MSTAR_DEVICE_CPU;
    opts->transport = DEMO_TRANSPORT_ARENA;
    opts->graphs = true;
    opts->timeout_s = 120.0;
    opts->kill_worker = -1;
    opts->kill_after = 4;
    long long requests = -1, seed = -1, v;
    optind = 0; /* a fresh scan (tests parse more than once) */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_DEVICE:
            if (strcmp(optarg, "host") == 0)
                opts->device = MSTAR_DEVICE_CPU;
            else if (strcmp(optarg, "cuda") == 0)
                opts->device = MSTAR_DEVICE_CUDA;
            else
                return bad("%s: '%s' is not a device (host or cuda)", "--device", optarg);
            break;
        case OPT_TRANSPORT:
            if (strcmp(optarg, "files") == 0)
                opts->transport = DEMO_TRANSPORT_FILES;
            else if (strcmp(optarg, "arena") == 0)
                opts->transport = DEMO_TRANSPORT_ARENA;
            else if (strcmp(optarg, "ucx-tcp") == 0)
                opts->transport = DEMO_TRANSPORT_UCX_TCP;
            else
                return bad("%s: '%s' is not a transport (files, arena or ucx-tcp)", "--transport",
                           optarg);
            break;
        case OPT_REQUESTS:
            if (!parse_long(optarg, 1, 1000000, &requests))
                return bad("%s: '%s' is not a count in [1, 1000000]", "--requests", optarg);
            break;
        case OPT_ABORT_RATE: {
            char *end;
            errno = 0;
            double r = strtod(optarg, &end);
            if (optarg[0] == '\0' || *end != '\0' || errno == ERANGE || !(r >= 0.0 && r <= 1.0))
                return bad("%s: '%s' is not a share in [0, 1]", "--abort-rate", optarg);
            opts->abort_rate = r;
            break;
        }
        case OPT_SEED:
            if (!parse_long(optarg, 0, INT64_MAX, &seed))
                return bad("%s: '%s' is not a non-negative integer", "--seed", optarg);
            break;
        case OPT_NO_GRAPHS:
            opts->graphs = false;
            break;
        case OPT_CONFIG:
            opts->config_path = optarg;
            break;
        case OPT_JSON:
            opts->json = true;
            break;
        case OPT_TIMEOUT:
            if (!parse_long(optarg, 1, 86400, &v))
                return bad("%s: '%s' is not a number of seconds in [1, 86400]", "--timeout",
                           optarg);
            opts->timeout_s = (double)v;
            break;
        case OPT_KILL_WORKER:
            if (!parse_long(optarg, 0, DEMO_WORKERS - 1, &v))
                return bad("%s: '%s' is not a worker rank (0 or 1)", "--kill-worker", optarg);
            opts->kill_worker = (int)v;
            break;
        case OPT_KILL_AFTER:
            if (!parse_long(optarg, 0, 1000000, &v))
                return bad("%s: '%s' is not a count in [0, 1000000]", "--kill-after", optarg);
            opts->kill_after = (int32_t)v;
            break;
        case OPT_INJECT_FAULT:
            if (strcmp(optarg, "corrupt-token") == 0)
                opts->inject_fault = DEMO_FAULT_CORRUPT_TOKEN;
            else if (strcmp(optarg, "leak-tensor") == 0)
                opts->inject_fault = DEMO_FAULT_LEAK_TENSOR;
            else
                return bad("%s: '%s' is not a fault (corrupt-token or leak-tensor)",
                           "--inject-fault", optarg);
            break;
        case OPT_SHM_DIR:
            /* Room for "/mstar-demo-<pid>-XXXXXX" in the run's 128-byte path. */
            if (optarg[0] != '/' || strlen(optarg) > 96)
                return bad("%s: '%s' is not an absolute path of at most 96 bytes", "--shm-dir",
                           optarg);
            opts->shm_dir = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            return 1;
        default:
            if (optopt != 0)
                return bad("%s%s: needs a value", "", argv[optind - 1]);
            return bad("%s'%s' is not an option", "", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad("%s'%s' is not an option (mstar demo takes no operands)", "", argv[optind]);
    if (opts->config_path != NULL && demo_config_load(opts->config_path, &opts->cfg) != MSTAR_OK) {
        fprintf(stderr, "mstar demo: --config %s\n", mstar_last_error());
        return 2;
    }
    if (requests > 0) {
        opts->cfg.requests = (int32_t)requests;
        if (opts->cfg.check_sample > opts->cfg.requests)
            opts->cfg.check_sample = opts->cfg.requests;
    }
    if (seed >= 0)
        opts->cfg.seed = (uint64_t)seed;
    if (demo_config_validate(&opts->cfg) != MSTAR_OK) {
        fprintf(stderr, "mstar demo: %s\n", mstar_last_error());
        return 2;
    }
    return 0;
}
