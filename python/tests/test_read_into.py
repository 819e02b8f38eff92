"""start_read_tensors(..., into={uuid: tensor}): a read landing in a tensor the caller owns
(mstar_comm_start_read_into). The bytes land in the caller's tensor, which get_tensor then views;
the manager keeps the tensor alive while it uses the memory and lets go of it after; bad targets
are refused with nothing started and nothing held."""
import gc
import sys

import numpy
import pytest
import torch

import mstar_c


@pytest.fixture(params=["files", "arena"])
def pair(make, request):
    return make("worker_0", request.param), make("worker_1", request.param)


def _stage(prod, rid, tensors):
    infos = prod.store_and_return_tensor_info(rid, {"x": tensors})["x"]
    for i in infos:
        prod.increment_ref(i.uuid)  # one consumer
    prod.register_for_send(rid, infos)
    return infos


def _deliver_acks(cons, prod):
    for _, m in cons.sent:
        if m.type == "TENSOR_RECEIVED":
            prod.handle_message(m)
    cons.sent.clear()


def test_lands_in_the_callers_tensor(pair):
    prod, cons = pair
    src = [torch.arange(1000, dtype=torch.float32), torch.arange(7, dtype=torch.int64)]
    infos = _stage(prod, 1, src)
    dst = torch.full((1000,), -1.0)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)], into={infos[0].uuid: dst})
    ready = cons.get_ready_tensors()
    assert [i.uuid for e in ready[1] for i in e.tensor_info] == [i.uuid for i in infos]
    assert torch.equal(dst, src[0])  # the bytes are in the caller's tensor
    got = torch.from_dlpack(cons.get_tensor(1, infos[0].uuid))
    assert got.data_ptr() == dst.data_ptr()
    assert torch.equal(torch.from_dlpack(cons.get_tensor(1, infos[1].uuid)), src[1])
    del got
    for i in infos:
        cons.dereference(i.uuid)
    _deliver_acks(cons, prod)
    assert cons.num_tensors == 0 and prod.num_tensors == 0
    assert torch.equal(dst, src[0])


def test_target_held_while_used(pair):
    """A NumPy target (its DLPack export references the array itself): the manager holds it
    from the read until the tensor's last reference goes, then lets go of it."""
    prod, cons = pair
    src = numpy.arange(300, dtype=numpy.int32)
    infos = _stage(prod, 2, [src])
    dst = numpy.zeros(300, dtype=numpy.int32)
    refs = sys.getrefcount(dst)
    cons.start_read_tensors(2, [mstar_c.GraphEdge("n", "x", infos)], into={infos[0].uuid: dst})
    assert sys.getrefcount(dst) > refs
    cons.get_ready_tensors()
    assert numpy.array_equal(dst, src)
    cons.dereference(infos[0].uuid)
    gc.collect()
    assert sys.getrefcount(dst) == refs
    _deliver_acks(cons, prod)


def test_bad_targets_start_nothing(pair):
    prod, cons = pair
    src = torch.arange(1000, dtype=torch.float32)
    infos = _stage(prod, 3, [src])
    edges = [mstar_c.GraphEdge("n", "x", infos)]
    small = numpy.zeros(999, dtype=numpy.float32)
    refs = sys.getrefcount(small)
    bad = [
        ({infos[0].uuid: small}, "capacity"),
        ({infos[0].uuid + 1000: torch.zeros(1000)}, "no edge"),
        ({infos[0].uuid: torch.zeros(2000)[::2]}, "contiguous"),
        ({infos[0].uuid: b"x" * 4000}, "DLPack"),
        ({"uuid": torch.zeros(1000)}, "uuid"),
        ([torch.zeros(1000)], "dict"),
    ]
    for into, why in bad:
        with pytest.raises(mstar_c.Error, match=why):
            cons.start_read_tensors(3, edges, into=into)
        assert cons.num_tensors == 0 and not cons.has_inflight_reads(3) and cons.sent == []
    with pytest.raises(mstar_c.Error, match="views"):
        cons.start_read_tensors(3, edges, views=True, into={infos[0].uuid: torch.zeros(1000)})
    del bad
    gc.collect()
    assert sys.getrefcount(small) == refs  # nothing kept of a refused call
    dst = torch.zeros(1000)  # the request is still usable
    cons.start_read_tensors(3, edges, into={infos[0].uuid: dst})
    cons.get_ready_tensors()
    assert torch.equal(dst, src)
    cons.dereference(infos[0].uuid)
    _deliver_acks(cons, prod)
