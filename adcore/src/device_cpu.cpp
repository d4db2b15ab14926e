// The CPU device: malloc-backed storages (seen by the profiler's interposer), registry kernels.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "adcore/device.h"

namespace adcore {

KernelFn Device::kernel(OpId op) const {
  return op_def(op).kernel[static_cast<int>(kind())];
}

namespace {

class CpuDevice final : public Device {
 public:
  CpuDevice() {
    // One BLAS thread: the engine is single-threaded and the machines are small; this also
    // keeps OpenBLAS's scratch allocations attributed to the calling op.
    openblas_set_num_threads(1);
  }
  DeviceKind kind() const override { return DeviceKind::CPU; }
  const char *name() const override { return "cpu"; }
  void *allocate(size_t bytes) override {
    void *p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void *p, size_t) override { std::free(p); }
  void memset_zero(void *p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy(void *dst, const void *src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

Device &cpu() {
  static CpuDevice dev;
  return dev;
}

}  // namespace adcore
