"""The graph runner for torch modules (mstar_c.graphs) on the host backend: buckets, leases,
slots, padding and dummy rows, static inputs and outputs, autocast, and capture failures, with a
torch CPU module as the C runner's submodule. Each test names the hard case of docs/design.md
(G-n) it covers where there is one."""
import pytest
import torch

import mstar_c
from mstar_c import graphs as g
from runner_util import eager_at, run_rows

# every comparison here must hold at one row count on any torch (conftest.rows_show)
pytestmark = pytest.mark.usefixtures("rows_show")

WIDTH = 16


class Toy(torch.nn.Module):
    """silu(linear(x)) + x; fails a capture (not a warm-up) of bs `fail_bs`, and a replay while
    `fail_replay` is set."""

    def __init__(self, fail_bs=None, fail_late=False):
        super().__init__()
        self.fail_late = fail_late
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(WIDTH, WIDTH)
        self.fail_bs = fail_bs
        self.fail_replay = False
        self.calls = 0

    def forward_batched(self, x):
        self.calls += 1
        ctx = g.current_step()
        if ctx is not None and ctx.get("capturing") and x.shape[0] == self.fail_bs:
            if self.fail_late:  # after its first output took pool memory
                return {"output": torch.nn.functional.silu(self.lin(x)) + x, "bad": None}
            raise RuntimeError(f"injected capture failure at bs {x.shape[0]}")
        if ctx is not None and ctx.get("replaying") and self.fail_replay:
            raise ValueError("injected replay failure")
        return torch.nn.functional.silu(self.lin(x)) + x


def row(n=WIDTH):
    return {"x": torch.zeros(1, n)}


def config(**kw):
    kw.setdefault("capture_batch_sizes", [8, 1, 4, 2])  # G-22: unsorted, sorted by the runner
    kw.setdefault("make_node_input", lambda n: {"x": torch.zeros(n, WIDTH)})
    return g.AcceleratorGraphConfig("decode", **kw)


def make_runner(module=None, num_slots=2, capture=True, **kw):
    module = module or Toy()
    sr = g.StepRunner("cpu")
    r = g.AcceleratorGraphRunner("toy", module, None, sr, "cpu", kw.pop("autocast_dtype", None),
                                 None, num_slots, configs=[config(**kw)])
    if capture:
        r.capture()
    return r


def inputs(n, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [g.NodeInputs(1, {"x": torch.randn(1, WIDTH, generator=gen)}) for _ in range(n)]


def eager(module, rows):
    with torch.no_grad():
        return module.forward_batched(torch.cat([r.tensors["x"] for r in rows]))


def expected(runner, rows, graph_walk=None, fn=None):
    """What runner.run(rows, graph_walk) must return: the module's forward_batched (or fn) run
    eagerly over as many rows as the run computes over (its bucket's, or the real rows where it
    falls back to eager; runner_util)."""
    walk = graph_walk or runner.configs[0].capture_graph_walk
    x = torch.cat([r.tensors["x"][: r.seq_len] for r in rows])
    return eager_at(fn or runner.submodule.forward_batched, x,
                    run_rows(runner, walk, len(rows), x.shape[0]))


@pytest.fixture(scope="module")
def runner():
    return make_runner()


def test_buckets_in_capture_order(runner):
    assert [k.bs for k in runner.buckets()] == [8, 4, 2, 1]
    assert all(k.graph_walk == "decode" and k.num_tokens == k.bs for k in runner.buckets())
    assert runner.dropped_buckets == []
    assert runner.any_graphs and runner.captures_walk("decode")
    assert not runner.captures_walk("prefill")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8])
def test_replay_equals_eager_every_bucket_with_padded_rows(runner, n):
    rows = inputs(n, seed=n)
    lease = runner.lease_slot("decode", n, None, n)
    assert lease is not None and lease.bucket.bs >= n
    bs = lease.bucket.bs
    try:
        padded = runner.pad_inputs(lease, rows)
        assert len(padded) == bs
        assert all(r.seq_len == 0 for r in padded[n:])  # padding rows: length 0
        out = runner.run_forward(lease, runner._preprocess(padded))["output"]
        assert out.shape == (bs, WIDTH)
        x = torch.cat([row.tensors["x"] for row in rows])
        assert torch.equal(out[:n], eager_at(runner.submodule.forward_batched, x, bs))
    finally:
        runner.release(lease, n)


