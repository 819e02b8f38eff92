"""GraphEdge: a dataclass to its users whose scalars live in the library's edge struct (the
extension's _EdgeBase) and whose tensor_info is a plain list. Edges made by the extension (a
received message's, get_ready_tensors') carry C-backed descriptors; a value written in Python is
kept as written and checked when the edge is used; changes to the list are seen when the edge
is sent; copies, pickles and dataclass helpers behave as for any dataclass; nothing leaks."""
import copy
import dataclasses
import gc
import inspect
import pickle
import sys
import types
import weakref

import pytest
import torch

import mstar_c
from mstar_c import GraphEdge, Message, TensorPointerInfo, _mstar

NAMES = ["next_node", "name", "tensor_info", "persist", "is_streaming", "persist_for_loop",
         "total_fanin", "shard_dim"]
DEFAULTS = ("", "", [], False, False, False, 1, None)


@dataclasses.dataclass
class Tagged(GraphEdge):
    tag: str = "none"


def _values(edge):
    return tuple(getattr(edge, n) for n in NAMES)


def _info(uuid=7):
    return TensorPointerInfo((2, 3), "float32", (3, 1), 24, uuid=uuid, source_entity="worker_0")


def _full():
    return GraphEdge("n", "x", [_info()], True, False, True, 2, 0)


@pytest.fixture
def meshes(tmp_path):
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as b:
        yield a, b


def _through(meshes, *edges):
    """The edges as worker_1 receives them in an INPUT_SIGNALS from worker_0."""
    a, b = meshes
    a.send("worker_1", Message("INPUT_SIGNALS", request_id=1, edges=list(edges)))
    got = b.recv(timeout_ms=5000)
    assert got is not None
    return got.edges


def test_fields_defaults_and_init_are_the_dataclass_ones():
    assert [f.name for f in dataclasses.fields(GraphEdge)] == NAMES
    blank = GraphEdge()
    assert _values(blank) == DEFAULTS
    assert blank.tensor_info is not GraphEdge().tensor_info  # a new list each
    assert blank.tensor_info is blank.tensor_info  # ... kept once made
    by_pos = GraphEdge(*_values(_full()))
    assert by_pos == _full() and by_pos.shard_dim == 0 and by_pos.total_fanin == 2
    assert by_pos == GraphEdge(next_node="n", name="x", tensor_info=[_info()], persist=True,
                               persist_for_loop=True, total_fanin=2, shard_dim=0)
    with pytest.raises(TypeError):
        GraphEdge(*range(9))
    with pytest.raises(TypeError):
        GraphEdge(colour="red")
    assert not hasattr(blank, "__dict__")
    assert repr(blank) == ("GraphEdge(next_node='', name='', tensor_info=[], persist=False, "
                           "is_streaming=False, persist_for_loop=False, total_fanin=1, "
                           "shard_dim=None)")
    assert "_total_fanin" in GraphEdge.__doc__ and "no instance __dict__" in GraphEdge.__doc__
    sig = inspect.signature(GraphEdge)
    assert list(sig.parameters) == NAMES and sig.parameters["total_fanin"].default == 1
    assert repr(sig.parameters["tensor_info"].default) == "<factory>"
    assert weakref.ref(blank)() is blank
    with pytest.raises(TypeError):
        hash(blank)  # a mutable dataclass, as before
    with pytest.raises(AttributeError):
        del blank.name


@pytest.mark.parametrize("made", ["built", "received"])
def test_copies_pickles_and_dataclass_helpers(meshes, made):
    edge = _full() if made == "built" else _through(meshes, _full())[0]
    assert edge == _full()
    want = _values(edge)
    for twin in (copy.copy(edge), copy.deepcopy(edge), pickle.loads(pickle.dumps(edge))):
        assert type(twin) is GraphEdge and twin == edge and twin is not edge
        assert _values(twin) == want
    assert copy.deepcopy(edge).tensor_info is not edge.tensor_info
    assert copy.copy(edge).tensor_info is edge.tensor_info  # shallow, as a dataclass's
    assert dataclasses.astuple(edge)[:2] == ("n", "x")
    d = dataclasses.asdict(edge)
    assert list(d) == NAMES and d["tensor_info"][0]["uuid"] == 7 and d["shard_dim"] == 0
    other = dataclasses.replace(edge, name="y", shard_dim=None)
    assert type(other) is GraphEdge and other != edge
    assert (other.name, other.shard_dim, other.total_fanin) == ("y", None, 2)
    assert _values(edge) == want  # replace left the original alone


