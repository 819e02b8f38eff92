"""Loans (output memory the producer's manager lends) and views (reads in place of the
producer's arena slot): the package's zero-copy path (docs/python.md, "Loans and views").

Zero copy is shown by where the data lives: /proc/self/maps names the file each mapping comes
from, so a pointer inside a mapping of the producer's arena segment is the slot itself.
"""
import gc

import numpy
import pytest
import torch

import mstar_c


def _mapping_of(ptr):
    """(path, offset in the file, permissions) of the mapping holding address ptr, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= ptr < hi:
                path = parts[5] if len(parts) > 5 else ""
                return path, ptr - lo + int(parts[2], 16), parts[1]
    return None


@pytest.fixture
def pair(make, monkeypatch):
    monkeypatch.setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1")
    return make("worker_0", "arena"), make("worker_1", "arena")


def _acks(mgr, uuid):
    return [m for _, m in mgr.sent if m.type == "TENSOR_RECEIVED" and uuid in m.counts]


def _deliver_acks(cons, prod):
    for _, m in cons.sent:
        if m.type == "TENSOR_RECEIVED":
            prod.handle_message(m)
    cons.sent.clear()


def _loan_and_stage(prod, rid, src):
    loan = prod.loan_output(tuple(src.shape), src.dtype)
    t = torch.from_dlpack(loan)
    t.copy_(src)  # the producer's compute, in place
    del t  # no export left: the store holds nothing extra
    infos = prod.store_and_return_tensor_info(rid, {"x": [loan]})["x"]
    prod.increment_ref(infos[0].uuid)  # one consumer
    prod.register_for_send(rid, infos)
    return loan, infos


def _read_views(cons, rid, infos):
    cons.start_read_tensors(rid, [mstar_c.GraphEdge("n", "x", infos)], views=True)
    ready = cons.get_ready_tensors()
    assert [i.uuid for e in ready[rid] for i in e.tensor_info] == [infos[0].uuid]


def test_loan_is_the_slot_and_a_view_maps_it(pair, shm_dir):
    """The loan's memory is the arena slot the descriptor names (storing and staging copied
    nothing), and the consumer's view reads that slot in place through a read-only mapping."""
    prod, cons = pair
    src = torch.arange(4 * 1024, dtype=torch.float32).reshape(4, 1024)
    loan, infos = _loan_and_stage(prod, 1, src)
    info = infos[0]
    assert loan.stored and not loan.open
    path, off, _ = _mapping_of(loan.data_ptr)
    assert path.startswith(shm_dir) and path.endswith("/" + info.shm_segment)
    assert off == info.shm_offset and info.address == loan.data_ptr
    _read_views(cons, 1, infos)
    view = cons.get_tensor(1, info.uuid)
    got = torch.from_dlpack(view)
    path, off, perms = _mapping_of(got.data_ptr())
    assert got.data_ptr() != loan.data_ptr  # the consumer's own mapping of the segment
    assert path.endswith("/" + info.shm_segment) and off == info.shm_offset
    assert perms.startswith("r-")  # read-only: a view is never written through
    assert torch.equal(got, src)
    view.check()  # the slot still holds it
    del got, view
    cons.dereference(info.uuid)
    _deliver_acks(cons, prod)
    prod.cleanup_request(1)
    cons.cleanup_request(1)
    assert prod.num_tensors == 0 and cons.num_tensors == 0
    assert prod.arena_stats()["live_slots"] == 0


def test_view_ack_goes_when_python_releases_the_last_reference(pair):
    """The delivery's dereference alone sends no ACK while a view (or a tensor made from it)
    is alive; the ACK goes when the last one goes, and then the producer frees the slot."""
    prod, cons = pair
    src = torch.full((1000,), 3, dtype=torch.int32)
    _, infos = _loan_and_stage(prod, 2, src)
    uuid = infos[0].uuid
    prod.cleanup_request(2)  # freed by the ACK
    _read_views(cons, 2, infos)
    got = torch.from_dlpack(cons.get_tensor(2, uuid))  # the mstar_c.Tensor lives on inside it
    cons.dereference(uuid)
    gc.collect()
    assert _acks(cons, uuid) == [] and prod.num_tensors == 1
    assert torch.equal(got, src)
    del got
    gc.collect()
    assert len(_acks(cons, uuid)) == 1
    _deliver_acks(cons, prod)
    assert prod.num_tensors == 0 and cons.num_tensors == 0


