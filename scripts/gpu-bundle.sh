#!/usr/bin/env bash
# Builds the CUDA parts here (RelWithDebInfo like the release preset, CUDA on; stripped) and
# gathers into .gpu/ everything a bare GPU machine (CUDA 13 driver + toolkit, PyTorch 2.x, none
# of our Debian libraries) needs to run the GPU tests, the PyTorch tests, issue 32's checks
# (python_cuda_checks_test), the benchmarks and the
# samples (with the data cnn and charlm read): stripped executables, libadprof_preload.so and the shared
# libraries they load that a CUDA image lacks (resolved through ldd, symlinks followed).
# cuBLAS/cuBLASLt are NOT copied (hundreds of MiB): the GPU machine's CUDA provides them;
# scripts/gpu-check.sh puts its lib64 on LD_LIBRARY_PATH after .gpu/lib.
# Usage: bash scripts/gpu-bundle.sh   (env: JOBS=2, ADPROF_CUDA_ARCHITECTURES=90)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build/gpu-release
out=$root/.gpu

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADPROF_CUDA=ON \
  -DADPROF_BUILD_GUI=OFF -DADPROF_CUDA_ARCHITECTURES="${ADPROF_CUDA_ARCHITECTURES:-90}" \
  "${launcher[@]}" >/dev/null
samples=(quadform densenet eam mlp gather cnn charlm)
targets=(cuda_allocator_test cuda_gpu_ops_test adcore_policy_test cuda_interpose_test
         cuda_interpose_workload bench_cuda adprof adprof_preload python_torch_test
         python_cuda_checks_test "${samples[@]}")
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"

# .gpu stays out of git (.gitignore): the device tool carries it as an ignored path.
git -C "$root" check-ignore -q .gpu/MANIFEST.txt ||
  echo "gpu-bundle: warning: .gpu/ is not ignored by git (.gitignore)" >&2

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/samples"
bins=()
copy_bin() {  # copy_bin FILE DEST_DIR
  install -m 755 "$1" "$2/"
  strip --strip-unneeded "$2/$(basename "$1")"
  bins+=("$2/$(basename "$1")")
}
for t in cuda_allocator_test cuda_gpu_ops_test cuda_interpose_test cuda_interpose_workload; do
  copy_bin "$build/tests/cuda/$t" "$out/bin"
done
copy_bin "$build/tests/adcore/adcore_policy_test" "$out/bin"  # its */cuda tests run there
copy_bin "$build/bench/cuda/bench_cuda" "$out/bin"
copy_bin "$build/bin/adprof" "$out/bin"
copy_bin "$build/tests/python/python_torch_test" "$out/bin"
copy_bin "$build/tests/python/python_cuda_checks_test" "$out/bin"  # issue 32's checks
for s in "${samples[@]}"; do copy_bin "$build/samples/$s" "$out/samples"; done
# The data cnn and charlm read (Debian packages here, absent there): Fashion-MNIST's test set
# (4 MiB) serves as its training set too, and a plain-text licence as charlm's text.
mkdir -p "$out/data/fashion-mnist"
for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  cp /usr/share/datasets/fashion-mnist/$f "$out/data/fashion-mnist/"
done
ln -s t10k-images-idx3-ubyte.gz "$out/data/fashion-mnist/train-images-idx3-ubyte.gz"
ln -s t10k-labels-idx1-ubyte.gz "$out/data/fashion-mnist/train-labels-idx1-ubyte.gz"
cp /usr/share/common-licenses/GPL-3 "$out/data/GPL-3"
install -m 755 "$build/profiler/libadprof_preload.so" "$out/lib/"
strip --strip-unneeded "$out/lib/libadprof_preload.so"
bins+=("$out/lib/libadprof_preload.so")
# `adprof run` looks for the interposer beside itself too (the tests' children get no ADPROF_*
# variable to point at it).
ln -s ../lib/libadprof_preload.so "$out/bin/libadprof_preload.so"
# The context library under its soname, the name the programs ask the loader for.
ctx=$(find "$build/profiler" -maxdepth 1 -name 'libadprof_context.so.*' -type f | head -1)
if [[ -n "$ctx" ]]; then
  soname=$(objdump -p "$ctx" | awk '/SONAME/ {print $2}')
  install -m 755 "$ctx" "$out/lib/${soname:-libadprof_context.so.0}"
  strip --strip-unneeded "$out/lib/${soname:-libadprof_context.so.0}"
fi

# Shared libraries: everything ldd resolves except glibc's own, the driver (libcuda comes with
# the GPU machine's driver) and cuBLAS (too big; the GPU machine's CUDA has it).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil|libcuda\.so|libcublas|libadprof_context)'
declare -A seen=()
for b in "${bins[@]}"; do
  while read -r name _ path _; do
    [[ -n "$path" && -f "$path" ]] || continue
    [[ "$name" =~ $skip ]] && continue
    [[ -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    cp -L "$path" "$out/lib/$name"
    chmod 644 "$out/lib/$name"
    strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
  done < <(ldd "$b" | awk '/=>/ {print $1, $2, $3, $4}')
done

# Debian's OpenBLAS carries kernels for every CPU (~36 MiB): ship it xz-compressed;
# gpu-check.sh unpacks it (python3's lzma) into a temporary directory on LD_LIBRARY_PATH.
for big in "$out"/lib/libopenblas.so.*; do
  [[ -f "$big" && "$big" != *.xz ]] || continue
  python3 -c 'import lzma, shutil, sys
with open(sys.argv[1], "rb") as i, lzma.open(sys.argv[1] + ".xz", "wb", preset=6) as o:
    shutil.copyfileobj(i, o)' "$big"
  rm -f "$big"
done

{
  echo "adprof GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git -C "$root" rev-parse --short HEAD)"
  echo "CUDA architectures: ${ADPROF_CUDA_ARCHITECTURES:-90}"
  echo "glibc needed (highest symbol version): $(for b in "${bins[@]}" "$out"/lib/*.so*; do objdump -T "$b" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  echo "libstdc++ needed: $(for b in "${bins[@]}"; do objdump -T "$b" 2>/dev/null; done | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
  echo "compressed (unpacked by gpu-check.sh): $(cd "$out/lib" && ls *.xz 2>/dev/null | tr '\n' ' ')"
  echo "cuBLAS: from the GPU machine (not bundled); needed sonames:"
  for b in "${bins[@]}"; do ldd "$b"; done | awk '/libcublas/ {print "  " $1}' | sort -u
  echo "files:"
  (cd "$out" && find . -type f -printf '  %p %s\n' | sort)
} >"$out/MANIFEST.txt"

size=$(du -sm "$out" | cut -f1)
echo "gpu-bundle: $out is ${size} MiB"
if (( size > 60 )); then
  echo "gpu-bundle: WARNING: over 60 MiB" >&2
  exit 1
fi
echo "gpu-bundle: on the GPU machine, from the repo root: bash scripts/gpu-check.sh"
