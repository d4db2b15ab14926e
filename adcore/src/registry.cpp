// THE op registry: the op table's rows (adcore/op_table.h) with their CPU kernels and backward
// rules. Adding an op: docs/ADCORE.md, "Adding an op".
#include <array>
#include <iterator>

#include "internal.h"

namespace adcore {
namespace {
using namespace detail;

constexpr uint8_t I0 = kSaveIn0, I1 = kSaveIn1, O = kSaveOut;
constexpr KernelFn kNone = nullptr;

// The rows, generated from the op table (adcore/op_table.h); the CUDA column is filled when the
// CUDA plugin loads (register_kernel).
#define ADCORE_KERNEL_kernel(n) k_##n
#define ADCORE_KERNEL_none(n) kNone
#define ADCORE_BACKWARD_grad(n) b_##n
#define ADCORE_BACKWARD_nograd(n) nullptr
#define ADCORE_ROW_OP(n, kernel, backward, inplace, dup, scratch, s0, s1, s2) \
  OpDef{OpId::n,                                                              \
        #n,                                                                   \
        {ADCORE_KERNEL_##kernel(n), kNone},                                   \
        ADCORE_BACKWARD_##backward(n),                                        \
        inplace,                                                              \
        dup,                                                                  \
        scratch,                                                              \
        {s0, s1, s2, 0}},
#define ADCORE_ROW_UNARY(n, backward, s0, cpu, cuda)                   \
  OpDef{OpId::n, #n,    {k_##n, kNone}, ADCORE_BACKWARD_##backward(n), \
        true,    false, false,          {s0, 0, 0, 0}},
#define ADCORE_ROW_BINARY(n, backward, inplace, s0, s1, cpu, cuda)     \
  OpDef{OpId::n, #n,    {k_##n, kNone}, ADCORE_BACKWARD_##backward(n), \
        inplace, false, false,          {s0, s1, 0, 0}},
constexpr OpDef kRows[] = {ADCORE_OP_TABLE(ADCORE_ROW_OP, ADCORE_ROW_UNARY, ADCORE_ROW_BINARY)};

constexpr bool rows_in_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kRows[i].id) != i) return false;
  return true;
}
static_assert(std::size(kRows) == static_cast<size_t>(kOpCount), "one row per op id");
static_assert(rows_in_order(), "rows follow the op ids");

// Mutable copy: register_kernel fills device columns when a device plugin loads.
std::array<OpDef, kOpCount> &table() {
  static std::array<OpDef, kOpCount> t = std::to_array(kRows);
  return t;
}

}  // namespace

const OpDef &op_def(OpId op) { return table()[static_cast<size_t>(op)]; }
const char *op_name(OpId op) { return kRows[static_cast<size_t>(op)].name; }

uint32_t op_name_id(OpId op) {
  static const std::array<uint32_t, kOpCount> ids = [] {
    std::array<uint32_t, kOpCount> r{};
    for (int i = 0; i < kOpCount; ++i) r[static_cast<size_t>(i)] = intern(kRows[i].name);
    return r;
  }();
  return ids[static_cast<size_t>(op)];
}

void register_kernel(OpId op, DeviceKind dev, KernelFn fn) {
  table()[static_cast<size_t>(op)].kernel[static_cast<int>(dev)] = fn;
}

}  // namespace adcore
