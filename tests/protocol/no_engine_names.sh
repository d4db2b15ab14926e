#!/usr/bin/env bash
# The profiler knows no engine by name (docs/ARCHITECTURE.md, "The AD protocol"): no adcore
# annotation name, flag, function or namespace appears in profiler/, cli/ or gui/. The one
# exception is the legacy table that reads traces written before the protocol,
# profiler/analysis/ad/legacy_names.cpp, and only that file. Exit 1 (with the lines) if any does.
set -u
root=${1:?usage: no_engine_names.sh SOURCE_ROOT}
cd "$root" || exit 2
legacy=profiler/analysis/ad/legacy_names.cpp
[ -f "$legacy" ] || { echo "missing $legacy" >&2; exit 2; }
# Names, namespaces, flags and functions of adcore (its samples' switches included).
names='adcore[._:]|"adcore|checkpoint_sequential|--no-activity-analysis|--no-early-release'
names+='|--no-inplace-accumulation|--no-fused-optimizer|--no-checkpoint|--no-reuse-tape'
names+='|--widen-indices|native_i32|reuse_tape|adcore_tape'
hits=$(grep -rnE --include='*.c' --include='*.cc' --include='*.cpp' --include='*.h' \
  --include='*.hpp' --include='*.txt' --include='*.cmake' --include='*.ui' --include='*.qrc' \
  "$names" profiler cli gui | grep -v "^$legacy:")
# The analysis, the CLI and the GUI do not even say the word (the interposer's comments may use
# it as an example of a program).
words=$(grep -rniwE 'adcore' profiler/analysis profiler/include profiler/format cli gui |
  grep -v "^$legacy:")
# Nor does the analysis name the PyTorch integration (python/adprof/torch): what it needs is in
# the protocol (ad_protocol.h version 2), its wording arrives through ad.policy. The one
# exception is the reader and writer of PyTorch's memory snapshot format (a file format, read
# into the same events as a trace; docs/PYTORCH.md, "Snapshots"), and only those files.
snapshot_format='^profiler/analysis/(torch_snapshot/(torch_snapshot_(read|write)\.cpp|pickle\.(h|cpp))|include/adprof/torch_snapshot\.h):'
words+=$(grep -rniwE 'torch|pytorch' profiler/analysis | grep -vE "$snapshot_format")
# Nor the JAX integration (python/adprof/jax): its arenas arrive through the protocol (version 4,
# "Arenas"), its words through ad.policy.
words+=$(grep -rniwE 'jax|xla' profiler/analysis profiler/include profiler/format)
# And the legacy file is the one place the old kind names live: it must still hold them.
grep -q '"adcore.tape.begin"' "$legacy" || { echo "$legacy lost the legacy names" >&2; exit 1; }
if [ -n "$hits$words" ]; then
  echo "engine names outside $legacy:" >&2
  printf '%s\n' "$hits" "$words" | sed '/^$/d' >&2
  exit 1
fi
echo "no engine names outside $legacy"
