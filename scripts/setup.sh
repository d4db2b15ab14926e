#!/usr/bin/env bash
# Installs the Debian packages adprof builds and runs with, when they are missing.
# Idempotent: does nothing when everything is present. Works as root, or through sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config git
  libjemalloc-dev libboost-program-options-dev libzstd-dev zlib1g-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libabsl-dev
  libunwind-dev libdw-dev # call stacks: unwinding when recording, symbols when reading
  libiberty-dev # call stacks: Rust symbol names
  qt6-base-dev qt6-svg-dev libgl-dev
  dataset-fashion-mnist heaptrack clang-format
  python3-torch python3-numpy python3-venv gcc
  libpython3.11-testsuite # CPython's own tests, run alone and under adprof (conformance)
  dpkg-dev file # cpack -G DEB (dpkg-shlibdeps, file) and tests/install
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "adprof setup: installing ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "adprof setup: missing packages (${missing[*]}) and neither root nor sudo available" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
