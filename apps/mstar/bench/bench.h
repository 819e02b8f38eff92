/*
 * bench.h — the benchmark suites behind `mstar bench <suite>` (apps/mstar/cli/cmd_bench.c). Each
 * suite measures its figures and a baseline in the same run, fills a result struct, and has three
 * faces over it: a text table (its own command), JSON (--json, and report.json), and the issue
 * targets it checks. `mstar bench all` (bench_all.c) runs every suite in one process and writes
 * the Markdown report with plots (bench_report.c).
 */
#ifndef MSTAR_BENCH_H
#define MSTAR_BENCH_H

#include "mstar/mstar.h"

#include <stdio.h>
#include <sys/types.h>

/* The command of each suite: the arguments after `bench`, a main()-style exit code. */
int mstar_bench_wire(int argc, char **argv);
int mstar_bench_bookkeeper(int argc, char **argv);
int mstar_bench_transport(int argc, char **argv);
int mstar_bench_graphs(int argc, char **argv);
/* bench_ucx.c: UCX get and AM reads against a raw loopback TCP stream. */
int mstar_bench_ucx(int argc, char **argv);
/* bench_all.c: every suite, then the report. */
int mstar_bench_all(int argc, char **argv);

/* bench_python.c: the Python package's transport suite (python/bench/bench_transport.py), run by
 * `mstar bench all` when the package was built. available: false, with the reason as the last
 * error, when it was not or its interpreter or script is missing. run: writes
 * DIR/python.{json,txt}; report: appends the table to DIR/report.md and prints it on `out`. */
bool mstar_bench_python_available(void);
mstar_status mstar_bench_python_run(const char *out_dir, bool quick);
void mstar_bench_python_report(const char *out_dir, FILE *out);

/* ---- shared helpers (bench_util.c) ---------------------------------------------- */

/* Progress lines on stderr ("[  12.3 s] transport: arena, 4 MiB") so that a long run does not
 * look hung; off until enabled. */
void mstar_bench_progress_enable(bool on);
void mstar_bench_progress(const char *suite, const char *fmt, ...) MSTAR_PRINTF(2, 3);

/* The q-quantile (0..1) of v[0..n), n > 0: v sorted in place, the element nearest q * (n - 1). */
double mstar_bench_percentile(double *v, size_t n, double q);
/* The mean of v[0..n); 0 when n is 0. */
double mstar_bench_mean(const double *v, size_t n);

/* "4 KiB", "64 MiB". */
void mstar_bench_size_name(uint64_t bytes, char *buf, size_t cap);

/* `,"key":v` in a JSON object: v with `digits` significant digits, null when not finite
 * (core/json.h writes the values). */
void mstar_bench_json_field(FILE *out, const char *key, double v, int digits);

/* [--json] [--quick], the options of the simplest suites: false, after printing `usage` on
 * stderr, for anything else. */
bool mstar_bench_parse_flags(int argc, char **argv, const char *usage, bool *json, bool *quick);

/* ---- issue targets -------------------------------------------------------------------------- */

typedef enum mstar_bench_verdict {
    MSTAR_BENCH_MET = 0,
    MSTAR_BENCH_NOT_MET = 1,
    MSTAR_BENCH_NOT_APPLICABLE = 2, /* measured, but the bar is for another device */
} mstar_bench_verdict;

typedef struct mstar_bench_target {
    const char *name; /* what is compared, e.g. "arena throughput at >= 1 MiB / memcpy" */
    const char *bar;  /* e.g. ">= 0.45x" */
    double measured;  /* the figure held against the bar */
    char shown[64];   /* that figure as the report shows it, with where it was worst */
    mstar_bench_verdict verdict;
} mstar_bench_target;

const char *mstar_bench_verdict_name(mstar_bench_verdict v); /* "met", "NOT met", "n/a" */
void mstar_bench_targets_print(const mstar_bench_target *t, size_t n, FILE *out);

/* ---- wire ----------------------------------------------------------------------------------- */

