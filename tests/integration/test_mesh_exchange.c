/*
 * test_mesh_exchange.c — three processes exchange MSTAR_TEST_MESH_MESSAGES (default 10,000)
 * typed messages with each other in both directions, over ipc and over tcp on 127.0.0.1, while a
 * fourth process sprays garbage at all three: random bytes, truncated messages and messages with
 * a corrupted byte.
 *
 * Every message is checked on arrival: its sender, its sequence number (order is kept per sender
 * and none is lost) and its payload. The garbage sender ends with a valid marker carrying how many
 * bad frames it sent; since order is kept per sender, each receiver has dropped exactly that many
 * by the time the marker arrives, and logged some (the log lines are rate-limited).
 *
 * The parent only coordinates, through pipes: the children create their ZeroMQ contexts after the
 * fork, report that they bound (or that a TCP port was taken, and the parent retries on another
 * base port derived from its pid), exchange, report what they saw, and exit when all are done —
 * an exiting mesh drops what it has not delivered (linger 0), so nobody leaves early.
 */
#include "mstar_test.h"

#include "core/vec.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NPEERS             3
#define NCHILD             (NPEERS + 1) /* the last one sends garbage */
#define GARBAGE_ENTITY     "garbage_sender"
#define GARBAGE_PER_TARGET 300

static const char *const peer_names[NPEERS] = { "api_server", "conductor", "worker_0" };

static const char *ipc_dir;
static int64_t nmessages;

/* What a child tells the parent: bound ('B'), port taken ('E'), failed ('F'), done ('D'). */
struct report {
    char kind;
    uint64_t received; /* valid exchange messages */
    uint64_t dropped;  /* mstar_mesh_dropped at the end */
    uint64_t logged;   /* "dropped a frame" warnings */
    uint64_t garbage;  /* bad frames sent (the garbage child, summed over targets) */
    uint64_t full;     /* sends refused with MSTAR_EAGAIN (a peer's queue was full) */
};

struct child {
    pid_t pid;
    int report_fd; /* parent reads */
    int cmd_fd;    /* parent writes */
};

/* ---- the children ---------------------------------------------------------------------------- */

static void child_fail(const char *entity, const char *fmt, ...) MSTAR_PRINTF(2, 3);
static void child_fail(const char *entity, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s] FAILED: ", entity);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    _exit(1);
}

static void send_report(int fd, const struct report *r)
{
    if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
        _exit(2);
}

static char wait_command(int fd)
{
    char c = 'Q';
    while (read(fd, &c, 1) < 0 && errno == EINTR)
        continue;
    return c;
}

/* Create the child's mesh, report the outcome (bound, port taken, failed) and wait for the
 * parent's go; any other command ends the child here. */
static mstar_mesh *start_child(const char *entity, const mstar_mesh_options *opts, int report_fd,
                               int cmd_fd)
{
    mstar_log_set_entity(entity);
    mstar_mesh *mesh = NULL;
    mstar_status st = mstar_mesh_create(entity, opts, &mesh);
    struct report rep = { .kind = st == MSTAR_OK ? 'B' : st == MSTAR_EEXIST ? 'E' : 'F' };
    if (st != MSTAR_OK && st != MSTAR_EEXIST)
        fprintf(stderr, "[%s] create: %s\n", entity, mstar_last_error());
    send_report(report_fd, &rep);
    if (wait_command(cmd_fd) != 'G' || mesh == NULL) {
        mstar_mesh_destroy(mesh);
        _exit(0);
    }
    return mesh;
}

static uint64_t logged_drops;

static void count_drop_lines(mstar_log_level level, const char *line, void *userdata)
{
    (void)userdata;
    if (level == MSTAR_LOG_WARN && strstr(line, "dropped a frame") != NULL)
        logged_drops++;
    else
        fprintf(stderr, "%s\n", line);
}

/* The payload word of message `seq` from peer `sender`: checkable, different for every pair. */
static int64_t payload(int sender, int receiver, int64_t seq)
{
    return (int64_t)(((uint64_t)seq * UINT64_C(2654435761)) ^ ((uint64_t)sender << 40) ^
                     ((uint64_t)receiver << 48));
}

/* Message `seq` from `sender` to `receiver`: every tenth an INPUT_SIGNALS with a descriptor, the
 * others RANK_VALUES with 1..5 payload words. */
