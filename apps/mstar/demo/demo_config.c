/*
 * demo_config.c — the demo's configuration: defaults, the YAML file (`--config FILE`, read with
 * libyaml's document loader) and validation.
 *
 * The file has five sections, every key optional (docs/demo.md shows them all):
 *
 *   workers:  { 0: encoder, 1: decoder }        which component runs on which worker
 *   model:    { vocab, hidden, heads, head_dim, mlp, layers, seed }   the decoder's dimensions
 *   encoder:  { layers, seed, batch_sizes, token_lengths }
 *   decoder:  { batch_sizes, prefill_batch_sizes, prefill_token_lengths, max_batch, page_size,
 *               kv_pages }
 *   requests: { count, concurrency, prompt_tokens: [min, max], output_tokens: [min, max], seed,
 *               check_sample }
 *
 * The schema is a fixed table walked to a fixed depth, so a hostile file (aliases that loop,
 * deep nesting) costs nothing beyond libyaml's own parse. Every error names the file, the line
 * and the key ("demo.yaml:7: decoder.batch_sizes[2]: 0 is not in [1, 4096]"); unknown keys are
 * errors, so a typo is never silently ignored.
 */
#include "demo.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

const char *demo_component_name(demo_component c)
{
    return c == DEMO_ENCODER ? "encoder" : "decoder";
}

static void sizes_set(demo_sizes *s, const int64_t *v, size_t n)
{
    memcpy(s->v, v, n * sizeof(*v));
    s->n = n;
}

void demo_config_defaults(demo_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->worker_component[0] = DEMO_ENCODER;
    cfg->worker_component[1] = DEMO_DECODER;
    cfg->model = ref_model_config_default();
    cfg->encoder_layers = 1;
    cfg->encoder_seed = 2;
    sizes_set(&cfg->encoder_batch_sizes, (const int64_t[]){ 1, 2, 4, 8 }, 4);
    sizes_set(&cfg->encoder_token_lengths, (const int64_t[]){ 32, 64, 128, 256 }, 4);
    sizes_set(&cfg->decode_batch_sizes, (const int64_t[]){ 1, 2, 4, 8, 16 }, 5);
    sizes_set(&cfg->prefill_batch_sizes, (const int64_t[]){ 1, 2, 4 }, 3);
    sizes_set(&cfg->prefill_token_lengths, (const int64_t[]){ 32, 64, 128 }, 3);
    cfg->max_batch = 16;
    cfg->page_size = 16;
    cfg->kv_pages = 256;
    cfg->requests = 64;
    cfg->concurrency = 16;
    cfg->prompt_min = 8;
    cfg->prompt_max = 48;
    cfg->output_min = 8;
    cfg->output_max = 32;
    cfg->seed = 7;
    cfg->check_sample = 8;
}

int demo_config_worker_of(const demo_config *cfg, demo_component c)
{
    for (int r = 0; r < DEMO_WORKERS; r++) {
        if (cfg->worker_component[r] == c)
            return r;
    }
    return -1;
}

/* ---- the schema ------------------------------------------------------------------------------ */

typedef enum field_kind { F_INT32, F_UINT64, F_SIZES, F_RANGE } field_kind;

typedef struct field {
    const char *section;
    const char *key;
    field_kind kind;
    size_t offset;  /* in demo_config; F_RANGE: the min, with the max right after it */
    int64_t lo, hi; /* allowed values (each entry of a list) */
} field;

#define OFF(member) offsetof(demo_config, member)

