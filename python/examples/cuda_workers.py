"""arena_workers.py with CUDA tensors: each manager gets a CUDA backend, the producer's CUDA
tensor is staged through the arena and the consumer's read lands in GPU memory, handed to torch
as a CUDA tensor (DLPack, no copy).

    PYTHONPATH=build/python python3 python/examples/cuda_workers.py [cuda:N]
"""
import sys

import torch

import mstar_c
from arena_workers import main

if __name__ == "__main__":
    if not torch.cuda.is_available() or not mstar_c.built_with_cuda():
        print("cuda_workers: needs a GPU and libmstar built with CUDA")
        sys.exit(77)
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cuda:0"))
