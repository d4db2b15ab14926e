#!/usr/bin/env bash
# Renders the screenshots of adprof-gui's main views into docs/images/ (offscreen, no display
# needed), from traces recorded here: samples/densenet --naive, with the default-policy run as
# the diff's base (or, when the sample does not build, tests/gui/workload.cpp naive and in-place).
# Run it again whenever the GUI changes, and commit the PNGs.
#   scripts/gui-screenshots.sh [BUILD_DIR]     (default: build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" --target adprof adprof_preload adprof-gui gui_test_workload cli_job_workload -j2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# An adcore sample when it builds (the naive engine, against the default policies as the base:
# the what-if panel has predictions only for adcore traces); else the test workload.
if cmake --build "$build" --target densenet -j2 >/dev/null 2>&1 && [[ -x $build/samples/densenet ]]; then
  "$build/bin/adprof" run -o "$work/naive.adtrace" --no-report -- "$build/samples/densenet" --naive
  "$build/bin/adprof" run -o "$work/inplace.adtrace" --no-report -- "$build/samples/densenet"
else
  "$build/bin/adprof" run -o "$work/naive.adtrace" --no-report -- "$build/tests/gui/gui_test_workload"
  "$build/bin/adprof" run -o "$work/inplace.adtrace" --no-report -- \
    "$build/tests/gui/gui_test_workload" --inplace
fi
mkdir -p docs/images
# Run from the traces' folder with relative paths: the status bars and the job's table show
# "naive.adtrace", "job/node0/...", not this run's temporary folder.
images=$(realpath docs/images) gui=$(realpath "$build/bin/adprof-gui")
(cd "$work" && QT_QPA_PLATFORM=offscreen "$gui" --screenshot "$images" naive.adtrace inplace.adtrace)
# The job view (gui-job.png): tests/cli/job_workload.cpp's job on two "machines" (two runs),
# two ranks each, rank R with (R + 1) * 3 MiB of forward caches.
for node in 0 1; do
  mkdir -p "$work/job/node$node"
  "$build/bin/adprof" run -o "$work/job/node$node/job.adtrace" --no-report -- \
    "$build/tests/cli/cli_job_workload" launch "$node" 2 2 3
done
(cd "$work" && QT_QPA_PLATFORM=offscreen "$gui" --screenshot "$images" --job job)
for f in docs/images/gui-*.png; do
  size=$(stat -c %s "$f")
  if (( size > 300 * 1024 )); then echo "warning: $f is $((size / 1024)) KiB (> 300 KiB)" >&2; fi
done
