"""What a Python user expects of the package: exceptions per status with the library's
message, the control mesh as Python objects, the GIL released while waiting, a busy manager
refusing a second caller, closing by `with`, close() and garbage collection alike."""
import copy
import dataclasses
import gc
import os
import pickle
import pydoc
import threading

import pytest
import torch

import mstar_c
from mstar_c import _mstar


def test_errors_are_classes_per_status_with_the_library_message(make):
    mgr = make("worker_0")
    with pytest.raises(mstar_c.NotFoundError) as e:
        mgr.get_tensor(1, 12345)
    assert isinstance(e.value, mstar_c.Error) and isinstance(e.value, LookupError)
    assert e.value.status == -4 and e.value.status_name == "MSTAR_ENOENT"
    assert "0x0000000000003039" in str(e.value)  # the library's text names the uuid
    with pytest.raises(mstar_c.InvalidArgumentError, match="transport"):
        mstar_c.CommunicationManager("worker_9", transport="pigeon")
    with pytest.raises(mstar_c.InvalidArgumentError):
        mgr.increment_ref(1, -3)
    assert mstar_c.error_class(-13) is mstar_c.ClosedError
    assert {c.status for c in mstar_c._errors.BY_STATUS.values()} == set(range(-16, 0))


def test_bad_descriptors_raise_before_the_library(make):
    mgr = make("worker_0")
    bad = mstar_c.TensorPointerInfo(dims=(2,), stride=(1,), dtype="float32", nbytes=7, uuid=1,
                                  source_entity="worker_1")
    with pytest.raises(mstar_c.ProtocolError, match="nbytes"):
        mgr.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", [bad])])
    bad.nbytes, bad.dtype = 8, "complex32"
    with pytest.raises(mstar_c.InvalidArgumentError):
        mgr.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", [bad])])
    with pytest.raises(mstar_c.InvalidArgumentError, match="request id"):
        mgr.cleanup_request(3.5)


def test_mesh_messages_roundtrip(tmp_path):
    with mstar_c.Mesh("worker_0", transport="ipc", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", transport="ipc", ipc_dir=str(tmp_path)) as b:
        info = mstar_c.TensorPointerInfo(dims=(2, 3), stride=(3, 1), dtype="bfloat16", nbytes=12,
                                       uuid=7, source_entity="worker_0", shm_segment=None)
        msg = mstar_c.Message("INPUT_SIGNALS", request_id="req-1", graph_walk="decode",
                            edges=[mstar_c.GraphEdge("LLM", "x", [info], shard_dim=1,
                                                   total_fanin=2)],
                            names=["done"], kv={"seed": 42})
        a.send("worker_1", msg)
        got = b.recv(timeout_ms=5000)
        assert got.type == "INPUT_SIGNALS" and got.sender == "worker_0"
        assert got.request_id == "req-1" and got.graph_walk == "decode"
        assert got.edges[0].tensor_info[0] == info
        assert got.edges[0].shard_dim == 1 and got.edges[0].total_fanin == 2
        assert got.names == ["done"] and got.kv == {"seed": 42}
        assert got.text == "default"  # INPUT_SIGNALS' partition default
        b.send("worker_0", mstar_c.Message("TENSOR_RECEIVED", request_id=5, counts={7: 2},
                                         uuids=[9]))
        ack = a.recv(timeout_ms=5000)
        assert ack.successful_tensors == {7: 2} and ack.failed_tensor_ids == [9]
        assert a.recv(timeout_ms=0) is None
    assert not os.listdir(tmp_path)  # the ipc files are gone with the meshes


def test_manager_acks_through_a_mesh(make, tmp_path):
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as pm, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as cm:
        prod, cons = make("worker_0", send=pm), make("worker_1", send=cm)
        infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
        prod.increment_ref(infos[0].uuid)
        prod.register_for_send(1, infos)
        cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)])
        cons.get_ready_tensors()
        ack = pm.recv(timeout_ms=5000)
        assert ack.type == "TENSOR_RECEIVED" and ack.sender == "worker_1"
        built = _mstar._message_built(ack)
        prod.handle_message(ack)
        assert _mstar._message_built(ack) == built  # handled from the struct
        assert prod.num_tensors == 0
        prod.close()
        cons.close()


def _forged_ack(sender, uuid):
    return mstar_c.Message("TENSOR_RECEIVED", request_id=1, counts={uuid: 1}, sender=sender)


