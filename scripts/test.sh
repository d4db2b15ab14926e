#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the whole test suite.
# Usage: scripts/test.sh [PRESET] [extra ctest args]   (presets: release, asan, tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
bash scripts/build.sh "$preset"
bash scripts/setup-test-venv.sh
export QT_QPA_PLATFORM=offscreen
ctest --preset "$preset" -j2 --timeout 600 "$@"
