"""A two-rank data-parallel job on one device, for the GPU checks of issue 32 (cuda_job_test.cpp).

    torchrun --nproc_per_node 2 cuda_job.py OUTDIR --device cpu|cuda [--backend gloo|nccl]
             [--steps S] [--width W]

Both ranks train the same MLP with Adam through DistributedDataParallel on --device (cuda: both
on cuda:0, sharing the one GPU; gloo by default, which takes CUDA tensors; NCCL refuses two
ranks on one device). Rank r trains on batches of 1024 * (r + 1) rows: its forward caches are
r + 1 times rank 0's, which makes rank 1 the job's outlier. Each rank writes OUTDIR/rank<r>.json:
PyTorch's own account (bytes of the unique storages of its parameters and its optimizer state),
its batch, its pid, and on CUDA torch.cuda.max_memory_allocated() and max_memory_reserved() of
its process (each rank is its own process, so these are that rank's own figures).
Exit status: 0 trained, 3 no CUDA device for --device cuda.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from storage_figures import storage_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_job: no CUDA device")
        return 3
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(256, w), nn.ReLU(), nn.Linear(w, w), nn.Tanh(),
                          nn.Linear(w, w), nn.Sigmoid(), nn.Linear(w, 10)).to(device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    batch = 1024 * (rank + 1)
    for _ in range(args.steps):
        x = torch.randn(batch, 256, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    account = {
        "pid": os.getpid(),
        "rank": rank,
        "batch": batch,
        "device": args.device,
        "backend": args.backend,
        "parameter": storage_bytes(model.parameters()),
        # On CUDA, Adam's step counts stay on the CPU: the device's state is its moments.
        "optimizer_state": storage_bytes(v for s in optimizer.state.values() for v in s.values()
                                         if isinstance(v, torch.Tensor)
                                         and v.device.type == device.type),
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        account["max_allocated"] = torch.cuda.max_memory_allocated()
        account["max_reserved"] = torch.cuda.max_memory_reserved()
    with open(os.path.join(args.outdir, f"rank{rank}.json"), "w") as f:
        json.dump(account, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