def test_ack_ledger_through_a_mesh(make, tmp_path):
    """Descriptors sent through the producer's Mesh arm its ACK ledger: only the consumer's ACK,
    whose sender survives recv and handle_message, frees the tensor."""
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as pm, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as cm:
        prod, cons = make("worker_0", send=pm), make("worker_1", send=cm)
        infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
        prod.increment_ref(infos[0].uuid)
        prod.register_for_send(1, infos)
        pm.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=1,
                                          edges=[mstar_c.GraphEdge("n", "x", infos)]))
        msg = cm.recv(timeout_ms=5000)
        prod.handle_message(_forged_ack("worker_7", infos[0].uuid))
        assert prod.num_tensors == 1  # worker_7 was not sent it
        cons.start_read_tensors(1, msg.edges)
        cons.get_ready_tensors()
        ack = pm.recv(timeout_ms=5000)
        assert ack.sender == "worker_1"
        built = _mstar._message_built(ack)
        prod.handle_message(ack)
        assert _mstar._message_built(ack) == built  # handled from the struct
        assert prod.num_tensors == 0
        prod.close()
        cons.close()


def test_ack_ledger_through_callables(make):
    """A consumer's ACK through a Python callable names the consumer as its sender, and a
    producer that sent descriptors by its own means notes the send (note_sent)."""
    prod = make("worker_0")
    cons = make("worker_1")
    infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    sent = mstar_c.Message("INPUT_SIGNALS", request_id=1, edges=[mstar_c.GraphEdge("n", "x", infos)])
    prod.note_sent("worker_1", sent)
    prod.handle_message(_forged_ack("worker_7", infos[0].uuid))
    assert prod.num_tensors == 1
    cons.start_read_tensors(1, sent.edges)
    cons.get_ready_tensors()
    (peer, ack), = cons.sent
    assert peer == "worker_0" and ack.sender == "worker_1"
    prod.handle_message(ack)
    assert prod.num_tensors == 0


def test_gil_released_while_waiting(tmp_path):
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as m:
        counter = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                counter[0] += 1

        th = threading.Thread(target=spin)
        th.start()
        assert m.recv(timeout_ms=300) is None  # waits with the GIL released
        stop.set()
        th.join()
        # The spinning thread ran while recv waited: with the GIL held it could not have
        # (the switch interval is 5 ms; 300 ms of waiting gives it tens of slices).
        assert counter[0] > 1000


def test_send_callback_errors_and_reentry(make):
    prod = make("worker_0")
    seen = []

    def send(peer, msg):
        seen.append(msg)
        if len(seen) == 1:
            cons.dereference(1)  # calling back into the busy manager

    cons = make("worker_1", send=send)
    infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)])
    with pytest.raises(mstar_c.StateError, match="in use") as exc:
        cons.get_ready_tensors()  # the callback's exception comes out of the call that sent
    assert len(seen) == 1 and seen[0].type == "TENSOR_RECEIVED"
    assert list(exc.value.ready) == [1]  # what was read is not lost with the failed ACK
    assert cons.num_tensors >= 0  # the manager is usable again
    cons.dereference(infos[0].uuid)
    cons.cleanup_request(1)  # sends the ACK still queued, this time without a raise
    assert len(seen) == 2 and seen[1].sender == "worker_1"
    assert cons.get_ready_tensors() == {}


def test_gc_and_context_manager_leave_nothing(shm_dir):
    def produce(entity):
        m = mstar_c.CommunicationManager(entity, transport="arena", shm_dir=shm_dir)
        infos = m.store_and_return_tensor_info(1, {"x": [torch.ones(1000)]})["x"]
        m.increment_ref(infos[0].uuid)
        m.register_for_send(1, infos)
        return m

    m = produce("worker_0")
    assert os.listdir(shm_dir)
    del m
    gc.collect()
    assert os.listdir(shm_dir) == []  # garbage collection destroyed it
    with produce("worker_1") as m:
        assert os.listdir(shm_dir)
    assert os.listdir(shm_dir) == [] and m.closed
    m.close()  # idempotent
    with pytest.raises(mstar_c.ClosedError):
        m.num_tensors


def test_help_and_stubs():
    text = pydoc.render_doc(mstar_c, renderer=pydoc.plaintext)
    for name in ("CommunicationManager", "store_and_return_tensor_info", "get_ready_tensors",
                 "Mesh", "Tensor", "Error"):
        assert name in text
    here = os.path.dirname(mstar_c.__file__)
    assert os.path.exists(os.path.join(here, "__init__.pyi"))
    assert os.path.exists(os.path.join(here, "py.typed"))
    assert mstar_c._mstar.__file__.endswith(".abi3.so")


