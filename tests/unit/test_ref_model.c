/*
 * test_ref_model.c — the reference decode model run eagerly on the host: KV-cache consistency
 * (decoding token by token gives the bits a fresh prefill of the longer prompt gives), batch
 * independence, packed prefill, padding rows that leave every live page and output alone, and
 * which steps count as one token per row.
 */
#include "mstar_test.h"

#include "ref_eager.h"

#include <stdlib.h>
#include <string.h>

static const mstar_kv_cache_config kv_cfg = {
    .num_pages = 64, .page_size = 4, .num_labels = 1, .max_seq_len = 64
};

static ref_eager *make_eager(void)
{
    ref_model_config cfg = ref_model_config_small();
    ref_eager *e = NULL;
    assert_mstar_ok(ref_eager_create(&cfg, &kv_cfg, mstar_test_host_backend(), &e));
    return e;
}

static const int32_t prompt[] = { 5, 17, 99, 3, 42, 8, 120 };
enum { PROMPT = sizeof(prompt) / sizeof(prompt[0]), VOCAB = 128, STEPS = 10 };

static void prefill(ref_eager *e, int64_t req, const int32_t *tokens, int32_t n, float *logits,
                    int32_t *next)
{
    assert_mstar_ok(ref_eager_open(e, req));
    assert_mstar_ok(ref_eager_step(e, &req, &n, 1, tokens, logits, next));
}

/* Decode STEPS tokens after the prompt; then, for each step k, a fresh request prefilled with the
 * prompt plus the first k generated tokens gives the same logits, bit for bit. */
static void test_decode_equals_prefill_of_longer_prompt(void **state)
{
    (void)state;
    ref_eager *e = make_eager();
    int32_t seq[PROMPT + STEPS];
    memcpy(seq, prompt, sizeof(prompt));
    float logits[STEPS + 1][VOCAB];
    int32_t next;
    prefill(e, 0, prompt, PROMPT, logits[0], &next);
    int64_t req = 0;
    int32_t one = 1;
    for (int k = 0; k < STEPS; k++) {
        seq[PROMPT + k] = next;
        assert_mstar_ok(ref_eager_step(e, &req, &one, 1, &seq[PROMPT + k], logits[k + 1], &next));
    }
    /* The tokens are not all the same (the model is not degenerate). */
    bool varied = false;
    for (int k = 1; k < STEPS; k++)
        varied |= seq[PROMPT + k] != seq[PROMPT];
    assert_true(varied);
    for (int k = 0; k <= STEPS; k++) {
        float fresh[VOCAB];
        int32_t fresh_next;
        prefill(e, 100 + k, seq, PROMPT + k, fresh, &fresh_next);
        assert_memory_equal(fresh, logits[k], sizeof(fresh));
        assert_mstar_ok(ref_eager_close(e, 100 + k));
    }
    int32_t len, np;
    const int32_t *pages;
    assert_mstar_ok(mstar_kv_cache_stream(ref_eager_kv(e), 0, 0, &len, &pages, &np));
    assert_int_equal(len, PROMPT + STEPS);
    int64_t p;
    assert_mstar_ok(mstar_positions_get(ref_eager_positions(e), 0, &p));
    assert_int_equal(p, PROMPT + STEPS);
    ref_eager_destroy(e);
}

/* Three prompts prefilled in one packed step, then decoded together, give what each gives
 * alone. */
