"""Capture planning, required graphs and rank agreement for torch modules (mstar_c.graphs over
mstar/planner.h): sizing a torch module's buckets, plan_captures under a budget, startup dropping
what the plan leaves out, MSTAR_REQUIRE_CUDA_GRAPHS, and two ranks over a gloo group agreeing on
a drop."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mstar_c
from mstar_c import graphs as g

from test_graph_runner import Toy, expected, inputs, make_runner

# every comparison here must hold at one row count on any torch (conftest.rows_show)
pytestmark = pytest.mark.usefixtures("rows_show")

MiB = 1 << 20


def cost(peak, graph, kept, slots=1, outside=0, executable=None, config_idx=0):
    return g.CaptureCost(peak, graph, kept, slots, outside, executable, config_idx)


def key(bs, walk="w"):
    return g.BucketKey(walk, bs, bs)


def test_plan_keeps_the_cheapest_while_the_floor_fits():
    """G-28: the pool model, kept + the largest extra, through the Python conversions."""
    costs = {key(1): cost(10, 100, 20), key(2): cost(10, 100, 30), key(4): cost(50, 100, 40)}
    # floor 50; b1: 20 + 80 = 100; b2: + 30 (its extra 70 fits under 80); b4: + 40
    plan = g.plan_captures({"p": costs}, free=50 + 100 + 30)
    assert plan.floor == 50
    assert plan.buckets["p"] == {key(1), key(2)}
    assert plan.predicted["p"] == 130
    assert g.plan_captures({"p": costs}, free=50 + 170).buckets["p"] == set(costs)
    assert g.plan_captures({"p": costs}, free=149).buckets["p"] == set()


def test_plan_stops_at_the_first_candidate_that_does_not_fit():
    costs = {key(1): cost(0, 100, 10), key(2): cost(0, 300, 300), key(4): cost(0, 110, 110)}
    # ascending: b1 (100), b4 (10+... 110 -> pool_add 110), b2 (300): stops at b2
    plan = g.plan_captures({"p": costs}, free=100 + 110 + 50)
    assert plan.buckets["p"] == {key(1), key(4)}


def test_unsized_buckets_are_never_planned():
    costs = {key(1): cost(0, None, 0), key(2): cost(0, 10, 10)}
    assert g.plan_captures({"p": costs}, free=1 << 40).buckets["p"] == {key(2)}


def test_executable_credit_and_reusable_bound():
    em = g.ExecutableMemory(per_node=1.0, held=100)
    costs = {key(1): cost(0, 10, 10, outside=60, executable=em),
             key(2): cost(0, 10, 10, outside=60, executable=em)}
    plan = g.plan_captures({"p": costs}, free=20 + 20)  # the held copies pay 100 of 120
    assert plan.buckets["p"] == set(costs) and plan.outside["p"] == 20
    bounded = g.plan_captures({"p": costs}, free=20 + 20, reusable=0)
    assert bounded.buckets["p"] == set()


def test_bad_costs_are_refused():
    with pytest.raises(mstar_c.InvalidArgumentError):
        g.plan_captures({"p": {key(1): cost(0, 10, 20)}}, free=100)  # kept > graph
    with pytest.raises(mstar_c.InvalidArgumentError):
        g.plan_captures({"p": {key(1): cost(0, 10, 5, slots=0)}}, free=100)


def sized(module=None):
    r = make_runner(module, capture=False)
    r.prepare_for_capture()
    r.step_runner.build_graph_buffers()
    return r, r.size_captures()


def test_size_captures_measures_a_torch_module():
    r, costs = sized()
    assert set(costs) == set(r.buckets())
    for k, c in costs.items():
        assert c.graph is not None and c.graph >= c.kept > 0  # outputs stay in the pool
        assert c.slots == 2 and c.peak > 0
        assert c.executable is not None and c.executable.per_node is None  # host: nothing
    # a walk's buckets get its largest's capture until lent sizing measures each
    assert len({(c.graph, c.kept) for c in costs.values()}) == 1
    lent = r.size_lent_captures(True)
    assert lent[g.BucketKey("decode", 1, 1)].kept <= lent[g.BucketKey("decode", 8, 8)].kept
    assert costs[g.BucketKey("decode", 1, 1)].peak < costs[g.BucketKey("decode", 8, 8)].peak
    assert r.pool.stats()["allocated"] == 0  # throwaway graphs are gone
    r.warmup_and_capture(None)
    rows = inputs(5)
    assert torch.equal(r.run(rows)["output"], expected(r, rows))


def test_size_captures_marks_an_unwarmable_bucket():
    class Picky(Toy):
        def forward_batched(self, x):
            if x.shape[0] == 2:
                raise RuntimeError("no bs 2")
            return super().forward_batched(x)
    r, costs = sized(Picky())
    assert costs[g.BucketKey("decode", 2, 2)].graph is None
    assert costs[g.BucketKey("decode", 4, 4)].graph is not None


def test_startup_under_a_budget_drops_what_the_planner_drops():
    """plan_captures over a torch module's sized costs, and the startup that plans under a memory
    budget, leave out the same buckets."""
    twin, _ = sized()
    lent = twin.size_lent_captures(True)
    # What startup holds besides the graphs: a budget's free memory as startup reads it.
    probe = make_runner(capture=False)
    probe.step_runner.set_memory_budget(256 * MiB)
    held = 256 * MiB - probe.capture()["free_bytes"]
    # The smallest free memory under which the planner keeps exactly two of the four buckets.
    free = max(c.peak for c in lent.values())
    while len(g.plan_captures({"toy": lent}, free).buckets["toy"]) < 2:
        free += 256
    r = make_runner(capture=False)
    r.step_runner.set_memory_budget(held + free)
    report = r.capture()
    captured = set(r.buckets()) - set(r.dropped_buckets)
    # the plan of the sizes startup saw (lent sizing: some bucket was left out)
    assert report["resized"]
    plan = g.plan_captures({"toy": lent}, report["free_bytes"])
    assert captured == plan.buckets["toy"]
    assert set(r.dropped_buckets) == set(r.buckets()) - plan.buckets["toy"]
    assert report["planned"] == len(captured) == report["captured"]
    rows = inputs(3)
    assert torch.equal(r.run(rows)["output"], expected(r, rows))  # a replay or eager, as planned


def test_fail_if_graphs_required(monkeypatch):
    monkeypatch.delenv("MSTAR_REQUIRE_CUDA_GRAPHS", raising=False)
    g.fail_if_graphs_required(["decode[bs=4,tokens=4]"])  # logged only
    monkeypatch.setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "1")
    g.fail_if_graphs_required([])
    with pytest.raises(mstar_c.StateError, match=r"decode\[bs=4,tokens=4\]"):
        g.fail_if_graphs_required([g.BucketKey("decode", 4, 4)])
    monkeypatch.setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "maybe")
    with pytest.raises(mstar_c.InvalidArgumentError):
        g.fail_if_graphs_required(["x"])


def test_startup_with_graphs_required_fails_on_a_dropped_bucket(monkeypatch):
    monkeypatch.setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "1")
    r = make_runner(Toy(fail_bs=4), capture=False)
    with pytest.raises(mstar_c.StateError, match=r"decode\[bs=4,tokens=4\]"):
        r.capture()
    monkeypatch.delenv("MSTAR_REQUIRE_CUDA_GRAPHS")
    ok = make_runner(capture=False)
    assert ok.capture()["captured"] == 4


def test_agree_alone_and_over_a_single_group():
    assert g.agree_across_ranks(None, [3, 1], "cpu", torch.amin) == [3, 1]
    one = g.RankGroup.single()
    assert (one.rank, one.size) == (0, 1)
    assert g.agree_across_ranks(one, [3, 1], "cpu", torch.amax) == [3, 1]
    with pytest.raises(ValueError):
        g.agree_across_ranks(one, [1], "cpu", torch.sum)
    one.close()
    with pytest.raises(mstar_c.ClosedError):
        one.agree([1], "min")


def test_a_callback_group_that_raises_is_an_error():
    def reduce(values, op):
        raise RuntimeError("rank 1 is gone")
    grp = g.RankGroup(mstar_c._mstar._RankGroup("custom", 0, 2, reduce))
    with pytest.raises(mstar_c.Error, match="rank 1 is gone"):
        grp.agree([1, 2], "min")


RANK_WORKER = textwrap.dedent("""
    import faulthandler, json, sys
    faulthandler.enable()  # a crash names its frame in the test's failure
    import torch, torch.distributed as dist
    sys.path.insert(0, sys.argv[3])
    from test_graph_runner import Toy, make_runner, inputs, expected
    from mstar_c import graphs as g
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method=sys.argv[2], rank=rank, world_size=2)
    grp = dist.group.WORLD
    flags = g.agree_across_ranks(grp, [rank, 1 - rank, 7], "cpu", torch.amin)
    top = g.agree_across_ranks(grp, [rank, 1 - rank, 7], "cpu", torch.amax)
    r = make_runner(Toy(fail_bs=4 if rank == 1 else None), capture=False)
    r.joint_comm_group = grp
    report = r.capture()
    rows = inputs(3)
    ok = torch.equal(r.run(rows)["output"], expected(r, rows))
    print(json.dumps({"rank": rank, "min": flags, "max": top, "captured": report["captured"],
                      "dropped": [list(k) for k in r.dropped_buckets],
                      "bs3": r.select_bucket("decode", 3, 3).bs, "ok": ok}))
    r.close()
    dist.destroy_process_group()
""")


def test_two_gloo_ranks_agree_on_a_drop(tmp_path):
    """G-2: rank 1 fails the capture of bs 4; both ranks drop it and look up alike."""
    init = f"file://{tmp_path}/store"
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen([sys.executable, "-c", RANK_WORKER, str(rank), init, here],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, (p.returncode, err[-3000:])
        outs.append(json.loads(out.strip().splitlines()[-1]))
    for o in outs:
        assert o["min"] == [0, 0, 7] and o["max"] == [1, 1, 7]
        assert o["dropped"] == [["decode", 4, 4, None]]
        assert o["captured"] == 3 and o["bs3"] == 8 and o["ok"]
