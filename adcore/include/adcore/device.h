// The device interface: where a storage lives and which kernels run there.
//
// A device is (1) an allocator for storage memory, (2) the column of kernels the op registry
// holds for its kind, (3) `supports(op)`. adcore ships the CPU device; a CUDA device (a later
// issue, its own build target) implements the same interface and fills the CUDA column of the
// registry with adcore::register_kernel at start-up.
#pragma once
#include <cstddef>
#include <cstdint>

#include "adcore/registry.h"

namespace adcore {

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual uint32_t index() const { return 0; }
  virtual const char *name() const = 0;
  // Raw memory for one storage. The caller (the storage allocator) has already set the
  // profiler role with a RoleScope. Host devices allocate with malloc so that the profiler's
  // interposer sees the block; device allocators report theirs with adprof_track_alloc.
  virtual void *allocate(size_t bytes) = 0;
  virtual void deallocate(void *p, size_t bytes) = 0;
  virtual void memset_zero(void *p, size_t bytes) = 0;
  virtual void copy(void *dst, const void *src, size_t bytes) = 0;
  // Kernel for `op` on this device, nullptr when the device lacks it.
  KernelFn kernel(OpId op) const;
  bool supports(OpId op) const { return kernel(op) != nullptr; }
};

// The process-wide CPU device (matrix products through OpenBLAS, single BLAS thread).
Device &cpu();

}  // namespace adcore
