/*
 * hostile_fs.h — what the file-system hostile tests share: the legitimate traffic each attack
 * runs beside (a producer "worker_0" and a consumer on one bus, every byte checked, both ends
 * freed).
 */
#ifndef MSTAR_TEST_HOSTILE_FS_H
#define MSTAR_TEST_HOSTILE_FS_H

#include "comm_harness.h"

/* `c` reads the staged tensor `info` of `rid` (the bytes of `want`), checks every byte,
 * releases it, and its ACK reaches the producer `p`. */
static inline void read_checked_and_acked(bus *b, mstar_comm *p, mstar_comm *c,
                                          const mstar_rid *rid, const mstar_tensor_info *info,
                                          const mstar_tensor *want)
{
    mstar_edge e = edge_of("sig", "node", info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(c, rid, &e, 1, NULL));
    mstar_edge_clear(&e);
    collect_ready(c, 1);
    check_bytes(c, info->uuid, want);
    assert_mstar_ok(mstar_comm_dereference(c, info->uuid, 1));
    bus_deliver(b, "worker_0", p);
}

/* Producer `p` stages `n` bytes for request `rid_n`, `c` reads them as above, and the producer
 * holds nothing afterwards. */
static inline void legit_roundtrip_of(bus *b, mstar_comm *p, mstar_comm *c, int64_t n,
                                      int64_t rid_n)
{
    mstar_rid rid = mstar_rid_from_int(rid_n);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, n, (uint32_t)rid_n);
    mstar_tensor_info info;
    produce(p, &rid, &t, 1, 1, &info);
    read_checked_and_acked(b, p, c, &rid, &info, &t);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    free(t.data);
}

#endif
