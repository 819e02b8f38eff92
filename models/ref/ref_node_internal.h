/*
 * ref_node_internal.h — what the two files of the reference node share: the node itself and the
 * submodule's entry points.
 *
 *   ref_node_module.c  the submodule the runner drives: declare_step, preprocess, forward, the
 *                      template rows and the capture configs
 *   ref_node.c         the node's lifetime and the engine's side of a step
 */
#ifndef MSTAR_EXAMPLES_REF_NODE_INTERNAL_H
#define MSTAR_EXAMPLES_REF_NODE_INTERNAL_H

#include "node_engine.h"
#include "ref_node.h"

/* The resources' keys in the node's step runner. */
#define REF_NODE_KV_KEY  "kv"
#define REF_NODE_POS_KEY "positions"

struct ref_node {
    mstar_backend *backend;
    /* The stream (compute: forwards, replays, plans of non-pre-planned steps), step runner,
     * pool, runner and the engine's per-step step and maps. */
    node_engine eng;
    ref_model *model;
    mstar_kv_cache *kv;
    mstar_positions *pos;
    int32_t *zeros; /* the template rows' tokens: token 0 */
    int64_t zeros_len;
    bool commit; /* what the next declaration's payloads say */
    /* Pinned staging for preprocess, two buffers used in turn: the one being filled waits for
     * its last upload (recorded in `staged`) to have been read. */
    int32_t *staging[2];
    mstar_event *staged[2];
    int64_t staging_cap;
    int which;
    /* The step's rows, sized for the largest step seen. */
    mstar_tensor_map **row_maps;
    mstar_node_input *real, *padded;
    int64_t *ids;
    size_t rows_cap;
    size_t maps_made; /* row_maps created so far (may exceed rows_cap after a failed grow) */
    /* The step begun and not ended (ref_node_begin .. ref_node_end). */
    bool begun;
    ref_step_request cur;
    bool leased;
    bool launched; /* its forward was enqueued: end commits */
    mstar_slot_lease lease;
    const mstar_tensor_map *outputs;
};

/* The submodule (self is the node). The node calls them directly for an eager step. */
mstar_status ref_node__declare(void *self, const char *walk, const int64_t *ids,
                               const mstar_node_input *inputs, size_t n, mstar_step *step,
                               bool *declared);
mstar_status ref_node__preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                                  size_t n, mstar_tensor_map *out);
mstar_status ref_node__forward(void *self, mstar_step *step, const mstar_tensor_map *inputs,
                               mstar_tensor_map *outputs);
extern const mstar_submodule_ops ref_node__ops;

/* The runner's configs for the captures (calloc'd; the runner copies them), with template rows
 * of token 0; sets node->zeros_len to the longest template row. */
mstar_status ref_node__make_configs(ref_node *node, const ref_node_options *o,
                                    mstar_graph_config **out);

#endif
