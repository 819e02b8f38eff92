/*
 * demo.h — `mstar demo`: a composite model served across worker processes, end to end.
 *
 * One driver process plays the api server, the conductor and the api server's preprocess
 * worker; two worker processes run one component each: an ENCODER (stateless, captured per
 * batch size through the graph runner) and a DECODER (the reference decode model with its paged
 * KV cache, continuous batching). Every request is a walk over the two:
 *
 *   preprocess ──prompt──▶ encoder ──enc_hidden──▶ decoder ──tokens──▶ api server
 *
 * with the control messages of design.md "Control messages" and the tensors over the chosen
 * transport. The parts fit together so: a configuration (defaults, a YAML file, the command line)
 * fixes the model and a seeded request load. The driver makes a private directory for the run,
 * forks the two workers and plays its three roles in one loop over the mesh, failures and shutdown
 * included. Each worker wires a mesh inbox to a communication manager and runs the per-request
 * protocol around its component: the encoder is a stateless node captured per batch size through
 * the graph runner; the decoder is the reference decode model (models/ref/) with a codebook lookup,
 * prefill and decode steps, and continuous batching. At the end an eager re-run of a sample
 * checks the outputs, a leak check finds nothing left behind, and the report prints what the
 * step and traffic counters saw (text or JSON). Each of these parts is a demo_*.c of its own.
 */
#ifndef MSTAR_EXAMPLES_DEMO_H
#define MSTAR_EXAMPLES_DEMO_H

#include "ref_model.h"

#include <stdio.h>

/* `mstar demo [options]`: the whole demo; returns the process exit code. */
int demo_main(int argc, char **argv);

/* ---- configuration ------------------------------------------------------------------------ */

#define DEMO_WORKERS   2
#define DEMO_MAX_SIZES 8 /* entries of one batch-size or token-length list */

typedef enum demo_component {
    DEMO_ENCODER = 0,
    DEMO_DECODER = 1,
} demo_component;

/* "encoder" / "decoder". */
const char *demo_component_name(demo_component c);

typedef struct demo_sizes {
    int64_t v[DEMO_MAX_SIZES];
    size_t n;
} demo_sizes;

/* The largest entry (0 for an empty list). */
int64_t demo_sizes_max(const demo_sizes *s);

typedef struct demo_config {
    demo_component worker_component[DEMO_WORKERS]; /* by worker rank */
    ref_model_config model; /* the decoder; the encoder shares vocab, hidden, mlp, norm_eps */
    int32_t encoder_layers;
    uint64_t encoder_seed;
    demo_sizes encoder_batch_sizes;
    demo_sizes encoder_token_lengths;
    demo_sizes decode_batch_sizes;
    demo_sizes prefill_batch_sizes;
    demo_sizes prefill_token_lengths;
    int32_t max_batch; /* most rows in one decode step */
    int32_t page_size;
    int32_t kv_pages; /* the sink page included */
    int32_t requests;
    int32_t concurrency; /* requests in flight at once */
    int32_t prompt_min, prompt_max;
    int32_t output_min, output_max;
    uint64_t seed;        /* prompts, lengths and abort choices */
    int32_t check_sample; /* requests the self-check runs again */
} demo_config;

/* The defaults: the reference model's default dimensions, 64 requests. */
void demo_config_defaults(demo_config *cfg);
/* Load `path` over *cfg (keys absent from the file keep their value) and validate the result.
 * MSTAR_EINVAL with "FILE:LINE: key: what is wrong" (or the YAML parser's message). */
mstar_status demo_config_load(const char *path, demo_config *cfg);
/* The checks that span fields (after the file and the command line): MSTAR_EINVAL naming them. */
mstar_status demo_config_validate(const demo_config *cfg);
/* The worker rank running `c`. */
int demo_config_worker_of(const demo_config *cfg, demo_component c);

typedef enum demo_transport {
    DEMO_TRANSPORT_FILES = 0,
    DEMO_TRANSPORT_ARENA = 1,
    DEMO_TRANSPORT_UCX_TCP = 2,
} demo_transport;

const char *demo_transport_name(demo_transport t);

/* Test-only faults (--inject-fault), each planted in the last component's worker, so that the
 * tests can see the run's own checks fail: CORRUPT_TOKEN changes token 0 of request 0's result
 * (the self-check always reruns request 0), LEAK_TENSOR keeps request 0's input tensor. */
typedef enum demo_fault {
    DEMO_FAULT_NONE = 0,
    DEMO_FAULT_CORRUPT_TOKEN,
    DEMO_FAULT_LEAK_TENSOR,
} demo_fault;

typedef struct demo_options {
    demo_config cfg;
    const char *config_path; /* NULL: defaults only */
    mstar_device_type device;
    demo_transport transport;
    double abort_rate; /* 0..1 */
    bool graphs;
    bool json;
    double timeout_s;        /* the whole serving phase */
    int kill_worker;         /* fault injection: -1 none, else a worker rank killed with SIGKILL */
    int32_t kill_after;      /* ... once this many requests completed */
    demo_fault inject_fault; /* test-only: a fault the self-check or leak check must catch */
    const char *shm_dir;     /* --shm-dir: where the run's shm directory is made; NULL:
                                $MSTAR_SHM_DIR, else /dev/shm, else /tmp */
} demo_options;

/* Parse argv (after "demo") into *opts, loading --config. Returns 0 to run, 1 when --help was
 * printed, 2 on a usage or config error (already printed to stderr). */
int demo_options_parse(int argc, char **argv, demo_options *opts);

/* ---- requests ------------------------------------------------------------------------------ */

typedef enum demo_abort_point {
    DEMO_ABORT_NONE = 0,
    DEMO_ABORT_AT_SUBMIT,     /* right after the walk starts */
    DEMO_ABORT_AFTER_ENCODER, /* once the encoder reported its part done */
    DEMO_ABORT_MID_DECODE,    /* a few milliseconds into decoding */
} demo_abort_point;

const char *demo_abort_point_name(demo_abort_point p);

typedef struct demo_request_spec {
    int32_t prompt_len;
    int32_t *prompt; /* [prompt_len] token ids */
    int32_t max_new;
    demo_abort_point abort_point;
    int32_t abort_delay_ms; /* MID_DECODE only */
} demo_request_spec;

/* n requests from cfg's seed: lengths uniform in their ranges, tokens uniform in the
 * vocabulary, a share abort_rate of them aborted at a random point. *out is malloc'd. */
mstar_status demo_requests_generate(const demo_config *cfg, double abort_rate,
                                    demo_request_spec **out);
void demo_requests_free(demo_request_spec *specs, int32_t n);

/* ---- names on the mesh --------------------------------------------------------------------- */

#define DEMO_API_SERVER "api_server"
#define DEMO_CONDUCTOR  "conductor"
#define DEMO_PREPROCESS "api_server_preprocess_worker"
#define DEMO_WALK       "demo"

/* Signals (edge names) of the walk. */
#define DEMO_SIG_PROMPT "prompt"
#define DEMO_SIG_HIDDEN "enc_hidden"
#define DEMO_SIG_TOKENS "tokens"
/* The key of a worker's report that names the signal of a tensor it still held at the end:
 * this prefix, then the signal (the report carries only integers). */
#define DEMO_HELD_SIGNAL_KEY "held_signal:"

/* Request info keys (NEW_REQUEST kv). */
#define DEMO_KV_PROMPT_LEN "prompt_len"
#define DEMO_KV_MAX_NEW    "max_new_tokens"

/* "worker_<rank>" */
void demo_worker_entity(int rank, char out[32]);

/* Seconds on the monotonic clock. */
double demo_now(void);

#endif
