#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, with .gpu/ made by scripts/gpu-bundle.sh.
# First issue 32's checks (tests/python/cuda_*_test.cpp, the binary python_cuda_checks_test,
# each a gtest instance per device): JAX with XLA's preallocation alone on the GPU (its pool
# takes 75% of the GPU's memory), then side by side: the CUDA step's roles (item 1), a job of
# two ranks on the GPU (2), JAX without preallocation (3), two real PyTorch snapshots made
# into $OUT (4), GPT-2 with AdamW (5), and the earlier GPU checks: nvidia-smi, the caching
# allocator's host tests, every GPU test (gtest JSON), the interposition test, the PyTorch
# tests with the machine's PyTorch (its CUDA ones too), every sample on the GPU against the
# CPU (scripts/gpu_samples.py). Last, alone, with ADPROF_GPU_CHECK_BENCH=1 (the default; 0
# skips them), the benchmarks: CPU versus GPU gradient time, and adprof's recording overhead
# on a GPU training step of adcore and of PyTorch.
#
# Writes into $OUT (default ./gpu-out; at most 8 files come back from a GPU machine):
# summary.txt (each step's verdict, the gtest totals, every "[ issue32 ]" figure line, the
# benchmarks), logs.txt, gtest.tar.gz (every gtest JSON), bench.txt, and item 4's
# snapshot_train.pickle and snapshot_oom.pickle.
# Every step has a time limit, and a step that would start after DEADLINE_S (default 420)
# seconds is skipped (said in the summary; a skipped benchmark fails nothing). Exit status: 0
# when every step passed.
#
# ADPROF_GPU_CHECK_CPU=1: a dry run on a machine without a GPU (the plumbing: paths, the
# library path, python, the outputs, the summary): issue 32's steps run their cpu instances,
# every other step is skipped. ADPROF_TEST_PYTHON names the interpreter (default python3: the
# GPU machine's, with PyTorch, JAX and transformers). ADPROF_GPU_CHECK_ONLY=REGEX runs only the
# steps whose names match (a rerun of what failed: ADPROF_GPU_CHECK_ONLY='issue32_2|issue32_5').
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
G=$root/.gpu
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
logs=$OUT/logs.txt
: >"$summary"
: >"$logs"
start=$(date +%s)

if [[ ! -d "$G/bin" ]]; then
  echo "gpu-check: $G is missing: run 'bash scripts/gpu-bundle.sh' on the build machine first" | tee -a "$summary"
  exit 2
fi

