"""CommunicationManager.send_outputs: a producer's handoff in one call (store, hold, stage, send,
clean up), through a Mesh and through a Python callable, with loans, and every way it can fail
leaving nothing behind: no tensor held, the caller's tensors given back, nothing sent."""
import sys
import time

import numpy as np
import pytest
import torch

import mstar_c


def _consume(cons, msg):
    """Read every tensor of an INPUT_SIGNALS: {signal: [torch tensors]}, the ACK sent."""
    cons.start_read_tensors(msg)
    got = {}
    for rid, edges in cons.get_ready_tensors().items():
        for e in edges:
            for info in e.tensor_info:
                got.setdefault(e.name, []).append(mstar_c.to_torch(cons.get_tensor(rid, info.uuid)).clone())
                cons.dereference(info.uuid)
        cons.cleanup_request(rid)
    return got


@pytest.fixture
def meshes(tmp_path):
    with mstar_c.Mesh("worker_0", transport="ipc", ipc_dir=str(tmp_path)) as m0, \
         mstar_c.Mesh("worker_1", transport="ipc", ipc_dir=str(tmp_path)) as m1:
        m0.send("worker_1", mstar_c.Message("HELLO"))
        m1.send("worker_0", mstar_c.Message("HELLO"))
        assert m1.recv(timeout_ms=5000).type == "HELLO" and m0.recv(timeout_ms=5000).type == "HELLO"
        yield m0, m1


@pytest.mark.parametrize("transport", ["arena", "files"])
def test_outputs_reach_the_peer_and_go_with_its_ack(meshes, make, transport):
    m0, m1 = meshes
    prod, cons = make("worker_0", transport, send=m0), make("worker_1", transport, send=m1)
    x = [torch.arange(12, dtype=torch.float32), torch.full((3, 4), 7, dtype=torch.int64)]
    y = torch.tensor([True, False, True])
    assert prod.send_outputs("worker_1", 5, {"x": x, "y": [y]}, "decoder", node_name="encoder") is None
    assert prod.num_tensors == 3  # held for the peer, the producer's side of request 5 ended

    msg = m1.recv(timeout_ms=5000)
    assert msg.type == "INPUT_SIGNALS" and msg.request_id == 5 and msg.sender == "worker_0"
    assert [(e.next_node, e.name, len(e.tensor_info)) for e in msg.edges] == \
        [("decoder", "x", 2), ("decoder", "y", 1)]
    assert {i.source_node_name for e in msg.edges for i in e.tensor_info} == {"encoder"}
    got = _consume(cons, msg)
    assert [torch.equal(a, b) for a, b in zip(got["x"], x)] == [True, True]
    assert torch.equal(got["y"][0], y)

    ack = m0.recv(timeout_ms=5000)
    assert ack.type == "TENSOR_RECEIVED"
    prod.handle_message(ack)
    assert prod.num_tensors == 0


