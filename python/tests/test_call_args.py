"""The arguments of the manager's hot methods, parsed by hand (python/src/args.c): every form
the methods accepted still works (by position and by keyword), and a wrong call raises the
TypeError Python's own parser raises, naming the method."""
import pytest
import torch

import mstar_c


def _handoff_by_keyword(prod, cons, rid):
    """One handoff with every optional argument given by keyword."""
    infos = prod.store_and_return_tensor_info(
        request_id=rid, outputs={"x": [torch.arange(8.0)]}, node_name="n", graph_walk=None,
        tp_size=2, tp_rank=1)["x"]
    assert (infos[0].source_tp_size, infos[0].source_tp_rank) == (2, 1)
    assert infos[0].source_node_name == "n"
    prod.increment_ref(uuid=infos[0].uuid, n=1)
    prod.register_for_send(rid, infos)
    edges = [mstar_c.GraphEdge("n", "x", infos)]
    cons.start_read_tensors(request_id=rid, edges=edges, graph_walk=None, views=False, into=None)
    ready, failed = cons.get_ready_tensors(graph_walk=None, with_failures=True)
    assert failed == [] and list(ready) == [rid]
    got = ready[rid][0].tensor_info[0]
    assert torch.equal(torch.from_dlpack(cons.get_tensor(rid, got.uuid)), torch.arange(8.0))
    cons.dereference(uuid=got.uuid, n=1)
    cons.cleanup_request(rid)
    for peer, m in cons.sent:
        prod.handle_message(m)
    cons.sent.clear()
    prod.cleanup_request(rid)
    assert prod.num_tensors == 0 and cons.num_tensors == 0


def test_keyword_and_positional_forms(make):
    prod = make("worker_0")
    cons = make("worker_1")
    _handoff_by_keyword(prod, cons, 1)
    # The same by position, where the parameters may come by position.
    infos = prod.store_and_return_tensor_info(2, {"x": [torch.ones(3)]}, node_name="m")["x"]
    prod.increment_ref(infos[0].uuid, 2)
    prod.dereference(infos[0].uuid)
    prod.register_for_send(2, infos)
    cons.start_read_tensors(2, [mstar_c.GraphEdge("m", "x", infos)], None)
    ready = cons.get_ready_tensors(None)
    uuid = ready[2][0].tensor_info[0].uuid
    cons.dereference(uuid)
    cons.cleanup_request(2)
    for peer, m in cons.sent:
        prod.handle_message(m)
    prod.cleanup_request(2)
    assert prod.num_tensors == 0


def test_reference_counts_by_keyword_count(make):
    """n= is the count: two references taken at once need two released."""
    prod = make("worker_0")
    uuid = prod.store_and_return_tensor_info(1, {"x": [torch.ones(2)]})["x"][0].uuid
    prod.increment_ref(uuid, n=2)
    prod.cleanup_request(1)
    prod.dereference(uuid, n=1)
    assert prod.num_tensors == 1
    prod.dereference(n=1, uuid=uuid)
    assert prod.num_tensors == 0