static const field fields[] = {
    { "model", "vocab", F_INT32, OFF(model.vocab), 2, 65536 },
    { "model", "hidden", F_INT32, OFF(model.hidden), 1, 65536 },
    { "model", "heads", F_INT32, OFF(model.heads), 1, 256 },
    { "model", "head_dim", F_INT32, OFF(model.head_dim), 2, 1024 },
    { "model", "mlp", F_INT32, OFF(model.mlp), 1, 65536 },
    { "model", "layers", F_INT32, OFF(model.layers), 1, 64 },
    { "model", "seed", F_UINT64, OFF(model.seed), 0, INT64_MAX },
    { "encoder", "layers", F_INT32, OFF(encoder_layers), 1, 64 },
    { "encoder", "seed", F_UINT64, OFF(encoder_seed), 0, INT64_MAX },
    { "encoder", "batch_sizes", F_SIZES, OFF(encoder_batch_sizes), 1, 256 },
    { "encoder", "token_lengths", F_SIZES, OFF(encoder_token_lengths), 1, 65536 },
    { "decoder", "batch_sizes", F_SIZES, OFF(decode_batch_sizes), 1, 256 },
    { "decoder", "prefill_batch_sizes", F_SIZES, OFF(prefill_batch_sizes), 1, 256 },
    { "decoder", "prefill_token_lengths", F_SIZES, OFF(prefill_token_lengths), 1, 65536 },
    { "decoder", "max_batch", F_INT32, OFF(max_batch), 1, 256 },
    { "decoder", "page_size", F_INT32, OFF(page_size), 1, 4096 },
    { "decoder", "kv_pages", F_INT32, OFF(kv_pages), 2, 1 << 20 },
    { "requests", "count", F_INT32, OFF(requests), 1, 1000000 },
    { "requests", "concurrency", F_INT32, OFF(concurrency), 1, 4096 },
    { "requests", "prompt_tokens", F_RANGE, OFF(prompt_min), 1, 65536 },
    { "requests", "output_tokens", F_RANGE, OFF(output_min), 1, 65536 },
    { "requests", "seed", F_UINT64, OFF(seed), 0, INT64_MAX },
    { "requests", "check_sample", F_INT32, OFF(check_sample), 0, 1000000 },
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *const sections[] = { "workers", "model", "encoder", "decoder", "requests" };

/* ---- reading the document -------------------------------------------------------------------- */

typedef struct loader {
    const char *path;
    yaml_document_t doc;
    demo_config *cfg;
} loader;

static size_t line_of(const yaml_node_t *node)
{
    return node->start_mark.line + 1;
}

static mstar_status fail_at(const loader *ld, const yaml_node_t *node, const char *fmt, ...)
    MSTAR_PRINTF(3, 4);

static mstar_status fail_at(const loader *ld, const yaml_node_t *node, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return mstar_error_set(MSTAR_EINVAL, "%s:%zu: %s", ld->path, line_of(node), what);
}

static const char *scalar(const yaml_node_t *node)
{
    return node->type == YAML_SCALAR_NODE ? (const char *)node->data.scalar.value : NULL;
}

/* A plain decimal integer in [lo, hi]. */
static mstar_status read_int(const loader *ld, const yaml_node_t *node, const char *key, int64_t lo,
                             int64_t hi, int64_t *out)
{
    const char *s = scalar(node);
    if (s == NULL)
        return fail_at(ld, node, "%s: expected an integer, found a %s", key,
                       node->type == YAML_MAPPING_NODE ? "mapping" : "list");
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno == ERANGE)
        return fail_at(ld, node, "%s: '%s' is not an integer", key, s);
    if (v < lo || v > hi)
        return fail_at(ld, node, "%s: %lld is not in [%lld, %lld]", key, v, (long long)lo,
                       (long long)hi);
    *out = v;
    return MSTAR_OK;
}

static mstar_status read_list(const loader *ld, const yaml_node_t *node, const char *key,
                              const field *f, int64_t *v, size_t cap, size_t *n)
{
    if (node->type != YAML_SEQUENCE_NODE)
        return fail_at(ld, node, "%s: expected a list such as [1, 2, 4]", key);
    yaml_node_item_t *it = node->data.sequence.items.start;
    size_t count = (size_t)(node->data.sequence.items.top - it);
    if (count == 0 || count > cap)
        return fail_at(ld, node, "%s: %zu entries, expected 1 to %zu", key, count, cap);
    for (size_t i = 0; i < count; i++) {
        char name[160];
        snprintf(name, sizeof(name), "%s[%zu]", key, i);
        mstar_status st = read_int(ld, yaml_document_get_node((yaml_document_t *)&ld->doc, it[i]),
                                   name, f->lo, f->hi, &v[i]);
        if (st != MSTAR_OK)
            return st;
        for (size_t j = 0; j < i; j++) {
            if (v[j] == v[i])
                return fail_at(ld, node, "%s: %lld is listed twice", key, (long long)v[i]);
        }
    }
    *n = count;
    return MSTAR_OK;
}

