/*
 * rank_group_host.c — a rank group over the control mesh, one process per rank.
 *
 * Each rank binds its own mesh entity "<group>.rank<r>", so agreement never takes a message
 * meant for a worker's loop, and sends its values to every other rank as one RANK_VALUES
 * message per round; each rank reduces what it receives. Rounds are numbered from 1:
 *   - a message of an earlier round (a rank that gave up on it, a duplicate) is dropped, so a
 *     late value of round k is never taken for round k + 1;
 *   - one of the next round is kept for it: a rank that finished round k may already have sent
 *     k + 1 while this one still waits for another rank's k (all-to-all lets a rank be at most
 *     one round ahead);
 *   - round 0 with no values says the sender left (see destroy).
 * Everything else is input from another process and is checked: the group name, the world
 * size, the rank, that the sender's entity is that rank's, the value count. A message that
 * fails a check is logged and dropped; a rank that never answers is a timeout naming it.
 */
#include "ranks/rank_group.h"

#include "core/owner.h"
#include "core/vec.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUFFIX        ".rank"
#define LEAVE_WAIT_MS 1000

/* Values a rank sent for the next round, kept until this rank gets there. */
typedef struct pending {
    bool has;
    uint32_t n;
    int64_t *values;
} pending;

typedef struct host_group {
    mstar_rank_group base;
    char name[MSTAR_NAME_MAX + 1];
    mstar_mesh *mesh;
    char (*peers)[MSTAR_NAME_MAX + 1]; /* entity of each rank */
    int64_t round;                     /* the last round started */
    int64_t timeout_ms;
    pending *next;      /* per rank: values for round + 1 */
    bool *have;         /* per rank: values of the current round received */
    bool *left;         /* per rank: said it left */
    mstar__owner owner; /* only the creator says it left (a forked child is not this rank) */
} host_group;

/* The state of the round being collected. */
typedef struct round_acc {
    int64_t *acc;
    size_t n;
    mstar_reduce reduce;
    int32_t got;
} round_acc;

static mstar_status entity_name(const char *group, int32_t rank, char *buf, size_t size)
{
    int len = snprintf(buf, size, "%s" SUFFIX "%d", group, (int)rank);
    if (len < 0 || (size_t)len >= size || len > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL,
                               "rank group name %s is too long for its mesh entity names "
                               "(\"%s" SUFFIX "%d\" must fit in %d bytes)",
                               group, group, (int)rank, MSTAR_NAME_MAX);
    return MSTAR_OK;
}

static int64_t now_ms(void)
{
    return (int64_t)(mstar__now_ns() / 1000000u);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Send one message to every other rank, retrying while a peer's queue is full. */
static mstar_status send_all(host_group *g, mstar_msg *msg, int64_t deadline)
{
    for (int32_t r = 0; r < g->base.size; r++) {
        if (r == g->base.rank)
            continue;
        mstar_status st;
        while ((st = mstar_mesh_send(g->mesh, g->peers[r], msg)) == MSTAR_EAGAIN) {
            if (now_ms() >= deadline)
                return mstar_error_set(MSTAR_ETIMEDOUT,
                                       "rank group %s round %" PRId64
                                       ": rank %d's queue stayed full for %" PRId64 " ms",
                                       g->name, g->round, (int)r, g->timeout_ms);
            sleep_ms(1);
        }
        if (st != MSTAR_OK)
            return mstar_error_wrap("rank group %s round %" PRId64 ": send to rank %d", g->name,
                                    g->round, (int)r);
    }
    return MSTAR_OK;
}

static mstar_status send_values(host_group *g, int64_t round, const int64_t *values, size_t n,
                                int64_t deadline)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_RANK_VALUES);
    snprintf(msg.text, sizeof(msg.text), "%s", g->name);
    msg.round = round;
    msg.rank = g->base.rank;
    msg.world_size = g->base.size;
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; i < n && st == MSTAR_OK; i++)
        st = mstar_msg_add_int(&msg, values[i]);
    if (st == MSTAR_OK)
        st = send_all(g, &msg, deadline);
    mstar_msg_clear(&msg);
    return st;
}

/* The checks every arriving message passes before its round is looked at. */
static bool acceptable(host_group *g, const mstar_msg *in)
{
    if (in->type != MSTAR_MSG_RANK_VALUES) {
        mstar_log(MSTAR_LOG_WARN, "rank group %s: dropped a %s message from %s", g->name,
                  mstar_msg_type_name(in->type), in->from);
        return false;
    }
    if (strcmp(in->text, g->name) != 0 || in->world_size != g->base.size) {
        mstar_log(MSTAR_LOG_WARN,
                  "rank group %s (%d ranks): dropped values from %s for group %s of %d ranks",
                  g->name, (int)g->base.size, in->from, in->text, (int)in->world_size);
        return false;
    }
    if (in->rank < 0 || in->rank >= g->base.size || in->rank == g->base.rank ||
        strcmp(in->from, g->peers[in->rank]) != 0) {
        mstar_log(MSTAR_LOG_WARN, "rank group %s: dropped values from %s claiming rank %d", g->name,
                  in->from, (int)in->rank);
        return false;
    }
    return true;
}

