/*
 * mstar/planner.h — deciding, before anything is captured, which buckets a device can afford to
 * capture, and keeping every rank of a group in the same decision (design.md "Executable memory",
 * "Planning").
 *
 *   - mstar_plan_captures: the pool model of design.md "Planning". Each graph pool holds what
 *     every one of its graphs keeps plus the most any single graph needs beyond that; each graph
 *     also holds executable memory outside every pool, part of which a walk's held measurement
 *     copies pay for. Buckets are added cheapest first while the largest eager step still fits
 *     beside them.
 *   - mstar_exec_memory_estimate: executable memory per graph node from free-memory readings
 *     taken around instantiated copies of a graph (design.md "Executable memory"), kept apart
 *     from the device so the arithmetic is testable on any machine.
 *   - Rank groups and mstar_agree_across_ranks: an elementwise min or max of an int64 vector
 *     over every rank (design.md "Rank agreement"), by a single-rank identity, the control mesh
 *     (one process per rank) or NCCL.
 *   - mstar_fail_if_graphs_required: MSTAR_REQUIRE_CUDA_GRAPHS=1 turns a dropped bucket into a
 *     startup failure (design.md "Startup").
 *
 * Everything here is plain data in, plain data out, except the rank groups (opaque handles).
 * Byte counts are uint64_t. Nothing keeps a pointer to its arguments past the call.
 */
#ifndef MSTAR_PLANNER_H
#define MSTAR_PLANNER_H

#include "mstar/core.h"
#include "mstar/device.h"
#include "mstar/graphs.h"
#include "mstar/mesh.h"
#include "mstar/piecewise.h"
#include "mstar/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Capture costs and the capture plan (design.md "Planning")
 * ------------------------------------------------------------------------------------------- */

/* What capturing one bucket costs (bytes unless noted). */
typedef struct mstar_capture_cost {
    uint64_t peak;    /* eager warm-up peak above baseline, max over the bucket's slots */
    bool has_graph;   /* false: no throwaway capture succeeded; the bucket cannot be planned */
    uint64_t graph;   /* pool bytes one capture needs, kept + scratch (own, or the walk's
                       * largest's; see mstar_size_captures) */
    uint64_t kept;    /* pool bytes still allocated after one capture; <= graph */
    uint32_t slots;   /* graphs the bucket captures, >= 1 */
    uint64_t outside; /* bytes one graph holds outside the allocator (executable memory) */
    /* The walk's executable-memory measurement whose held copies may pay for this bucket's
     * `outside`: an index into the `credits` given to mstar_plan_captures; -1 for none. Every
     * bucket of a walk names the same index, so the walk's copies pay once across them. */
    int32_t executable;
} mstar_capture_cost;

/* One sized bucket. The key's strings are borrowed for the call. Buckets of equal cost are taken
 * in the order (bs, num_tokens), pool name, config_idx, walk, cg_key_info (none first): all
 * derived from the configs, so every rank gets the same plan. */
typedef struct mstar_bucket_cost {
    mstar_bucket_key key;
    uint32_t config_idx; /* the config's position in its runner's config list */
    mstar_capture_cost cost;
} mstar_bucket_cost;

/* One graph pool and the sized buckets that capture into it. */
typedef struct mstar_pool_costs {
    const char *name; /* a valid name, unique on the device */
    const mstar_bucket_cost *buckets;
    size_t nbuckets;
} mstar_pool_costs;

/* The plan for one pool. `planned` has one entry per bucket of the matching mstar_pool_costs, in
 * the same order; every bucket not planned is a planned drop. */
typedef struct mstar_pool_plan {
    uint64_t predicted; /* pool bytes: kept by every planned graph + the largest extra */
    uint64_t outside;   /* executable bytes the planned graphs add beyond the reused copies */
    size_t nplanned;
    bool *planned;
} mstar_pool_plan;

/* The capture plan: which buckets each pool captures, chosen before any is. Owns `pools`
 * (one per input pool, same order) and each pool's `planned`; release with
 * mstar_capture_plan_clear. */
typedef struct mstar_capture_plan {
    uint64_t floor; /* the largest eager step, kept free beside the planned graphs */
    size_t npools;
    mstar_pool_plan *pools;
} mstar_capture_plan;