static void test_batch_independence(void **state)
{
    (void)state;
    ref_eager *together = make_eager(), *alone = make_eager();
    int64_t reqs[3] = { 4, 5, 6 };
    int32_t spans[3] = { 7, 3, 5 };
    int32_t packed[15];
    for (int i = 0; i < 15; i++)
        packed[i] = (i * 37 + 11) % VOCAB;
    float lt[3][VOCAB], la[VOCAB];
    int32_t nt[3], na;
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(ref_eager_open(together, reqs[i]));
    assert_mstar_ok(ref_eager_step(together, reqs, spans, 3, packed, &lt[0][0], nt));
    int off = 0;
    for (int i = 0; i < 3; i++) {
        prefill(alone, reqs[i], packed + off, spans[i], la, &na);
        off += spans[i];
        assert_memory_equal(la, lt[i], sizeof(la));
        assert_int_equal(na, nt[i]);
    }
    for (int k = 0; k < 4; k++) {
        int32_t ones[3] = { 1, 1, 1 }, toks[3] = { nt[0], nt[1], nt[2] };
        assert_mstar_ok(ref_eager_step(together, reqs, ones, 3, toks, &lt[0][0], nt));
        for (int i = 0; i < 3; i++) {
            assert_mstar_ok(ref_eager_step(alone, &reqs[i], &ones[i], 1, &toks[i], la, &na));
            assert_memory_equal(la, lt[i], sizeof(la));
        }
    }
    ref_eager_destroy(together);
    ref_eager_destroy(alone);
}

/* Every page but the sink, of every layer's K and V pool. */
static void assert_live_pages_equal(ref_eager *a, ref_eager *b)
{
    ref_model *ma = ref_eager_model(a), *mb = ref_eager_model(b);
    size_t page = ref_model_page_bytes(ma), pool = (size_t)kv_cfg.num_pages * page;
    char *pa = malloc(pool), *pb = malloc(pool);
    for (int32_t l = 0; l < ref_model_config_of(ma)->layers; l++) {
        for (int v = 0; v < 2; v++) {
            assert_mstar_ok(ref_model_read_pool(ma, ref_eager_stream(a), l, v, pa));
            assert_mstar_ok(ref_model_read_pool(mb, ref_eager_stream(b), l, v, pb));
            assert_memory_equal(pa + page, pb + page, pool - page);
        }
    }
    free(pa);
    free(pb);
}

/* A decode batch padded with rows of length 0 (how replays pad) and with padding rows that carry
 * tokens (how captures pad) against the same batch unpadded: same outputs for the real rows, the
 * same bytes in every page but the sink, and no page taken for padding. */
static void test_padding_rows_touch_no_live_page(void **state)
{
    (void)state;
    ref_eager *padded = make_eager(), *plain = make_eager();
    int64_t reqs[2] = { 1, 2 };
    int32_t spans[2] = { 5, 6 };
    int32_t toks[11] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
    float lp[4][VOCAB], lq[2][VOCAB];
    int32_t np[4], nq[2];
    for (int i = 0; i < 2; i++) {
        assert_mstar_ok(ref_eager_open(padded, reqs[i]));
        assert_mstar_ok(ref_eager_open(plain, reqs[i]));
    }
    assert_mstar_ok(ref_eager_step(padded, reqs, spans, 2, toks, &lp[0][0], np));
    assert_mstar_ok(ref_eager_step(plain, reqs, spans, 2, toks, &lq[0][0], nq));
    int32_t free_before = mstar_kv_cache_free_pages(ref_eager_kv(padded));
    for (int k = 0; k < 6; k++) {
        /* Odd steps pad with zero-length rows, even steps with rows that carry two tokens. */
        int32_t pad_span = k % 2 ? 0 : 2;
        int64_t rows[4] = { reqs[0], -1, reqs[1], -2 };
        int32_t rspans[4] = { 1, pad_span, 1, pad_span };
        int32_t ptoks[6], n = 0;
        ptoks[n++] = nq[0];
        for (int j = 0; j < pad_span; j++)
            ptoks[n++] = 7 + j;
        ptoks[n++] = nq[1];
        for (int j = 0; j < pad_span; j++)
            ptoks[n++] = 9 + j;
        assert_mstar_ok(ref_eager_step(padded, rows, rspans, 4, ptoks, &lp[0][0], np));
        int32_t qtoks[2] = { nq[0], nq[1] }, ones[2] = { 1, 1 };
        assert_mstar_ok(ref_eager_step(plain, reqs, ones, 2, qtoks, &lq[0][0], nq));
        assert_memory_equal(lp[0], lq[0], sizeof(lq[0]));
        assert_memory_equal(lp[2], lq[1], sizeof(lq[1]));
        assert_int_equal(np[0], nq[0]);
        assert_int_equal(np[2], nq[1]);
        assert_live_pages_equal(padded, plain);
    }
    /* Six decode tokens per request over 4-token pages: one more page each, none for padding. */
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(padded)), free_before - 2);
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(padded)),
                     mstar_kv_cache_free_pages(ref_eager_kv(plain)));
    ref_eager_destroy(padded);
    ref_eager_destroy(plain);
}