def test_batch_store_and_profiling(make):
    mgr = make("worker_0", enable_prof=True)
    so = mgr.store_and_return_tensor_info_batch(
        [1, 2], [{"a": [torch.ones(2)], "b": [torch.ones(3), torch.ones(4)]}, {"a": [torch.ones(5)]}],
        ["a", "b"])
    assert len(so.flat_uuids) == 4
    assert so.flat_rids == [0, 0, 0, 1]
    assert so.signal_idxs == [0, 1, 1, 0]
    assert so.num_tensors == [1, 2, 1, 0]  # per (request, signal), request-major
    assert isinstance(so, tuple) and so._fields == (
        "flat_uuids", "flat_rids", "signal_idxs", "num_tensors")  # the reference's named tuple
    mgr.register_for_send_uuids([1, 2], [3, 1], so.flat_uuids)
    assert mgr.get_tx_info(1) == [] or all(t.count >= 0 for t in mgr.get_tx_info(1))
    assert isinstance(mgr.get_rx_info(1), list)
    mgr.set_persist(so.flat_uuids[0])
    mgr.cleanup_request(1)
    assert mgr.num_tensors == 2  # the persisted one and request 2's
    mgr.handle_message(mstar_c.Message("UNPERSIST_TENSORS", request_id=1,
                                     counts={so.flat_uuids[0]: 0}))
    assert mgr.num_tensors == 1


def test_fanout_and_refresh(make):
    info = mstar_c.TensorPointerInfo(dims=(4, 6), stride=(6, 1), dtype="float32", nbytes=96,
                                   uuid=1, source_entity="w0")
    out = mstar_c.fanout(mstar_c.GraphEdge("B", "x", [info]), 0, src_workers=["w0"], src_rank=0,
                       dst_workers=["w1", "w2"])
    assert [w for w, _ in out] == ["w1", "w2"]
    assert [e.tensor_info[0].dims for _, e in out] == [(2, 6), (2, 6)]
    assert [e.tensor_info[0].offset for _, e in out] == [0, 48]


def test_cycle_through_the_send_callback_is_collected(shm_dir):
    m = mstar_c.CommunicationManager("worker_0", transport="arena", shm_dir=shm_dir,
                                   send=lambda peer, msg: m.handle_message(msg))
    infos = m.store_and_return_tensor_info(1, {"x": [torch.ones(64)]})["x"]
    m.increment_ref(infos[0].uuid)
    m.register_for_send(1, infos)
    assert os.listdir(shm_dir)
    del m  # manager -> callback -> closure cell -> manager: only the cycle collector frees it
    gc.collect()
    assert os.listdir(shm_dir) == []


@pytest.mark.skipif(mstar_c.built_with_cuda(), reason="libmstar has CUDA: the GPU tests cover it")
def test_cuda_device_without_cuda_is_not_supported(shm_dir):
    with pytest.raises(mstar_c.NotSupportedError):
        mstar_c.CommunicationManager("worker_0", transport="arena", shm_dir=shm_dir, device="cuda:0")
    with pytest.raises(mstar_c.InvalidArgumentError, match="device"):
        mstar_c.CommunicationManager("worker_0", shm_dir=shm_dir, device="tpu")
    with mstar_c.CommunicationManager("worker_0", shm_dir=shm_dir, device="cpu") as m:
        assert m.num_tensors == 0


def test_mesh_close_refused_while_a_manager_sends_through_it(make, tmp_path):
    mesh = mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path))
    mgr = make("worker_0", send=mesh)
    with pytest.raises(mstar_c.StateError, match="close them first"):
        mesh.close()
    assert not mesh.closed
    mgr.close()
    mesh.close()
    assert mesh.closed


def test_outputs_may_be_any_iterable(make):
    mgr = make("worker_0", "local")
    infos = mgr.store_and_return_tensor_info(1, {"x": (torch.ones(2) for _ in range(3))})
    assert len(infos["x"]) == 3


def _complete(obj):
    """Every dataclass field is set on the object and nothing else is: in its own __dict__, or,
    for a descriptor (its fields live in the extension's struct, no __dict__), readable."""
    names = [f.name for f in dataclasses.fields(obj)]
    if hasattr(obj, "__dict__"):
        return set(vars(obj)) == set(names)
    return all(_field_of(obj, n) for n in names)


def _field_of(obj, name):
    try:
        getattr(obj, name)
    except AttributeError:
        return False
    return True


