"""Tensors in and out through DLPack: every dtype torch and NumPy share with mstar, zero copy on
both sides, and lifetimes (what a Python-held view does when the manager lets go)."""
import gc
import os
import sys

import numpy as np
import pytest
import torch

import mstar_c

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMPY_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32,
                np.float64, np.complex64, np.complex128]


def _torch_tensor(dtype):
    if dtype == torch.bool:
        return torch.rand(5, 7) > 0.5
    if dtype.is_floating_point:
        return torch.randn(5, 7).to(dtype)
    return torch.randint(0, 100, (5, 7)).to(dtype)


def _through(make, obj, transport="files", names=("worker_0", "worker_1")):
    """Producer stores obj, consumer (another manager) reads it: the consumer's view. A second
    pair in one test needs other names: one entity name is one live producer."""
    prod, cons = make(names[0], transport), make(names[1], transport)
    infos = prod.store_and_return_tensor_info(1, {"x": [obj]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)])
    ready = cons.get_ready_tensors()
    uuid = ready[1][0].tensor_info[0].uuid
    return cons, cons.get_tensor(1, uuid)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("transport", ["files", "arena"])
def test_torch_roundtrip_every_dtype(make, monkeypatch, dtype, transport):
    """Every dtype DLPack carries is read by the attributes (torch.c's table of torch's dtype
    objects, made from the library's names), not through Tensor.__dlpack__."""
    t = _torch_tensor(dtype)
    calls = []
    monkeypatch.setattr(torch.Tensor, "__dlpack__", lambda self, *a, **k: calls.append(1))
    _, view = _through(make, t, transport)
    assert calls == []
    assert view.dtype == str(dtype).replace("torch.", "")
    got = mstar_c.to_torch(view)
    assert got.dtype == dtype and torch.equal(got, t)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES + [np.bool_], ids=lambda d: d.__name__)
def test_numpy_roundtrip_every_dtype(make, dtype):
    a = (np.arange(35).reshape(5, 7) * 3).astype(dtype)
    _, view = _through(make, a)
    got = mstar_c.to_numpy(view)  # numpy.from_dlpack, with NumPy 1.24's missing bool bridged
    assert got.dtype == a.dtype and np.array_equal(got, a)
    if dtype != np.bool_:
        assert np.array_equal(np.from_dlpack(view), a)


def test_bool_is_shared_between_torch_and_numpy(make):
    t = torch.tensor([[True, False, True], [False, False, True]])
    _, view = _through(make, t, "arena")
    assert np.array_equal(mstar_c.to_numpy(view), t.numpy())
    a = np.array([True, True, False])
    _, view = _through(make, a)
    assert torch.equal(mstar_c.to_torch(view), torch.from_numpy(a))


def test_torch_in_numpy_out_and_back(make):
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    _, view = _through(make, t, "arena")
    a = np.from_dlpack(view)
    assert a.shape == (2, 3, 4) and np.array_equal(a, t.numpy())


def test_strided_and_scalar_tensors(make):
    t = torch.arange(48, dtype=torch.int64).reshape(6, 8).t()  # not contiguous: made so
    _, view = _through(make, t)
    assert torch.equal(torch.from_dlpack(view), t)
    s = torch.tensor(2.5, dtype=torch.float64)
    _, view = _through(make, s, names=("worker_2", "worker_3"))
    assert view.shape == () and torch.equal(torch.from_dlpack(view), s)


def test_bytes_go_in_as_uint8(make):
    _, view = _through(make, bytearray(b"hello mstar"))
    assert bytes(np.from_dlpack(view)) == b"hello mstar"


def test_zero_copy_consumer_reads_manager_memory_in_place(make):
    cons, view = _through(make, torch.arange(1024, dtype=torch.int32), "arena")
    t = torch.from_dlpack(view)
    assert t.data_ptr() == view.data_ptr  # torch reads the manager's memory, no copy
    a = np.from_dlpack(view)
    assert a.ctypes.data == view.data_ptr
    t[0] = 77  # the same bytes
    assert a[0] == 77
    assert torch.from_dlpack(cons.get_tensor(1, view.uuid))[0] == 77


def test_zero_copy_producer_storage_is_not_copied_at_store(make):
    mgr = make("worker_0", "local")
    t = torch.arange(4096, dtype=torch.float32)
    infos = mgr.store_and_return_tensor_info(1, {"x": [t]})["x"]
    mgr.increment_ref(infos[0].uuid)
    view = mgr.get_tensor(1, infos[0].uuid)
    assert view.data_ptr == t.data_ptr()  # the manager holds the producer's storage itself
    t[5] = -1.0  # and sees later writes to it
    assert torch.from_dlpack(view)[5] == -1.0


