"""Hostile callers of the package (issue 29): Python code run by a call (a __dlpack__) that
rewrites the containers the call is walking, an exception pending while a view goes, and
read-into targets that cannot be written. Each case failed before its fix; the use-after-free
and overflow cases are also seen by ASan with PYTHONMALLOC=malloc."""
import gc

import numpy
import pytest
import torch

import mstar_c
from test_read_into import _stage, pair  # noqa: F401 (pair: a fixture)


class Sly:
    """A DLPack tensor over `arr` whose __dlpack__ first runs `then()`."""

    def __init__(self, arr, then):
        self.arr, self.then = arr, then

    def __dlpack__(self, **kw):
        self.then()
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_into_grown_by_a_dlpack_export_reads_what_it_held(pair):
    """Fault 6: the targets were sized before the walk and the walk went on into entries a
    __dlpack__ added (a heap overflow). The call reads into the entries the dict held when it
    began; what was added meanwhile is not a target."""
    prod, cons = pair
    src = torch.arange(64, dtype=torch.float32)
    infos = _stage(prod, 1, [src])
    dst = numpy.zeros(64, dtype=numpy.float32)
    into = {}

    def grow():
        into.update({10**6 + k: b"not a tensor" for k in range(64)})

    into[infos[0].uuid] = Sly(dst, grow)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)], into=into)
    assert len(into) == 65
    cons.get_ready_tensors()
    assert numpy.array_equal(dst, src.numpy())
    cons.dereference(infos[0].uuid)
    cons.cleanup_request(1)
    prod.force_cleanup_request(1)


def test_outputs_cleared_by_a_dlpack_export_store_what_they_held(make):
    """Fault 7: a signal name was borrowed from the dict's key, and the walk followed the dict
    as __dlpack__ cleared it (a use after free, and the second signal lost). Every signal the
    dict held when the call began is stored, under its own name."""
    prod = make("worker_0")
    first = "".join(["sig", "nal_a"])  # a key only the dict holds
    outputs = {first: [Sly(numpy.arange(8, dtype=numpy.int32), lambda: outputs.clear())]}
    outputs["signal_b"] = [torch.ones(4)]
    del first
    got = prod.store_and_return_tensor_info(1, outputs)
    assert outputs == {}
    assert sorted(got) == ["signal_a", "signal_b"]
    assert [(i.dims, i.dtype) for i in got["signal_a"]] == [((8,), "int32")]
    assert prod.num_tensors == 2
    prod.cleanup_request(1)


def test_a_view_going_while_an_error_is_raised_keeps_the_error(make, monkeypatch):
    """Fault 8: a view's dealloc cleared the pending exception, so a failing check() of a
    temporary view raised SystemError instead of NotFoundError."""
    monkeypatch.setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1")
    prod, cons = make("worker_0", "arena"), make("worker_1", "arena")
    loan = prod.loan_output((256,), torch.float32)
    torch.from_dlpack(loan).fill_(1)
    infos = prod.store_and_return_tensor_info(4, {"x": [loan]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(4, infos)
    cons.start_read_tensors(4, [mstar_c.GraphEdge("n", "x", infos)], views=True)
    cons.get_ready_tensors()
    uuid = infos[0].uuid
    cons.get_tensor(4, uuid).check()
    prod.force_cleanup_request(4)
    with pytest.raises(mstar_c.NotFoundError):
        cons.get_tensor(4, uuid).check()  # the temporary view goes while the error is set
    cons.dereference(uuid)
    cons.cleanup_request(4)
    gc.collect()
    assert cons.num_tensors == 0


def test_unwritable_read_into_targets_are_refused(make, monkeypatch):
    """Fault 9 (from Python): a read lands only in memory the caller may write. An mstar_c.Tensor
    (the manager's own memory), a tensor made from a read-only view, and a read-only array are
    refused with InvalidArgumentError, and the call starts nothing."""
    monkeypatch.setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1")
    prod, cons = make("worker_0", "arena"), make("worker_1", "arena")
    a = _stage(prod, 1, [torch.arange(256, dtype=torch.float32)])
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", a)], views=True)
    cons.get_ready_tensors()
    view = cons.get_tensor(1, a[0].uuid)
    b = _stage(prod, 2, [torch.arange(256, dtype=torch.float32)])
    edges = [mstar_c.GraphEdge("n", "x", b)]
    readonly = numpy.zeros(256, dtype=numpy.float32)
    readonly.flags.writeable = False
    for target, why in [(view, "mstar_c.Tensor"), (torch.from_dlpack(view), "writable"),
                        (readonly, "writable")]:
        with pytest.raises(mstar_c.InvalidArgumentError, match=why):
            cons.start_read_tensors(2, edges, into={b[0].uuid: target})
        assert not cons.has_inflight_reads(2)
    assert torch.equal(torch.from_dlpack(view), torch.arange(256, dtype=torch.float32))
    dst = torch.zeros(256)  # the request is still readable
    cons.start_read_tensors(2, edges, into={b[0].uuid: dst})
    cons.get_ready_tensors()
    assert torch.equal(dst, torch.arange(256, dtype=torch.float32))
    del view
    for i in (a[0].uuid, b[0].uuid):
        cons.dereference(i)
    cons.cleanup_request(1)
    cons.cleanup_request(2)
