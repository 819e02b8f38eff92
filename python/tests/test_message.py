"""Message: a dataclass to its users whose fields live in the extension's _MsgBase. A received
message keeps the library's struct and builds a field only when it is read; sending or handling
a message converts only the fields held as Python values (written, or lists and dicts read), so
one forwarded as it came goes back from its struct; a bad value is refused when the message is
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
from mstar_c import GraphEdge, Message, _mstar

NAMES = ["type", "sender", "request_id", "graph_walk", "text", "remove_source", "force",
         "is_first_tp_rank", "round", "rank", "world_size", "edges", "counts", "uuids", "names",
         "rids", "ints", "rx", "tx", "kv"]
DEFAULTS = ("HELLO", "", 0, "", "", 0, False, False, 0, 0, 0, [], {}, [], [], [], [], [], [], {})


def _values(msg):
    return tuple(getattr(msg, n) for n in NAMES)


@pytest.fixture
def meshes(tmp_path):
    with mstar_c.Mesh("worker_0", ipc_dir=str(tmp_path)) as a, \
         mstar_c.Mesh("worker_1", ipc_dir=str(tmp_path)) as b:
        yield a, b


def _received(meshes, msg=None):
    """msg (by default an INPUT_SIGNALS with every field that type carries) sent from worker_0
    to worker_1 and received there."""
    a, b = meshes
    if msg is None:
        msg = _full()
    a.send("worker_1", msg)
    got = b.recv(timeout_ms=5000)
    assert got is not None
    return got


def _full(sender=""):
    return Message("INPUT_SIGNALS", sender=sender, request_id="r-1", graph_walk="walk",
                   text="group", names=["a"], kv={"k": 1}, edges=[GraphEdge("n", "x")])


@dataclasses.dataclass
class Tagged(Message):
    tag: str = "none"


def test_fields_defaults_and_init_are_the_dataclass_ones():
    assert [f.name for f in dataclasses.fields(Message)] == NAMES
    blank = Message()
    assert _values(blank) == DEFAULTS
    assert blank.edges is not Message().edges  # a new list each
    assert blank.edges is blank.edges  # ... kept once made
    by_pos = Message("INPUT_SIGNALS", "w", 5, "walk", "t")
    assert _values(by_pos)[:5] == ("INPUT_SIGNALS", "w", 5, "walk", "t")
    assert by_pos == Message(type="INPUT_SIGNALS", sender="w", request_id=5, graph_walk="walk",
                             text="t")
    with pytest.raises(TypeError):
        Message(*range(21))
    with pytest.raises(TypeError):
        Message(colour="red")
    assert not hasattr(blank, "__dict__")
    assert repr(blank).startswith("Message(type='HELLO', sender='', request_id=0,")
    assert "no instance __dict__" in Message.__doc__
    sig = inspect.signature(Message)
    assert list(sig.parameters) == NAMES and sig.parameters["text"].default == ""
    assert repr(sig.parameters["edges"].default) == "<factory>"
    assert weakref.ref(blank)() is blank
    with pytest.raises(TypeError):
        hash(blank)  # a mutable dataclass, as before
    ack = Message("TENSOR_RECEIVED", counts={1: 2}, uuids=[3])
    assert ack.successful_tensors == {1: 2} and ack.failed_tensor_ids == [3]
    assert mstar_c.ReceivedMessage is Message  # the old name of a received one
    with pytest.raises(AttributeError):
        del blank.text


@pytest.mark.parametrize("made", ["built", "received"])
def test_copies_pickles_and_dataclass_helpers(meshes, made):
    built = _full(sender="worker_0")
    msg = built if made == "built" else _received(meshes, built)
    assert msg == built
    want = _values(msg)
    for twin in (copy.copy(msg), copy.deepcopy(msg), pickle.loads(pickle.dumps(msg))):
        assert type(twin) is Message and twin == msg and twin is not msg
        assert _values(twin) == want
    assert copy.deepcopy(msg).edges is not msg.edges
    assert dataclasses.astuple(msg)[:11] == want[:11]
    d = dataclasses.asdict(msg)
    assert list(d) == NAMES and d["edges"][0]["name"] == "x" and d["kv"] == {"k": 1}
    other = dataclasses.replace(msg, text="t", rank=0)
    assert type(other) is Message and other != msg
    assert (other.text, other.rank, other.names) == ("t", 0, ["a"])
    assert _values(msg) == want  # replace left the original alone
    assert repr(msg).startswith("Message(type='INPUT_SIGNALS', sender='worker_0', "
                                "request_id='r-1', graph_walk='walk', text='group',")


def test_a_received_message_builds_fields_only_when_read(meshes):
    got = _received(meshes)
    assert _mstar._message_has_struct(got) and _mstar._message_built(got) == []
    assert got.graph_walk == "walk"
    assert _mstar._message_built(got) == ["graph_walk"]
    assert got.names == ["a"] and got.kv == {"k": 1} and got.edges[0].name == "x"
    assert got.sender == "worker_0" and got.request_id == "r-1"
    assert not _mstar._message_has_struct(Message())


def test_received_messages_alive_together_keep_structs_of_their_own(meshes):
    """The extension reuses the structs of received messages that are gone: ten alive at once,
    freed in a shuffled order and received again, each keeps its own fields."""
    a, b = meshes
    for turn in range(3):
        for i in range(10):
            a.send("worker_1", Message("ABORT_REQUEST", request_id=100 * turn + i, text="t%d" % i))
        got = [b.recv(timeout_ms=5000) for _ in range(10)]
        assert [(m.request_id, m.text) for m in got] == \
            [(100 * turn + i, "t%d" % i) for i in range(10)]
        for i in (3, 7, 0, 9, 1):  # gone out of order: their structs go to the spares
            got[i] = None
        assert [(m.request_id, m.text) for m in got if m is not None] == \
            [(100 * turn + i, "t%d" % i) for i in (2, 4, 5, 6, 8)]


def test_forwarded_as_it_came_it_goes_from_its_struct(meshes):
    a, b = meshes
    got = _received(meshes)
    assert got.type == "INPUT_SIGNALS"  # read: still the struct's value
    b.send("worker_1", got)  # to itself
    assert _mstar._message_built(got) == ["type"]  # nothing more was built to send it
    again = b.recv(timeout_ms=5000)
    assert again.sender == "worker_1" and got.sender == "worker_0"  # the struct kept its own
    assert dataclasses.replace(again, sender="worker_0") == got


def test_fields_written_or_changed_in_place_win_over_the_struct(meshes):
    a, b = meshes
    got = _received(meshes)
    got.request_id = 9  # a scalar written
    got.names.append("b")  # lists and dicts read, then changed in place
    got.kv["k2"] = 2
    got.edges.append(GraphEdge("m", "y", persist=True))
    b.send("worker_1", got)
    again = b.recv(timeout_ms=5000)
    assert again.request_id == 9 and again.names == ["a", "b"]
    assert again.kv == {"k": 1, "k2": 2}
    assert [e.name for e in again.edges] == ["x", "y"] and again.edges[1].persist
    assert (again.text, again.graph_walk) == ("group", "walk")  # the struct's
    got.edges = []  # replaced: the rest still comes from the struct
    b.send("worker_1", got)
    third = b.recv(timeout_ms=5000)
    assert third.edges == [] and third.text == "group" and third.names == ["a", "b"]


def test_a_message_built_in_python_sends_the_fields_it_was_given(meshes):
    a, b = meshes
    msg = Message("INPUT_SIGNALS", request_id=4)
    assert _mstar._message_built(msg) == ["type", "request_id"]
    got = _received(meshes, msg)
    assert got.text == "default" and got.request_id == 4 and got.edges == []
    assert _mstar._message_built(msg) == ["type", "request_id"]
    msg.text = ""  # written empty: INPUT_SIGNALS's default all the same
    assert _received(meshes, msg).text == "default"


@pytest.mark.parametrize("field,value,what", [
    ("rank", "x", "Message.rank"),
    ("round", 2**70, "Message.round"),
    ("world_size", 2**40, "Message.world_size"),
    ("type", "NOT_A_TYPE", "Message.type"),
    ("text", "t" * 1000, "Message.text"),
    ("names", ["a", 7], "Message.names"),
    ("edges", [GraphEdge("n", "x" * 500)], "GraphEdge.name"),
    ("kv", [("k", 1)], "Message.kv"),
    ("counts", {1: "one"}, "Message.counts"),
    ("remove_source", 7, "Message.remove_source"),
])
@pytest.mark.parametrize("made", ["built", "received"])
def test_a_bad_value_is_taken_and_refused_when_used(meshes, make, field, value, what, made):
    a, b = meshes
    msg = Message("TENSOR_RECEIVED", request_id=1) if made == "built" else _received(meshes)
    setattr(msg, field, value)  # a dataclass takes anything ...
    assert getattr(msg, field) == value
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        a.send("worker_1", msg)  # ... and the message is refused when used
    mgr = make("worker_0", "local")
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        mgr.handle_message(msg)
    with pytest.raises(mstar_c.InvalidArgumentError, match=what):
        mgr.note_sent("worker_1", msg)
    assert getattr(msg, field) == value and b.recv(timeout_ms=0) is None


def test_the_send_callback_gets_a_message_keeping_the_struct(meshes, make):
    a, b = meshes
    prod = make("worker_0", "arena", send=a)
    cons = make("worker_1", "arena")  # its ACKs go to a recorder
    src = torch.arange(6, dtype=torch.float32)
    infos = prod.store_and_return_tensor_info(1, {"x": [src]})["x"]
    prod.increment_ref(infos[0].uuid)
    prod.register_for_send(1, infos)
    a.send("worker_1", Message("INPUT_SIGNALS", request_id=1, edges=[GraphEdge("n", "x", infos)]))
    msg = b.recv(timeout_ms=5000)
    cons.start_read_tensors(msg)
    assert list(cons.get_ready_tensors()) == [1]
    cons.dereference(infos[0].uuid)
    peer, ack = cons.sent[-1]
    assert peer == "worker_0" and type(ack) is Message and _mstar._message_has_struct(ack)
    assert ack.successful_tensors == {infos[0].uuid: 1}
    prod.handle_message(ack)  # from its struct
    assert prod.num_tensors == 0
    cons.cleanup_request(1)


def test_subclasses_are_read_by_attribute(meshes):
    a, b = meshes

    class Loud(Message):
        @property
        def text(self):
            return "LOUD"

        @text.setter
        def text(self, v):
            pass

    tagged = Tagged("INPUT_SIGNALS", request_id=2, tag="t")
    assert tagged.tag == "t" and tagged.edges == [] and tagged.type == "INPUT_SIGNALS"
    for twin in (copy.copy(tagged), copy.deepcopy(tagged), pickle.loads(pickle.dumps(tagged))):
        assert type(twin) is Tagged and twin == tagged
    assert dataclasses.replace(tagged, tag="u").tag == "u"
    assert _received(meshes, tagged).request_id == 2
    loud = Loud("SHUTDOWN", text="quiet")
    assert _received(meshes, loud).text == "LOUD"


def test_init_again_starts_over(meshes):
    got = _received(meshes)
    got.__init__("HELLO", text="again")
    assert not _mstar._message_has_struct(got)
    assert _values(got) == ("HELLO", "", 0, "", "again") + DEFAULTS[5:]


def test_values_are_released_and_cycles_collected(meshes, field_references):
    field_references(Message, "text", "graph_walk")

    class Marker:
        pass

    marker = Marker()
    gone = weakref.ref(marker)
    msg = _received(meshes)
    msg.kv["me"] = msg  # a cycle through a field of a received message
    msg.names = [marker]
    del msg, marker
    gc.collect()
    assert gone() is None


def test_many_sends_and_receives_leave_nothing_behind(make, meshes, heap_growth):
    a, b = meshes
    mgr = make("worker_1", "local")

    def rounds(n):
        for i in range(n):
            got = _received(meshes)
            if i % 2:
                got.names.append("n%d" % i)  # built, changed and converted
                got.text = "t"
            b.send("worker_1", got)
            again = b.recv(timeout_ms=5000)
            copy.deepcopy(again).edges
            mgr.note_sent("worker_0", again)
            with pytest.raises(mstar_c.InvalidArgumentError):
                a.send("worker_1", Message(rank="bad"))

    grown = heap_growth(lambda: rounds(200), lambda: rounds(2000))
    assert grown < 64 * 1024, f"{grown} bytes more after 2000 round trips"


def test_a_value_that_rewrites_the_message_while_it_is_converted(meshes):
    """Converting a value may run Python code (an __index__) that writes the message: what is
    converted is what the message held when the call began, and nothing is used after it was
    let go (ASan sees it with PYTHONMALLOC=malloc)."""
    a, b = meshes
    msg = Message("TENSOR_RECEIVED", request_id=1)

    class Sly:
        def __index__(self):
            msg.counts = {9: 9}  # the dict being converted loses its last other holder
            msg.__init__("HELLO")
            return 2

    class Counts(dict):  # freed when it goes (a plain dict would go to a free list)
        pass

    msg.counts = Counts({1: Sly(), **{k: k for k in range(2, 40)}})
    a.send("worker_1", msg)
    got = b.recv(timeout_ms=5000)
    assert got.type == "TENSOR_RECEIVED" and got.counts == {1: 2, **{k: k for k in range(2, 40)}}
    assert msg.type == "HELLO" and msg.counts == {}


def test_spin_finds_a_message_waiting_in_a_ring_and_says_when_none_came(meshes):
    """Mesh.spin, a loop's wait before it sleeps on inbox_fd: True once a message waits in a
    ring (the first message between two entities of a host sets their ring up), False when none
    came within MSTAR_RING_SPIN_US; a closed mesh refuses it."""
    a, b = meshes
    _received(meshes)
    a.send("worker_1", Message("HELLO"))
    assert b.spin() is True
    got = b.recv(timeout_ms=0)
    assert got is not None and got.type == "HELLO"
    assert b.spin() is False
    assert b.recv(timeout_ms=0) is None
    b.close()
    with pytest.raises(mstar_c.ClosedError):
        b.spin()