def test_view_dropped_inside_a_call_acks_before_the_call_returns(make, monkeypatch):
    """A view whose last reference goes while its manager is inside a call (here: in the send
    callback of another tensor's ACK) cannot dereference then; its dereference is queued, and
    its ACK still leaves before that call returns, not at some later call."""
    monkeypatch.setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1")
    prod = make("worker_0", "arena")
    held, sent = [], []

    def send(peer, msg):
        sent.append(msg)
        held.clear()  # the last reference on the other view goes mid-call

    cons = make("worker_1", "arena", send=send)
    src = torch.arange(256, dtype=torch.int64)
    _, a = _loan_and_stage(prod, 7, src)
    _, b = _loan_and_stage(prod, 8, src)
    _read_views(cons, 7, a)
    _read_views(cons, 8, b)
    held.append(torch.from_dlpack(cons.get_tensor(7, a[0].uuid)))
    cons.dereference(a[0].uuid)  # the view in `held` is the last reference on a
    assert sent == [] and torch.equal(held[0], src)
    cons.dereference(b[0].uuid)  # b's ACK goes, and its callback drops a's view
    assert held == []
    acked = [u for m in sent if m.type == "TENSOR_RECEIVED" for u in m.counts]
    assert sorted(acked) == sorted([a[0].uuid, b[0].uuid])
    for m in sent:
        prod.handle_message(m)
    for rid in (7, 8):
        prod.cleanup_request(rid)
        cons.cleanup_request(rid)
    assert prod.num_tensors == 0 and cons.num_tensors == 0


def test_view_held_past_cleanup_stays_valid(pair):
    prod, cons = pair
    src = torch.randn(64, 64)
    _, infos = _loan_and_stage(prod, 3, src)
    uuid = infos[0].uuid
    _read_views(cons, 3, infos)
    got = torch.from_dlpack(cons.get_tensor(3, uuid))
    cons.dereference(uuid)
    cons.cleanup_request(3)  # deferred: the view holds the tensor
    with pytest.raises(mstar_c.StateError):
        cons.force_cleanup_request(3)  # refused while a view of the request is alive
    assert torch.equal(got, src) and _acks(cons, uuid) == []
    del got
    gc.collect()
    assert len(_acks(cons, uuid)) == 1 and cons.num_tensors == 0
    _deliver_acks(cons, prod)
    prod.cleanup_request(3)
    assert prod.num_tensors == 0


def test_view_whose_slot_was_freed_fails_its_check(pair):
    """A producer that frees the slot anyway (a forced cleanup; the TTL does the same) leaves
    the view's mapping in place: reading it cannot crash, and check() says the bytes are no
    longer the tensor's."""
    prod, cons = pair
    _, infos = _loan_and_stage(prod, 4, torch.ones(256))
    uuid = infos[0].uuid
    _read_views(cons, 4, infos)
    view = cons.get_tensor(4, uuid)
    view.check()
    prod.force_cleanup_request(4)
    with pytest.raises(mstar_c.NotFoundError):
        view.check()
    torch.from_dlpack(view).sum()  # still mapped
    del view
    cons.dereference(uuid)
    cons.cleanup_request(4)
    assert cons.num_tensors == 0


def test_copying_read_of_a_loan_and_check_of_a_copy(pair):
    prod, cons = pair
    src = torch.arange(100, dtype=torch.int64)
    _, infos = _loan_and_stage(prod, 5, src)
    cons.start_read_tensors(5, [mstar_c.GraphEdge("n", "x", infos)])  # views=False: a copy
    cons.get_ready_tensors()
    view = cons.get_tensor(5, infos[0].uuid)
    got = torch.from_dlpack(view)
    assert torch.equal(got, src)
    assert _mapping_of(got.data_ptr())[0] == "" or "mstar_arena" not in _mapping_of(
        got.data_ptr())[0]
    view.check()  # a copy is always the tensor's
    del got, view
    cons.dereference(infos[0].uuid)
    _deliver_acks(cons, prod)
    prod.cleanup_request(5)
    cons.cleanup_request(5)
    assert prod.num_tensors == 0