# Libraries shipped compressed (OpenBLAS) are unpacked into a temporary directory.
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/adprof-gpu-lib.XXXXXX")
trap 'rm -rf "$unpacked" "${steps_dir:-}"' EXIT
for z in "$G"/lib/*.xz; do
  [[ -f "$z" ]] || continue
  python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1], "rb") as i, open(sys.argv[2], "wb") as o:
    shutil.copyfileobj(i, o)' "$z" "$unpacked/$(basename "${z%.xz}")" ||
    echo "gpu-check: could not unpack $z" >&2
done

# The machine's own libraries first (its CUDA, with cuBLAS, and its system libraries, newer
# than Debian 12's): PyTorch runs under the same path and must load what it was built with.
# Ours (jemalloc, OpenBLAS, Boost, ...) fill in what the machine lacks.
sys_libs=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda-13/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -d "$d" ]] && sys_libs+="$d:"
done
export LD_LIBRARY_PATH="${sys_libs}$G/lib:$unpacked${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ADPROF_PRELOAD_LIB=$G/lib/libadprof_preload.so     # cuda_interpose_test
export ADPROF_PRELOAD=$G/lib/libadprof_preload.so         # adprof run
export CUDA_INTERPOSE_WORKLOAD=$G/bin/cuda_interpose_workload
export ADPROF_TEST_CLI=$G/bin/adprof                        # python_torch_test
export ADPROF_TEST_PRELOAD=$G/lib/libadprof_preload.so
export ADPROF_TEST_TORCH_SCRIPTS=$root/tests/python/scripts
export ADPROF_TEST_TORCH_PACKAGE=$root/python
export ADPROF_TEST_PYTHON=${ADPROF_TEST_PYTHON:-$(command -v python3)}
export ADPROF_PYTHON_DIR=$root/python                       # adprof run --torch
export PYTHONDONTWRITEBYTECODE=1
export TMPDIR=${TMPDIR:-/tmp}
deadline=${DEADLINE_S:-420}
cpu_mode=${ADPROF_GPU_CHECK_CPU:-0}
[[ $cpu_mode == 1 ]] && instance=cpu || instance=cuda
export ADPROF_TEST_SOURCE_ROOT=$root       # python_cuda_checks_test: bench/, scripts/, tests/
export ADPROF_SNAPSHOT_OUT=$OUT             # item 4's snapshots come back with $OUT
steps_dir=$(mktemp -d "${TMPDIR:-/tmp}/adprof-gpu-steps.XXXXXX")

{
  echo "== adprof GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cat "$G/MANIFEST.txt" 2>/dev/null | head -5
  echo "== nvidia-smi"
  timeout 20 nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
  echo "== $ADPROF_TEST_PYTHON: $(timeout 60 "$ADPROF_TEST_PYTHON" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0), "numpy", numpy.__version__)' 2>&1 | tail -1)"
  echo "== JAX: $(timeout 60 "$ADPROF_TEST_PYTHON" -c 'import jax, optax; print("jax", jax.__version__, jax.devices())' 2>&1 | tail -1)"
  echo "== transformers: $(timeout 60 "$ADPROF_TEST_PYTHON" -c 'import transformers; print(transformers.__version__)' 2>&1 | tail -1)"
  (( cpu_mode )) && echo "== ADPROF_GPU_CHECK_CPU=1: a dry run, issue 32's cpu instances only"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== missing libraries (ldd):"
  for b in "$G"/bin/* "$G"/samples/* "$G"/lib/libadprof_preload.so; do
    ldd "$b" 2>&1 | grep 'not found' | sed "s|^|  $(basename "$b"): |"
  done
  echo "== steps"
} >>"$summary"

failed=0
# A step's verdict line in the summary, its output in the logs (in the order the steps were
# started, whether they ran in the foreground or the background).
verdict_of() {  # verdict_of RC LIMIT
  if (( $1 == 124 || $1 == 137 )); then echo "TIMEOUT(${2}s)"; elif (( $1 != 0 )); then echo "FAIL(rc=$1)"; else echo PASS; fi
}
late() {  # late NAME OPTIONAL: true (and says so) when the step would start after the deadline
  if (( $(date +%s) - start > deadline )); then
    printf '%-28s %-14s\n' "$1" "SKIPPED(time)" >>"$summary"
    [[ $2 == optional ]] || failed=1
    return 0
  fi
  return 1
}
skipped_in_cpu_mode() {  # the earlier GPU steps have no CPU variant
  (( cpu_mode )) || return 1
  printf '%-28s %-14s\n' "$1" "SKIPPED(cpu)" >>"$summary"
}
only=${ADPROF_GPU_CHECK_ONLY:-}
unselected() {  # ADPROF_GPU_CHECK_ONLY=REGEX: the steps whose names it does not match are skipped
  [[ -n $only && ! $1 =~ $only ]] || return 1
  printf '%-28s %-14s\n' "$1" "SKIPPED(only)" >>"$summary"
}
step() {  # step NAME LIMIT_S CMD...  (foreground)
  local name=$1 limit=$2
  shift 2
  skipped_in_cpu_mode "$name" && return
  unselected "$name" && return
  late "$name" required && return
  local t0=$(date +%s)
  echo "===== $name: $*" >>"$logs"
  timeout --kill-after=5 "$limit" "$@" >>"$logs" 2>&1
  local rc=$? dt=$(( $(date +%s) - t0 ))
  local verdict=$(verdict_of $rc "$limit")
  [[ $verdict == PASS ]] || failed=1
  printf '%-28s %-14s %4ss\n' "$name" "$verdict" "$dt" >>"$summary"
  echo "===== $name: $verdict in ${dt}s" >>"$logs"
}
bench_step() {  # bench_step NAME LIMIT_S CMD...: a benchmark, last and optional
  local name=$1
  if [[ ${ADPROF_GPU_CHECK_BENCH:-1} != 1 ]]; then
    printf '%-28s %-14s\n' "$name" "SKIPPED(bench)" >>"$summary"
    return
  fi
  skipped_in_cpu_mode "$name" && return
  unselected "$name" && return
  late "$name" optional && return
  step "$@"
}
background=()
bg_step() {  # bg_step NAME LIMIT_S CMD...  (in the background; bg_wait collects it)
  local name=$1 limit=$2
  shift 2
  unselected "$name" && return
  background+=("$name")
  if late "$name" required; then
    echo skipped >"$steps_dir/$name.skipped"
    return
  fi
  (
    t0=$(date +%s)
    echo "===== $name: $*" >"$steps_dir/$name.log"
    timeout --kill-after=5 "$limit" "$@" >>"$steps_dir/$name.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - t0 )) $limit" >"$steps_dir/$name.rc"
  ) &
  echo $! >"$steps_dir/$name.pid"
}
bg_wait() {  # every background step: waited for, its verdict and its log in order
  local name rc dt limit verdict
  for name in "${background[@]}"; do
    [[ -f "$steps_dir/$name.skipped" ]] && continue
    wait "$(cat "$steps_dir/$name.pid")"
    read -r rc dt limit <"$steps_dir/$name.rc" || { rc=1; dt=0; limit=0; }
    verdict=$(verdict_of "$rc" "$limit")
    [[ $verdict == PASS ]] || failed=1
    printf '%-28s %-14s %4ss\n' "$name" "$verdict" "$dt" >>"$summary"
    cat "$steps_dir/$name.log" >>"$logs"
    echo "===== $name: $verdict in ${dt}s" >>"$logs"
  done
  background=()
}

# Issue 32's checks: the instance of each check for this machine's device. On the GPU an
# instance that skips (no CUDA device) fails its step: a check that did not run proves nothing.
checks=$G/bin/python_cuda_checks_test
issue32() {  # issue32 NAME LIMIT_S FILTER  (background)
  bg_step "$1" "$2" bash -c "'$checks' --gtest_filter='$3' --gtest_output=json:'$steps_dir/$1.json' &&
    python3 - '$steps_dir/$1.json' '$instance' <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tests = [t for s in d.get('testsuites', []) for t in s.get('testsuite', [])]
skipped = [t['name'] for t in tests if t.get('result') == 'SKIPPED']
print(f'{len(tests)} tests, {len(skipped)} skipped' + (f': {skipped}' if skipped else ''))
sys.exit(1 if not tests or (sys.argv[2] == 'cuda' and skipped) else 0)
PY"
}

# The PyTorch suite with this machine's PyTorch (2.x), in the background while the GPU tests
# run: 6 shards of the CPU tests; its CUDA tests come after, in the foreground.
torch_shards=6
torch_pids=()
run_torch_suite=0
if (( ! cpu_mode )) && ! unselected torch_suite; then
  run_torch_suite=1
  for ((i = 0; i < torch_shards; ++i)); do
    GTEST_TOTAL_SHARDS=$torch_shards GTEST_SHARD_INDEX=$i timeout --kill-after=5 240 \
      "$G/bin/python_torch_test" --gtest_filter='-TorchDevice.Cuda*' \
      --gtest_output=json:"$steps_dir/torch_shard_$i.json" >"$steps_dir/torch_shard_$i.log" 2>&1 &
    torch_pids+=($!)
  done
fi

# 1. JAX with XLA's preallocation, alone on the GPU (its pool takes 75% of the GPU's memory).
issue32 issue32_3_jax 200 "Devices/CudaJax.*/$instance"
bg_wait
# 2. The other checks of issue 32 side by side, with the earlier GPU tests.
issue32 issue32_1_cuda_step 150 "Devices/CudaStep.*/$instance"
issue32 issue32_2_job_two_ranks 200 "Devices/CudaJob.*/$instance"
issue32 issue32_4_snapshots 150 "Devices/CudaSnapshot.*/$instance"
issue32 issue32_5_gpt2_adamw 240 "Devices/CudaModel.*/$instance"
if (( ! cpu_mode )); then
  issue32 issue32_3_jax_no_prealloc 200 "Devices/CudaJax.*/cuda_no_preallocate"
  issue32 issue32_3_jax_platform 200 "Devices/CudaJax.*/cuda_platform"