static mstar_status build_message(mstar_msg *msg, int sender, int receiver, int64_t seq)
{
    mstar_status st = MSTAR_OK;
    if (seq % 10 == 0) {
        mstar_msg_init(msg, MSTAR_MSG_INPUT_SIGNALS);
        msg->request_id = mstar_rid_from_int(seq);
        snprintf(msg->graph_walk, sizeof(msg->graph_walk), "walk_%d", sender);
        mstar_tensor_info info;
        mstar_tensor_info_init(&info);
        info.uuid = mstar_id_make((uint16_t)sender, (uint64_t)seq + 1);
        info.dtype = MSTAR_DTYPE_INT64;
        info.ndim = 1;
        info.dims[0] = seq % 7 + 1;
        info.stride[0] = 1;
        info.nbytes = (uint64_t)info.dims[0] * 8;
        info.address = (uint64_t)payload(sender, receiver, seq) & UINT64_C(0xffffffffffff);
        snprintf(info.source_entity, sizeof(info.source_entity), "%s", peer_names[sender]);
        mstar_edge edge;
        mstar_edge_init(&edge);
        snprintf(edge.name, sizeof(edge.name), "signal_%d", receiver);
        st = mstar_edge_add_tensor(&edge, &info);
        if (st == MSTAR_OK)
            st = mstar_msg_add_edge(msg, &edge);
        mstar_edge_clear(&edge);
    } else {
        mstar_msg_init(msg, MSTAR_MSG_RANK_VALUES);
        snprintf(msg->text, sizeof(msg->text), "exchange");
        msg->round = seq;
        msg->rank = sender;
        msg->world_size = NPEERS;
        for (int64_t k = 0; k <= seq % 5 && st == MSTAR_OK; k++)
            st = mstar_msg_add_int(msg, payload(sender, receiver, seq) + k);
    }
    return st;
}

/* "" when `msg` is exactly message `seq` from `sender` to `receiver`, else what differs. */
static const char *check_message(const mstar_msg *msg, int sender, int receiver, int64_t seq)
{
    if (seq % 10 == 0) {
        if (msg->type != MSTAR_MSG_INPUT_SIGNALS)
            return "type (wanted INPUT_SIGNALS)";
        if (msg->request_id.is_str || msg->request_id.num != seq)
            return "request_id (the sequence number)";
        if (msg->nedges != 1 || msg->edges[0].ntensors != 1)
            return "edge count";
        const mstar_tensor_info *info = &msg->edges[0].tensor_info[0];
        if (info->uuid != mstar_id_make((uint16_t)sender, (uint64_t)seq + 1))
            return "uuid";
        if (info->dtype != MSTAR_DTYPE_INT64 || info->ndim != 1 || info->dims[0] != seq % 7 + 1 ||
            info->nbytes != (uint64_t)info->dims[0] * 8)
            return "descriptor shape";
        if (info->address != ((uint64_t)payload(sender, receiver, seq) & UINT64_C(0xffffffffffff)))
            return "descriptor address (payload)";
        if (strcmp(info->source_entity, peer_names[sender]) != 0)
            return "source_entity";
        return "";
    }
    if (msg->type != MSTAR_MSG_RANK_VALUES)
        return "type (wanted RANK_VALUES)";
    if (msg->round != seq)
        return "round (the sequence number)";
    if (msg->rank != sender || msg->world_size != NPEERS || strcmp(msg->text, "exchange") != 0)
        return "rank, world_size or group";
    if (msg->nints != (uint32_t)(seq % 5 + 1))
        return "number of payload words";
    for (uint32_t k = 0; k < msg->nints; k++) {
        if (msg->ints[k] != payload(sender, receiver, seq) + (int64_t)k)
            return "payload words";
    }
    return "";
}

static int peer_index(const char *name)
{
    for (int i = 0; i < NPEERS; i++) {
        if (strcmp(peer_names[i], name) == 0)
            return i;
    }
    return -1;
}

/* Handle one received message for peer `me`. */
static void on_message(mstar_mesh *mesh, int me, const mstar_msg *msg, int64_t *expected,
                       bool *marker_seen, uint64_t *received)
{
    const char *entity = peer_names[me];
    if (strcmp(msg->from, GARBAGE_ENTITY) == 0) {
        if (msg->type != MSTAR_MSG_HELLO)
            child_fail(entity, "a valid non-marker message from the garbage sender");
        int64_t sent = mstar_msg_get_kv(msg, "garbage", -1);
        if ((int64_t)mstar_mesh_dropped(mesh) != sent)
            child_fail(entity, "marker says %lld bad frames were sent, %llu were dropped",
                       (long long)sent, (unsigned long long)mstar_mesh_dropped(mesh));
        *marker_seen = true;
        return;
    }
    int sender = peer_index(msg->from);
    if (sender < 0 || sender == me)
        child_fail(entity, "a message from unexpected sender '%s'", msg->from);
    const char *bad = check_message(msg, sender, me, expected[sender]);
    if (bad[0] != '\0')
        child_fail(entity, "message %lld from %s: wrong %s", (long long)expected[sender], msg->from,
                   bad);
    expected[sender]++;
    (*received)++;
}

