"""The PyTorch what-if against real runs (docs/WHATIF.md, "Engines with layers").

Records train_blocks.py unmodified under adprof with the PyTorch instrumentation, takes each
technique's predicted peak from `adprof whatif --json`, then records the script with that
technique really applied and checks the prediction against the recorded host peak (5%, the
what-if's bar). Each comparison prints one [torch-whatif] line.

usage: check_whatif.py ADPROF PYTHON PACKAGE_DIR WORKDIR [script args...]
Exit 0: all within the bar; 1: a check failed; 77: skipped (no torch in PYTHON).

ADPROF_WHATIF_TECHNIQUES=T1,T2: only those techniques measured; every policy's prediction is
still required. The sanitizer builds measure one (each analysis of a PyTorch trace takes a
minute and a half there); the release build measures all three.
"""
import json
import os
import shutil
import subprocess
import sys

BAR = 0.05
# technique switch of train_blocks.py -> the policy whose prediction it checks
TECHNIQUES = [("checkpoint", "checkpointing"), ("fused", "fused_optimizer"),
              ("set_to_none", "free_gradients")]


def main():
    if len(sys.argv) < 5:
        sys.stderr.write(__doc__)
        return 2
    adprof, python, package, work = sys.argv[1:5]
    extra = sys.argv[5:]
    measured = [t for t, _ in TECHNIQUES]
    if os.environ.get("ADPROF_WHATIF_TECHNIQUES"):
        measured = os.environ["ADPROF_WHATIF_TECHNIQUES"].split(",")
        if not set(measured) <= {t for t, _ in TECHNIQUES}:
            sys.stderr.write("ADPROF_WHATIF_TECHNIQUES: techniques are %s\n"
                             % ", ".join(t for t, _ in TECHNIQUES))
            return 2
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "train_blocks.py")
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: %s cannot import torch (Debian: apt install python3-torch)" % python)
        return 77
    if not os.path.exists(os.path.join(package, "adprof", "torch", "__main__.py")):
        print("SKIP: no PyTorch instrumentation in %s (adprof/torch/__main__.py)" % package)
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, PYTHONPATH=package)

    def record(name, technique_args):
        trace = os.path.join(work, name + ".adtrace")
        cmd = [adprof, "run", "--no-report", "-o", trace, "--", python, "-m", "adprof.torch",
               script] + extra + technique_args
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write("failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
            sys.exit(1)
        return trace

    def peak(trace):
        r = subprocess.run([adprof, "report", "--json", trace], capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            sys.exit(1)
        return json.loads(r.stdout)["peak"]["bytes"]

    base = record("unmodified", [])
    r = subprocess.run([adprof, "whatif", "--json", base], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        return 1
    w = json.loads(r.stdout)
    with open(os.path.join(work, "whatif.json"), "w") as f:
        f.write(r.stdout)
    if w.get("engine", {}).get("name") != "pytorch":
        print("FAIL: the trace does not name its engine pytorch: %s" % w.get("engine"))
        return 1
    policies = {p["name"]: p for p in w["policies"]}
    failed = 0
    measured_base = w["measured_peak"]
    mib = 1024.0 * 1024.0
    for technique, policy in TECHNIQUES:
        p = policies.get(policy)
        if not p or not p.get("applicable"):
            print("FAIL: %s: no prediction (%s)" % (policy, p.get("reason") if p else "absent"))
            failed += 1
            continue
        if technique not in measured:
            print("[torch-whatif] %-16s predicted %.3f MiB, not measured "
                  "(ADPROF_WHATIF_TECHNIQUES)" % (policy, p["predicted_peak"] / mib))
            continue
        real = peak(record(technique, ["--technique", technique]))
        predicted = p["predicted_peak"]
        error = (predicted - real) / real
        ok = abs(error) <= BAR
        print("[torch-whatif] %-16s recorded %.3f MiB predicted %.3f MiB measured %.3f MiB "
              "error %+.2f%% %s" % (policy, measured_base / mib, predicted / mib, real / mib,
                                    100 * error, "ok" if ok else "FAIL"))
        print("    fix: %s" % p.get("switch_on", ""))
        print("    %s" % p.get("explanation", ""))
        # The technique must really change the peak, or the comparison proves little.
        if abs(measured_base - real) < 0.02 * measured_base:
            print("FAIL: %s changed the real peak by less than 2%% (%.3f -> %.3f MiB): make "
                  "the workload show it" % (technique, measured_base / mib, real / mib))
            failed += 1
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