BAD_CALLS = [
    # (call, text the TypeError holds)
    (lambda m: m.increment_ref(), "increment_ref() missing required argument 'uuid' (pos 1)"),
    (lambda m: m.increment_ref(1, 1, 1), "increment_ref() takes at most 2 positional arguments"),
    (lambda m: m.increment_ref(1, count=1), "'count' is an invalid keyword argument for "
                                            "increment_ref()"),
    (lambda m: m.dereference(1, uuid=1), "argument for dereference() given by name ('uuid') and "
                                         "position (1)"),
    (lambda m: m.dereference(1, 1.5), "'float' object cannot be interpreted as an integer"),
    (lambda m: m.dereference(1, n="2"), "'str' object cannot be interpreted as an integer"),
    (lambda m: m.store_and_return_tensor_info(1),
     "store_and_return_tensor_info() missing required argument 'outputs' (pos 2)"),
    (lambda m: m.store_and_return_tensor_info(1, {}, "n", None, False, None, 2),
     "store_and_return_tensor_info() takes at most 6 positional arguments (7 given)"),
    (lambda m: m.store_and_return_tensor_info(1, {}, tp_size=1.0),
     "'float' object cannot be interpreted as an integer"),
    (lambda m: m.store_and_return_tensor_info(1, {}, rank=0),
     "'rank' is an invalid keyword argument for store_and_return_tensor_info()"),
    (lambda m: m.start_read_tensors(), "start_read_tensors() missing required argument "
                                       "'request_id' (pos 1)"),
    (lambda m: m.start_read_tensors(1, None, None, True),
     "start_read_tensors() takes at most 3 positional arguments (4 given)"),
    (lambda m: m.start_read_tensors(1, view=True), "'view' is an invalid keyword argument for "
                                                   "start_read_tensors()"),
    (lambda m: m.get_ready_tensors(None, True), "get_ready_tensors() takes at most 1 positional "
                                                "argument (2 given)"),
    (lambda m: m.get_ready_tensors(failures=True), "'failures' is an invalid keyword argument "
                                                   "for get_ready_tensors()"),
    (lambda m: m.get_ready_tensors(None, graph_walk=None), "argument for get_ready_tensors() "
                                                          "given by name ('graph_walk') and "
                                                          "position (1)"),
    (lambda m: m.register_for_send(1), "register_for_send() missing required argument "
                                       "'tensor_infos' (pos 2)"),
    (lambda m: m.register_for_send(1, [], False, 3), "register_for_send() takes at most 3 "
                                                     "positional arguments (4 given)"),
    (lambda m: m.register_for_send(1, infos=[]), "'infos' is an invalid keyword argument"),
    (lambda m: m.get_tensor(), "get_tensor() missing required argument 'request_id' (pos 1)"),
    (lambda m: m.get_tensor(1, uuid=2), "takes no keyword arguments"),
    (lambda m: m.cleanup_request(1, False, 3), "cleanup_request() takes at most 2 positional "
                                               "arguments (3 given)"),
]


@pytest.mark.parametrize("call,text", BAD_CALLS)
def test_wrong_calls_raise_typeerror_naming_the_method(make, call, text):
    m = make("worker_0")
    with pytest.raises(TypeError) as e:
        call(m)
    assert text in str(e.value)
    assert m.num_tensors == 0 and not m.closed  # nothing was stored, the manager still works
    assert m.get_ready_tensors() == {}


def test_out_of_range_ints_overflow(make):
    m = make("worker_0")
    with pytest.raises(OverflowError, match="store_and_return_tensor_info"):
        m.store_and_return_tensor_info(1, {"x": [torch.ones(1)]}, tp_size=2**31)
    with pytest.raises(OverflowError):
        m.increment_ref(1, 2**64)
    assert m.num_tensors == 0


def test_flags_take_truth_values(make):
    """views= and with_failures= take any truth value, as the p format did; one that cannot
    say raises its own error."""
    m = make("worker_0")
    assert m.get_ready_tensors(with_failures=1) == ({}, [])
    assert m.get_ready_tensors(with_failures=[]) == {}

    class NoTruth:
        def __bool__(self):
            raise ValueError("no truth")

    with pytest.raises(ValueError, match="no truth"):
        m.get_ready_tensors(with_failures=NoTruth())
    with pytest.raises(ValueError, match="no truth"):
        m.start_read_tensors(1, [], views=NoTruth())


def test_dlpack_keywords(make):
    """__dlpack__ of a loan and of a view: every keyword of the protocol by name, none by
    position, copy=True refused, an unknown keyword a TypeError."""
    m = make("worker_0", transport="arena")
    loan = m.loan_output(4, "uint8")
    t = torch.from_dlpack(loan)
    t.fill_(3)
    del t
    cap = loan.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False,
                          bool_as_uint8=True)
    assert torch.equal(torch.utils.dlpack.from_dlpack(cap), torch.full((4,), 3, dtype=torch.uint8))
    del cap
    infos = m.store_and_return_tensor_info(1, {"x": [loan]})["x"]
    view = m.get_tensor(1, infos[0].uuid)
    for obj in (loan, view):
        with pytest.raises(TypeError, match=r"__dlpack__\(\) takes no positional arguments"):
            obj.__dlpack__(None)
        with pytest.raises(TypeError, match="'stream_ptr' is an invalid keyword argument for "
                                            r"__dlpack__\(\)"):
            obj.__dlpack__(stream_ptr=0)
    with pytest.raises(mstar_c.NotSupportedError, match="copy=True"):
        view.__dlpack__(copy=True)
    assert torch.equal(torch.from_dlpack(view.__dlpack__(max_version=(1, 0))),
                       torch.full((4,), 3, dtype=torch.uint8))
    del view
    m.cleanup_request(1)
