"""How many of DistributedDataParallel's own tensors have a Python object, for
TorchJob.DdpInternalsGetNoPythonObjects (torch_job_test.cpp): run once as it is and once under
`adprof run --torch`, the counts must be equal (python/adprof/torch/_ddp.py says why).

    ddp_internals.py OUTDIR [--port P] [--steps S]

Two ranks (torch.multiprocessing.spawn, gloo on the CPU). Each trains an MLP through DDP, once
with DDP's defaults and once with gradient_as_bucket_view=True (the gradients are views of
DDP's buckets), and counts, after training:
- tensors, storages: the tensor and storage Python objects alive (the garbage collector's);
- released_tensors, released_storages: those of them released when the DDP object is deleted.
  Those are DDP's own (its Reducer's buckets and their views): the model, its parameters and
  gradients, the optimizer stay alive. PyTorch keeps a Python object made for a C++ tensor for
  as long as the tensor lives, so each one released there was made for a tensor the program
  never touched from Python; a weak reference's callback counts each release.
Each rank writes OUTDIR/<label>.rank<r>.json: {"pid", "rank", "torch", "runs": {config: counts}}.
"""

import argparse
import gc
import json
import os
import sys
import warnings
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn

STORAGE_TYPES = tuple(c for c in (getattr(torch, "UntypedStorage", None),
                                  getattr(torch, "TypedStorage", None),
                                  getattr(torch, "_UntypedStorage", None)) if c is not None)


def live_objects():
    with warnings.catch_warnings():  # TypedStorage's deprecation warning on isinstance
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        return ([o for o in objects if isinstance(o, torch.Tensor)],
                [o for o in objects if isinstance(o, STORAGE_TYPES)])


def train_and_count(steps, **ddp_options):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.Tanh(),
                          nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model, **ddp_options)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    for _ in range(steps):
        x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
        optimizer.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()
    del x, y
    gc.collect()
    tensors, storages = live_objects()
    released = {"tensors": 0, "storages": 0}

    def counter(kind):
        def count(_):
            released[kind] += 1
        return count

    refs = [weakref.ref(t, counter("tensors")) for t in tensors]
    refs += [weakref.ref(s, counter("storages")) for s in storages]
    counts = {"tensors": len(tensors), "storages": len(storages)}
    del tensors, storages
    del ddp
    gc.collect()
    counts["released_tensors"] = released["tensors"]
    counts["released_storages"] = released["storages"]
    del refs, model, optimizer
    gc.collect()
    return counts


def rank_main(rank, world_size, args):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    runs = {"default": train_and_count(args.steps),
            "bucket_view": train_and_count(args.steps, gradient_as_bucket_view=True)}
    account = {"pid": os.getpid(), "rank": rank, "torch": torch.__version__, "runs": runs}
    with open(os.path.join(args.outdir, f"{args.label}.rank{rank}.json"), "w") as f:
        json.dump(account, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--label", default="run")
    ap.add_argument("--port", default="29541")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = args.port
    torch.multiprocessing.spawn(rank_main, args=(2, args), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
