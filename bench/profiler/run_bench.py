#!/usr/bin/env python3
"""Profiler overhead benchmark: the allocation storm (bench/profiler/storm.cpp) run plain,
under `adprof run --no-report` (and with --stacks, `adprof run --stacks`) and under heaptrack;
then `adprof report` against `heaptrack_print` on the traces of the same program. Prints medians
of RUNS runs, the rows of one round run one after the other.

usage: bench/profiler/run_bench.py [--build build/ptest] [--threads 2] [--iterations 1000000]
                                   [--runs 5] [--stacks] [--window A:B [--storm-steps 100]]
                                   [--program 'CMD ARGS...']
With --window, the storm marks --storm-steps steps (its first thread) and a row `adprof
--steps A:B` is added: the step window's writer (folding, the steps' merge by time) against the
whole recording, with the writer's peak RSS (the process tree's largest) beside each.
Events = 2 per iteration (a free and a malloc) per thread; with --program (a real program
instead of the storm), the allocations and frees adprof recorded. CPU time is user+sys of the
whole process tree (the program, adprof's CLI, heaptrack's interpreter and compressor).
"""
import argparse, json, os, shlex, shutil, statistics, subprocess, sys, tempfile, time


def timed(cmd, env=None, stdout=subprocess.DEVNULL):
    """Runs cmd; returns (wall seconds, user+sys CPU seconds of its whole tree, the largest
    resident set of its tree in KiB)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit("failed (%d): %s" % (proc.returncode, " ".join(cmd)))
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/ptest")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--stacks", action="store_true", help="also adprof run --stacks")
    ap.add_argument("--program", help="a real program (a command line) instead of the storm")
    ap.add_argument("--window", help="also adprof run --steps A:B (the storm marks steps)")
    ap.add_argument("--storm-steps", type=int, default=100)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    storm = os.path.join(build, "bench/profiler/profiler_bench_storm")
    adprof = os.path.join(build, "bin/adprof")
    heaptrack, heaptrack_print = shutil.which("heaptrack"), shutil.which("heaptrack_print")
    program = shlex.split(a.program) if a.program else [storm, str(a.threads), str(a.iterations)]
    if a.window and not a.program:
        program += ["4096", str(a.storm_steps)]
    events = 2 * a.threads * a.iterations
    tmp = tempfile.mkdtemp(prefix="adprof-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADPROF_", "LD_PRELOAD"))}

    adprofs = (["adprof"] + (["adprof --stacks"] if a.stacks else []) +
               (["adprof --steps " + a.window] if a.window else []))
    rows = {"plain": [], "heaptrack": [], **{n: [] for n in adprofs}}
    sizes = {"heaptrack": [], **{n: [] for n in adprofs}}
    reports = {"heaptrack": [], **{n: [] for n in adprofs}}  # (wall, CPU) of each report
    for run in range(a.runs):
        rows["plain"].append(timed(program, env))
        for name in adprofs:
            trace = os.path.join(tmp, "storm%d%s.adtrace" % (run, name.split()[-1].strip("-:")))
            options = name.split()[1:]
            rows[name].append(timed([adprof, "run", "-o", trace, "--no-report"] + options + ["--"] +
                                    program, env))
            sizes[name].append(os.path.getsize(trace))
            reports[name].append(timed([adprof, "report", trace], env))
            if a.program and run == 0 and name == "adprof":  # count the real program's events
                out = subprocess.run([adprof, "report", "--json", trace], env=env, check=True,
                                     capture_output=True, text=True).stdout
                totals = json.loads(out)["totals"]
                events = totals["allocations"] + totals["frees"]
        if heaptrack:
            base = os.path.join(tmp, "ht%d" % run)
            rows["heaptrack"].append(timed([heaptrack, "-o", base] + program, env))
            sizes["heaptrack"].append(os.path.getsize(base + ".zst"))
            reports["heaptrack"].append(timed([heaptrack_print, base + ".zst"], env))
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)

    med = lambda xs, i: statistics.median(x[i] for x in xs)
    plain_wall = med(rows["plain"], 0)
    if a.program:
        print("%s: %d allocations and frees (median of %d runs)" % (a.program, events, a.runs))
    else:
        print("allocation storm: %d threads x %d iterations = %d events (median of %d runs)"
              % (a.threads, a.iterations, events, a.runs))
    plain_cpu = med(rows["plain"], 1)
    print("%-19s %9s %9s %9s %11s %8s %12s %14s %14s" % ("", "wall s", "slowdown", "CPU x",
                                                           "CPU ns/ev", "RSS MB", "trace B/ev",
                                                           "report s", "report s/Mev"))
    figures = {}
    for name in ["plain"] + adprofs + ["heaptrack"]:
        if not rows[name]:
            continue
        wall, cpu = med(rows[name], 0), med(rows[name], 1)
        size = statistics.median(sizes[name]) / events if name in sizes and sizes[name] else 0
        rep = med(reports[name], 0) if name in reports and reports[name] else 0
        rep_cpu = med(reports[name], 1) if name in reports and reports[name] else 0
        figures[name] = (wall / plain_wall, cpu * 1e9 / events, size, rep * 1e6 / events,
                         cpu / plain_cpu, rep_cpu * 1e6 / events)
        print("%-19s %9.3f %9.2f %9.2f %11.1f %8.0f %12s %14s %14s" % (
            name, wall, wall / plain_wall, cpu / plain_cpu, cpu * 1e9 / events,
            med(rows[name], 2) / 1024,
            "%.4f" % size if size else "-", "%.3f" % rep if rep else "-",
            "%.3f" % (rep * 1e6 / events) if rep else "-"))
        if rep:
            print("%-19s report CPU %.3f s = %.3f s per million events" % (
                "", rep_cpu, rep_cpu * 1e6 / events))
    if "heaptrack" in figures:
        ad, ht = figures["adprof"], figures["heaptrack"]
        print("\ntargets:")
        print("  adprof slowdown <= 1/5 of heaptrack's: wall %.2fx vs %.2fx -> %s; "
              "CPU %.2fx vs %.2fx -> %s" % (ad[0], ht[0], "met" if ad[0] <= ht[0] / 5 else
                                            "MISSED", ad[4], ht[4],
                                            "met" if ad[4] <= ht[4] / 5 else "MISSED"))
        print("  trace bytes/event <= heaptrack's: %.4f vs %.4f -> %s"
              % (ad[2], ht[2], "met" if ad[2] <= ht[2] else "MISSED"))
        print("  report >= 3x faster per event than heaptrack_print: wall %.1fx -> %s; "
              "CPU %.1fx -> %s" % (ht[3] / ad[3], "met" if ht[3] >= 3 * ad[3] else "MISSED",
                                   ht[5] / ad[5], "met" if ht[5] >= 3 * ad[5] else "MISSED"))
        print("  (adprof report reads ahead on a second thread: its wall time gains from a free "
              "core, its CPU time does not)")
        if "adprof --stacks" in figures:
            st = figures["adprof --stacks"]
            print("  with stacks, slowdown <= 1/3 of heaptrack's: wall %.2fx vs %.2fx (ratio %.2f) "
                  "-> %s; CPU %.2fx vs %.2fx (ratio %.2f) -> %s" % (
                      st[0], ht[0], st[0] / ht[0], "met" if st[0] <= ht[0] / 3 else "MISSED",
                      st[4], ht[4], st[4] / ht[4], "met" if st[4] <= ht[4] / 3 else "MISSED"))
            print("  with stacks, trace bytes/event <= heaptrack's: %.4f vs %.4f -> %s"
                  % (st[2], ht[2], "met" if st[2] <= ht[2] else "MISSED"))


if __name__ == "__main__":
    main()
