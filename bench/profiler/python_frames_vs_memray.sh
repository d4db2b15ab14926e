#!/usr/bin/env bash
# Python frames in call stacks against memray (docs/PERFORMANCE.md, "Python frames"): the same
# Python program plain, under `adprof run --stacks` with Python frames and without (the program
# read from standard input: native frames only), and under `memray run` and
# `memray run --native`. Wall and CPU seconds per run, trace bytes; rounds alternate the tools.
#   bash bench/profiler/python_frames_vs_memray.sh BUILD MEMRAY PYTHON [ROUNDS] [SCRIPT [ARGS...]]
# BUILD: adprof's build tree (build/release); MEMRAY: the memray executable (of a venv of
# PYTHON's version); PYTHON: the interpreter; SCRIPT: bench/profiler/json_program.py.
# Every run is PYTHONMALLOC=malloc (each Python object a malloc, as for the other Python figures).
set -euo pipefail
build=$1 memray=$2 python=$3 rounds=${4:-3}
script=${5:-$(dirname "$0")/json_program.py}
shift $(($# < 5 ? $# : 5))
args=("$@")
adprof=$build/bin/adprof
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONMALLOC=malloc
measure() {  # NAME OUTPUT_FILE COMMAND...: one line, NAME wall user+sys bytes
  local name=$1 out=$2
  shift 2
  rm -rf "$out" "$out".*
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >/dev/null 2>"$work/err" </dev/null ||
    { cat "$work/err" >&2; exit 1; }
  read -r wall user sys <"$work/time"
  local bytes=0
  [ -e "$out" ] && bytes=$(stat -c %s "$out")
  echo "$name $wall $(echo "$user + $sys" | bc) $bytes"
}
for round in $(seq "$rounds"); do
  measure plain "$work/none" "$python" "$script" "${args[@]}"
  measure adprof_python_frames "$work/t.adtrace" "$adprof" run --stacks --no-report \
    -o "$work/t.adtrace" -- "$python" "$script" "${args[@]}"
  measure adprof_native_frames "$work/n.adtrace" bash -c \
    "\"$adprof\" run --stacks --no-report -o \"$work/n.adtrace\" -- \"$python\" - ${args[*]} < \"$script\""
  measure memray "$work/m.bin" "$memray" run -q -f -o "$work/m.bin" "$script" "${args[@]}"
  measure memray_native "$work/mn.bin" "$memray" run -q -f --native -o "$work/mn.bin" "$script" \
    "${args[@]}"
done
# The last adprof trace's events (the denominator of bytes/event for every tool: memray records
# the same allocations and frees) and its allocations and frees.
"$adprof" report --json "$work/t.adtrace" | "$python" -c "
import json, sys
r = json.load(sys.stdin)
print('events', r['trace']['events'], 'allocations', r['totals']['allocations'],
      'frees', r['totals']['frees'])"
