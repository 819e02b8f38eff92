"""The piecewise runner for torch regions (mstar_c.graphs.PiecewiseAcceleratorGraphRunner) on the
host backend: shapes, padding (zeroed tails), capture failures, dropped shapes, leases, slots,
the region's step and sizing, with a torch CPU callable as the C piecewise runner's region. Each
test names the hard case of the graph-runner spec (G-n) it covers where there is one."""
import pytest
import torch

import mstar_c
from mstar_c import graphs as g
from runner_util import eager_at, region_rows

# every comparison here must hold at one row count on any torch (conftest.rows_show)
pytestmark = pytest.mark.usefixtures("rows_show")

W = 8
PAGES, PAGE, MAXLEN = 64, 4, 32


class Region:
    """silu(linear(x)) + x over the static buffer "x"; fails the capture (not a warm-up) of
    bs `fail_bs` (late: after its first output took pool memory), and a replay while
    `fail_replay` is set. Counts its calls."""

    def __init__(self, fail_bs=None, fail_late=False):
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(W, W)
        self.fail_bs, self.fail_late = fail_bs, fail_late
        self.fail_replay = False
        self.calls = 0
        self.declared = []

    def eager(self, x):
        with torch.no_grad():
            return torch.nn.functional.silu(self.lin(x)) + x

    def capture_fn(self, call):
        self.calls += 1
        x = call.static_inputs["x"]
        ctx = call.context or {}
        if ctx.get("capturing") and call.shape.bs == self.fail_bs:
            if self.fail_late == "reshape":  # the region runs; its output then fails the check
                return {"x": self.eager(x)[:1]}
            if self.fail_late:
                return {"x": self.eager(x), "bad": None}
            raise RuntimeError(f"injected capture failure at bs {call.shape.bs}")
        if ctx.get("replaying") and self.fail_replay:
            raise ValueError("injected replay failure")
        return self.eager(x)

    def make_static_inputs(self, shape):
        return {"x": torch.zeros(shape.total_tokens, W)}

    def declare_step(self, ids, seq_lens, step):
        self.declared.append((list(ids), list(seq_lens)))
        for rid, n in zip(ids, seq_lens):
            step.add_segment(rid, 0, n)
        step.set_resource("kv")
        step.set_resource("pos")
        return True


def config(region, **kw):
    kw.setdefault("capture_batch_sizes", [4, 1, 2])  # G-22: unsorted, sorted by the runner
    return g.PiecewiseConfig(region.capture_fn, region.make_static_inputs, **kw)


def step_runner():
    sr = g.StepRunner("cpu")
    sr.add_kv_cache("kv", num_pages=PAGES, page_size=PAGE, max_seq_len=MAXLEN)
    sr.add_positions("pos")
    return sr


def make(region=None, num_slots=2, capture=True, planned=None, sr=None, **kw):
    region = region or Region()
    sr = sr or step_runner()
    autocast = kw.pop("autocast_dtype", None)
    r = g.PiecewiseAcceleratorGraphRunner("blk", config(region, **kw), None, sr, "cpu", autocast,
                                          num_slots)
    r.region = region
    if capture:
        r.prepare_for_capture()
        sr.build_graph_buffers()
        r.warmup_and_capture(planned)
    return r


def xs(n, seed=1):
    return torch.randn(n, W, generator=torch.Generator().manual_seed(seed))


def expected(runner, region, x, bs=None, total_tokens=None):
    """What a run of x (bs rows, default one per row of x) must return: the region eagerly over
    as many rows as its replay computes over (the shape's; runner_util)."""
    return eager_at(region.eager, x, region_rows(runner, bs or x.shape[0], total_tokens))


def key(bs, tokens=None):
    return g.BucketKey("__piecewise__", bs, bs if tokens is None else tokens, "blk")


# ---- shapes and replay ------------------------------------------------------------------------

def test_shapes_are_piecewise_bucket_keys_largest_first():
    r = make(capture=False)
    assert r.buckets() == [key(4), key(2), key(1)]
    specs = r.prepare_for_capture()
    assert [(s.bucket.bs, s.slot) for s in specs] == [(4, 0), (4, 1), (2, 0), (2, 1), (1, 0), (1, 1)]
    assert not r.any_graphs


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_replay_equals_eager_for_each_shape_with_padding(n):
    """Replay of the padded shape gives the eager rows for the real ones (3 pads to 4)."""
    r = make()
    assert r.any_graphs and r.dropped_shapes == []
    x = xs(n, seed=n)
    out = r.run({"x": x}, real_bs=n)
    assert out.real_len == n
    assert torch.equal(out["x"], expected(r, r.region, x))


