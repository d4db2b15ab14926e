#!/usr/bin/env python3
"""A PyTorch training step plain and under three memory profilers, in one run (issue #14):

  plain          /usr/bin/python3 SAMPLE ARGS
  adprof         adprof run --no-report -o T -- /usr/bin/python3 -m adprof.torch SAMPLE ARGS
                 (PYTHONPATH=<repo>/python; the PyTorch instrumentation, roles from autograd)
  adprof-report  the same as adprof, and the report printed at the end (adprof's equivalent of
                 torch.profiler's parsing of its events when the profiler exits)
  adprof-bare    adprof run --no-report -o T -- /usr/bin/python3 SAMPLE ARGS
                 (recording alone, no instrumentation: every byte "foreign")
  torch.profiler /usr/bin/python3 bench/torch/with_torch_profiler.py SAMPLE ARGS
                 (torch.profiler.profile(activities=[CPU], profile_memory=True) around the script)
  memray         MEMRAY_PYTHON -m memray run -q -f -o F SAMPLE ARGS (memray from PyPI in a
                 throwaway venv that sees Debian's torch; never a dependency of adprof)
  plain-jemalloc, torch.profiler-jemalloc (not run by default): the same with Debian's
                 libjemalloc preloaded, the allocator adprof's interposer forwards to. glibc's
                 malloc gives a freed multi-MiB tensor back to the system and faults it in
                 again the next step; jemalloc keeps it: these two separate that from the
                 profilers' own cost.
  mode-floor     (not run by default; --sample small_mlp only): plain, under a dispatch mode that
                 only calls each op: what any per-op instrumentation in Python pays at least
  adprof-nodecay (not run by default): adprof with MALLOC_CONF=retain:false,dirty_decay_ms:-1:
                 jemalloc's dirty-page decay gives freed multi-MiB tensors back to the system
                 and the next step faults them in again (docs/PERFORMANCE.md, batch 256).

Two measures of what a step costs under each profiler:
- in-step: the sample (samples/torch/fashion_mnist.py) times each training step itself and
  prints the median step after 5 warm-up steps, in wall time and in process CPU time (every
  thread: the profilers' writer threads count). It misses work a profiler defers: torch.profiler
  keeps its events in memory and turns them into Python objects when it exits, per event.
- all-in: every variant also runs with --short-steps steps; the difference of the two runs'
  process CPU (and wall) time, divided by the difference of their steps, is what one more step
  costs from start to finish, deferred work included and start-up excluded.
Variants run round-robin, `--runs` rounds, so that all see the same load; the table gives
medians over the rounds and ratios to plain, and the floor of the issue: adprof with the
instrumentation at most 1.5x a plain step and below torch.profiler, on both measures.

usage: bench/torch/bench_torch.py [--build build/release] [--runs 5] [--steps 40]
       [--short-steps 10]
       [--memray-python /tmp/memray-venv/bin/python] [--variants plain,adprof,...]
       [--sample fashion_mnist|small_mlp]
Exit status: 0 measured (whether or not the floor is met; the table says), 2 usage, 1 a
variant failed.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's, with torch
STEP = re.compile(r"step median ([0-9.]+) ms wall, ([0-9.]+) ms CPU")
VARIANTS = ("plain", "adprof", "adprof-report", "adprof-bare", "torch.profiler", "memray")
EXTRA_VARIANTS = ("plain-jemalloc", "torch.profiler-jemalloc", "adprof-nodecay", "mode-floor")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def command(variant, a, sample, out):
    adprof = os.path.join(a.build, "bin", "adprof")
    if variant == "adprof-nodecay":
        return ["env", "MALLOC_CONF=retain:false,dirty_decay_ms:-1"] + command("adprof", a,
                                                                               sample, out)
    if variant.endswith("-jemalloc"):
        return ["env", "LD_PRELOAD=" + JEMALLOC] + command(variant[:-len("-jemalloc")], a,
                                                            sample, out)
    if variant == "plain":
        return [PYTHON] + sample
    if variant == "mode-floor":
        return [PYTHON] + sample + ["--do-nothing-mode"]
    if variant == "adprof":
        return [adprof, "run", "--no-report", "-o", out, "--", PYTHON, "-m", "adprof.torch"] + sample
    if variant == "adprof-report":
        return [adprof, "run", "-o", out, "--", PYTHON, "-m", "adprof.torch"] + sample
    if variant == "adprof-bare":
        return [adprof, "run", "--no-report", "-o", out, "--", PYTHON] + sample
    if variant == "torch.profiler":
        return [PYTHON, os.path.join(HERE, "with_torch_profiler.py")] + sample
    if variant == "memray":
        return [a.memray_python, "-m", "memray", "run", "-q", "-f", "-o", out] + sample
    raise ValueError(variant)


def run_one(cmd, env):
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate()
    wall = time.monotonic() - start
    return proc.returncode, out, err, wall


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("usage: ")[1].split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--short-steps", type=int, default=None,
                    help="the shorter run of the all-in measure (default: a quarter of --steps)")
    ap.add_argument("--memray-python", default="/tmp/memray-venv/bin/python")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--sample", choices=("fashion_mnist", "small_mlp"), default="fashion_mnist",
                    help="small_mlp: bench/torch/small_mlp.py, a step of small ops (the "
                    "per-op cost's worst case)")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS + EXTRA_VARIANTS:
            ap.error("unknown variant %r (known: %s)" % (v, ", ".join(VARIANTS + EXTRA_VARIANTS)))
    if a.runs < 1 or a.steps < 7:
        ap.error("--runs must be at least 1 and --steps at least 7")
    if a.short_steps is None:
        a.short_steps = max(7, a.steps // 4)
    if not 7 <= a.short_steps < a.steps:
        ap.error("--short-steps must be at least 7 and below --steps")
    a.build = os.path.abspath(a.build)
    if any(v.startswith("adprof") for v in variants) and \
            not os.access(os.path.join(a.build, "bin", "adprof"), os.X_OK):
        ap.error("no adprof in %s/bin (build it, or --build)" % a.build)
    if "mode-floor" in variants and a.sample != "small_mlp":
        ap.error("the variant mode-floor needs --sample small_mlp")
    if "memray" in variants and not os.access(a.memray_python, os.X_OK):
        ap.error("no %s: python3 -m venv --system-site-packages /tmp/memray-venv && "
                 "/tmp/memray-venv/bin/pip install memray (or --memray-python)" % a.memray_python)
    def sample_with(steps):
        script = os.path.join(HERE, "small_mlp.py") if a.sample == "small_mlp" else \
            os.path.join(ROOT, "samples", "torch", "fashion_mnist.py")
        return [script, "--steps", str(steps), "--test-images", "0", "-q"]
    sample = sample_with(a.steps)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADPROF_", "LD_PRELOAD"))}
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    tmp = tempfile.mkdtemp(prefix="adprof-torch-bench-")
    # (step wall ms, step CPU ms, process wall s, CPU s, bytes, all-in wall ms, all-in CPU ms)
    results = {v: [] for v in variants}
    try:
        for r in range(a.runs):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for v in order:
                runs = []
                for steps in (a.short_steps, a.steps):
                    out = os.path.join(tmp, "%s.%d.%d" % (v, r, steps))
                    cmd = command(v, a, sample_with(steps), out)
                    before = os.times()
                    code, stdout, stderr, wall = run_one(cmd, env)
                    after = os.times()
                    cpu = (after.children_user - before.children_user) + \
                          (after.children_system - before.children_system)
                    m = STEP.search(stdout)
                    if code != 0 or not m:
                        sys.stderr.write("bench_torch: %s failed (exit %d): %s\n%s" %
                                         (v, code, " ".join(cmd), stderr[-2000:]))
                        return 1
                    size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
                               if f.startswith(os.path.basename(out)))
                    for f in os.listdir(tmp):
                        os.unlink(os.path.join(tmp, f))
                    runs.append((float(m.group(1)), float(m.group(2)), wall, cpu, size))
                short, long_ = runs
                extra = a.steps - a.short_steps
                all_in_wall = 1e3 * (long_[2] - short[2]) / extra
                all_in_cpu = 1e3 * (long_[3] - short[3]) / extra
                results[v].append(long_ + (all_in_wall, all_in_cpu))
                print("round %d %-15s step %7.2f ms wall %7.2f ms CPU, process %6.2f s wall "
                      "%6.2f s CPU; all-in %7.2f ms wall %7.2f ms CPU a step" %
                      (r + 1, v, long_[0], long_[1], long_[2], long_[3], all_in_wall, all_in_cpu),
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(v, i):
        return statistics.median(x[i] for x in results[v])

    print("sample: %s" % " ".join(os.path.relpath(s, ROOT) if s.startswith(ROOT) else s
                                    for s in sample))
    print("%d rounds, medians; in-step = median step after 5 warm-up steps (the sample's own "
          "timing); all-in = (process time of %d steps - of %d steps) / %d; process = the "
          "whole run of %d steps" % (a.runs, a.steps, a.short_steps, a.steps - a.short_steps,
                                     a.steps))
    print("| variant | in-step wall ms | x plain | in-step CPU ms | x plain | all-in wall ms | "
          "x plain | all-in CPU ms | x plain | process wall s | process CPU s | output |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = "plain" if "plain" in variants else None

    def ratio(v, i):
        return "%.2f" % (med(v, i) / med(base, i)) if base else "-"
    for v in variants:
        size = med(v, 4)
        print("| %s | %.2f | %s | %.2f | %s | %.2f | %s | %.2f | %s | %.2f | %.2f | %s |" %
              (v, med(v, 0), ratio(v, 0), med(v, 1), ratio(v, 1), med(v, 5), ratio(v, 5),
               med(v, 6), ratio(v, 6), med(v, 2), med(v, 3),
               "%.1f MB" % (size / 1e6) if size else "-"))
    if base and "adprof" in variants:
        for i, what in ((0, "in-step wall"), (1, "in-step CPU"), (5, "all-in wall"),
                        (6, "all-in CPU")):
            mine = med("adprof", i) / med(base, i)
            line = "floor (%s): adprof %.2fx plain (<= 1.5x: %s)" % (
                what, mine, "met" if mine <= 1.5 else "MISSED")
            if "torch.profiler" in variants:
                peer = med("torch.profiler", i) / med(base, i)
                line += ", torch.profiler %.2fx (adprof below it: %s)" % (
                    peer, "met" if mine < peer else "MISSED")
            print(line)
    if "adprof" in variants and "plain-jemalloc" in variants:
        for i, what in ((0, "wall"), (1, "CPU")):
            line = "same allocator (jemalloc) (%s): adprof %.2fx plain-jemalloc" % (
                what, med("adprof", i) / med("plain-jemalloc", i))
            if "torch.profiler-jemalloc" in variants:
                line += ", torch.profiler-jemalloc %.2fx" % (
                    med("torch.profiler-jemalloc", i) / med("plain-jemalloc", i))
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
