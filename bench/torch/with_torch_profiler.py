#!/usr/bin/env python3
"""Runs a training script inside torch.profiler.profile(profile_memory=True), as a user who
wants PyTorch's own memory view would (the benchmark's peer; bench/torch/bench_torch.py).

usage: with_torch_profiler.py [--export FILE] SCRIPT [ARGS...]
The script runs as __main__ with its own argv; its exit status is this one's. --export writes
the profiler's Chrome trace (memory events included) after the script ends.
"""
import runpy
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    args = sys.argv[1:]
    export = None
    if len(args) >= 2 and args[0] == "--export":
        export, args = args[1], args[2:]
    if not args:
        print("usage: with_torch_profiler.py [--export FILE] SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    sys.argv = args
    status = 0
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        try:
            runpy.run_path(args[0], run_name="__main__")
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if export:
        prof.export_chrome_trace(export)
    return status


if __name__ == "__main__":
    sys.exit(main())
