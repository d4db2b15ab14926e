// Matrix products: shape checks, BLAS layouts, backward rules (products of the forward ops).
#include <string>

#include "internal.h"

namespace adcore {
namespace detail {
bool mat_layout(const Shape &sh, const Shape &st, int d0, int d1, bool &trans, int64_t &ld);

namespace {
Tensor mat_ready(const Tensor &t, int d0, int d1) {
  bool tr;
  int64_t ld;
  return mat_layout(t.shape(), t.strides(), d0, d1, tr, ld) ? t : contiguous_copy(t);
}
Tensor vec_ready(const Tensor &t) {
  return (t.numel() <= 1 || t.strides()[0] > 0) ? t : contiguous_copy(t);
}
[[noreturn]] void mismatch(const char *op, const Tensor &a, const Tensor &b) {
  throw std::invalid_argument(std::string(op) + ": shapes " + a.shape().str() + " and " +
                              b.shape().str() + " do not multiply");
}
}  // namespace

void b_matmul(BackwardCtx &c) {
  const int ra = c.in_meta(0).shape.rank, rb = c.in_meta(1).shape.rank;
  const Tensor &g = c.gout;
  if (ra == 2 && rb == 2) {
    if (c.need(0)) c.gin[0] = matmul(g, transpose(c.in(1)));
    if (c.need(1)) c.gin[1] = matmul(transpose(c.in(0)), g);
  } else if (ra == 2) {  // (m,k)@(k) -> (m)
    const int64_t m = c.in_meta(0).shape[0], k = c.in_meta(0).shape[1];
    if (c.need(0)) c.gin[0] = matmul(reshape(g, Shape{m, 1}), reshape(c.in(1), Shape{1, k}));
    if (c.need(1)) c.gin[1] = matmul(transpose(c.in(0)), g);
  } else {  // (k)@(k,n) -> (n)
    const int64_t k = c.in_meta(1).shape[0], n = c.in_meta(1).shape[1];
    if (c.need(0)) c.gin[0] = matmul(c.in(1), g);
    if (c.need(1)) c.gin[1] = matmul(reshape(c.in(0), Shape{k, 1}), reshape(g, Shape{1, n}));
  }
}
void b_bmm(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = bmm(c.gout, transpose(c.in(1), 1, 2));
  if (c.need(1)) c.gin[1] = bmm(transpose(c.in(0), 1, 2), c.gout);
}
void b_dot(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.in(1), c.gout);
  if (c.need(1)) c.gin[1] = mul(c.in(0), c.gout);
}

}  // namespace detail

using namespace detail;

Tensor dot(const Tensor &a, const Tensor &b) {
  check_same_dtype(a, b, "dot");
  if (a.rank() != 1 || b.rank() != 1 || a.numel() != b.numel()) mismatch("dot", a, b);
  return run(OpId::dot, {vec_ready(a), vec_ready(b)}, Attrs{}, Shape{}, a.dtype());
}

Tensor bmm(const Tensor &a, const Tensor &b) {
  check_same_dtype(a, b, "bmm");
  if (a.rank() != 3 || b.rank() != 3 || a.shape()[0] != b.shape()[0] ||
      a.shape()[2] != b.shape()[1])
    mismatch("bmm", a, b);
  return run(OpId::bmm, {mat_ready(a, 1, 2), mat_ready(b, 1, 2)}, Attrs{},
             Shape{a.shape()[0], a.shape()[1], b.shape()[2]}, a.dtype());
}

Tensor matmul(const Tensor &a, const Tensor &b) {
  check_same_dtype(a, b, "matmul");
  if (a.rank() == 1 && b.rank() == 1) return dot(a, b);
  if (a.rank() == 3 && b.rank() == 3) return bmm(a, b);
  if (a.rank() == 3 && b.rank() == 2) {
    const int64_t B = a.shape()[0], m = a.shape()[1];
    Tensor r = matmul(reshape(a, Shape{B * m, a.shape()[2]}), b);
    return reshape(r, Shape{B, m, b.shape()[1]});
  }
  if (a.rank() == 2 && b.rank() == 2) {
    if (a.shape()[1] != b.shape()[0]) mismatch("matmul", a, b);
    return run(OpId::matmul, {mat_ready(a, 0, 1), mat_ready(b, 0, 1)}, Attrs{},
               Shape{a.shape()[0], b.shape()[1]}, a.dtype());
  }
  if (a.rank() == 2 && b.rank() == 1) {
    if (a.shape()[1] != b.shape()[0]) mismatch("matmul", a, b);
    return run(OpId::matmul, {mat_ready(a, 0, 1), vec_ready(b)}, Attrs{}, Shape{a.shape()[0]},
               a.dtype());
  }
  if (a.rank() == 1 && b.rank() == 2) {
    if (a.shape()[0] != b.shape()[0]) mismatch("matmul", a, b);
    return run(OpId::matmul, {vec_ready(a), mat_ready(b, 0, 1)}, Attrs{}, Shape{b.shape()[1]},
               a.dtype());
  }
  mismatch("matmul", a, b);
}

}  // namespace adcore
