#!/usr/bin/env bash
# Diagnoses a crash of Python programs under the interposer on the GPU machine (the same
# libraries as scripts/gpu-check.sh): which small scripts crash under `adprof run`, and the
# native stacks of one crash, from its core file (cuda-gdb; a debugger run changes the timing).
# Found the exit crash of docs/CUDA.md, "GPU results". Usage, there: bash scripts/gpu-torch-probe.sh
set -u
cd "$(dirname "$0")/.."
root=$PWD
G=$root/.gpu
sys_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13/lib64 \
         /usr/lib/x86_64-linux-gnu; do
  [[ -d "$d" ]] && sys_libs+="$d:"
done
export LD_LIBRARY_PATH="${sys_libs}$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ADPROF_PRELOAD=$G/lib/libadprof_preload.so ADPROF_PYTHON_DIR=$root/python
export PYTHONDONTWRITEBYTECODE=1
py=$(readlink -f "$(command -v python3)")
t=$(mktemp -d)
printf '%s\n' 'print("hello")' >"$t/p_hello.py"
printf '%s\n' 'import numpy; print("numpy ok")' >"$t/p_numpy.py"
printf '%s\n' 'import torch; print("import ok")' >"$t/p_import.py"
printf '%s\n' 'import torch; x = torch.randn(64, 64, requires_grad=True); (x @ x).sum().backward(); print("cpu ok")' >"$t/p_cpu.py"
probe() {  # probe NAME SCRIPT
  echo "=== $1: $(timeout 90 "$G/bin/adprof" run --no-report -o "$t/$1.adtrace" -- python3 "$2" 2>&1 | tail -2 | tr '\n' ' ') rc ${PIPESTATUS[0]}"
}
probe hello "$t/p_hello.py"
probe numpy "$t/p_numpy.py"
probe import "$t/p_import.py"
probe cpu "$t/p_cpu.py"
echo "=== core of the cpu script"
# The core goes into the temporary directory (root only; the machine's pattern is restored).
ulimit -c unlimited
pattern=$(cat /proc/sys/kernel/core_pattern)
echo "$t/core.%p" >/proc/sys/kernel/core_pattern 2>/dev/null || echo "(core_pattern not writable: $pattern)"
"$G/bin/adprof" run --no-report -o "$t/core-run.adtrace" -- python3 "$t/p_cpu.py" 2>&1 | tail -2
echo "$pattern" >/proc/sys/kernel/core_pattern 2>/dev/null
core=$(ls "$t"/core.* 2>/dev/null | head -1)
if [[ -n "$core" ]]; then
  timeout 120 cuda-gdb -q -batch -ex "bt 40" -ex "info threads" -ex "thread apply all bt 14" "$py" "$core" 2>&1 |
    grep -v "^warning: \|^\[New LWP" | head -220
else
  echo "no core file in $t"; ls "$t"
fi
rm -rf "$t"
