"""Port of the reference's test/distributed/test_tensor_transport.py: store -> register -> read
-> consolidate between managers of one process, for each fan-out / fan-in pattern, over every
transport (the reference's SHM becomes files and arena; its TCP-via-Mooncake becomes ucx-tcp,
skipped where UCX cannot start).

The reference's ShardingConfig.setup / ShardingGroup.register_workers compute, per request, the
shard dim of each signal; here the manager takes that result ({signal: dim}), and the producer's
TP rank and size go in as store parameters instead of being patched onto the descriptors.
"""
from copy import deepcopy

import pytest
import torch

import mstar_c

from conftest import ucx_available

_PROTOCOLS = [
    pytest.param("files", id="files"),
    pytest.param("arena", id="arena"),
    pytest.param("ucx-tcp", id="ucx-tcp",
                 marks=pytest.mark.skipif(not ucx_available(), reason="UCX cannot start here")),
]


def _drain_reads(manager, rid, edges):
    for f in manager.start_read_tensors(rid, edges):
        f.result(timeout=30)


def _send(manager, rid, signal, dest, tensor, source_tp_rank, source_tp_size, fanin, shard_dim):
    edge = mstar_c.GraphEdge(next_node=dest, name=signal, total_fanin=fanin, shard_dim=shard_dim)
    infos = manager.store_and_return_tensor_info(rid, {signal: [tensor]}, tp_size=source_tp_size,
                                                 tp_rank=source_tp_rank)
    edge.tensor_info = infos[signal]
    for info in edge.tensor_info:
        manager.increment_ref(info.uuid)  # the consumer's reference, released by its ACK
    manager.register_for_send(rid, edge.tensor_info)
    return edge


def _deliver_acks(consumer, producers):
    by_name = {p.entity: p for p in producers}
    for peer, msg in consumer.sent:
        by_name[peer].handle_message(msg)
    consumer.sent.clear()


