#!/usr/bin/env python3
"""Training-workload benchmark: samples/cnn and samples/charlm with every memory policy on, all
off (--naive) and each one off in turn. For each configuration: steps per second and CPU time per
step from a plain run (the sample's own training-loop clock; user+sys of the process), and the
host peak and what was live at it, by role, from a run under `adprof run` (`adprof report
--json`); and adcore's own per-role maxima (each role's highest live bytes during training,
whenever it happened: the sample's "peak by role" line). With the reusable tape (on by default)
a step's buffers stay in the tape's arena between steps, counted as `workspace` while idle, so
what the profiler sees at its peak instant is mostly idle arena; adcore's maxima show what the
roles reached while in use.

usage: bench/workloads/run_bench.py [--build build/release] [--steps 60] [--models cnn,charlm]
                                    [--configs default,naive,...]
Steps per second are wall-clock and move with the machine's load; CPU ms/step less so.
OPENBLAS_NUM_THREADS=1 is set (unless already set): OpenBLAS would otherwise start a worker
thread, which may map a second 128 MiB buffer before adcore limits BLAS to one thread.
"""
import argparse, json, os, re, subprocess, sys, tempfile, time

CONFIGS = [
    ("default", []),
    ("naive", ["--naive"]),
    ("no-activity-analysis", ["--no-activity-analysis"]),
    ("no-early-release", ["--no-early-release"]),
    ("no-inplace-accumulation", ["--no-inplace-accumulation"]),
    ("no-fused-optimizer", ["--no-fused-optimizer"]),
    ("no-checkpoint", ["--no-checkpoint"]),
    ("no-reuse-tape", ["--no-reuse-tape"]),
    ("widen-indices", ["--widen-indices"]),
]
# Default sizes of the samples; evaluation and generation kept short (not timed anyway).
MODELS = {
    "cnn": ["--test-images", "200"],
    "charlm": ["--generate", "0"],
}
ROLES = ["parameter", "input", "activation", "forward_cache", "adjoint", "accumulation",
         "duplicate", "optimizer_state", "workspace", "foreign"]
SHORT = {"parameter": "param", "input": "input", "activation": "activ", "forward_cache": "fcache",
         "adjoint": "adjoint", "accumulation": "accum", "duplicate": "dup",
         "optimizer_state": "optstate", "workspace": "wspace", "foreign": "foreign"}


def run(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), err))
    return out


def timed(cmd):
    """Runs cmd; returns (stdout, user+sys CPU seconds)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("failed: %s" % " ".join(cmd))
    return out, ru.ru_utime + ru.ru_stime


def mib(b):
    return "%.2f" % (b / 1048576.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--models", default="cnn,charlm")
    ap.add_argument("--configs", default=",".join(c for c, _ in CONFIGS))
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    adprof = os.path.join(a.build, "bin", "adprof")
    for p in [adprof] + [os.path.join(a.build, "samples", m) for m in a.models.split(",")]:
        if not os.access(p, os.X_OK):
            sys.exit("%s: not built (cmake --build %s --target adprof adprof_preload cnn charlm)"
                     % (p, a.build))
    wanted = a.configs.split(",")
    tmp = tempfile.mkdtemp(prefix="adprof-wlbench-")
    print("steps=%d, build=%s, load average %.1f" % (a.steps, a.build, os.getloadavg()[0]))
    cols = (["model", "config", "steps/s", "cpu ms/step", "peak MiB"] +
            ["@peak " + SHORT[r] for r in ROLES[:9]] +
            ["max " + r for r in ("fcache", "adjoint", "accum", "dup", "optstate")])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for model in a.models.split(","):
        exe = os.path.join(a.build, "samples", model)
        for name, flags in CONFIGS:
            if name not in wanted:
                continue
            cmd = [exe, "--steps", str(a.steps), "-q"] + MODELS[model] + flags
            out, cpu = timed(cmd)
            m = re.search(r"train: (\d+) steps in ([0-9.]+) s \(([0-9.]+) steps/s\)", out)
            rate = float(m.group(3)) if m else float("nan")
            mx = re.search(r"forward_cache ([0-9.]+) MiB, adjoint ([0-9.]+) MiB .*accumulation "
                           r"([0-9.]+) MiB .*duplicate ([0-9.]+) MiB, optimizer_state ([0-9.]+) MiB",
                           out)
            maxima = list(mx.groups()) if mx else ["?"] * 5
            trace = os.path.join(tmp, "%s-%s.adtrace" % (model, name))
            run([adprof, "run", "--no-report", "-o", trace, "--"] + cmd)
            rep = json.loads(run([adprof, "report", "--json", trace]))
            os.remove(trace)
            by = rep["peak"]["by_role"]
            row = [model, name, "%.1f" % rate, "%.1f" % (1000.0 * cpu / a.steps),
                   mib(rep["peak"]["bytes"])] + [mib(by.get(r, 0)) for r in ROLES[:9]] + maxima
            print("| " + " | ".join(row) + " |", flush=True)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
