// THE op registry: one row per op, forward kernel and backward rule side by side.
// Adding an op: add it to ADCORE_OPS (registry.h), write its kernel (kernels_*.cpp) and its
// backward rule (ops_*.cpp, a composition of forward ops), and add its row here. The static
// asserts below fail the build if the table and the id list get out of step.
#include <array>

#include "internal.h"

namespace adcore {
namespace {
using namespace detail;

constexpr uint8_t I0 = kSaveIn0, I1 = kSaveIn1, O = kSaveOut;
constexpr KernelFn kNone = nullptr;

// clang-format off
//          id                           name                      cpu kernel                 cuda  backward                 inplace dup   saves per input
#define ROW(n, k, b, inplace, dup, s0, s1, s2) \
  OpDef{OpId::n, #n, {k, kNone}, b, inplace, dup, {s0, s1, s2, 0}}
constexpr std::array<OpDef, kOpCount> kTable{{
  ROW(leaf,                  kNone,                    nullptr,          false, false, 0, 0, 0),
  ROW(copy,                  k_copy,                   b_copy,           false, false, 0, 0, 0),
  ROW(cast,                  k_cast,                   b_cast,           false, true,  0, 0, 0),
  ROW(contiguous,            k_copy,                   b_copy,           false, true,  0, 0, 0),
  ROW(add,                   k_add,                    b_add,            true,  false, 0, 0, 0),
  ROW(sub,                   k_sub,                    b_sub,            true,  false, 0, 0, 0),
  ROW(mul,                   k_mul,                    b_mul,            true,  false, I1, I0, 0),
  ROW(div,                   k_div,                    b_div,            true,  false, I1, I1 | O, 0),
  ROW(pow,                   k_pow,                    b_pow,            false, false, I0 | I1, I0 | O, 0),
  ROW(affine,                k_affine,                 b_affine,         true,  false, 0, 0, 0),
  ROW(pow_scalar,            k_pow_scalar,             b_pow_scalar,     true,  false, I0, 0, 0),
  ROW(neg,                   k_neg,                    b_neg,            true,  false, 0, 0, 0),
  ROW(exp,                   k_exp,                    b_exp,            true,  false, O, 0, 0),
  ROW(log,                   k_log,                    b_log,            true,  false, I0, 0, 0),
  ROW(sqrt,                  k_sqrt,                   b_sqrt,           true,  false, O, 0, 0),
  ROW(abs,                   k_abs,                    b_abs,            true,  false, I0, 0, 0),
  ROW(sign,                  k_sign,                   nullptr,          true,  false, 0, 0, 0),
  ROW(tanh,                  k_tanh,                   b_tanh,           true,  false, O, 0, 0),
  ROW(sigmoid,               k_sigmoid,                b_sigmoid,        true,  false, O, 0, 0),
  ROW(relu,                  k_relu,                   b_relu,           true,  false, I0, 0, 0),
  ROW(step,                  k_step,                   nullptr,          true,  false, 0, 0, 0),
  ROW(add_n,                 k_add_n,                  b_add_n,          false, false, 0, 0, 0),
  ROW(add_inplace,           k_add_inplace,            nullptr,          true,  false, 0, 0, 0),
  ROW(sum,                   k_sum,                    b_sum,            false, false, 0, 0, 0),
  ROW(mean,                  k_mean,                   b_mean,           false, false, 0, 0, 0),
  ROW(max,                   k_max,                    b_max,            false, false, I0 | O, 0, 0),
  ROW(max_backward,          k_max_backward,           nullptr,          false, false, 0, 0, 0),
  ROW(logsumexp,             k_logsumexp,              b_logsumexp,      false, false, I0 | O, 0, 0),
  ROW(matmul,                k_matmul,                 b_matmul,         false, false, I1, I0, 0),
  ROW(bmm,                   k_bmm,                    b_bmm,            false, false, I1, I0, 0),
  ROW(dot,                   k_dot,                    b_dot,            false, false, I1, I0, 0),
  ROW(transpose,             kNone,                    b_transpose,      false, false, 0, 0, 0),
  ROW(reshape,               kNone,                    b_reshape,        false, false, 0, 0, 0),
  ROW(slice,                 kNone,                    b_slice,          false, false, 0, 0, 0),
  ROW(slice_backward,        k_slice_backward,         nullptr,          false, false, 0, 0, 0),
  ROW(concat,                k_concat,                 b_concat,         false, false, 0, 0, 0),
  ROW(stack,                 k_stack,                  b_stack,          false, false, 0, 0, 0),
  ROW(expand,                kNone,                    b_expand,         false, false, 0, 0, 0),
  ROW(index_select,          k_index_select,           b_index_select,   false, false, I1, 0, 0),
  ROW(index_select_backward, k_index_select_backward,  nullptr,          false, false, 0, 0, 0),
  ROW(gather,                k_gather,                 b_gather,         false, false, I1, 0, 0),
  ROW(gather_backward,       k_gather_backward,        nullptr,          false, false, 0, 0, 0),
  ROW(gather_nd,             k_gather_nd,              b_gather_nd,      false, false, I1, 0, 0),
  ROW(gather_nd_backward,    k_gather_nd_backward,     nullptr,          false, false, 0, 0, 0),
  ROW(scatter_add,           k_scatter_add,            b_scatter_add,    false, false, 0, 0, I1),
  ROW(softmax,               k_softmax,                b_softmax,        false, false, O, 0, 0),
  ROW(log_softmax,           k_log_softmax,            b_log_softmax,    false, false, O, 0, 0),
  ROW(conv2d,                k_conv2d,                 b_conv2d,         false, false, I1, I0, 0),
  ROW(conv2d_backward_input, k_conv2d_backward_input,  nullptr,          false, false, 0, 0, 0),
  ROW(conv2d_backward_weight,k_conv2d_backward_weight, nullptr,          false, false, 0, 0, 0),
  ROW(max_pool2d,            k_max_pool2d,             b_max_pool2d,     false, false, I0, 0, 0),
  ROW(max_pool2d_backward,   k_max_pool2d_backward,    nullptr,          false, false, 0, 0, 0),
  ROW(avg_pool2d,            k_avg_pool2d,             b_avg_pool2d,     false, false, 0, 0, 0),
  ROW(avg_pool2d_backward,   k_avg_pool2d_backward,    nullptr,          false, false, 0, 0, 0),
  ROW(sgd_update,            k_sgd_update,             nullptr,          true,  false, 0, 0, 0),
  ROW(adam_update,           k_adam_update,            nullptr,          true,  false, 0, 0, 0),
  // checkpoint: no kernel (the segment runs itself); backward recomputes (Tape); saves inputs.
  ROW(checkpoint,            kNone,                    b_checkpoint,     false, false, 0, 0, 0),
}};
#undef ROW
// clang-format on

constexpr bool table_in_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kTable[static_cast<size_t>(i)].id) != i) return false;
  return true;
}
static_assert(kTable.size() == static_cast<size_t>(kOpCount), "op table size != ADCORE_OPS");
static_assert(table_in_order(), "op table rows must follow the ADCORE_OPS order");

// Mutable copy: register_kernel fills device columns at start-up.
std::array<OpDef, kOpCount> &table() {
  static std::array<OpDef, kOpCount> t = kTable;
  return t;
}

}  // namespace

const OpDef &op_def(OpId op) { return table()[static_cast<size_t>(op)]; }
const char *op_name(OpId op) { return kTable[static_cast<size_t>(op)].name; }

uint32_t op_name_id(OpId op) {
  static const std::array<uint32_t, kOpCount> ids = [] {
    std::array<uint32_t, kOpCount> r{};
    for (int i = 0; i < kOpCount; ++i)
      r[static_cast<size_t>(i)] = intern(kTable[static_cast<size_t>(i)].name);
    return r;
  }();
  return ids[static_cast<size_t>(op)];
}

void register_kernel(OpId op, DeviceKind dev, KernelFn fn) {
  table()[static_cast<size_t>(op)].kernel[static_cast<int>(dev)] = fn;
}

}  // namespace adcore
