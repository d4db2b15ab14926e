// Host-side plumbing shared by device_cuda.cpp and ops_cuda.cpp.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace adcore::cuda::detail {

[[noreturn]] void fail(const char *what, cudaError_t e);
inline void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) fail(what, e);
}
void check_blas(cublasStatus_t s, const char *what);

cudaStream_t stream();
// The cuBLAS handle (created on first use, inside the calling op's profiler scope, with its
// workspace from cudaMalloc).
cublasHandle_t blas();

// Scratch memory from the caching allocator (role workspace), freed at scope end; kernels on
// the device's one stream are ordered, so reuse after the free is safe.
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  void *get() const { return p_; }

 private:
  void *p_ = nullptr;
};

// Fills the registry's CUDA column (ops_cuda.cpp); returns how many kernels were installed.
int register_kernels();

}  // namespace adcore::cuda::detail
