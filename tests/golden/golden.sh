#!/usr/bin/env bash
# The reports of every committed trace, byte for byte: `adprof report`, `report --json`, `whatif` and
# `dump` of each file of the reader's corpus (tests/profiler/corpus: whole, cut, damaged and
# crafted traces of every format version, and non-traces), of the pre-protocol AD trace
# (tests/protocol), of a recorded AD trace of the current format (golden/inputs) and of the
# PyTorch memory snapshots (tests/torch_snapshot/data), compared with what this folder holds.
# Each expected file is the command's standard output, then its standard error and its exit
# status, so a bad file's one-line error and exit code are held too. Moves that change no
# behaviour (issue 27) must leave every one as it is.
#
# usage: golden.sh ADPROF SOURCE_ROOT          compare (exit 1 on any difference, with a diff)
#        ADPROF_GOLDEN_UPDATE=1 golden.sh ...   rewrite the expected files instead
# (`ADPROF_GOLDEN_UPDATE=1 ctest --test-dir build/release -R golden.reports`, then review the
# diff with git: an intended change of a report is committed with its expected files.)
set -u
adprof=${1:?usage: golden.sh ADPROF SOURCE_ROOT}
root=${2:?usage: golden.sh ADPROF SOURCE_ROOT}
[ -x "$adprof" ] || { echo "golden.sh: $adprof is not a program" >&2; exit 2; }
adprof=$(cd "$(dirname "$adprof")" && pwd)/$(basename "$adprof")
expected_dir=$root/tests/golden/expected
update=${ADPROF_GOLDEN_UPDATE:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The inputs, as directory and file name: each command runs in the file's directory with its
# bare name, so that no output holds a path of this machine's checkout.
inputs=()
for f in "$root"/tests/profiler/corpus/* "$root"/tests/protocol/*.adtrace \
  "$root"/tests/golden/inputs/*.adtrace "$root"/tests/torch_snapshot/data/*.pickle; do
  case $f in *.sh) continue ;; esac
  [ -f "$f" ] && inputs+=("$f")
done
[ ${#inputs[@]} -gt 50 ] || { echo "golden.sh: only ${#inputs[@]} inputs found under $root" >&2; exit 2; }

# One expected file per input and command: stdout, then stderr, then the exit status.
run_one() {  # NAME DIR FILE ARGS...
  local name=$1 dir=$2 file=$3
  shift 3
  local out=$tmp/$name
  (cd "$dir" && ADPROF_PROGRESS_DELAY_MS=100000000 "$adprof" "$@" "$file" >"$out.stdout" 2>"$out.stderr")
  local rc=$?
  {
    cat "$out.stdout"
    echo "--- stderr ---"
    cat "$out.stderr"
    echo "--- exit $rc ---"
  } >"$out"
  rm -f "$out.stdout" "$out.stderr"
}

# Traces with call stacks are symbolised when they are read, against the libraries of the
# machine that reads them (a system library whose build-id matches gives names and lines): their
# reports differ from one machine to another, so only their events (dump) are held.
symbolised_on_reading=" real-v5-stacks.adtrace "
for path in "${inputs[@]}"; do
  dir=$(dirname "$path")
  file=$(basename "$path")
  run_one "$file.dump" "$dir" "$file" dump
  case $symbolised_on_reading in *" $file "*) continue ;; esac
  run_one "$file.report" "$dir" "$file" report
  run_one "$file.report-json" "$dir" "$file" report --json
  run_one "$file.whatif" "$dir" "$file" whatif
done

if [ "$update" = 1 ]; then
  rm -rf "$expected_dir"
  mkdir -p "$expected_dir"
  cp "$tmp"/* "$expected_dir"/
  echo "golden.sh: wrote $(ls "$expected_dir" | wc -l) expected files to $expected_dir"
  exit 0
fi

[ -d "$expected_dir" ] || { echo "golden.sh: no expected files in $expected_dir" >&2; exit 2; }
status=0
# Every expected file must have been made again (an input that went away is a difference too).
for e in "$expected_dir"/*; do
  [ -f "$tmp/$(basename "$e")" ] || { echo "missing: $(basename "$e") (its input is gone)"; status=1; }
done
for got in "$tmp"/*; do
  name=$(basename "$got")
  if [ ! -f "$expected_dir/$name" ]; then
    echo "new: $name has no expected file (ADPROF_GOLDEN_UPDATE=1 to write it)"
    status=1
  elif ! cmp -s "$got" "$expected_dir/$name"; then
    echo "changed: $name"
    diff -u "$expected_dir/$name" "$got" | head -40
    status=1
  fi
done
if [ $status -eq 0 ]; then
  echo "golden.sh: $(ls "$tmp" | wc -l) outputs as expected"
fi
exit $status
