"""The eager reference a graph-runner test compares a run with, computed over as many rows as the
run itself computed over, so the comparison holds bit for bit on any torch.

torch 2.x's CPU build picks its GEMM kernel (and where a vectorised loop's scalar tail starts) by
the number of rows, so row i of a 3-row and of a 4-row call may differ in the last bit. A replay
computes over its bucket's rows (the real rows first, then the padding rows), an eager fallback
over the real rows alone; the reference is the eager callable over the same number of rows, the
real rows first, cut back to them. What the padding rows hold reaches no real row (each output
row reads its own input row), so zeros stand in for them: the piecewise runner zeroes its static
input's tail, the whole-forward runner leaves it as the last step left it.
"""
import torch


def padded(x, rows):
    """x with zero rows appended (dim 0) up to `rows` rows."""
    if rows <= x.shape[0]:
        return x
    return torch.cat([x, x.new_zeros(rows - x.shape[0], *x.shape[1:])])


def eager_at(fn, x, rows):
    """fn(x padded to `rows` rows) without grad, cut back to x's rows."""
    with torch.no_grad():
        return fn(padded(x, rows))[: x.shape[0]]


def run_rows(runner, graph_walk, bs, num_tokens, cg_key_info=None):
    """The rows an AcceleratorGraphRunner's run of bs rows and num_tokens tokens computes over:
    its bucket's tokens where one fits (a replay; the bucket run() leases), else num_tokens (the
    eager fallback)."""
    bucket = runner.select_bucket(graph_walk, bs, num_tokens, cg_key_info)
    return num_tokens if bucket is None else bucket.num_tokens


def region_rows(runner, bs, total_tokens=None):
    """The rows a PiecewiseAcceleratorGraphRunner's run computes over: its shape's tokens (a
    region never falls back to eager: run raises where no shape fits)."""
    lease = runner.lease_slot(bs, total_tokens)
    assert lease is not None, f"no captured shape for bs {bs}, {total_tokens} tokens"
    return lease.bucket.num_tokens
