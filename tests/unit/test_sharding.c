/*
 * test_sharding.c — fan-out of edges to destination ranks (design.md "Sharding", with offsets local
 * to the source shard, T-9) and fan-in of shards at the destination (design.md "Sharding"): rank
 * order regardless of arrival order, requests that were never registered (T-10), two nodes taking
 * the same signal, edges that carry several descriptors (of one rank, or of two ranks at once), and
 * shards that do not fit together.
 */
#include "comm_harness.h"

static mstar_tensor_info info_of(mstar_dtype dtype, int32_t ndim, const int64_t *dims)
{
    mstar_tensor_info i;
    mstar_tensor_info_init(&i);
    i.uuid = mstar_id_make(100, 1);
    i.dtype = dtype;
    i.ndim = ndim;
    for (int32_t d = 0; d < ndim; d++)
        i.dims[d] = dims[d];
    mstar_shape_contiguous_strides(ndim, i.dims, i.stride);
    int64_t numel;
    assert_mstar_ok(mstar_shape_numel(ndim, dims, mstar_dtype_size(dtype), &numel));
    i.nbytes = (uint64_t)numel * mstar_dtype_size(dtype);
    snprintf(i.source_entity, sizeof(i.source_entity), "worker_0");
    return i;
}

static void test_replicated(void **state)
{
    (void)state;
    int64_t dims[2] = { 4, 4 };
    mstar_tensor_info info = info_of(MSTAR_DTYPE_FLOAT32, 2, dims);
    mstar_edge e = edge_of("x", "n", &info, 1);
    const char *src_w[2] = { "worker_0", "worker_1" }, *dst_w[2] = { "worker_2", "worker_3" };
    mstar_shard_group src = { 2, src_w }, dst = { 2, dst_w }, same = { 2, src_w };
    mstar_fanout fo;
    /* From rank 0 to a disjoint group: every destination, whole tensors. */
    assert_mstar_ok(mstar_edge_fanout(&e, -1, &src, 0, &dst, &fo));
    assert_int_equal(fo.n, 2);
    assert_string_equal(fo.workers[0], "worker_2");
    assert_string_equal(fo.workers[1], "worker_3");
    assert_int_equal(fo.edges[1].tensor_info[0].nbytes, 64);
    assert_int_equal(fo.edges[1].total_fanin, 1);
    assert_int_equal(fo.edges[1].shard_dim, -1);
    mstar_fanout_clear(&fo);
    /* Rank 1 sends nothing outside its group. */
    assert_mstar_ok(mstar_edge_fanout(&e, -1, &src, 1, &dst, &fo));
    assert_int_equal(fo.n, 0);
    mstar_fanout_clear(&fo);
    /* Within one group each rank keeps its own copy. */
    assert_mstar_ok(mstar_edge_fanout(&e, -1, &src, 1, &same, &fo));
    assert_int_equal(fo.n, 1);
    assert_string_equal(fo.workers[0], "worker_1");
    mstar_fanout_clear(&fo);
    /* A special source (api server) and a destination with no group. */
    assert_mstar_ok(mstar_edge_fanout(&e, -1, NULL, 0, &dst, &fo));
    assert_int_equal(fo.n, 2);
    mstar_fanout_clear(&fo);
    assert_mstar_ok(mstar_edge_fanout(&e, -1, &src, 0, NULL, &fo));
    assert_int_equal(fo.n, 1);
    assert_string_equal(fo.workers[0], "");
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
}