def test_a_received_edge_builds_scalars_when_read_and_its_list_at_once(meshes):
    edge = _through(meshes, _full())[0]
    assert type(edge) is GraphEdge and _mstar._edge_built(edge) == ["tensor_info"]
    assert [type(i) for i in edge.tensor_info] == [TensorPointerInfo]
    assert edge.tensor_info[0] == _info() and type(edge.tensor_info) is list
    assert edge.name == "x" and _mstar._edge_built(edge) == ["name", "tensor_info"]
    assert (edge.persist, edge.persist_for_loop, edge.total_fanin, edge.shard_dim) == \
        (True, True, 2, 0)
    bare = _through(meshes, GraphEdge("n", "y"))[0]
    assert bare.tensor_info == [] and bare.shard_dim is None and bare.total_fanin == 1


def test_shard_dim_none_is_minus_one_in_c(meshes):
    got = _through(meshes, GraphEdge(name="a"), GraphEdge(name="b", shard_dim=0),
                   GraphEdge(name="c", shard_dim=3))
    assert [e.shard_dim for e in got] == [None, 0, 3]
    (clone,) = mstar_c.fanout(GraphEdge("n", "x", shard_dim=None), None)
    assert clone[1].shard_dim is None


def test_changes_after_building_are_seen_when_sent(meshes):
    edge = GraphEdge("n", "x")
    edge.tensor_info.append(_info(1))  # the list read, then changed in place
    edge.tensor_info.append(_info(2))
    edge.name = "y"
    edge.persist = 1
    edge.total_fanin = 4
    (got,) = _through(meshes, edge)
    assert [i.uuid for i in got.tensor_info] == [1, 2]
    assert (got.name, got.persist, got.total_fanin) == ("y", True, 4)
    edge.tensor_info[0].uuid = 9  # a descriptor changed in place
    del edge.tensor_info[1]
    edge.tensor_info = edge.tensor_info + [_info(3)]  # replaced
    (got,) = _through(meshes, edge)
    assert [i.uuid for i in got.tensor_info] == [9, 3]
    got.tensor_info.append(_info(4))  # a received edge's list, changed and forwarded
    got.shard_dim = 1
    (again,) = _through(meshes, got)
    assert [i.uuid for i in again.tensor_info] == [9, 3, 4] and again.shard_dim == 1


def test_values_that_are_not_plain_are_converted_when_used(meshes):
    class Fanin:
        def __init__(self):
            self.n = 2

        def __index__(self):
            return self.n

    fanin = Fanin()
    edge = GraphEdge("n", "x", (i for i in [_info(5)]), persist=[1], total_fanin=fanin)
    fanin.n = 3  # read when the edge is used, not when it was written
    (got,) = _through(meshes, edge)
    assert got.total_fanin == 3 and got.persist and [i.uuid for i in got.tensor_info] == [5]
    assert edge.total_fanin is fanin


@pytest.mark.parametrize("field,value,what", [
    ("name", "x" * 500, "GraphEdge.name"),
    ("name", None, "GraphEdge.name"),
    ("next_node", b"n", "GraphEdge.next_node"),
    ("total_fanin", 2**40, "GraphEdge.total_fanin"),
    ("total_fanin", 2.5, "GraphEdge.total_fanin"),
    ("shard_dim", "0", "GraphEdge.shard_dim"),
    ("tensor_info", 5, "GraphEdge.tensor_info"),
    ("tensor_info", [_info()] * 65537, "GraphEdge.tensor_info"),
    ("tensor_info", [TensorPointerInfo((2,), stride=())], "TensorPointerInfo.stride"),
])
@pytest.mark.parametrize("made", ["built", "received"])
def test_a_bad_value_is_taken_and_refused_when_used(meshes, make, field, value, what, made):
    a, b = meshes
    edge = _full() if made == "built" else _through(meshes, _full())[0]
    setattr(edge, field, value)  # a dataclass takes anything ...
    assert getattr(edge, field) == value
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):  # ... refused when used
        a.send("worker_1", Message("INPUT_SIGNALS", request_id=1, edges=[edge]))
    mgr = make("worker_1", "local")
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        mgr.start_read_tensors(1, [edge])
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        mgr.ack_unread_tensors(1, [edge])
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        mstar_c.fanout(edge, None)
    assert getattr(edge, field) == value and b.recv(timeout_ms=0) is None
    setattr(edge, field, getattr(_full(), field))  # nothing else was lost
    assert _through(meshes, edge)[0] == _full()


