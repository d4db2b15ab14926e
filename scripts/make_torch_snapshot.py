#!/usr/bin/env python3
"""Makes a real PyTorch memory snapshot on a GPU, for adprof's snapshot reader (test data).

    python3 scripts/make_torch_snapshot.py OUT.pickle [--steps 3] [--batch 256] [--oom]
                                           [--figures FIGURES.json]

Trains the Fashion-MNIST CNN of samples/torch/fashion_mnist.py on CUDA (random images of the
data set's shape: no data set needed) under `torch.cuda.memory._record_memory_history()`,
with PyTorch's default context (Python and C++ frames), tags each phase of a step with
`torch.cuda.memory._set_memory_metadata` where this PyTorch has it ("forward", "backward",
"optimizer"), and writes the snapshot with `torch.cuda.memory._dump_snapshot` (PyTorch's own
pickle, as a training job's would be). With --oom, it then asks for more memory than the device
has, catches the OutOfMemoryError and dumps after it, so that the snapshot holds an `oom`
entry. It prints PyTorch's own figures beside it (the alloc entries, max_memory_allocated and
max_memory_reserved over the recording) to compare with adprof's reading of the file:

    adprof report OUT.pickle     # peak, by role (the metadata), by site, reserved, the OOM

--figures writes the same figures as JSON (for tests/python/cuda_snapshot_test.cpp), with the
OOM's requested bytes and the number of `oom` entries in the file.

Exit status: 0 written, 1 no CUDA device, 2 usage. Needs PyTorch 2.1 or later with CUDA.
"""
import argparse
import json
import os
import pickle
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples",
                                "torch"))
from fashion_mnist import FashionCNN  # noqa: E402


def metadata(text):
    set_metadata = getattr(torch.cuda.memory, "_set_memory_metadata", None)
    if set_metadata is not None:
        set_metadata(text)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--max-entries", type=int, default=200000)
    ap.add_argument("--oom", action="store_true", help="end with a caught out-of-memory error")
    ap.add_argument("--figures", help="write PyTorch's figures to this file as JSON")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("make_torch_snapshot: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    device = torch.device("cuda")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=args.max_entries)
    model = FashionCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (args.batch,), device=device)
        metadata("forward")
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        metadata("backward")
        loss.backward()
        metadata("optimizer")
        optimizer.step()
        metadata("")
    torch.cuda.synchronize()
    oom_requested = 0
    if args.oom:
        free, total = torch.cuda.mem_get_info()
        oom_requested = total * 2
        try:
            torch.empty(oom_requested, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            pass
    torch.cuda.memory._dump_snapshot(args.out)
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(args.out, "rb") as f:
        snapshot = pickle.load(f)
    allocs = sum(e["action"] == "alloc" for t in snapshot["device_traces"] for e in t)
    ooms = sum(e["action"] == "oom" for t in snapshot["device_traces"] for e in t)
    if args.figures:
        with open(args.figures, "w") as f:
            json.dump({"torch": torch.__version__, "device_name": torch.cuda.get_device_name(),
                       "alloc_entries": allocs, "oom_entries": ooms,
                       "oom_requested": oom_requested,
                       "max_memory_allocated": torch.cuda.max_memory_allocated(),
                       "max_memory_reserved": torch.cuda.max_memory_reserved()}, f)
    print(f"make_torch_snapshot: wrote {args.out}: torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}, {allocs} alloc entries, "
          f"max_memory_allocated {torch.cuda.max_memory_allocated()}, "
          f"max_memory_reserved {torch.cuda.max_memory_reserved()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
