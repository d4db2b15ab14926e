#!/usr/bin/env bash
# Times command A against command B in turn (A B A B ...), after one warm-up of each, with GNU
# time's accounting of each finished process tree, and prints per figure the median of each and
# the median of the ratios A/B pair by pair (a ratio holds when the machine's speed drifts, as
# it does on a shared machine: quote medians and ratios, docs/PERFORMANCE.md).
#
# usage: bench/paired.sh [-n RUNS] 'COMMAND A' 'COMMAND B'
#   RUNS: counted pairs (5). The commands are run by `sh -c`; their output is thrown away.
# Exit status: 0 measured, 2 usage, 1 a command failed.
set -euo pipefail

runs=5
if [[ ${1:-} == -n ]]; then
  runs=${2:?usage: bench/paired.sh [-n RUNS] 'COMMAND A' 'COMMAND B'}
  shift 2
fi
if [[ $# -ne 2 || ! $runs =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bench/paired.sh [-n RUNS] 'COMMAND A' 'COMMAND B'" >&2
  exit 2
fi
[[ -x /usr/bin/time ]] || { echo "bench/paired.sh: /usr/bin/time (Debian: time) is needed" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One line per run: user s, system s, wall s, peak resident KiB (the largest process).
time_one() {  # $1: command, $2: file the figures go to
  if ! /usr/bin/time -f '%U %S %e %M' -a -o "$2" sh -c "$1" >/dev/null 2>"$out/err"; then
    echo "bench/paired.sh: failed: $1" >&2
    tail -5 "$out/err" >&2
    exit 1
  fi
}
time_one "$1" "$out/warm"
time_one "$2" "$out/warm"
for ((i = 0; i < runs; ++i)); do
  time_one "$1" "$out/a"
  time_one "$2" "$out/b"
done

awk -v runs="$runs" '
  function median(v, n,   i, j, t) {
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  FNR == 1 { file++ }
  { cpu[file, FNR] = $1 + $2; wall[file, FNR] = $3; mem[file, FNR] = $4 / 1024 }
  END {
    printf "%-16s %12s %12s %12s\n", "figure", "A median", "B median", "A/B median"
    split("cpu wall mem", names, " ")
    for (k = 1; k <= 3; ++k) {
      for (i = 1; i <= runs; ++i) {
        if (k == 1) { a[i] = cpu[1, i]; b[i] = cpu[2, i] }
        if (k == 2) { a[i] = wall[1, i]; b[i] = wall[2, i] }
        if (k == 3) { a[i] = mem[1, i]; b[i] = mem[2, i] }
        r[i] = b[i] > 0 ? a[i] / b[i] : 0
      }
      label = k == 1 ? "CPU s" : k == 2 ? "wall s" : "peak MiB"
      ma = median(a, runs); mb = median(b, runs); mr = median(r, runs)
      printf "%-16s %12.3f %12.3f %12.4f\n", label, ma, mb, mr
    }
  }' "$out/a" "$out/b"
