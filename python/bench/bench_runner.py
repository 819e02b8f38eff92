"""The graph runner for torch modules (mstar_c.graphs) beside a PyTorch runner written the way
serving systems write theirs, same model, same run: `mstar bench graphs --model mlp`'s work,
8 x [rms_norm, linear 1024, silu, residual add], float32 on CPU (bf16 on CUDA).

    PYTHONPATH=build/python python3 python/bench/bench_runner.py [--device cpu|cuda]
        [--width 1024] [--steps 200] [--bs 1,8,32,64] [--threads 1] [--json FILE]

Per step and batch size, the median over --steps steps (after warm-up), taken in turns:
  - mstar (lease): runner.lease_slot, run_forward(lease, {"x": x}) (staging copies x into the
    slot's static input), release: what an engine calls per step;
  - mstar (run): runner.run over one NodeInputs per request (lease, pad, preprocess, replay,
    release, real rows copied out);
  - torch runner: one static input per bucket, bisect to the bucket, copy x into the narrowed
    static buffer, run (on CUDA: replay that bucket's torch.cuda.CUDAGraph, all graphs in one
    pool), return a view of the static output.
"host" is the time the step's call takes on the calling thread; on CUDA "step" also waits for
the device (the host backend runs everything on the calling thread, so the two are the same on
CPU). Replays are checked against the eager module (bit for bit on CPU; on CUDA too, the graph
runs the same kernels). On CUDA the bench also checks that 20 steps of lease, replay and release
enter no Python frame (sys.setprofile), and prints the memory capture planning predicted beside
what the runner's captures took and what the torch runner's captures took (free device memory
before and after each, torch's cache emptied).
"""
import argparse
import bisect
import json
import statistics
import sys
import time

import torch

from mstar_c import graphs as g

BUCKETS = [1, 2, 4, 8, 16, 32, 64]


class RMSNorm(torch.nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MLP(torch.nn.Module):
    """8 x [rms_norm, linear, silu, residual add]."""

    def __init__(self, width, layers=8):
        super().__init__()
        torch.manual_seed(0)
        self.norms = torch.nn.ModuleList(RMSNorm(width) for _ in range(layers))
        self.lins = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward_batched(self, x):
        for n, l in zip(self.norms, self.lins):
            x = x + torch.nn.functional.silu(l(n(x)))
        return x


class TorchRunner:
    """The serving-system way: per-bucket static buffers (and on CUDA one CUDAGraph per bucket in
    one pool), bisect, copy into the narrowed static input, replay, return a view."""

    def __init__(self, module, width, device, dtype):
        self.m, self.device = module, device
        self.cuda = device.startswith("cuda")
        self.static_in = torch.zeros(BUCKETS[-1], width, device=device, dtype=dtype)
        self.graphs, self.outs = {}, {}
        pool = torch.cuda.graph_pool_handle() if self.cuda else None
        with torch.no_grad():
            for bs in reversed(BUCKETS):
                x = self.static_in[:bs]
                if not self.cuda:
                    self.outs[bs] = None
                    continue
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        module.forward_batched(x)
                torch.cuda.current_stream().wait_stream(s)
                gr = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gr, pool=pool):
                    self.outs[bs] = module.forward_batched(x)
                self.graphs[bs] = gr

    def step(self, x):
        n = x.shape[0]
        bs = BUCKETS[bisect.bisect_left(BUCKETS, n)]
        self.static_in[:n].copy_(x)
        if self.cuda:
            self.graphs[bs].replay()
            return self.outs[bs][:n]
        with torch.no_grad():
            return self.m.forward_batched(self.static_in[:bs])[:n]


def make_mstar(module, width, device, dtype):
    sr = g.StepRunner(device)
    cfg = g.AcceleratorGraphConfig(
        "decode", capture_batch_sizes=BUCKETS,
        make_node_input=lambda n: {"x": torch.zeros(n, width, dtype=dtype, device=device)})
    r = g.AcceleratorGraphRunner("mlp", module, None, sr, device, None, None, 1, configs=[cfg])
    report = r.capture()
    return r, report


