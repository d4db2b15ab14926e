// The device interface: where a storage lives and which kernels run there.
//
// A device is (1) an allocator for storage memory, (2) the column of kernels the op registry
// holds for its kind, (3) `supports(op)`. adcore ships the CPU device; the CUDA device
// (adcore/cuda) is a plugin, libadcore_cuda.so, that open_device("cuda") loads on first use
// (src/device_plugin.cpp): it implements the same interface, fills the CUDA column of the
// registry with adcore::register_kernel and registers itself by name (register_device). A
// program that never asks for it loads no CUDA library (see docs/CUDA.md).
//
// Tensors are created on the thread's default device (cpu() unless a DeviceScope or
// set_default_device says otherwise); an op runs on the device of its inputs, which must agree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

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
  // Sets `count` elements of `dtype` at p to `value` (converted).
  virtual void fill(void *p, size_t count, DType dtype, double value);
  // Copies bytes; for a non-host device either side may be host memory (host<->device).
  virtual void copy(void *dst, const void *src, size_t bytes) = 0;
  // A live storage changed role (retag_storage); device allocators that keep their own
  // by-role figures update them. Host devices ignore it.
  virtual void retag(void *p, adprof_role role) {
    (void)p;
    (void)role;
  }
  // Why the device cannot be used (for example no GPU), or empty when it can.
  virtual std::string unavailable() const { return {}; }
  // Can the CPU read and write this device's memory directly?
  bool host_accessible() const { return kind() == DeviceKind::CPU; }
  // Kernel for `op` on this device, nullptr when the device lacks it.
  KernelFn kernel(OpId op) const;
  bool supports(OpId op) const { return kernel(op) != nullptr; }
};

// The process-wide CPU device (matrix products through OpenBLAS, single BLAS thread).
Device &cpu();

// Devices by name ("cpu" always; "cuda" once its plugin is loaded). find_device only looks the
// name up (nullptr for a device not registered); open_device also loads the plugin of the
// name's kind ("cuda" and "cuda:0": libadcore_cuda.so) when needed and checks that the device is
// usable, and throws std::runtime_error with one line saying why not (unknown name, plugin not
// installed or not loadable, no GPU).
void register_device(const char *name, Device &dev);
Device *find_device(const char *name);
Device &open_device(const char *name);

// What a device plugin's `extern "C" const char *adcore_plugin_init(int abi, uint64_t ops)` is
// called with: the plugin checks both against its own build and returns an error message when
// they differ (nullptr when it registered its devices). kPluginAbi changes with the Device,
// Tensor or KernelArgs layouts; kOpTableHash (registry.h) with the op table.
inline constexpr int kPluginAbi = 1;

// The device new tensors are created on (thread-local; cpu() by default).
Device &default_device();
void set_default_device(Device &dev);
class DeviceScope {
 public:
  explicit DeviceScope(Device &dev);
  ~DeviceScope();
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

 private:
  Device *prev_;
};

}  // namespace adcore