#define MSTAR_BENCH_WIRE_CASES 3

typedef struct mstar_bench_wire_row {
    const char *message;
    size_t bytes;
    double memcpy_ns, check_ns, encode_ns, decode_ns; /* per message; memcpy, check: baselines */
} mstar_bench_wire_row;

typedef struct mstar_bench_wire_result {
    int rounds;
    long iters;
    mstar_bench_wire_row rows[MSTAR_BENCH_WIRE_CASES];
} mstar_bench_wire_result;

mstar_status mstar_bench_wire_run(bool quick, mstar_bench_wire_result *out);
void mstar_bench_wire_json(const mstar_bench_wire_result *r, FILE *out);

/* ---- bookkeeper ----------------------------------------------------------------------------- */

#define MSTAR_BENCH_BOOKKEEPER_ROWS 4

typedef struct mstar_bench_bookkeeper_result {
    int window;
    long pairs;
    struct {
        const char *name;
        double pairs_per_s;
    } rows[MSTAR_BENCH_BOOKKEEPER_ROWS]; /* rows[0]: the baseline (the bare hash map) */
} mstar_bench_bookkeeper_result;

mstar_status mstar_bench_bookkeeper_run(bool quick, mstar_bench_bookkeeper_result *out);
void mstar_bench_bookkeeper_json(const mstar_bench_bookkeeper_result *r, FILE *out);
/* bookkeeper >= 5 M pairs/s. */
size_t mstar_bench_bookkeeper_targets(const mstar_bench_bookkeeper_result *r,
                                      mstar_bench_target *out);

/* ---- floor (bench_floor.c) ------------------------------------------------------------------ */

/* What a process used: CPU time (user + system) and context switches, voluntary (it slept) and
 * involuntary (it was preempted), over all its threads; or the same per round trip. */
typedef struct mstar_bench_usage {
    double cpu_us;
    double vol_csw, invol_csw;
} mstar_bench_usage;

/* What the round trips of a measured loop cost each side, per round trip. */
typedef struct mstar_bench_cost {
    mstar_bench_usage self; /* the measuring process (the producer) */
    mstar_bench_usage peer; /* the other one (the consumer) */
} mstar_bench_cost;

/* The counters of both sides at the start of a loop. */
typedef struct mstar_bench_cost_clock {
    pid_t peer;
    mstar_bench_usage self, other;
} mstar_bench_cost_clock;

/* Any process of this user: its CPU-time clock and /proc/<pid>/task/x/status. */
void mstar_bench_usage_sample(pid_t pid, mstar_bench_usage *out);
/* (after - before) / n. */
void mstar_bench_usage_per(const mstar_bench_usage *before, const mstar_bench_usage *after,
                           double n, mstar_bench_usage *out);
void mstar_bench_cost_begin(mstar_bench_cost_clock *c, pid_t peer);
/* What both sides used since begin, per each of n round trips. */
void mstar_bench_cost_end(const mstar_bench_cost_clock *c, double n, mstar_bench_cost *out);

/* The peer's CPU time as the peer reads it itself. Read from another process, a process's CPU
 * clock leaves out what its running threads used since the scheduler last accounted for them
 * (the last tick or switch): exact for a peer that sleeps between round trips, but a peer that
 * spins through a loop shorter than a tick read 0. So the peer samples its own clock when it
 * reaches the two points the measuring side marks (its own numbering: a round trip's index, a
 * request id), and publishes them in a page both share (made before the fork). */
typedef struct mstar_bench_peer_cpu mstar_bench_peer_cpu;
/* A shared page, or NULL (then the peer's CPU stays as sampled from outside). */
mstar_bench_peer_cpu *mstar_bench_peer_cpu_create(void);
void mstar_bench_peer_cpu_destroy(mstar_bench_peer_cpu *pc);
/* Measuring side: sample at `begin` and at `end` (forgetting earlier samples). */
void mstar_bench_peer_cpu_arm(mstar_bench_peer_cpu *pc, uint64_t begin, uint64_t end);
/* Peer: it has reached point `at` (sampled when it is one of the marks). */
void mstar_bench_peer_cpu_note(mstar_bench_peer_cpu *pc, uint64_t at);
/* Measuring side: once the peer has passed `end`, its CPU time between the marks / n into
 * out->peer.cpu_us; nothing when a sample is missing. */
