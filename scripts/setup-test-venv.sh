#!/usr/bin/env bash
# Makes the tests' virtual environment: the newest PyTorch 2.x, torchvision and transformers from
# PyPI, for the PyTorch suites (label torch2) and the model conformance suite (label
# torch_models), and the newest JAX (CPU) and optax for the JAX suite (label jax; they share
# numpy with torch and pin nothing else of its: one environment). Tests and peers only: the
# product depends on Debian's packages alone.
# Kept between runs on a machine: made once, then reused as it is (ADPROF_VENV_UPGRADE=1 brings
# the newest releases again). Where PyPI cannot be reached the environment is not made and those
# tests skip with a message; this script still exits 0.
# The place: $ADPROF_TEST_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/adprof/venv-test (what
# tests/CMakeLists.txt assumes at configure time).
set -uo pipefail
venv=${ADPROF_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/adprof/venv-test}
packages=(torch torchvision transformers jax optax)
probe="import torch, torchvision, transformers, jax, optax"

if [[ -x $venv/bin/python && ${ADPROF_VENV_UPGRADE:-0} != 1 ]] &&
  "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
  exit 0
fi
echo "adprof setup: installing ${packages[*]} from PyPI into $venv (tests only; a few minutes)" >&2
mkdir -p "$(dirname "$venv")"
if [[ ! -x $venv/bin/python ]] && ! /usr/bin/python3 -m venv "$venv"; then
  echo "adprof setup: could not make $venv (python3-venv); the PyTorch 2.x tests will skip" >&2
  exit 0
fi
upgrade=()
[[ ${ADPROF_VENV_UPGRADE:-0} == 1 ]] && upgrade=(--upgrade)
if ! timeout 1800 "$venv/bin/pip" install -q --disable-pip-version-check "${upgrade[@]}" \
  "${packages[@]}" >&2; then
  echo "adprof setup: PyPI could not be reached or the install failed; the PyTorch 2.x and JAX" \
    "tests will skip" >&2
  exit 0
fi
"$venv/bin/python" -c "import torch, transformers, jax; print('adprof setup: test venv has torch', \
torch.__version__, 'transformers', transformers.__version__, 'jax', jax.__version__)" >&2
exit 0
