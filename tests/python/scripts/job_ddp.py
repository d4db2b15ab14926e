"""A two-rank data-parallel training job on CPU (gloo), for the job tests (torch_job_test.cpp).

    job_ddp.py OUTDIR [--spawn N | --launch N] [--workers K] [--context spawn|fork] [--steps S]
               [--spike RANK:STEP:MIB]

Started by torchrun (each rank reads RANK/WORLD_SIZE), by itself with --spawn N
(torch.multiprocessing.spawn: each rank joins the group with its rank, the environment names
none) or with --launch N (a plain launcher: N children with RANK, WORLD_SIZE, MASTER_ADDR set).
Rank r trains on batches of 2048 * (r + 1) rows: its forward caches are r + 1 times rank 0's.
Each rank writes OUTDIR/rank<r>.json: PyTorch's own account of its parameters and optimizer
state (bytes of the unique storages), its batch and its pid, for the test to hold adprof's
report against. --workers K: a DataLoader with K workers started by --context (spawn, fork,
or default: the DataLoader's own, fork on Linux); each worker is a process of its own, traced,
and writes its pid into OUTDIR/worker<r>-<pid> (worker_init_fn: the test's own count).
--spike RANK:STEP:MIB: rank RANK holds MIB MiB more from its forward to its optimizer step in
step STEP (0-based: its STEP-th batch), a step-dependent spike.
"""

import argparse
import functools
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from storage_figures import storage_bytes


def note_worker(outdir, rank, _worker_id):
    with open(os.path.join(outdir, f"worker{rank}-{os.getpid()}"), "w") as f:
        f.write(str(os.getppid()))


def train(rank, world_size, args):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.Tanh(),
                          nn.Linear(512, 512), nn.Sigmoid(), nn.Linear(512, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    batch = 2048 * (rank + 1)
    data = torch.utils.data.TensorDataset(torch.randn(batch * args.steps, 64),
                                          torch.randint(0, 10, (batch * args.steps,)))
    loader_options = {}
    if args.workers:
        loader_options = {"num_workers": args.workers,
                          "worker_init_fn": functools.partial(note_worker, args.outdir, rank)}
        if args.context != "default":
            loader_options["multiprocessing_context"] = args.context
    loader = torch.utils.data.DataLoader(data, batch_size=batch, **loader_options)
    spike_rank, spike_step, spike_mib = (int(v) for v in args.spike.split(":"))
    batches = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        spike = None
        if rank == spike_rank and batches == spike_step:
            spike = torch.ones(spike_mib << 18)  # float32: MIB MiB, held through the backward
        loss.backward()
        optimizer.step()
        del spike
        batches += 1
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    account = {"rank": rank, "world_size": world_size, "pid": os.getpid(), "batch": batch,
               "batches": batches, "parameter": storage_bytes(model.parameters()),
               "optimizer_state": storage_bytes(state)}
    with open(os.path.join(args.outdir, f"rank{rank}.json"), "w") as f:
        json.dump(account, f)
    dist.barrier()
    dist.destroy_process_group()


def spawned(rank, world_size, args):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(rank, world_size, args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--spawn", type=int, default=0)
    parser.add_argument("--launch", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--context", default="spawn")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--port", default="29533")
    parser.add_argument("--spike", default="-1:0:0")
    args = parser.parse_args()
    if args.spawn or args.launch:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = args.port
    if args.spawn:
        torch.multiprocessing.spawn(spawned, args=(args.spawn, args), nprocs=args.spawn)
        return
    if args.launch:
        children = []
        for rank in range(args.launch):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.launch),
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(args.launch))
            argv = [a for a in sys.argv[1:]]
            at = argv.index("--launch")
            del argv[at:at + 2]
            children.append(subprocess.Popen([sys.executable, __file__] + argv, env=env))
        sys.exit(max(c.wait() for c in children))
    dist.init_process_group("gloo")
    train(dist.get_rank(), dist.get_world_size(), args)


if __name__ == "__main__":
    main()
