"""A PyTorch decoder with a paged KV cache driven through the graph runner: the step runner's KV
cache and positions (mstar/resources.h) from Python, a decode step captured per bucket and
replayed over the leased slot's plan buffers, against the same decoder run eagerly. Padding rows
write only the sink page (G-8, G-9, G-13)."""
import math

import pytest
import torch

import mstar_c
from mstar_c import graphs as g

D, PAGES, PAGE, MAXLEN = 16, 32, 4, 32


class PagedDecoder(torch.nn.Module):
    """One attention layer over a paged KV cache; the cache is this module's tensor, the pages
    and addressing are the step runner's (the plan buffers of the step's slot)."""

    def __init__(self, sr):
        super().__init__()
        torch.manual_seed(0)
        self.sr = sr
        self.q, self.k, self.v = (torch.nn.Linear(D, D) for _ in range(3))
        self.kc = torch.zeros(PAGES, PAGE, D)
        self.vc = torch.zeros(PAGES, PAGE, D)

    def declare_step(self, walk, ids, rows, step):
        for rid, r in zip(ids, rows):
            step.add_segment(rid, 0, r.seq_len)
        step.set_resource("kv")
        step.set_resource("pos")
        return True

    def preprocess(self, step, rows):
        return {"x": torch.cat([r.tensors["x"][: r.seq_len] for r in rows])}

    def make_node_input(self, walk, n):
        return {"x": torch.zeros(n, D)}

    def forward_batched(self, x):
        ctx = g.current_step()
        slot = ctx["slot"] if ctx is not None else -1
        p = self.sr.kv_plan_tensors("kv", slot, 0)
        t = x.shape[0]
        page, off = p["token_to_page"][:t].long(), p["token_to_cache"][:t].long()
        self.kc[page, off] = self.k(x)
        self.vc[page, off] = self.v(x)
        rows = p["page_table"][p["token_row"][:t].long()].long()  # [t, pages_per_row]
        keys = self.kc[rows].reshape(t, -1, D)
        vals = self.vc[rows].reshape(t, -1, D)
        kv_len = p["token_kv_len"][:t].long()
        mask = torch.arange(keys.shape[1])[None, :] < kv_len[:, None]
        att = torch.einsum("td,tkd->tk", self.q(x), keys) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
        return x + torch.einsum("tk,tkd->td", att, vals)


def device():
    sr = g.StepRunner("cpu")
    sr.add_kv_cache("kv", num_pages=PAGES, page_size=PAGE, max_seq_len=MAXLEN)
    sr.add_positions("pos")
    return sr


def eager_step(sr, module, ids, xs):
    step = g.SubmoduleStep()
    step.set_context("decode", ids)
    rows = [g.NodeInputs(x.shape[0], {"x": x}) for x in xs]
    module.declare_step("decode", ids, rows, step)
    ok, _, why = sr.admit(step)
    assert ok, why
    sr.plan(step)
    with torch.no_grad():
        out = module.forward_batched(module.preprocess(step, rows)["x"])
    sr.commit(step)
    return out


def replay_step(runner, ids, xs):
    sr, module = runner.step_runner, runner.submodule
    n = len(ids)
    lease = runner.lease_slot("decode", n, None, n)
    assert lease is not None
    try:
        rows = runner.pad_inputs(lease, [g.NodeInputs(1, {"x": x}) for x in xs])
        padded_ids = runner.step_ids(lease, ids)
        step = g.SubmoduleStep()
        step.set_context("decode", padded_ids, lease.slot, tuple(lease._c()))
        module.declare_step("decode", padded_ids, rows, step)
        ok, _, why = sr.admit(step)
        assert ok, why
        sr.plan(step)
        out = runner.run_forward(lease, module.preprocess(step, rows))["output"][:n].clone()
        sr.commit(step)
        return out
    finally:
        runner.release(lease, n)