void mstar_bench_peer_cpu_apply(const mstar_bench_peer_cpu *pc, double n, mstar_bench_cost *out);

/* The library calls of one handoff, each timed where it runs (mstar bench transport --size N
 * --profile; bench_phases.c). */
typedef enum mstar_bench_phase {
    MSTAR_BENCH_PHASE_STORE,   /* producer: mstar_comm_store_and_return_tensor_info */
    MSTAR_BENCH_PHASE_STAGE,   /* producer: mstar_comm_increment_ref + register_for_send */
    MSTAR_BENCH_PHASE_BUILD,   /* producer: the INPUT_SIGNALS message (mstar_msg_add_edge) */
    MSTAR_BENCH_PHASE_SEND,    /* producer: mstar_mesh_send (encode, ring, wake) */
    MSTAR_BENCH_PHASE_ACK,     /* producer: mstar_comm_handle_message of the TENSOR_RECEIVED */
    MSTAR_BENCH_PHASE_RECEIVE, /* consumer: mstar_mesh_recv of INPUT_SIGNALS (ring, decode) */
    MSTAR_BENCH_PHASE_READ,    /* consumer: mstar_comm_start_read_tensors (or _views) */
    MSTAR_BENCH_PHASE_COLLECT, /* consumer: mstar_comm_get_ready_tensors (the ACK sent) */
    MSTAR_BENCH_PHASE_RELEASE, /* consumer: mstar_comm_dereference + cleanup_request */
    MSTAR_BENCH_PHASES
} mstar_bench_phase;

/* Per phase: the calls timed and their p50 / p99; clock_us, what timing one call adds. */
typedef struct mstar_bench_phase_row {
    uint32_t calls[MSTAR_BENCH_PHASES];
    double p50_us[MSTAR_BENCH_PHASES], p99_us[MSTAR_BENCH_PHASES];
    double clock_us;
} mstar_bench_phase_row;

typedef struct mstar_bench_phases mstar_bench_phases;
const char *mstar_bench_phase_name(mstar_bench_phase phase);
bool mstar_bench_phase_on_producer(mstar_bench_phase phase);
/* A shared page for a producer and the consumer it forks next, disarmed; NULL on failure. */
mstar_bench_phases *mstar_bench_phases_create(void);
void mstar_bench_phases_destroy(mstar_bench_phases *ph);
/* Producer: time calls from now on (forgetting earlier samples), or stop. */
void mstar_bench_phases_arm(mstar_bench_phases *ph, bool on);
/* Either side, around a call: begin returns 0 (and end records nothing) while disarmed or for a
 * NULL page, so an untimed run reads no clock. */
uint64_t mstar_bench_phase_begin(const mstar_bench_phases *ph);
void mstar_bench_phase_end(mstar_bench_phases *ph, mstar_bench_phase phase, uint64_t begin);
/* Record one sample of `ns`; past the page's room, samples are dropped. */
void mstar_bench_phases_add(mstar_bench_phases *ph, mstar_bench_phase phase, uint64_t ns);
/* Measuring side, once the peer is past its last timed call. */
void mstar_bench_phases_summarize(const mstar_bench_phases *ph, mstar_bench_phase_row *out);

/* A ping-pong of 4 bytes through shared memory between this process and a forked one. */
typedef struct mstar_bench_floor {
    double p50_us, p99_us; /* round trip */
    mstar_bench_cost cost;
} mstar_bench_floor;

/* Whether a /proc/<pid>/stat line says the process sleeps ('S', the state after the name in
 * parentheses, which may itself hold parentheses and spaces). The futex floor posts only to a
 * side that does. */