def test_run_returns_copies_of_the_real_rows(runner):
    a = runner.run(inputs(3, seed=3))["output"]
    b = runner.run(inputs(3, seed=4))["output"]
    assert a.shape == (3, WIDTH)
    assert torch.equal(a, expected(runner, inputs(3, seed=3)))  # G-19: not overwritten
    assert not torch.equal(a, b)


def test_outputs_are_the_slots_static_buffers(runner):
    lease = runner.lease_slot("decode", 2, 0, 2)
    o1 = runner.run_forward(lease, runner._preprocess(runner.pad_inputs(lease, inputs(2))))
    o2 = runner.run_forward(lease, runner._preprocess(runner.pad_inputs(lease, inputs(2, 9))))
    runner.release(lease, 2)
    assert o1["output"].data_ptr() == o2["output"].data_ptr()
    slot = runner.slot_for(lease)
    assert slot.static_outputs["output"].data_ptr() == o1["output"].data_ptr()


def test_lease_alternates_slots(runner):
    a = runner.lease_slot("decode", 4, None, 4)
    b = runner.lease_slot("decode", 4, None, 4)
    assert {a.slot, b.slot} == {0, 1}
    assert runner.lease_slot("decode", 4, 1, 4).slot == 1  # a reserved slot is passed back
    assert runner.num_slots == 2


def test_lease_on_one_slot_while_the_other_replays(runner):
    """Slot 0 is leased and replayed; slot 1 replays other inputs while slot 0's outputs are still
    held: each slot keeps its own static outputs (the double buffer)."""
    xa, xb = inputs(4, seed=21), inputs(4, seed=22)
    la = runner.lease_slot("decode", 4, 0, 4)
    lb = runner.lease_slot("decode", 4, 1, 4)
    try:
        oa = runner.run_forward(la, runner._preprocess(runner.pad_inputs(la, xa)))["output"]
        ob = runner.run_forward(lb, runner._preprocess(runner.pad_inputs(lb, xb)))["output"]
        assert oa.data_ptr() != ob.data_ptr()
        assert torch.equal(oa, eager(runner.submodule, xa))
        assert torch.equal(ob, eager(runner.submodule, xb))
    finally:
        runner.release(la, 4)
        runner.release(lb, 4)


def test_too_large_a_batch_runs_eager(runner):
    assert runner.lease_slot("decode", 9, None, 9) is None
    assert not runner.can_run("decode", 9, 9)
    assert runner.can_run("decode", 8, 8)
    assert runner.max_batch_size_for("decode") == 8
    rows = inputs(9, seed=5)
    assert torch.equal(runner.run(rows)["output"], expected(runner, rows))


def test_select_bucket_takes_the_tightest(runner):
    assert runner.select_bucket("decode", 3, 3).bs == 4
    assert runner.select_batched_bucket("decode", 5).bs == 8
    assert runner.select_bucket("decode", 3, 3, "other") is None  # G-16: another key misses


def test_padding_rows_are_negative_named_and_follow_the_real_rows(runner):
    lease = runner.lease_slot("decode", 4, 0, 4)
    slot = runner.slot_for(lease)
    assert len(slot.dummy_rids) == 4 and all(h < 0 for h in slot.dummy_rids)
    assert g.dummy_rid_name(slot.dummy_rids[0]).startswith("__cg_")
    ids = runner.step_ids(lease, [7, 9])
    assert ids[:2] == [7, 9] and ids[2:] == slot.dummy_rids[2:]
    meta = runner.step_metadata(lease, [7, 9], {7: "a", 9: "b"})
    assert meta[7] == "a" and meta[ids[3]].graph_walk == "decode"
    assert slot.config_idx == 0 and slot.static_input_keys == ("x",)
    runner.release(lease, 2)


