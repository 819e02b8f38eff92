/*
 * transport_world.c — the producer, the consumers and the main of the transport's soak and fault
 * tests (transport_world.h says what the world is).
 */
#include "transport_world.h"

const char *const consumer_names[NCONS] = { "worker_1", "worker_2" };

static uint64_t pattern_word(mstar_tensor_id uuid, uint64_t i)
{
    return (uuid ^ (i * UINT64_C(0x9E3779B97F4A7C15))) * UINT64_C(0xBF58476D1CE4E5B9) + i;
}

static void pattern_fill(mstar_tensor_id uuid, uint8_t *p, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pattern_word(uuid, i / 8);
        memcpy(p + i, &w, 8);
    }
    if (i < n) {
        uint64_t w = pattern_word(uuid, i / 8);
        memcpy(p + i, &w, (size_t)(n - i));
    }
}

static bool pattern_check(mstar_tensor_id uuid, const uint8_t *p, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pattern_word(uuid, i / 8), got;
        memcpy(&got, p + i, 8);
        if (got != w)
            return false;
    }
    if (i < n) {
        uint64_t w = pattern_word(uuid, i / 8);
        return memcmp(p + i, &w, (size_t)(n - i)) == 0;
    }
    return true;
}

static bool world_is_ucx(mstar_transport_kind kind)
{
    return kind == MSTAR_TRANSPORT_UCX_TCP || kind == MSTAR_TRANSPORT_UCX_RDMA;
}

int64_t world_tensors(mstar_transport_kind kind, const char *knob, int64_t def,
                      const char *ucx_knob, int64_t ucx_def, int64_t min)
{
    int64_t n;
    mstar_status st = world_is_ucx(kind)
                          ? mstar_env_get_int(ucx_knob, ucx_def, min, INT64_C(1) << 40, &n)
                          : mstar_env_get_int(knob, def, min, INT64_C(1) << 40, &n);
    assert_mstar_ok(st);
    return n;
}

/* Run `run(kind)` for each transport of MSTAR_TEST_TRANSPORTS (default WORLD_TRANSPORTS). */
static void world_each_transport(void (*run)(mstar_transport_kind kind))
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s",
             mstar_env_get_string("MSTAR_TEST_TRANSPORTS", WORLD_TRANSPORTS));
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        mstar_transport_kind kind;
        assert_mstar_ok(mstar_transport_kind_from_name(name, &kind));
        run(kind);
    }
}

double world_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void world_die(const char *who, const char *what)
{
    fprintf(stderr, "[%s] FAILED: %s (%s)\n", who, what, mstar_last_error());
    fflush(stderr);
    _exit(1);
}

static mstar_mesh *world_mesh(const world_cfg *cfg, const char *entity)
{
    mstar_mesh_options mo = { MSTAR_MESH_IPC, cfg->ipc_dir, NULL, 0 };
    mstar_mesh *mesh;
    WORLD_CHECK(entity, mstar_mesh_create(entity, &mo, &mesh));
    return mesh;
}

static mstar_comm *world_comm(const world_cfg *cfg, const char *entity, mstar_mesh *mesh)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = cfg->kind;
    o.shm_dir = cfg->shm_dir;
    o.send = mstar_comm_send_via_mesh;
    o.send_ctx = mesh;
    mstar_comm *c;
    WORLD_CHECK(entity, mstar_comm_create(&o, &c));
    return c;
}

