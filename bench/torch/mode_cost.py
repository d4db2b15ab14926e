#!/usr/bin/env python3
"""What a do-nothing TorchDispatchMode costs PyTorch itself, per part of a training step and per
kind of op: the floor under any per-op instrumentation in Python (docs/PERFORMANCE.md, PyTorch).

Runs the Fashion-MNIST CNN of samples/torch (synthetic batch of 64), alternating steps without
and with a mode whose __torch_dispatch__ only calls the op, and times forward, backward and the
optimizer step apart (medians of --rounds); then single ops of Adam's kind with and without it.
No adprof involved. usage: bench/torch/mode_cost.py [--rounds 40]
"""
import argparse
import os
import statistics
import sys
import time
import timeit

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "samples", "torch"))
import fashion_mnist as fm  # noqa: E402


class DoNothing:
    __slots__ = ()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **kwargs) if kwargs else func(*args)


def set_mode(on):
    # The C++-level mode, as the instrumentation sets it on 1.13 (no mode stack helper).
    torch._C._set_torch_dispatch_mode(DoNothing() if on else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = fm.FashionCNN()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    times = {}

    def step(tag):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        for part, dt in (("forward", t1 - t0), ("backward", t2 - t1), ("optimizer", t3 - t2)):
            times.setdefault((tag, part), []).append(dt)
    for _ in range(3):
        step("warm-up")
    for _ in range(a.rounds):
        for tag, on in (("plain", False), ("mode", True)):
            set_mode(on)
            try:
                step(tag)
            finally:
                set_mode(False)
    print("torch %s, %d intra-op threads, medians of %d steps" % (
        torch.__version__, torch.get_num_threads(), a.rounds))
    for part in ("forward", "backward", "optimizer"):
        p, m = (statistics.median(times[(t, part)]) * 1e3 for t in ("plain", "mode"))
        print("%-9s plain %7.2f ms   do-nothing mode %7.2f ms   %+6.2f ms" % (part, p, m, m - p))
    t = torch.randn(32, 32, 3, 3)
    g, m_, v = torch.randn_like(t), torch.zeros_like(t), torch.zeros_like(t)
    a2, b2 = torch.randn(4, 4), torch.randn(4, 4)
    env = {"t": t, "g": g, "m": m_, "v": v, "a": a2, "b": b2, "torch": torch}
    for what, stmt in (("add(a, b), 4x4", "torch.add(a, b)"), ("m.mul_(0.9)", "m.mul_(0.9)"),
                       ("m.add_(g, alpha=0.1)", "m.add_(g, alpha=0.1)"),
                       ("t.addcdiv_(m, v, value=-1e-3)", "t.addcdiv_(m, v, value=-1e-3)")):
        n = 2000
        plain = timeit.timeit(stmt, globals=env, number=n) / n
        set_mode(True)
        try:
            mode = timeit.timeit(stmt, globals=env, number=n) / n
        finally:
            set_mode(False)
        print("%-30s plain %6.1f us   do-nothing mode %6.1f us   %+6.1f us" % (
            what, plain * 1e6, mode * 1e6, (mode - plain) * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
