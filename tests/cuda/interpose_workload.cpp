// Run under libadprof_preload.so by cuda_interpose_test: a small f32 network on the GPU whose
// first matrix product creates the cuBLAS handle and its workspace (a plain cudaMalloc inside the
// matmul op), a raw cudaMalloc outside any op, pinned host memory (cudaMallocHost, cudaHostAlloc)
// and stream-ordered device memory (cudaMallocAsync) inside an op "staging" with role input, and
// an out-of-memory error under a limit.
#include <adcore/adcore.h>
#include <adcore/cuda/cuda.h>
#include <adprof/context.h>
#include <cuda_runtime.h>

#include <cstdio>

using namespace adcore;

int main() {
  if (!cuda::available()) {
    std::printf("no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    return 3;
  }
  DeviceScope on_gpu(cuda::device());
  Tensor w = randn(Shape{256, 128}, 1, DType::F32, ADPROF_ROLE_PARAMETER).set_requires_grad();
  Tensor x = randn(Shape{64, 256}, 2, DType::F32);
  Tensor loss = sum(tanh(matmul(x, w)));
  loss.backward();
  std::printf("loss %.6f grad %.6f\n", loss.item(), sum(w.grad()).item());

  void *raw = nullptr;  // foreign device memory, outside any op
  if (cudaMalloc(&raw, 3 << 20) != cudaSuccess) return 4;
  cudaFree(raw);

  // Pinned host memory and stream-ordered device memory, inside an op of the program's own
  // with role input (a staging buffer and its device copy).
  adprof_op_begin(adprof_name("staging"), 1);
  const adprof_role before = adprof_set_role(ADPROF_ROLE_INPUT);
  void *pinned = nullptr, *pinned2 = nullptr, *async = nullptr;
  if (cudaMallocHost(&pinned, 4 << 20) != cudaSuccess) return 6;
  if (cudaHostAlloc(&pinned2, 6 << 20, cudaHostAllocDefault) != cudaSuccess) return 6;
  if (cudaMallocAsync(&async, 5 << 20, nullptr) != cudaSuccess) return 7;
  if (cudaMemcpyAsync(async, pinned, 4 << 20, cudaMemcpyHostToDevice, nullptr) != cudaSuccess)
    return 7;
  if (cudaFreeAsync(async, nullptr) != cudaSuccess) return 7;
  if (cudaStreamSynchronize(nullptr) != cudaSuccess) return 7;
  cudaFreeHost(pinned2);
  cudaFreeHost(pinned);
  adprof_set_role(before);
  adprof_op_end();

  cuda::synchronize();
  cuda::set_memory_limit(cuda::allocator().stats().reserved + (8u << 20));
  try {
    Tensor big = zeros(Shape{4 << 20}, DType::F64, ADPROF_ROLE_ACTIVATION);  // 32 MiB
    std::printf("no out-of-memory error\n");
    return 5;
  } catch (const devalloc::OutOfMemory &e) {
    std::printf("oom: %s\n", e.what());
  }
  cuda::set_memory_limit(0);
  std::printf("blas workspace %zu\n", cuda::blas_workspace_bytes());
  return 0;
}