/* Send, retrying while the peer's queue is full (it is draining it). */
static void world_send(const char *who, mstar_mesh *mesh, const char *peer, mstar_msg *msg)
{
    double until = world_now() + WORLD_DEADLINE_S;
    for (;;) {
        mstar_status st = mstar_mesh_send(mesh, peer, msg);
        if (st == MSTAR_OK)
            return;
        if (st != MSTAR_EAGAIN || world_now() > until)
            world_die(who, "mstar_mesh_send");
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
}

void world_send_simple(const char *who, mstar_mesh *mesh, const char *peer, mstar_msg_type type,
                       const mstar_rid *rid)
{
    mstar_msg m;
    mstar_msg_init(&m, type);
    if (rid != NULL)
        m.request_id = *rid;
    world_send(who, mesh, peer, &m);
    mstar_msg_clear(&m);
}

static cons_count *cons_count_of(consumer *k, const mstar_rid *rid)
{
    if (rid->is_str || rid->num < 0)
        world_die(k->me, "a request id the producer does not make");
    size_t i = (size_t)rid->num;
    if (i >= k->ncounts) {
        size_t n = i + 1 > 2 * k->ncounts ? i + 1 : 2 * k->ncounts;
        cons_count *grown = realloc(k->counts, n * sizeof(*grown));
        if (grown == NULL)
            world_die(k->me, "realloc");
        memset(grown + k->ncounts, 0, (n - k->ncounts) * sizeof(*grown));
        k->counts = grown;
        k->ncounts = n;
    }
    return &k->counts[i];
}

static void verify_edge(mstar_comm *c, const mstar_edge *e, cons_report *rep)
{
    for (uint32_t i = 0; i < e->ntensors; i++) {
        const mstar_tensor_info *info = &e->tensor_info[i];
        mstar_tensor t;
        bool ok = mstar_comm_get_tensor(c, info->uuid, &t) == MSTAR_OK && t.dtype == info->dtype &&
                  t.ndim == info->ndim && mstar_tensor_nbytes(&t) == info->nbytes;
        for (int32_t d = 0; ok && d < t.ndim; d++)
            ok = t.shape[d] == info->dims[d];
        ok = ok && pattern_check(info->uuid, mstar_tensor_ptr(&t), info->nbytes);
        rep->tensors++;
        rep->bytes += (int64_t)info->nbytes;
        if (!ok) {
            rep->bad++;
            fprintf(stderr, "[consumer] tensor 0x%016llx of %llu bytes is wrong\n",
                    (unsigned long long)info->uuid, (unsigned long long)info->nbytes);
        }
    }
}

static void consume(const char *me, mstar_comm *c, held_edge *h)
{
    for (uint32_t i = 0; i < h->edge.ntensors; i++)
        WORLD_CHECK(me, mstar_comm_dereference(c, h->edge.tensor_info[i].uuid, 1));
    mstar_edge_clear(&h->edge);
}

/* Deliver what has landed: verify each edge and hold it (the oldest beyond CONS_HOLD is
 * consumed). Edges of every request are kept, whichever request the caller waits for. */
static void cons_collect(consumer *k)
{
    mstar_ready_set set;
    WORLD_CHECK(k->me, mstar_comm_get_ready_tensors(k->comm, &set));
    k->rep.failed += set.nfailed;
    for (uint32_t i = 0; i < set.nfailed; i++)
        fprintf(stderr, "[%s] read of '%s' failed: %s\n", k->me, set.failed[i].edge_name,
                set.failed[i].message);
    for (uint32_t r = 0; r < set.nrequests; r++) {
        for (uint32_t e = set.edge_start[r]; e < set.edge_start[r + 1]; e++) {
            verify_edge(k->comm, &set.edges[e], &k->rep);
            cons_count_of(k, &set.rids[r])->delivered += set.edges[e].ntensors;
            k->held[k->nheld].rid = set.rids[r];
            k->held[k->nheld].edge = set.edges[e];
            mstar_edge_init(&set.edges[e]); /* moved */
            /* A view's ACK waits for its release, and the producer's end waits for every
             * ACK: views are consumed at once. */
            if (++k->nheld > (k->zero_copy ? 0 : CONS_HOLD)) {
                consume(k->me, k->comm, &k->held[0]);
                memmove(&k->held[0], &k->held[1], (size_t)(--k->nheld) * sizeof(k->held[0]));
            }
        }
    }
    mstar_ready_set_clear(&set);
}

/* Keep the handles of reads still running; forget those that finished. */
static void cons_track(consumer *k, mstar_completion_list *list)
{
    size_t w = 0;
    for (size_t i = 0; i < k->nreading; i++) {
        if (mstar_completion_poll(k->reading[i]) == MSTAR_EAGAIN)
            k->reading[w++] = k->reading[i];
        else
            mstar_completion_release(k->reading[i]);
    }
    k->nreading = w;
    for (uint32_t i = 0; list != NULL && i < list->n; i++) {
        if (k->nreading == k->cap_reading) {
            k->cap_reading = k->cap_reading ? 2 * k->cap_reading : 16;
            k->reading = realloc(k->reading, k->cap_reading * sizeof(*k->reading));
            if (k->reading == NULL)
                world_die(k->me, "realloc");
        }
        k->reading[k->nreading++] = list->items[i];
        list->items[i] = NULL; /* moved: clearing the list releases nothing of it */
    }
}

/* Sleep until a message or a finished read (or timeout_ms), as a worker's event loop does. */
static void cons_wait(consumer *k, int timeout_ms)
{
    struct pollfd fds[2] = { { mstar_mesh_inbox_fd(k->mesh), POLLIN, 0 },
                             { mstar_comm_event_fd(k->comm), POLLIN, 0 } };
    poll(fds, 2, timeout_ms);
    if (fds[1].revents & POLLIN)
        mstar_comm_event_drain(k->comm);
}

static void cons_start_reads(consumer *k, const mstar_msg *m)
{
    mstar_completion_list list;
    WORLD_CHECK(k->me, (k->zero_copy ? mstar_comm_start_read_views : mstar_comm_start_read_tensors)(
                           k->comm, &m->request_id, m->edges, m->nedges, &list));
    for (uint32_t e = 0; e < m->nedges; e++)
        cons_count_of(k, &m->request_id)->received += m->edges[e].ntensors;
    cons_track(k, &list);
    mstar_completion_list_clear(&list);
    /* One-host transports read inside start_read_tensors: deliver before anything else. */
    cons_collect(k);
}

/* The request is aborted: its nodes stop (their inputs are not released), reads drain, then
 * everything of it goes and READS_DONE tells the conductor. What was received and not
 * delivered by then is dropped (a remote read still running, or landed and not collected). */
static void cons_drain(consumer *k, const mstar_rid *rid)
{
    int w = 0;
    for (int i = 0; i < k->nheld; i++) {
        if (mstar_rid_equal(&k->held[i].rid, rid))
            mstar_edge_clear(&k->held[i].edge);
        else
            k->held[w++] = k->held[i];
    }
    k->nheld = w;
    WORLD_CHECK(k->me, mstar_comm_cleanup_request(k->comm, rid));
    while (mstar_comm_has_inflight_reads(k->comm, rid)) {
        cons_wait(k, 100);
        cons_collect(k); /* other requests' edges are delivered, not lost */
    }
    WORLD_CHECK(k->me, mstar_comm_force_cleanup_request(k->comm, rid));
    cons_count *n = cons_count_of(k, rid);
    k->rep.dropped += n->received - n->delivered;
    world_send_simple(k->me, k->mesh, PRODUCER, MSTAR_MSG_READS_DONE, rid);
}

/* The consumer process: returns only through _exit. */
static void consumer_main(const world_cfg *cfg, int index)
{
    consumer k;
    memset(&k, 0, sizeof(k));
    k.me = consumer_names[index];
    k.zero_copy = cfg->zero_copy;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    mstar_log_set_entity(k.me);
    k.mesh = world_mesh(cfg, k.me);
    k.comm = world_comm(cfg, k.me, k.mesh);
    world_send_simple(k.me, k.mesh, PRODUCER, MSTAR_MSG_HELLO, NULL);
    bool stop = false;
    double until = world_now() + WORLD_DEADLINE_S;
    while (!stop) {
        if (world_now() > until)
            world_die(k.me, "deadline");
        mstar_msg m;
        mstar_status st = mstar_mesh_recv(k.mesh, 0, &m);
        if (st == MSTAR_EAGAIN) {
            cons_collect(&k);
            cons_track(&k, NULL);
            cons_wait(&k, 1000);
            continue;
        }
        if (st != MSTAR_OK)
            world_die(k.me, "mstar_mesh_recv");
        if (m.type == MSTAR_MSG_INPUT_SIGNALS)
            cons_start_reads(&k, &m);
        else if (m.type == MSTAR_MSG_DRAIN_REQUEST)
            cons_drain(&k, &m.request_id);
        else if (m.type == MSTAR_MSG_SHUTDOWN)
            stop = true;
        mstar_msg_clear(&m);
    }
    /* Reads sent before the stop land and are delivered first. */
    for (size_t i = 0; i < k.nreading; i++)
        if (mstar_completion_wait(k.reading[i], WORLD_DEADLINE_S * 1000) == MSTAR_ETIMEDOUT)
            world_die(k.me, "a read still running at the deadline");
    cons_track(&k, NULL);
    cons_collect(&k);
    for (int i = 0; i < k.nheld; i++)
        consume(k.me, k.comm, &k.held[i]);
    k.rep.left = (int64_t)mstar_comm_num_tensors(k.comm);
    mstar_msg r;
    mstar_msg_init(&r, MSTAR_MSG_HELLO);
    mstar_msg_add_kv(&r, "tensors", k.rep.tensors);
    mstar_msg_add_kv(&r, "bytes", k.rep.bytes);
    mstar_msg_add_kv(&r, "bad", k.rep.bad);
    mstar_msg_add_kv(&r, "left", k.rep.left);
    mstar_msg_add_kv(&r, "failed", k.rep.failed);
    mstar_msg_add_kv(&r, "dropped", k.rep.dropped);
    world_send(k.me, k.mesh, PRODUCER, &r);
    mstar_msg_clear(&r);
    /* Wait for the producer's goodbye: our last messages have then arrived. */
    for (;;) {
        if (world_now() > until)
            world_die(k.me, "deadline waiting for goodbye");
        mstar_msg m;
        if (mstar_mesh_recv(k.mesh, 1000, &m) != MSTAR_OK)
            continue;
        bool bye = m.type == MSTAR_MSG_SHUTDOWN;
        mstar_msg_clear(&m);
        if (bye)
            break;
    }
    free(k.reading);
    free(k.counts);
    mstar_comm_destroy(k.comm);
    mstar_mesh_destroy(k.mesh);
    _exit(k.rep.bad == 0 && k.rep.left == 0 && k.rep.failed == 0 ? 0 : 3);
}

uint64_t prod_rand(producer *p)
{
    return mstar_test_rand(&p->rng);
}

/* A size log-uniform in [1, max], or 0 with 2% probability. */
static uint64_t random_size(producer *p)
{
    if (prod_rand(p) % 50 == 0)
        return 0;
    double u = (double)(prod_rand(p) >> 11) / (double)(UINT64_C(1) << 53);
    double lmax = __builtin_log((double)p->cfg->max_bytes);
    uint64_t n = (uint64_t)__builtin_exp(u * lmax);
    return n < 1 ? 1 : (n > p->cfg->max_bytes ? p->cfg->max_bytes : n);
}

static mstar_tensor random_tensor(producer *p)
{
    static const mstar_dtype dtypes[] = { MSTAR_DTYPE_BOOL,    MSTAR_DTYPE_UINT8,
                                          MSTAR_DTYPE_INT8,    MSTAR_DTYPE_INT16,
                                          MSTAR_DTYPE_INT32,   MSTAR_DTYPE_INT64,
                                          MSTAR_DTYPE_FLOAT16, MSTAR_DTYPE_BFLOAT16,
                                          MSTAR_DTYPE_FLOAT32, MSTAR_DTYPE_FLOAT64 };
    mstar_dtype dt = dtypes[prod_rand(p) % 10];
    size_t es = mstar_dtype_size(dt);
    int64_t numel = (int64_t)(random_size(p) / es);
    int64_t shape[3] = { numel, 1, 1 };
    int32_t ndim = 1;
    uint64_t r = prod_rand(p);
    if (numel == 1 && r % 3 == 0) {
        ndim = 0; /* a scalar */
    } else if (numel == 0 && r % 2 == 0) {
        ndim = 2;
        shape[0] = 3;
        shape[1] = 0;
    } else if (numel % 4 == 0 && r % 3 == 1) {
        ndim = 3;
        shape[0] = numel / 4;
        shape[1] = 2;
        shape[2] = 2;
    } else if (numel % 2 == 0 && r % 3 == 2) {
        ndim = 2;
        shape[0] = 2;
        shape[1] = numel / 2;
    }
    mstar_tensor t;
    if (mstar_tensor_init(&t, NULL, mstar_device_cpu(), dt, ndim, shape) != MSTAR_OK)
        world_die(PRODUCER, "tensor shape");
    uint64_t n = mstar_tensor_nbytes(&t);
    t.data = malloc(n + 1);
    if (t.data == NULL)
        world_die(PRODUCER, "malloc");
    return t;
}

static void release_free(void *ctx, void *data)
{
    free(data);
}

/* A reader of drain i is done (READS_DONE, or it died: a dead reader reads nothing more); when
 * none is left, the request is force-cleaned. */
static void drain_reader_done(producer *p, size_t i, int reader)
{
    p->drains[i].waiting[reader] = false;
    for (int c = 0; c < NCONS; c++)
        if (p->drains[i].waiting[c])
            return;
    WORLD_CHECK(PRODUCER, mstar_comm_force_cleanup_request(p->comm, &p->drains[i].rid));
    p->drains[i] = p->drains[--p->ndrains];
}

static void drain_done(producer *p, const mstar_rid *rid, const char *from)
{
    for (size_t i = 0; i < p->ndrains; i++) {
        if (!mstar_rid_equal(&p->drains[i].rid, rid))
            continue;
        for (int c = 0; c < NCONS; c++)
            if (strcmp(from, consumer_names[c]) == 0)
                drain_reader_done(p, i, c);
        return;
    }
}

void reader_died(producer *p, int c)
{
    p->dead[c] = true;
    for (size_t i = p->ndrains; i-- > 0;)
        drain_reader_done(p, i, c);
}

bool prod_pump(producer *p, int timeout_ms)
{
    mstar_msg m;
    mstar_status st = mstar_mesh_recv(p->mesh, timeout_ms, &m);
    if (st == MSTAR_EAGAIN)
        return false;
    if (st != MSTAR_OK)
        world_die(PRODUCER, "mstar_mesh_recv");
    if (m.type == MSTAR_MSG_TENSOR_RECEIVED) {
        WORLD_CHECK(PRODUCER, mstar_comm_handle_message(p->comm, &m));
    } else if (m.type == MSTAR_MSG_READS_DONE) {
        drain_done(p, &m.request_id, m.from);
    } else if (m.type == MSTAR_MSG_HELLO && mstar_msg_get_kv(&m, "tensors", -1) >= 0) {
        for (int i = 0; i < NCONS; i++) {
            if (strcmp(m.from, consumer_names[i]) != 0)
                continue;
            p->reports_in[i] = true;
            p->reports[i].tensors = mstar_msg_get_kv(&m, "tensors", 0);
            p->reports[i].bytes = mstar_msg_get_kv(&m, "bytes", 0);
            p->reports[i].bad = mstar_msg_get_kv(&m, "bad", 0);
            p->reports[i].left = mstar_msg_get_kv(&m, "left", 0);
            p->reports[i].failed = mstar_msg_get_kv(&m, "failed", 0);
            p->reports[i].dropped = mstar_msg_get_kv(&m, "dropped", 0);
        }
    }
    mstar_msg_clear(&m);
    return true;
}

void prod_unpersist_one(producer *p, size_t i)
{
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_UNPERSIST_TENSORS);
    mstar_msg_add_count(&m, p->unpersist[i].uuid, p->unpersist[i].k);
    WORLD_CHECK(PRODUCER, mstar_comm_handle_message(p->comm, &m));
    mstar_msg_clear(&m);
    p->unpersist[i] = p->unpersist[--p->nunpersist];
}