/* Rows per destination and offsets local to the source's own shard (T-9). */
static void test_sharded_offsets_are_local(void **state)
{
    (void)state;
    int64_t dims[2] = { 4, 3 }; /* each source rank holds 4 rows of 3 int64 (24 bytes a row) */
    mstar_tensor_info info = info_of(MSTAR_DTYPE_INT64, 2, dims);
    mstar_edge e = edge_of("x", "n", &info, 1);
    const char *w2[2] = { "a", "b" }, *w4[4] = { "c", "d", "e", "f" }, *w1[1] = { "g" };
    mstar_shard_group src2 = { 2, w2 }, dst4 = { 4, w4 }, dst1 = { 1, w1 };
    mstar_fanout fo;
    /* tp 2 → tp 4: rank 1 holds global rows 4..7 → destinations 2 and 3, local offsets 0, 2. */
    assert_mstar_ok(mstar_edge_fanout(&e, 0, &src2, 1, &dst4, &fo));
    assert_int_equal(fo.n, 2);
    assert_string_equal(fo.workers[0], "e");
    assert_string_equal(fo.workers[1], "f");
    assert_int_equal(fo.edges[0].tensor_info[0].dims[0], 2);
    assert_int_equal(fo.edges[0].tensor_info[0].offset, 0);
    assert_int_equal(fo.edges[1].tensor_info[0].offset, 2 * 24);
    assert_int_equal(fo.edges[1].tensor_info[0].nbytes, 2 * 24);
    assert_int_equal(fo.edges[1].total_fanin, 1);
    assert_int_equal(fo.edges[1].shard_dim, 0);
    assert_mstar_ok(mstar_tensor_info_validate(&fo.edges[1].tensor_info[0]));
    mstar_fanout_clear(&fo);
    /* tp 2 → tp 1: both ranks send their whole shard to one destination, which gathers 2. */
    assert_mstar_ok(mstar_edge_fanout(&e, 0, &src2, 1, &dst1, &fo));
    assert_int_equal(fo.n, 1);
    assert_int_equal(fo.edges[0].tensor_info[0].offset,
                     0); /* the reference: 4 * 24, past the end */
    assert_int_equal(fo.edges[0].tensor_info[0].dims[0], 4);
    assert_int_equal(fo.edges[0].total_fanin, 2);
    mstar_fanout_clear(&fo);
    /* tp 1 → tp 2 (special source): halves at offsets 0 and 2 rows. */
    assert_mstar_ok(mstar_edge_fanout(&e, 0, NULL, 0, &src2, &fo));
    assert_int_equal(fo.n, 2);
    assert_int_equal(fo.edges[1].tensor_info[0].offset, 2 * 24);
    mstar_fanout_clear(&fo);
    /* tp 4 → tp 2: each destination gathers from two sources. */
    mstar_shard_group src4 = { 4, w4 };
    assert_mstar_ok(mstar_edge_fanout(&e, 0, &src4, 3, &src2, &fo));
    assert_int_equal(fo.n, 1);
    assert_string_equal(fo.workers[0], "b");
    assert_int_equal(fo.edges[0].total_fanin, 2);
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
}

