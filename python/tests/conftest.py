"""Fixtures shared by the package's tests: a private shm directory per test that must be empty
when the test ends (every manager closed, by `with`, close() or garbage collection), and a
manager factory."""
import gc
import os
import signal
import sys
import tempfile
import tracemalloc

import pytest

import mstar_c


# No test may hang the run (a lost ACK once left a producer waiting for ever): each gets this
# many seconds, then fails. pytest-timeout is not a Debian package, so SIGALRM does it here.
TEST_TIMEOUT_S = int(os.environ.get("MSTAR_PYTEST_TIMEOUT_S", "360"))


@pytest.fixture(autouse=True)
def _per_test_timeout(request):
    def expired(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} ran past {TEST_TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def heap_growth():
    """heap_growth(warm, run) -> the bytes Python's heap grew by over run(), measured after
    warm() and with cycles collected on both sides (a leak test's loop)."""

    def measure(warm, run):
        warm()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            run()
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        return sum(s.size_diff for s in after.compare_to(before, "filename"))

    return measure


@pytest.fixture
def field_references():
    """field_references(cls, field, other): a value set on `field` of a new cls holds one
    reference, given back when the field is overwritten, and when the object dies while
    `other` holds it."""

    def check(cls, field, other):
        # Made at run time: a constant would be immortal in Python 3.12 (its count never moves).
        value = "".join(["v"] * 100) + "w"
        base = sys.getrefcount(value)
        obj = cls(**{field: value})
        assert sys.getrefcount(value) == base + 1
        setattr(obj, field, "other")
        assert sys.getrefcount(value) == base
        setattr(obj, other, value)
        del obj
        assert sys.getrefcount(value) == base

    return check


@pytest.fixture
def rows_show(monkeypatch):
    """F.linear's result made to depend on its row count, as torch 2.x's CPU GEMM may in the last
    bits (it picks its kernel by the rows): a graph-runner test comparing a replay over a bucket's
    rows with eager over another row count then fails on any torch, not only on 2.x
    (runner_util.py)."""
    import torch
    linear = torch.nn.functional.linear

    def by_rows(x, weight, bias=None):
        out = linear(x, weight, bias)
        return out + out * (x.shape[0] * 2.0 ** -22) if x.dim() >= 2 else out

    monkeypatch.setattr(torch.nn.functional, "linear", by_rows)


class Recorder:
    """A send callback that records (peer, Message) — the reference's mock communicator."""

    def __init__(self):
        self.sent = []

    def __call__(self, peer, msg):
        self.sent.append((peer, msg))


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir()
    for k in list(os.environ):
        if k.startswith("MSTAR_SHM_ARENA"):
            monkeypatch.delenv(k)
    yield str(d)
    gc.collect()
    left = sorted(os.listdir(d))
    assert left == [], f"left in the shm directory: {left}"


@pytest.fixture
def make(shm_dir):
    """make(entity, transport="files", **kw) -> a manager whose send records into .sent."""
    made = []

    def factory(entity, transport="files", **kw):
        rec = Recorder()
        kw.setdefault("send", rec)
        m = mstar_c.CommunicationManager(entity, transport=transport, shm_dir=shm_dir, **kw)
        m.sent = rec.sent
        made.append(m)
        return m

    yield factory
    for m in made:
        m.close()


def ucx_available():
    with tempfile.TemporaryDirectory() as d:
        try:
            m = mstar_c.CommunicationManager("probe_ucx", transport="ucx-tcp", shm_dir=d)
        except mstar_c.Error:
            return False
        m.close()
        return True
