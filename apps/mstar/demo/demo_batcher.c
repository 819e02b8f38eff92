/*
 * demo_batcher.c — the decoder as a worker component: continuous batching.
 *
 * A request arrives as the encoder's states; the codebook lookup turns them into its prompt and
 * it waits. Each step first admits waiting requests (in arrival order) while the decode batch
 * has room (max_batch rows) and the KV cache can hold each one whole — prompt plus every token
 * it may generate, so an admitted request never runs out of pages mid-decode — and prefills
 * them in one packed step, which also yields each one's first token. Then one decode step
 * advances every active request by one token. Requests join and leave between steps: a request
 * leaves when it has generated max_new_tokens, sending its tokens to the api server.
 */
#include "demo_decoder.h"
#include "demo_worker.h"

#include "core/vec.h"

#include <stdlib.h>
#include <string.h>

typedef struct dec_req {
    int64_t rid;
    int32_t len;     /* prompt tokens */
    int32_t max_new; /* tokens to generate */
    int32_t pages;   /* KV pages reserved for it while active */
    int32_t ngen;
    int32_t *prompt; /* [len] */
    int32_t *out;    /* [max_new] */
    bool open;       /* its KV streams exist */
} dec_req;

typedef struct dec_comp {
    demo_worker *w;
    demo_decoder *dec;
    mstar__vec waiting; /* dec_req *, arrival order */
    mstar__vec active;  /* dec_req *, decoding */
    int32_t pages_reserved;
    /* One step's arrays, sized for the largest step. */
    int64_t *rows;
    int32_t *spans, *tokens, *next;
    size_t cap_rows, cap_tokens;
} dec_comp;

static void req_free(dec_comp *c, dec_req *r)
{
    if (r->open) {
        demo_decoder_close(c->dec, r->rid);
        c->pages_reserved -= r->pages;
    }
    free(r->prompt);
    free(r->out);
    free(r);
}

static void destroy(void *self)
{
    dec_comp *c = self;
    mstar__vec *lists[] = { &c->waiting, &c->active };
    for (size_t l = 0; l < 2; l++) {
        for (size_t i = 0; i < lists[l]->len; i++)
            req_free(c, *(dec_req **)mstar__vec_at(lists[l], i));
        mstar__vec_free(lists[l]);
    }
    demo_decoder_destroy(c->dec);
    free(c->rows);
    free(c->spans);
    free(c->tokens);
    free(c->next);
    free(c);
}

static mstar_status create(demo_worker *w, void **self)
{
    dec_comp *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "decoder component");
    c->w = w;
    mstar__vec_init(&c->waiting, sizeof(dec_req *));
    mstar__vec_init(&c->active, sizeof(dec_req *));
    mstar_status st = demo_decoder_create(demo_worker_backend(w), demo_worker_config(w),
                                          demo_worker_graphs(w), &c->dec);
    if (st != MSTAR_OK) {
        destroy(c);
        return st;
    }
    *self = c;
    return MSTAR_OK;
}

