"""TensorPointerInfo: a dataclass to its users whose fields live in the library's descriptor
struct (the extension's _InfoBase). Descriptors made by a store carry only the struct until a
field is read; a field written in Python is kept as written and checked when the descriptor is
used; copies, pickles and dataclass helpers behave as for any dataclass; nothing leaks."""
import copy
import dataclasses
import gc
import inspect
import pickle
import weakref

import pytest
import torch

import mstar_c
from mstar_c import TensorPointerInfo


def _user_made():
    return TensorPointerInfo((2, 3), "float32", (3, 1), 24, source_entity="worker_0",
                             source_node_name="n", remote_key=b"k")


def _store_made(mgr, rid=1):
    return mgr.store_and_return_tensor_info(rid, {"x": [torch.ones(2, 3)]})["x"][0]


def _values(info):
    return tuple(getattr(info, f.name) for f in dataclasses.fields(TensorPointerInfo))


def test_fields_defaults_and_init_are_the_dataclass_ones():
    names = [f.name for f in dataclasses.fields(TensorPointerInfo)]
    assert names[:3] == ["dims", "dtype", "stride"] and len(names) == 16
    blank = TensorPointerInfo()
    assert _values(blank) == tuple(f.default for f in dataclasses.fields(TensorPointerInfo))
    by_pos = TensorPointerInfo(*_values(_user_made()))
    assert by_pos == _user_made() and by_pos.remote_key == b"k"
    assert TensorPointerInfo(uuid=7).uuid == 7 and TensorPointerInfo(uuid=7).dims == ()
    with pytest.raises(TypeError):
        TensorPointerInfo(*range(17))
    with pytest.raises(TypeError):
        TensorPointerInfo(colour="red")
    assert not hasattr(_user_made(), "__dict__")
    assert repr(blank).startswith("TensorPointerInfo(dims=(), dtype='float32', stride=(),")
    assert "storage is the library's own descriptor" in TensorPointerInfo.__doc__
    sig = inspect.signature(TensorPointerInfo)
    assert list(sig.parameters) == names and sig.parameters["dtype"].default == "float32"
    assert sig.bind(*range(16)) and weakref.ref(blank)() is blank
    with pytest.raises(TypeError):
        hash(blank)  # a mutable dataclass, as before


@pytest.mark.parametrize("made", ["store", "user"])
def test_copies_pickles_and_dataclass_helpers(make, made):
    mgr = make("worker_0", "arena")
    info = _store_made(mgr) if made == "store" else _user_made()
    want = _values(info)
    for twin in (copy.copy(info), copy.deepcopy(info), pickle.loads(pickle.dumps(info))):
        assert type(twin) is TensorPointerInfo and twin == info and twin is not info
        assert _values(twin) == want
    assert dataclasses.astuple(info) == want
    d = dataclasses.asdict(info)
    assert list(d) == [f.name for f in dataclasses.fields(info)] and TensorPointerInfo(**d) == info
    other = dataclasses.replace(info, uuid=info.uuid + 1, source_node_name="m")
    assert type(other) is TensorPointerInfo and other != info
    assert (other.uuid, other.source_node_name, other.dims) == (info.uuid + 1, "m", info.dims)
    assert _values(info) == want  # replace left the original alone
    mgr.cleanup_request(1)


def test_a_written_field_reads_back_as_written_and_is_checked_when_used(make):
    mgr = make("worker_0", "arena")
    info = _store_made(mgr)
    dims = [2, 3]
    info.dims = dims
    info.dtype = torch.float32
    assert info.dims is dims and info.dtype is torch.float32  # kept as given, not converted
    assert info.uuid != 0 and info.source_entity == "worker_0"  # the others kept the store's
    mgr.register_for_send(1, [info])  # a list of dims and a torch.dtype are accepted in use
    assert info.dims == (2, 3) and info.dtype == "float32" and info.shm_segment
    info.nbytes = "twenty-four"  # a dataclass takes anything ...
    assert info.nbytes == "twenty-four"
    with pytest.raises(mstar_c.InvalidArgumentError, match="TensorPointerInfo.nbytes"):
        mgr.register_for_send(1, [info])  # ... and the descriptor is refused when used
    assert info.nbytes == "twenty-four"
    info.nbytes = 24
    info.stride = (1,)
    with pytest.raises(mstar_c.InvalidArgumentError, match="stride"):
        mgr.register_for_send(1, [info])
    mgr.cleanup_request(1)


