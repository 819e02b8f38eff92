"""Two worker processes hand torch tensors through the shared-memory arena.

    PYTHONPATH=build/python python3 python/examples/arena_workers.py

worker_0 stores a tensor, stages it and sends its descriptor in an INPUT_SIGNALS message;
worker_1 reads it, checks the bytes and acknowledges (TENSOR_RECEIVED, sent by the manager
through the mesh), which frees it in worker_0. cuda_workers.py is the same with CUDA tensors.
"""
import multiprocessing as mp
import sys
import tempfile

import torch

import mstar_c

N = 4


def consumer(ipc_dir, shm_dir, device):
    with mstar_c.Mesh("worker_1", ipc_dir=ipc_dir) as mesh, \
         mstar_c.CommunicationManager("worker_1", transport="arena", shm_dir=shm_dir,
                                    send=mesh, device=device) as mgr:
        mesh.send("worker_0", mstar_c.Message("HELLO"))
        for _ in range(N):
            msg = mesh.recv()
            for read in mgr.start_read_tensors(msg.request_id, msg.edges):
                read.result()  # device reads land asynchronously
            for rid, edges in mgr.get_ready_tensors().items():  # the ACK leaves here
                uuid = edges[0].tensor_info[0].uuid
                t = torch.from_dlpack(mgr.get_tensor(rid, uuid))  # no copy
                want = torch.full_like(t, float(rid))
                assert torch.equal(t, want), f"request {rid}: wrong bytes"
                print(f"worker_1: request {rid}: {tuple(t.shape)} {t.dtype} on {t.device} ok")
                del t
                mgr.dereference(uuid)  # the node is done with it


def producer(ipc_dir, shm_dir, device):
    with mstar_c.Mesh("worker_0", ipc_dir=ipc_dir) as mesh, \
         mstar_c.CommunicationManager("worker_0", transport="arena", shm_dir=shm_dir,
                                    send=mesh, device=device) as mgr:
        assert mesh.recv().type == "HELLO"
        for rid in range(1, N + 1):
            x = torch.full((256, 1024), float(rid), device=device or "cpu")
            if device:
                torch.cuda.synchronize()  # the step's work is done before its outputs are stored
            infos = mgr.store_and_return_tensor_info(rid, {"x": [x]})["x"]
            mgr.increment_ref(infos[0].uuid)  # one consumer: freed by its ACK
            mgr.register_for_send(rid, infos)  # staged: the descriptor may leave now
            mesh.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=rid,
                                                edges=[mstar_c.GraphEdge("node", "x", infos)]))
            mgr.cleanup_request(rid)  # what is still referenced waits for the ACK
        while mgr.num_tensors:
            mgr.handle_message(mesh.recv())  # TENSOR_RECEIVED
        print("worker_0: every tensor acknowledged and freed")


def main(device=None):
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as ipc_dir, tempfile.TemporaryDirectory() as shm_dir:
        p = ctx.Process(target=consumer, args=(ipc_dir, shm_dir, device))
        p.start()
        producer(ipc_dir, shm_dir, device)
        p.join()
        return p.exitcode


if __name__ == "__main__":
    sys.exit(main())
