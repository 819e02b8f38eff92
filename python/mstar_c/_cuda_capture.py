"""mstar_c._cuda_capture — where a torch module runs while the C runner captures on CUDA.

Only imported when a runner's device is CUDA (graphs.py, mode 2 of a forward). The C runner has
begun a stream capture on its compute stream; the module must enqueue its kernels there and take
its allocations from a pool the runner controls, so that the kernels land in the C graph and a
replay (mstar_graph_launch from C) runs no Python. docs/design.md, "Graph runner for PyTorch
modules", gives the choice and the fallback:

  - torch >= 2.5 (torch.cuda.MemPool, torch.cuda.use_mem_pool): one MemPool per runner, kept for
    the runner's life, so the blocks a graph keeps stay reserved for it; torch's caching allocator
    serves the capture from it as it serves its own graph captures.
  - older torch: torch.cuda.graph_pool_handle() with the private
    torch._C._cuda_beginAllocateCurrentStreamToPool / _cuda_endAllocateCurrentStreamToPool, which
    torch.cuda.graph itself uses (since torch 1.10).
"""
from __future__ import annotations

import contextlib


def _stream(runner):
    import torch
    dev = torch.device(runner.device)
    return dev, torch.cuda.ExternalStream(runner.step_runner.stream_native(), device=dev)


@contextlib.contextmanager
def capture_context(runner, capturing):
    """The module's forward on the runner's compute stream; while C captures, its allocations go
    to the runner's pool."""
    import torch
    dev, stream = _stream(runner)
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        if not capturing:
            yield
            return
        if hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool"):
            if runner._mempool is None:
                runner._mempool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(runner._mempool):
                yield
            return
        if runner._mempool is None:
            runner._mempool = torch.cuda.graph_pool_handle()
        torch._C._cuda_beginAllocateCurrentStreamToPool(dev.index or 0, runner._mempool)
        try:
            yield
        finally:
            torch._C._cuda_endAllocateCurrentStreamToPool(dev.index or 0, runner._mempool)