/* The output's bytes in a loan of the same dtype and shape instead (filled after the store, as
 * every output is). */
static void loan_instead(producer *p, mstar_output *o)
{
    mstar_tensor t = o->tensor;
    WORLD_CHECK(PRODUCER,
                mstar_comm_loan_output(p->comm, t.dtype, t.shape, t.ndim, &o->tensor, &o->loan));
    o->release = NULL;
    free(t.data);
}

void prod_request(producer *p, int64_t index, int k)
{
    mstar_rid rid = mstar_rid_from_int(index);
    mstar_output outs[8];
    for (int i = 0; i < k; i++) {
        memset(&outs[i], 0, sizeof(outs[i]));
        outs[i].signal = "x";
        outs[i].tensor = random_tensor(p);
        outs[i].release = release_free;
        if (p->cfg->zero_copy)
            loan_instead(p, &outs[i]);
    }
    mstar_tensor_info infos[8];
    WORLD_CHECK(PRODUCER, mstar_comm_store_and_return_tensor_info(p->comm, &rid, outs, (uint32_t)k,
                                                                  NULL, infos));
    p->stored += k;
    /* The bytes follow the uuid the store minted; the store kept the buffers (no copy). */
    for (int i = 0; i < k; i++) {
        mstar_tensor t;
        WORLD_CHECK(PRODUCER, mstar_comm_get_tensor(p->comm, infos[i].uuid, &t));
        pattern_fill(infos[i].uuid, mstar_tensor_ptr(&t), infos[i].nbytes);
    }
    mstar_tensor_id held[8];
    int dest[8];
    bool persist[8];
    for (int i = 0; i < k; i++) {
        held[i] = infos[i].uuid;
        /* 1: worker_1, 2: worker_2, 3: both. A dead consumer keeps getting some (the producer
         * does not know at once): they are never read, and must be reclaimed. */
        dest[i] = (int)(prod_rand(p) % 3) + 1;
        persist[i] = prod_rand(p) % 5 == 0;
    }
    WORLD_CHECK(PRODUCER, mstar_comm_increment_ref_batch_uniform(p->comm, held, (uint32_t)k, 1));
    /* Routed edges: one per consumer, with the non-persisted descriptors it gets. Persisted
     * ones are held by their marker and sent on "by the conductor". */
    mstar_edge per[NCONS], routed[NCONS];
    uint32_t nrouted = 0;
    for (int c = 0; c < NCONS; c++) {
        mstar_edge_init(&per[c]);
        mstar_edge_init(&routed[c]);
        snprintf(per[c].name, sizeof(per[c].name), "x");
        snprintf(per[c].next_node, sizeof(per[c].next_node), "node");
        snprintf(routed[c].name, sizeof(routed[c].name), "x");
    }
    for (int i = 0; i < k; i++) {
        if (persist[i]) {
            WORLD_CHECK(PRODUCER, mstar_comm_set_persist(p->comm, infos[i].uuid, true));
            p->persisted++;
        }
        for (int c = 0; c < NCONS; c++) {
            if (!(dest[i] & (1 << c)))
                continue;
            WORLD_CHECK(PRODUCER, mstar_edge_add_tensor(&per[c], &infos[i]));
            if (!persist[i])
                WORLD_CHECK(PRODUCER, mstar_edge_add_tensor(&routed[c], &infos[i]));
        }
    }
    for (int c = 0; c < NCONS; c++)
        if (routed[c].ntensors > 0)
            routed[nrouted++] = routed[c];
    WORLD_CHECK(PRODUCER,
                mstar_comm_set_output_ref_counts(p->comm, held, (uint32_t)k, routed, nrouted));
    uint32_t count = (uint32_t)k;
    WORLD_CHECK(PRODUCER, mstar_comm_register_for_send_uuids(p->comm, &rid, 1, &count, held));
    WORLD_CHECK(PRODUCER, mstar_comm_refresh_shm_placement(p->comm, per, NCONS));
    bool abort_it = prod_rand(p) % 10 == 0;
    drain d = { rid, { false } };
    int readers = 0;
    for (int c = 0; c < NCONS; c++) {
        if (per[c].ntensors == 0)
            continue;
        mstar_msg m;
        mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
        m.request_id = rid;
        WORLD_CHECK(PRODUCER, mstar_msg_add_edge(&m, &per[c]));
        world_send(PRODUCER, p->mesh, consumer_names[c], &m);
        mstar_msg_clear(&m);
        for (uint32_t i = 0; i < per[c].ntensors; i++) {
            if (abort_it) {
                p->aborted_deliveries[c]++;
            } else {
                p->sent_tensors[c]++;
                p->sent_bytes[c] += (int64_t)per[c].tensor_info[i].nbytes;
            }
        }
        if (abort_it && !p->dead[c]) {
            world_send_simple(PRODUCER, p->mesh, consumer_names[c], MSTAR_MSG_DRAIN_REQUEST, &rid);
            d.waiting[c] = true;
            readers++;
        }
    }
    if (abort_it) {
        p->aborted_requests++;
        if (readers == 0) {
            WORLD_CHECK(PRODUCER, mstar_comm_force_cleanup_request(p->comm, &rid));
        } else {
            if (p->ndrains == p->cap_drains) {
                p->cap_drains = p->cap_drains ? p->cap_drains * 2 : 16;
                p->drains = realloc(p->drains, p->cap_drains * sizeof(*p->drains));
            }
            p->drains[p->ndrains++] = d;
        }
    } else {
        for (int i = 0; i < k; i++) {
            if (!persist[i])
                continue;
            int64_t kk = ((dest[i] & 1) != 0) + ((dest[i] & 2) != 0);
            if (p->nunpersist == p->cap_unpersist) {
                p->cap_unpersist = p->cap_unpersist ? p->cap_unpersist * 2 : 16;
                p->unpersist = realloc(p->unpersist, p->cap_unpersist * sizeof(*p->unpersist));
            }
            p->unpersist[p->nunpersist++] = (pending_unpersist){ infos[i].uuid, kk };
        }
        /* Request done here: soft cleanup, the rest waits for ACKs and UNPERSIST. */
        WORLD_CHECK(PRODUCER, mstar_comm_cleanup_request(p->comm, &rid));
    }
    for (int c = 0; c < NCONS; c++) {
        mstar_edge_clear(&per[c]);
    }
    for (uint32_t c = 0; c < nrouted; c++)
        mstar_edge_clear(&routed[c]);
}