def test_step_runner_resources_from_python():
    sr = device()
    free = sr.kv_free_pages("kv")
    sr.ingest_request(5)
    step = g.SubmoduleStep()
    step.set_context("decode", [5])
    step.add_segment(5, 0, 3)
    step.set_resource("kv")
    step.set_resource("pos")
    assert step.segments() == [(5, 0, 3)] and step.has_resource("kv")
    assert sr.admit(step)[0]
    sr.plan(step)
    p = sr.kv_plan_tensors("kv", -1, 0)
    assert p["token_kv_len"][:3].tolist() == [1, 2, 3]
    assert p["page_table"][0, 0].item() != 0  # a real page, never the sink
    assert sr.positions_tensor("pos", -1)[:3].tolist() == [0, 1, 2]
    sr.commit(step)
    assert sr.kv_free_pages("kv") == free - 1 and sr.position("pos", 5) == 3
    assert g.blocked_capture_resources(step, sr) == []
    sr.remove_request(5)
    assert sr.kv_free_pages("kv") == free


def test_admit_reports_a_shortage_and_refuses_an_overlong_stream():
    sr = device()
    free = sr.kv_free_pages("kv")
    ids = [1, 2, 3, 4]  # 4 x 8 pages > the 31 there are
    step = g.SubmoduleStep()
    step.set_context("decode", ids)
    for rid in ids:
        sr.ingest_request(rid)
        step.add_segment(rid, 0, MAXLEN)
    step.set_resource("kv")
    ok, _, why = sr.admit(step)
    assert not ok and why
    assert sr.kv_free_pages("kv") == free  # a refused admit reserves nothing
    long = g.SubmoduleStep()
    long.set_context("decode", [1])
    long.add_segment(1, 0, MAXLEN + 1)
    long.set_resource("kv")
    with pytest.raises(mstar_c.OutOfRangeError):
        sr.admit(long)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_paged_decoder_replay_equals_eager(n):
    """Prefill eagerly, then decode 4 steps captured (bs 1, 2, 4, padded) on both slots, against
    the same decoder decoding eagerly: same outputs, same pages taken, padding rows never holding
    a page."""
    ids = list(range(10, 10 + n))
    gen = torch.Generator().manual_seed(n)
    prompts = [torch.randn(3, D, generator=gen) for _ in ids]
    steps = [[torch.randn(1, D, generator=gen) for _ in ids] for _ in range(4)]

    ref_sr = device()
    ref = PagedDecoder(ref_sr)
    sr = device()
    module = PagedDecoder(sr)
    cfg = g.AcceleratorGraphConfig("decode", capture_batch_sizes=[1, 2, 4])
    runner = g.AcceleratorGraphRunner("decoder", module, sr, sr, "cpu", None, None, 2,
                                      configs=[cfg])
    runner.capture()
    assert runner.dropped_buckets == []
    for s, m in ((ref_sr, ref), (sr, module)):
        for rid in ids:
            s.ingest_request(rid)
        eager_step(s, m, ids, prompts)
    assert sr.kv_free_pages("kv") == ref_sr.kv_free_pages("kv")
    for xs in steps:
        want = eager_step(ref_sr, ref, ids, xs)
        got = replay_step(runner, ids, xs)
        assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
        assert sr.kv_free_pages("kv") == ref_sr.kv_free_pages("kv")
        assert [sr.position("pos", r) for r in ids] == [ref_sr.position("pos", r) for r in ids]
    assert [sr.position("pos", r) for r in ids] == [7] * n
    for rid in ids:
        sr.remove_request(rid)
    assert sr.kv_free_pages("kv") == PAGES - 1  # everything back but the sink


def test_the_example_runs_and_replays_equal_eager():
    import os
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), os.pardir, "examples",
                          "graph_runner_torch.py")
    out = subprocess.run([sys.executable, script, "--steps", "3"], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "captured 4 of 4 buckets" in out.stdout
    assert out.stdout.strip().endswith("replay equals eager")
