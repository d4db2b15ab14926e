// Reductions: shape inference and dispatch, backward rules.
#include "internal.h"

namespace adcore {
namespace detail {

Shape reduced_shape(const Shape &in, std::span<const int> axes, bool keepdim, uint32_t *mask) {
  uint32_t m = 0;
  if (axes.empty()) {
    for (int d = 0; d < in.rank; ++d) m |= 1u << d;
  } else {
    for (int a : axes) m |= 1u << norm_axis(a, in.rank);
  }
  Shape out;
  for (int d = 0; d < in.rank; ++d) {
    if (m & (1u << d)) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(in.d[d]);
    }
  }
  if (mask) *mask = m;
  return out;
}

Attrs axes_attrs(std::span<const int> axes, bool keepdim, int rank) {
  Attrs a;
  uint32_t m = 0;
  Shape dummy;
  dummy.rank = rank;
  reduced_shape(dummy, axes, keepdim, &m);
  a.i[0] = m;
  a.keepdim = keepdim;
  return a;
}

namespace {
Shape keep_shape(const Shape &in, uint32_t mask) {
  Shape k = in;
  for (int d = 0; d < in.rank; ++d)
    if (mask & (1u << d)) k.d[d] = 1;
  return k;
}
// g (reduced) broadcast back to the input shape, as a view.
Tensor unreduce(const Tensor &g, const Shape &in, uint32_t mask) {
  const Shape k = keep_shape(in, mask);
  const Tensor gk = g.shape() == k ? g : reshape(g, k);
  return expand(gk, in);
}
Tensor reduce(OpId op, const Tensor &a, std::span<const int> axes, bool keepdim) {
  check_float(a, op);
  uint32_t m = 0;
  const Shape out = reduced_shape(a.shape(), axes, keepdim, &m);
  Attrs at;
  at.i[0] = m;
  at.keepdim = keepdim;
  return run(op, {a}, at, out, a.dtype());
}
}  // namespace

void b_sum(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] = unreduce(c.gout, c.in_meta(0).shape, static_cast<uint32_t>(c.attrs().i[0]));
}
void b_mean(BackwardCtx &c) {
  if (!c.need(0)) return;
  const auto m = static_cast<uint32_t>(c.attrs().i[0]);
  const Shape &in = c.in_meta(0).shape;
  int64_t count = 1;
  for (int d = 0; d < in.rank; ++d)
    if (m & (1u << d)) count *= in.d[d];
  c.gin[0] = affine(unreduce(c.gout, in, m), 1.0 / static_cast<double>(count), 0.0);
}
void b_max(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = max_backward(c.in(0), c.out(), c.gout, c.attrs());
}
void b_logsumexp(BackwardCtx &c) {
  if (!c.need(0)) return;
  const auto m = static_cast<uint32_t>(c.attrs().i[0]);
  const Shape &in = c.in_meta(0).shape;
  c.gin[0] = mul(unreduce(c.gout, in, m), exp(sub(c.in(0), unreduce(c.out(), in, m))));
}

Tensor max_backward(const Tensor &x, const Tensor &out, const Tensor &g, const Attrs &a) {
  const Shape k = keep_shape(x.shape(), static_cast<uint32_t>(a.i[0]));
  Tensor mk = out.shape() == k ? out : reshape(out, k);
  Tensor gk = (g.shape() == k ? g : reshape(g, k)).contiguous();
  mk = mk.contiguous();
  return run(OpId::max_backward, {x, mk, gk}, a, x.shape(), x.dtype());
}

}  // namespace detail

using namespace detail;

Tensor sum(const Tensor &a, std::span<const int> axes, bool keepdim) {
  return reduce(OpId::sum, a, axes, keepdim);
}
Tensor mean(const Tensor &a, std::span<const int> axes, bool keepdim) {
  return reduce(OpId::mean, a, axes, keepdim);
}
Tensor max(const Tensor &a, std::span<const int> axes, bool keepdim) {
  return reduce(OpId::max, a, axes, keepdim);
}
Tensor logsumexp(const Tensor &a, std::span<const int> axes, bool keepdim) {
  return reduce(OpId::logsumexp, a, axes, keepdim);
}

}  // namespace adcore
