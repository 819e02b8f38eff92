/*
 * fuzz_comm_state.c — stateful libFuzzer target for the producer's side of the ACK protocol. Each
 * input is a program: a sequence of steps against one producer ("worker_0") and one consumer
 * ("worker_1") over the files transport — store and send a tensor to some of worker_1, worker_2
 * and worker_3, worker_1 reading it (INPUT_SIGNALS), its ACKs arriving, TENSOR_RECEIVED and
 * UNPERSIST_TENSORS from varying senders with any count (forged, replayed, out of range),
 * worker_1's READS_DONE (it releases what it read) and REMOVE_REQUEST (soft or forced cleanup).
 *
 * A model runs beside the managers: per tensor, the deliveries each destination still owes an
 * ACK for, the reference count and the persist marker, following the rules docs/security.md
 * gives. After every step: a tensor the model says is held is held, with every byte as stored;
 * one the model says is freed is gone; a tensor worker_1 read and has not released is held there
 * with its bytes. At the end everything is torn down and nothing is left: no tensor held, no
 * file in the shm directory.
 *
 * Seed corpus: tests/fuzz/corpus/fuzz_comm_state/.
 */
#include "mstar/mstar.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXT      32 /* tensors one input may produce */
#define NDEST     3  /* worker_1 (a real consumer), worker_2, worker_3 (ACKs only) */
#define NBYTES    64 /* bytes per tensor */
#define MAX_COUNT (INT64_C(1) << 32)

static const char *const dests[NDEST] = { "worker_1", "worker_2", "worker_3" };
static const char *const senders[5] = { "worker_1", "worker_2", "worker_3", "intruder",
                                        "conductor" };
static const int64_t counts[8] = { 1, 2, 3, 0, -1, INT64_MAX, MAX_COUNT, MAX_COUNT + 1 };

static char dir[] = "/tmp/mstar-fuzz-state-XXXXXX";
static mstar_comm *prod, *cons;

/* worker_1's ACKs, held until a step delivers them. */
static mstar_msg acks[64];
static int nacks;

typedef struct model {
    mstar_tensor_id uuid;
    bool held;      /* the producer still holds it */
    bool persisted; /* the persist marker */
    int64_t ref;    /* the producer's reference count */
    int64_t owed[NDEST];
    int64_t grant; /* ACKs beyond the ledger that UNPERSIST allowed (docs/invariants.md I-28) */
    bool read;     /* worker_1 read it and has not released it */
    bool was_read; /* worker_1 read it once (a delivery is read once) */
    uint8_t seed;  /* its bytes: seed + i */
} model;

static model ts[MAXT];
static int nts;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_comm_state: %s (%s)\n", what, mstar_last_error());
    abort();
}

static mstar_status to_producer(void *ctx, const char *peer, mstar_msg *msg)
{
    (void)ctx;
    if (strcmp(peer, "worker_0") != 0 || nacks == 64)
        return mstar_error_set(MSTAR_EAGAIN, "fuzz: no room for the ACK");
    acks[nacks] = *msg; /* take the arrays; the caller's message is left empty */
    snprintf(acks[nacks].from, sizeof(acks[nacks].from), "worker_1");
    mstar_msg_init(msg, MSTAR_MSG_INVALID);
    nacks++;
    return MSTAR_OK;
}

static mstar_comm *make(const char *entity)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = MSTAR_TRANSPORT_FILES;
    o.shm_dir = dir;
    o.send = to_producer;
    mstar_comm *c;
    if (mstar_comm_create(&o, &c) != MSTAR_OK)
        die("mstar_comm_create");
    return c;
}

static void teardown(void)
{
    mstar_comm_destroy(cons);
    mstar_comm_destroy(prod);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_comm_state: could not remove %s\n", dir);
}

static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

static const mstar_rid rid1 = { .is_str = false, .num = 1 };

/* The descriptor of model tensor t as the producer sends it. */
static mstar_edge edge_of(const model *t)
{
    mstar_edge e;
    mstar_edge_init(&e);
    snprintf(e.name, sizeof(e.name), "sig");
    mstar_tensor_info info;
    if (mstar_comm_tensor_info(prod, t->uuid, &info) != MSTAR_OK ||
        mstar_edge_add_tensor(&e, &info) != MSTAR_OK)
        die("descriptor");
    return e;
}