static void run_peer(int me, const mstar_mesh_options *opts, int report_fd, int cmd_fd)
{
    const char *entity = peer_names[me];
    mstar_log_set_sink(count_drop_lines, NULL);
    mstar_mesh *mesh = start_child(entity, opts, report_fd, cmd_fd);
    mstar_status st;

    int64_t sent[NPEERS] = { 0 }, expected[NPEERS] = { 0 };
    bool marker_seen = false;
    uint64_t received = 0, full = 0, target = (uint64_t)nmessages * (NPEERS - 1);
    uint64_t last_progress = mstar__now_ns();
    while (received < target || !marker_seen || sent[(me + 1) % NPEERS] < nmessages ||
           sent[(me + 2) % NPEERS] < nmessages) {
        bool progress = false;
        /* Send a burst to each peer until its queue is full. */
        for (int p = 0; p < NPEERS; p++) {
            for (int k = 0; p != me && k < 64 && sent[p] < nmessages; k++) {
                mstar_msg msg;
                if (build_message(&msg, me, p, sent[p]) != MSTAR_OK)
                    child_fail(entity, "building message %lld: %s", (long long)sent[p],
                               mstar_last_error());
                st = mstar_mesh_send(mesh, peer_names[p], &msg);
                mstar_msg_clear(&msg);
                if (st == MSTAR_EAGAIN) {
                    full++;
                    break;
                }
                if (st != MSTAR_OK)
                    child_fail(entity, "send to %s: %s", peer_names[p], mstar_last_error());
                sent[p]++;
                progress = true;
            }
        }
        /* Then take what has arrived; wait a little only when nothing moved. */
        int timeout = progress ? 0 : 1;
        for (int k = 0; k < 256; k++) {
            mstar_msg msg;
            st = mstar_mesh_recv(mesh, timeout, &msg);
            if (st == MSTAR_EAGAIN)
                break;
            if (st != MSTAR_OK)
                child_fail(entity, "recv: %s", mstar_last_error());
            on_message(mesh, me, &msg, expected, &marker_seen, &received);
            mstar_msg_clear(&msg);
            progress = true;
            timeout = 0;
        }
        if (progress)
            last_progress = mstar__now_ns();
        else if (mstar__now_ns() - last_progress > UINT64_C(60000000000))
            child_fail(entity, "no progress for 60 s: received %llu of %llu, marker %s",
                       (unsigned long long)received, (unsigned long long)target,
                       marker_seen ? "seen" : "not seen");
    }
    struct report rep = { .kind = 'D',
                          .received = received,
                          .dropped = mstar_mesh_dropped(mesh),
                          .logged = logged_drops,
                          .full = full };
    send_report(report_fd, &rep);
    wait_command(cmd_fd); /* everyone has everything: leaving drops nothing */
    mstar_mesh_destroy(mesh);
    mstar_log_set_sink(NULL, NULL);
    exit(0);
}

/* Send raw bytes, waiting while the receiver's queue is full. */
static void send_raw_patiently(mstar_mesh *mesh, const char *peer, const void *data, size_t len)
{
    mstar_status st;
    while ((st = mstar_mesh_send_raw(mesh, peer, data, len)) == MSTAR_EAGAIN)
        usleep(500);
    if (st != MSTAR_OK)
        child_fail(GARBAGE_ENTITY, "send_raw to %s: %s", peer, mstar_last_error());
}

static bool decodes(const void *data, size_t len)
{
    mstar_msg msg;
    if (mstar_msg_decode(data, len, &msg) != MSTAR_OK)
        return false;
    mstar_msg_clear(&msg);
    return true;
}

/* One bad frame of kind `round % 3` into buf: random bytes, a truncated valid message, or a
 * valid message with one byte changed. Never something that decodes. */