void prod_start(producer *p, const world_cfg *cfg)
{
    p->cfg = cfg;
    p->rng = cfg->seed;
    for (int i = 0; i < NCONS; i++) {
        p->pids[i] = fork();
        assert_true(p->pids[i] >= 0);
        if (p->pids[i] == 0)
            consumer_main(cfg, i);
    }
    p->mesh = world_mesh(cfg, PRODUCER);
    p->comm = world_comm(cfg, PRODUCER, p->mesh);
    int hellos = 0;
    while (hellos < NCONS) {
        mstar_msg m;
        if (mstar_mesh_recv(p->mesh, 1000, &m) != MSTAR_OK)
            continue;
        hellos += m.type == MSTAR_MSG_HELLO;
        mstar_msg_clear(&m);
    }
}

void prod_check_report(const producer *p, int c)
{
    assert_true(p->reports_in[c]);
    assert_int_equal(p->reports[c].bad, 0);
    assert_int_equal(p->reports[c].failed, 0);
    assert_int_equal(p->reports[c].tensors + p->reports[c].dropped,
                     p->sent_tensors[c] + p->aborted_deliveries[c]);
    assert_true(p->reports[c].dropped <= p->aborted_deliveries[c]);
    if (!world_is_ucx(p->cfg->kind))
        assert_int_equal(p->reports[c].dropped, 0);
}

