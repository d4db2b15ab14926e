// The CUDA device: a caching allocator over cudaMalloc, one stream, cuBLAS, and the plugin's entry
// point (adcore_plugin_init, called by adcore's open_device after dlopen).
#include <adcore/cuda/cuda.h>
#include <adcore/storage.h>

#include <cstdlib>
#include <mutex>

#include "cuda_internal.h"
#include "launch.h"

namespace adcore::cuda {
namespace detail {

void fail(const char *what, cudaError_t e) {
  throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

void check_blas(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS: ") + what + ": status " +
                             std::to_string(static_cast<int>(s)));
}

}  // namespace detail

namespace {

using namespace detail;

constexpr size_t kBlasWorkspace = 32 * devalloc::kMiB;  // cuBLAS's advice for Hopper

// Segments from the driver. A refusal (cudaErrorMemoryAllocation) is "no room": nullptr.
class CudaDriver final : public devalloc::SegmentDriver {
 public:
  explicit CudaDriver(int device) : device_(device), name_("cuda:" + std::to_string(device)) {}
  void *reserve(size_t bytes) override {
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      return nullptr;
    }
    check(e, "cudaMalloc (segment)");
    return p;
  }
  void release(void *p, size_t) override { (void)cudaFree(p); }
  uint32_t device() const override { return static_cast<uint32_t>(device_); }
  const char *name() const override { return name_.c_str(); }

 private:
  int device_;
  std::string name_;
};

uint64_t parse_limit(const char *s) {
  if (!s || !*s) return 0;
  char *end = nullptr;
  const double v = std::strtod(s, &end);
  double mul = 1;
  if (end && *end) {
    switch (*end) {
      case 'k':
      case 'K':
        mul = 1024.0;
        break;
      case 'm':
      case 'M':
        mul = 1024.0 * 1024;
        break;
      case 'g':
      case 'G':
        mul = 1024.0 * 1024 * 1024;
        break;
      default:
        break;
    }
  }
  return v > 0 ? static_cast<uint64_t>(v * mul) : 0;
}

struct State {
  std::once_flag probe_once, init_once;
  bool ok = false;
  std::string reason;
  cudaStream_t stream = nullptr;
  CudaDriver *driver = nullptr;
  devalloc::CachingAllocator *alloc = nullptr;
  std::mutex blas_mu;
  cublasHandle_t blas = nullptr;
  size_t blas_ws = 0;
};
// Never destroyed: storages held by thread-local pools and statics are freed at exit, after
// any static destructor of ours would have run.
State &st() {
  static State *s = new State();
  return *s;
}

void probe() {
  State &s = st();
  std::call_once(s.probe_once, [&] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      s.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();
    } else if (n == 0) {
      s.reason = "cudaGetDeviceCount returned 0";
    } else {
      s.ok = true;
    }
  });
}

State &init() {
  State &s = st();
  probe();
  if (!s.ok) throw std::runtime_error("no CUDA device: " + s.reason);
  std::call_once(s.init_once, [&] {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    s.driver = new CudaDriver(0);
    s.alloc = new devalloc::CachingAllocator(
        *s.driver, devalloc::Config{parse_limit(std::getenv("ADCORE_CUDA_LIMIT"))});
  });
  return s;
}

class CudaDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  const char *name() const override { return "cuda"; }
  void *allocate(size_t bytes) override { return init().alloc->allocate(bytes, allocation_role()); }
  void deallocate(void *p, size_t) override { st().alloc->deallocate(p); }
  void memset_zero(void *p, size_t bytes) override {
    check(cudaMemsetAsync(p, 0, bytes, init().stream), "cudaMemsetAsync");
  }
  void fill(void *p, size_t count, DType dtype, double value) override {
    init();
    k::fill(static_cast<int>(dtype), p, static_cast<int64_t>(count), value);
  }
  // Either side may be host memory (unified addressing); the copy completes before returning.
  void copy(void *dst, const void *src, size_t bytes) override {
    State &s = init();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  }
  void retag(void *p, adprof_role role) override {
    if (st().alloc) st().alloc->retag(p, role);
  }
  std::string unavailable() const override {
    probe();
    return st().ok ? std::string() : "no CUDA device: " + st().reason;
  }
};

CudaDevice &the_device() {
  static CudaDevice *d = new CudaDevice();
  return *d;
}

// Registers the kernels and the device by name, once (no CUDA call here): from the plugin's entry
// point, or from device() in a program that links this library directly.
CudaDevice &registered_device() {
  static CudaDevice &d = []() -> CudaDevice & {
    register_kernels();
    register_device("cuda", the_device());
    register_device("cuda:0", the_device());
    return the_device();
  }();
  return d;
}

}  // namespace

namespace detail {

cudaStream_t stream() { return init().stream; }

cublasHandle_t blas() {
  State &s = init();
  std::lock_guard<std::mutex> lock(s.blas_mu);
  if (!s.blas) {
    check_blas(cublasCreate(&s.blas), "cublasCreate");
    check_blas(cublasSetStream(s.blas, s.stream), "cublasSetStream");
    // The workspace is a library allocation the engine does not own: a plain cudaMalloc, seen by
    // the interposer as DEVICE_RAW inside the calling op (matmul, role workspace).
    void *ws = nullptr;
    check(cudaMalloc(&ws, kBlasWorkspace), "cudaMalloc (cuBLAS workspace)");
    check_blas(cublasSetWorkspace(s.blas, ws, kBlasWorkspace), "cublasSetWorkspace");
    s.blas_ws = kBlasWorkspace;
  }
  return s.blas;
}

Scratch::Scratch(size_t bytes) {
  adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
  p_ = init().alloc->allocate(bytes, ADPROF_ROLE_WORKSPACE);
}
Scratch::~Scratch() { st().alloc->deallocate(p_); }

}  // namespace detail

namespace k {
void *stream() { return detail::stream(); }
}  // namespace k

bool available() {
  probe();
  return st().ok;
}
std::string unavailable_reason() {
  probe();
  return st().reason;
}
Device &device() { return registered_device(); }
devalloc::CachingAllocator &allocator() { return *init().alloc; }
void set_memory_limit(uint64_t bytes) { init().alloc->set_limit(bytes); }
void synchronize() { check(cudaStreamSynchronize(init().stream), "cudaStreamSynchronize"); }
size_t blas_workspace_bytes() { return st().blas_ws; }

}  // namespace adcore::cuda

// The plugin's entry point (adcore/src/device_plugin.cpp): registers the device when this library
// was built against the loading program's adcore.
extern "C" __attribute__((visibility("default"))) const char *adcore_plugin_init(int abi,
                                                                                 uint64_t ops) {
  if (abi != adcore::kPluginAbi)
    return "built against another adcore (device plugin ABI differs); rebuild the plugin";
  if (ops != adcore::kOpTableHash)
    return "built against another adcore op table; rebuild the plugin";
  (void)adcore::cuda::device();
  return nullptr;
}
