#!/usr/bin/env bash
# Configures and builds a preset (default: release). Usage: scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
bash scripts/setup.sh
if [[ ! -f build/$preset/build.ninja ]]; then
  cmake --preset "$preset" >/dev/null
fi
cmake --build --preset "$preset"
