// Shape ops: views (transpose, reshape, slice, expand) and copies (concat, stack).
#include <string>

#include "internal.h"

namespace adcore {
namespace detail {
namespace {

Shape resolve(const Shape &in, const Shape &want) {
  Shape s = want;
  int neg = -1;
  int64_t known = 1;
  for (int i = 0; i < s.rank; ++i) {
    if (s.d[i] == -1) {
      if (neg >= 0) throw std::invalid_argument("reshape: more than one -1");
      neg = i;
    } else {
      known *= s.d[i];
    }
  }
  if (neg >= 0) s.d[neg] = known ? in.numel() / known : 0;
  if (s.numel() != in.numel())
    throw std::invalid_argument("reshape: " + in.str() + " to " + want.str());
  return s;
}

// Strides for viewing `a` as `ns` without copying, if possible.
bool view_strides(const Tensor &a, const Shape &ns, Shape &out) {
  if (a.is_contiguous()) {
    out = contiguous_strides(ns);
    return true;
  }
  // Only size-1 dims inserted or removed: the non-1 dims keep their strides.
  int64_t sz[kMaxRank], st[kMaxRank];
  int m = 0;
  for (int d = 0; d < a.rank(); ++d)
    if (a.shape()[d] != 1) {
      sz[m] = a.shape()[d];
      st[m++] = a.strides()[d];
    }
  out.rank = ns.rank;
  int k = 0;
  for (int d = 0; d < ns.rank; ++d) {
    if (ns.d[d] == 1) {
      out.d[d] = 0;
    } else {
      if (k >= m || sz[k] != ns.d[d]) return false;
      out.d[d] = st[k++];
    }
  }
  return k == m;
}

}  // namespace

void b_transpose(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] =
        transpose(c.gout, static_cast<int>(c.attrs().i[0]), static_cast<int>(c.attrs().i[1]));
}
void b_reshape(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = reshape(c.gout, c.in_meta(0).shape);
}
void b_slice(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] = slice_backward(c.gout, c.in_meta(0).shape, static_cast<int>(c.attrs().i[0]),
                              c.attrs().i[1]);
}
void b_expand(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = sum_to(c.gout, c.in_meta(0).shape);
}
void b_concat(BackwardCtx &c) {
  const int dim = static_cast<int>(c.attrs().i[0]);
  int64_t off = 0;
  for (size_t k = 0; k < c.gin.size(); ++k) {
    const int64_t len = c.in_meta(static_cast<int>(k)).shape[dim];
    if (c.need(static_cast<int>(k))) c.gin[k] = slice(c.gout, dim, off, off + len);
    off += len;
  }
}
void b_stack(BackwardCtx &c) {
  const int dim = static_cast<int>(c.attrs().i[0]);
  for (size_t k = 0; k < c.gin.size(); ++k) {
    if (!c.need(static_cast<int>(k))) continue;
    const auto kk = static_cast<int64_t>(k);
    c.gin[k] = reshape(slice(c.gout, dim, kk, kk + 1), c.in_meta(static_cast<int>(k)).shape);
  }
}

Tensor slice_backward(const Tensor &g, const Shape &in_shape, int dim, int64_t start) {
  Attrs a;
  a.i[0] = dim;
  a.i[1] = start;
  return run(OpId::slice_backward, {g}, a, in_shape, g.dtype());
}

}  // namespace detail

using namespace detail;

Tensor transpose(const Tensor &a, int d0, int d1) {
  d0 = norm_axis(d0, a.rank());
  d1 = norm_axis(d1, a.rank());
  Shape s = a.shape(), st = a.strides();
  std::swap(s.d[d0], s.d[d1]);
  std::swap(st.d[d0], st.d[d1]);
  Attrs at;
  at.i[0] = d0;
  at.i[1] = d1;
  return run_view(OpId::transpose, a, at, make_view(a, s, st, a.impl()->offset));
}

Tensor reshape(const Tensor &a, const Shape &shape) {
  const Shape s = resolve(a.shape(), shape);
  if (s == a.shape()) return a;
  Shape st;
  if (view_strides(a, s, st))
    return run_view(OpId::reshape, a, Attrs{}, make_view(a, s, st, a.impl()->offset));
  const Tensor c = contiguous_copy(a);
  return run_view(OpId::reshape, c, Attrs{}, make_view(c, s, contiguous_strides(s), 0));
}

Tensor view(const Tensor &a, const Shape &shape) {
  const Shape s = resolve(a.shape(), shape);
  Shape st;
  if (!view_strides(a, s, st))
    throw std::invalid_argument("view: " + a.shape().str() + " cannot be viewed as " + s.str());
  if (s == a.shape()) return a;
  return run_view(OpId::reshape, a, Attrs{}, make_view(a, s, st, a.impl()->offset));
}

Tensor slice(const Tensor &a, int dim, int64_t start, int64_t end) {
  dim = norm_axis(dim, a.rank());
  const int64_t n = a.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0 || end > n || start > end) throw std::invalid_argument("slice: bad range");
  Shape s = a.shape();
  s.d[dim] = end - start;
  Attrs at;
  at.i[0] = dim;
  at.i[1] = start;
  at.i[2] = end;
  return run_view(OpId::slice, a, at,
                  make_view(a, s, a.strides(), a.impl()->offset + start * a.strides()[dim]));
}

Tensor expand(const Tensor &a, const Shape &shape) {
  if (a.shape() == shape) return a;
  if (broadcast_shapes(a.shape(), shape) != shape)
    throw std::invalid_argument("expand: " + a.shape().str() + " to " + shape.str());
  return run_view(OpId::expand, a, Attrs{},
                  make_view(a, shape, bstrides(a, shape), a.impl()->offset));
}

Tensor concat(std::span<const Tensor> xs, int dim) {
  if (xs.empty()) throw std::invalid_argument("concat: no inputs");
  dim = norm_axis(dim, xs[0].rank());
  Shape s = xs[0].shape();
  s.d[dim] = 0;
  for (const Tensor &x : xs) {
    if (x.rank() != s.rank || x.dtype() != xs[0].dtype())
      throw std::invalid_argument("concat: rank/dtype mismatch");
    for (int d = 0; d < s.rank; ++d)
      if (d != dim && x.shape()[d] != xs[0].shape()[d])
        throw std::invalid_argument("concat: shape mismatch");
    s.d[dim] += x.shape()[dim];
  }
  Attrs at;
  at.i[0] = dim;
  return run(OpId::concat, xs, at, s, xs[0].dtype());
}

Tensor stack(std::span<const Tensor> xs, int dim) {
  if (xs.empty()) throw std::invalid_argument("stack: no inputs");
  const int r = xs[0].rank();
  if (dim < 0) dim += r + 1;
  if (dim < 0 || dim > r) throw std::invalid_argument("stack: bad dim");
  for (const Tensor &x : xs)
    if (x.shape() != xs[0].shape() || x.dtype() != xs[0].dtype())
      throw std::invalid_argument("stack: shape/dtype mismatch");
  Shape s;
  for (int d = 0; d <= r; ++d) {
    if (d == dim) s.push_back(static_cast<int64_t>(xs.size()));
    if (d < r) s.push_back(xs[0].shape()[d]);
  }
  Attrs at;
  at.i[0] = dim;
  return run(OpId::stack, xs, at, s, xs[0].dtype());
}

}  // namespace adcore