bool mstar_bench_stat_sleeping(const char *line);

/* `busy`: both sides poll the page; else the waiting side sleeps on a futex until woken. */
mstar_status mstar_bench_floor_run(bool busy, int iters, mstar_bench_floor *out);

#define MSTAR_BENCH_CALLS_CPUS 4

/* The calls of the arena's 4 KiB handoff with both ends in one thread, on each of the first
 * MSTAR_BENCH_CALLS_CPUS CPUs it may use: what the library's work of a round trip costs there
 * now, without a cache line moving between cores or a side waiting. */
typedef struct mstar_bench_calls {
    int ncpus;
    int cpu[MSTAR_BENCH_CALLS_CPUS];   /* -1: the thread's affinity could not be set */
    double us[MSTAR_BENCH_CALLS_CPUS]; /* median µs a handoff over rounds of handoffs */
} mstar_bench_calls;

/* Both ends over meshes and managers of their own in ipc_dir and shm_dir (bench_calls.c); the
 * thread's affinity is as it was on return. */
mstar_status mstar_bench_calls_run(const char *ipc_dir, const char *shm_dir, bool quick,
                                   mstar_bench_calls *out);
/* The fastest and the slowest CPU's figure. */
void mstar_bench_calls_range(const mstar_bench_calls *c, double *lo, double *hi);
/* "3.85 us on CPU 0, 6.04 us on CPU 1" (`bold`: each figure in markdown's **) into buf. */
void mstar_bench_calls_format(const mstar_bench_calls *c, const char *unit, bool bold, char *buf,
                              size_t cap);
/* `,"calls_4k":[{"cpu":0,"us":3.85},...]` */
void mstar_bench_calls_json(const mstar_bench_calls *c, FILE *out);

/* ---- transport ------------------------------------------------------------------------------ */

#define MSTAR_BENCH_TRANSPORT_SIZES 7 /* 4 KiB .. 256 MiB; host runs stop at 64 MiB */
#define MSTAR_BENCH_TRANSPORT_KINDS 2
#define MSTAR_BENCH_TRANSPORT_SPINS 2

typedef struct mstar_bench_transport_row {
    uint64_t bytes;
    double rt_p50_us, rt_p99_us; /* one handoff's round trip */
    double rt_mean_us;           /* its mean: what the CPU time per handoff compares with */
    double gbps;                 /* sustained, in_flight handoffs in flight */
    double tcp_gbps;             /* baseline of a UCX transport: a raw loopback TCP stream; 0 */
    mstar_bench_cost cost;       /* of one handoff of the round trips, producer and consumer */
    bool has_phases;             /* --profile: the calls of the round trips, timed */
    mstar_bench_phase_row phases;
} mstar_bench_transport_row;

