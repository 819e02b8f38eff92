/*
 * msg_body.h — what each control message carries: the body fields with their wire names, which
 * fields each type has (and which of them are required), and the value rules of each field that
 * the encoder checks before writing and the decoder after reading (msg_body.c).
 */
#ifndef MSTAR_WIRE_MSG_BODY_H
#define MSTAR_WIRE_MSG_BODY_H

#include "codec.h"

/* Every body field of every type, in the order the encoder writes them. */
typedef enum mstar__body_field {
    B_REQUEST_ID,        /* rid                                    request_id */
    B_REQUEST_IDS,       /* rids (>= 1)                            request_ids */
    B_GRAPH_WALK,        /* graph_walk                             graph_walk */
    B_PARTITION_NAME,    /* text, a name                           partition_name */
    B_MODALITY,          /* text, a name                           modality */
    B_GROUP,             /* text, a name                           group */
    B_ROUND,             /* round                                  round */
    B_RANK,              /* rank                                   rank */
    B_WORLD_SIZE,        /* world_size                             world_size */
    B_SOURCE,            /* remove_source                          source */
    B_FORCE,             /* force                                  force */
    B_INITIAL_INPUTS,    /* edges, a list of edge maps             initial_inputs */
    B_INPUTS,            /* edges, a list of edge maps             inputs */
    B_GRAPH_EDGE,        /* edges, exactly one edge map            graph_edge */
    B_INITIAL_SIGNALS,   /* edges, {name: [descriptor]}            initial_signals */
    B_PERSIST_SIGNALS,   /* edges, {name: [descriptor]}            persist_signals */
    B_SUCCESSFUL,        /* counts, {uuid: count >= 1}             successful_tensors */
    B_FAILED,            /* uuids                                  failed_tensor_ids */
    B_UUID_TO_REF_COUNT, /* counts, {uuid: K >= 0}                 uuid_to_ref_count */
    B_PRODUCER_DONE,     /* names, a set                           producer_done */
    B_LOOP_INDICES,      /* ints                                   loop_indices */
    B_VALUES,            /* ints                                   values */
    B_RX_INFO,           /* rx                                     rx_info */
    B_TX_INFO,           /* tx                                     tx_info */
    B_IS_FIRST_TP_RANK,  /* is_first_tp_rank                       is_first_tp_rank */
    B_REQUEST_INFO,      /* kv                                     request_info */
    B_INPUT_METADATA,    /* kv                                     input_metadata */
    B_METADATA,          /* kv                                     metadata */
    B_INFO,              /* kv                                     info */
    B_REASON,            /* text, printable                        reason */
    B_COUNT_
} mstar__body_field;

extern const mstar__wkey mstar__body_keys[B_COUNT_];

typedef struct mstar__body_schema {
    uint64_t fields;   /* bit f: the type has field f */
    uint64_t required; /* bit f: the field must be present on the wire */
} mstar__body_schema;

extern const mstar__body_schema mstar__body_schemas[MSTAR_MSG_TYPE_COUNT_];

/* True when the field holds something other than its default (so the encoder writes it). */
bool mstar__body_has(const mstar_msg *msg, mstar__body_field field);

/* The rules of one field (path names the field). The decoder, which validated every name and
 * text as it copied it, passes names = false. */
mstar_status mstar__body_check_field(mstar_status code, const mstar__wpath *path,
                                     const mstar_msg *msg, mstar__body_field field, bool names);
/* The rules across fields, once the body is complete (path names the body). */
mstar_status mstar__body_check_all(mstar_status code, const mstar__wpath *path,
                                   const mstar_msg *msg);

/* Keys of a profiling record: rx has all, tx all but dest_entity. */
typedef enum mstar__prof_field {
    P_EDGE_NAME,
    P_SOURCE_ENTITY,
    P_DEST_ENTITY,
    P_COUNT,
    P_NUM_BYTES,
    P_TIME,
    P_COUNT_
} mstar__prof_field;

extern const mstar__wkey mstar__prof_keys[P_COUNT_];

#endif
