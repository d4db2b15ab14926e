#!/usr/bin/env bash
# Fails (exit 1) when a tracked C, C++ or CUDA source differs from .clang-format's style.
# Fix with: git ls-files '*.cpp' '*.h' '*.c' '*.cu' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "check-format: clang-format not installed; skipped" >&2
  exit 0
fi
git ls-files '*.cpp' '*.h' '*.c' '*.cu' | grep -v '^tests/profiler/corpus/' |
  xargs clang-format --dry-run --Werror