def test_replay_reenters_python_over_the_static_buffers():
    """A host replay runs the region again over the static input, so new data gives new output."""
    r = make()
    calls = r.region.calls
    a, b = xs(2, seed=3), xs(2, seed=4)
    assert torch.equal(r.run({"x": a}, real_bs=2)["x"], r.region.eager(a))
    assert torch.equal(r.run({"x": b}, real_bs=2)["x"], r.region.eager(b))
    assert r.region.calls == calls + 2


def test_padding_rows_read_zeros_not_the_last_step():
    """Staging zeroes the tail: a bs-3 batch after a bs-4 one on the same shape leaves row 3 of
    the static input zero, and its output row is the region of zeros."""
    r = make()
    r.run({"x": xs(4, seed=5)}, real_bs=4)
    r.run({"x": xs(3, seed=6)}, real_bs=3)
    data = r.slot_for(r.lease_slot(3))
    assert torch.equal(data.static_inputs["x"][3], torch.zeros(W))
    assert torch.equal(data.static_outputs["x"], r.region.eager(data.static_inputs["x"]))


def test_packed_region_replays_the_real_tokens():
    """PACKED: 2 rows of 3 + 2 tokens pad to the (2, 8) shape; real_len is the token count."""
    r = make(total_tokens=[8, 4], capture_batch_sizes=[2, 1])
    assert (2, 8) in [(k.bs, k.num_tokens) for k in r.buckets()]
    assert r.can_run(2, 5) and not r.can_run(2, 9) and not r.can_run(2)
    x = xs(5, seed=7)
    out = r.run({"x": x}, request_ids=[10, 11], seq_lens=[3, 2])
    assert out.real_len == 5
    assert torch.equal(out["x"], expected(r, r.region, x, 2, 5))


def test_output_views_and_clones():
    r = make()
    a = r.run({"x": xs(2, seed=8)}, real_bs=2)
    kept, view = a["x"], a.get_view("x")
    assert a.keys() == ["x"] and "x" in a and "y" not in a and a.get("y") is None
    r.run({"x": xs(2, seed=9)}, real_bs=2)
    assert torch.equal(kept, r.region.eager(xs(2, seed=8)))  # a clone survives the next run
    assert torch.equal(view, r.region.eager(xs(2, seed=9)))  # a view is overwritten by it


def test_autocast_dtype_applies_around_capture_and_replay():
    region = Region()
    region.capture_fn = lambda call: region.lin(call.static_inputs["x"])
    r = make(region, autocast_dtype=torch.bfloat16)
    out = r.run({"x": xs(2, seed=10)}, real_bs=2)
    assert out["x"].dtype == torch.bfloat16
    assert make(Region()).run({"x": xs(2)}, real_bs=2)["x"].dtype == torch.float32


# ---- failures and dropped shapes ----------------------------------------------------------------

def test_failed_capture_leaves_nothing_behind():
    """G-1: a capture failing at bs 2 drops that shape only: no replay record, pool bytes as a
    runner that never planned it, the others capture."""
    bad = make(Region(fail_bs=2))
    assert bad.dropped_shapes == [(2, 2)]
    assert bad._c._records() == 2 * 2
    twin = make(planned=[key(4), key(1)])
    assert bad.pool.stats()["allocated"] == twin.pool.stats()["allocated"]
    assert bad._c._records() == twin._c._records()
    x = xs(4, seed=11)
    assert torch.equal(bad.run({"x": x}, real_bs=4)["x"], bad.region.eager(x))


def test_failed_capture_after_taking_pool_memory_gives_it_back():
    """G-1: the bs 2 capture fails after its first output took pool memory."""
    bad = make(Region(fail_bs=2, fail_late=True))
    twin = make(planned=[key(4), key(1)])
    assert bad.dropped_shapes == [(2, 2)]
    assert bad.pool.stats()["allocated"] == twin.pool.stats()["allocated"]


def test_capture_failing_after_the_region_ran_keeps_no_replay_record():
    """G-1: the bs 2 capture records its host replay, then fails (its output's shape differs from
    the warm-up's); the shape is dropped and its record goes with it."""
    bad = make(Region(fail_bs=2, fail_late="reshape"))
    assert bad.dropped_shapes == [(2, 2)]
    assert bad._c._records() == 2 * 2
    x = xs(1, seed=17)
    assert torch.equal(bad.run({"x": x}, real_bs=1)["x"], bad.region.eager(x))


def test_dropped_shape_runs_eager_with_no_larger_fallback():
    """G-21: a dropped bs 2 is not served by bs 4; the region runs eager (can_run false, run
    refuses)."""
    r = make(Region(fail_bs=2))
    assert not r.can_run(2) and r.lease_slot(2) is None
    assert r.can_run(3) and r.can_run(1)
    with pytest.raises(mstar_c.NotFoundError):
        r.run({"x": xs(2)}, real_bs=2)


