/*
 * test_demo_worker.c — a demo worker process (the decoder) driven message by message: this test
 * process is its conductor, the encoder worker that feeds it (with a communication manager over
 * the arena) and the api server that reads its results. It covers the worker's side of the
 * protocol, the orders the mesh allows and the bad input another process can send:
 *   - INPUT_SIGNALS before NEW_REQUEST is buffered, then served (design.md T-19), and the
 *     tokens equal an eager rerun of the same states (codebook, prefill, greedy decode);
 *   - a drained request answers READS_DONE, acknowledges a late input unread, never produces a
 *     result, and is torn down by REMOVE_REQUEST with force;
 *   - a bad max_new_tokens, an edge of the wrong name, states of the wrong dtype: FAIL_REQUESTS
 *     naming what was wrong; a request id outside the run: logged and ignored;
 *   - SHUTDOWN: the report (nothing held, nothing open), sent until acknowledged; exit code 0.
 */
#include "worker_world.h"

#include "demo/demo_codebook.h"
#include "demo/demo_worker.h"
#include "ref_eager.h"

#define NREQ 8

static worker_world *W;
static demo_link *cond, *enc,
    *pre; /* conductor; worker_0 (the producer); the api server's reader */
static mstar_backend *backend;

static mstar_msg expect(const char *entity, mstar_msg_type type, int64_t rid)
{
    return worker_world_expect(W, entity, type, rid);
}

static void new_request(int64_t rid, int64_t max_new)
{
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_NEW_REQUEST);
    m.request_id = mstar_rid_from_int(rid);
    assert_mstar_ok(mstar_msg_add_kv(&m, DEMO_KV_MAX_NEW, max_new));
    worker_world_send(cond, "worker_1", &m);
}

/* States [len, hidden] of `dtype` with bytes from `seed`, staged by worker_0 and sent to the
 * decoder as INPUT_SIGNALS on edge `name`. The values are copied into `keep` when not NULL. */
static void send_states(int64_t rid, const char *name, mstar_dtype dtype, int64_t len,
                        uint32_t seed, float *keep)
{
    int64_t shape[2] = { len, W->opts.cfg.model.hidden };
    size_t n = (size_t)(shape[0] * shape[1]);
    float *v = malloc(n * sizeof(float));
    assert_non_null(v);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((int64_t)(mstar_test_rand(&s) % 2001) - 1000) / 1000.0f;
    if (keep != NULL)
        memcpy(keep, v, n * sizeof(float));
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, v, mstar_device_cpu(), dtype, 2, shape));
    worker_world_send_input(W, rid, name, &t);
    free(v);
}

static void drain_and_remove(int64_t rid)
{
    worker_world_drain(W, rid);
    mstar_rid r = mstar_rid_from_int(rid);
    assert_mstar_ok(mstar_comm_force_cleanup_request(enc->comm, &r));
}

static int setup(void **state)
{
    const worker_world_entity ents[] = { { "conductor", false, true },
                                         { "worker_0", true, true },
                                         { "api_server", false, true },
                                         { DEMO_PREPROCESS, true, true } };
    W = worker_world_open(ents, 4);
    cond = worker_world_link(W, "conductor");
    enc = worker_world_link(W, "worker_0");
    pre = worker_world_link(W, DEMO_PREPROCESS);
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &backend));
    *state = W;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mstar_backend_destroy(backend);
    worker_world_close(W);
    return 0;
}

/* The tokens the decoder must give for `states`: codebook, prefill, greedy decode. */
static void eager_tokens(const float *states, int64_t len, int32_t max_new, int32_t *out)
{
    const demo_config *cfg = &W->opts.cfg;
    demo_codebook *cb;
    ref_eager *e;
    mstar_kv_cache_config kv = { cfg->kv_pages, cfg->page_size, 1,
                                 cfg->prompt_max + cfg->output_max };
    assert_mstar_ok(demo_codebook_create(backend, &cfg->model, &cb));
    assert_mstar_ok(ref_eager_create(&cfg->model, &kv, backend, &e));
    int64_t shape[2] = { len, cfg->model.hidden };
    mstar_tensor t;
    assert_mstar_ok(
        mstar_tensor_init(&t, (void *)states, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape));
    int32_t prompt[64];
    assert_mstar_ok(demo_codebook_lookup(cb, ref_eager_stream(e), &t, prompt));
    int64_t row = 0;
    int32_t span = (int32_t)len;
    assert_mstar_ok(ref_eager_open(e, row));
    assert_mstar_ok(ref_eager_step(e, &row, &span, 1, prompt, NULL, &out[0]));
    span = 1;
    for (int32_t k = 1; k < max_new; k++)
        assert_mstar_ok(ref_eager_step(e, &row, &span, 1, &out[k - 1], NULL, &out[k]));
    ref_eager_destroy(e);
    demo_codebook_destroy(cb);
}