fi
step allocator_fake_device 30 "$G/bin/cuda_allocator_test" --gtest_output=json:"$steps_dir/allocator.json"
step gpu_ops_vs_cpu 150 "$G/bin/cuda_gpu_ops_test" --gtest_output=json:"$steps_dir/gpu_ops.json"
step gpu_policy_device_peaks 90 "$G/bin/adcore_policy_test" --gtest_filter='*/cuda:AdcorePolicyCuda.*' --gtest_output=json:"$steps_dir/gpu_policy.json"
step interposition_cublas 60 "$G/bin/cuda_interpose_test" --gtest_output=json:"$steps_dir/interpose.json"
step torch_cuda_tests 150 "$G/bin/python_torch_test" --gtest_filter='TorchDevice.Cuda*' --gtest_output=json:"$steps_dir/torch.json"
step samples_cpu_vs_gpu 150 python3 "$root/scripts/gpu_samples.py" check --bin "$G/samples" --adprof "$G/bin/adprof" --data "$G/data"
step sample_mlp_cuda_report 60 "$G/bin/adprof" run -o "$steps_dir/adprof-gpu-mlp.adtrace" -- "$G/samples/mlp" --device cuda
bg_wait

# The background PyTorch shards: their totals into the summary, their failures into the logs.
if (( run_torch_suite )); then
  torch_rc=0
  for pid in "${torch_pids[@]}"; do wait "$pid" || torch_rc=1; done
  {
    echo "===== torch_suite_shards (rc $torch_rc)"
    for ((i = 0; i < torch_shards; ++i)); do
      grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error' "$steps_dir/torch_shard_$i.log" | head -40
    done
  } >>"$logs"
  python3 - "$steps_dir" "$torch_shards" >>"$summary" <<'PY' || { echo "torch suite: shards unreadable" >>"$summary"; failed=1; }