def test_planned_out_and_dropped_shapes():
    """Shapes planned out are dropped; drop_shape (another rank dropped it) forgets a captured one
    and its replay records."""
    r = make(planned=[key(4)])
    assert r.dropped_shapes == [(2, 2), (1, 1)]
    assert not r.can_run(1) and r.can_run(4)
    r.drop_shape(key(4))
    assert not r.any_graphs and r._c._records() == 0
    assert r.dropped_shapes == [(2, 2), (1, 1), (4, 4)] and not r.can_run(4)


def test_replay_failure_is_raised_by_run():
    r = make()
    r.region.fail_replay = True
    with pytest.raises(ValueError, match="injected replay failure"):
        r.run({"x": xs(2)}, real_bs=2)
    r.region.fail_replay = False
    x = xs(2, seed=12)
    assert torch.equal(r.run({"x": x}, real_bs=2)["x"], r.region.eager(x))


def test_bad_run_arguments():
    r = make()
    with pytest.raises(mstar_c.Error):
        r.run({"nope": xs(2)}, real_bs=2)
    with pytest.raises(mstar_c.Error):
        r.run({"x": xs(2)}, request_ids=[1, 2], seq_lens=[1])
    with pytest.raises(mstar_c.Error):
        r.run({"x": xs(2)})  # no real_bs, ids or lengths


# ---- leases, slots, the region's step -----------------------------------------------------------

def test_lease_slot_and_set_slot():
    r = make()
    lease = r.lease_slot(3)
    assert lease.slot == 0 and lease.bucket == key(4)
    r.set_slot(1)
    assert r.lease_slot(3).slot == 1
    with pytest.raises(mstar_c.Error):
        r.set_slot(2)
    assert r.lease_slot(5) is None


def test_each_slot_replays_its_own_buffers():
    """A run on slot 1 stages into slot 1's buffers; slot 0's keep the last slot-0 step."""
    r = make()
    a, b = xs(4, seed=13), xs(4, seed=14)
    r.run({"x": a}, real_bs=4)
    r.set_slot(1)
    assert torch.equal(r.run({"x": b}, real_bs=4)["x"], r.region.eager(b))
    s0 = r.slot_for(g.SlotLease(0, key(4)))
    s1 = r.slot_for(g.SlotLease(1, key(4)))
    assert torch.equal(s0.static_inputs["x"], a) and torch.equal(s1.static_inputs["x"], b)
    assert len(s0.dummy_rids) == 4 and all(h < 0 for h in s0.dummy_rids)


def test_can_lease_and_lease_before_step():
    r = make()
    assert r.can_lease([]) and not r.lease_before_step
    r2 = make(can_lease=lambda inputs: len(inputs) < 2, lease_before_step=True)
    assert r2.lease_before_step and r2.can_lease([1]) and not r2.can_lease([1, 2])


def test_run_declares_real_ids_then_padding_rows():
    """run declares the region's step over the real ids then the shape's padding rows, with the
    replay lengths (BATCHED: every row its seq_len)."""
    region = Region()
    r = make(region, declare_step=region.declare_step)
    region.declared.clear()
    for rid in (7, 8, 9):
        r.step_runner.ingest_request(rid)
    r.run({"x": xs(3)}, request_ids=[7, 8, 9])
    ids, lens = region.declared[-1]
    assert ids[:3] == [7, 8, 9] and len(ids) == 4 and ids[3] < 0 and lens == [1, 1, 1, 1]


def test_lease_before_step_only_stages_and_replays():
    region = Region()
    r = make(region, declare_step=region.declare_step, lease_before_step=True)
    region.declared.clear()
    x = xs(2, seed=15)
    assert torch.equal(r.run({"x": x}, request_ids=[1, 2])["x"], region.eager(x))
    assert region.declared == []


def test_region_step_plans_and_commits_the_real_rows():
    """run drives the region's own step through admit, plan and commit: the real rows take their
    KV pages and advance their positions; a capture (one shape failing) takes no pages."""
    region = Region(fail_bs=2)
    sr = step_runner()
    free = sr.kv_free_pages("kv")
    r = make(region, sr=sr, declare_step=region.declare_step)
    assert r.dropped_shapes == [(2, 2)]
    assert sr.kv_free_pages("kv") == free
    for rid in (1, 2, 3):
        sr.ingest_request(rid)
    r.run({"x": xs(3)}, request_ids=[1, 2, 3])
    assert sr.kv_free_pages("kv") == free - 3
    assert [sr.position("pos", rid) for rid in (1, 2, 3)] == [1, 1, 1]


