#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, with .gpu/ made by scripts/gpu-bundle.sh:
# nvidia-smi, the caching allocator's host tests, every GPU test (gtest JSON), the interposition
# test, the PyTorch tests with the machine's PyTorch (its CUDA ones too), every sample on the GPU
# against the CPU (scripts/gpu_samples.py), then, with nothing else running, the benchmarks:
# CPU versus GPU gradient time, and adprof's recording overhead on a GPU training step of adcore
# and of PyTorch. Writes at most 8 files into $OUT (default ./gpu-out): summary.txt, logs.txt,
# allocator.json, gpu_ops.json, gpu_policy.json, interpose.json, torch.json, bench.txt.
# Every step has a time limit, and a step that would start after DEADLINE_S (default 420) seconds
# is skipped (said in the summary). Exit status: 0 when every step passed.
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
trap 'rm -rf "$unpacked"' EXIT
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

{
  echo "== adprof GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cat "$G/MANIFEST.txt" 2>/dev/null | head -5
  echo "== nvidia-smi"
  timeout 20 nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
  echo "== $ADPROF_TEST_PYTHON: $(timeout 60 "$ADPROF_TEST_PYTHON" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0), "numpy", numpy.__version__)' 2>&1 | tail -1)"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== missing libraries (ldd):"
  for b in "$G"/bin/* "$G"/samples/* "$G"/lib/libadprof_preload.so; do
    ldd "$b" 2>&1 | grep 'not found' | sed "s|^|  $(basename "$b"): |"
  done
  echo "== steps"
} >>"$summary"

failed=0
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  if (( t0 - start > deadline )); then
    printf '%-28s %-14s\n' "$name" "SKIPPED(time)" >>"$summary"
    failed=1
    return
  fi
  echo "===== $name: $*" >>"$logs"
  timeout --kill-after=5 "$limit" "$@" >>"$logs" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  local verdict=PASS
  if (( rc == 124 || rc == 137 )); then verdict="TIMEOUT(${limit}s)"; elif (( rc != 0 )); then verdict="FAIL(rc=$rc)"; fi
  [[ $verdict == PASS ]] || failed=1
  printf '%-28s %-14s %4ss\n' "$name" "$verdict" "$dt" >>"$summary"
  echo "===== $name: $verdict in ${dt}s" >>"$logs"
}

# The PyTorch suite with this machine's PyTorch (2.x), in the background while the GPU tests
# run: 6 shards of the CPU tests; its CUDA tests come after, in the foreground.
torch_shards=6
torch_pids=()
for ((i = 0; i < torch_shards; ++i)); do
  GTEST_TOTAL_SHARDS=$torch_shards GTEST_SHARD_INDEX=$i timeout --kill-after=5 240 \
    "$G/bin/python_torch_test" --gtest_filter='-TorchDevice.Cuda*' \
    --gtest_output=json:"$TMPDIR/torch_shard_$i.json" >"$TMPDIR/torch_shard_$i.log" 2>&1 &
  torch_pids+=($!)
done

step allocator_fake_device 30 "$G/bin/cuda_allocator_test" --gtest_output=json:"$OUT/allocator.json"
step gpu_ops_vs_cpu 150 "$G/bin/cuda_gpu_ops_test" --gtest_output=json:"$OUT/gpu_ops.json"
step gpu_policy_device_peaks 90 "$G/bin/adcore_policy_test" --gtest_filter='*/cuda:AdcorePolicyCuda.*' --gtest_output=json:"$OUT/gpu_policy.json"
step interposition_cublas 60 "$G/bin/cuda_interpose_test" --gtest_output=json:"$OUT/interpose.json"
step torch_cuda_tests 150 "$G/bin/python_torch_test" --gtest_filter='TorchDevice.Cuda*' --gtest_output=json:"$OUT/torch.json"
step samples_cpu_vs_gpu 150 python3 "$root/scripts/gpu_samples.py" check --bin "$G/samples" --adprof "$G/bin/adprof" --data "$G/data"
step sample_mlp_cuda_report 60 "$G/bin/adprof" run -o "$TMPDIR/adprof-gpu-mlp-$$.adtrace" -- "$G/samples/mlp" --device cuda

# The background PyTorch shards: their totals into the summary, their failures into the logs.
torch_rc=0
for pid in "${torch_pids[@]}"; do wait "$pid" || torch_rc=1; done
{
  echo "===== torch_suite_shards (rc $torch_rc)"
  for ((i = 0; i < torch_shards; ++i)); do
    grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error' "$TMPDIR/torch_shard_$i.log" | head -40
  done
} >>"$logs"
python3 - "$TMPDIR" "$torch_shards" >>"$summary" <<'PY' || { echo "torch suite: shards unreadable" >>"$summary"; failed=1; }
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

# Benchmarks, alone on the machine.
step bench_cpu_vs_gpu 90 bash -c "set -o pipefail; '$G/bin/bench_cuda' --reps 10 | tee '$OUT/bench.txt'"
step overhead_adcore_cnn 120 bash -c "set -o pipefail; python3 '$root/scripts/gpu_samples.py' overhead --bin '$G/samples' --adprof '$G/bin/adprof' --data '$G/data' | tee -a '$OUT/bench.txt'"
step overhead_torch_step 150 bash -c "set -o pipefail; python3 '$root/bench/torch/bench_cuda_step.py' --adprof '$G/bin/adprof' --rounds 2 --check | tee -a '$OUT/bench.txt'"

# Skipped GPU tests mean no GPU was usable: say so loudly.
if grep -q '"result": "SKIPPED"\|no CUDA device' "$logs"; then
  echo "WARNING: some GPU tests were skipped (no CUDA device?): see logs.txt" >>"$summary"
  grep -m3 'no CUDA device' "$logs" >>"$summary"
fi
{
  echo "== gtest totals"
  for j in allocator gpu_ops gpu_policy interpose torch; do
    f=$OUT/$j.json
    [[ -f $f ]] || { echo "$j: no JSON (crashed or timed out)"; continue; }
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
  echo "== bench"
  cat "$OUT/bench.txt" 2>/dev/null
  echo "== total $(( $(date +%s) - start ))s; $( ((failed)) && echo 'SOME STEPS FAILED' || echo 'ALL STEPS PASSED')"
} >>"$summary"
cat "$summary"
exit $failed
