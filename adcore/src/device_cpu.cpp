// The CPU device: malloc-backed storages (seen by the profiler's interposer), registry kernels.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "adcore/device.h"

namespace adcore {

KernelFn Device::kernel(OpId op) const { return op_def(op).kernel[static_cast<int>(kind())]; }

void Device::fill(void *p, size_t count, DType dtype, double value) {
  auto put = [&](auto v) {
    auto *q = static_cast<decltype(v) *>(p);
    for (size_t i = 0; i < count; ++i) q[i] = v;
  };
  switch (dtype) {
    case DType::F32:
      put(static_cast<float>(value));
      break;
    case DType::F64:
      put(value);
      break;
    case DType::I32:
      put(static_cast<int32_t>(value));
      break;
    case DType::I64:
      put(static_cast<int64_t>(value));
      break;
    case DType::Bool:
      put(value != 0);
      break;
  }
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

namespace {
struct NamedDevice {
  std::string name;
  Device *dev;
};
std::mutex g_devices_mu;
std::vector<NamedDevice> &devices() {
  static std::vector<NamedDevice> d;
  return d;
}
thread_local Device *g_default = nullptr;
}  // namespace

void register_device(const char *name, Device &dev) {
  std::lock_guard<std::mutex> lock(g_devices_mu);
  for (NamedDevice &d : devices())
    if (d.name == name) {
      d.dev = &dev;
      return;
    }
  devices().push_back(NamedDevice{name, &dev});
}

Device *find_device(const char *name) {
  if (std::string_view(name) == "cpu") return &cpu();
  std::lock_guard<std::mutex> lock(g_devices_mu);
  for (const NamedDevice &d : devices())
    if (d.name == name) return d.dev;
  return nullptr;
}

Device &default_device() { return g_default ? *g_default : cpu(); }
void set_default_device(Device &dev) { g_default = &dev; }
DeviceScope::DeviceScope(Device &dev) : prev_(g_default) { g_default = &dev; }
DeviceScope::~DeviceScope() { g_default = prev_; }

}  // namespace adcore
