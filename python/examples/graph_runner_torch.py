"""A small PyTorch decoder with a paged KV cache, captured per bucket by the graph runner and
replayed, checked against the same decoder run eagerly.

    PYTHONPATH=build/python python3 python/examples/graph_runner_torch.py [--device cpu]

The step runner (mstar_c.graphs.StepRunner) owns the KV cache's pages and positions; the decoder
owns the cache tensors and reads the addressing from the plan buffers of the step's slot. Each
decode step: lease a bucket and slot, pad to the bucket with padding rows (which write only the
sink page), declare the step, admit and plan it into the slot's buffers, replay, commit, release.
Random weights, random inputs; prints one line per step and "replay equals eager".
"""
import argparse
import math

import torch

from mstar_c import graphs as g

D, LAYERS, PAGES, PAGE, MAXLEN = 32, 2, 64, 4, 48


class Decoder(torch.nn.Module):
    def __init__(self, sr, device):
        super().__init__()
        torch.manual_seed(0)
        self.sr = sr
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(D, 3 * D) for _ in range(LAYERS))
        self.mlp = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(LAYERS))
        self.kc = torch.zeros(LAYERS, PAGES, PAGE, D, device=device)
        self.vc = torch.zeros(LAYERS, PAGES, PAGE, D, device=device)

    # what the runner calls
    def declare_step(self, walk, ids, rows, step):
        for rid, r in zip(ids, rows):
            step.add_segment(rid, 0, r.seq_len)
        step.set_resource("kv")
        step.set_resource("pos")
        return True

    def preprocess(self, step, rows):
        return {"x": torch.cat([r.tensors["x"][: r.seq_len] for r in rows])}

    def make_node_input(self, walk, n):
        return {"x": torch.zeros(n, D, device=self.kc.device)}

    def forward_batched(self, x):
        ctx = g.current_step()  # the captured slot, also while a graph replays
        p = self.sr.kv_plan_tensors("kv", ctx["slot"] if ctx else -1, 0)
        t = x.shape[0]
        page, off = p["token_to_page"][:t].long(), p["token_to_cache"][:t].long()
        rows = p["page_table"][p["token_row"][:t].long()].long()
        kv_len = p["token_kv_len"][:t].long()
        for layer in range(LAYERS):
            q, k, v = self.qkv[layer](x).chunk(3, dim=-1)
            self.kc[layer, page, off] = k
            self.vc[layer, page, off] = v
            keys = self.kc[layer][rows].reshape(t, -1, D)
            vals = self.vc[layer][rows].reshape(t, -1, D)
            mask = torch.arange(keys.shape[1], device=x.device)[None, :] < kv_len[:, None]
            att = torch.einsum("td,tkd->tk", q, keys) / math.sqrt(D)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
            x = x + torch.einsum("tk,tkd->td", att, vals)
            x = x + torch.nn.functional.silu(self.mlp[layer](x))
        return x


def device_and_decoder(device):
    sr = g.StepRunner(device)
    sr.add_kv_cache("kv", num_pages=PAGES, page_size=PAGE, max_seq_len=MAXLEN)
    sr.add_positions("pos")
    return sr, Decoder(sr, device)


def step(sr, module, ids, xs, runner=None):
    """One step over requests `ids` (eager when runner is None or no bucket fits)."""
    rows = [g.NodeInputs(x.shape[0], {"x": x}) for x in xs]
    lease = runner.lease_slot("decode", len(ids), None, len(ids)) if runner else None
    st = g.SubmoduleStep()
    try:
        if lease is not None:
            rows = runner.pad_inputs(lease, rows)
            st.set_context("decode", runner.step_ids(lease, ids), lease.slot, tuple(lease._c()))
        else:
            st.set_context("decode", ids)
        module.declare_step("decode", st.context["request_ids"], rows, st)
        ok, _, why = sr.admit(st)
        if not ok:
            raise RuntimeError(why)
        sr.plan(st)
        pre = module.preprocess(st, rows)
        if lease is not None:
            out = runner.run_forward(lease, pre)["output"][: len(ids)].clone()
        else:
            with torch.no_grad():
                out = module.forward_batched(pre["x"])
        sr.commit(st)
        return out
    finally:
        if lease is not None:
            runner.release(lease, len(ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    ref_sr, ref = device_and_decoder(a.device)
    sr, module = device_and_decoder(a.device)
    runner = g.AcceleratorGraphRunner(
        "decoder", module, sr, sr, a.device, None, None, 2,
        configs=[g.AcceleratorGraphConfig("decode", capture_batch_sizes=[1, 2, 4, 8])])
    report = runner.capture()
    print(f"captured {report['captured']} of {report['buckets']} buckets "
          f"({report['taken']} pool bytes)")
    ids = list(range(100, 100 + a.requests))
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randn(4, D, generator=gen).to(a.device) for _ in ids]
    for s, m in ((ref_sr, ref), (sr, module)):
        for rid in ids:
            s.ingest_request(rid)
        step(s, m, ids, prompts)  # prefill, eager
    worst = 0.0
    for i in range(a.steps):
        xs = [torch.randn(1, D, generator=gen).to(a.device) for _ in ids]
        want = step(ref_sr, ref, ids, xs)
        got = step(sr, module, ids, xs, runner)
        err = (got - want).abs().max().item()
        worst = max(worst, err)
        print(f"step {i}: {len(ids)} requests, positions "
              f"{[sr.position('pos', r) for r in ids]}, max |replay - eager| {err:.2e}")
    for rid in ids:
        sr.remove_request(rid)
    assert sr.kv_free_pages("kv") == PAGES - 1, "pages left behind"
    assert worst <= 1e-5, worst
    print("replay equals eager")


if __name__ == "__main__":
    main()