/* Graph memory: what one captured graph holds, in its pool and outside the allocator. */
typedef struct mstar_graph_memory {
    uint64_t pool;
    uint64_t outside;
} mstar_graph_memory;

/* No bound on executable reuse. */
#define MSTAR_PLAN_REUSE_UNBOUNDED UINT64_MAX

/*
 * Reference plan_captures(pools, free, reusable) (design.md "Planning").
 *
 *   floor = max peak over every bucket. Candidates (buckets with a graph) in ascending standalone
 *   cost slots·kept + (graph − kept) + slots·outside, ties in the key order above. For each in
 *   turn: pool_add = slots·kept + max(0, (graph − kept) − extra_max[pool]); exec_need =
 *   slots·outside; reuse = min(exec_need, credit left of its walk, reusable − reuse so far);
 *   Δ = pool_add + exec_need − reuse. Stop at the first candidate with total + Δ + floor > free
 *   (later ones are not tried); otherwise plan it.
 *
 * `credits[i]` is the held bytes of measurement i's copies (the executable measurement's held
 * bytes); `reusable` bounds the reuse summed over all buckets, MSTAR_PLAN_REUSE_UNBOUNDED for none
 * (0 means no reuse at all). On success *out is filled (any previous content is not freed).
 * MSTAR_EINVAL names the pool or bucket on bad input (an invalid or duplicate name or key, slots 0,
 * kept > graph, an executable index out of range); MSTAR_ERANGE if a cost overflows 64 bits.
 */
MSTAR_API mstar_status mstar_plan_captures(const mstar_pool_costs *pools, size_t npools,
                                           uint64_t free_bytes, const uint64_t *credits,
                                           size_t ncredits, uint64_t reusable,
                                           mstar_capture_plan *out);

/* Free what a plan owns and zero it. Safe on a zeroed plan. */
MSTAR_API void mstar_capture_plan_clear(mstar_capture_plan *plan);

/* ---------------------------------------------------------------------------------------------
 * Executable memory (design.md "Executable memory")
 * ------------------------------------------------------------------------------------------- */

#define MSTAR_EXEC_PIECE_BYTES                                                      \
    ((uint64_t)2 << 20)               /* the driver maps executable memory in these \
                                       */
#define MSTAR_EXEC_COUNTS           3 /* counts per measurement */
#define MSTAR_EXEC_COPIES_PER_COUNT 8 /* copies instantiated per count */

typedef struct mstar_exec_estimate {
    bool has_per_node;    /* false: no copy could be counted (no rate) */
    double per_node;      /* bytes per graph node */
    uint64_t held;        /* bytes the held copies took: the walk's reuse credit */
    uint32_t kept_counts; /* counts that passed both noise checks */
} mstar_exec_estimate;

/*
 * Executable bytes per node from `ncounts` counts of `copies` copies each. `readings` holds
 * ncounts × (copies + 1) device free-memory values, count after count: reading 0 of a count is
 * free memory before its first copy, reading i free memory after its copy i.
 *
 * In each count, copies up to and including the first one that takes free memory are skipped
 * (they refill pieces the driver mapped earlier); the rest are counted, and their bytes plus one
 * MSTAR_EXEC_PIECE_BYTES (the first counted copy may start partway into a piece) over
 * (counted copies × nodes) is the count's rate. A count is kept only if free memory never rose
 * in it and no counted copy took more than the count's mean + 2 pieces. per_node is the largest
 * kept rate; with no kept count, the largest rate any count gave; with no counted copy, none.
 *
 * held is the free-memory drop summed over the counts (a count whose free memory rose overall
 * adds nothing), capped at per_node × nodes × all copies when per_node exists, so that another
 * process allocating mid-measurement cannot inflate the credit; 0 without per_node.
 * MSTAR_EINVAL if ncounts, copies or nodes is 0.
 */
MSTAR_API mstar_status mstar_exec_memory_estimate(const uint64_t *readings, size_t ncounts,
                                                  size_t copies, uint64_t nodes,
                                                  mstar_exec_estimate *out);

/*
 * The executable measurement: one walk's measurement, made on its first throwaway graph, whose
 * copies stay instantiated (held) until the runner captures for real. The driver keeps a
 * destroyed executable's memory for reuse, so the held copies are what the walk's real graphs'
 * executables will land in: the walk's reuse credit in mstar_plan_captures.
 */