typedef struct mstar_bench_transport_result {
    bool has_baselines;              /* memcpy, ZeroMQ and the mesh's round trips were measured */
    double memcpy_gbps;              /* baseline: one thread, 64 MiB */
    double zmq_p50_us, zmq_p99_us;   /* baseline: raw ZeroMQ ipc ping-pong of 64 bytes */
    double ring_p50_us, ring_p99_us; /* the mesh's 4 KiB message round trip over rings */
    double mesh_zmq_p50_us, mesh_zmq_p99_us; /* the same over ZeroMQ (MSTAR_MESH_RING=0) */
    /* The floor: 4 bytes between two processes through shared memory, the waiting side asleep
     * on a futex (futex) or polling (busy). */
    mstar_bench_floor futex, busy;
    /* With the arena: its 4 KiB handoff's calls with both ends in one thread, per CPU: this
     * machine's CPU work of a round trip, which the spinning round trip moves with. */
    bool has_calls;
    mstar_bench_calls calls;
    int in_flight;   /* tensors */
    int per_message; /* tensors in each handoff's message: 1 but in a --size run's --batch */
    int nsizes;      /* 4 KiB to 64 MiB (--device cuda: 256 MiB); --quick: to 16 MiB */
    int nkinds;
    mstar_transport_kind kinds[MSTAR_BENCH_TRANSPORT_KINDS];
    mstar_bench_transport_row rows[MSTAR_BENCH_TRANSPORT_KINDS][MSTAR_BENCH_TRANSPORT_SIZES];
    /* With the arena among the kinds: the arena again with a loan for every output and a view
     * for every read (no byte copied), in the same run. --device cuda: the CUDA IPC route again,
     * every read a view of the producer's device memory. */
    bool has_views;
    mstar_bench_transport_row views[MSTAR_BENCH_TRANSPORT_SIZES];
    /* With the arena: its 4 KiB handoff with the control messages over ZeroMQ instead of the
     * rings (every other row goes over the rings, MSTAR_MESH_RING=1). */
    bool has_arena_zmq;
    mstar_bench_transport_row arena_zmq;
    /* With the arena: its 4 KiB handoff with each side spinning on its rings before it sleeps
     * for spin_us[i] (MSTAR_RING_SPIN_US; the producer in mstar_mesh_recv, the consumer's loop in
     * mstar_mesh_spin): spins[0] the library's default, spins[1] no spinning, or with a
     * default of 0 a spin of 1000 µs. */
    int nspins;
    int spin_us[MSTAR_BENCH_TRANSPORT_SPINS];
    mstar_bench_transport_row spins[MSTAR_BENCH_TRANSPORT_SPINS];
    /* --device cuda: kinds are the arena twice, over the CUDA IPC route (cuda_ipc[k]) and
     * staged; baselines per size in one process on cuda:0 instead of memcpy and ZeroMQ. */
    bool device;
    bool cuda_ipc[MSTAR_BENCH_TRANSPORT_KINDS];
    double d2d_gbps[MSTAR_BENCH_TRANSPORT_SIZES]; /* device-to-device copy */
    /* the same into in_flight + 1 buffers in turn, as the route's reads land (its ceiling) */
    double d2d_spread_gbps[MSTAR_BENCH_TRANSPORT_SIZES];
    double staged_gbps[MSTAR_BENCH_TRANSPORT_SIZES]; /* pinned D2H then H2D */
    double host_rt_p50_us, host_rt_p99_us; /* the arena's 4 KiB round trip of host tensors */
    /* --device cuda with --transport files or a UCX kind: kinds are that transport twice, rows[0]
     * device tensors and rows[1] host tensors, in one run (no baselines, no CUDA IPC route);
     * `standin`: the host backend stood in for cuda:0 (--device host, tests). */
    bool host_pair;
    bool standin;
} mstar_bench_transport_result;

/* kinds: files and/or the arena, or a UCX kind alone (measured with its TCP stream baseline). */
mstar_status mstar_bench_transport_run(const mstar_transport_kind *kinds, int nkinds, bool quick,
                                       mstar_bench_transport_result *out);
/* What a run of one size measures (`mstar bench transport --size`). */
typedef struct mstar_bench_size_options {
    mstar_transport_kind kind; /* files or arena */
    uint64_t size;             /* bytes of each tensor */
    bool quick;
    bool profile;    /* time each library call of the round trips on its side (row.phases): the
                        timers' clock reads add to the round trips it reports */
    bool cuda;       /* device tensors on cuda:0 over the arena's CUDA IPC route */
    int per_message; /* tensors in each INPUT_SIGNALS: 1, 2, 4 or 8 (--batch) */
} mstar_bench_size_options;

/* One size of the handoff (the arena with loans and views too; with `cuda`, the CUDA IPC route),
 * with no baselines and so no targets: for a caller that interleaves its own runs with these (the
 * Python suite), or looks at one size's calls. MSTAR_ENOTSUP for `cuda` without CUDA. */
mstar_status mstar_bench_transport_size_run(const mstar_bench_size_options *o,
                                            mstar_bench_transport_result *out);
void mstar_bench_transport_json(const mstar_bench_transport_result *r, FILE *out);
/* Device tensors on cuda:0 between two processes: the arena over the CUDA IPC route and staged,
 * and the in-process baselines. MSTAR_ENOTSUP without CUDA. */
