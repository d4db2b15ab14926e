#!/usr/bin/env python3
"""A long PyTorch training run recorded whole and with a step window, against plain, in one run
(issue #29, "Any length"; docs/PERFORMANCE.md):

  plain   PYTHON samples/torch/fashion_mnist.py ARGS
  whole   adprof run --torch --no-report -o T -- PYTHON samples/torch/fashion_mnist.py ARGS
  window  adprof run --torch --no-report --steps A:B -o T -- PYTHON ... (the same)

ARGS: --steps N (2,000 by default) of the Fashion-MNIST CNN (batch 16, CPU, -q, no test
images). Per variant: wall time and the process tree's CPU time (the profiler's writer thread
counts), and the trace's bytes (every file of the run); then the window's report is read to
check that it holds every step (its peak per step), and how long `adprof report` takes on each
trace. Variants run round-robin (--runs rounds) so that all see the same load; the table gives
medians and ratios to plain (times) or to whole (bytes).

usage: bench/torch/steps_window.py [--build build/release] [--python PYTHON] [--runs 1]
       [--steps 2000] [--window 1000:1010] [--threads 1]
Exit status: 0 measured, 2 usage, 1 a variant failed or the window's report lacks a step.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAMPLE = os.path.join(ROOT, "samples", "torch", "fashion_mnist.py")
VARIANTS = ("plain", "whole", "window")
ENV = dict(os.environ)


def timed(cmd):
    """Wall seconds and the children's CPU seconds (user + system) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        sys.exit("steps_window: %s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                                       r.stderr[-2000:]))
    return wall, cpu


def trace_bytes(trace):
    return sum(os.path.getsize(f) for f in [trace] + glob.glob(trace + ".*"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--python", default="/root/.cache/adprof/venv-test/bin/python")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--window", default="1000:1010")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS (PyTorch's intra-op threads): 1, as on a loaded 2-core "
                         "machine, where more spin against each other")
    a = ap.parse_args()
    ENV["OMP_NUM_THREADS"] = str(a.threads)
    adprof = os.path.join(a.build, "bin", "adprof")
    if not os.path.exists(adprof):
        ap.error("no %s (build first, or --build)" % adprof)
    sample = [a.python, SAMPLE, "--steps", str(a.steps), "--batch", "16", "--test-images", "0",
              "-q"]
    times = {v: [] for v in VARIANTS}
    sizes = {}
    with tempfile.TemporaryDirectory(prefix="adprof-steps-bench.") as tmp:
        for run in range(a.runs):
            for v in VARIANTS:
                trace = os.path.join(tmp, "%s.%d.adtrace" % (v, run))
                if v == "plain":
                    cmd = sample
                else:
                    cmd = [adprof, "run", "--torch", "--no-report", "-o", trace]
                    if v == "window":
                        cmd += ["--steps", a.window]
                    cmd += ["--"] + sample
                times[v].append(timed(cmd))
                if v != "plain":
                    sizes[v] = trace_bytes(trace)
                    sizes[v + ".trace"] = trace
        report_wall = {}
        reports = {}
        for v in ("whole", "window"):
            t0 = time.perf_counter()
            r = subprocess.run([adprof, "report", "--json", sizes[v + ".trace"]],
                               capture_output=True, text=True)
            report_wall[v] = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit("steps_window: adprof report of %s failed: %s" % (v, r.stderr[-2000:]))
            reports[v] = json.loads(r.stdout)
    whole_steps = {s["step"]: s["peak"] for s in reports["whole"]["steps"]}
    window_steps = {s["step"]: s["peak"] for s in reports["window"]["steps"]}
    summarized = sum(1 for s in reports["window"]["steps"] if s.get("summarized"))
    worst = max((abs(window_steps[k] - whole_steps[k]) / max(1, whole_steps[k])
                 for k in whole_steps if k in window_steps), default=0.0)

    def med(v, i):
        return statistics.median(t[i] for t in times[v])
    print("fashion_mnist.py, %d steps, batch 16, CPU (OMP_NUM_THREADS=%d), %s; %d round(s); "
          "window --steps %s" % (a.steps, a.threads, a.python, a.runs, a.window))
    print("%-8s %10s %8s %10s %8s %14s %8s %10s" % ("variant", "wall s", "x plain", "CPU s",
                                                    "x plain", "trace bytes", "x whole",
                                                    "report s"))
    for v in VARIANTS:
        wall, cpu = med(v, 0), med(v, 1)
        line = "%-8s %10.2f %8.2f %10.2f %8.2f" % (v, wall, wall / med("plain", 0), cpu,
                                                   cpu / med("plain", 1))
        if v != "plain":
            line += " %14d %8.4f %10.2f" % (sizes[v], sizes[v] / sizes["whole"], report_wall[v])
        print(line)
    print("steps in the reports: whole %d, window %d (%d summarized); largest step-peak "
          "difference window/whole %.2f%%" % (len(whole_steps), len(window_steps), summarized,
                                              100 * worst))
    missing = sorted(set(whole_steps) - set(window_steps))
    if missing:
        print("steps_window: the window's report lacks %d steps (first %d)"
              % (len(missing), missing[0]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