@pytest.mark.parametrize("count", [4, 5, 9, 17])
def test_more_outputs_than_a_call_holds_inline(meshes, make, count):
    """A call keeps its first four outputs and descriptors in place and the rest on the heap
    (mstarpy_outputs): each count across those bounds reaches the peer whole, in order."""
    m0, m1 = meshes
    prod, cons = make("worker_0", "arena", send=m0), make("worker_1", "arena", send=m1)
    xs = [torch.full((i + 1,), i, dtype=torch.int32) for i in range(count)]
    prod.send_outputs("worker_1", 1, {"a": xs[: count // 2], "b": xs[count // 2:]}, "n")
    got = _consume(cons, m1.recv(timeout_ms=5000))
    assert [t.tolist() for t in got["a"] + got.get("b", [])] == [t.tolist() for t in xs]
    prod.handle_message(m0.recv(timeout_ms=5000))
    infos = prod.store_and_return_tensor_info(2, {"c": xs})["c"]
    assert [mstar_c.to_torch(prod.get_tensor(2, i.uuid)).tolist() for i in infos] == \
        [t.tolist() for t in xs]
    prod.cleanup_request(2)
    assert prod.num_tensors == 0


def test_the_tensors_are_held_until_the_ack(meshes, make):
    """The producer's tensor is held (not copied) until the ACK frees it: a NumPy array shows
    the hold as one reference on the array."""
    m0, m1 = meshes
    prod, cons = make("worker_0", "arena", send=m0), make("worker_1", "arena", send=m1)
    a = np.arange(64, dtype=np.float32)
    before = sys.getrefcount(a)
    prod.send_outputs("worker_1", 1, {"x": [a]}, "n")
    assert sys.getrefcount(a) == before + 1
    got = _consume(cons, m1.recv(timeout_ms=5000))
    assert torch.equal(got["x"][0], torch.from_numpy(a))
    prod.handle_message(m0.recv(timeout_ms=5000))
    assert prod.num_tensors == 0 and sys.getrefcount(a) == before


def test_a_callable_sender_gets_the_message_and_the_ledger_knows(make):
    """Through a callable, the message is the sender's to deliver; the ACK ledger learns of the
    send, so only the peer it went to settles it."""
    prod, cons = make("worker_0"), make("worker_1")
    prod.send_outputs("worker_1", 1, {"x": [torch.ones(4)]}, "n")
    (peer, msg), = prod.sent
    assert peer == "worker_1" and msg.type == "INPUT_SIGNALS" and msg.sender == "worker_0"
    uuid = msg.edges[0].tensor_info[0].uuid
    forged = mstar_c.Message("TENSOR_RECEIVED", request_id=1, counts={uuid: 1}, sender="worker_7")
    prod.handle_message(forged)
    assert prod.num_tensors == 1  # worker_7 was not sent it
    _consume(cons, msg)
    (_, ack), = cons.sent
    prod.handle_message(ack)
    assert prod.num_tensors == 0


def test_a_loan_is_sent_without_a_copy_and_is_stored(meshes, make):
    m0, m1 = meshes
    prod, cons = make("worker_0", "arena", send=m0), make("worker_1", "arena", send=m1)
    loan = prod.loan_output((256,), "uint8")
    torch.from_dlpack(loan).fill_(0x5A)
    prod.send_outputs("worker_1", 1, {"x": [loan]}, "n")
    with pytest.raises(mstar_c.Error):
        prod.store_and_return_tensor_info(2, {"x": [loan]})  # stored once, by send_outputs
    got = _consume(cons, m1.recv(timeout_ms=5000))
    assert torch.equal(got["x"][0], torch.full((256,), 0x5A, dtype=torch.uint8))
    prod.handle_message(m0.recv(timeout_ms=5000))
    assert prod.num_tensors == 0


def test_bad_arguments_store_nothing(make):
    """Nothing is stored, sent or held. A torch tensor's hold is on its storage, which no count
    shows; a NumPy array's (through __dlpack__) is one reference on the array."""
    prod = make("worker_0")
    t, a = torch.ones(4), np.ones(4, dtype=np.float32)
    before, before_a = sys.getrefcount(t), sys.getrefcount(a)
    with pytest.raises(mstar_c.InvalidArgumentError, match="no outputs"):
        prod.send_outputs("worker_1", 1, {}, "n")
    with pytest.raises(mstar_c.InvalidArgumentError, match='signal "y" has no tensors'):
        prod.send_outputs("worker_1", 1, {"x": [t, a], "y": []}, "n")
    with pytest.raises(mstar_c.InvalidArgumentError, match="peer and next_node"):
        prod.send_outputs(7, 1, {"x": [t]}, "n")
    with pytest.raises(mstar_c.InvalidArgumentError, match="peer"):
        prod.send_outputs("bad peer!", 1, {"x": [t]}, "n")
    with pytest.raises(mstar_c.InvalidArgumentError, match="next_node"):
        prod.send_outputs("worker_1", 1, {"x": [t]}, "x" * 256)
    with pytest.raises(mstar_c.InvalidArgumentError, match="peer"):
        prod.send_outputs("worker_1\0worker_2", 1, {"x": [t]}, "n")  # not read as "worker_1"
    with pytest.raises(mstar_c.InvalidArgumentError):
        prod.send_outputs("worker_1", 1, {"bad signal!": [t, a]}, "n")  # the store refuses it
    with pytest.raises(TypeError):
        prod.send_outputs("worker_1", 1, {"x": [t]})
    assert prod.num_tensors == 0 and prod.sent == [] and sys.getrefcount(t) == before
    assert sys.getrefcount(a) == before_a


def test_without_a_sender_nothing_is_stored(shm_dir):
    with mstar_c.CommunicationManager("worker_0", transport="files", shm_dir=shm_dir) as prod:
        t, a = torch.ones(4), np.ones(4, dtype=np.float32)  # a: its hold shows as a reference
        before, before_a = sys.getrefcount(t), sys.getrefcount(a)
        with pytest.raises(mstar_c.StateError, match="no sender"):
            prod.send_outputs("worker_1", 1, {"x": [t, a]}, "n")
        assert prod.num_tensors == 0 and sys.getrefcount(t) == before
        assert sys.getrefcount(a) == before_a


@pytest.mark.parametrize("fault", ["staging", "callback"])
def test_a_failed_send_drops_the_request(meshes, make, monkeypatch, fault):
    """A failure after the store (an arena too small to stage the tensor in, a sender that
    raises) drops what was stored and staged and raises that failure: nothing is held or
    sent, and the caller's tensor is its own again."""
    m0, m1 = meshes

    def raising(peer, msg):
        raise ConnectionError("the communicator is down")

    if fault == "staging":  # one 1 MiB segment, no spill, no wait for room
        for k, v in {"SEGMENT_MB": "1", "MAX_SEGMENTS": "1", "SPILL": "0",
                     "FULL_TIMEOUT_S": "0"}.items():
            monkeypatch.setenv("MSTAR_SHM_ARENA_" + k, v)
    prod = make("worker_0", "arena", send=raising if fault == "callback" else m0)
    t = torch.ones(1 << 19)  # 2 MiB
    a = np.ones(4, dtype=np.float32)  # through __dlpack__: its hold shows as a reference
    before, before_a = sys.getrefcount(t), sys.getrefcount(a)
    with pytest.raises(mstar_c.NoSpaceError if fault == "staging" else ConnectionError):
        prod.send_outputs("worker_1", 1, {"x": [t], "y": [a]}, "n")
    assert prod.num_tensors == 0 and sys.getrefcount(t) == before
    assert sys.getrefcount(a) == before_a
    stats = prod.arena_stats()
    assert stats["live_slots"] == 0 and stats["free_bytes"] == stats["total_bytes"]
    assert m1.recv(timeout_ms=0) is None
    # The manager goes on: a tensor that fits is sent.
    if fault == "staging":
        prod.send_outputs("worker_1", 1, {"x": [torch.ones(16)]}, "n")
        assert prod.num_tensors == 1 and m1.recv(timeout_ms=5000).type == "INPUT_SIGNALS"


def test_a_ring_that_stays_full_fails_the_handoff_after_its_patience(tmp_path, make, monkeypatch):
    """A consumer that never receives: the handoffs fill the ring to it, and the next one waits
    out the library's patience (5 s, mstar_comm_send_via_mesh) and raises TryAgainError with
    nothing of its own held or sent. The ones before it are held and reach the consumer once it
    drains its ring, in order."""
    monkeypatch.setenv("MSTAR_RING_BYTES", "65536")  # read when the ring is made: a small one
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as m0, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as m1:
        m0.send("worker_1", mstar_c.Message("HELLO"))
        m1.send("worker_0", mstar_c.Message("HELLO"))
        assert m1.recv(timeout_ms=5000).type == "HELLO" and m0.recv(timeout_ms=5000).type == "HELLO"
        prod = make("worker_0", "arena", send=m0)
        sent = 0
        with pytest.raises(mstar_c.TryAgainError, match="full"):
            while sent < 100000:
                prod.send_outputs("worker_1", sent + 1, {"x": [torch.ones(4)]}, "n")
                sent += 1
                waited = time.monotonic()  # from the last handoff that went through
        assert time.monotonic() - waited >= 4.9  # the patience ran out; no early give-up
        assert 0 < sent < 100000 and prod.num_tensors == sent  # the failed one holds nothing
        got = []
        while (msg := m1.recv(timeout_ms=0)) is not None:
            got.append(msg.request_id)
        assert got == list(range(1, sent + 1))
        prod.close()  # before its mesh