/* Store a tensor, route it to the destinations in `mask`, stage it and send it to each. */
static void produce(uint8_t mask, uint8_t seed, bool persist)
{
    if (nts == MAXT)
        return;
    model *t = &ts[nts];
    memset(t, 0, sizeof(*t));
    t->seed = seed;
    uint8_t bytes[NBYTES];
    for (int i = 0; i < NBYTES; i++)
        bytes[i] = (uint8_t)(seed + i);
    int64_t shape[1] = { NBYTES };
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = "sig";
    if (mstar_tensor_init(&o.tensor, bytes, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 1, shape) !=
        MSTAR_OK)
        die("tensor");
    mstar_tensor_info info;
    if (mstar_comm_store_and_return_tensor_info(prod, &rid1, &o, 1, NULL, &info) != MSTAR_OK)
        die("store");
    t->uuid = info.uuid;
    t->held = true;
    nts++;
    mstar_edge routed[NDEST];
    uint32_t n = 0;
    for (int d = 0; d < NDEST; d++)
        if (mask & (1u << d))
            routed[n++] = edge_of(t);
    if (mstar_comm_increment_ref(prod, t->uuid, 1) != MSTAR_OK ||
        mstar_comm_set_output_ref_counts(prod, &t->uuid, 1, routed, n) != MSTAR_OK)
        die("route");
    for (uint32_t k = 0; k < n; k++)
        mstar_edge_clear(&routed[k]);
    t->ref = n;
    if (n == 0) {
        t->held = false; /* routed nowhere: freed at once */
        return;
    }
    if (mstar_comm_register_for_send(prod, &rid1, &info, 1) != MSTAR_OK)
        die("register");
    if (persist) {
        mstar_comm_set_persist(prod, t->uuid, true);
        t->persisted = true;
    }
    for (int d = 0; d < NDEST; d++) {
        if (!(mask & (1u << d)))
            continue;
        mstar_msg m;
        mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
        m.request_id = rid1;
        mstar_edge e = edge_of(t);
        if (mstar_msg_add_edge(&m, &e) != MSTAR_OK || mstar_comm_note_sent(prod, dests[d], &m))
            die("note_sent");
        mstar_edge_clear(&e);
        mstar_msg_clear(&m);
        t->owed[d] = 1;
    }
}

/* The model's collection rule: not persisted and no reference left. */
static void settle(model *t)
{
    if (t->held && !t->persisted && t->ref <= 0)
        t->held = false;
}

/* The grant is kept within +-MAX_COUNT. */
static int64_t clamp_count(int64_t n)
{
    return n < -MAX_COUNT ? -MAX_COUNT : n > MAX_COUNT ? MAX_COUNT : n;
}

/* An ACK entry from sender s: what the producer applies of it, per the rules. The ledger is
 * armed from the first tensor sent on, and no entity list is named, so every sender may spend
 * the grant. */
static void model_ack(model *t, int s, int64_t count)
{
    if (!t->held || count < 1 || count > MAX_COUNT)
        return;
    int64_t take = 0;
    if (s < NDEST) {
        take = count < t->owed[s] ? count : t->owed[s];
        t->owed[s] -= take;
    }
    if (t->persisted) { /* applied whole; the part the ledger did not cover is charged */
        t->grant = clamp_count(t->grant - (count - take));
        t->ref -= count;
        return;
    }
    if (take < count && t->grant > 0) {
        int64_t g = count - take < t->grant ? count - take : t->grant;
        t->grant -= g;
        take += g;
    }
    t->ref -= take;
    settle(t);
}

/* worker_1 reads t (it was sent it and has not read it yet) and checks every byte. */
static void consume(model *t)
{
    if (!t->held || t->was_read || t->owed[0] == 0)
        return;
    mstar_edge e = edge_of(t);
    if (mstar_comm_start_read_tensors(cons, &rid1, &e, 1, NULL) != MSTAR_OK)
        die("start_read of a held tensor");
    mstar_edge_clear(&e);
    mstar_ready_set set;
    if (mstar_comm_get_ready_tensors(cons, &set) != MSTAR_OK || set.nedges != 1)
        die("get_ready_tensors");
    mstar_ready_set_clear(&set);
    t->read = t->was_read = true;
}

static void deliver_acks(void)
{
    for (int i = 0; i < nacks; i++) {
        for (uint32_t k = 0; k < acks[i].ncounts; k++)
            for (int j = 0; j < nts; j++)
                if (ts[j].uuid == acks[i].counts[k].uuid)
                    model_ack(&ts[j], 0, acks[i].counts[k].count);
        if (mstar_comm_handle_message(prod, &acks[i]) != MSTAR_OK)
            die("handle ACK");
        mstar_msg_clear(&acks[i]);
    }
    nacks = 0;
}