/* Which steps attention may do the rope and KV write of (one token per row): a decode step; not
 * a prefill, a step with a reading row (span 0), or tokens that do not match the rows. Segments
 * of other labels do not count. */
static void test_one_token_per_row(void **state)
{
    (void)state;
    mstar_step_segment decode[3] = { { 5, 0, 1 }, { 7, 0, 1 }, { -1, 0, 1 } };
    assert_true(ref_step_one_token_per_row(decode, 3, 3, 3));
    assert_false(ref_step_one_token_per_row(decode, 3, 3, 4));
    mstar_step_segment prefill[2] = { { 5, 0, 2 }, { 7, 0, 1 } };
    assert_false(ref_step_one_token_per_row(prefill, 2, 2, 3));
    mstar_step_segment reading[3] = { { 5, 0, 2 }, { 7, 0, 0 }, { 9, 0, 1 } };
    assert_false(ref_step_one_token_per_row(reading, 3, 3, 3));
    mstar_step_segment labels[3] = { { 5, 0, 1 }, { 5, 1, 3 }, { 7, 0, 1 } };
    assert_true(ref_step_one_token_per_row(labels, 3, 2, 2));
}

static void test_bad_steps(void **state)
{
    (void)state;
    ref_eager *e = make_eager();
    int64_t req = 3;
    int32_t span = 2, toks[2] = { 1, VOCAB }, next;
    assert_mstar_ok(ref_eager_open(e, req));
    assert_mstar_status(ref_eager_open(e, req), MSTAR_EEXIST);
    assert_mstar_status(ref_eager_step(e, &req, &span, 1, toks, NULL, &next), MSTAR_EINVAL);
    toks[1] = -1;
    assert_mstar_status(ref_eager_step(e, &req, &span, 1, toks, NULL, &next), MSTAR_EINVAL);
    span = -1;
    assert_mstar_status(ref_eager_step(e, &req, &span, 1, toks, NULL, &next), MSTAR_EINVAL);
    span = 0;
    assert_mstar_status(ref_eager_step(e, &req, &span, 1, toks, NULL, &next), MSTAR_EINVAL);
    assert_mstar_status(ref_eager_step(e, &req, &span, 0, toks, NULL, &next), MSTAR_EINVAL);
    int64_t unknown = 77;
    span = 1;
    toks[0] = 1;
    assert_mstar_status(ref_eager_step(e, &unknown, &span, 1, toks, NULL, &next), MSTAR_ENOENT);
    /* Longer than max_seq_len. */
    int32_t many[65] = { 0 };
    span = 65;
    assert_mstar_status(ref_eager_step(e, &req, &span, 1, many, NULL, &next), MSTAR_ERANGE);
    /* Nothing advanced on any failure. */
    int64_t p;
    assert_mstar_ok(mstar_positions_get(ref_eager_positions(e), req, &p));
    assert_int_equal(p, 0);
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(e)), kv_cfg.num_pages - 1);
    assert_mstar_ok(ref_eager_close(e, req));
    assert_mstar_status(ref_eager_close(e, req), MSTAR_ENOENT);
    ref_model_config bad = ref_model_config_small();
    bad.head_dim = 7;
    ref_eager *none = NULL;
    assert_mstar_status(ref_eager_create(&bad, &kv_cfg, mstar_test_host_backend(), &none),
                        MSTAR_EINVAL);
    assert_null(none);
    ref_eager_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_equals_prefill_of_longer_prompt),
        cmocka_unit_test(test_batch_independence),
        cmocka_unit_test(test_padding_rows_touch_no_live_page),
        cmocka_unit_test(test_one_token_per_row),
        cmocka_unit_test(test_bad_steps),
    };
    return cmocka_run_group_tests(tests, mstar_test_host_backend_setup,
                                  mstar_test_host_backend_teardown);
}
