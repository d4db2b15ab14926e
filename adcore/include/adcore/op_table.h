// THE op table: one row per op, the single source of everything adcore knows about an op.
//
// Expanded (X-macro) into: the op ids (registry.h), the registry's rows (registry.cpp: name,
// backward rule, flags, the CPU kernel column), the declarations of every CPU kernel and backward
// rule (src/internal.h), the elementwise CPU kernels and the public functions of the elementwise
// rows (kernels_elementwise.cpp, ops_elementwise.cpp), and on the GPU the elementwise device code
// (cuda/src/kernels_elementwise.cu) and the CUDA kernel column (cuda/src/ops_cuda.cpp). Every
// table generated from it has one entry per row by construction; the static_asserts beside them
// check what remains (the rows' order, the CUDA column against the CPU column).
//
// Three row forms; ADCORE_OP_TABLE(OP, UNARY, BINARY) expands each row with the macro of its form:
//
//   OP(name, kernel, backward, inplace, dup, scratch, save0, save1, save2)
//     kernel   `kernel`: a forward kernel k_<name> on every device (CPU: src/kernels_*.cpp;
//              CUDA: cuda/src/ops_cuda.cpp); `none`: no kernel (views, leaf, checkpoint)
//     backward `grad`: differentiable, backward rule b_<name> (src/ops_*.cpp, a composition of
//              forward ops); `nograd`: not differentiable
//     inplace  may write its output into input 0's buffer
//     dup      its output holds input 0's information (copy/cast)
//     scratch  its CPU kernel may allocate scratch of its own (BLAS, std::vector): a replayed call
//              keeps the op's workspace role scope around it (src/plan.cpp)
//     save<i>  what the gradient of input i needs saved: I0..I3 (inputs), O (the output), 0
//
//   UNARY(name, backward, save0, cpu_expr, cuda_expr)
//     an elementwise function of one float tensor `x` of type `T` (float or double): out = expr.
//     Generates the CPU and CUDA kernels and `Tensor name(const Tensor &)`; in place safe, no
//     scratch. The public declaration (ops.h) and the backward rule b_<name> are written by hand.
//
//   BINARY(name, backward, inplace, save0, save1, cpu_expr, cuda_expr)
//     the same for two broadcast operands `x`, `y`: `Tensor name(const Tensor &, const Tensor &)`.
//
// Recipe for a new elementwise op (docs/ADCORE.md, "Adding an op"): a UNARY/BINARY row here, its
// backward rule in src/ops_elementwise.cpp, its declaration in ops.h, its test in
// tests/adcore/ops_test.cpp. Rows may be appended or inserted anywhere (op ids are not part of
// the trace format: traces name ops by string).
#pragma once

