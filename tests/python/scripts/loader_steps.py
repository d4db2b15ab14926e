"""A training loop fed by DataLoader workers, for the step-window tests (torch_steps_test.cpp,
TorchSteps.WorkersMarkTheirBatchesAsSteps).

    loader_steps.py OUTDIR --batches N [--epochs E] [--context default|fork|spawn]

E epochs (2 by default) of N batches of 64 rows each, shuffled, loaded by a DataLoader with two
persistent workers (started by --context; default: the DataLoader's own, fork on Linux); each
row is copied and jittered in the worker (its memory per batch, its random numbers) and comes
with the pid of the process that loaded it. Writes OUTDIR/losses.json: every step's loss as
repr() of the float (exact), for the test to compare runs with and without adprof, and
OUTDIR/batch_pids.json: for every step, the pid of the worker that loaded its batch (the test's
own account of which worker's batch each step consumed); each worker writes its pid into
OUTDIR/worker-<pid> (worker_init_fn: the test's own count of the workers).
"""

import argparse
import functools
import json
import os

import torch
import torch.nn as nn

ROWS = 64


class Rows(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 256, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return (self.x[i] + 0.01 * torch.randn(256)).clamp(-3, 3), self.y[i], os.getpid()


def note_worker(outdir, _worker_id):
    with open(os.path.join(outdir, f"worker-{os.getpid()}"), "w") as f:
        f.write(str(os.getppid()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--context", default="default")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    options = {"num_workers": 2, "persistent_workers": True, "shuffle": True,
               "worker_init_fn": functools.partial(note_worker, args.outdir)}
    if args.context != "default":
        options["multiprocessing_context"] = args.context
    loader = torch.utils.data.DataLoader(Rows(ROWS * args.batches), batch_size=ROWS, **options)
    losses, pids = [], []
    for _ in range(args.epochs):
        for x, y, pid in loader:
            pids.append(int(pid[0]))
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(repr(loss.item()))
    with open(os.path.join(args.outdir, "losses.json"), "w") as f:
        json.dump(losses, f)
    with open(os.path.join(args.outdir, "batch_pids.json"), "w") as f:
        json.dump(pids, f)


if __name__ == "__main__":
    main()
