"""What each call of a handoff costs from Python: bench_transport.py's handoff with both ends in
one process, so no wake-up or other process is timed, only the calls themselves.

    PYTHONPATH=build/python python3 python/bench/calls_transport.py [--views] [--send-outputs]
        [--n 20000]

Each iteration is one 4 KiB handoff over the arena and the control mesh (ipc, rings): the
producer stores a torch tensor (--views: an mstar_c.Loan with one byte written), holds it for one
consumer, stages it, builds and sends INPUT_SIGNALS and cleans the request up (--send-outputs:
all of that in one CommunicationManager.send_outputs); the consumer
receives it, starts the read, collects it, makes the torch tensor, dereferences and cleans up;
the producer receives the ACK and handles it. Printed: the median of each call over the
iterations after the first 10%, and their sum. docs/python.md sets these beside the same calls
made from C.
"""
import argparse
import ctypes
import shutil
import statistics
import sys
import tempfile
import time

import torch

import mstar_c

CONSUMER = ["c.recv", "c.start_read", "c.get_ready", "c.tensor", "c.deref", "c.cleanup",
            "p.recv_ack", "p.handle"]
STEPS = ["p.loan", "p.store", "p.incref", "p.register", "p.Message", "p.send",
         "p.cleanup"] + CONSUMER
# --send-outputs: the producer's calls from the store to the cleanup are one.
STEPS_SEND_OUTPUTS = ["p.loan", "p.send_outputs"] + CONSUMER


def _send(p, m0, rid, x, mark):
    """The producer's calls one by one, as the reference's producer makes them."""
    infos = p.store_and_return_tensor_info(rid, {"x": [x]})["x"]
    mark("p.store")
    p.increment_ref(infos[0].uuid)
    mark("p.incref")
    p.register_for_send(rid, infos)
    mark("p.register")
    msg = mstar_c.Message("INPUT_SIGNALS", request_id=rid,
                        edges=[mstar_c.GraphEdge("node", "x", infos)])
    mark("p.Message")
    m0.send("w1", msg)
    mark("p.send")
    p.cleanup_request(rid)
    mark("p.cleanup")


def _one(p, c, m0, m1, rid, tensor, views, send_outputs, mark):
    """One handoff, stamping each call through mark(step)."""
    x = tensor
    if views:
        x = p.loan_output(tensor.shape[0], "uint8")
        ctypes.memset(x.data_ptr, 0x5A, 1)
    mark("p.loan")
    if send_outputs:
        p.send_outputs("w1", rid, {"x": [x]}, "node")
        mark("p.send_outputs")
    else:
        _send(p, m0, rid, x, mark)
    got = m1.recv(timeout_ms=0)
    mark("c.recv")
    c.start_read_tensors(got, views=views)
    mark("c.start_read")
    ready = c.get_ready_tensors()
    mark("c.get_ready")
    for r, edges in ready.items():
        for e in edges:
            for info in e.tensor_info:
                t = torch.from_dlpack(c.get_tensor(r, info.uuid))
                mark("c.tensor")
                del t
                c.dereference(info.uuid)
                mark("c.deref")
        c.cleanup_request(r)
        mark("c.cleanup")
    ack = m0.recv(timeout_ms=0)
    mark("p.recv_ack")
    if ack is None or ack.type != "TENSOR_RECEIVED":
        raise RuntimeError("the ACK did not come back at once")
    p.handle_message(ack)
    mark("p.handle")
    if p.num_tensors != 0:
        raise RuntimeError("the producer still holds the tensor after its ACK")


def run(n, views, send_outputs=False):
    """{step: [microseconds]} over n handoffs."""
    torch.set_num_threads(1)
    ipc_dir = tempfile.mkdtemp(prefix="mstar-pycalls-ipc-")
    shm_dir = tempfile.mkdtemp(prefix="mstar-pycalls-", dir="/dev/shm")
    tensor = torch.full((4096,), 7, dtype=torch.uint8)
    steps = {s: [] for s in (STEPS_SEND_OUTPUTS if send_outputs else STEPS)}
    try:
        with mstar_c.Mesh("w0", transport="ipc", ipc_dir=ipc_dir) as m0, \
             mstar_c.Mesh("w1", transport="ipc", ipc_dir=ipc_dir) as m1, \
             mstar_c.CommunicationManager("w0", transport="arena", shm_dir=shm_dir,
                                        send=m0) as p, \
             mstar_c.CommunicationManager("w1", transport="arena", shm_dir=shm_dir,
                                        send=m1) as c:
            # Each side's first message makes the ring to the other (the HELLO handshake).
            m0.send("w1", mstar_c.Message("HELLO"))
            m1.send("w0", mstar_c.Message("HELLO"))
            if m1.recv(timeout_ms=5000) is None or m0.recv(timeout_ms=5000) is None:
                raise RuntimeError("the two meshes did not connect")
            now = time.perf_counter_ns
            clock = {"last": 0, "keep": False}  # made once: no step pays for defining mark

            def mark(step):
                t = now()
                if clock["keep"]:
                    steps[step].append((t - clock["last"]) / 1e3)
                clock["last"] = t

            for i in range(1, n + 1):
                clock["keep"] = i > n // 10
                clock["last"] = now()
                _one(p, c, m0, m1, i, tensor, views, send_outputs, mark)
    finally:
        shutil.rmtree(ipc_dir, ignore_errors=True)
        shutil.rmtree(shm_dir, ignore_errors=True)
    return steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", action="store_true", help="a loan in, a view out")
    ap.add_argument("--send-outputs", action="store_true",
                    help="the producer's calls as one CommunicationManager.send_outputs")
    ap.add_argument("--n", type=int, default=20000, help="handoffs (the first 10%% warm up)")
    a = ap.parse_args(argv)
    if a.n < 10:
        ap.error("--n: at least 10")
    steps = run(a.n, a.views, a.send_outputs)
    total = 0.0
    print(f"{'arena, loans and views' if a.views else 'arena'}, 4 KiB, one process, "
          f"{len(steps['p.loan'])} handoffs: median us per call")
    for name in steps:
        med = statistics.median(steps[name])
        total += med
        print(f"  {name:14s} {med:7.2f}")
    print(f"  {'sum':14s} {total:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
