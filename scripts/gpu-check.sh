#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, with .gpu/ made by scripts/gpu-bundle.sh:
# nvidia-smi, the caching allocator's host tests, every GPU test (gtest JSON), the interposition
# test, the CPU-versus-GPU benchmark and one profiled sample with --device cuda. Writes at most 8
# files into $OUT (default ./gpu-out): summary.txt, logs.txt, allocator.json, gpu_ops.json,
# gpu_policy.json, interpose.json, bench.txt, bench.jsonl. Every step has a time limit; the
# whole run stays under 8 minutes. Exit status: 0 when every step passed.
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

# Ours first (cudart, jemalloc, openblas, boost, zstd, ...), then the machine's CUDA (cuBLAS).
cuda_libs=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda-13/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -d "$d" ]] && cuda_libs+=":$d"
done
export LD_LIBRARY_PATH="$G/lib:$unpacked${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ADPROF_PRELOAD_LIB=$G/lib/libadprof_preload.so     # cuda_interpose_test
export ADPROF_PRELOAD=$G/lib/libadprof_preload.so         # adprof run
export CUDA_INTERPOSE_WORKLOAD=$G/bin/cuda_interpose_workload
export TMPDIR=${TMPDIR:-/tmp}

{
  echo "== adprof GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cat "$G/MANIFEST.txt" 2>/dev/null | head -5
  echo "== nvidia-smi"
  timeout 20 nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
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

step allocator_fake_device 30 "$G/bin/cuda_allocator_test" --gtest_output=json:"$OUT/allocator.json"
step gpu_ops_vs_cpu 150 "$G/bin/cuda_gpu_ops_test" --gtest_output=json:"$OUT/gpu_ops.json"
step gpu_policy_device_peaks 90 "$G/bin/cuda_gpu_policy_test" --gtest_output=json:"$OUT/gpu_policy.json"
step interposition_cublas 60 "$G/bin/cuda_interpose_test" --gtest_output=json:"$OUT/interpose.json"
step bench_cpu_vs_gpu 90 bash -c "'$G/bin/bench_cuda' --reps 10 --json '$OUT/bench.jsonl' | tee '$OUT/bench.txt'"
# One sample on the GPU under the profiler, and its report (device memory by role, op, phase).
tmp=$(mktemp -d)
step sample_mlp_cuda_profiled 60 bash -c "'$G/bin/adprof' run -o '$tmp/mlp.adtrace' -- '$G/samples/mlp' --device cuda && '$G/bin/adprof' report '$tmp/mlp.adtrace'"
step sample_quadform_cuda 30 "$G/samples/quadform" --device cuda
rm -rf "$tmp"

# Skipped GPU tests mean no GPU was usable: say so loudly.
if grep -q '"result": "SKIPPED"\|no CUDA device' "$logs"; then
  echo "WARNING: some GPU tests were skipped (no CUDA device?): see logs.txt" >>"$summary"
  grep -m3 'no CUDA device' "$logs" >>"$summary"
fi
{
  echo "== gtest totals"
  for j in allocator gpu_ops gpu_policy interpose; do
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
