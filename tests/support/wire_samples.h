/*
 * wire_samples.h — valid descriptors, edges and messages of every type for tests (round trips,
 * the fuzz seed corpus, mesh traffic), and field-by-field comparisons that name the first field
 * that differs.
 */
#ifndef MSTAR_WIRE_SAMPLES_H
#define MSTAR_WIRE_SAMPLES_H

#include "mstar/mstar.h"

typedef enum mstar_test_info_kind {
    MSTAR_TEST_INFO_FULL,      /* every field set, non-contiguous strides, a remote key */
    MSTAR_TEST_INFO_MINIMAL,   /* only the required fields */
    MSTAR_TEST_INFO_ZERO_DIM,  /* a 0-dim (scalar) int64 */
    MSTAR_TEST_INFO_ZERO_SIZE, /* dims [0, 7]: no bytes */
    MSTAR_TEST_INFO_KINDS_
} mstar_test_info_kind;

void mstar_test_sample_info(mstar_test_info_kind kind, mstar_tensor_info *out);
/* A valid contiguous float32 [2, 3] descriptor (24 bytes) from worker_0, numbered `uuid`: the
 * small everyday one, where the test is about something else. */
void mstar_test_small_info(mstar_tensor_id uuid, mstar_tensor_info *out);
/* An edge with every field set and `ntensors` full descriptors (uuids distinct). */
void mstar_test_sample_edge(uint32_t ntensors, mstar_edge *out);
/* A message of `type` with every field the type has populated (full) or only the required ones
 * with everything else at its default (!full). `from` is "worker_0". */
void mstar_test_sample_msg(mstar_msg_type type, bool full, mstar_msg *out);

/* NULL when equal, else the name of the first field that differs. */
const char *mstar_test_info_diff(const mstar_tensor_info *a, const mstar_tensor_info *b);
const char *mstar_test_edge_diff(const mstar_edge *a, const mstar_edge *b);
const char *mstar_test_msg_diff(const mstar_msg *a, const mstar_msg *b);

#endif
