// Indexing ops (i32 and i64 indices) and their backward rules.
#include <string>

#include "adprof/ad_protocol.h"
#include "internal.h"

namespace adcore {
namespace detail {

Tensor prepare_index(const Tensor &idx) {
  if (!is_index(idx.dtype()))
    throw std::invalid_argument(std::string("index tensor must be i32 or i64, got ") +
                                dtype_name(idx.dtype()));
  Tensor i = idx.contiguous();
  if (i.dtype() == DType::I32 && !current_options().native_i32_indices) {
    // The naive engine's widening copy: an i64 duplicate of the whole index array, which then
    // lives as long as the tape holds it.
    i = cast(i, DType::I64);
    i.label(ADPROF_AD_LABEL_INDEX_WIDENED);
  }
  return i;
}

void b_index_select(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] = index_select_backward(c.gout, c.in_meta(0).shape, c.in_meta(0).dtype,
                                     static_cast<int>(c.attrs().i[0]), c.in(1));
}
void b_gather(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] =
        gather_backward(c.gout, c.in_meta(0).shape, static_cast<int>(c.attrs().i[0]), c.in(1));
}
void b_gather_nd(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = gather_nd_backward(c.gout, c.in_meta(0).shape, c.in(1));
}
void b_scatter_add(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = c.gout;
  if (c.need(2)) c.gin[2] = gather(c.gout, static_cast<int>(c.attrs().i[0]), c.in(1));
}

Tensor index_select_backward(const Tensor &g, const Shape &in_shape, DType dt, int dim,
                             const Tensor &idx) {
  Attrs a;
  a.i[0] = dim;
  return run(OpId::index_select_backward, {g.contiguous(), idx}, a, in_shape, dt);
}
Tensor gather_backward(const Tensor &g, const Shape &in_shape, int dim, const Tensor &idx) {
  Attrs a;
  a.i[0] = dim;
  return run(OpId::gather_backward, {g.contiguous(), idx}, a, in_shape, g.dtype());
}
Tensor gather_nd_backward(const Tensor &g, const Shape &in_shape, const Tensor &idx) {
  return run(OpId::gather_nd_backward, {g.contiguous(), idx}, Attrs{}, in_shape, g.dtype());
}

}  // namespace detail

using namespace detail;

Tensor index_select(const Tensor &x, int dim, const Tensor &idx) {
  check_float(x, "index_select");
  if (idx.rank() != 1) throw std::invalid_argument("index_select: index must be 1-D");
  dim = norm_axis(dim, x.rank());
  Shape s = x.shape();
  s.d[dim] = idx.numel();
  Attrs a;
  a.i[0] = dim;
  return run(OpId::index_select, {x.contiguous(), prepare_index(idx)}, a, s, x.dtype());
}

Tensor gather(const Tensor &x, int dim, const Tensor &idx) {
  check_float(x, "gather");
  if (idx.rank() != x.rank()) throw std::invalid_argument("gather: index rank != input rank");
  dim = norm_axis(dim, x.rank());
  for (int d = 0; d < x.rank(); ++d)
    if (d != dim && idx.shape()[d] != x.shape()[d])
      throw std::invalid_argument("gather: index shape " + idx.shape().str() +
                                  " incompatible with " + x.shape().str());
  Attrs a;
  a.i[0] = dim;
  return run(OpId::gather, {x.contiguous(), prepare_index(idx)}, a, idx.shape(), x.dtype());
}

Tensor gather_nd(const Tensor &x, const Tensor &idx) {
  check_float(x, "gather_nd");
  if (idx.rank() < 1) throw std::invalid_argument("gather_nd: index must have rank >= 1");
  const int64_t k = idx.shape()[idx.rank() - 1];
  if (k < 1 || k > x.rank()) throw std::invalid_argument("gather_nd: bad index depth");
  Shape s;
  for (int d = 0; d < idx.rank() - 1; ++d) s.push_back(idx.shape()[d]);
  for (int d = static_cast<int>(k); d < x.rank(); ++d) s.push_back(x.shape()[d]);
  return run(OpId::gather_nd, {x.contiguous(), prepare_index(idx)}, Attrs{}, s, x.dtype());
}

Tensor scatter_add(const Tensor &x, int dim, const Tensor &idx, const Tensor &src) {
  check_same_dtype(x, src, "scatter_add");
  if (idx.shape() != src.shape()) throw std::invalid_argument("scatter_add: idx/src shapes");
  dim = norm_axis(dim, x.rank());
  Attrs a;
  a.i[0] = dim;
  return run(OpId::scatter_add, {x.contiguous(), prepare_index(idx), src.contiguous()}, a,
             x.shape(), x.dtype());
}

Tensor embedding(const Tensor &weight, const Tensor &idx) {
  if (weight.rank() != 2) throw std::invalid_argument("embedding: weight must be 2-D");
  Tensor rows = index_select(weight, 0, reshape(idx, Shape{-1}));
  Shape s = idx.shape();
  s.push_back(weight.shape()[1]);
  return reshape(rows, s);
}

}  // namespace adcore