typedef struct mstar_exec_memory mstar_exec_memory;

MSTAR_API mstar_status mstar_exec_memory_create(mstar_exec_memory **out);
/* Releases any held copies. NULL is ignored. */
MSTAR_API void mstar_exec_memory_destroy(mstar_exec_memory *em);

/*
 * Instantiate MSTAR_EXEC_COUNTS × MSTAR_EXEC_COPIES_PER_COUNT copies of `graph` one by one,
 * reading device free memory (the driver's cuMemGetInfo) around each, and estimate per_node with
 * mstar_exec_memory_estimate over the graph's node count. The copies are held until
 * mstar_exec_memory_release. `graph` must be a CUDA graph captured and kept (instantiated with
 * keep_graph, or not instantiated yet); it is not modified and may be destroyed afterwards.
 * Host backend: nothing to measure — no per_node, nothing held. MSTAR_ESTATE if copies from an
 * earlier measure are still held. On failure every copy made so far is destroyed.
 */
MSTAR_API mstar_status mstar_exec_memory_measure(mstar_exec_memory *em, mstar_graph *graph);
/* True and *per_node set when a measurement produced one. */
MSTAR_API bool mstar_exec_memory_per_node(const mstar_exec_memory *em, double *per_node);
/* Bytes the held copies took (0 once released): pass it to mstar_plan_captures as a credit. */
MSTAR_API uint64_t mstar_exec_memory_held(const mstar_exec_memory *em);
/* Copies held now. */
MSTAR_API size_t mstar_exec_memory_copies(const mstar_exec_memory *em);
/* Destroy the held copies (per_node is kept). Call right before the real captures. */
MSTAR_API void mstar_exec_memory_release(mstar_exec_memory *em);

/* ---------------------------------------------------------------------------------------------
 * Sizing: measuring what each bucket's capture costs
 * ------------------------------------------------------------------------------------------- */

/* What sizing learned about one runner: a cost per bucket and one executable-memory measurement
 * per walk, whose copies it holds until mstar_capture_sizing_release or destroy. */
typedef struct mstar_capture_sizing mstar_capture_sizing;
typedef struct mstar_rank_group mstar_rank_group; /* below */

/*
 * Reference size_captures (design.md "Planning"), for one runner whose graph buffers are
 * built. Warm every bucket and every slot up (a slot's first plan builds state of its own, which
 * must be spent before free memory is read) for its peak; then capture each walk's largest bucket
 * once, thrown away, keeping the graph: `kept` is what stayed live (mstar_capture_stats.kept),
 * `graph` is kept plus what the capture needed beyond it — the pool's shared segments it grew
 * (its scratch) and one more segment for the partly empty last one of the small blocks graphs
 * keep — so that the planner's pool model (design.md "Planning") errs high rather than low;
 * `outside` is per_node × its nodes when the walk's executable measurement on it gives a rate,
 * else the free-memory drop the capture caused beyond its pool bytes. The walk's other buckets get
 * the largest's graph, kept and outside. The pool is trimmed after each throwaway. A bucket whose
 * warm-up fails, or whose walk's throwaway capture fails, is unplannable (has_graph false), logged.
 * `barrier` (may be NULL) is met before each warm-up and capture, so no rank issues a collective
 * while another is still setting up (design.md "Startup").
 */
MSTAR_API mstar_status mstar_size_captures(mstar_graph_runner *runner, mstar_rank_group *barrier,
                                           mstar_capture_sizing **out);
/* The same for a piecewise region: its shapes are buckets of walk MSTAR_PIECEWISE_WALK, one
 * executable measurement for the region. */
MSTAR_API mstar_status mstar_size_piecewise_captures(mstar_piecewise_runner *runner,
                                                     mstar_rank_group *barrier,
                                                     mstar_capture_sizing **out);
/* Reference size_lent_captures (design.md "Planning"): when `wanted` (agreed with max across ranks
 * first), capture every other sized bucket once, thrown away, for its graph, kept and outside. */
MSTAR_API mstar_status mstar_size_lent_captures(mstar_capture_sizing *sizing, bool wanted);

/* The costs, one per bucket in the runner's capture order; `executable` indexes this sizing's
 * walks. Writable, so agreed values can be put back. */