import json, sys
tests = []
for i in range(int(sys.argv[2])):
    d = json.load(open(f"{sys.argv[1]}/torch_shard_{i}.json"))
    tests += [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
fail = [t["name"] for t in tests if t.get("failures")]
skip = [t["name"] for t in tests if t.get("result") == "SKIPPED"]
print(f"torch_suite (CPU, 6 shards)  {'PASS' if not fail else 'FAIL'}: {len(tests)} tests, "
      f"{len(fail)} failed, {len(skip)} skipped" + (f"; failed: {', '.join(fail)}" if fail else ""))
sys.exit(1 if fail else 0)
PY
  (( torch_rc == 0 )) || failed=1
fi

# Benchmarks, alone on the machine (ADPROF_GPU_CHECK_BENCH=0 skips them).
bench_step bench_cpu_vs_gpu 90 bash -c "set -o pipefail; '$G/bin/bench_cuda' --reps 10 | tee -a '$OUT/bench.txt'"
bench_step overhead_adcore_cnn 120 bash -c "set -o pipefail; python3 '$root/scripts/gpu_samples.py' overhead --bin '$G/samples' --adprof '$G/bin/adprof' --data '$G/data' | tee -a '$OUT/bench.txt'"
bench_step overhead_torch_step 150 bash -c "set -o pipefail; python3 '$root/bench/torch/bench_cuda_step.py' --adprof '$G/bin/adprof' --rounds 2 --check | tee -a '$OUT/bench.txt'"

# Skipped GPU tests mean no GPU was usable: say so loudly.
if (( ! cpu_mode )) && grep -q '"result": "SKIPPED"\|no CUDA device' "$logs"; then
  echo "WARNING: some GPU tests were skipped (no CUDA device?): see logs.txt" >>"$summary"
  grep -m3 'no CUDA device' "$logs" >>"$summary"
fi
{
  echo "== gtest totals"
  for f in "$steps_dir"/*.json; do
    [[ -f $f ]] || continue
    j=$(basename "$f" .json)
    [[ $j == torch_shard_* ]] && continue
    python3 - "$f" "$j" <<'PY' 2>/dev/null || echo "$j: JSON unreadable"
import json, sys
d = json.load(open(sys.argv[1]))
tests = [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
fail = [t["name"] for t in tests if t.get("failures")]
skip = [t["name"] for t in tests if t.get("result") == "SKIPPED"]
print(f"{sys.argv[2]}: {len(tests)} tests, {len(fail)} failed, {len(skip)} skipped"
      + (f"; failed: {', '.join(fail)}" if fail else ""))
PY
  done
  echo "== issue 32: figures (the checks' \"[ issue32 ]\" lines)"
  grep -h '^\[ issue32  \]' "$logs" | sed 's/^\[ issue32  \] //' | sort -u
  echo "== issue 32: files in \$OUT"
  (cd "$OUT" && ls -l snapshot_*.pickle 2>/dev/null) || echo "(no snapshot)"
  echo "== bench"
  cat "$OUT/bench.txt" 2>/dev/null
  echo "== total $(( $(date +%s) - start ))s; $( ((failed)) && echo 'SOME STEPS FAILED' || echo 'ALL STEPS PASSED')"
} >>"$summary"
# Every gtest JSON in one file (what comes back from a GPU machine is at most 8 files).
(cd "$steps_dir" && ls *.json >/dev/null 2>&1 && tar czf "$OUT/gtest.tar.gz" *.json)
cat "$summary"
exit $failed
