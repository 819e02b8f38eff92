"""The benchmark's tools run as docs/python.md shows them (a few round trips, not a
measurement): timeline_transport.py times every step of a round trip in both processes."""
import os
import subprocess
import sys

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
