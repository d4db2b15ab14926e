#!/usr/bin/env python3
"""PyTorch 2's memory-timeline categories for the Fashion-MNIST sample, at the timeline's peak,
to set beside adprof's recorded roles (docs/PYTORCH.md, "PyTorch 2's categories and adprof's
roles"). Needs PyTorch >= 2.1 (torch.profiler's memory timeline); Debian's 1.13 has none.

    python3 samples/torch/pt2_categories.py --steps 3 [fashion_mnist.py flags...]

It trains the sample (samples/torch/fashion_mnist.py: same model, data, step and flags) for a
few steps, the training loop inside torch.profiler.profile(profile_memory=True,
record_shapes=True, with_stack=True) as PyTorch's memory-timeline recipe has it, then
asks the profiler's own memory model (torch.profiler._memory_profiler.MemoryProfile, what
export_memory_timeline draws) which category it inferred for each tensor, and prints the bytes
of each category live at the peak of the categorised timeline, with the largest tensors of each.
"""
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    if not hasattr(torch.profiler.profile, "export_memory_timeline"):
        print("pt2_categories: torch %s has no memory timeline (PyTorch >= 2.1 needed)"
              % torch.__version__, file=sys.stderr)
        return 2
    from torch.profiler._memory_profiler import Action

    sys.path.insert(0, HERE)
    import fashion_mnist as fm

    a = fm.parse_args(argv)
    torch.manual_seed(a.seed)
    x_train, y_train = fm.load(a.data_dir, "train", a.train_images)
    model = fm.FashionCNN(a.channels, a.hidden, checkpointing=a.checkpoint)
    if a.fused_step:
        optimizer, hooks = fm.fuse_step_into_backward(model, a.lr)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    generator = torch.Generator().manual_seed(a.seed)
    # The training loop inside the profiler, as PyTorch's memory-timeline recipe has it.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        for step in range(a.steps):
            idx = torch.randint(0, len(x_train), (a.batch,), generator=generator)
            x, y = fm.to_input(x_train[idx]), y_train[idx]
            fm.train_step(model, optimizer, x, y, a.set_to_none, a.fused_step)
    mp = prof._memory_profile()  # what export_memory_timeline draws from
    # The timeline replayed as export_memory_timeline's _coalesce_timeline does (each action
    # moves bytes between categories), keeping the live tensors to list the peak's.
    live = {}  # TensorKey -> (version, size)
    total, peak, peak_time, at_peak, first = 0, 0, 0, {}, None
    for t, action, (key, version), size in mp.timeline:
        if key.device.type != "cpu":
            continue
        if t > 0 and first is None:
            first = t
        if action in (Action.PREEXISTING, Action.CREATE):
            live[key] = (version, size)
            total += size
        elif action == Action.INCREMENT_VERSION:
            live[key] = (version + 1, size)
        elif action == Action.DESTROY:
            live.pop(key, None)
            total -= size
        if total > peak:
            peak, peak_time, at_peak = total, t, dict(live)
    print("torch %s: peak of the memory timeline %.1f KiB, %.3f ms into the profiled steps "
          "(%d tensors)" % (torch.__version__, peak / 1024, (peak_time - first) / 1e6,
                            len(at_peak)))
    by_cat = collections.defaultdict(list)
    for key, (version, size) in at_peak.items():
        cat = mp._categories.get(key, version)
        by_cat[cat.name if cat is not None else "(none)"].append(size)
    for name, tensors in sorted(by_cat.items(), key=lambda kv: -sum(kv[1])):
        total = sum(tensors)
        sizes = ", ".join("%.1f" % (s / 1024) for s in sorted(tensors, reverse=True)[:6])
        print("  %-18s %10.1f KiB  %3d tensors  largest (KiB): %s" %
              (name, total / 1024, len(tensors), sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