def free_bytes(cuda):
    """Free device memory as the driver sees it, after torch gave back what it caches."""
    if not cuda:
        return 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def python_calls(runner, x, bs, steps):
    """Python frames entered while `steps` steps lease, replay and release (sys.setprofile)."""
    calls = []

    def hook(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(hook)
    for _ in range(steps):
        lease = runner.lease_slot("decode", bs, None, bs)
        runner.run_forward(lease, {"x": x})
        runner.release(lease, bs)
    sys.setprofile(None)
    return calls


def time_steps(fn, steps, sync):
    host, total = [], []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        sync()
        t2 = time.perf_counter_ns()
        host.append(t1 - t0)
        total.append(t2 - t0)
    return statistics.median(host) / 1e3, statistics.median(total) / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--bs", default="1,8,32,64")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cuda = a.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    module = MLP(a.width).to(device=a.device, dtype=dtype)
    free0 = free_bytes(cuda)
    runner, report = make_mstar(module, a.width, a.device, dtype)
    free1 = free_bytes(cuda)
    torch_runner = TorchRunner(module, a.width, a.device, dtype)
    free2 = free_bytes(cuda)
    memory = {"mstar_predicted": report["predicted"] + report["predicted_outside"],
              "mstar_taken": report["taken"] + report["outside"],
              "mstar_free_drop": free0 - free1, "torch_free_drop": free1 - free2}
    if cuda:
        m = memory
        print(f"capture memory: mstar predicted {m['mstar_predicted'] / 2**20:.1f} MiB "
              f"(pool {report['predicted'] / 2**20:.1f} + outside "
              f"{report['predicted_outside'] / 2**20:.1f}); mstar took "
              f"{m['mstar_taken'] / 2**20:.1f} MiB (free memory fell "
              f"{m['mstar_free_drop'] / 2**20:.1f} MiB); the torch runner's captures took "
              f"{m['torch_free_drop'] / 2**20:.1f} MiB of free memory; predicted / torch "
              f"{m['mstar_predicted'] / max(m['torch_free_drop'], 1):.3f}", flush=True)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    for bs in [int(b) for b in a.bs.split(",")]:
        x = torch.randn(bs, a.width, device=a.device, dtype=dtype)
        inputs = [g.NodeInputs(1, {"x": x[i:i + 1]}) for i in range(bs)]
        with torch.no_grad():
            want = module.forward_batched(x)

        def lease_step():
            lease = runner.lease_slot("decode", bs, None, bs)
            out = runner.run_forward(lease, {"x": x})["output"][:bs]
            runner.release(lease, bs)
            return out

        got = lease_step()
        sync()
        assert torch.equal(got, want), f"replay differs from eager at bs {bs}"
        if cuda:  # the host backend's replay re-runs the module: Python by design
            calls = python_calls(runner, x, bs, 20)
            assert not calls, f"Python frames during replays at bs {bs}: {calls[:5]}"
        assert torch.equal(runner.run(inputs)["output"], want)
        assert torch.equal(torch_runner.step(x), want)
        res = {"bs": bs}
        for _ in range(3):  # in turns, each keeps its best median
            for name, fn in (("mstar_lease", lease_step), ("mstar_run", lambda: runner.run(inputs)),
                             ("torch", lambda: torch_runner.step(x))):
                for _ in range(5):
                    fn()
                sync()
                h, t = time_steps(fn, a.steps, sync)
                best = res.get(name)
                if best is None or h < best[0]:
                    res[name] = (h, t)
        res["python_calls_per_20_steps"] = 0 if cuda else None
        rows.append(res)
        print(f"bs {bs:3d}: host/step us  mstar lease {res['mstar_lease'][0]:9.1f}  "
              f"mstar run {res['mstar_run'][0]:9.1f}  torch runner {res['torch'][0]:9.1f}  "
              f"| step us {res['mstar_lease'][1]:9.1f} {res['mstar_run'][1]:9.1f} "
              f"{res['torch'][1]:9.1f}  | lease/torch {res['mstar_lease'][0] / res['torch'][0]:.3f}",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "width": a.width, "rows": rows,
                       "capture_memory": memory}, f, indent=1)


if __name__ == "__main__":
    main()