def test_declare_inputs_for_is_cached(runner):
    """G-15: one list per bucket, shared."""
    lease = runner.lease_slot("decode", 2, 0, 2)
    a = runner.declare_inputs_for(lease)
    assert a is runner.declare_inputs_for(lease)
    assert len(a) == 2 and a[0].tensors["x"].shape[0] == 1


def test_release_refuses_a_bad_real_bs(runner):
    lease = runner.lease_slot("decode", 2, 0, 2)
    with pytest.raises(mstar_c.InvalidArgumentError):
        runner.release(lease, 3)
    runner.release(lease, 2)


def test_static_inputs_are_allocated_once_at_the_largest_bucket(runner):
    big = runner.slot_for(runner.lease_slot("decode", 8, 0, 8)).static_inputs["x"]
    small = runner.slot_for(runner.lease_slot("decode", 2, 1, 2)).static_inputs["x"]
    assert big.shape == (8, WIDTH) and small.shape == (2, WIDTH)
    assert big.data_ptr() == small.data_ptr()  # one buffer per config, narrowed per bucket


def test_zero_copy_staging_into_the_static_input(runner):
    lease = runner.lease_slot("decode", 4, 0, 4)
    rows = inputs(3, seed=31)
    view = runner.static_input(lease, "x", 3)
    view.copy_(torch.cat([r.tensors["x"] for r in rows]))
    out = runner.run_forward(lease, {"x": view})["output"]
    runner.release(lease, 3)
    x = torch.cat([row.tensors["x"] for row in rows])
    assert torch.equal(out[:3], eager_at(runner.submodule.forward_batched, x, 4))
    with pytest.raises(mstar_c.Error):
        runner.static_input(lease, "x", 5)  # past the bucket


def test_alias_walk_leases_the_capture_walk():
    """G-14"""
    r = make_runner(replay_graph_walks=["decode_alias"])
    lease = r.lease_slot("decode_alias", 2, None, 2)
    assert lease.bucket.graph_walk == "decode"
    rows = inputs(2, seed=41)
    assert torch.equal(r.run(rows, graph_walk="decode_alias")["output"],
                       expected(r, rows, "decode_alias"))


def test_failed_capture_leaves_nothing_behind_and_falls_back():
    """G-1, G-21: a capture that fails at bs 4 drops that bucket only; nothing of it stays (no
    replay record, pool bytes as without it); the smaller buckets still capture; a batch of 3
    replays on bs 8."""
    good = make_runner()
    bad = make_runner(Toy(fail_bs=4))
    assert bad.dropped_buckets == [g.BucketKey("decode", 4, 4, None)]
    assert bad.select_bucket("decode", 3, 3).bs == 8
    assert bad.select_bucket("decode", 2, 2).bs == 2
    assert bad._c._records() == 3 * 2  # 3 buckets x 2 slots, none for the failed one
    assert good._c._records() == 4 * 2
    assert bad.pool.stats()["allocated"] < good.pool.stats()["allocated"]
    rows = inputs(3, seed=51)
    assert torch.equal(bad.run(rows)["output"], expected(bad, rows))


def test_failed_capture_gives_its_pool_memory_back():
    """G-1: the bs 4 capture fails after its first output took pool memory; the pool holds what a
    runner that never planned bs 4 holds, and the buckets after it capture."""
    bad = make_runner(Toy(fail_bs=4, fail_late=True))
    assert bad.dropped_buckets == [g.BucketKey("decode", 4, 4, None)]
    twin = make_runner(capture=False)
    twin.prepare_for_capture()
    twin.step_runner.build_graph_buffers()
    twin.warmup_and_capture([k for k in twin.buckets() if k.bs != 4])
    assert bad.pool.stats()["allocated"] == twin.pool.stats()["allocated"]
    assert bad._c._records() == twin._c._records() == 3 * 2
    rows = inputs(2, seed=52)
    assert torch.equal(bad.run(rows)["output"], expected(bad, rows))


def test_failed_capture_keeps_the_module_exception_out_of_the_way():
    r = make_runner(Toy(fail_bs=8), capture=False)
    r.prepare_for_capture()
    r.step_runner.build_graph_buffers()
    r.warmup_and_capture(None)  # drops bs 8, raises nothing
    assert [k.bs for k in r.dropped_buckets] == [8]
    assert r.max_batch_size_for("decode") == 8  # G-20: the dropped largest still caps
    rows = inputs(3, seed=53)  # nothing of the failure is left to surface here
    assert torch.equal(r.run(rows)["output"], expected(r, rows))


