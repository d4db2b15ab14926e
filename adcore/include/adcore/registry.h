// The op registry: every op declared once, in the op table (adcore/op_table.h), from which
// adcore/src/registry.cpp builds the rows below.
//
// An entry names the op, its kernel per device, its backward rule (a few forward ops, or a
// named *_backward function that is itself a registered op, so every device gets gradients for
// free), whether it may run in place, whether its output is a duplicate of input 0, whether its
// CPU kernel allocates scratch, and for each input what its gradient needs saved.
#pragma once
#include <cstdint>

#include "adcore/dtype.h"
#include "adcore/op_table.h"

namespace adcore {

class Tensor;
struct Node;
struct BackwardCtx;

enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kDeviceKinds = 2;

// Op ids: the op table's rows in order (adcore/op_table.h).
enum class OpId : uint16_t {
#define ADCORE_X(n, ...) n,
  ADCORE_OP_TABLE(ADCORE_X, ADCORE_X, ADCORE_X)
#undef ADCORE_X
      kCount
};
inline constexpr int kOpCount = static_cast<int>(OpId::kCount);

// FNV-1a of the op names in id order: a device plugin built against another op table refuses to
// load (device.h, kPluginAbi).
namespace detail {
#define ADCORE_X(n, ...) #n ","
inline constexpr char kOpNames[] = ADCORE_OP_TABLE(ADCORE_X, ADCORE_X, ADCORE_X);
#undef ADCORE_X
constexpr uint64_t fnv1a(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}
}  // namespace detail
inline constexpr uint64_t kOpTableHash = detail::fnv1a(detail::kOpNames);

// Does the op have a forward kernel (on every device)? From the table's kernel column; the CUDA
// column is checked against it at compile time (cuda/src/ops_cuda.cpp).
namespace detail {
#define ADCORE_HAS_KERNEL_kernel true
#define ADCORE_HAS_KERNEL_none false
#define ADCORE_X_OP(n, kernel, ...) ADCORE_HAS_KERNEL_##kernel,
#define ADCORE_X_ELEMENTWISE(n, ...) true,
inline constexpr bool kOpHasKernel[] = {
    ADCORE_OP_TABLE(ADCORE_X_OP, ADCORE_X_ELEMENTWISE, ADCORE_X_ELEMENTWISE)};
#undef ADCORE_X_OP
#undef ADCORE_X_ELEMENTWISE
#undef ADCORE_HAS_KERNEL_kernel
#undef ADCORE_HAS_KERNEL_none
}  // namespace detail
constexpr bool op_has_kernel(OpId op) { return detail::kOpHasKernel[static_cast<int>(op)]; }

// Op attributes: a small POD carried by the node for the backward rule.
struct Attrs {
  double s[4] = {0, 0, 0, 0};    // scalars (affine alpha/beta, pow exponent, lr, ...)
  int64_t i[kMaxRank + 2] = {};  // axes, dims, strides, paddings
  int ni = 0;
  bool keepdim = false;
  DType dtype = DType::F32;  // cast target
};

struct KernelArgs {
  const Tensor *in;
  int nin;
  Tensor *out;
  const Attrs *attrs;
};
using KernelFn = void (*)(const KernelArgs &);
using BackwardFn = void (*)(BackwardCtx &);

inline constexpr uint8_t kSaveOut = 1u << 4;
inline constexpr uint8_t kSaveIn0 = 1u << 0, kSaveIn1 = 1u << 1, kSaveIn2 = 1u << 2,
                         kSaveIn3 = 1u << 3;

struct OpDef {
  OpId id;
  const char *name;
  KernelFn kernel[kDeviceKinds];  // forward kernel per device (CUDA column filled at runtime)
  BackwardFn backward;            // nullptr: not differentiable
  bool inplace_safe;              // may write its output into input 0's buffer
  bool duplicates_input;          // output holds input 0's information (copy/cast)
  bool scratch;                   // its CPU kernel may allocate scratch of its own (BLAS, ...)
  uint8_t save_for_grad[4];       // per input i: what grad of input i needs (kSaveIn*/kSaveOut)
};

const OpDef &op_def(OpId op);
const char *op_name(OpId op);
// Interned profiler names ("matmul") cached once per op.
uint32_t op_name_id(OpId op);
// Installs a kernel for a device kind (how a CUDA backend fills its column).
void register_kernel(OpId op, DeviceKind dev, KernelFn fn);

}  // namespace adcore