// clang-format off
#define ADCORE_OP_TABLE(OP, UNARY, BINARY)                                                          \
  OP(leaf,                   none,   nograd, false, false, false, 0,       0,      0)              \
  OP(copy,                   kernel, grad,   false, false, false, 0,       0,      0)              \
  OP(cast,                   kernel, grad,   false, true,  false, 0,       0,      0)              \
  OP(contiguous,             kernel, grad,   false, true,  false, 0,       0,      0)              \
  BINARY(add,  grad, true,  0,       0,      x + y,             x + y)                             \
  BINARY(sub,  grad, true,  0,       0,      x - y,             x - y)                             \
  BINARY(mul,  grad, true,  I1,      I0,     x * y,             x * y)                             \
  BINARY(div,  grad, true,  I1,      I1 | O, x / y,             x / y)                             \
  BINARY(pow,  grad, false, I0 | I1, I0 | O, std::pow(x, y),    pow(x, y))                         \
  OP(affine,                 kernel, grad,   true,  false, false, 0,       0,      0)              \
  OP(pow_scalar,             kernel, grad,   true,  false, false, I0,      0,      0)              \
  UNARY(neg,      grad,   0,  -x,                                -x)                               \
  UNARY(exp,      grad,   O,  std::exp(x),                       exp(x))                           \
  UNARY(log,      grad,   I0, std::log(x),                       log(x))                           \
  UNARY(sqrt,     grad,   O,  std::sqrt(x),                      sqrt(x))                          \
  UNARY(abs,      grad,   I0, std::abs(x),                       fabs(x))                          \
  UNARY(sign,     nograd, 0,  static_cast<T>((x > T(0)) - (x < T(0))),                             \
                              static_cast<T>((x > T(0)) - (x < T(0))))                             \
  UNARY(tanh,     grad,   O,  std::tanh(x),                      tanh(x))                          \
  UNARY(sigmoid,  grad,   O,  T(1) / (T(1) + std::exp(-x)),      T(1) / (T(1) + exp(-x)))          \
  UNARY(softplus, grad,   I0, (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::abs(x))),         \
                              (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x))))                        \
  UNARY(relu,     grad,   I0, x > T(0) ? x : T(0),               x > T(0) ? x : T(0))              \
  UNARY(step,     nograd, 0,  x > T(0) ? T(1) : T(0),            x > T(0) ? T(1) : T(0))           \
  OP(add_n,                  kernel, grad,   false, false, false, 0,       0,      0)              \
  OP(add_inplace,            kernel, nograd, true,  false, false, 0,       0,      0)              \
  OP(sum,                    kernel, grad,   false, false, false, 0,       0,      0)              \
  OP(mean,                   kernel, grad,   false, false, false, 0,       0,      0)              \
  OP(max,                    kernel, grad,   false, false, false, I0 | O,  0,      0)              \
  OP(max_backward,           kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(logsumexp,              kernel, grad,   false, false, true,  I0 | O,  0,      0)              \
  OP(matmul,                 kernel, grad,   false, false, true,  I1,      I0,     0)              \
  OP(bmm,                    kernel, grad,   false, false, true,  I1,      I0,     0)              \
  OP(dot,                    kernel, grad,   false, false, true,  I1,      I0,     0)              \
  OP(transpose,              none,   grad,   false, false, false, 0,       0,      0)              \
  OP(reshape,                none,   grad,   false, false, false, 0,       0,      0)              \
  OP(slice,                  none,   grad,   false, false, false, 0,       0,      0)              \
  OP(slice_backward,         kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(concat,                 kernel, grad,   false, false, true,  0,       0,      0)              \
  OP(stack,                  kernel, grad,   false, false, true,  0,       0,      0)              \
  OP(expand,                 none,   grad,   false, false, false, 0,       0,      0)              \
  OP(index_select,           kernel, grad,   false, false, true,  I1,      0,      0)              \
  OP(index_select_backward,  kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(gather,                 kernel, grad,   false, false, true,  I1,      0,      0)              \
  OP(gather_backward,        kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(gather_nd,              kernel, grad,   false, false, true,  I1,      0,      0)              \
  OP(gather_nd_backward,     kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(scatter_add,            kernel, grad,   false, false, true,  0,       0,      I1)             \
  OP(softmax,                kernel, grad,   false, false, true,  O,       0,      0)              \
  OP(log_softmax,            kernel, grad,   false, false, true,  O,       0,      0)              \
  OP(conv2d,                 kernel, grad,   false, false, true,  I1,      I0,     0)              \
  OP(conv2d_backward_input,  kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(conv2d_backward_weight, kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(max_pool2d,             kernel, grad,   false, false, true,  I0,      0,      0)              \
  OP(max_pool2d_backward,    kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(avg_pool2d,             kernel, grad,   false, false, true,  0,       0,      0)              \
  OP(avg_pool2d_backward,    kernel, nograd, false, false, true,  0,       0,      0)              \
  OP(sgd_update,             kernel, nograd, true,  false, true,  0,       0,      0)              \
  OP(adam_update,            kernel, nograd, true,  false, true,  0,       0,      0)              \
  /* checkpoint: no kernel (the segment runs itself); backward recomputes (Tape). */               \
  OP(checkpoint,             none,   grad,   false, false, false, 0,       0,      0)
// clang-format on