def test_get_ready_tensors_gives_graph_edges_of_c_backed_descriptors(meshes, make):
    a, b = meshes
    prod = make("worker_0", "arena")
    cons = make("worker_1", "arena")
    src = torch.arange(6, dtype=torch.float32)
    infos = prod.store_and_return_tensor_info(1, {"x": [src]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    a.send("worker_1", Message("INPUT_SIGNALS", request_id=1,
                               edges=[GraphEdge("n", "x", infos, shard_dim=0)]))
    cons.start_read_tensors(b.recv(timeout_ms=5000))
    ready = cons.get_ready_tensors()
    (edge,) = ready[1]
    assert type(edge) is GraphEdge and _mstar._edge_built(edge) == ["tensor_info"]
    assert (edge.name, edge.next_node, edge.shard_dim) == ("x", "n", 0)
    (info,) = edge.tensor_info
    assert type(info) is TensorPointerInfo and info.uuid == infos[0].uuid
    got = torch.from_dlpack(cons.get_tensor(1, info.uuid))
    assert torch.equal(got, src)
    del got
    cons.dereference(info.uuid)
    cons.cleanup_request(1)


def test_subclasses_and_other_objects_are_read_by_attribute(meshes):
    class Loud(GraphEdge):
        @property
        def name(self):
            return "LOUD"

        @name.setter
        def name(self, v):
            pass

    tagged = Tagged("n", "x", [_info()], tag="t")
    assert tagged.tag == "t" and tagged.total_fanin == 1 and tagged.name == "x"
    for twin in (copy.copy(tagged), copy.deepcopy(tagged), pickle.loads(pickle.dumps(tagged))):
        assert type(twin) is Tagged and twin == tagged
    assert dataclasses.replace(tagged, tag="u").tag == "u"
    plain = types.SimpleNamespace(**dict(zip(NAMES, _values(_full()))))
    plain.name = "plain"
    got = _through(meshes, tagged, Loud("n", "quiet"), plain)
    assert [e.name for e in got] == ["x", "LOUD", "plain"]
    assert got[0].tensor_info == [_info()] and got[2].shard_dim == 0
    plain.total_fanin = "many"
    with pytest.raises(mstar_c.InvalidArgumentError, match="GraphEdge.total_fanin"):
        _through(meshes, plain)


def test_init_again_starts_over(meshes):
    edge = _through(meshes, _full())[0]
    edge.__init__("m", "y", total_fanin=3)
    assert _values(edge) == ("m", "y", [], False, False, False, 3, None)
    assert _through(meshes, edge)[0] == GraphEdge("m", "y", total_fanin=3)


def test_values_are_released_and_cycles_collected(meshes):
    # Made at run time: a constant would be immortal in Python 3.12 (its count never moves).
    value = "".join(["v"] * 100) + "w"
    infos = [_info()]
    base, ibase = sys.getrefcount(value), sys.getrefcount(infos)
    edge = GraphEdge(value, value, infos)
    assert sys.getrefcount(value) == base + 2 and sys.getrefcount(infos) == ibase + 1
    edge.name = "other"
    assert sys.getrefcount(value) == base + 1
    _through(meshes, edge)  # sending holds nothing afterwards
    assert sys.getrefcount(value) == base + 1 and sys.getrefcount(infos) == ibase + 1
    del edge
    assert sys.getrefcount(value) == base and sys.getrefcount(infos) == ibase

    class Marker:
        pass

    marker = Marker()
    gone = weakref.ref(marker)
    edge = _through(meshes, _full())[0]
    edge.tensor_info.append(edge)  # a cycle through the list of a received edge
    edge.next_node = marker
    built = GraphEdge(tensor_info=[])
    built.tensor_info.append(built)
    built_gone = weakref.ref(built)
    del edge, marker, built
    gc.collect()
    assert gone() is None and built_gone() is None


def test_many_sends_and_receives_leave_nothing_behind(make, meshes, heap_growth):
    mgr = make("worker_1", "local")

    def rounds(n):
        for i in range(n):
            edge = GraphEdge("n", "x%d" % i, [_info(i + 1)], shard_dim=i % 2 or None)
            (got,) = _through(meshes, edge)
            got.tensor_info.append(_info())
            _through(meshes, got, copy.deepcopy(got))
            with pytest.raises(mstar_c.InvalidArgumentError):
                mgr.start_read_tensors(1, [GraphEdge(total_fanin="bad")])

    grown = heap_growth(lambda: rounds(200), lambda: rounds(2000))
    assert grown < 64 * 1024, f"{grown} bytes more after 2000 round trips"


def test_a_value_that_rewrites_the_edge_while_it_is_converted(meshes):
    """Converting a value may run Python code (an __index__) that writes the edge: what is
    converted is what the edge held when the call began, and nothing is used after it was let
    go (ASan sees it with PYTHONMALLOC=malloc)."""
    edge = GraphEdge("n", "x")

    class Sly:
        def __index__(self):
            edge.tensor_info = []  # the list being converted loses its last other holder
            edge.__init__("m", "y")
            return 2

    class Infos(list):  # freed when it goes (a plain list may go to a free list)
        pass

    edge.total_fanin = Sly()
    edge.tensor_info = Infos([_info(k) for k in range(1, 40)])
    (got,) = _through(meshes, edge)
    assert (got.next_node, got.name, got.total_fanin) == ("n", "x", 2)
    assert [i.uuid for i in got.tensor_info] == list(range(1, 40))
    assert (edge.name, edge.total_fanin, edge.tensor_info) == ("y", 1, [])
