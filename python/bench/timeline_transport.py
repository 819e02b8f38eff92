"""Where one handoff's round trip goes: bench_transport.py's 4 KiB round trip, timed step by step
in both processes.

    PYTHONPATH=build/python python3 python/bench/timeline_transport.py [--transport arena-views]
        [--n 2000]

The producer and the consumer are bench_transport.py's (the same calls in the same order); the
consumer stamps each step of a handoff with time.perf_counter_ns (CLOCK_MONOTONIC, one clock for
both processes) and hands its stamps back at the end. Printed: the median of each step over the
round trips after the first 10%, from the producer's first call:

    send_one               the producer's whole store, stage and send
    to consumer wake       from the producer's first call to the consumer's Mesh.spin() or poll()
                           returning
    wake->recv             to the first INPUT_SIGNALS out of Mesh.recv
    recv->start_read       start_read_tensors (a copy lands in the background; a view at once)
    ->get_ready            the empty Mesh.recv ending the batch, then get_ready_tensors (with
                           copies the ACK leaves in there)
    ->torch tensor         get_tensor and torch.from_dlpack: the node's tensor
    ->deref returned       del and dereference (with views the ACK leaves in there: the view's
                           release is what lets it go)
    producer has ACK       from the producer's first call to its Mesh.recv returning the ACK
    RT                     the round trip as bench_transport.py measures it

A step that sends a message can return late: the receiver it wakes may take the CPU first.
"""
import argparse
import multiprocessing as mp
import statistics
import sys
import time

import torch

import mstar_c

import bench_transport as bt

ns = time.perf_counter_ns


def _release_ready_timed(mgr, cur):
    """bench_transport._release_ready, stamping its steps into cur (one handoff in flight)."""
    ready = mgr.get_ready_tensors()
    if ready:
        cur["ready"] = ns()
    for rid, edges in ready.items():
        for e in edges:
            for info in e.tensor_info:
                t = torch.from_dlpack(mgr.get_tensor(rid, info.uuid))  # the node's tensor
                cur["tensor"] = ns()
                del t
                mgr.dereference(info.uuid)
                cur["deref"] = ns()
        mgr.cleanup_request(rid)
        cur["rid"] = rid
    return bool(ready)


def consumer(ipc_dir, shm_dir, transport, out):
    """bench_transport.consumer with stamps; sends them to `out` at SHUTDOWN."""
    bt._like_the_c_suite()
    transport, views = bt._kind(transport)
    stamps = []
    with mstar_c.Mesh("worker_1", transport="ipc", ipc_dir=ipc_dir) as mesh, \
         mstar_c.CommunicationManager("worker_1", transport=transport, shm_dir=shm_dir,
                                    send=mesh) as mgr:
        mesh.send("worker_0", mstar_c.Message("HELLO"))
        poller, event_fd = bt._poller(mesh, mgr), mgr.event_fd
        cur = {"wake": ns()}
        while True:
            while (msg := mesh.recv(timeout_ms=0)) is not None:
                cur.setdefault("recv", ns())
                if msg.type == "INPUT_SIGNALS":
                    mgr.start_read_tensors(msg, views=views)
                    cur["start_read"] = ns()
                elif msg.type == "SHUTDOWN":
                    out.put(stamps)
                    mesh.send("worker_0", mstar_c.Message("SHUTDOWN"))
                    return
            if _release_ready_timed(mgr, cur):
                stamps.append(cur)
                cur = {}
            if not mesh.spin():  # as bench_transport.py's consumer
                bt._wait(poller, mgr, event_fd)
            if "recv" not in cur:  # the wake-up that brings the message (a copy lands later)
                cur["wake"] = ns()


def _producer_rounds(p, n):
    """(rid, first call, send_one returned, ACK received, round trip over) per handoff."""
    tensor = torch.full((4096,), 7, dtype=torch.uint8)
    rows = []
    for _ in range(n):
        t0 = ns()
        p.send_one(tensor)
        t1 = t2 = ns()
        while p.mgr.num_tensors > 0:
            msg = p.mesh.recv()
            t2 = ns()
            if msg is not None and msg.type == "TENSOR_RECEIVED":
                p.mgr.handle_message(msg)
        rows.append((p.rid, t0, t1, t2, ns()))
    return rows


def run(transport, n):
    out = mp.get_context("spawn").Queue()
    stamps = {}

    def collect():  # before the consumer is joined: its queue must be read first
        stamps.update({s["rid"]: s for s in out.get(timeout=60)})

    with bt.PythonPair(transport, target=consumer, args=(out,), on_shutdown=collect,
                       prefix="mstar-pytimeline") as p:
        rows = _producer_rounds(p, n)
    return _steps(rows[n // 10:], stamps)


def _steps(rows, stamps):
    """{step: [microseconds]} over the round trips the consumer stamped in full."""
    keys = ("wake", "recv", "start_read", "ready", "tensor", "deref")
    steps = {}
    for rid, t0, t1, t2, t3 in rows:
        s = stamps.get(rid)
        if s is None or any(k not in s for k in keys):
            continue
        for name, v in (("send_one", t1 - t0), ("to consumer wake", s["wake"] - t0),
                        ("wake->recv", s["recv"] - s["wake"]),
                        ("recv->start_read", s["start_read"] - s["recv"]),
                        ("->get_ready", s["ready"] - s["start_read"]),
                        ("->torch tensor", s["tensor"] - s["ready"]),
                        ("->deref returned", s["deref"] - s["tensor"]),
                        ("producer has ACK", t2 - t0), ("RT", t3 - t0)):
            steps.setdefault(name, []).append(v / 1e3)
    return steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="arena-views", choices=["arena", "files", "arena-views"])
    ap.add_argument("--n", type=int, default=2000, help="round trips (the first 10%% warm up)")
    a = ap.parse_args(argv)
    steps = run(a.transport, a.n)
    if not steps:
        print("no round trip was stamped in full", file=sys.stderr)
        return 1
    print(f"{a.transport}, 4 KiB, {len(steps['RT'])} round trips: median us per step")
    for name, v in steps.items():
        print(f"  {name:20s} {statistics.median(v):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
