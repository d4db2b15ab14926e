#!/usr/bin/env bash
# README command 1: installs what is missing, builds, profiles the default sample and prints
# the memory report. Usage: scripts/demo.sh [SAMPLE [ARGS...]]
# Default: the Fashion-MNIST CNN (samples/cnn, docs/WORKLOADS.md) trained 40 steps of batch 256
# on the naive engine (every memory policy off), so the report has causes to name.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release >/dev/null
bin=build/release
if [[ $# -eq 0 ]]; then
  set -- "$bin/samples/cnn" --naive --batch 256 --steps 40 --log-every 10 --test-images 1000
else
  sample=$1
  shift
  set -- "$bin/samples/$sample" "$@"
fi
mkdir -p out
# One BLAS thread from the start: OpenBLAS would otherwise start a worker thread that may map a
# second 128 MiB buffer (adcore asks for one thread only once it runs).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
exec "$bin/bin/adprof" run -o "out/demo-$(date +%Y%m%d-%H%M%S).adtrace" -- "$@"