def test_objects_made_in_c_are_whole_dataclasses(make, tmp_path):
    """Messages, edges and descriptors built by the extension (without running __init__) carry
    every field (a received message once read), compare, copy and replace as ones built in
    Python do, and own their lists; a
    descriptor of a subclass (whose fields may be properties) is still stamped by attribute."""
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as b:
        prod = make("worker_0", transport="arena")
        infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
        assert type(infos[0]) is mstar_c.TensorPointerInfo and _complete(infos[0])

        class Stamped(mstar_c.TensorPointerInfo):
            seen = []

            @property
            def shm_segment(self):
                return self.__dict__.get("_seg")

            @shm_segment.setter
            def shm_segment(self, v):
                Stamped.seen.append(v)
                self.__dict__["_seg"] = v

        mine = Stamped(**dataclasses.asdict(infos[0]))
        prod.register_for_send(1, [mine])
        assert Stamped.seen[-1] is not None and mine.shm_segment == Stamped.seen[-1]
        assert mine.uuid == infos[0].uuid
        msg = mstar_c.Message("INPUT_SIGNALS", request_id=1,
                            edges=[mstar_c.GraphEdge("n", "x", [infos[0]])])
        for _ in range(2):
            a.send("worker_1", msg)
        one, two = b.recv(timeout_ms=5000), b.recv(timeout_ms=5000)
        for got in (one, two):
            # Received: a Message keeping the library's struct, whose fields are built on first
            # read, after which it is whole like any other.
            assert type(got) is mstar_c.Message and mstar_c.ReceivedMessage is mstar_c.Message
            assert _mstar._message_has_struct(got)
            assert _complete(got.edges[0]) and _complete(got.edges[0].tensor_info[0])
            assert _complete(got)
        assert one == two and copy.deepcopy(one) == one
        assert dataclasses.replace(one, text="t").edges == one.edges
        one.edges.append(None)
        one.counts[1] = 1
        assert len(two.edges) == 1 and two.counts == {}
        assert repr(two).startswith("Message(type='INPUT_SIGNALS'")
        prod.cleanup_request(1)


def test_received_message_goes_back_to_c_unconverted(make, tmp_path):
    """A received INPUT_SIGNALS is read, and its TENSOR_RECEIVED handled, from the library's
    struct: no field but the one read (type) is built on the way. A scalar field (request_id)
    and a list (edges) written in Python both win over the struct's."""
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as b:
        prod = make("worker_0", "arena", send=a)
        cons = make("worker_1", "arena", send=b)
        src = torch.arange(10, dtype=torch.float32)
        infos = prod.store_and_return_tensor_info(1, {"x": [src]})["x"]
        prod.increment_ref(infos[0].uuid)
        prod.register_for_send(1, infos)
        a.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=1,
                                         edges=[mstar_c.GraphEdge("n", "x", infos)]))
        msg = b.recv(timeout_ms=5000)
        assert msg.type == "INPUT_SIGNALS" and _mstar._message_has_struct(msg)
        cons.start_read_tensors(msg)
        assert _mstar._message_built(msg) == ["type"]  # the edges were read from the struct
        ready = cons.get_ready_tensors()
        assert torch.equal(torch.from_dlpack(cons.get_tensor(1, infos[0].uuid)), src)
        assert list(ready) == [1]
        cons.dereference(infos[0].uuid)
        ack = a.recv(timeout_ms=5000)
        assert ack.type == "TENSOR_RECEIVED" and _mstar._message_has_struct(ack)
        prod.handle_message(ack)
        assert _mstar._message_built(ack) == ["type"]  # handled from the struct
        assert prod.num_tensors == 0
        twin = pickle.loads(pickle.dumps(ack))
        assert type(twin) is mstar_c.Message and twin == ack and copy.deepcopy(ack) == ack
        # Forwarded as it came, from the struct, then changed in Python before a read.
        infos = prod.store_and_return_tensor_info(2, {"x": [src]})["x"]
        prod.register_for_send(2, infos)
        a.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=2,
                                         edges=[mstar_c.GraphEdge("n", "x", infos)]))
        first = b.recv(timeout_ms=5000)
        b.send("worker_1", first)  # to itself: forwarding needs no decode
        assert _mstar._message_built(first) == []
        again = b.recv(timeout_ms=5000)
        assert _mstar._message_has_struct(again) and again.sender == "worker_1"
        assert again.edges == first.edges
        first.request_id = 3  # a scalar field: the Python value wins over the struct's
        first.edges = []  # an array field: likewise, the other fields stay the struct's
        assert _mstar._message_has_struct(first) and first.text == "default"
        cons.start_read_tensors(first)
        assert cons.get_ready_tensors() == {}
        with pytest.raises(mstar_c.InvalidArgumentError):
            cons.start_read_tensors(2)  # neither edges nor a message
        prod.force_cleanup_request(2)
        prod.close()
        cons.close()
