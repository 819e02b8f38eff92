"""A step from Python: lease_slot, run_forward and release of mstar_c.graphs go straight to C (no
Python frame of the package per step, and on CUDA none at all during a replay), keep the
reference's signatures and keywords, and let a subclass's override win. docs/python.md, "A step
from Python"."""
import gc
import sys
import threading

import pytest
import torch

import mstar_c
from mstar_c import graphs as g

pytestmark = pytest.mark.usefixtures("rows_show")  # every comparison at one row count

WIDTH = 8


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(WIDTH, WIDTH)

    def forward_batched(self, x):
        return self.lin(x) + x


def make_runner(device="cpu", cls=g.AcceleratorGraphRunner, dtype=torch.float32,
                sizes=(1, 2, 4)):
    module = Lin().to(device=device, dtype=dtype)
    cfg = g.AcceleratorGraphConfig(
        "decode", capture_batch_sizes=list(sizes),
        make_node_input=lambda n: {"x": torch.zeros(n, WIDTH, device=device, dtype=dtype)})
    r = cls("lin", module, None, g.StepRunner(device), device, None, None, 2, configs=[cfg])
    r.capture()
    return r, module


class Frames:
    """Counts the Python frames entered while set (sys.setprofile 'call' events)."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)

    def _hook(self, frame, event, arg):
        if event == "call" and frame.f_code is not Frames.__exit__.__code__:
            self.calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")


def test_lease_is_a_slot_lease_made_without_python():
    r, _ = make_runner()
    lease = r.lease_slot("decode", 3)
    assert isinstance(lease, g.SlotLease) and isinstance(lease.bucket, g.BucketKey)
    assert lease.bucket == g.BucketKey("decode", 4, 4, None)
    r.release(lease, 3)
    with Frames() as f:
        lease = r.lease_slot("decode", 2)
        r.release(lease, 2)
    assert f.calls == [], f.calls
    assert r.lease_slot("decode", 9) is None  # no bucket fits


def test_keywords_and_tuple_leases_are_accepted():
    r, module = make_runner()
    lease = r.lease_slot(graph_walk="decode", bs=2, num_tokens=2)
    x = torch.randn(2, WIDTH)
    out = r.run_forward(lease=lease, preprocessed={"x": x})["output"]
    with torch.no_grad():
        assert torch.equal(out, module.forward_batched(x))
    r.release(lease=lease, real_bs=2)
    # the C form of a lease (what lease._c() gives) still works
    lease = r.lease_slot("decode", 1)
    with torch.no_grad():  # one shape: torch 2.x picks its CPU GEMM kernel by row count
        assert torch.equal(r.run_forward(lease._c(), {"x": x[:1]})["output"],
                           module.forward_batched(x[:1]))
    r.release(lease._c(), 1)
    with pytest.raises(TypeError, match="SlotLease"):
        r.release((0, "decode"), 1)


def test_launch_started_event_is_set_on_every_path():
    r, _ = make_runner()
    lease = r.lease_slot("decode", 2)
    done = threading.Event()
    r.run_forward(lease, {"x": torch.randn(2, WIDTH)}, None, done)
    assert done.is_set()
    r.release(lease, 2)
    lease = r.lease_slot("decode", 2)
    failed = threading.Event()
    with pytest.raises(Exception):
        r.run_forward(lease, {"x": torch.randn(2, WIDTH + 1)}, launch_started_event=failed)
    assert failed.is_set()
    r.release(lease, 2)
    bad_lease = threading.Event()
    with pytest.raises(TypeError, match="SlotLease"):
        r.run_forward((0, "decode"), {"x": torch.randn(2, WIDTH)}, None, bad_lease)
    assert bad_lease.is_set()


def test_a_subclass_override_wins():
    seen = []

    class Traced(g.AcceleratorGraphRunner):
        def run_forward(self, lease, preprocessed, plan_done_event=None,
                        launch_started_event=None):
            seen.append(lease.bucket.bs)
            return super().run_forward(lease, preprocessed, plan_done_event,
                                       launch_started_event)

    r, _ = make_runner(cls=Traced)
    lease = r.lease_slot("decode", 4)
    r.run_forward(lease, {"x": torch.randn(4, WIDTH)})
    r.release(lease, 4)
    assert seen == [4]


# MSTARPY_CACHED_OUTPUTS (python/src/runner.h): the slots whose outputs a runner keeps tensors for
CACHED_OUTPUTS = 64


def _graph_runners():
    return {id(o) for o in gc.get_objects() if type(o) is mstar_c._mstar._GraphRunner}


def step_slot(r, module, bs, slot, gen):
    """One step of bs rows (a full bucket of bs) on `slot`: its outputs, checked equal to eager
    over the same rows."""
    lease = r.lease_slot("decode", bs, slot, bs)
    assert lease.bucket.bs == bs and lease.slot == slot
    x = torch.randn(bs, WIDTH, generator=gen)
    out = r.run_forward(lease, {"x": x})["output"]
    r.release(lease, bs)
    with torch.no_grad():
        assert torch.equal(out, module.forward_batched(x)), (bs, slot)
    return out


def test_a_slot_past_the_output_cache_still_returns_its_own_outputs():
    """A runner keeps the output tensors of the first CACHED_OUTPUTS slots it replays; a slot past
    that gets new tensors every step, over the same outputs. Every step returns its replay's
    values on both sides of the limit, a kept slot keeps its tensors after slots past the limit
    ran, and those one-step tensors do not keep the runner alive once dropped."""
    sizes = range(1, CACHED_OUTPUTS // 2 + 9)  # 40 buckets of 2 slots: 80 slots
    r, module = make_runner(sizes=sizes)
    slots = [(bs, slot) for bs in sizes for slot in (0, 1)]
    assert len(slots) > CACHED_OUTPUTS
    gen = torch.Generator().manual_seed(5)
    first = [step_slot(r, module, bs, slot, gen) for bs, slot in slots]
    second = [step_slot(r, module, bs, slot, gen) for bs, slot in slots]
    # the first CACHED_OUTPUTS slots return the same tensors; the rest new ones (the full cache)
    kept = [a is b for a, b in zip(first, second)]
    assert kept == [True] * CACHED_OUTPUTS + [False] * (len(slots) - CACHED_OUTPUTS)
    # a tensor of either kind views its slot's outputs, so the last step's values show in it
    moved = [s for s, a, b in zip(slots, first, second)
             if a.data_ptr() != b.data_ptr() or not torch.equal(a, b)]
    assert moved == []
    # the slots past the limit took no kept slot's place: the first and the last kept one
    for i in (0, CACHED_OUTPUTS - 1):
        assert step_slot(r, module, *slots[i], gen) is first[i]
    assert step_slot(r, module, *slots[-1], gen) is not second[-1]
    c = id(r._c)
    del r, first, second
    gc.collect()
    assert c not in _graph_runners()


def test_warming_and_a_throwaway_capture_between_steps_leave_the_output_tensors():
    """warm_bucket and capture_throwaway (what sizing runs) leave the output cache as it is: they
    warm and capture into slots of their own, never into a captured slot, so that slot's outputs
    stay where they are. Its next step returns the same tensors, viewing the slot's outputs, with
    its replay's values."""
    r, module = make_runner()
    dropped = g.BucketKey("decode", 1, 1, None)
    r.drop_bucket(dropped)  # before the steps: a drop clears the cache
    key = g.BucketKey("decode", 2, 2, None)
    gen = torch.Generator().manual_seed(6)
    before = [step_slot(r, module, 2, slot, gen) for slot in (0, 1)]

    def same_tensors():
        for slot, t in enumerate(before):
            assert step_slot(r, module, 2, slot, gen) is t
            assert t.data_ptr() == r.slot_for(g.SlotLease(slot, key)).static_outputs[
                "output"].data_ptr()

    assert r._c.warm_bucket(tuple(key)) > 0  # both of its slots warmed, eagerly
    same_tensors()
    # a throwaway of a dropped bucket and of the stepped one: its outputs take memory of the pool
    # holding the live ones, then go, and the live replays are kept
    held = r.pool.stats()["allocated"]
    for k in (dropped, key):
        stats = r._c.capture_throwaway(tuple(k))
        assert stats["nodes"] == 1 and stats["kept"] > 0
        assert r.pool.stats()["allocated"] == held and r._c._records() == 2 * 2
        same_tensors()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_replay_runs_no_python_and_orders_with_torch():
    r, module = make_runner("cuda", dtype=torch.bfloat16)
    x = torch.randn(3, WIDTH, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = module.forward_batched(torch.cat([x, torch.zeros(1, WIDTH, device="cuda",
                                                                dtype=torch.bfloat16)]))[:3]
    lease = r.lease_slot("decode", 3)
    r.run_forward(lease, {"x": x})
    r.release(lease, 3)
    torch.cuda.synchronize()
    with Frames() as f:
        for _ in range(10):
            lease = r.lease_slot("decode", 3)
            out = r.run_forward(lease, {"x": x})["output"]
            r.release(lease, 3)
    assert f.calls == [], f.calls[:10]
    # torch's stream waits for the replay: reading the output on it sees the replay's rows
    assert torch.equal(out[:3], want)
    # a torch stream other than the default orders the same way
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = x * 2
        lease = r.lease_slot("decode", 3)
        out = r.run_forward(lease, {"x": y})["output"][:3].clone()
        r.release(lease, 3)
    torch.cuda.synchronize()
    pad = torch.zeros(1, WIDTH, device="cuda", dtype=torch.bfloat16)

    def eager(v):
        with torch.no_grad():
            return module.forward_batched(torch.cat([v, pad]))[:3]

    assert torch.equal(out, eager(y))
    # staging is the graph's copy node (device/backend.h): given a new source every step, told
    # to copy nothing for a key with no value (the buffer keeps y's rows, not y's new values)
    # and for a value built in place
    lease = r.lease_slot("decode", 3)
    r.run_forward(lease, {"x": y})
    r.release(lease, 3)
    kept = y.clone()
    y.mul_(3)
    lease = r.lease_slot("decode", 3)
    assert torch.equal(r.run_forward(lease, {})["output"][:3], eager(kept))
    r.release(lease, 3)
    lease = r.lease_slot("decode", 3)
    z = torch.randn(3, WIDTH, device="cuda", dtype=torch.bfloat16)
    view = r.static_input(lease, "x", 3)
    view.copy_(z)
    assert torch.equal(r.run_forward(lease, {"x": view})["output"][:3], eager(z))
    r.release(lease, 3)
    for _ in range(3):  # one source after another, both slots
        w = torch.randn(3, WIDTH, device="cuda", dtype=torch.bfloat16)
        lease = r.lease_slot("decode", 3)
        assert torch.equal(r.run_forward(lease, {"x": w})["output"][:3], eager(w))
        r.release(lease, 3)