# ---- sizing ---------------------------------------------------------------------------------------

def test_size_captures_and_lent_captures():
    r = make(capture=False)
    r.prepare_for_capture()
    r.step_runner.build_graph_buffers()
    with pytest.raises(mstar_c.Error):
        r.size_lent_captures(True)
    costs = r.size_captures()
    assert list(costs) == [key(4), key(2), key(1)]
    assert all(c.peak >= 0 and c.slots == 2 for c in costs.values())
    assert costs[key(4)].graph is not None
    lent = r.size_lent_captures(True)
    assert all(c.graph is not None for c in lent.values())
    r.warmup_and_capture()
    x = xs(3, seed=16)
    assert torch.equal(r.run({"x": x}, real_bs=3)["x"], expected(r, r.region, x))


def test_size_captures_marks_a_failing_shape_unplannable():
    r = make(Region(fail_bs=4), capture=False)
    r.prepare_for_capture()
    r.step_runner.build_graph_buffers()
    costs = r.size_captures()
    assert costs[key(4)].graph is None


def test_sizing_after_the_captures_is_refused():
    """Sizing belongs before warmup_and_capture (startup's order) and is refused after it."""
    r = make()
    with pytest.raises(mstar_c.Error, match="before"):
        r.size_captures()
    x = xs(2, seed=18)
    assert torch.equal(r.run({"x": x}, real_bs=2)["x"], r.region.eager(x))


def test_two_regions_on_one_pool_keep_each_others_outputs():
    """G-18: regions A and B of one node capture into its one pool; B's replay leaves A's output
    view intact (static outputs live outside the pool)."""
    sr = step_runner()
    pool = g.GraphPool(sr, "node")
    ra, rb = Region(), Region()
    rb.lin = torch.nn.Linear(W, W)
    a = g.PiecewiseAcceleratorGraphRunner("a", config(ra), None, sr, "cpu", None, 1,
                                          memory_pool=pool)
    b = g.PiecewiseAcceleratorGraphRunner("b", config(rb), None, sr, "cpu", None, 1,
                                          memory_pool=pool)
    a.prepare_for_capture()
    b.prepare_for_capture()
    sr.build_graph_buffers()
    a.warmup_and_capture()
    b.warmup_and_capture()
    assert a.pool is b.pool and a.any_graphs and b.any_graphs
    x, y = xs(3, seed=30), xs(3, seed=31)
    view = a.run({"x": x}, real_bs=3).get_view("x")
    assert torch.equal(b.run({"x": y}, real_bs=3)["x"], expected(b, rb, y))
    assert torch.equal(view, expected(a, ra, x))


def test_a_trim_of_the_shared_pool_keeps_the_replays():
    """The node's pool is shared with its other runners, any of which may trim it: the blocks a
    capture freed go back, and a host replay must not write them (it crashed in torch's copy_
    while the replay wrote the capture's scratch outputs)."""
    r = make()
    r.pool.trim()
    for n in (1, 2, 3, 4):
        x = xs(n, seed=20 + n)
        assert torch.equal(r.run({"x": x}, real_bs=n)["x"], expected(r, r.region, x))


def test_startup_captures_a_runner_and_its_region_together():
    """capture_startup takes a node's whole-forward runner and its region (one pool): both are
    sized, planned and captured; a region shape failing its capture is dropped, the rest replay."""
    sr = step_runner()
    pool = g.GraphPool(sr, "node")
    lin = torch.nn.Linear(W, W)
    whole = g.AcceleratorGraphRunner(
        "node", lin, None, sr, "cpu", None, None, 1, pool=pool,
        configs=[g.AcceleratorGraphConfig("decode", capture_batch_sizes=[1, 2],
                                          make_node_input=lambda n: {"input": torch.zeros(n, W)})])
    region = Region(fail_bs=2, fail_late="reshape")  # fails after its replay was recorded
    r = g.PiecewiseAcceleratorGraphRunner("blk", config(region), None, sr, "cpu", None, 1,
                                          memory_pool=pool)
    report = g.capture_startup(sr, [whole, r])
    assert report["buckets"] == 2 + 3 and report["captured"] == 2 + 2
    assert whole.any_graphs and r.dropped_shapes == [(2, 2)]
    assert r._c._records() == 2
    x = xs(3, seed=40)
    assert torch.equal(r.run({"x": x}, real_bs=3)["x"], expected(r, region, x))


def test_standalone_captures_say_why_they_are_not_reached():
    with pytest.raises(NotImplementedError, match="runner"):
        g.capture_into_graph(lambda: None, None, "cpu", None)
    with pytest.raises(NotImplementedError, match="runner"):
        g.capture_with_static_outputs(lambda: None, {}, None, "cpu", None)