def test_a_descriptor_changed_after_the_store_is_used_as_changed(make):
    mgr = make("worker_0", "arena")
    info = _store_made(mgr)
    info.source_graph_walk = "walk7"
    mgr.register_for_send(1, [info])
    assert info.source_graph_walk == "walk7"  # went through the library and came back
    info.uuid = info.uuid + 1000  # a tensor the manager does not hold
    with pytest.raises(mstar_c.NotFoundError):
        mgr.register_for_send(1, [info])
    mgr.cleanup_request(1)


def test_a_list_changed_in_place_is_seen_on_the_next_use():
    """A descriptor converted once keeps the struct only while its values cannot change."""
    info = TensorPointerInfo(dims=[4], dtype="uint8", stride=[1], nbytes=4,
                             source_entity="worker_0")
    edge = mstar_c.GraphEdge("n", "x", [info])
    assert mstar_c.fanout(edge, None)[0][1].tensor_info[0].dims == (4,)
    info.dims[:] = [2, 2]
    info.stride[:] = [2, 1]
    assert mstar_c.fanout(edge, None)[0][1].tensor_info[0].dims == (2, 2)
    info.dims = (1, 4)  # tuples: kept as the struct after the next use; a write still counts
    info.stride = (4, 1)
    assert mstar_c.fanout(edge, None)[0][1].tensor_info[0].dims == (1, 4)
    info.dims = (4, 1)
    assert mstar_c.fanout(edge, None)[0][1].tensor_info[0].dims == (4, 1)


def test_received_descriptors_are_whole_and_forwarded_as_changed(make, tmp_path):
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as b:
        prod = make("worker_0", "arena")
        info = _store_made(prod)
        prod.register_for_send(1, [info])
        a.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=1,
                                         edges=[mstar_c.GraphEdge("n", "x", [info])]))
        got = b.recv(timeout_ms=5000).edges[0].tensor_info[0]
        assert type(got) is TensorPointerInfo and got == info
        got.source_node_name = "relay"
        b.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=1,
                                         edges=[mstar_c.GraphEdge("n", "x", [got])]))
        again = b.recv(timeout_ms=5000).edges[0].tensor_info[0]
        assert again.source_node_name == "relay" and again.uuid == info.uuid
        prod.cleanup_request(1)


def test_values_are_released_and_cycles_collected(field_references):
    field_references(TensorPointerInfo, "source_entity", "source_node_name")

    class Marker:
        pass

    marker = Marker()
    gone = weakref.ref(marker)
    info = TensorPointerInfo()
    info.remote_key = [info, marker]  # a cycle through a field
    del info, marker
    gc.collect()
    assert gone() is None


def test_many_stores_leave_nothing_behind(make, heap_growth):
    mgr = make("worker_0", "arena")
    src = torch.ones(16)

    def rounds(n, start):
        for rid in range(start, start + n):
            infos = mgr.store_and_return_tensor_info(rid, {"x": [src]})["x"]
            infos[0].source_node_name = "n"  # values built and dropped
            mgr.register_for_send(rid, infos)
            copy.deepcopy(infos[0]).dims
            mgr.cleanup_request(rid)

    grown = heap_growth(lambda: rounds(200, 1), lambda: rounds(2000, 1000))
    assert grown < 64 * 1024, f"{grown} bytes more after 2000 stores"


def test_subclasses_copy_with_their_own_fields_and_attributes():
    @dataclasses.dataclass
    class Tagged(TensorPointerInfo):
        tag: str = "none"

    class Noted(TensorPointerInfo):
        pass

    tagged = Tagged((4,), "uint8", (1,), 4, source_entity="worker_0", tag="t")
    assert tagged.tag == "t" and tagged.dims == (4,) and tagged.dtype == "uint8"
    noted = Noted(uuid=3)
    noted.note = "kept"
    for obj in (tagged, noted):
        for twin in (copy.copy(obj), copy.deepcopy(obj)):
            assert type(twin) is type(obj) and twin == obj
    assert copy.deepcopy(tagged).tag == "t" and copy.copy(noted).note == "kept"
    assert dataclasses.replace(tagged, tag="u").tag == "u"
    assert dataclasses.fields(tagged)[-1].name == "tag"
    edge = mstar_c.GraphEdge("n", "x", [tagged])
    assert mstar_c.fanout(edge, None)[0][1].tensor_info[0].dims == (4,)  # read by attribute
