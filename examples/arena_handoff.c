/*
 * arena_handoff.c — shows a producer and a consumer handing one tensor through the shared-memory
 * arena, with the acknowledgement that frees the producer's copy, using only <mstar/mstar.h>.
 *
 * Two communication managers (worker_0 produces, worker_1 consumes) live in one process here; in
 * a deployment each is a worker process and the control messages travel over the mesh
 * (mstar_comm_send_via_mesh). The tensor's bytes never pass through a message: the producer
 * stages them in an arena segment and sends a descriptor; the consumer maps the segment, copies
 * them out, and only then ACKs, which lets the producer free its slot.
 */
#include <mstar/mstar.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where a manager's control messages go: straight to the other manager, as the mesh would. */
typedef struct route {
    const char *from;
    mstar_comm *to;
} route;

static mstar_status deliver(void *ctx, const char *peer, mstar_msg *msg)
{
    route *r = ctx;
    snprintf(msg->from, sizeof(msg->from), "%s", r->from);
    return mstar_comm_handle_message(r->to, msg);
}

static int check(mstar_status st, const char *what)
{
    if (st != MSTAR_OK)
        fprintf(stderr, "arena_handoff: %s: %s (%s)\n", what, mstar_status_name(st),
                mstar_last_error());
    return st == MSTAR_OK;
}

static mstar_comm *open_comm(const char *entity, const char *dir, route *r)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = MSTAR_TRANSPORT_ARENA;
    o.shm_dir = dir;
    o.send = deliver;
    o.send_ctx = r;
    mstar_comm *c = NULL;
    return check(mstar_comm_create(&o, &c), "mstar_comm_create") ? c : NULL;
}

/* worker_0: store a 2x3 float tensor of request `rid`, hold it for one reader, stage it. */
static int produce(mstar_comm *p, const mstar_rid *rid, float *data, mstar_tensor_info *info)
{
    int64_t shape[2] = { 2, 3 };
    mstar_output out = { .signal = "x" };
    if (!check(
            mstar_tensor_init(&out.tensor, data, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape),
            "mstar_tensor_init"))
        return 0;
    return check(mstar_comm_store_and_return_tensor_info(p, rid, &out, 1, NULL, info), "store") &&
           check(mstar_comm_increment_ref(p, info->uuid, 1), "increment_ref") &&
           check(mstar_comm_register_for_send(p, rid, info, 1), "register_for_send");
}

/* worker_1: read the edge carrying `info`, collect it (which ACKs it), print it, release it. */
static int consume(mstar_comm *c, const mstar_rid *rid, const mstar_tensor_info *info)
{
    mstar_edge edge;
    mstar_edge_init(&edge);
    snprintf(edge.name, sizeof(edge.name), "x");
    snprintf(edge.next_node, sizeof(edge.next_node), "node");
    mstar_ready_set ready = { 0 };
    mstar_completion_list running = { 0 };
    int ok = check(mstar_edge_add_tensor(&edge, info), "mstar_edge_add_tensor") &&
             check(mstar_comm_start_read_tensors(c, rid, &edge, 1, &running), "start_read") &&
             check(mstar_comm_get_ready_tensors(c, &ready), "get_ready_tensors") &&
             ready.nedges == 1;
    float got[6];
    mstar_tensor view;
    if (ok && check(mstar_comm_get_tensor_copy(c, info->uuid, got, sizeof(got), &view), "copy")) {
        printf("worker_1 read [%g %g %g; %g %g %g] from worker_0\n", got[0], got[1], got[2], got[3],
               got[4], got[5]);
        ok = check(mstar_comm_dereference(c, info->uuid, 1), "dereference");
    } else {
        ok = 0;
    }
    mstar_completion_list_clear(&running);
    mstar_ready_set_clear(&ready);
    mstar_edge_clear(&edge);
    return ok;
}

int main(void)
{
    char dir[] = "/tmp/mstar-example-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("arena_handoff: mkdtemp");
        return 1;
    }
    route to_consumer = { "worker_0", NULL }, to_producer = { "worker_1", NULL };
    mstar_comm *p = open_comm("worker_0", dir, &to_consumer);
    mstar_comm *c = open_comm("worker_1", dir, &to_producer);
    to_consumer.to = c;
    to_producer.to = p;
    mstar_rid rid = mstar_rid_from_int(1);
    float data[6] = { 1, 2, 3, 4, 5, 6 };
    mstar_tensor_info info;
    int ok = p != NULL && c != NULL && produce(p, &rid, data, &info) && consume(c, &rid, &info);
    /* The ACK reached worker_0 inside get_ready_tensors: it holds nothing any more. */
    if (ok)
        printf("worker_0 holds %zu tensors after the ACK\n", mstar_comm_num_tensors(p));
    ok = ok && mstar_comm_num_tensors(p) == 0 && mstar_comm_num_tensors(c) == 0;
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
    rmdir(dir);
    return ok ? 0 : 1;
}