static mstar_status read_field(const loader *ld, const field *f, const yaml_node_t *node)
{
    char key[96];
    snprintf(key, sizeof(key), "%s.%s", f->section, f->key);
    char *base = (char *)ld->cfg + f->offset;
    int64_t v;
    mstar_status st;
    switch (f->kind) {
    case F_INT32:
        st = read_int(ld, node, key, f->lo, f->hi, &v);
        if (st == MSTAR_OK)
            *(int32_t *)base = (int32_t)v;
        return st;
    case F_UINT64:
        st = read_int(ld, node, key, f->lo, f->hi, &v);
        if (st == MSTAR_OK)
            *(uint64_t *)base = (uint64_t)v;
        return st;
    case F_SIZES: {
        demo_sizes s;
        st = read_list(ld, node, key, f, s.v, DEMO_MAX_SIZES, &s.n);
        if (st == MSTAR_OK)
            *(demo_sizes *)base = s;
        return st;
    }
    case F_RANGE: {
        int64_t r[2];
        size_t n;
        st = read_list(ld, node, key, f, r, 2, &n);
        if (st == MSTAR_OK && n != 2)
            st = fail_at(ld, node, "%s: expected [min, max]", key);
        if (st == MSTAR_OK && r[0] > r[1])
            st = fail_at(ld, node, "%s: min %lld is above max %lld", key, (long long)r[0],
                         (long long)r[1]);
        if (st == MSTAR_OK) {
            ((int32_t *)base)[0] = (int32_t)r[0];
            ((int32_t *)base)[1] = (int32_t)r[1];
        }
        return st;
    }
    }
    return MSTAR_OK;
}

/* workers: { <rank>: encoder|decoder, ... } */
static mstar_status read_workers(const loader *ld, const yaml_node_t *node)
{
    if (node->type != YAML_MAPPING_NODE)
        return fail_at(ld, node, "workers: expected a mapping such as {0: encoder, 1: decoder}");
    bool seen[DEMO_WORKERS] = { false };
    demo_component comp[DEMO_WORKERS];
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node((yaml_document_t *)&ld->doc, p->key);
        yaml_node_t *v = yaml_document_get_node((yaml_document_t *)&ld->doc, p->value);
        int64_t rank;
        mstar_status st = read_int(ld, k, "workers: a worker rank", 0, DEMO_WORKERS - 1, &rank);
        if (st != MSTAR_OK)
            return st;
        if (seen[rank])
            return fail_at(ld, k, "workers.%lld: given twice", (long long)rank);
        const char *name = scalar(v);
        if (name != NULL && strcmp(name, "encoder") == 0)
            comp[rank] = DEMO_ENCODER;
        else if (name != NULL && strcmp(name, "decoder") == 0)
            comp[rank] = DEMO_DECODER;
        else
            return fail_at(ld, v, "workers.%lld: '%s' is not a component (encoder or decoder)",
                           (long long)rank, name != NULL ? name : "(not a name)");
        seen[rank] = true;
    }
    for (int r = 0; r < DEMO_WORKERS; r++) {
        if (!seen[r])
            return fail_at(ld, node,
                           "workers: worker %d has no component (both workers 0 and 1 "
                           "need one)",
                           r);
    }
    if (comp[0] == comp[1])
        return fail_at(ld, node,
                       "workers: both workers run the %s; one encoder and one decoder "
                       "are needed",
                       demo_component_name(comp[0]));
    memcpy(ld->cfg->worker_component, comp, sizeof(comp));
    return MSTAR_OK;
}

static mstar_status read_section(const loader *ld, const char *section, const yaml_node_t *node)
{
    if (strcmp(section, "workers") == 0)
        return read_workers(ld, node);
    if (node->type != YAML_MAPPING_NODE)
        return fail_at(ld, node, "%s: expected a mapping of keys", section);
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node((yaml_document_t *)&ld->doc, p->key);
        yaml_node_t *v = yaml_document_get_node((yaml_document_t *)&ld->doc, p->value);
        const char *key = scalar(k);
        const field *f = NULL;
        for (size_t i = 0; key != NULL && i < NFIELDS && f == NULL; i++) {
            if (strcmp(fields[i].section, section) == 0 && strcmp(fields[i].key, key) == 0)
                f = &fields[i];
        }
        if (f == NULL) {
            char known[512] = "";
            for (size_t i = 0; i < NFIELDS; i++) {
                if (strcmp(fields[i].section, section) != 0)
                    continue;
                size_t len = strlen(known);
                snprintf(known + len, sizeof(known) - len, "%s%s", len ? ", " : "", fields[i].key);
            }
            return fail_at(ld, k, "%s: unknown key '%s' (known: %s)", section,
                           key != NULL ? key : "(not a name)", known);
        }
        for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
            const char *earlier =
                scalar(yaml_document_get_node((yaml_document_t *)&ld->doc, q->key));
            if (earlier != NULL && strcmp(earlier, key) == 0)
                return fail_at(ld, k, "%s.%s: given twice", section, key);
        }
        mstar_status st = read_field(ld, f, v);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