def _take(mgr, ready, rid="req1"):
    """The tensor of the single delivered edge, copied out, and its usage reference released."""
    assert rid in ready and len(ready[rid]) == 1
    uuid = ready[rid][0].tensor_info[0].uuid
    got = torch.from_dlpack(mgr.get_tensor(rid, uuid)).clone()
    mgr.dereference(uuid)
    return got


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_basic_replicated_roundtrip(make, protocol):
    sender = make("w0", protocol)
    receiver = make("w1", protocol)
    cfg = mstar_c.ShardingConfig(shard_dim={"x": None})
    sender.register_request("req1", cfg)
    receiver.register_request("req1", cfg)
    original = torch.randn(4, 8)
    edge = _send(sender, "req1", "x", "B", original, 0, 1, fanin=1, shard_dim=None)
    _drain_reads(receiver, "req1", [deepcopy(edge)])
    assert torch.equal(_take(receiver, receiver.get_ready_tensors()), original)
    _deliver_acks(receiver, [sender])
    assert sender.num_tensors == 0


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_sharded_tp2_to_tp1_fanin_consolidates(make, protocol):
    senders = [make("w0", protocol), make("w1", protocol)]
    receiver = make("w2", protocol)
    for m in senders + [receiver]:
        m.register_request("req1", {"x": 1})
    shard0, shard1 = torch.randn(4, 8), torch.randn(4, 8)
    edge0 = _send(senders[0], "req1", "x", "B", shard0, 0, 2, fanin=2, shard_dim=1)
    edge1 = _send(senders[1], "req1", "x", "B", shard1, 1, 2, fanin=2, shard_dim=1)
    _drain_reads(receiver, "req1", [deepcopy(edge0), deepcopy(edge1)])
    got = _take(receiver, receiver.get_ready_tensors())
    assert torch.equal(got, torch.cat([shard0, shard1], dim=1))
    _deliver_acks(receiver, senders)
    assert all(s.num_tensors == 0 for s in senders)


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_fanin_buffers_partial_then_completes(make, protocol):
    senders = [make("w0", protocol), make("w1", protocol)]
    receiver = make("w2", protocol)
    for m in senders + [receiver]:
        m.register_request("req1", {"x": 0})
    shard0, shard1 = torch.randn(3, 4), torch.randn(3, 4)
    edge0 = _send(senders[0], "req1", "x", "B", shard0, 0, 2, fanin=2, shard_dim=0)
    edge1 = _send(senders[1], "req1", "x", "B", shard1, 1, 2, fanin=2, shard_dim=0)
    _drain_reads(receiver, "req1", [deepcopy(edge0)])
    assert receiver.get_ready_tensors().get("req1", []) == []
    _drain_reads(receiver, "req1", [deepcopy(edge1)])
    got = _take(receiver, receiver.get_ready_tensors())
    assert torch.equal(got, torch.cat([shard0, shard1], dim=0))


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_sharded_tp4_to_tp2_fanin(make, protocol):
    senders = [make(f"w{i}", protocol) for i in range(4)]
    receivers = [make(f"w{i}", protocol) for i in (4, 5)]
    for m in senders + receivers:
        m.register_request("req1", {"x": 0})
    shards = [torch.randn(2, 6) for _ in range(4)]
    edges = [_send(senders[i], "req1", "x", "B", shards[i], i, 4, fanin=2, shard_dim=0)
             for i in range(4)]
    _drain_reads(receivers[0], "req1", [deepcopy(edges[0]), deepcopy(edges[1])])
    _drain_reads(receivers[1], "req1", [deepcopy(edges[2]), deepcopy(edges[3])])
    r0 = _take(receivers[0], receivers[0].get_ready_tensors())
    r1 = _take(receivers[1], receivers[1].get_ready_tensors())
    assert torch.equal(r0, torch.cat([shards[0], shards[1]], dim=0))
    assert torch.equal(r1, torch.cat([shards[2], shards[3]], dim=0))


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_sharded_with_nonzero_shard_dim_roundtrips(make, protocol):
    sender = make("w0", protocol)
    receiver = make("w1", protocol)
    for m in (sender, receiver):
        m.register_request("req1", mstar_c.ShardingConfig(shard_dim={"x": 1}))
    original = torch.randn(3, 5, 7)
    edge = _send(sender, "req1", "x", "B", original, 0, 1, fanin=1, shard_dim=1)
    assert edge.tensor_info[0].dims == (5, 3, 7)  # canonical layout: the shard dim first
    _drain_reads(receiver, "req1", [deepcopy(edge)])
    assert torch.equal(_take(receiver, receiver.get_ready_tensors()), original)


@pytest.mark.parametrize("protocol", _PROTOCOLS)
def test_colocated_replicated_to_sharded_slices_locally(make, protocol):
    mgr = make("w0", protocol)
    mgr.register_request("req1", {"hidden": 1})
    original = torch.randn(4, 8)
    edge = _send(mgr, "req1", "hidden", "LLM", original, 0, 1, fanin=1, shard_dim=1)
    producer_uuid = edge.tensor_info[0].uuid
    # The other LLM rank's pending read, as the reference simulates it.
    mgr.increment_ref(producer_uuid, 1)
    # Rank 0's slice: dims [0, 4) of dim 1, the first 4 rows of the canonical [8, 4].
    info = edge.tensor_info[0]
    info.nbytes //= 2
    info.offset = 0
    info.dims = (4, 4)
    info.stride = (4, 1)
    _drain_reads(mgr, "req1", [edge])
    ready = mgr.get_ready_tensors()
    assert "req1" in ready and len(ready["req1"]) == 1
    slice_uuid = ready["req1"][0].tensor_info[0].uuid
    assert slice_uuid != producer_uuid  # a fresh uuid: the producer's stays for the other rank
    assert mgr.tensor_info(producer_uuid).uuid == producer_uuid
    got = torch.from_dlpack(mgr.get_tensor("req1", slice_uuid))
    assert torch.equal(got, original[:, :4])
