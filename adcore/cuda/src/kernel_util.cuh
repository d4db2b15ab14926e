// Shared by the .cu files: launch geometry, index arithmetic over a Geo, launch checks.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "launch.h"

namespace adcore::cuda::k {

inline constexpr int kThreads = 256;

inline cudaStream_t s() { return static_cast<cudaStream_t>(stream()); }

inline unsigned grid(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535 * 8) b = 65535 * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

inline void check_launch(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA kernel ") + what + ": " + cudaGetErrorString(e));
}

// Offset of linear index i (row-major over g.shape) under strides st.
__device__ inline int64_t offset(int64_t i, const Geo &g, const int64_t *st) {
  int64_t off = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t q = i % g.shape[d];
    i /= g.shape[d];
    off += q * st[d];
  }
  return off;
}

__device__ inline void offsets2(int64_t i, const Geo &g, int64_t &oa, int64_t &ob) {
  oa = ob = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t q = i % g.shape[d];
    i /= g.shape[d];
    oa += q * g.a[d];
    ob += q * g.b[d];
  }
}

}  // namespace adcore::cuda::k