static void test_fanout_edge_cases(void **state)
{
    (void)state;
    const char *w2[2] = { "a", "b" };
    mstar_shard_group g2 = { 2, w2 };
    mstar_fanout fo;
    /* Zero-size dims divide fine (the reference divided by the element count). */
    int64_t zero[2] = { 2, 0 };
    mstar_tensor_info iz = info_of(MSTAR_DTYPE_FLOAT32, 2, zero);
    mstar_edge e = edge_of("x", "n", &iz, 1);
    assert_mstar_ok(mstar_edge_fanout(&e, 0, NULL, 0, &g2, &fo));
    assert_int_equal(fo.n, 2);
    assert_int_equal(fo.edges[1].tensor_info[0].nbytes, 0);
    assert_int_equal(fo.edges[1].tensor_info[0].dims[0], 1);
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
    /* Rows that do not divide, a 0-dim descriptor of a sharded signal, bad groups. */
    int64_t three[1] = { 3 };
    mstar_tensor_info i3 = info_of(MSTAR_DTYPE_FLOAT32, 1, three);
    e = edge_of("x", "n", &i3, 1);
    assert_mstar_status(mstar_edge_fanout(&e, 0, NULL, 0, &g2, &fo), MSTAR_EINVAL);
    mstar_edge_clear(&e);
    mstar_tensor_info i0 = info_of(MSTAR_DTYPE_FLOAT32, 0, NULL);
    e = edge_of("x", "n", &i0, 1);
    assert_mstar_status(mstar_edge_fanout(&e, 0, NULL, 0, &g2, &fo), MSTAR_EINVAL);
    assert_mstar_ok(mstar_edge_fanout(&e, -1, NULL, 0, &g2, &fo)); /* replicated is fine */
    mstar_fanout_clear(&fo);
    const char *bad_w[2] = { "a", "../b" };
    mstar_shard_group bad = { 2, bad_w }, empty = { 0, w2 };
    assert_mstar_status(mstar_edge_fanout(&e, -1, NULL, 0, &bad, &fo), MSTAR_EINVAL);
    assert_mstar_status(mstar_edge_fanout(&e, -1, &empty, 0, &g2, &fo), MSTAR_EINVAL);
    assert_mstar_status(mstar_edge_fanout(&e, -1, &g2, 2, &g2, &fo), MSTAR_EINVAL);
    assert_mstar_status(mstar_edge_fanout(&e, 9, &g2, 0, &g2, &fo), MSTAR_EINVAL);
    mstar_edge_clear(&e);
    /* Several descriptors: each sliced by its own row count. */
    int64_t a[1] = { 4 }, b[2] = { 8, 2 };
    mstar_tensor_info two[2] = { info_of(MSTAR_DTYPE_INT8, 1, a), info_of(MSTAR_DTYPE_INT8, 2, b) };
    e = edge_of("x", "n", two, 2);
    assert_mstar_ok(mstar_edge_fanout(&e, 0, NULL, 0, &g2, &fo));
    assert_int_equal(fo.edges[1].tensor_info[0].dims[0], 2);
    assert_int_equal(fo.edges[1].tensor_info[0].offset, 2);
    assert_int_equal(fo.edges[1].tensor_info[1].dims[0], 4);
    assert_int_equal(fo.edges[1].tensor_info[1].offset, 8);
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
}

/* ---- fan-in through real managers --------------------------------------------------------- */

typedef struct world {
    bus b;
    sender s[3];
    mstar_comm *p[2]; /* worker_0 and worker_1: source ranks 0 and 1 */
    mstar_comm *c;    /* worker_2: the destination (tp 1) */
    const char *dir;
} world;

static int setup(void **state)
{
    world *w = calloc(1, sizeof(*w));
    w->dir = mstar_test_tmpdir("fanin");
    const char *names[3] = { "worker_0", "worker_1", "worker_2" };
    for (int i = 0; i < 3; i++) {
        w->s[i].b = &w->b;
        snprintf(w->s[i].entity, sizeof(w->s[i].entity), "%s", names[i]);
    }
    w->p[0] = make_comm(names[0], MSTAR_TRANSPORT_FILES, w->dir, &w->s[0]);
    w->p[1] = make_comm(names[1], MSTAR_TRANSPORT_FILES, w->dir, &w->s[1]);
    w->c = make_comm(names[2], MSTAR_TRANSPORT_FILES, w->dir, &w->s[2]);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    mstar_comm_destroy(w->p[0]);
    mstar_comm_destroy(w->p[1]);
    mstar_comm_destroy(w->c);
    bus_clear(&w->b);
    assert_int_equal(mstar_test_count_dir(w->dir), 0);
    free(w);
    return 0;
}

/* Rank r stores `n` (at most 2) tensors of signal "h" (real shape [rows, 3, 4], sharded on dim
 * 1; tensor k from seed 50 + r + 10 k, into t[k]) and fans them out to the one destination;
 * returns that destination's edge (owned by the caller). */
