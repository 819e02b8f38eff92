"""The benchmark's tools run as docs/python.md shows them (a few round trips, not a
measurement): timeline_transport.py times every step of a round trip in both processes,
calls_transport.py every call of a handoff in one, and bench_transport.py reports the C and the
Python handoff side by side."""
import glob
import json
import os
import pickle
import subprocess
import sys
import tempfile

import pytest

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, "bench")
STEPS = ["send_one", "to consumer wake", "wake->recv", "recv->start_read", "->get_ready",
         "->torch tensor", "->deref returned", "producer has ACK", "RT"]


@pytest.mark.parametrize("transport", ["arena-views", "arena"])
def test_timeline_stamps_every_step(transport):
    out = subprocess.run([sys.executable, os.path.join(BENCH, "timeline_transport.py"),
                          "--transport", transport, "--n", "60"],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{transport}, 4 KiB, ")
    got = {line[:22].strip(): float(line[22:]) for line in lines[1:]}
    assert list(got) == STEPS
    assert all(v >= 0 for v in got.values())
    # Each holds in every round trip, so in the medians too: the ACK comes before the round
    # trip ends, and the consumer wakes before it can send the ACK.
    assert got["producer has ACK"] <= got["RT"]
    assert got["to consumer wake"] < got["RT"]


def test_bench_transport_quick_reports_both_sides(tmp_path):
    """bench_transport.py --quick: the C suite's row and the Python row of every quick size,
    taken in turns, and both targets judged (whether met is the machine's business)."""
    build = os.environ.get("MSTAR_TEST_BUILD_DIR")
    exe = os.path.join(build or "", "mstar")
    if not build or not os.access(exe, os.X_OK):
        pytest.skip("MSTAR_TEST_BUILD_DIR has no mstar binary")
    out_json = tmp_path / "python.json"
    out = subprocess.run([sys.executable, os.path.join(BENCH, "bench_transport.py"), "--mstar", exe,
                          "--quick", "--repeat", "1", "--json", str(out_json)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out_json.read_text())
    assert [r["bytes"] for r in data["rows"]] == [4 << 10, 64 << 10, 1 << 20, 4 << 20]
    for r in data["rows"]:
        assert r["c_rt_p50_us"] > 0 and r["py_rt_p50_us"] > 0
        assert r["c_gbps"] > 0 and r["py_gbps"] > 0
    # At 4 KiB the reference's calls one by one are timed too, beside send_outputs.
    assert data["rows"][0]["py_calls_rt_p50_us"] > 0 and data["rows"][0]["calls_rt_ratio"] > 0
    assert all("py_calls_rt_p50_us" not in r for r in data["rows"][1:])
    assert [t["bar"] for t in data["targets"]] == ["<= 1.5x", ">= 0.9x"]
    assert "Python over C, transport arena" in out.stdout
    assert "4 KiB through the reference's calls one by one" in out.stdout


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("send_outputs", [False, True])
def test_calls_transport_times_every_call(views, send_outputs):
    """calls_transport.py: every call of a handoff timed, each a positive median, and the sum
    printed as their total; --send-outputs times the producer's one call in place of its six."""
    args = [sys.executable, os.path.join(BENCH, "calls_transport.py"), "--n", "200"]
    args += (["--views"] if views else []) + (["--send-outputs"] if send_outputs else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].endswith("180 handoffs: median us per call")
    got = {line.split()[0]: float(line.split()[1]) for line in lines[1:]}
    steps = [s for s in got if s != "sum"]
    producer = ["p.send_outputs"] if send_outputs else [
        "p.store", "p.incref", "p.register", "p.Message", "p.send", "p.cleanup"]
    assert steps == ["p.loan"] + producer + [
        "c.recv", "c.start_read", "c.get_ready", "c.tensor", "c.deref", "c.cleanup",
        "p.recv_ack", "p.handle"]
    assert all(got[s] > 0 for s in steps)
    assert abs(got["sum"] - sum(got[s] for s in steps)) < 0.05


def test_calls_transport_refuses_too_few():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "calls_transport.py"), "--n", "3"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 2
    assert "--n: at least 10" in out.stderr


def test_a_pair_whose_consumer_cannot_start_raises_why():
    """bench_transport.PythonPair: a consumer process that cannot be started (here its target
    is a lambda, which spawn cannot pickle) raises that error, not one of the teardown's own
    (it joined the process it never started), and leaves neither of its directories behind."""
    pytest.importorskip("torch")
    sys.path.insert(0, BENCH)
    try:
        import bench_transport
    finally:
        sys.path.remove(BENCH)
    prefix = f"mstar-pytest-pair-{os.getpid()}"
    with pytest.raises((pickle.PicklingError, AttributeError)):
        with bench_transport.PythonPair("arena", target=lambda *a: None, prefix=prefix):
            pass
    assert glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")) == []
    assert glob.glob(os.path.join("/dev/shm", prefix + "*")) == []