class _SpyTensor(torch.Tensor):
    """A torch subclass: the store takes its __dlpack__, as torch's own code may differ."""


def test_plain_torch_tensors_skip_the_python_export(make, monkeypatch):
    """A plain torch.Tensor is taken by its attributes, without Tensor.__dlpack__ (Python code
    that cost 2.4 us a call with torch 2.11) or torch's exporter; a subclass, a tensor that
    needs grad, one with the negative bit and a conjugate view take __dlpack__, so what torch
    refuses stays refused by torch."""
    calls = []
    real = torch.Tensor.__dlpack__

    def spy(self, *args, **kw):
        calls.append(type(self).__name__)
        return real(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", spy)
    mgr = make("worker_0", "local")
    t = torch.arange(64, dtype=torch.int32)
    infos = mgr.store_and_return_tensor_info(1, {"x": [t]})["x"]
    assert calls == []
    mgr.increment_ref(infos[0].uuid)
    view = mgr.get_tensor(1, infos[0].uuid)
    assert view.data_ptr == t.data_ptr() and torch.equal(torch.from_dlpack(view), t)
    del view

    sub = torch.arange(8, dtype=torch.float32).as_subclass(_SpyTensor)
    mgr.store_and_return_tensor_info(2, {"x": [sub]})
    assert calls and set(calls) == {"_SpyTensor"}  # (torch's dispatch may call it twice)

    calls.clear()
    grad = torch.ones(4, requires_grad=True)
    before = mgr.num_tensors
    with pytest.raises((RuntimeError, BufferError), match="gradient"):
        mgr.store_and_return_tensor_info(3, {"x": [grad]})
    assert calls == ["Tensor"] and mgr.num_tensors == before

    calls.clear()
    neg = torch.ones(4)._neg_view()
    try:
        mgr.store_and_return_tensor_info(4, {"x": [neg]})
    except (RuntimeError, BufferError):
        pass  # a torch that refuses the negative bit; this one's refusal is its own
    assert calls == ["Tensor"]

    calls.clear()
    conj = torch.ones(4, dtype=torch.complex64).conj()
    try:
        mgr.store_and_return_tensor_info(5, {"x": [conj]})
    except (RuntimeError, BufferError):
        pass
    assert calls == ["Tensor"]


def test_producer_kept_alive_until_the_manager_lets_go(make):
    mgr = make("worker_0", "local")
    a = np.arange(100, dtype=np.float64)
    before = sys.getrefcount(a)
    infos = mgr.store_and_return_tensor_info(1, {"x": [a]})["x"]
    assert sys.getrefcount(a) == before + 1  # the DLPack export holds the array
    mgr.increment_ref(infos[0].uuid)
    mgr.dereference(infos[0].uuid)  # the last reference: freed, the deleter ran
    assert mgr.num_tensors == 0
    assert sys.getrefcount(a) == before


def test_failed_store_leaves_the_tensor_to_the_caller(make):
    mgr = make("worker_0", "local")
    a = np.arange(10, dtype=np.float32)
    before = sys.getrefcount(a)
    with pytest.raises(mstar_c.InvalidArgumentError):
        mgr.store_and_return_tensor_info(1, {"bad signal name!": [a]})
    assert sys.getrefcount(a) == before and mgr.num_tensors == 0
    with pytest.raises(mstar_c.InvalidArgumentError, match="__dlpack__|tensor"):
        mgr.store_and_return_tensor_info(1, {"x": [object()]})


def test_view_outlives_cleanup_request(make):
    cons, view = _through(make, torch.arange(64, dtype=torch.int16))
    t = torch.from_dlpack(view)
    cons.dereference(view.uuid)  # the node's usage reference
    cons.cleanup_request(1)
    del view  # the torch tensor still holds the view through its DLPack capsule
    gc.collect()
    assert torch.equal(t, torch.arange(64, dtype=torch.int16))
    assert cons.num_tensors == 1
    del t
    gc.collect()
    assert cons.num_tensors == 0


def test_force_cleanup_refused_while_views_live(make):
    cons, view = _through(make, torch.ones(8))
    with pytest.raises(mstar_c.StateError, match="view"):
        cons.force_cleanup_request(1)
    del view
    cons.force_cleanup_request(1)
    assert cons.num_tensors == 0


def test_close_with_live_view_defers_until_the_view_goes(make, shm_dir):
    cons, view = _through(make, torch.full((16,), 3.0), "arena")
    t = torch.from_dlpack(view)
    cons.close()
    assert cons.closed
    with pytest.raises(mstar_c.ClosedError):
        cons.get_tensor(1, view.uuid)
    assert torch.equal(t, torch.full((16,), 3.0))  # still valid: the destroy waits
    del view, t
    gc.collect()
    assert cons.live_views == 0
    assert not any("worker_1" in f for f in os.listdir(shm_dir))


def test_released_view_refuses_export(make):
    _, view = _through(make, torch.ones(3))
    view.release()
    with pytest.raises(mstar_c.ClosedError):
        view.__dlpack__()


cuda = pytest.mark.skipif(not (torch.cuda.is_available() and mstar_c.built_with_cuda()),
                          reason="needs a GPU and libmstar built with CUDA")


@cuda
@pytest.mark.parametrize("transport", ["files", "arena"])
def test_cuda_tensors_in_and_out(shm_dir, transport):
    sent = []
    with mstar_c.CommunicationManager("worker_0", transport=transport, shm_dir=shm_dir,
                                    device="cuda:0") as prod, \
         mstar_c.CommunicationManager("worker_1", transport=transport, shm_dir=shm_dir,
                                    device="cuda:0",
                                    send=lambda p, m: sent.append(m)) as cons:
        t = torch.randn(256, 512, device="cuda:0", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        infos = prod.store_and_return_tensor_info(1, {"x": [t]})["x"]
        prod.increment_ref(infos[0].uuid)
        prod.register_for_send(1, infos)
        for f in cons.start_read_tensors(1, [mstar_c.GraphEdge("n", "x", infos)]):
            f.result(timeout=30)
        ready = cons.get_ready_tensors()
        view = cons.get_tensor(1, ready[1][0].tensor_info[0].uuid)
        assert view.__dlpack_device__() == (2, 0)
        got = torch.from_dlpack(view)
        assert got.is_cuda and got.data_ptr() == view.data_ptr
        assert torch.equal(got, t)
        del got, view
        prod.handle_message(sent[0])
        assert prod.num_tensors == 0


def test_plain_torch_tensor_storage_held_until_the_manager_lets_go(make):
    """A plain tensor is taken by its attributes, and the manager holds its storage (as a
    DLPack capsule's view did), not the tensor object: pointing the tensor at other memory
    (set_, as `.data =` does) or dropping it leaves what was stored readable. 64 MiB: glibc
    maps a block that large and unmaps it when freed, so a read of freed memory would fault."""
    mgr = make("worker_0", "local")
    t = torch.full((16 << 20,), 3.0)
    before = sys.getrefcount(t)
    infos = mgr.store_and_return_tensor_info(1, {"x": [t]})["x"]
    assert sys.getrefcount(t) == before  # the object itself is not held
    assert infos[0].dims == (16 << 20,) and infos[0].dtype == "float32"
    mgr.increment_ref(infos[0].uuid)
    t.set_(torch.zeros(4))
    del t
    gc.collect()
    view = mgr.get_tensor(1, infos[0].uuid)  # local: the producer's own memory
    got = torch.from_dlpack(view)
    assert got.shape == (16 << 20,) and bool((got[:: 1 << 16] == 3.0).all())
    del got, view
    mgr.dereference(infos[0].uuid)  # the last reference: freed, the storage dropped
    assert mgr.num_tensors == 0


@pytest.mark.parametrize("case", ["bool", "scalar", "empty", "strided", "offset", "float16"])
def test_plain_torch_tensor_shapes_by_attributes(make, monkeypatch, case):
    """What the attributes carry is what a capsule carried: a bool tensor (which torch 1.13's
    exporter refuses), a 0-d one, an empty one, a strided view and one that starts inside its
    storage all go through without __dlpack__, and read back equal."""
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    t = {"bool": base > 20, "scalar": torch.tensor(3.5), "empty": torch.empty(0, 4),
         "strided": base[:, ::3], "offset": base[2:, 1:], "float16": base.half()}[case]
    calls = []
    monkeypatch.setattr(torch.Tensor, "__dlpack__", lambda self, *a, **k: calls.append(1))
    cons, view = _through(make, t, "arena")
    assert calls == []
    got = mstar_c.to_torch(view)
    assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)


def test_tensor_on_another_device_takes_the_method(make, monkeypatch):
    """A device the attributes do not describe (torch's meta device here) goes to
    Tensor.__dlpack__, and what it says is what the store raises; nothing is held."""
    calls = []

    def spy(self, *args, **kw):
        calls.append(1)
        raise BufferError("no DLPack for this device")

    monkeypatch.setattr(torch.Tensor, "__dlpack__", spy)
    mgr = make("worker_0", "local")
    with pytest.raises(BufferError, match="no DLPack"):
        mgr.store_and_return_tensor_info(1, {"x": [torch.empty(4, device="meta")]})
    assert calls == [1] and mgr.num_tensors == 0