/* Take one arriving message. With `acc` (a round being collected) its values may count toward
 * the round; without, only the bookkeeping of leaving and of later rounds applies. A rank that
 * sends the wrong number of values for the current round fails the round at once. */
static mstar_status take(host_group *g, const mstar_msg *in, round_acc *acc)
{
    if (!acceptable(g, in))
        return MSTAR_OK;
    int32_t r = in->rank;
    if (in->round == 0 && in->nints == 0) {
        g->left[r] = true;
        return MSTAR_OK;
    }
    if (in->round <= 0 || in->round > g->round + 1 || (acc == NULL && in->round > g->round)) {
        mstar_log(MSTAR_LOG_WARN,
                  "rank group %s: dropped rank %d's values of round %" PRId64
                  " (this rank is at round %" PRId64 "%s)",
                  g->name, (int)r, in->round, g->round,
                  acc == NULL ? " and takes part in no later round" : "");
        return MSTAR_OK;
    }
    if (in->round < g->round || (in->round == g->round && acc == NULL)) {
        mstar_log(MSTAR_LOG_DEBUG, "rank group %s: dropped rank %d's late values of round %" PRId64,
                  g->name, (int)r, in->round);
        return MSTAR_OK;
    }
    if (in->round == g->round + 1) {
        pending *p = &g->next[r];
        if (p->has) {
            mstar_log(MSTAR_LOG_WARN,
                      "rank group %s: dropped a duplicate from rank %d (round %" PRId64 ")",
                      g->name, (int)r, in->round);
            return MSTAR_OK;
        }
        int64_t *copy = malloc((in->nints ? in->nints : 1) * sizeof(int64_t));
        if (copy == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "rank group %s: keeping rank %d's next values",
                                   g->name, (int)r);
        if (in->nints > 0)
            memcpy(copy, in->ints, in->nints * sizeof(int64_t));
        *p = (pending){ true, in->nints, copy };
        return MSTAR_OK;
    }
    /* The current round. */
    if (g->have[r]) {
        mstar_log(MSTAR_LOG_WARN,
                  "rank group %s: dropped a duplicate from rank %d (round %" PRId64 ")", g->name,
                  (int)r, in->round);
        return MSTAR_OK;
    }
    if (in->nints != acc->n)
        return mstar_error_set(MSTAR_EPROTO,
                               "rank group %s round %" PRId64 ": rank %d sent %u values, this "
                               "rank has %zu (the ranks' configs differ?)",
                               g->name, g->round, (int)r, in->nints, acc->n);
    mstar__reduce_into(acc->acc, in->ints, acc->n, acc->reduce);
    g->have[r] = true;
    acc->got++;
    return MSTAR_OK;
}

/* "1, 3" for the ranks whose values have not arrived. */
static void missing_ranks(const host_group *g, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t r = 0; r < g->base.size && used + 16 < size; r++) {
        if (r != g->base.rank && !g->have[r])
            used += (size_t)snprintf(buf + used, size - used, "%s%d", used ? ", " : "", (int)r);
    }
}

