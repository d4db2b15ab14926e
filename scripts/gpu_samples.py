#!/usr/bin/env python3
"""The samples on the GPU against the CPU engine, and adcore's recording overhead on a GPU
training step (run by scripts/gpu-check.sh on a GPU machine; numpy needed).

  gpu_samples.py check --bin DIR --adprof ADPROF [--data DIR]
    Each sample runs with --device cpu and --device cuda (same policies), writing its gradient
    (--dump-grad). Checks, per sample: the gradients agree (relative L2 error within the
    tolerance of the gradient's dtype: 1e-9 for f64, 1e-3 for f32 after a few training steps);
    the engine's own peaks by role (the line "peak by role: ..." the sample prints) are the same
    on both devices (the total beside them may differ by the host copies that read device
    values); and under `adprof run`, the trace's device peak holds the engine's tensor
    peak (the table shows both: equal within the 0.01 MiB the sample prints where the sample
    does not reset its figures) and its device peak by role sums to it.
  gpu_samples.py overhead --bin DIR --adprof ADPROF [--data DIR] [--rounds 3]
    cnn --device cuda with 50 and 250 training steps, plain and under `adprof run --no-report`,
    rounds interleaved: the wall time of one more step (difference of the two runs / 200 steps),
    medians, and the ratio adprof / plain.
Exit status: 0 every check held (overhead: measured), 1 one failed, 2 usage.
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

import numpy as np

PEAK_LINE = re.compile(r"adcore tensors peak ([0-9.]+) MiB .*?\| (peak by role: [^|]*)\|")
TOLERANCE = {np.dtype("float64"): 1e-9, np.dtype("float32"): 1e-3}


def sample_args(name, data):
    """A short run of each sample: a few gradient calls or training steps."""
    fashion = ["--data-dir", os.path.join(data, "fashion-mnist"), "--train-images", "1000",
               "--test-images", "200"]
    return {
        "quadform": ["--calls", "2"],
        "densenet": ["--calls", "1"],
        "eam": ["--calls", "3", "--no-hand"],
        "mlp": ["--steps", "3"],
        "gather": ["--calls", "1"],
        "cnn": ["--steps", "5", "--log-every", "1"] + fashion,
        "charlm": ["--steps", "5", "--log-every", "1", "--text", os.path.join(data, "GPL-3")],
    }[name]


SAMPLES = ("quadform", "densenet", "eam", "mlp", "gather", "cnn", "charlm")


def run(cmd, timeout=120):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check(a):
    failed = []
    tmp = tempfile.mkdtemp(prefix="adprof-gpu-samples-")
    print("| sample | grad dtype | elements | rel. L2 error | tol | peaks by role equal | "
          "CPU grad s | GPU grad s | trace device peak | engine peak | by role sum |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for name in SAMPLES:
        exe = os.path.join(a.bin, name)
        if not os.access(exe, os.X_OK):
            print("| %s | (not in the bundle) |" % name)
            continue
        args = sample_args(name, a.data)
        out = {}
        for dev in ("cpu", "cuda"):
            grad = os.path.join(tmp, "%s.%s.npy" % (name, dev))
            t0 = time.monotonic()
            code, stdout, stderr = run([exe, "--device", dev, "--dump-grad", grad] + args)
            wall = time.monotonic() - t0
            if code != 0:
                failed.append("%s --device %s exited %d: %s" % (name, dev, code,
                                                                (stderr or stdout)[-400:]))
                break
            m = PEAK_LINE.search(stdout)
            out[dev] = (np.load(grad), m, wall, stdout)
        if len(out) != 2:
            print("| %s | FAILED to run |" % name)
            continue
        g_cpu, g_gpu = out["cpu"][0], out["cuda"][0]
        if g_cpu.shape != g_gpu.shape or g_cpu.dtype != g_gpu.dtype:
            failed.append("%s: gradient %s %s on the CPU, %s %s on the GPU" %
                          (name, g_cpu.dtype, g_cpu.shape, g_gpu.dtype, g_gpu.shape))
            continue
        ref = np.linalg.norm(g_cpu.astype(np.float64))
        err = np.linalg.norm(g_cpu.astype(np.float64) - g_gpu.astype(np.float64)) / max(ref, 1e-300)
        tol = TOLERANCE.get(g_cpu.dtype, 1e-3)
        if not err <= tol:
            failed.append("%s: gradient relative error %.3g over %.0e" % (name, err, tol))
        m_cpu, m_gpu = out["cpu"][1], out["cuda"][1]
        # By role, the same; the total may differ by the host copies that read a device
        # tensor's values (role workspace), which the CPU never makes.
        same_peaks = bool(m_cpu and m_gpu and m_cpu.group(2) == m_gpu.group(2))
        if not same_peaks:
            failed.append("%s: engine peaks differ: CPU '%s', GPU '%s'" % (
                name, m_cpu.group(0) if m_cpu else "(none)", m_gpu.group(0) if m_gpu else "(none)"))
        # Under the profiler, on the GPU.
        trace = os.path.join(tmp, name + ".adtrace")
        code, stdout, stderr = run([a.adprof, "run", "--no-report", "-o", trace, "--", exe,
                                    "--device", "cuda"] + args)
        trace_peak = engine_peak = "-"
        sums = "-"
        if code != 0:
            failed.append("%s under adprof run exited %d: %s" % (name, code, stderr[-400:]))
        else:
            code, rep, err_text = run([a.adprof, "report", "--json", trace])
            if code != 0:
                failed.append("%s: adprof report exited %d: %s" % (name, code, err_text[-400:]))
            else:
                device = json.loads(rep)["device"]
                peak = device["peak"]
                by_role = sum(device["by_role"].values())
                engine = float(m_gpu.group(1)) if m_gpu else -1
                trace_peak = "%.2f MiB" % (peak / 2**20)
                engine_peak = "%.2f MiB" % engine
                sums = "yes" if by_role == peak else "NO (%d)" % by_role
                # The engine's peak counts from the sample's last reset of its figures (after
                # an initial gradient, say); the trace's, from the start: at least as high.
                if peak / 2**20 + 0.0051 < engine:
                    failed.append("%s: trace device peak %.4f MiB below the engine's tensor "
                                  "peak %.2f MiB" % (name, peak / 2**20, engine))
                if by_role != peak:
                    failed.append("%s: device peak by role sums to %d, not %d" %
                                  (name, by_role, peak))
        print("| %s | %s | %d | %.2e | %.0e | %s | %.2f | %.2f | %s | %s | %s |" %
              (name, g_cpu.dtype, g_cpu.size, err, tol, "yes" if same_peaks else "NO",
               out["cpu"][2], out["cuda"][2], trace_peak, engine_peak, sums))
        if name == "mlp":
            print("mlp --device cuda said: " + (m_gpu.group(0) if m_gpu else "(no peak line)"))
    for f in failed:
        print("FAILED: " + f)
    print("samples: %s" % ("all checks held" if not failed else "%d failed" % len(failed)))
    return 1 if failed else 0


def overhead(a):
    exe = os.path.join(a.bin, "cnn")
    fashion = ["--data-dir", os.path.join(a.data, "fashion-mnist"), "--train-images", "4000",
               "--test-images", "0", "--log-every", "1000", "--device", "cuda"]
    tmp = tempfile.mkdtemp(prefix="adprof-gpu-overhead-")
    short, long_ = 50, 250
    per_step = {"plain": [], "adprof": []}
    for r in range(a.rounds):
        for variant in ("plain", "adprof") if r % 2 == 0 else ("adprof", "plain"):
            walls = []
            for steps in (short, long_):
                cmd = [exe, "--steps", str(steps)] + fashion
                if variant == "adprof":
                    cmd = [a.adprof, "run", "--no-report", "-o",
                           os.path.join(tmp, "%d.%d.adtrace" % (r, steps)), "--"] + cmd
                t0 = time.monotonic()
                code, stdout, stderr = run(cmd, timeout=300)
                walls.append(time.monotonic() - t0)
                if code != 0:
                    print("overhead: %s exited %d: %s" % (" ".join(cmd), code, stderr[-400:]))
                    return 1
            step_ms = 1e3 * (walls[1] - walls[0]) / (long_ - short)
            per_step[variant].append(step_ms)
            print("round %d %-6s %d steps %.2f s, %d steps %.2f s: %.3f ms a step" %
                  (r + 1, variant, short, walls[0], long_, walls[1], step_ms))
    plain = statistics.median(per_step["plain"])
    prof = statistics.median(per_step["adprof"])
    print("cnn --device cuda training step (median of %d rounds; (wall of %d steps - of %d) / %d):"
          " plain %.3f ms, under adprof %.3f ms, ratio %.2fx" %
          (a.rounds, long_, short, long_ - short, plain, prof, prof / plain))
    return 0


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    ap.add_argument("mode", choices=("check", "overhead"))
    ap.add_argument("--bin", required=True, help="the folder of the sample executables")
    ap.add_argument("--adprof", required=True, help="the adprof executable")
    ap.add_argument("--data", default=os.path.join(os.getcwd(), ".gpu", "data"))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    return check(a) if a.mode == "check" else overhead(a)


if __name__ == "__main__":
    sys.exit(main())