MSTAR_API mstar_bucket_cost *mstar_capture_sizing_costs(mstar_capture_sizing *sizing, size_t *n);
MSTAR_API size_t mstar_capture_sizing_walks(const mstar_capture_sizing *sizing);
/* The walk's measurement (owned by the sizing). */
MSTAR_API mstar_exec_memory *mstar_capture_sizing_executable(const mstar_capture_sizing *sizing,
                                                             size_t walk);
/* Release every walk's held copies: right before the real captures. */
MSTAR_API void mstar_capture_sizing_release(mstar_capture_sizing *sizing);
MSTAR_API void mstar_capture_sizing_destroy(mstar_capture_sizing *sizing);

/* ---------------------------------------------------------------------------------------------
 * The startup order of one device (design.md "Startup")
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_capture_startup {
    mstar_step_runner *step_runner;     /* the device's */
    mstar_graph_runner *const *runners; /* every whole-forward runner of the device */
    size_t n_runners;
    mstar_piecewise_runner *const *piecewise; /* every piecewise region of the device */
    size_t n_piecewise;                       /* both lists in the same order on every rank */
    mstar_rank_group *group;                  /* the joint TP×SP group; NULL: this rank alone */
    bool bound_reuse;                         /* false: reuse of held executable copies unbounded */
    uint64_t reusable;                        /* with bound_reuse: mstar_plan_captures' bound */
} mstar_capture_startup;

/* What startup did, for the boot log and tests. Byte totals are over every pool of the device. */
typedef struct mstar_capture_report {
    uint64_t free_bytes;        /* free memory the plan saw (agreed: the least of any rank) */
    uint64_t floor;             /* the largest eager step */
    uint64_t predicted;         /* Σ predicted pool bytes of the plan, each in whole segments */
    uint64_t predicted_outside; /* Σ predicted executable bytes beyond the reused copies */
    uint64_t taken;             /* Σ pool bytes the real captures reserved */
    uint64_t outside;           /* free-memory drop of the captures beyond `taken` */
    size_t buckets;             /* configured, over every runner */
    size_t planned;             /* in the final plan */
    size_t captured;            /* captured on every rank (after agreement) */
    bool resized;               /* size_lent_captures ran (some rank left a bucket out) */
    double capture_seconds;     /* warm-ups and captures of the planned buckets */
} mstar_capture_report;

/*
 * Bring every runner of a device from configured to captured, in the order of design.md "Startup":
 *   1. prepare_for_capture on every runner, then build the step runner's graph buffers once;
 *   2. size every runner (mstar_size_captures); agree the costs with max and free memory (read
 *      after trimming the caching allocator) and the executable credits with min;
 *   3. plan (mstar_plan_captures over every pool); if any rank left a bucket out (`wanted`, agreed
 *      with max), size_lent_captures on every runner, agree again and plan again;
 *   4. release the held executable copies, then warm up and capture the planned buckets, largest
 *      first, one progress line (info) per bucket, with the group met before each;
 *   5. release the padding rows' storage; agree capture success with min and drop, on every rank,
 *      each bucket any rank failed; fail_if_graphs_required with every dropped bucket's name;
 *   6. post_warmup_validate, log predicted against actual pool bytes, and meet the group once more.
 * Every rank must call it with runners built from the same configs. `report` may be NULL. Errors
 * of one bucket drop the bucket; errors of the device, the group (a dead rank: MSTAR_ETIMEDOUT)
 * or MSTAR_REQUIRE_CUDA_GRAPHS fail startup.
 */
MSTAR_API mstar_status mstar_capture_startup_run(const mstar_capture_startup *opts,
                                                 mstar_capture_report *report);

/* ---------------------------------------------------------------------------------------------
 * Required graphs (MSTAR_REQUIRE_CUDA_GRAPHS)
 * ------------------------------------------------------------------------------------------- */

/*
 * With MSTAR_REQUIRE_CUDA_GRAPHS=1 and `n` > 0: MSTAR_ESTATE, the message listing the missing
 * buckets by name. Otherwise the missing buckets are logged (warn) and MSTAR_OK is returned. A
 * bad value of the variable is MSTAR_EINVAL naming it.
 */