static void forged(mstar_msg_type type, int s, model *t, mstar_tensor_id uuid, int64_t count)
{
    mstar_msg m;
    mstar_msg_init(&m, type);
    m.request_id = rid1;
    snprintf(m.from, sizeof(m.from), "%s", senders[s]);
    if (mstar_msg_add_count(&m, uuid, count) != MSTAR_OK)
        die("add_count");
    if (mstar_comm_handle_message(prod, &m) != MSTAR_OK)
        die("handle forged");
    mstar_msg_clear(&m);
    if (t == NULL)
        return;
    if (type == MSTAR_MSG_TENSOR_RECEIVED) {
        model_ack(t, s, count);
    } else if (t->held && count >= 0 && count <= MAX_COUNT) {
        t->ref += count;
        if (count > 0)
            t->grant = clamp_count(t->grant + count);
        t->persisted = false;
        settle(t);
    }
}

/* worker_1 releases what it read (its node is done) and soft-cleans the request. */
static void reads_done(void)
{
    for (int i = 0; i < nts; i++) {
        if (!ts[i].read)
            continue;
        if (mstar_comm_dereference(cons, ts[i].uuid, 1) != MSTAR_OK)
            die("release");
        ts[i].read = false;
    }
    if (mstar_comm_cleanup_request(cons, &rid1) != MSTAR_OK)
        die("consumer cleanup");
}

static void check(void)
{
    for (int i = 0; i < nts; i++) {
        const model *t = &ts[i];
        mstar_tensor v;
        mstar_status st = mstar_comm_get_tensor(prod, t->uuid, &v);
        if (t->held != (st == MSTAR_OK)) {
            fprintf(stderr, "tensor %d: the model says %s\n", i, t->held ? "held" : "freed");
            die("producer state");
        }
        const uint8_t *p = st == MSTAR_OK ? mstar_tensor_ptr(&v) : NULL;
        for (int b = 0; p != NULL && b < NBYTES; b++)
            if (p[b] != (uint8_t)(t->seed + b))
                die("producer bytes changed");
        if (!t->read)
            continue;
        if (mstar_comm_get_tensor(cons, t->uuid, &v) != MSTAR_OK)
            die("a tensor worker_1 still reads was freed");
        p = mstar_tensor_ptr(&v);
        for (int b = 0; b < NBYTES; b++)
            if (p[b] != (uint8_t)(t->seed + b))
                die("consumer bytes wrong");
    }
}

static void reset(void)
{
    for (int i = 0; i < nacks; i++)
        mstar_msg_clear(&acks[i]);
    nacks = 0;
    if (mstar_comm_force_cleanup_request(cons, &rid1) != MSTAR_OK ||
        mstar_comm_force_cleanup_request(prod, &rid1) != MSTAR_OK)
        die("force cleanup");
    if (mstar_comm_num_tensors(prod) != 0 || mstar_comm_num_tensors(cons) != 0)
        die("tensors left after force cleanup");
    if (files_in_dir() != 0)
        die("files left in the shm directory");
    nts = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (mkdtemp(dir) == NULL)
            die("mkdtemp");
        mstar_log_set_level(MSTAR_LOG_ERROR);
        prod = make("worker_0");
        cons = make("worker_1");
        atexit(teardown);
        ready = 1;
    }
    for (size_t at = 0; at + 3 <= size; at += 3) {
        uint8_t op = data[at] % 8, a = data[at + 1], b = data[at + 2];
        model *t = nts > 0 ? &ts[a % nts] : NULL;
        mstar_tensor_id uuid = t != NULL && !(b & 0x80) ? t->uuid : (mstar_tensor_id)a * 977;
        switch (op) {
        case 0:
            produce(a & 7, b, (a & 8) != 0);
            break;
        case 1:
            if (t != NULL)
                consume(t);
            break;
        case 2:
            deliver_acks();
            break;
        case 3:
        case 4:
            forged(MSTAR_MSG_TENSOR_RECEIVED, b % 5, t != NULL && uuid == t->uuid ? t : NULL, uuid,
                   counts[(b >> 3) & 7]);
            break;
        case 5:
            forged(MSTAR_MSG_UNPERSIST_TENSORS, b % 5, t != NULL && uuid == t->uuid ? t : NULL,
                   uuid, counts[(b >> 3) & 7]);
            break;
        case 6:
            reads_done();
            break;
        default:
            if (b & 1) { /* REMOVE_REQUEST with force: everything of the request goes */
                reset();
            } else if (mstar_comm_cleanup_request(prod, &rid1) != MSTAR_OK) {
                die("soft cleanup");
            }
            break;
        }
        check();
    }
    reset();
    return 0;
}