def test_tensors_made_from_a_loan_outlive_the_store(pair):
    """A tensor made from the loan and still alive when the loan is stored keeps the stored
    tensor (and its slot) until it goes, even once consumers ACKed and the request is gone."""
    prod, cons = pair
    loan = prod.loan_output(128, "uint8")
    mine = torch.from_dlpack(loan)
    mine.fill_(9)
    infos = prod.store_and_return_tensor_info(6, {"x": [loan]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(6, infos)
    prod.cleanup_request(6)
    cons.start_read_tensors(6, [mstar_c.GraphEdge("n", "x", infos)])
    cons.get_ready_tensors()
    cons.dereference(infos[0].uuid)
    _deliver_acks(cons, prod)
    cons.cleanup_request(6)
    assert prod.num_tensors == 1  # held by `mine`
    assert bool((mine == 9).all()) and prod.arena_stats()["live_slots"] == 1
    with pytest.raises(mstar_c.StateError):
        loan.__dlpack__()  # stored: the bytes are the tensor's now
    del mine
    gc.collect()
    assert prod.num_tensors == 0 and prod.arena_stats()["live_slots"] == 0


def test_loan_refusals_and_give_back(pair, make):
    prod, cons = pair
    loan = prod.loan_output((2, 3), torch.int16)
    assert loan.shape == (2, 3) and loan.dtype == "int16" and loan.nbytes == 12 and loan.open
    t = numpy.from_dlpack(loan)
    with pytest.raises(mstar_c.StateError):
        loan.release()  # a tensor made from it is alive
    del t
    loan.release()
    assert not loan.open
    loan.release()  # idempotent
    with pytest.raises(mstar_c.ClosedError):
        prod.store_and_return_tensor_info(7, {"x": [loan]})
    with pytest.raises(mstar_c.ClosedError):
        loan.__dlpack__()
    other = cons.loan_output(4, "float32")
    with pytest.raises(mstar_c.InvalidArgumentError):
        prod.store_and_return_tensor_info(7, {"x": [other]})
    assert other.open  # a failed store keeps the loan open
    with pytest.raises(mstar_c.NotSupportedError):
        cons.store_and_return_tensor_info_batch([7], [{"x": [other]}], ["x"])
    assert other.open
    cons.store_and_return_tensor_info(7, {"x": [other]})
    with pytest.raises(mstar_c.StateError):
        cons.store_and_return_tensor_info(8, {"x": [other]})
    cons.cleanup_request(7)
    with prod.loan_output((8,), "float64") as scoped:
        assert scoped.open
    assert not scoped.open  # given back by `with`
    with pytest.raises(mstar_c.InvalidArgumentError):
        prod.loan_output((2,), "no_such_dtype")
    assert prod.arena_stats()["live_slots"] == 0


def test_loan_over_files(make):
    """Other transports lend plain host memory, stored and staged like any output. (NumPy
    before 2.1 imports every DLPack tensor read-only: it reads a loan, torch writes it.)"""
    prod, cons = make("worker_0", "files"), make("worker_1", "files")
    loan = prod.loan_output((3, 4), "float32")
    torch.from_dlpack(loan).copy_(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    assert numpy.from_dlpack(loan)[2, 3] == 11
    infos = prod.store_and_return_tensor_info(1, {"x": [loan]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)], views=True)  # copied
    cons.get_ready_tensors()
    got = torch.from_dlpack(cons.get_tensor(1, infos[0].uuid)).clone()
    assert torch.equal(got, torch.arange(12, dtype=torch.float32).reshape(3, 4))
    cons.dereference(infos[0].uuid)
    _deliver_acks(cons, prod)
    prod.cleanup_request(1)
    cons.cleanup_request(1)


def test_close_waits_for_exports_of_a_loan(make, shm_dir):
    prod = make("worker_0", "arena")
    loan = prod.loan_output(16, "uint8")
    t = torch.from_dlpack(loan)
    prod.close()
    assert prod.closed
    t.fill_(1)  # the memory is still there
    with pytest.raises(mstar_c.ClosedError):
        loan.__dlpack__()
    del t, loan
    gc.collect()  # the destroy ran: the shm fixture checks nothing is left