static mstar_edge shard_edge_of(world *w, int r, const mstar_rid *rid, const char *node, uint32_t n,
                                int64_t rows, mstar_tensor *t)
{
    const char *sigs[1] = { "h" };
    int32_t dims[1] = { 1 };
    mstar_sharding_config cfg = { 1, sigs, dims };
    assert_mstar_ok(mstar_comm_register_request(w->p[r], rid, &cfg));
    int64_t shape[3] = { rows, 3, 4 };
    mstar_output o[2];
    for (uint32_t k = 0; k < n; k++) {
        t[k] = make_tensor(MSTAR_DTYPE_FLOAT32, 3, shape, (uint32_t)(50 + r + 10 * k));
        o[k] = output_of("h", t[k]);
    }
    mstar_store_params params = { "layer", NULL, 2, r };
    mstar_tensor_info info[2];
    mstar_tensor_id uuids[2];
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p[r], rid, o, n, &params, info));
    for (uint32_t k = 0; k < n; k++) {
        assert_int_equal(info[k].source_tp_rank, r);
        uuids[k] = info[k].uuid;
    }
    mstar_edge e = edge_of("h", node, info, n);
    const char *src_w[2] = { "worker_0", "worker_1" }, *dst_w[1] = { "worker_2" };
    mstar_shard_group src = { 2, src_w }, dst = { 1, dst_w };
    mstar_fanout fo;
    assert_mstar_ok(mstar_edge_fanout(&e, 1, &src, r, &dst, &fo));
    assert_int_equal(fo.n, 1);
    assert_int_equal(fo.edges[0].total_fanin, 2);
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(w->p[r], uuids, n, 1));
    assert_mstar_ok(mstar_comm_set_output_ref_counts(w->p[r], uuids, n, fo.edges, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->p[r], rid, info, n));
    mstar_edge out;
    assert_mstar_ok(mstar_edge_copy(&out, &fo.edges[0]));
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
    return out;
}

/* Rank r's one [2, 3, 4] shard of "h" (shard_edge_of). */
static mstar_edge shard_edge(world *w, int r, const mstar_rid *rid, const char *node,
                             mstar_tensor *t)
{
    return shard_edge_of(w, r, rid, node, 1, 2, t);
}

static void check_concat(mstar_comm *c, mstar_tensor_id uuid, const mstar_tensor *t0,
                         const mstar_tensor *t1)
{
    mstar_tensor v;
    assert_mstar_ok(mstar_comm_get_tensor(c, uuid, &v));
    assert_int_equal(v.ndim, 3);
    assert_int_equal(v.shape[0], 2);
    assert_int_equal(v.shape[1], 6);
    assert_int_equal(v.shape[2], 4);
    float got[48];
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(c, uuid, got, sizeof(got), &cp));
    const float *a = t0->data, *b = t1->data;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            for (int k = 0; k < 4; k++) {
                float want = j < 3 ? a[(i * 3 + j) * 4 + k] : b[(i * 3 + j - 3) * 4 + k];
                assert_memory_equal(&got[(i * 6 + j) * 4 + k], &want, sizeof(float));
            }
}

/* The two ranks' shards of signal "h" for node "mlp" (shard_edge). */
typedef struct shards {
    mstar_tensor t[2];
    mstar_edge e[2];
} shards;

static shards shards_of(world *w, const mstar_rid *rid)
{
    shards sh;
    for (int r = 0; r < 2; r++)
        sh.e[r] = shard_edge(w, r, rid, "mlp", &sh.t[r]);
    return sh;
}

static void shards_free(shards *sh)
{
    for (int r = 0; r < 2; r++) {
        mstar_edge_clear(&sh->e[r]);
        free(sh->t[r].data);
    }
}

/* The source ranks get their ACKs and hold nothing more. */
static void expect_sources_freed(world *w)
{
    bus_deliver(&w->b, "worker_0", w->p[0]);
    bus_deliver(&w->b, "worker_1", w->p[1]);
    assert_int_equal(mstar_comm_num_tensors(w->p[0]) + mstar_comm_num_tensors(w->p[1]), 0);
}

/* design.md "Sharding" / T-10: shards arriving rank 1 first are gathered in rank order along the
 * real shard dim, for a request the destination never registered; each shard is ACKed on arrival
 * and its store entry freed, the gathered tensor is one new local tensor. */