def test_a_replay_that_raises_raises_from_run_forward():
    r = make_runner()
    r.submodule.fail_replay = True
    lease = r.lease_slot("decode", 2, 0, 2)
    with pytest.raises(ValueError, match="injected replay failure"):
        r.run_forward(lease, r._preprocess(r.pad_inputs(lease, inputs(2))))
    r.submodule.fail_replay = False
    out = r.run_forward(lease, r._preprocess(r.pad_inputs(lease, inputs(2))))["output"]
    r.release(lease, 2)
    x = torch.cat([row.tensors["x"] for row in inputs(2)])
    assert torch.equal(out[:2], eager_at(r.submodule.forward_batched, x, lease.bucket.bs))


def test_replay_reruns_the_module_from_the_graph(runner):
    before = runner.submodule.calls
    runner.run(inputs(2, seed=61))
    assert runner.submodule.calls == before + 1


def test_throwaway_captures_leave_the_captured_replays(runner):
    # A throwaway capture runs under the lease of the bucket's captured slot; its replay record
    # once replaced that slot's, which the live graph still called: the next replay crashed.
    rows = inputs(8, 1)
    assert torch.equal(runner.run(rows)["output"], expected(runner, rows))
    held = runner._c._records()
    key = tuple(g.BucketKey("decode", 8, 8, None))
    assert runner._c.capture_throwaway(key)["nodes"] >= 1
    runner.size_captures()  # a throwaway of every walk's largest bucket
    assert runner._c._records() == held  # the throwaways' records are gone, the live ones kept
    for seed in range(2, 6):
        rows = inputs(8, seed)
        assert torch.equal(runner.run(rows)["output"], expected(runner, rows))


def test_drop_bucket_forgets_it():
    r = make_runner()
    r.drop_bucket(g.BucketKey("decode", 2, 2))
    assert r.select_bucket("decode", 2, 2).bs == 4
    assert g.BucketKey("decode", 2, 2) in r.dropped_buckets
    assert r._c._records() == 3 * 2


def test_planned_subset_captures_only_those():
    r = make_runner(capture=False)
    r.prepare_for_capture()
    r.step_runner.build_graph_buffers()
    r.warmup_and_capture([g.BucketKey("decode", 8, 8), g.BucketKey("decode", 2, 2)])
    assert sorted(k.bs for k in r.dropped_buckets) == [1, 4]
    assert r.select_bucket("decode", 1, 1).bs == 2


