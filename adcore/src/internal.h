// Internal plumbing shared by the op families: the dispatcher, stride helpers, and the
// declarations of every kernel and backward rule named in the op table.
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

// The host copy through which a device tensor's values are read (item, to_vector, hashes,
// save_npy): a staging buffer, role workspace (with the source's role it was one more adjoint
// or activation, which the CPU never makes).
Tensor host_copy(const Tensor &t);

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

// ---- the CPU kernels and backward rules of the op table's rows (adcore/op_table.h) ----
#define ADCORE_DECL_KERNEL_kernel(n) void k_##n(const KernelArgs &);
#define ADCORE_DECL_KERNEL_none(n)
#define ADCORE_DECL_BACKWARD_grad(n) void b_##n(BackwardCtx &);
#define ADCORE_DECL_BACKWARD_nograd(n)
#define ADCORE_DECL_OP(n, kernel, backward, ...) \
  ADCORE_DECL_KERNEL_##kernel(n) ADCORE_DECL_BACKWARD_##backward(n)
#define ADCORE_DECL_ELEMENTWISE(n, backward, ...) \
  void k_##n(const KernelArgs &);                 \
  ADCORE_DECL_BACKWARD_##backward(n)
ADCORE_OP_TABLE(ADCORE_DECL_OP, ADCORE_DECL_ELEMENTWISE, ADCORE_DECL_ELEMENTWISE)
#undef ADCORE_DECL_OP
#undef ADCORE_DECL_ELEMENTWISE
#undef ADCORE_DECL_KERNEL_kernel
#undef ADCORE_DECL_KERNEL_none
#undef ADCORE_DECL_BACKWARD_grad
#undef ADCORE_DECL_BACKWARD_nograd

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
