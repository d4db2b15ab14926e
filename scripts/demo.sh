#!/usr/bin/env bash
# README command 1: installs what is missing, builds, profiles the default sample and prints
# the memory report. Usage: scripts/demo.sh [SAMPLE [ARGS...]]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release >/dev/null
bin=build/release
if [[ $# -eq 0 ]]; then
  set -- "$bin/samples/densenet" --naive
else
  sample=$1
  shift
  set -- "$bin/samples/$sample" "$@"
fi
mkdir -p out
exec "$bin/bin/adprof" run -o "out/demo-$(date +%Y%m%d-%H%M%S).adtrace" -- "$@"
