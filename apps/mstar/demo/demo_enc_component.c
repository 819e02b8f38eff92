/*
 * demo_enc_component.c — the encoder as a worker component: prompts queue in arrival order; a
 * step encodes as many as fit the largest captured bucket (rows and tokens) as one packed batch
 * and sends each request's slice of the states to the decoder.
 */
#include "demo_encoder.h"
#include "demo_worker.h"

#include "core/vec.h"

#include <stdlib.h>

typedef struct enc_item {
    int64_t rid;
    int32_t len;
    int32_t *prompt;
} enc_item;

typedef struct enc_comp {
    demo_worker *w;
    demo_encoder *enc;
    mstar__vec queue; /* enc_item, FIFO */
} enc_comp;

static void destroy(void *self)
{
    enc_comp *c = self;
    for (size_t i = 0; i < c->queue.len; i++)
        free(((enc_item *)mstar__vec_at(&c->queue, i))->prompt);
    mstar__vec_free(&c->queue);
    demo_encoder_destroy(c->enc);
    free(c);
}

static mstar_status create(demo_worker *w, void **self)
{
    enc_comp *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "encoder component");
    c->w = w;
    mstar__vec_init(&c->queue, sizeof(enc_item));
    mstar_status st = demo_encoder_create(demo_worker_backend(w), demo_worker_config(w),
                                          demo_worker_graphs(w), &c->enc);
    if (st == MSTAR_OK)
        st = demo_encoder_capture(c->enc);
    if (st != MSTAR_OK) {
        destroy(c);
        return st;
    }
    *self = c;
    return MSTAR_OK;
}

/* The prompt: one int32 vector of 1..prompt_max token ids, copied to the host. */
static mstar_status input(void *self, int64_t rid, const mstar_edge *edge)
{
    enc_comp *c = self;
    const demo_config *cfg = demo_worker_config(c->w);
    mstar_comm *comm = demo_worker_comm(c->w);
    mstar_status st = demo_worker_check_input(edge, "encoder", DEMO_SIG_PROMPT);
    if (st != MSTAR_OK)
        return st;
    const mstar_tensor_info *info = &edge->tensor_info[0];
    if (info->dtype != MSTAR_DTYPE_INT32 || info->ndim != 1 || info->dims[0] < 1 ||
        info->dims[0] > cfg->prompt_max)
        st = mstar_error_set(MSTAR_EPROTO,
                             "encoder: the prompt must be int32 [1..%d], got %s "
                             "with %d dims",
                             cfg->prompt_max, mstar_dtype_name(info->dtype), info->ndim);
    enc_item item = { rid, (int32_t)info->dims[0], NULL };
    if (st == MSTAR_OK && (item.prompt = malloc((size_t)item.len * sizeof(int32_t))) == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "encoder: prompt of %d tokens", item.len);
    mstar_tensor copy;
    if (st == MSTAR_OK)
        st = mstar_comm_get_tensor_copy(comm, info->uuid, item.prompt,
                                        (size_t)item.len * sizeof(int32_t), &copy);
    for (int32_t t = 0; st == MSTAR_OK && t < item.len; t++) {
        if (item.prompt[t] < 0 || item.prompt[t] >= cfg->model.vocab)
            st = mstar_error_set(MSTAR_EPROTO, "encoder: prompt token %d is %d, not in [0, %d)", t,
                                 item.prompt[t], cfg->model.vocab);
    }
    if (st == MSTAR_OK)
        st = mstar__vec_push(&c->queue, &item);
    if (st != MSTAR_OK)
        free(item.prompt);
    return st;
}

/* Each request's slice of the batch's states (rows [off, off + len)) goes to the decoder. */
static void send_states(enc_comp *c, const enc_item *batch, size_t n, const mstar_tensor *hidden)
{
    int64_t off = 0;
    size_t row_bytes = (size_t)hidden->shape[1] * mstar_dtype_size(hidden->dtype);
    for (size_t i = 0; i < n; i++) {
        mstar_tensor slice = *hidden;
        slice.shape[0] = batch[i].len;
        slice.byte_offset += (uint64_t)off * row_bytes;
        off += batch[i].len;
        if (demo_worker_emit(c->w, batch[i].rid, DEMO_SIG_HIDDEN, &slice) != MSTAR_OK ||
            demo_worker_done(c->w, batch[i].rid) != MSTAR_OK)
            demo_worker_fail(c->w, batch[i].rid, mstar_last_error());
    }
}

#define MAX_BATCH 256

static mstar_status step(void *self, bool *worked)
{
    enc_comp *c = self;
    *worked = c->queue.len > 0;
    if (!*worked)
        return MSTAR_OK;
    /* Take the batch out of the queue: failing a request below drops it from the queue. */
    int64_t max_rows = demo_encoder_max_rows(c->enc), max_tokens = demo_encoder_max_tokens(c->enc);
    enc_item batch[MAX_BATCH];
    const int32_t *prompts[MAX_BATCH];
    int32_t lens[MAX_BATCH];
    size_t n = 0;
    int64_t tokens = 0;
    while (c->queue.len > 0 && n < MAX_BATCH && (int64_t)n < max_rows) {
        enc_item *it = mstar__vec_at(&c->queue, 0);
        if (n > 0 && tokens + it->len > max_tokens)
            break;
        batch[n] = *it;
        prompts[n] = it->prompt;
        lens[n] = it->len;
        tokens += it->len;
        n++;
        mstar__vec_remove(&c->queue, 0);
    }
    mstar_tensor hidden;
    demo_step_info info;
    if (demo_encoder_run(c->enc, prompts, lens, (int32_t)n, &hidden, &info) == MSTAR_OK) {
        demo_worker_count_step(c->w, "encode", &info);
        send_states(c, batch, n, &hidden);
    } else {
        char why[256];
        snprintf(why, sizeof(why), "%s", mstar_last_error());
        for (size_t i = 0; i < n; i++)
            demo_worker_fail(c->w, batch[i].rid, why);
    }
    for (size_t i = 0; i < n; i++)
        free(batch[i].prompt);
    return MSTAR_OK;
}

static void drop(void *self, int64_t rid)
{
    enc_comp *c = self;
    for (size_t i = 0; i < c->queue.len; i++) {
        enc_item *it = mstar__vec_at(&c->queue, i);
        if (it->rid == rid) {
            free(it->prompt);
            mstar__vec_remove(&c->queue, i);
            return;
        }
    }
}

const demo_component_ops demo_encoder_component = { create, destroy, input, step, drop };