/* The encoder's states → the prompt, through the codebook; then the request waits. */
static mstar_status input(void *self, int64_t rid, const mstar_edge *edge)
{
    dec_comp *c = self;
    const demo_config *cfg = demo_worker_config(c->w);
    mstar_comm *comm = demo_worker_comm(c->w);
    mstar_status st = demo_worker_check_input(edge, "decoder", DEMO_SIG_HIDDEN);
    if (st != MSTAR_OK)
        return st;
    mstar_tensor_id uuid = edge->tensor_info[0].uuid;
    mstar_tensor states;
    dec_req *r = calloc(1, sizeof(*r));
    st = r == NULL ? mstar_error_set(MSTAR_ENOMEM, "decoder request")
                   : mstar_comm_get_tensor(comm, uuid, &states);
    if (st == MSTAR_OK &&
        (states.ndim != 2 || states.shape[0] < 1 || states.shape[0] > cfg->prompt_max))
        st = mstar_error_set(MSTAR_EPROTO,
                             "decoder: %d-dim states of %lld tokens; expected "
                             "[1..%d, hidden]",
                             states.ndim, (long long)(states.ndim > 0 ? states.shape[0] : 0),
                             cfg->prompt_max);
    if (st == MSTAR_OK) {
        r->rid = rid;
        r->len = (int32_t)states.shape[0];
        r->max_new = demo_worker_max_new(c->w, rid);
        r->prompt = malloc((size_t)r->len * sizeof(int32_t));
        r->out = malloc((size_t)r->max_new * sizeof(int32_t));
        if (r->prompt == NULL || r->out == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "decoder request of %d + %d tokens", r->len,
                                 r->max_new);
    }
    if (st == MSTAR_OK)
        st = demo_decoder_codebook(c->dec, &states, r->prompt);
    if (st == MSTAR_OK)
        st = mstar__vec_push(&c->waiting, &r);
    if (st != MSTAR_OK && r != NULL) {
        free(r->prompt);
        free(r->out);
        free(r);
    }
    return st;
}

/* Grow `*p` to `n` elements of `size` bytes; false when out of memory (then *p is unchanged). */
static bool grow(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (q != NULL)
        *p = q;
    return q != NULL;
}

static mstar_status ensure_step_arrays(dec_comp *c, size_t rows, size_t tokens)
{
    if (rows > c->cap_rows) {
        if (!grow((void **)&c->rows, rows, sizeof(*c->rows)) ||
            !grow((void **)&c->spans, rows, sizeof(*c->spans)) ||
            !grow((void **)&c->next, rows, sizeof(*c->next)))
            return mstar_error_set(MSTAR_ENOMEM, "decoder step of %zu rows", rows);
        c->cap_rows = rows;
    }
    if (tokens > c->cap_tokens) {
        if (!grow((void **)&c->tokens, tokens, sizeof(*c->tokens)))
            return mstar_error_set(MSTAR_ENOMEM, "decoder step of %zu tokens", tokens);
        c->cap_tokens = tokens;
    }
    return MSTAR_OK;
}

/* r generated its last token: its tokens go to the api server, its pages back to the pool. */
static void finish(dec_comp *c, dec_req *r)
{
    int64_t n = r->ngen;
    mstar_tensor t;
    mstar_status st = mstar_tensor_init(&t, r->out, mstar_device_cpu(), MSTAR_DTYPE_INT32, 1, &n);
    if (st == MSTAR_OK)
        st = demo_worker_emit(c->w, r->rid, DEMO_SIG_TOKENS, &t);
    if (st == MSTAR_OK)
        st = demo_worker_done(c->w, r->rid);
    if (st != MSTAR_OK)
        demo_worker_fail(c->w, r->rid, mstar_last_error());
    req_free(c, r);
}

/* Fail every request of a step that could not run. */
static void fail_all(dec_comp *c, dec_req **batch, size_t n, const char *why)
{
    char reason[256];
    snprintf(reason, sizeof(reason), "%s", why);
    for (size_t i = 0; i < n; i++) {
        int64_t rid = batch[i]->rid;
        req_free(c, batch[i]);
        demo_worker_fail(c->w, rid, reason);
    }
}

/* Record each row's new token; requests that are done leave, the others (re)join `active`. */
static void advance(dec_comp *c, dec_req **batch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dec_req *r = batch[i];
        r->out[r->ngen++] = c->next[i];
        if (r->ngen == r->max_new)
            finish(c, r);
        else if (mstar__vec_push(&c->active, &r) != MSTAR_OK)
            fail_all(c, &r, 1, "out of memory joining the decode batch");
    }
}