static size_t make_garbage(uint64_t *rng, int round, unsigned char *buf, size_t cap)
{
    for (;;) {
        size_t len;
        if (round % 3 == 0) {
            len = 1 + mstar_test_rand(rng) % 200;
            for (size_t i = 0; i < len; i++)
                buf[i] = (unsigned char)mstar_test_rand(rng);
        } else {
            mstar_msg msg;
            if (build_message(&msg, 0, 1, (int64_t)(mstar_test_rand(rng) % 20)) != MSTAR_OK)
                child_fail(GARBAGE_ENTITY, "building a message to damage: %s", mstar_last_error());
            snprintf(msg.from, sizeof(msg.from), "%s", GARBAGE_ENTITY);
            void *data;
            size_t full;
            mstar_status st = mstar_msg_encode(&msg, &data, &full);
            mstar_msg_clear(&msg);
            if (st != MSTAR_OK || full > cap)
                child_fail(GARBAGE_ENTITY, "encoding a message to damage: %s", mstar_last_error());
            memcpy(buf, data, full);
            free(data);
            if (round % 3 == 1) {
                len = mstar_test_rand(rng) % full; /* 0 .. full - 1 bytes */
            } else {
                len = full;
                buf[mstar_test_rand(rng) % full] ^= (unsigned char)(1 + mstar_test_rand(rng) % 255);
            }
        }
        if (!decodes(buf, len))
            return len;
    }
}

static void run_garbage(const mstar_mesh_options *opts, int report_fd, int cmd_fd)
{
    mstar_mesh *mesh = start_child(GARBAGE_ENTITY, opts, report_fd, cmd_fd);
    mstar_status st;

    uint64_t rng = (uint64_t)getpid() * UINT64_C(0x9e3779b97f4a7c15) | 1;
    unsigned char buf[4096];
    for (int round = 0; round < GARBAGE_PER_TARGET; round++) {
        for (int p = 0; p < NPEERS; p++) {
            size_t len = make_garbage(&rng, round, buf, sizeof(buf));
            send_raw_patiently(mesh, peer_names[p], buf, len);
        }
        if (round % 10 == 9)
            usleep(2000); /* spread the garbage over the exchange */
    }
    for (int p = 0; p < NPEERS; p++) {
        mstar_msg marker;
        mstar_msg_init(&marker, MSTAR_MSG_HELLO);
        if (mstar_msg_add_kv(&marker, "garbage", GARBAGE_PER_TARGET) != MSTAR_OK)
            child_fail(GARBAGE_ENTITY, "building the marker: %s", mstar_last_error());
        while ((st = mstar_mesh_send(mesh, peer_names[p], &marker)) == MSTAR_EAGAIN)
            usleep(500);
        mstar_msg_clear(&marker);
        if (st != MSTAR_OK)
            child_fail(GARBAGE_ENTITY, "sending the marker to %s: %s", peer_names[p],
                       mstar_last_error());
    }
    struct report rep = { .kind = 'D', .garbage = (uint64_t)GARBAGE_PER_TARGET * NPEERS };
    send_report(report_fd, &rep);
    wait_command(cmd_fd); /* the markers may still be queued until every peer is done */
    mstar_mesh_destroy(mesh);
    exit(0);
}

/* ---- the parent ------------------------------------------------------------------------------ */

static void spawn(struct child *children, const mstar_mesh_options *opts)
{
    for (int i = 0; i < NCHILD; i++) {
        int rep[2], cmd[2];
        assert_int_equal(pipe(rep), 0);
        assert_int_equal(pipe(cmd), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (int j = 0; j < i; j++) {
                close(children[j].report_fd);
                close(children[j].cmd_fd);
            }
            close(rep[0]);
            close(cmd[1]);
            if (i < NPEERS)
                run_peer(i, opts, rep[1], cmd[0]);
            run_garbage(opts, rep[1], cmd[0]);
        }
        close(rep[1]);
        close(cmd[0]);
        children[i] = (struct child){ .pid = pid, .report_fd = rep[0], .cmd_fd = cmd[1] };
    }
}

/* Read one report from every child within `timeout_s`; false if one stayed silent. */
static bool collect(struct child *children, struct report *reps, int timeout_s)
{
    uint64_t deadline = mstar__now_ns() + (uint64_t)timeout_s * UINT64_C(1000000000);
    for (int i = 0; i < NCHILD; i++) {
        struct pollfd p = { .fd = children[i].report_fd, .events = POLLIN };
        uint64_t now = mstar__now_ns();
        int wait_ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
        if (poll(&p, 1, wait_ms) != 1 ||
            read(children[i].report_fd, &reps[i], sizeof(reps[i])) != (ssize_t)sizeof(reps[i])) {
            fprintf(stderr, "child %d (pid %d) sent no report\n", i, (int)children[i].pid);
            return false;
        }
    }
    return true;
}