mstar_status mstar_bench_transport_cuda_run(bool quick, mstar_bench_transport_result *out);
/* Device tensors (on cuda:0, or the host backend standing in when `standin`) over `kind` (files
 * or a UCX kind) beside host tensors over it, two processes each, 4 KiB to 64 MiB (--quick: to
 * 16 MiB). Printed and written as JSON by the cuda functions. */
mstar_status mstar_bench_transport_device_pair_run(mstar_transport_kind kind, bool standin,
                                                   bool quick, mstar_bench_transport_result *out);
void mstar_bench_transport_cuda_json(const mstar_bench_transport_result *r, FILE *out);
/* With the arena measured: its throughput at >= 1 MiB >= 0.45x memcpy, its 4 KiB round trip
 * <= 3x the ZeroMQ ping-pong, and with loans and views its throughput at >= 1 MiB >= 3x memcpy;
 * its 4 KiB round trip with the default spin <= 1.1x the futex ping-pong, and spinning <= 5 µs.
 * With UCX: its throughput at >= 1 MiB >= 0.6x the TCP stream.
 * Device runs: the CUDA IPC route at >= 16 MiB >= 0.8x the device-to-device copy, the staged
 * route at >= 16 MiB >= 0.8x pinned D2H + H2D, and the 4 KiB round trip over CUDA IPC <= 1.5x
 * the host arena's. Device runs over UCX beside host tensors: the 4 KiB round trip <= 2x the
 * host tensors', and the throughput at >= 1 MiB >= 0.8x theirs. */
size_t mstar_bench_transport_targets(const mstar_bench_transport_result *r,
                                     mstar_bench_target *out);

/* ---- ucx ------------------------------------------------------------------------------------ */

#define MSTAR_BENCH_UCX_MAX_SIZES 16

typedef struct mstar_bench_ucx_options {
    uint64_t min_size, max_size; /* by x4 */
    uint64_t volume;             /* bytes moved per throughput point */
} mstar_bench_ucx_options;

typedef struct mstar_bench_ucx_row {
    uint64_t bytes;
    double tcp_gbps, get_gbps, am_gbps; /* tcp: baseline, a raw loopback stream */
    double tcp_us, get_us, am_us;       /* one read (one request/reply for tcp), median */
} mstar_bench_ucx_row;

typedef struct mstar_bench_ucx_result {
    mstar_bench_ucx_options opts;
    char tls[64];         /* UCX_TLS */
    const char *protocol; /* the engine's default read protocol */
    size_t nrows;
    mstar_bench_ucx_row rows[MSTAR_BENCH_UCX_MAX_SIZES];
} mstar_bench_ucx_result;

/* {4 KiB, 64 MiB, 256 MiB}; quick: up to 4 MiB, 16 MiB per point. */
void mstar_bench_ucx_options_init(mstar_bench_ucx_options *o, bool quick);
mstar_status mstar_bench_ucx_run(const mstar_bench_ucx_options *o, mstar_bench_ucx_result *out);
void mstar_bench_ucx_json(const mstar_bench_ucx_result *r, FILE *out);
/* get and AM each >= 0.6x the TCP stream at >= 1 MiB. */
size_t mstar_bench_ucx_targets(const mstar_bench_ucx_result *r, mstar_bench_target *out);

/* ---- graphs --------------------------------------------------------------------------------- */

#define MSTAR_BENCH_GRAPHS_SIZES 4

typedef struct mstar_bench_graphs_row {
    int64_t bs;
    double eager_step_us, replay_step_us; /* whole steps, wall */
    double eager_fwd_us, runner_us;       /* one prepared step re-run, wall */
    double raw_us;                        /* baseline: one raw launch, wall */
    double overhead_us, launch_us;        /* host time: select + stage + launch; one raw launch */
    size_t graph_nodes; /* of the bucket's graph: kernels and copies on CUDA, calls on the host */
} mstar_bench_graphs_row;

