// Internal plumbing shared by the op families: the dispatcher, stride helpers, and the
// declarations of every kernel and backward rule named in the registry table.
#pragma once
#include <span>

#include "adcore/engine.h"
#include "adcore/ops.h"
#include "adcore/registry.h"
#include "adcore/tensor.h"

namespace adcore::detail {

// Runs `op` on `ins` into a new output of (shape, dtype) allocated with the current output role,
// inside the op's profiler scope, and records it on the current tape when gradients may flow.
Tensor run(OpId op, std::span<const Tensor> ins, const Attrs &a, const Shape &shape, DType dt);
inline Tensor run(OpId op, std::initializer_list<Tensor> ins, const Attrs &a, const Shape &shape,
                  DType dt) {
  return run(op, std::span<const Tensor>(ins.begin(), ins.size()), a, shape, dt);
}
// Records a view op whose output `view` shares its input's storage.
Tensor run_view(OpId op, const Tensor &in, const Attrs &a, Tensor view);
// Runs an in-place op: ins[0] is written; never recorded.
void run_inplace(OpId op, std::span<const Tensor> ins, const Attrs &a);
// Op scope instance of an op run off the tape: 1<<63 | a per-thread counter.
uint64_t untaped_instance();
// n consecutive such instances; returns the first.
uint64_t untaped_instances(uint64_t n);
// At least n free objects in the thread's TensorImpl / StorageImpl pools (a replay plan makes
// sure its calls find the objects they need there).
void reserve_tensor_impls(size_t n);
void reserve_storage_impls(size_t n);
// Raises the thread's peaks by role to live + the given excursions (a replayed call's).
void note_role_peaks(const int64_t *bytes, const int64_t *count);

int norm_axis(int axis, int rank);
// Strides of `t` broadcast to `out` (0 on broadcast dims), aligned right.
Shape bstrides(const Tensor &t, const Shape &out);
// Reduced shape (keepdim: reduced dims are 1) and the axis mask of a reduction.
Shape reduced_shape(const Shape &in, std::span<const int> axes, bool keepdim, uint32_t *mask);
Attrs axes_attrs(std::span<const int> axes, bool keepdim, int rank);
[[noreturn]] void fail_float(const Tensor &t, const char *op);
[[noreturn]] void fail_same_dtype(const Tensor &a, const Tensor &b, const char *op);
inline void check_float(const Tensor &t, const char *op) {
  if (!t.defined() || !is_floating(t.dtype())) fail_float(t, op);
}
inline void check_same_dtype(const Tensor &a, const Tensor &b, const char *op) {
  check_float(a, op);
  check_float(b, op);
  if (a.dtype() != b.dtype()) fail_same_dtype(a, b, op);
}
// The same, naming the op only when a check fails.
inline void check_float(const Tensor &t, OpId op) {
  if (!t.defined() || !is_floating(t.dtype())) fail_float(t, op_name(op));
}
inline void check_same_dtype(const Tensor &a, const Tensor &b, OpId op) {
  check_float(a, op);
  check_float(b, op);
  if (a.dtype() != b.dtype()) fail_same_dtype(a, b, op_name(op));
}

// Op functions used by backward rules (not public API).
Tensor contiguous_copy(const Tensor &t);  // the "contiguous" op: a duplicate of t
Tensor max_backward(const Tensor &x, const Tensor &out, const Tensor &g, const Attrs &a);
Tensor slice_backward(const Tensor &g, const Shape &in_shape, int dim, int64_t start);
Tensor index_select_backward(const Tensor &g, const Shape &in_shape, DType dt, int dim,
                             const Tensor &idx);
Tensor gather_backward(const Tensor &g, const Shape &in_shape, int dim, const Tensor &idx);
Tensor gather_nd_backward(const Tensor &g, const Shape &in_shape, const Tensor &idx);
Tensor conv2d_backward_input(const Tensor &g, const Tensor &w, const Shape &in_shape,
                             const Attrs &a);
Tensor conv2d_backward_weight(const Tensor &g, const Tensor &x, const Shape &w_shape,
                              const Attrs &a);
Tensor max_pool2d_backward(const Tensor &g, const Tensor &x, const Attrs &a);
Tensor avg_pool2d_backward(const Tensor &g, const Shape &in_shape, const Attrs &a);
// Index arrays as the kernels get them: with native_i32_indices off, an i32 index array is
// widened to an i64 copy (a duplicate naming its source).
Tensor prepare_index(const Tensor &idx);

// ---- kernels (CPU) ----
#define ADCORE_DECL_KERNEL(n) void k_##n(const KernelArgs &);
ADCORE_DECL_KERNEL(copy)
ADCORE_DECL_KERNEL(cast)
ADCORE_DECL_KERNEL(add)
ADCORE_DECL_KERNEL(sub)
ADCORE_DECL_KERNEL(mul)
ADCORE_DECL_KERNEL(div)
ADCORE_DECL_KERNEL(pow)
ADCORE_DECL_KERNEL(affine)
ADCORE_DECL_KERNEL(pow_scalar)
ADCORE_DECL_KERNEL(neg)
ADCORE_DECL_KERNEL(exp)
ADCORE_DECL_KERNEL(log)
ADCORE_DECL_KERNEL(sqrt)
ADCORE_DECL_KERNEL(abs)
ADCORE_DECL_KERNEL(sign)
ADCORE_DECL_KERNEL(tanh)
ADCORE_DECL_KERNEL(sigmoid)
ADCORE_DECL_KERNEL(relu)
ADCORE_DECL_KERNEL(step)
ADCORE_DECL_KERNEL(add_n)
ADCORE_DECL_KERNEL(add_inplace)
ADCORE_DECL_KERNEL(sum)
ADCORE_DECL_KERNEL(mean)
ADCORE_DECL_KERNEL(max)
ADCORE_DECL_KERNEL(max_backward)
ADCORE_DECL_KERNEL(logsumexp)
ADCORE_DECL_KERNEL(matmul)
ADCORE_DECL_KERNEL(bmm)
ADCORE_DECL_KERNEL(dot)
ADCORE_DECL_KERNEL(slice_backward)
ADCORE_DECL_KERNEL(concat)
ADCORE_DECL_KERNEL(stack)
ADCORE_DECL_KERNEL(index_select)
ADCORE_DECL_KERNEL(index_select_backward)
ADCORE_DECL_KERNEL(gather)
ADCORE_DECL_KERNEL(gather_backward)
ADCORE_DECL_KERNEL(gather_nd)
ADCORE_DECL_KERNEL(gather_nd_backward)
ADCORE_DECL_KERNEL(scatter_add)
ADCORE_DECL_KERNEL(softmax)
ADCORE_DECL_KERNEL(log_softmax)
ADCORE_DECL_KERNEL(conv2d)
ADCORE_DECL_KERNEL(conv2d_backward_input)
ADCORE_DECL_KERNEL(conv2d_backward_weight)
ADCORE_DECL_KERNEL(max_pool2d)
ADCORE_DECL_KERNEL(max_pool2d_backward)
ADCORE_DECL_KERNEL(avg_pool2d)
ADCORE_DECL_KERNEL(avg_pool2d_backward)
ADCORE_DECL_KERNEL(sgd_update)
ADCORE_DECL_KERNEL(adam_update)
#undef ADCORE_DECL_KERNEL

// ---- backward rules (compositions of forward ops) ----
#define ADCORE_DECL_BACKWARD(n) void b_##n(BackwardCtx &);
ADCORE_DECL_BACKWARD(copy)
ADCORE_DECL_BACKWARD(cast)
ADCORE_DECL_BACKWARD(add)
ADCORE_DECL_BACKWARD(sub)
ADCORE_DECL_BACKWARD(mul)
ADCORE_DECL_BACKWARD(div)
ADCORE_DECL_BACKWARD(pow)
ADCORE_DECL_BACKWARD(affine)
ADCORE_DECL_BACKWARD(pow_scalar)
ADCORE_DECL_BACKWARD(neg)
ADCORE_DECL_BACKWARD(exp)
ADCORE_DECL_BACKWARD(log)
ADCORE_DECL_BACKWARD(sqrt)
ADCORE_DECL_BACKWARD(abs)
ADCORE_DECL_BACKWARD(tanh)
ADCORE_DECL_BACKWARD(sigmoid)
ADCORE_DECL_BACKWARD(relu)
ADCORE_DECL_BACKWARD(add_n)
ADCORE_DECL_BACKWARD(sum)
ADCORE_DECL_BACKWARD(mean)
ADCORE_DECL_BACKWARD(max)
ADCORE_DECL_BACKWARD(logsumexp)
ADCORE_DECL_BACKWARD(matmul)
ADCORE_DECL_BACKWARD(bmm)
ADCORE_DECL_BACKWARD(dot)
ADCORE_DECL_BACKWARD(transpose)
ADCORE_DECL_BACKWARD(reshape)
ADCORE_DECL_BACKWARD(slice)
ADCORE_DECL_BACKWARD(concat)
ADCORE_DECL_BACKWARD(stack)
ADCORE_DECL_BACKWARD(expand)
ADCORE_DECL_BACKWARD(index_select)
ADCORE_DECL_BACKWARD(gather)
ADCORE_DECL_BACKWARD(gather_nd)
ADCORE_DECL_BACKWARD(scatter_add)
ADCORE_DECL_BACKWARD(softmax)
ADCORE_DECL_BACKWARD(log_softmax)
ADCORE_DECL_BACKWARD(conv2d)
ADCORE_DECL_BACKWARD(max_pool2d)
ADCORE_DECL_BACKWARD(avg_pool2d)
ADCORE_DECL_BACKWARD(checkpoint)
#undef ADCORE_DECL_BACKWARD

// Elementwise iteration over an output shape with up to two strided operands.
template <class F>
void iterate2(const Shape &os, const int64_t *sa, const int64_t *sb, F f) {
  const int r = os.rank;
  const int64_t n = os.numel();
  if (n == 0) return;
  if (r == 0) {
    f(0, 0, 0);
    return;
  }
  const int64_t inner = os.d[r - 1], ia_in = sa[r - 1], ib_in = sb[r - 1];
  int64_t idx[kMaxRank] = {};
  int64_t ia = 0, ib = 0;
  for (int64_t o = 0; o < n; o += inner) {
    for (int64_t k = 0; k < inner; ++k) f(o + k, ia + k * ia_in, ib + k * ib_in);
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < os.d[d]) {
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ia -= sa[d] * (os.d[d] - 1);
      ib -= sb[d] * (os.d[d] - 1);
      idx[d] = 0;
    }
  }
}

template <class F>
void dispatch_float(DType t, F f) {
  if (t == DType::F32)
    f(float{});
  else if (t == DType::F64)
    f(double{});
  else
    throw std::invalid_argument(std::string("expected a floating dtype, got ") + dtype_name(t));
}

template <class F>
void dispatch_index(DType t, F f) {
  if (t == DType::I32)
    f(int32_t{});
  else if (t == DType::I64)
    f(int64_t{});
  else
    throw std::invalid_argument(std::string("expected an index dtype, got ") + dtype_name(t));
}

}  // namespace adcore::detail
