// The op registry: every op declared once (adcore/src/registry.cpp holds the table).
//
// An entry names the op, its kernel per device, its backward rule (a few forward ops, or a
// named *_backward function that is itself a registered op, so every device gets gradients for
// free), whether it may run in place, whether its output is a duplicate of input 0, and for
// each input what its gradient needs saved. The X-macro below is the single list of op ids; the
// table is checked against it at compile time (size and order).
#pragma once
#include <cstdint>

#include "adcore/dtype.h"

namespace adcore {

class Tensor;
struct Node;
struct BackwardCtx;

enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kDeviceKinds = 2;

// clang-format off
#define ADCORE_OPS(X) \
  X(leaf) X(copy) X(cast) X(contiguous) \
  X(add) X(sub) X(mul) X(div) X(pow) X(affine) X(pow_scalar) \
  X(neg) X(exp) X(log) X(sqrt) X(abs) X(sign) X(tanh) X(sigmoid) X(relu) X(step) \
  X(add_n) X(add_inplace) \
  X(sum) X(mean) X(max) X(max_backward) X(logsumexp) \
  X(matmul) X(bmm) X(dot) \
  X(transpose) X(reshape) X(slice) X(slice_backward) X(concat) X(stack) X(expand) \
  X(index_select) X(index_select_backward) X(gather) X(gather_backward) \
  X(gather_nd) X(gather_nd_backward) X(scatter_add) \
  X(softmax) X(log_softmax) \
  X(conv2d) X(conv2d_backward_input) X(conv2d_backward_weight) \
  X(max_pool2d) X(max_pool2d_backward) X(avg_pool2d) X(avg_pool2d_backward) \
  X(sgd_update) X(adam_update) X(checkpoint)
// clang-format on

enum class OpId : uint16_t {
#define ADCORE_X(n) n,
  ADCORE_OPS(ADCORE_X)
#undef ADCORE_X
      kCount
};
inline constexpr int kOpCount = static_cast<int>(OpId::kCount);

// FNV-1a of the op names in id order: a device plugin built against another op table refuses to
// load (device.h, kPluginAbi).
namespace detail {
#define ADCORE_X(n) #n ","
inline constexpr char kOpNames[] = ADCORE_OPS(ADCORE_X);
#undef ADCORE_X
constexpr uint64_t fnv1a(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}
}  // namespace detail
inline constexpr uint64_t kOpTableHash = detail::fnv1a(detail::kOpNames);

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
  uint8_t save_for_grad[4];       // per input i: what grad of input i needs (kSaveIn*/kSaveOut)
};

const OpDef &op_def(OpId op);
const char *op_name(OpId op);
// Interned profiler names ("matmul") cached once per op.
uint32_t op_name_id(OpId op);
// Installs a kernel for a device kind (how a CUDA backend fills its column).
void register_kernel(OpId op, DeviceKind dev, KernelFn fn);

}  // namespace adcore