static void test_fanin_rank_order_unregistered(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(77);
    shards sh = shards_of(w, &rid);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &sh.e[1], 1, NULL));
    collect_ready(w->c, 0);
    assert_int_equal(bus_count(&w->b, "worker_1"), 1); /* ACKed although not emitted */
    assert_int_equal(mstar_comm_num_tensors(w->c), 0); /* the bytes live in the buffer */
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &sh.e[0], 1, NULL));
    expect_ready(w->c, &set, 1);
    const mstar_edge *out = &set.edges[0];
    assert_int_equal(out->ntensors, 1);
    assert_int_equal(out->total_fanin, 1);
    const mstar_tensor_info *ci = &out->tensor_info[0];
    assert_string_equal(ci->source_entity, "worker_2");
    assert_int_equal(ci->dims[1], 6);
    check_concat(w->c, ci->uuid, &sh.t[0], &sh.t[1]);
    assert_int_equal(mstar_comm_num_tensors(w->c), 1);
    assert_mstar_ok(mstar_comm_dereference(w->c, ci->uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_ready_set_clear(&set);
    expect_sources_freed(w);
    shards_free(&sh);
}

/* Two nodes of one worker taking the same sharded signal gather separately (T-10). */
static void test_fanin_two_nodes_same_signal(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(78);
    shards sh = shards_of(w, &rid);
    mstar_edge f0, f1;
    assert_mstar_ok(mstar_edge_copy(&f0, &sh.e[0]));
    assert_mstar_ok(mstar_edge_copy(&f1, &sh.e[1]));
    snprintf(f0.next_node, sizeof(f0.next_node), "attn");
    snprintf(f1.next_node, sizeof(f1.next_node), "attn");
    /* The producers routed each shard to two nodes: one more reference each. */
    assert_mstar_ok(mstar_comm_increment_ref(w->p[0], sh.e[0].tensor_info[0].uuid, 1));
    assert_mstar_ok(mstar_comm_increment_ref(w->p[1], sh.e[1].tensor_info[0].uuid, 1));
    mstar_edge first[2] = { sh.e[0], f1 }, second[2] = { f0, sh.e[1] };
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, first, 2, NULL));
    collect_ready(w->c, 0);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, second, 2, NULL));
    expect_ready(w->c, &set, 2);
    assert_string_not_equal(set.edges[0].next_node, set.edges[1].next_node);
    for (int i = 0; i < 2; i++) {
        check_concat(w->c, set.edges[i].tensor_info[0].uuid, &sh.t[0], &sh.t[1]);
        assert_mstar_ok(mstar_comm_dereference(w->c, set.edges[i].tensor_info[0].uuid, 1));
    }
    mstar_ready_set_clear(&set);
    expect_sources_freed(w);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_edge_clear(&f0);
    mstar_edge_clear(&f1);
    shards_free(&sh);
}

/* A rank arriving twice (an edge whose descriptor names a rank that already arrived): reported,
 * nothing leaked. */
static void test_fanin_bad_shards(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(79);
    shards sh = shards_of(w, &rid);
    /* Rank 1's shard claims rank 0 as well. */
    sh.e[1].tensor_info[0].source_tp_rank = 0;
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &sh.e[0], 1, NULL));
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &sh.e[1], 1, NULL));
    expect_ready(w->c, &set, 0);
    assert_int_equal(set.nfailed, 1);
    assert_int_equal(set.failed[0].status, MSTAR_EPROTO);
    assert_non_null(strstr(set.failed[0].message, "rank 0 arrived twice"));
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    expect_sources_freed(w);
    shards_free(&sh);
}

/* One edge carrying the shards of both ranks (rank 1's descriptor first) completes the gather:
 * each descriptor is buffered under its own source rank, not the edge's first one. */