def test_autocast_dtype_applies_to_warmup_capture_and_replay():
    r = make_runner(autocast_dtype=torch.bfloat16)
    rows = inputs(3, seed=71)
    out = r.run(rows)["output"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = expected(r, rows)
    assert torch.equal(out, want)
    assert not torch.equal(out, eager(r.submodule, rows))  # the bf16 linear shows


def test_no_autocast_shuts_out_an_ambient_one(runner):
    rows = inputs(2, seed=72)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = runner.run(rows)["output"]
    assert out.dtype == torch.float32


class TwoOut(torch.nn.Module):
    def forward(self, x):  # no forward_batched: the module itself is called
        return {"double": x * 2, "sum": x.sum(dim=1, keepdim=True)}

    def make_node_input(self, walk, n):
        return {"x": torch.zeros(n, 4)}


def test_dict_outputs_and_the_module_template_rows():
    sr = g.StepRunner()
    cfg = g.AcceleratorGraphConfig("w", capture_batch_sizes=[2, 4])
    r = g.AcceleratorGraphRunner("two", TwoOut(), None, sr, "cpu", None, None, 1, configs=[cfg])
    r.capture()
    rows = [g.NodeInputs(1, {"x": torch.full((1, 4), float(i))}) for i in range(3)]
    out = r.run(rows, graph_walk="w")
    assert torch.equal(out["double"], torch.tensor([[0.0] * 4, [2.0] * 4, [4.0] * 4]))
    assert torch.equal(out["sum"], torch.tensor([[0.0], [4.0], [8.0]]))


def test_packed_config_keys_buckets_by_tokens():
    sr = g.StepRunner()
    cfg = g.AcceleratorGraphConfig("prefill", kind="packed", capture_batch_sizes=[1, 2],
                                   capture_token_lengths=[8, 16],
                                   make_node_input=lambda n: {"x": torch.zeros(n, WIDTH)})
    r = g.AcceleratorGraphRunner("packed", Toy(), None, sr, "cpu", None, None, 1, configs=[cfg])
    r.capture()
    keys = r.buckets()
    assert {(k.bs, k.num_tokens) for k in keys} == {(1, 8), (1, 16), (2, 8), (2, 16)}
    lease = r.lease_slot("prefill", 2, None, 11)
    assert lease.bucket.num_tokens == 16 and r.is_packed(lease)
    assert r.select_batched_bucket("prefill", 2) is None  # packed: needs the tokens
    rows = [g.NodeInputs(5, {"x": torch.randn(5, WIDTH)}), g.NodeInputs(6, {"x": torch.randn(6,
                                                                                 WIDTH)})]
    out = r.run(rows, graph_walk="prefill")["output"]
    # the rows of a packed output are tokens: the first 11 are the real ones
    assert out.shape[0] == 2  # run() cuts to the real rows: a packed caller reads tokens itself
    full = r.run_forward(lease, r._preprocess(r.pad_inputs(lease, rows)))["output"]
    r.release(lease, 2)
    x = torch.cat([row.tensors["x"] for row in rows])
    assert torch.equal(full[:11], eager_at(r.submodule.forward_batched, x,
                                           lease.bucket.num_tokens))


def test_key_info_is_part_of_the_bucket():
    r = make_runner(additional_key_info="cfg")
    assert all(k.cg_key_info == "cfg" for k in r.buckets())
    assert r.lease_slot("decode", 2, None, 2) is None  # G-16: no key, no bucket
    assert r.lease_slot("decode", 2, None, 2, "cfg").bucket.cg_key_info == "cfg"


def test_no_configs_is_refused():
    with pytest.raises(ValueError):
        g.AcceleratorGraphRunner("x", Toy(), None, g.StepRunner(), "cpu", None, None, 1)


def test_bad_config_is_refused_with_the_library_error():
    with pytest.raises(mstar_c.InvalidArgumentError):
        make_runner(capture=False, capture_batch_sizes=[0])


def test_closed_runner_raises():
    r = make_runner(capture=False)
    r.close()
    with pytest.raises(mstar_c.ClosedError):
        r.lease_slot("decode", 1)


def test_reference_module_path_and_helpers():
    import mstar_c.engine.accelerator_graph_runner as agr
    assert agr.AcceleratorGraphRunner is g.AcceleratorGraphRunner
    assert agr.AcceleratorGraphRunner.CAPTURE_BATCH_SIZES == [1, 2, 4, 8, 16, 32, 64]
    assert agr.AcceleratorGraphRunner.NUM_WARMUP == 2
    assert g.compile_kwargs(None) == {}
    assert g.compile_kwargs("default")["mode"] == "default"
    with pytest.raises(ValueError):
        g.compile_kwargs("reduce-overhead")  # builds graphs of its own
    with g.autocast_scope(torch.bfloat16, "cpu"):
        assert torch.is_autocast_cpu_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16), g.autocast_scope(None, "cpu"):
        assert not torch.is_autocast_cpu_enabled()
    h = g.dummy_rid_handle("__cg_test_row__")
    assert h < 0 and g.dummy_rid_handle("__cg_test_row__") == h
    assert g.dummy_rid_name(h) == "__cg_test_row__"
    assert g.dummy_metadata([h], "w")[h].graph_walk == "w"


def test_dummy_row_pool_over_a_runner(runner):
    pool = g.DummyRowPool("toy", runner.step_runner, None, runner=runner)
    rows = pool.ensure("extra", 3)
    assert rows == pool.handles("extra", 3) and all(h < 0 for h in rows)
    pool.reset(rows, free=True)
    pool.release_all()