MSTAR_API mstar_status mstar_fail_if_graphs_required(const char *const *missing, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Rank groups and agreement (design.md "Rank agreement")
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_rank_group mstar_rank_group;

typedef enum mstar_reduce {
    MSTAR_REDUCE_MIN = 0, /* ANDs 0/1 flags: a bucket dropped on any rank is dropped on all */
    MSTAR_REDUCE_MAX = 1, /* ORs flags; the largest cost */
} mstar_reduce;

/* A group of one: agreement returns the values unchanged. */
MSTAR_API mstar_status mstar_rank_group_create_single(mstar_rank_group **out);

typedef struct mstar_host_group_options {
    const mstar_mesh_options *mesh; /* NULL: the mesh's defaults from the environment */
    int64_t timeout_ms; /* per agreement; 0: MSTAR_RANK_AGREE_TIMEOUT_MS (default 300000) */
} mstar_host_group_options;

/*
 * A group over the control mesh, one process per rank. Each rank binds its own mesh entity
 * "<name>.rank<r>" (so agreement never takes another loop's messages) and sends its values to
 * every other rank as RANK_VALUES {text: name, round, rank, world_size, ints: values}. Rounds
 * are numbered from 1 per group; a message of an earlier round is dropped, one of the next round
 * is kept for it. A message of round 0 with no values says its sender left the group (see
 * mstar_rank_group_destroy). Anything else that arrives (another group, a wrong sender, a rank
 * out of range, a duplicate) is logged and dropped. `opts` may be NULL.
 */
MSTAR_API mstar_status mstar_rank_group_create_host(const char *name, int32_t rank,
                                                    int32_t world_size,
                                                    const mstar_host_group_options *opts,
                                                    mstar_rank_group **out);

/*
 * An NCCL group on CUDA device `device`, bootstrapped over `bootstrap` (borrowed for the call;
 * its rank and size become this group's): rank 0 makes the NCCL id and the others receive it
 * through one agreement. libnccl.so.2 is loaded at run time, never linked. MSTAR_ENOTSUP when
 * the build has no CUDA backend or the library cannot be loaded; MSTAR_EDEVICE naming the NCCL
 * or CUDA call that failed. An all-reduce that does not finish within the timeout
 * (MSTAR_RANK_AGREE_TIMEOUT_MS) aborts the communicator: MSTAR_ETIMEDOUT, then MSTAR_ECLOSED for
 * every later agreement.
 */
MSTAR_API mstar_status mstar_rank_group_create_nccl(mstar_rank_group *bootstrap, int device,
                                                    mstar_rank_group **out);

/*
 * Leave the group and free it. A host group first tells the other ranks it is leaving and
 * waits (at most min(timeout, 1 s)) until each of them has either left too or is gone, so that
 * this rank's last values are never discarded with its sockets while a peer still waits for
 * them. NULL is a no-op.
 */
MSTAR_API void mstar_rank_group_destroy(mstar_rank_group *group);

MSTAR_API int32_t mstar_rank_group_rank(const mstar_rank_group *group);
MSTAR_API int32_t mstar_rank_group_size(const mstar_rank_group *group);

/*
 * Reduce values[0..n) elementwise over every rank with `reduce`, in place (written only on
 * success). Every rank must call it with the same n and reduce, in the same order of calls;
 * values come in an order derived from the configs. n = 0 is a barrier: it returns once every
 * rank has called it. MSTAR_ETIMEDOUT naming the ranks that did not answer, MSTAR_EPROTO if a rank
 * sent a different number of values.
 */
MSTAR_API mstar_status mstar_agree_across_ranks(mstar_rank_group *group, int64_t *values, size_t n,
                                                mstar_reduce reduce);

/*
 * A group whose reduction is the caller's (a torch.distributed process group driven from the
 * Python package, design.md "Rank agreement"): reduce(user, values, n, op) reduces values[0..n)
 * over every rank in place and returns MSTAR_OK, or an error status after setting the error
 * (values then unread). destroy(user) (may be NULL) runs once, from mstar_rank_group_destroy.
 * rank must be in 0..size-1.
 */
typedef mstar_status (*mstar_rank_reduce_fn)(void *user, int64_t *values, size_t n,
                                             mstar_reduce reduce);
MSTAR_API mstar_status mstar_rank_group_create_custom(int32_t rank, int32_t size,
                                                      mstar_rank_reduce_fn reduce,
                                                      void (*destroy)(void *user), void *user,
                                                      mstar_rank_group **out);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_PLANNER_H */
