#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the test suite (what CI runs): every
# test but the extended tier (labels matching `extended`: more cases of a matrix whose every row
# and column the default tier already runs: the model zoo's other cells, the job tests on torch
# 1.13), which ADPROF_ALL_TESTS=1 adds.
# Usage: [ADPROF_ALL_TESTS=1] scripts/test.sh [PRESET] [extra ctest args]
#        (presets: release, asan, tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
bash scripts/build.sh "$preset"
bash scripts/setup-test-venv.sh
export QT_QPA_PLATFORM=offscreen
tier=(-LE extended)
if [[ ${ADPROF_ALL_TESTS:-0} == 1 ]]; then
  tier=()
fi
ctest --preset "$preset" -j2 --timeout 600 "${tier[@]}" "$@"