def _graph_runners():
    import gc
    return {id(o) for o in gc.get_objects() if type(o) is mstar_c._mstar._GraphRunner}


def test_a_dropped_runner_is_freed():
    """Nothing keeps a runner alive once its user lets go: the replay records, the cached
    declare rows and the tensors kept over its static outputs view its memory without a cycle
    the collector cannot see."""
    import gc
    r = make_runner()
    r.run(inputs(2))
    r.declare_inputs_for(r.lease_slot("decode", 2, 0, 2))
    c = id(r._c)
    assert c in _graph_runners()
    del r
    gc.collect()
    assert c not in _graph_runners()


def test_a_held_output_keeps_its_runner():
    """An output tensor the caller holds keeps the runner, and so its memory, after the runner
    is dropped; the runner goes with the tensor's last holder (a view of it included)."""
    import gc
    r = make_runner()
    rows = inputs(2)
    lease = r.lease_slot("decode", 2, 0, 2)
    out = r.run_forward(lease, r._preprocess(r.pad_inputs(lease, rows)))["output"]
    r.release(lease, 2)
    want = eager(r.submodule, rows)
    view = out[:2]
    c = id(r._c)
    del r, out
    gc.collect()
    assert c in _graph_runners()
    assert torch.equal(view, want)
    del view
    gc.collect()
    assert c not in _graph_runners()


def test_a_step_reuses_its_lease_and_output_tensors(runner):
    """lease_slot hands out one SlotLease object per lease, and run_forward a new dict of the
    same tensors for the same slot while its outputs stay where they are; a capture again makes
    new ones. What a caller does to the dict does not reach the next step's."""
    a = runner.lease_slot("decode", 2, 0, 2)
    assert runner.lease_slot("decode", 2, 0, 2) is a
    assert runner.lease_slot("decode", 2, 1, 2) is not a
    assert runner.lease_slot("decode", 2, 1, 2) == (1, a.bucket)
    pre = runner._preprocess(runner.pad_inputs(a, inputs(2)))
    first = runner.run_forward(a, pre)
    first_out = first["output"]
    first.clear()
    second = runner.run_forward(a, pre)
    assert second is not first and second["output"] is first_out
    # a plain tuple naming the same lease gets the same tensors
    assert runner.run_forward((0, *a.bucket), pre)["output"] is first_out
    other = runner.lease_slot("decode", 2, 1, 2)
    assert runner.run_forward(other, pre)["output"] is not first_out
    runner.release(a, 2)
    runner.warmup_and_capture()
    again = runner.run_forward(a, pre)["output"]
    assert again is not first_out and torch.equal(again, first_out)
    runner.release(a, 2)


def test_step_methods_take_keywords_and_refuse_bad_arguments(runner):
    """lease_slot, run_forward and release parse their arguments in C (fastcall): by position or
    by name as their signatures say, a wrong type, a missing, unknown or extra argument is a
    TypeError, and launch_started_event is set on success and on failure."""
    import threading
    a = runner.lease_slot(graph_walk="decode", bs=2, slot=0, num_tokens=2)
    assert a is runner.lease_slot("decode", 2, 0, 2)
    pre = runner._preprocess(runner.pad_inputs(a, inputs(2)))
    started = threading.Event()
    out = runner.run_forward(lease=a, preprocessed=pre, launch_started_event=started)
    assert started.is_set() and out["output"].shape[0] == 2
    runner.release(lease=a, real_bs=2)
    for call in (lambda: runner.lease_slot(1, 2), lambda: runner.lease_slot("decode"),
                 lambda: runner.lease_slot("decode", 2, foo=1),
                 lambda: runner.lease_slot("decode", 2, None, 2, None, 9),
                 lambda: runner.run_forward(a), lambda: runner.run_forward(a, pre, None, None, 1),
                 lambda: runner.release(a), lambda: runner.release((0,), 2),
                 lambda: runner.release(a, 2, real_bs=2)):
        with pytest.raises(TypeError):
            call()
    failed = threading.Event()
    with pytest.raises(TypeError):
        runner.run_forward((0,), pre, None, failed)
    assert failed.is_set()
