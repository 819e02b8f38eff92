"""The examples run as they are documented: two worker processes hand torch tensors through
the arena (and, on a GPU machine with a CUDA libmstar, CUDA tensors)."""
import os
import subprocess
import sys

import pytest
import torch

import mstar_c

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


def _run(script, *args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))


def test_arena_workers_example():
    out = _run("arena_workers.py")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count(" ok") == 4
    assert "every tensor acknowledged and freed" in out.stdout
    assert "dropped" not in out.stderr  # every ACK names its sender and is applied


@pytest.mark.skipif(not (torch.cuda.is_available() and mstar_c.built_with_cuda()),
                    reason="needs a GPU and libmstar built with CUDA")
def test_cuda_workers_example():
    out = _run("cuda_workers.py")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("on cuda:0 ok") == 4
    assert "dropped" not in out.stderr