static mstar_status collect(host_group *g, round_acc *acc, int64_t deadline)
{
    while (acc->got < g->base.size) {
        for (int32_t r = 0; r < g->base.size; r++) {
            if (r != g->base.rank && !g->have[r] && g->left[r])
                return mstar_error_set(MSTAR_ECLOSED,
                                       "rank group %s round %" PRId64
                                       ": rank %d left the group without taking part",
                                       g->name, g->round, (int)r);
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            char missing[256];
            missing_ranks(g, missing, sizeof(missing));
            return mstar_error_set(MSTAR_ETIMEDOUT,
                                   "rank group %s round %" PRId64 ": no values from rank(s) %s "
                                   "within %" PRId64 " ms (dead, stuck, or not in this group)",
                                   g->name, g->round, missing, g->timeout_ms);
        }
        mstar_msg in;
        mstar_msg_init(&in, MSTAR_MSG_INVALID);
        mstar_status st = mstar_mesh_recv(g->mesh, left > INT_MAX ? INT_MAX : (int)left, &in);
        if (st == MSTAR_OK)
            st = take(g, &in, acc);
        else if (st == MSTAR_EAGAIN)
            st = MSTAR_OK;
        mstar_msg_clear(&in);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

static mstar_status host_reduce(mstar_rank_group *base, int64_t *values, size_t n,
                                mstar_reduce reduce)
{
    host_group *g = (host_group *)base;
    if (n > MSTAR_WIRE_MAX_ENTRIES)
        return mstar_error_set(MSTAR_EINVAL, "rank group %s: %zu values, at most %d in one round",
                               g->name, n, MSTAR_WIRE_MAX_ENTRIES);
    int64_t deadline = now_ms() + g->timeout_ms;
    g->round++;
    int64_t *acc = malloc((n ? n : 1) * sizeof(int64_t));
    if (acc == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "rank group %s: %zu values", g->name, n);
    if (n > 0)
        memcpy(acc, values, n * sizeof(int64_t));
    round_acc ra = { acc, n, reduce, 1 };
    for (int32_t r = 0; r < g->base.size; r++)
        g->have[r] = false;
    g->have[g->base.rank] = true;

    mstar_status st = send_values(g, g->round, values, n, deadline);
    /* Values that came early, while this rank was still in the previous round. */
    for (int32_t r = 0; r < g->base.size && st == MSTAR_OK; r++) {
        pending *p = &g->next[r];
        if (!p->has)
            continue;
        if (p->n != n)
            st = mstar_error_set(MSTAR_EPROTO,
                                 "rank group %s round %" PRId64 ": rank %d sent %u values, this "
                                 "rank has %zu (the ranks' configs differ?)",
                                 g->name, g->round, (int)r, p->n, n);
        else {
            mstar__reduce_into(acc, p->values, n, reduce);
            g->have[r] = true;
            ra.got++;
        }
    }
    for (int32_t r = 0; r < g->base.size; r++) {
        free(g->next[r].values);
        g->next[r] = (pending){ false, 0, NULL };
    }
    if (st == MSTAR_OK)
        st = collect(g, &ra, deadline);
    if (st == MSTAR_OK && n > 0)
        memcpy(values, acc, n * sizeof(int64_t));
    free(acc);
    return st;
}

/* Tell the others this rank is leaving, and give them a moment to say the same: a rank that
 * has said it is leaving has finished every round, so it has this rank's last values, which
 * closing the sockets can no longer lose. */
static void leave(host_group *g)
{
    int64_t wait = g->timeout_ms < LEAVE_WAIT_MS ? g->timeout_ms : LEAVE_WAIT_MS;
    int64_t deadline = now_ms() + wait;
    if (send_values(g, 0, NULL, 0, deadline) != MSTAR_OK) {
        mstar_log(MSTAR_LOG_DEBUG, "rank group %s: leaving: %s", g->name, mstar_last_error());
        return;
    }
    for (;;) {
        int32_t r = 0;
        while (r < g->base.size && (r == g->base.rank || g->left[r]))
            r++;
        if (r == g->base.size)
            return;
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            mstar_log(MSTAR_LOG_DEBUG,
                      "rank group %s: rank %d did not say it left within %" PRId64 " ms", g->name,
                      (int)r, wait);
            return;
        }
        mstar_msg in;
        mstar_msg_init(&in, MSTAR_MSG_INVALID);
        if (mstar_mesh_recv(g->mesh, (int)left, &in) == MSTAR_OK)
            take(g, &in, NULL);
        mstar_msg_clear(&in);
    }
}

static void host_destroy(mstar_rank_group *base)
{
    host_group *g = (host_group *)base;
    if (g->mesh != NULL) {
        if (mstar__owner_here(&g->owner))
            leave(g);
        mstar_mesh_destroy(g->mesh);
    }
    if (g->next != NULL) {
        for (int32_t r = 0; r < g->base.size; r++)
            free(g->next[r].values);
    }
    free(g->next);
    free(g->have);
    free(g->left);
    free(g->peers);
    free(g);
}

static const mstar__rank_group_ops host_ops = {
    .kind = "host",
    .reduce = host_reduce,
    .destroy = host_destroy,
};

mstar_status mstar_rank_group_create_host(const char *name, int32_t rank, int32_t world_size,
                                          const mstar_host_group_options *opts,
                                          mstar_rank_group **out)
{
    if (name == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", name == NULL ? "name" : "out");
    mstar_status st = mstar_name_validate(name, strlen(name), "rank group name");
    if (st != MSTAR_OK)
        return st;
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return mstar_error_set(MSTAR_EINVAL, "rank group %s: rank %d of world_size %d", name,
                               (int)rank, (int)world_size);
    int64_t timeout_ms;
    st = mstar__rank_agree_timeout(opts ? opts->timeout_ms : 0, &timeout_ms);
    if (st != MSTAR_OK)
        return st;
    host_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "rank group %s: out of memory", name);
    g->base = (mstar_rank_group){ &host_ops, rank, world_size };
    mstar__owner_init(&g->owner);
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->timeout_ms = timeout_ms;
    g->peers = calloc((size_t)world_size, sizeof(*g->peers));
    g->next = calloc((size_t)world_size, sizeof(*g->next));
    g->have = calloc((size_t)world_size, sizeof(*g->have));
    g->left = calloc((size_t)world_size, sizeof(*g->left));
    if (g->peers == NULL || g->next == NULL || g->have == NULL || g->left == NULL) {
        host_destroy(&g->base);
        return mstar_error_set(MSTAR_ENOMEM, "rank group %s: %d ranks", name, (int)world_size);
    }
    for (int32_t r = 0; r < world_size && st == MSTAR_OK; r++)
        st = entity_name(name, r, g->peers[r], sizeof(g->peers[r]));
    if (st == MSTAR_OK)
        st = mstar_mesh_create(g->peers[rank], opts ? opts->mesh : NULL, &g->mesh);
    if (st != MSTAR_OK) {
        host_destroy(&g->base);
        return mstar_error_wrap("rank group %s rank %d", name, (int)rank);
    }
    *out = &g->base;
    return MSTAR_OK;
}
