// adcore on the GPU: the CUDA device (see docs/CUDA.md).
//
// The device is the plugin libadcore_cuda.so: programs reach it with adcore::open_device("cuda"),
// which loads the plugin on first use (a CPU-only run loads no CUDA library) and throws
// "no CUDA device: ..." without a GPU. Programs that call the functions below link the library
// itself (adcore::cuda); device() registers it as "cuda" too. Nothing touches the GPU until the
// first allocation or copy; then a missing GPU is a std::runtime_error "no CUDA device: ...".
//
// Memory: storages come from a caching allocator (adcore/cuda/caching_allocator.h) over
// cudaMalloc; it reports every block (DEVICE_BLOCK, with the storage's role and op context) and
// every segment (DEVICE_SEGMENT) to the profiler. Its limit comes from ADCORE_CUDA_LIMIT (bytes,
// or with a K/M/G suffix) or set_memory_limit(). cuBLAS gets a 32 MiB workspace from a plain
// cudaMalloc made inside the first matrix product (so the profiler's interposer records it as
// DEVICE_RAW, attributed to that op, role workspace).
// All work runs on one stream; copies to or from the host synchronise it.
#pragma once
#include <adcore/cuda/caching_allocator.h>
#include <adcore/device.h>

#include <string>

namespace adcore::cuda {

// Is a usable CUDA device present? (Calls cudaGetDeviceCount once.) reason() says why not.
bool available();
std::string unavailable_reason();

// The CUDA device (registered as "cuda"); usable only when available().
Device &device();
devalloc::CachingAllocator &allocator();
void set_memory_limit(uint64_t bytes);  // 0: none but the GPU's
void synchronize();
// Bytes cuBLAS's workspace takes (0 before the first matrix product).
size_t blas_workspace_bytes();

}  // namespace adcore::cuda