/* --profile: the time of each op of one eager step, summed by op name. */
#define MSTAR_BENCH_GRAPHS_MAX_OPS 16

typedef struct mstar_bench_graphs_op {
    const char *op; /* a literal of the model's forward */
    int calls;
    double total_us; /* GPU time (CUDA events) on CUDA, wall time on the host */
} mstar_bench_graphs_op;

typedef struct mstar_bench_graphs_profile {
    int64_t bs;
    size_t n_ops;
    mstar_bench_graphs_op ops[MSTAR_BENCH_GRAPHS_MAX_OPS];
} mstar_bench_graphs_profile;

typedef struct mstar_bench_graphs_options {
    bool cuda, quick, profile;
    bool mlp;               /* the mlp bench model instead of the reference decoder */
    int32_t layers, hidden; /* mlp sizes; 0: the defaults */
} mstar_bench_graphs_options;

typedef struct mstar_bench_graphs_result {
    char device[32]; /* the backend's name */
    char model[128]; /* the model's sizes, the requests and their prompts */
    bool cuda;
    int iters;
    mstar_bench_graphs_row rows[MSTAR_BENCH_GRAPHS_SIZES];
    bool profiled; /* profiles[] is filled, one per batch size */
    mstar_bench_graphs_profile profiles[MSTAR_BENCH_GRAPHS_SIZES];
} mstar_bench_graphs_result;

mstar_status mstar_bench_graphs_run(const mstar_bench_graphs_options *o,
                                    mstar_bench_graphs_result *out);
/* bench_graphs_mlp.c: the same measurements on the mlp bench model (models/ref/mlp_model.h). */
mstar_status mstar_bench_graphs_mlp_run(const mstar_bench_graphs_options *o,
                                        mstar_bench_graphs_result *out);
/* A model node as the graphs suite drives it: each model's file adapts its node to these, and
 * bench_graphs.c measures any of them the same way. */
struct ref_profile;
typedef struct mstar_bench_graphs_model {
    void *self;                 /* the adapter's state, passed to each call */
    const char *walk;           /* the captured walk */
    mstar_stream *stream;       /* the node's compute stream */
    mstar_graph_runner *runner; /* the node's runner */
    /* A whole frozen step over bs rows, replayed when graphs and a bucket fits (*replayed). */
    mstar_status (*step)(void *self, int64_t bs, bool graphs, bool *replayed);
    /* Begin such a step without launching it; *slot: its lease's slot, -1 when eager. */
    mstar_status (*begin)(void *self, int64_t bs, bool graphs, int32_t *slot);
    mstar_status (*launch)(void *self); /* enqueue the begun step's forward again */
    mstar_status (*end)(void *self);    /* commit and release the begun step */
    void (*set_profile)(void *self, struct ref_profile *p); /* time each op into p (NULL: off) */
} mstar_bench_graphs_model;

/* Clear *out, create the backend the options name (*b, destroyed by the caller) and set the
 * result's device, cuda flag and iterations. */
mstar_status mstar_bench_graphs_start(const mstar_bench_graphs_options *o,
                                      mstar_bench_graphs_result *out, mstar_backend **b);
/* Every measurement of out->rows at each batch size, and with prof (not NULL) one profiled
 * eager step each into out->profiles. */
mstar_status mstar_bench_graphs_measure_all(const mstar_bench_graphs_model *m,
                                            struct ref_profile *prof,
                                            mstar_bench_graphs_result *out);
void mstar_bench_graphs_json(const mstar_bench_graphs_result *r, FILE *out);
/* Runner host overhead <= 1.5x the raw launch call, replay <= 1.05x the raw replay (worst batch
 * size); bars for CUDA, not applicable on the host backend. */
size_t mstar_bench_graphs_targets(const mstar_bench_graphs_result *r, mstar_bench_target *out);

/* The most targets one suite reports. */
#define MSTAR_BENCH_MAX_TARGETS 6

#endif