static void command_all(struct child *children, char c)
{
    for (int i = 0; i < NCHILD; i++) {
        if (write(children[i].cmd_fd, &c, 1) != 1)
            fprintf(stderr, "child %d: command pipe closed\n", i);
    }
}

/* Reap every child; true when all exited 0. */
static bool reap(struct child *children, bool kill_first)
{
    bool ok = true;
    for (int i = 0; i < NCHILD; i++) {
        if (kill_first)
            kill(children[i].pid, SIGKILL);
        int status;
        while (waitpid(children[i].pid, &status, 0) < 0 && errno == EINTR)
            continue;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d (pid %d) ended with status 0x%x\n", i, (int)children[i].pid,
                    status);
            ok = false;
        }
        close(children[i].report_fd);
        close(children[i].cmd_fd);
    }
    return ok;
}

/* One full exchange; false (having cleaned up) when a TCP port was taken. */
static bool exchange(const mstar_mesh_options *opts, const char *label)
{
    struct child children[NCHILD];
    struct report reps[NCHILD];
    spawn(children, opts);
    if (!collect(children, reps, 60)) {
        reap(children, true);
        fail_msg("%s: a child did not report its bind", label);
    }
    bool taken = false, failed = false;
    for (int i = 0; i < NCHILD; i++) {
        taken |= reps[i].kind == 'E';
        failed |= reps[i].kind != 'B' && reps[i].kind != 'E';
    }
    if (taken || failed) {
        command_all(children, 'Q');
        assert_true(reap(children, false));
        if (failed || opts->transport != MSTAR_MESH_TCP)
            fail_msg("%s: a child could not create its mesh", label);
        return false;
    }

    uint64_t t0 = mstar__now_ns();
    command_all(children, 'G');
    if (!collect(children, reps, 240)) {
        reap(children, true);
        fail_msg("%s: the exchange did not finish", label);
    }
    double seconds = (double)(mstar__now_ns() - t0) / 1e9;
    command_all(children, 'X');
    assert_true(reap(children, false));

    uint64_t full = 0;
    for (int i = 0; i < NPEERS; i++) {
        full += reps[i].full;
        assert_int_equal(reps[i].kind, 'D');
        assert_int_equal(reps[i].received, (uint64_t)nmessages * (NPEERS - 1));
        assert_int_equal(reps[i].dropped, GARBAGE_PER_TARGET);
        /* The log lines about drops are rate-limited (a flood must not flood the log). */
        assert_in_range(reps[i].logged, 1, GARBAGE_PER_TARGET);
    }
    assert_int_equal(reps[NPEERS].garbage, (uint64_t)GARBAGE_PER_TARGET * NPEERS);
    uint64_t total = (uint64_t)nmessages * NPEERS * (NPEERS - 1);
    printf("%s: %llu messages (+%d garbage frames) in %.3f s: %.0f messages/s; %llu sends found "
           "a full queue\n",
           label, (unsigned long long)total, GARBAGE_PER_TARGET * NPEERS, seconds,
           (double)total / seconds, (unsigned long long)full);
    return true;
}

static void test_exchange_over_ipc(void **state)
{
    (void)state;
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    assert_true(exchange(&opts, "ipc"));
    assert_int_equal(mstar_test_count_dir(ipc_dir), 0); /* every inbox file was removed */
}

static void test_exchange_over_tcp(void **state)
{
    (void)state;
    /* Base ports 20000..59999 (the garbage sender sits up to base + 1999), from the pid. */
    for (int attempt = 0; attempt < 20; attempt++) {
        mstar_mesh_options opts = {
            .transport = MSTAR_MESH_TCP,
            .tcp_host = "127.0.0.1",
            .tcp_base_port =
                20000 + (int)(((uint64_t)getpid() * 7 + (uint64_t)attempt * 4099) % 40000)
        };
        if (exchange(&opts, "tcp"))
            return;
    }
    fail_msg("no free TCP base port in 20 attempts");
}

int main(void)
{
    ipc_dir = mstar_test_tmpdir("mesh-exchange");
    if (mstar_env_get_int("MSTAR_TEST_MESH_MESSAGES", 10000, 1, 100000000, &nmessages) !=
        MSTAR_OK) {
        fprintf(stderr, "%s\n", mstar_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchange_over_ipc),
        cmocka_unit_test(test_exchange_over_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
