/*
 * test_hostile_mesh_demo.c — a demo worker process (the decoder) flooded with INPUT_SIGNALS for a
 * request it has not been told of. It buffers such early inputs (they may legitimately arrive
 * before NEW_REQUEST), but only up to a bound: the excess is acknowledged unread, so its producer
 * frees it, and counted in the worker's report. The inputs it kept are acknowledged when the
 * request is drained, so the producer ends holding nothing and the worker exits cleanly.
 */
#include "worker_world.h"

#define FLOOD 300
#define KEPT  256 /* the worker's bound on early inputs */

static worker_world *W;
static demo_link *enc; /* worker_0, the producer of the inputs */

static int setup(void **state)
{
    const worker_world_entity ents[] = { { "conductor", false, true },
                                         { "worker_0", true, false } };
    W = worker_world_open(ents, 2);
    enc = worker_world_link(W, "worker_0");
    *state = W;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    worker_world_close(W);
    return 0;
}

/* worker_0 stages one [2, hidden] float32 input of request `rid` and sends it to the decoder. */
static void send_input(int64_t rid, uint32_t seed)
{
    int64_t shape[2] = { 2, W->opts.cfg.model.hidden };
    float v[2 * 256];
    assert_true(shape[1] <= 256);
    for (int64_t i = 0; i < shape[0] * shape[1]; i++)
        v[i] = (float)(seed + (uint32_t)i);
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, v, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape));
    worker_world_send_input(W, rid, DEMO_SIG_HIDDEN, &t);
}

/* Pump until worker_0 holds `want` tensors (30 s at most). */
static void producer_holds(size_t want)
{
    for (int i = 0; i < 3000 && mstar_comm_num_tensors(enc->comm) != want; i++)
        worker_world_pump(W, 10);
    assert_int_equal(mstar_comm_num_tensors(enc->comm), want);
}

static void test_early_input_flood_is_bounded(void **state)
{
    (void)state;
    for (int i = 0; i < FLOOD; i++)
        send_input(1, (uint32_t)i);
    /* The excess is acknowledged unread at once: worker_0 frees it. */
    producer_holds(KEPT);

    /* Draining the request acknowledges the inputs the worker kept. */
    worker_world_drain(W, 1);
    producer_holds(0);
    mstar_rid r = mstar_rid_from_int(1);
    assert_mstar_ok(mstar_comm_force_cleanup_request(enc->comm, &r));

    /* The report counts the dropped inputs; the worker holds nothing and exits cleanly. */
    mstar_msg rep = worker_world_report(W);
    assert_int_equal(mstar_msg_get_kv(&rep, "early_dropped", -1), FLOOD - KEPT);
    mstar_msg_clear(&rep);
    worker_world_exits(W);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_input_flood_is_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