/* Admit waiting requests into one packed prefill step. */
static mstar_status prefill(dec_comp *c, bool *worked)
{
    const demo_config *cfg = demo_worker_config(c->w);
    dec_req *batch[256];
    size_t n = 0, tokens = 0;
    int32_t total_pages = demo_decoder_total_pages(c->dec);
    /* A batch the largest prefill bucket holds (a longer prompt goes alone, eagerly). */
    size_t max_rows = (size_t)demo_sizes_max(&cfg->prefill_batch_sizes);
    size_t max_tokens = (size_t)demo_sizes_max(&cfg->prefill_token_lengths);
    while (c->waiting.len > 0 && n < 256 && n < max_rows &&
           c->active.len + n < (size_t)cfg->max_batch) {
        dec_req *r = *(dec_req **)mstar__vec_at(&c->waiting, 0);
        int32_t pages = demo_decoder_pages_for(c->dec, (int64_t)r->len + r->max_new);
        if (c->pages_reserved + pages > total_pages)
            break; /* waits for pages to come back */
        if (n > 0 && tokens + (size_t)r->len > max_tokens)
            break;
        mstar__vec_remove(&c->waiting, 0);
        mstar_status st = demo_decoder_open(c->dec, r->rid);
        if (st != MSTAR_OK) {
            fail_all(c, &r, 1, mstar_last_error());
            continue;
        }
        r->open = true;
        r->pages = pages;
        c->pages_reserved += pages;
        batch[n++] = r;
        tokens += (size_t)r->len;
    }
    if (n == 0)
        return MSTAR_OK;
    *worked = true;
    mstar_status st = ensure_step_arrays(c, n, tokens);
    if (st != MSTAR_OK)
        return st;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        c->rows[i] = batch[i]->rid;
        c->spans[i] = batch[i]->len;
        memcpy(c->tokens + at, batch[i]->prompt, (size_t)batch[i]->len * sizeof(int32_t));
        at += (size_t)batch[i]->len;
    }
    demo_step_info info;
    if (demo_decoder_step(c->dec, true, c->rows, c->spans, (int32_t)n, c->tokens, c->next, &info) !=
        MSTAR_OK) {
        fail_all(c, batch, n, mstar_last_error());
        return MSTAR_OK;
    }
    demo_worker_count_step(c->w, "prefill", &info);
    advance(c, batch, n);
    return MSTAR_OK;
}

/* One token for every active request. */
static mstar_status decode(dec_comp *c, bool *worked)
{
    size_t n = c->active.len;
    if (n == 0)
        return MSTAR_OK;
    *worked = true;
    mstar_status st = ensure_step_arrays(c, n, n);
    if (st != MSTAR_OK)
        return st;
    dec_req **batch = malloc(n * sizeof(*batch));
    if (batch == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "decode batch of %zu", n);
    memcpy(batch, c->active.data, n * sizeof(*batch));
    c->active.len = 0;
    for (size_t i = 0; i < n; i++) {
        c->rows[i] = batch[i]->rid;
        c->spans[i] = 1;
        c->tokens[i] = batch[i]->out[batch[i]->ngen - 1];
    }
    demo_step_info info;
    if (demo_decoder_step(c->dec, false, c->rows, c->spans, (int32_t)n, c->tokens, c->next,
                          &info) != MSTAR_OK) {
        fail_all(c, batch, n, mstar_last_error());
    } else {
        demo_worker_count_step(c->w, "decode", &info);
        advance(c, batch, n);
    }
    free(batch);
    return MSTAR_OK;
}

static mstar_status step(void *self, bool *worked)
{
    dec_comp *c = self;
    *worked = false;
    mstar_status st = prefill(c, worked);
    return st != MSTAR_OK ? st : decode(c, worked);
}

static bool remove_from(dec_comp *c, mstar__vec *list, int64_t rid)
{
    for (size_t i = 0; i < list->len; i++) {
        dec_req *r = *(dec_req **)mstar__vec_at(list, i);
        if (r->rid == rid) {
            mstar__vec_remove(list, i);
            req_free(c, r);
            return true;
        }
    }
    return false;
}

static void drop(void *self, int64_t rid)
{
    dec_comp *c = self;
    if (!remove_from(c, &c->waiting, rid))
        remove_from(c, &c->active, rid);
}

const demo_component_ops demo_decoder_component = { create, destroy, input, step, drop };
