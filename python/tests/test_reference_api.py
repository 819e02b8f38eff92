"""The reference's transport API under its own names and signatures (issue 28), beside the
package's: the factory's parameters, get_tensor(uuid) giving a torch tensor, cleanup_request's
force, the *_batch_uniform names, skip_cuda_sync and cpu_tensors."""
import gc
import enum

import pytest
import torch

import mstar_c


class Recorder:
    def __init__(self):
        self.sent = []

    def send(self, peer, msg):
        self.sent.append((peer, msg))


class CommProtocol(enum.Enum):  # as the reference spells its protocols
    SHM = "shm"


def test_factory_takes_the_references_parameters(shm_dir):
    comm = Recorder()
    mgr = mstar_c.create_tensor_communication_manager(
        CommProtocol.SHM, "worker_0", "localhost", "cpu", comm, metadata_server="P2PHANDSHAKE",
        tcp_transfer_device="", shm_dir=shm_dir, enable_prof=False)
    try:
        assert mgr.entity == "worker_0"
        infos = mgr.store_and_return_tensor_info(1, {"x": [torch.ones(4)]})["x"]
        mgr.increment_ref(infos[0].uuid)
        mgr.register_for_send(1, infos)
        mgr.cleanup_request(1, force=True)
        assert mgr.num_tensors == 0
    finally:
        mgr.close()
    for bad in ({"metadata_server": "http://meta:8080"}, {"tcp_transfer_device": "eth0"}):
        with pytest.raises(mstar_c.NotSupportedError):
            mstar_c.create_tensor_communication_manager("shm", "worker_0", "localhost", None,
                                                        comm, shm_dir=shm_dir, **bad)


def test_store_and_send_take_skip_cuda_sync_and_cpu_tensors(make):
    mgr = make("worker_0")
    x = torch.arange(6.0)
    infos = mgr.store_and_return_tensor_info(1, {"x": [x]}, None, None, True, {"x": [x]})["x"]
    mgr.register_for_send(1, tensor_infos=infos, skip_cuda_sync=True)
    so = mgr.store_and_return_tensor_info_batch([2], [{"y": [x]}], ["y"], None, None, True, None)
    assert so.num_tensors == [1]
    with pytest.raises(mstar_c.InvalidArgumentError, match="cpu_tensors"):
        mgr.store_and_return_tensor_info(3, {"x": [x]}, cpu_tensors=[x])
    mgr.force_cleanup_request(1)
    mgr.force_cleanup_request(2)
    assert mgr.num_tensors == 0


def test_uniform_batch_names(make):
    mgr = make("worker_0")
    infos = mgr.store_and_return_tensor_info(1, {"x": [torch.ones(2), torch.ones(3)]})["x"]
    uuids = [i.uuid for i in infos]
    mgr.increment_ref_batch_uniform(uuids, n=2)
    mgr.dereference_batch_uniform(uuids, n=1)
    assert mgr.num_tensors == 2
    mgr.dereference_batch_uniform(uuids)
    assert mgr.num_tensors == 0


def test_get_tensor_by_uuid_gives_a_torch_view(make):
    """get_tensor(uuid): a torch.Tensor over the manager's memory (no copy) that holds the
    tensor's reference while it lives, as get_tensor(rid, uuid)'s view does."""
    prod, cons = make("worker_0"), make("worker_1")
    src = torch.arange(64, dtype=torch.float32)
    infos = prod.store_and_return_tensor_info(1, {"x": [src]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)])
    cons.get_ready_tensors()
    uuid = infos[0].uuid
    t = cons.get_tensor(uuid)
    assert type(t) is torch.Tensor and torch.equal(t, src)
    assert t.data_ptr() == cons.get_tensor(1, uuid).data_ptr  # the same memory
    cons.dereference(uuid)  # the delivery's reference: t still holds one
    assert cons.num_tensors == 1 and cons.live_views == 1
    with pytest.raises(mstar_c.StateError):
        cons.force_cleanup_request(1)
    assert torch.equal(t, src)
    del t
    gc.collect()
    assert cons.num_tensors == 0 and cons.live_views == 0
    cons.cleanup_request(1)
    for _, m in cons.sent:
        prod.handle_message(m)
    assert prod.num_tensors == 0


def test_reference_names_are_reachable():
    for name in ("increment_ref_batch_uniform", "dereference_batch_uniform", "cleanup_request",
                 "store_and_return_tensor_info_batch", "stamps_shm_placement"):
        assert hasattr(mstar_c.CommunicationManager, name)
    assert mstar_c.StoredOutputs._fields == ("flat_uuids", "flat_rids", "signal_idxs",
                                            "num_tensors")


def test_errors_belong_to_mstar_c():
    """Nothing of the package answers to `mstar`, the reference's own package: an error pickles
    and unpickles through mstar_c."""
    import pickle

    assert mstar_c.NotFoundError.__module__ == "mstar_c"
    e = pickle.loads(pickle.dumps(mstar_c.NotFoundError("gone")))
    assert type(e) is mstar_c.NotFoundError and str(e) == "gone"


def test_req_tx_info_and_req_rx_info(make):
    """The reference's profiling dicts by request id, read from the library when indexed."""
    prod, cons = make("worker_0", enable_prof=True), make("worker_1", enable_prof=True)
    infos = prod.store_and_return_tensor_info(1, {"x": [torch.ones(256)]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)])
    cons.get_ready_tensors()
    tx, rx = prod.req_tx_info[1], cons.req_rx_info[1]
    assert tx == {i.edge_name: i for i in prod.get_tx_info(1)}
    assert rx == {(i.source_entity, i.edge_name): i for i in cons.get_rx_info(1)}
    assert rx and all(i.num_bytes > 0 for i in rx.values())
    assert 1 in cons.req_rx_info and 2 not in cons.req_rx_info
    assert cons.req_rx_info.get(2) is None
    with pytest.raises(TypeError):
        iter(cons.req_rx_info)
    cons.dereference(infos[0].uuid)
    cons.cleanup_request(1)
    prod.force_cleanup_request(1)