static mstar_status read_root(loader *ld)
{
    yaml_node_t *root = yaml_document_get_root_node(&ld->doc);
    if (root == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "%s: empty file (expected sections workers, model, "
                               "encoder, decoder, requests)",
                               ld->path);
    if (root->type != YAML_MAPPING_NODE)
        return fail_at(ld, root,
                       "expected a mapping of sections (workers, model, encoder, "
                       "decoder, requests)");
    bool seen[sizeof(sections) / sizeof(sections[0])] = { false };
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&ld->doc, p->key);
        const char *name = scalar(k);
        size_t s = 0;
        while (s < sizeof(sections) / sizeof(sections[0]) &&
               (name == NULL || strcmp(sections[s], name) != 0))
            s++;
        if (s == sizeof(sections) / sizeof(sections[0]))
            return fail_at(ld, k,
                           "unknown section '%s' (known: workers, model, encoder, decoder, "
                           "requests)",
                           name != NULL ? name : "(not a name)");
        if (seen[s])
            return fail_at(ld, k, "section '%s' given twice", name);
        seen[s] = true;
        mstar_status st = read_section(ld, name, yaml_document_get_node(&ld->doc, p->value));
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

mstar_status demo_config_load(const char *path, demo_config *cfg)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: cannot open: %s", path, strerror(errno));
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return mstar_error_set(MSTAR_ENOMEM, "%s: cannot initialise the YAML parser", path);
    }
    yaml_parser_set_input_file(&parser, f);
    loader ld = { .path = path, .cfg = cfg };
    mstar_status st;
    if (!yaml_parser_load(&parser, &ld.doc)) {
        st = mstar_error_set(MSTAR_EINVAL, "%s:%zu:%zu: YAML syntax error: %s", path,
                             parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                             parser.problem != NULL ? parser.problem : "unknown");
    } else {
        demo_config work = *cfg;
        ld.cfg = &work;
        st = read_root(&ld);
        if (st == MSTAR_OK && (st = demo_config_validate(&work)) != MSTAR_OK)
            mstar_error_wrap("%s", path);
        if (st == MSTAR_OK)
            *cfg = work;
        yaml_document_delete(&ld.doc);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    return st;
}

/* ---- checks across fields -------------------------------------------------------------------- */

int64_t demo_sizes_max(const demo_sizes *s)
{
    int64_t m = 0;
    for (size_t i = 0; i < s->n; i++)
        m = s->v[i] > m ? s->v[i] : m;
    return m;
}

mstar_status demo_config_validate(const demo_config *cfg)
{
    mstar_status st = ref_model_config_validate(&cfg->model);
    if (st != MSTAR_OK)
        return mstar_error_wrap("model");
    if (cfg->worker_component[0] == cfg->worker_component[1])
        return mstar_error_set(MSTAR_EINVAL, "workers: one encoder and one decoder are needed");
    int64_t max_seq = (int64_t)cfg->prompt_max + cfg->output_max;
    int64_t pages_per_req = (max_seq + cfg->page_size - 1) / cfg->page_size;
    if (pages_per_req + 1 > cfg->kv_pages)
        return mstar_error_set(MSTAR_EINVAL,
                               "decoder.kv_pages: %d pages of %d tokens cannot hold one request "
                               "of %lld tokens (requests.prompt_tokens max + output_tokens max) "
                               "beside the sink page",
                               cfg->kv_pages, cfg->page_size, (long long)max_seq);
    if (demo_sizes_max(&cfg->decode_batch_sizes) > cfg->max_batch)
        return mstar_error_set(MSTAR_EINVAL,
                               "decoder.batch_sizes: %lld is above decoder.max_batch %d (a "
                               "bucket no step can fill)",
                               (long long)demo_sizes_max(&cfg->decode_batch_sizes), cfg->max_batch);
    if (cfg->check_sample > cfg->requests)
        return mstar_error_set(MSTAR_EINVAL, "requests.check_sample: %d is above requests.count %d",
                               cfg->check_sample, cfg->requests);
    return MSTAR_OK;
}