static void test_fanin_one_edge_carries_two_ranks(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(80);
    shards sh = shards_of(w, &rid);
    mstar_edge both;
    assert_mstar_ok(mstar_edge_copy(&both, &sh.e[1]));
    assert_mstar_ok(mstar_edge_add_tensor(&both, &sh.e[0].tensor_info[0]));
    assert_int_equal(both.total_fanin, 2);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &both, 1, NULL));
    expect_ready(w->c, &set, 1);
    assert_int_equal(set.nfailed, 0);
    assert_int_equal(set.edges[0].ntensors, 1);
    check_concat(w->c, set.edges[0].tensor_info[0].uuid, &sh.t[0], &sh.t[1]);
    assert_mstar_ok(mstar_comm_dereference(w->c, set.edges[0].tensor_info[0].uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_ready_set_clear(&set);
    expect_sources_freed(w);
    mstar_edge_clear(&both);
    shards_free(&sh);
}

/* Each rank's edge carries two tensors: output k gathers every rank's tensor k, in rank order. */
static void test_fanin_two_tensors_per_rank(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(81);
    mstar_tensor t[2][2];
    mstar_edge e[2];
    for (int r = 0; r < 2; r++)
        e[r] = shard_edge_of(w, r, &rid, "mlp", 2, 2, t[r]);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e[1], 1, NULL));
    collect_ready(w->c, 0);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e[0], 1, NULL));
    expect_ready(w->c, &set, 1);
    assert_int_equal(set.edges[0].ntensors, 2);
    for (int k = 0; k < 2; k++) {
        check_concat(w->c, set.edges[0].tensor_info[k].uuid, &t[0][k], &t[1][k]);
        assert_mstar_ok(mstar_comm_dereference(w->c, set.edges[0].tensor_info[k].uuid, 1));
    }
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_ready_set_clear(&set);
    expect_sources_freed(w);
    for (int r = 0; r < 2; r++) {
        mstar_edge_clear(&e[r]);
        for (int k = 0; k < 2; k++)
            free(t[r][k].data);
    }
}

/* Gather rank 0's `n0` tensors of `rows0` rows with rank 1's one of 2 rows: one failure whose
 * message contains `want`, nothing left at the destination or the sources. */
static void expect_gather_refused(world *w, int64_t rid_n, uint32_t n0, int64_t rows0,
                                  const char *want)
{
    mstar_rid rid = mstar_rid_from_int(rid_n);
    mstar_tensor t0[2], t1[1];
    mstar_edge e[2] = { shard_edge_of(w, 0, &rid, "mlp", n0, rows0, t0),
                        shard_edge_of(w, 1, &rid, "mlp", 1, 2, t1) };
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, e, 2, NULL));
    expect_ready(w->c, &set, 0);
    assert_int_equal(set.nfailed, 1);
    assert_int_equal(set.failed[0].status, MSTAR_EPROTO);
    assert_string_equal(set.failed[0].edge_name, "h");
    if (strstr(set.failed[0].message, want) == NULL)
        fail_msg("expected '%s' in '%s'", want, set.failed[0].message);
    mstar_ready_set_clear(&set);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid));
    expect_sources_freed(w);
    for (int r = 0; r < 2; r++)
        mstar_edge_clear(&e[r]);
    for (uint32_t k = 0; k < n0; k++)
        free(t0[k].data);
    free(t1[0].data);
}

/* Shards that do not fit together are refused at the gather: another size in a dim that is not
 * the shard dim, and ranks that sent different tensor counts. */
static void test_fanin_shards_that_do_not_fit(void **state)
{
    world *w = *state;
    expect_gather_refused(w, 82, 1, 5, "do not concatenate");
    expect_gather_refused(w, 83, 2, 2, "unequal tensor counts");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicated),
        cmocka_unit_test(test_sharded_offsets_are_local),
        cmocka_unit_test(test_fanout_edge_cases),
        cmocka_unit_test_setup_teardown(test_fanin_rank_order_unregistered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fanin_two_nodes_same_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fanin_bad_shards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fanin_one_edge_carries_two_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fanin_two_tensors_per_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fanin_shards_that_do_not_fit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
