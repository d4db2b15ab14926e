#!/usr/bin/env python3
"""Before/after of the recording overhead: the allocation storm plain and under `adprof run
--no-report` of two builds, alternated round by round so that both see the same load. Prints
medians (wall; CPU = user+sys of the whole process tree, from wait4) and trace bytes per event.

usage: bench/profiler/ab_storm.py --before BUILD --after BUILD [--iterations 4000000] [--runs 9]
       [--env-after NAME=VALUE ...] [--stacks] [--program 'CMD ARGS...' --events N]
The storm binary is the --before build's, so both record the same program. --program records a
real program instead (N: its allocations and frees, for the per-event figures); --stacks runs
both with `adprof run --stacks`. Each round's trace sizes are printed too: with a real
program the time deltas, and so the bytes, move with the load.
"""
import argparse, os, shlex, statistics, subprocess, sys, tempfile, time


def timed(cmd, env):
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("failed: " + " ".join(cmd))
    return time.monotonic() - start, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--iterations", default="4000000")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--env-after", action="append", default=[])
    ap.add_argument("--stacks", action="store_true")
    ap.add_argument("--program")
    ap.add_argument("--events", type=int)
    a = ap.parse_args()
    storm = os.path.join(os.path.abspath(a.before), "bench/profiler/profiler_bench_storm")
    program = [storm, "2", a.iterations]
    events = 2 * 2 * int(a.iterations)
    if a.program:
        if not a.events:
            sys.exit("--program needs --events")
        program, events = shlex.split(a.program), a.events
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADPROF_", "LD_PRELOAD"))}
    after_env = dict(env)
    after_env.update(kv.split("=", 1) for kv in a.env_after)
    variants = {"before": (a.before, env), "after": (a.after, after_env)}
    tmp = tempfile.mkdtemp(prefix="adprof-ab-")
    times = {"plain": [], "before": [], "after": []}
    sizes = {}
    for i in range(a.runs):
        times["plain"].append(timed(program, env))
        for name, (build, variant_env) in variants.items():
            trace = os.path.join(tmp, "%s%d" % (name, i))
            adprof = os.path.join(os.path.abspath(build), "bin/adprof")
            options = ["--stacks"] if a.stacks else []
            times[name].append(timed([adprof, "run", "--no-report", "-o", trace] + options +
                                     ["--"] + program, variant_env))
            sizes.setdefault(name, []).append(os.path.getsize(trace))
            os.unlink(trace)
    plain_wall = statistics.median(t[0] for t in times["plain"])
    plain_cpu = statistics.median(t[1] for t in times["plain"])
    if a.program:
        print("%s: %d events, %d runs (medians)%s" %
              (a.program, events, a.runs, ", --stacks" if a.stacks else ""))
    else:
        print("storm: 2 threads x %s iterations, %d events, %d runs (medians)%s" %
              (a.iterations, events, a.runs, ", --stacks" if a.stacks else ""))
    for name, runs in times.items():
        wall = statistics.median(t[0] for t in runs)
        cpu = statistics.median(t[1] for t in runs)
        size = (" trace %.3f B/event (rounds: %s)" %
                (statistics.median(sizes[name]) / events,
                 " ".join("%.3f" % (x / events) for x in sizes[name])) if name in sizes else "")
        print("%-7s wall %.3f s (%.2fx)  CPU %.3f s (%.2fx)  %.1f CPU ns/event%s" %
              (name, wall, wall / plain_wall, cpu, cpu / plain_cpu, cpu / events * 1e9, size))


if __name__ == "__main__":
    main()