void prod_stop_consumer(producer *p, int c)
{
    world_send_simple(PRODUCER, p->mesh, consumer_names[c], MSTAR_MSG_SHUTDOWN, NULL);
    int status;
    assert_int_equal(waitpid(p->pids[c], &status, 0), p->pids[c]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

void prod_check_released(const producer *p)
{
    assert_int_equal(regions_of(p->comm), 0);
    if (p->cfg->kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats s;
        assert_mstar_ok(mstar_comm_arena_stats(p->comm, &s));
        assert_int_equal(s.live_slots, 0);
        assert_int_equal(s.spill_files, 0);
        if (p->cfg->zero_copy)
            assert_int_equal(s.free_bytes, s.total_bytes); /* every loan given back */
    }
}

void prod_close(producer *p)
{
    mstar_comm_destroy(p->comm);
    mstar_mesh_destroy(p->mesh);
    free(p->unpersist);
    free(p->drains);
}

static void (*world_run)(mstar_transport_kind kind);

static void world_test(void **state)
{
    (void)state;
    world_each_transport(world_run);
}

int world_main(int argc, char **argv, const char *name, void (*run)(mstar_transport_kind kind))
{
    ucx_test_setup(argc, argv);
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "16", 0);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "8", 0);
    world_run = run;
    const struct CMUnitTest tests[] = { { name, world_test, NULL, NULL, NULL } };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
