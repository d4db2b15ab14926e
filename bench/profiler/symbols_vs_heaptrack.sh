#!/usr/bin/env bash
# `adprof report` of `PYTHON -c "import torch"` recorded with --stacks, against heaptrack_print
# on heaptrack's trace of the same command, alternated ROUNDS times; medians of wall, user and
# system seconds and max RSS (docs/PERFORMANCE.md, "Symbols at libtorch's scale"). The JSON
# report symbolises every frame of one stack per site (sites[].stack); the text report does not.
# usage: bench/profiler/symbols_vs_heaptrack.sh [ADPROF] [PYTHON] [ROUNDS]
set -euo pipefail
adprof=${1:-build/release/bin/adprof}
python=${2:-/usr/bin/python3}
rounds=${3:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$adprof" run --stacks --no-report -o "$dir/t.adtrace" -- "$python" -c "import torch" 2>/dev/null
heaptrack -o "$dir/ht" "$python" -c "import torch" >/dev/null 2>&1
for _ in $(seq "$rounds"); do
  /usr/bin/time -f "adprof_report %e %U %S %M" -a -o "$dir/times" "$adprof" report "$dir/t.adtrace" \
    >/dev/null 2>&1
  /usr/bin/time -f "heaptrack_print %e %U %S %M" -a -o "$dir/times" heaptrack_print "$dir/ht.zst" \
    >/dev/null 2>&1
  /usr/bin/time -f "adprof_report_json %e %U %S %M" -a -o "$dir/times" "$adprof" report --json \
    "$dir/t.adtrace" >/dev/null 2>&1
done
"$adprof" report --json "$dir/t.adtrace" 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print("trace:", j["trace"]["events"], "events,", len(j["sites"]), "sites")'
python3 - "$dir/times" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *v = line.split()
    rows.setdefault(name, []).append([float(x) for x in v])
print(f"{'median of %d' % len(next(iter(rows.values()))):<18} {'wall s':>8} {'user s':>8} {'sys s':>8} {'max RSS MB':>11}")
for name, runs in rows.items():
    wall, user, sys_, rss = (statistics.median(c) for c in zip(*runs))
    print(f"{name:<18} {wall:8.2f} {user:8.2f} {sys_:8.2f} {rss / 1024:11.0f}")
PY
