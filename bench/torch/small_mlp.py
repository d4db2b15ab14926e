#!/usr/bin/env python3
"""A training loop whose ops are small: the worst case of a per-op instrumentation (each ATen op
takes a few microseconds, so what a dispatch mode adds per op dominates the step). Five
Linear(64, 64) + ReLU layers, batch 32, MSE loss, Adam: about 200 ATen ops a step on torch 1.13,
most of them views and Adam's in-place updates. Synthetic data, no download.

--do-nothing-mode runs the loop under a dispatch mode whose __torch_dispatch__ only calls the op
(set directly as the C++-level mode on 1.13, as adprof's instrumentation sets its own; a
TorchDispatchMode pushed on 2.x): the floor under any per-op instrumentation in Python.

Prints the line bench_torch.py reads: "step median X ms wall, Y ms CPU" (after 5 warm-up steps).
usage: bench/torch/small_mlp.py [--steps 300] [--width 64] [--layers 5] [--batch 32]
       [--do-nothing-mode] [-q]
"""
import argparse
import statistics
import time

import torch


def enter_do_nothing_mode():
    from torch.utils import _python_dispatch

    if hasattr(_python_dispatch, "_TorchDispatchStackMode"):  # 1.13
        class DoNothing:
            __slots__ = ()

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **kwargs) if kwargs else func(*args)
        torch._C._set_torch_dispatch_mode(DoNothing())
    else:
        class DoNothingMode(_python_dispatch.TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **kwargs) if kwargs else func(*args)
        DoNothingMode().__enter__()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--test-images", type=int, default=0, help=argparse.SUPPRESS)  # bench_torch
    ap.add_argument("--do-nothing-mode", action="store_true")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args()
    if min(a.steps, a.width, a.layers, a.batch) < 1:
        ap.error("--steps, --width, --layers and --batch must be at least 1")
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.randn(a.batch, a.width), torch.randn(a.batch, a.width)
    if a.do_nothing_mode:
        enter_do_nothing_mode()
    step_times, step_cpu = [], []
    start = time.perf_counter()
    for _ in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()
        step_times.append(time.perf_counter() - t0)
        step_cpu.append(time.process_time() - c0)
    elapsed = time.perf_counter() - start
    warm = min(5, a.steps - 1)
    print("train: %d steps in %.2f s, step median %.3f ms wall, %.3f ms CPU; final loss %.6f"
          % (a.steps, elapsed, 1e3 * statistics.median(step_times[warm:]),
             1e3 * statistics.median(step_cpu[warm:]), loss.item()))


if __name__ == "__main__":
    main()