/* Read the result on the api server's side and check its tokens. */
static void expect_result(int64_t rid, const int32_t *want, int32_t n)
{
    mstar_msg res = expect("api_server", MSTAR_MSG_RESULT_TENSORS, rid);
    assert_int_equal(res.nedges, 1);
    assert_string_equal(res.edges[0].name, DEMO_SIG_TOKENS);
    mstar_rid r = mstar_rid_from_int(rid);
    assert_mstar_ok(mstar_comm_start_read_tensors(pre->comm, &r, res.edges, 1, NULL));
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(pre->comm, &set));
    assert_int_equal(set.nedges, 1);
    int32_t got[64];
    mstar_tensor copy;
    mstar_tensor_id uuid = set.edges[0].tensor_info[0].uuid;
    assert_int_equal(set.edges[0].tensor_info[0].dims[0], n);
    assert_mstar_ok(mstar_comm_get_tensor_copy(pre->comm, uuid, got, sizeof(got), &copy));
    assert_memory_equal(got, want, (size_t)n * sizeof(int32_t));
    assert_mstar_ok(mstar_comm_dereference(pre->comm, uuid, 1));
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_cleanup_request(pre->comm, &r));
    mstar_msg_clear(&res);
}

static void test_early_inputs_are_buffered(void **state)
{
    float states[16 * 64];
    int32_t want[8];
    send_states(0, DEMO_SIG_HIDDEN, MSTAR_DTYPE_FLOAT32, 11, 0xea51, states);
    worker_world_pump(W, 100); /* the input reaches the worker before its NEW_REQUEST */
    new_request(0, 6);
    mstar_msg ack = expect("worker_0", MSTAR_MSG_TENSOR_RECEIVED, -1);
    mstar_msg_clear(&ack);
    mstar_msg done = expect("conductor", MSTAR_MSG_WORKER_GRAPHS_DONE, 0);
    assert_int_equal(done.nrx, 1); /* the enc_hidden read */
    assert_string_equal(done.rx[0].edge_name, DEMO_SIG_HIDDEN);
    mstar_msg_clear(&done);
    eager_tokens(states, 11, 6, want);
    expect_result(0, want, 6);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_REMOVE_REQUEST);
    m.request_id = mstar_rid_from_int(0);
    worker_world_send(cond, "worker_1", &m);
    assert_int_equal(mstar_comm_num_tensors(enc->comm), 0); /* the ACK freed the states */
}

static void test_drained_request_acks_late_input_unread(void **state)
{
    new_request(1, 4);
    drain_and_remove(1);
    /* A late input after the drain: acknowledged, never read, no result. */
    new_request(2, 4);
    mstar_rid r2 = mstar_rid_from_int(2);
    assert_mstar_ok(demo_send_simple(cond->mesh, "worker_1", MSTAR_MSG_DRAIN_REQUEST, &r2));
    mstar_msg done = expect("conductor", MSTAR_MSG_READS_DONE, 2);
    mstar_msg_clear(&done);
    send_states(2, DEMO_SIG_HIDDEN, MSTAR_DTYPE_FLOAT32, 5, 0x1a7e, NULL);
    mstar_msg ack = expect("worker_0", MSTAR_MSG_TENSOR_RECEIVED, -1);
    mstar_msg_clear(&ack);
    assert_int_equal(mstar_comm_num_tensors(enc->comm), 0);
    assert_false(worker_world_seen(W, "api_server", MSTAR_MSG_RESULT_TENSORS, 2));
    drain_and_remove(2);
}

static void test_bad_input_fails_the_request(void **state)
{
    /* max_new_tokens outside [1, output max] */
    new_request(3, 10000);
    mstar_msg f = expect("conductor", MSTAR_MSG_FAIL_REQUESTS, 3);
    assert_non_null(strstr(f.text, "max_new_tokens 10000 is not in [1, 12]"));
    mstar_msg_clear(&f);
    drain_and_remove(3);
    /* an edge the decoder does not take */
    new_request(4, 4);
    send_states(4, "bogus", MSTAR_DTYPE_FLOAT32, 5, 0xb0, NULL);
    f = expect("conductor", MSTAR_MSG_FAIL_REQUESTS, 4);
    assert_non_null(strstr(f.text, "input 'bogus'"));
    mstar_msg_clear(&f);
    drain_and_remove(4);
    /* states of the wrong dtype */
    new_request(5, 4);
    send_states(5, DEMO_SIG_HIDDEN, MSTAR_DTYPE_INT32, 5, 0xb1, NULL);
    f = expect("conductor", MSTAR_MSG_FAIL_REQUESTS, 5);
    assert_non_null(strstr(f.text, "encoder states must be contiguous float32"));
    mstar_msg_clear(&f);
    drain_and_remove(5);
    /* a request id outside the run: ignored (the worker still answers the next request) */
    new_request(NREQ + 3, 4);
    new_request(-1, 4);
    assert_false(worker_world_seen(W, "conductor", MSTAR_MSG_FAIL_REQUESTS, NREQ + 3));
    assert_int_equal(mstar_comm_num_tensors(enc->comm), 0);
}

static void test_shutdown_reports_and_exits(void **state)
{
    mstar_msg rep = worker_world_report(W);
    assert_int_equal(mstar_msg_get_kv(&rep, "live_slots", -1), 0);
    assert_int_equal(mstar_msg_get_kv(&rep, "done", -1), 1);
    assert_int_equal(mstar_msg_get_kv(&rep, "failed", -1), 3);
    assert_int_equal(mstar_msg_get_kv(&rep, "removed_force", -1), 5);
    assert_int_equal(mstar_msg_get_kv(&rep, "removed_soft", -1), 1);
    mstar_msg_clear(&rep);
    worker_world_exits(W);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_inputs_are_buffered),
        cmocka_unit_test(test_drained_request_acks_late_input_unread),
        cmocka_unit_test(test_bad_input_fails_the_request),
        cmocka_unit_test(test_shutdown_reports_and_exits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
