#!/usr/bin/env python3
"""A PyTorch training step on the GPU, plain and under adprof, in one run (the GPU issue):

  plain        python3 bench_cuda_step.py --child ...
  adprof-bare  adprof run --no-report -o T -- python3 bench_cuda_step.py --child ...
               (recording alone: the caching allocator's cudaMalloc calls, host memory)
  adprof       adprof run --torch --no-report -o T -- python3 bench_cuda_step.py --child ...
               (the PyTorch instrumentation too: ops, phases, roles, CUDA storages as blocks)

The child trains an MLP (4 Linear layers of --width, ReLU, cross-entropy, Adam) on one batch
on --device, synchronising after each step, and prints the median step after 5 warm-up steps,
and PyTorch's own peaks (torch.cuda.max_memory_allocated / reserved). Variants run
round-robin, --rounds rounds; the table gives the medians and the ratios to plain. With
--check, each adprof variant's trace is read back (`adprof report --json`): the device
figures it gives beside PyTorch's own.

usage: bench_cuda_step.py --adprof ADPROF [--python python3] [--rounds 3] [--steps 30]
       [--width 4096] [--batch 1024] [--device cuda] [--check]
Exit status: 0 measured, 1 a variant failed, 2 usage.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

STEP = re.compile(r"step median ([0-9.]+) ms")
PEAKS = re.compile(r"torch peaks: allocated (\d+) reserved (\d+)")
VARIANTS = ("plain", "adprof-bare", "adprof")


def child(a):
    import torch

    dev = torch.device(a.device)
    torch.manual_seed(0)
    layers = []
    for i in range(4):
        layers += [torch.nn.Linear(a.width, a.width if i < 3 else 10), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)
    print("loss %.6f" % loss.item())
    print("step median %.3f ms" % (1e3 * statistics.median(times[5:])))
    # PyTorch's own account of what the step keeps on the device (unique storages; Adam's step
    # counts stay on the CPU beside CUDA moments), for a check to hold adprof's roles against.
    kept = {}
    for role, tensors in (("parameter", model.parameters()),
                          ("optimizer_state", (v for s in opt.state.values() for v in s.values()
                                               if torch.is_tensor(v)))):
        for t in tensors:
            if t.device.type == dev.type:
                kept.setdefault(role, {})[t.untyped_storage().data_ptr()] = \
                    t.untyped_storage().nbytes()
    print("torch bytes: parameter %d optimizer_state %d" % (
        sum(kept.get("parameter", {}).values()), sum(kept.get("optimizer_state", {}).values())))
    if dev.type == "cuda":
        print("torch peaks: allocated %d reserved %d" % (torch.cuda.max_memory_allocated(),
                                                        torch.cuda.max_memory_reserved()))
    return 0


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("usage: ")[1].split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--adprof")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not a.adprof or a.steps < 7 or a.rounds < 1:
        ap.error("--adprof is needed; --steps at least 7, --rounds at least 1")
    me = os.path.abspath(__file__)
    args = ["--child", "--steps", str(a.steps), "--width", str(a.width), "--batch",
            str(a.batch), "--device", a.device]
    tmp = tempfile.mkdtemp(prefix="adprof-cuda-step-")
    results = {v: [] for v in VARIANTS}
    for r in range(a.rounds):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
        for v in order:
            trace = os.path.join(tmp, "%s.%d.adtrace" % (v, r))
            cmd = [a.python, me] + args
            if v == "adprof-bare":
                cmd = [a.adprof, "run", "--no-report", "-o", trace, "--"] + cmd
            elif v == "adprof":
                cmd = [a.adprof, "run", "--torch", "--no-report", "-o", trace, "--"] + cmd
            t0 = time.monotonic()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wall = time.monotonic() - t0
            m = STEP.search(p.stdout)
            if p.returncode != 0 or not m:
                sys.stderr.write("bench_cuda_step: %s failed (exit %d): %s\n%s\n" %
                                 (v, p.returncode, " ".join(cmd), p.stderr[-3000:]))
                return 1
            results[v].append((float(m.group(1)), wall))
            print("round %d %-12s step %.3f ms, process %.2f s" % (r + 1, v, float(m.group(1)),
                                                                   wall), file=sys.stderr)
            peaks = PEAKS.search(p.stdout)
            if a.check and r == 0 and v != "plain":
                rep = subprocess.run([a.adprof, "report", "--json", trace],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if rep.returncode != 0:
                    sys.stderr.write("bench_cuda_step: adprof report failed: %s\n" % rep.stderr)
                    return 1
                d = json.loads(rep.stdout)["device"]
                roles = {k: round(b / 2**20, 1) for k, b in d["by_role"].items() if b}
                # foreign: storages declared outside any op's role (Adam's foreach scratch was,
                # before bc3b527); tests/python/cuda_step_test.cpp holds it at the peak.
                foreign = d["by_role"].get("foreign", 0)
                print("%s trace: device peak %.1f MiB, reserved peak %.1f MiB, at the peak by "
                      "role (MiB) %s, foreign %.2f%% of the peak; PyTorch's own: max allocated "
                      "%.1f MiB, max reserved %.1f MiB" % (
                          v, d["peak"] / 2**20, d["reserved_peak"] / 2**20, roles,
                          100.0 * foreign / d["peak"] if d["peak"] else 0.0,
                          int(peaks.group(1)) / 2**20 if peaks else -1,
                          int(peaks.group(2)) / 2**20 if peaks else -1))
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
    print("MLP 4 x Linear(%d), batch %d, Adam, on %s; %d rounds, medians of the median step "
          "after 5 warm-up steps of %d" % (a.width, a.batch, a.device, a.rounds, a.steps))
    print("| variant | step ms | x plain | process s |")
    print("|---|---:|---:|---:|")
    base = statistics.median(s for s, _ in results["plain"])
    for v in VARIANTS:
        step = statistics.median(s for s, _ in results[v])
        print("| %s | %.3f | %.2f | %.2f |" % (v, step, step / base,
                                               statistics.median(w for _, w in results[v])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
