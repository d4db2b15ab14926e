// Elementwise ops: shape inference and dispatch, and their backward rules (forward ops only).
#include <cmath>
#include <string>

#include "internal.h"

namespace adcore {
namespace detail {

int norm_axis(int axis, int rank) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw std::invalid_argument("axis " + std::to_string(axis) + " out of range for rank " +
                                std::to_string(rank));
  return a;
}

Shape bstrides(const Tensor &t, const Shape &out) {
  Shape s;
  s.rank = out.rank;
  const int lead = out.rank - t.rank();
  for (int i = 0; i < out.rank; ++i) {
    const int j = i - lead;
    s.d[i] = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
  }
  return s;
}

void fail_float(const Tensor &t, const char *op) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  throw std::invalid_argument(std::string(op) + ": expected a floating tensor, got " +
                              dtype_name(t.dtype()));
}

void fail_same_dtype(const Tensor &a, const Tensor &b, const char *op) {
  throw std::invalid_argument(std::string(op) + ": dtypes differ (" + dtype_name(a.dtype()) +
                              " vs " + dtype_name(b.dtype()) + "); cast first");
}

namespace {
Tensor binary(OpId op, const Tensor &a, const Tensor &b) {
  check_same_dtype(a, b, op);
  return run(op, {a, b}, Attrs{}, broadcast_shapes(a.shape(), b.shape()), a.dtype());
}
Tensor unary(OpId op, const Tensor &a, const Attrs &at = Attrs{}) {
  check_float(a, op);
  return run(op, {a}, at, a.shape(), a.dtype());
}
}  // namespace

// ---- backward rules ----
void b_copy(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = c.gout;
}
void b_contiguous(BackwardCtx &c) { b_copy(c); }
void b_cast(BackwardCtx &c) {
  if (c.need(0) && is_floating(c.in_meta(0).dtype)) c.gin[0] = cast(c.gout, c.in_meta(0).dtype);
}
void b_add(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = sum_to(c.gout, c.in_meta(0).shape);
  if (c.need(1)) c.gin[1] = sum_to(c.gout, c.in_meta(1).shape);
}
void b_sub(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = sum_to(c.gout, c.in_meta(0).shape);
  if (c.need(1)) c.gin[1] = neg(sum_to(c.gout, c.in_meta(1).shape));
}
void b_mul(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = sum_to(mul(c.gout, c.in(1)), c.in_meta(0).shape);
  if (c.need(1)) c.gin[1] = sum_to(mul(c.gout, c.in(0)), c.in_meta(1).shape);
}
void b_div(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = sum_to(div(c.gout, c.in(1)), c.in_meta(0).shape);
  if (c.need(1)) c.gin[1] = sum_to(neg(div(mul(c.gout, c.out()), c.in(1))), c.in_meta(1).shape);
}
void b_pow(BackwardCtx &c) {
  if (c.need(0))
    c.gin[0] = sum_to(mul(mul(c.gout, c.in(1)), pow(c.in(0), affine(c.in(1), 1.0, -1.0))),
                      c.in_meta(0).shape);
  if (c.need(1)) c.gin[1] = sum_to(mul(mul(c.gout, c.out()), log(c.in(0))), c.in_meta(1).shape);
}
void b_affine(BackwardCtx &c) {
  if (!c.need(0)) return;
  const double al = c.attrs().s[0];
  c.gin[0] = al == 1.0 ? c.gout : affine(c.gout, al, 0.0);
}
void b_pow_scalar(BackwardCtx &c) {
  if (!c.need(0)) return;
  const double p = c.attrs().s[0];
  if (p == 2.0)
    c.gin[0] = mul(c.gout, affine(c.in(0), 2.0, 0.0));
  else
    c.gin[0] = mul(c.gout, affine(pow(c.in(0), p - 1.0), p, 0.0));
}
void b_neg(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = neg(c.gout);
}
void b_exp(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, c.out());
}
void b_log(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = div(c.gout, c.in(0));
}
void b_sqrt(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = div(affine(c.gout, 0.5, 0.0), c.out());
}
void b_abs(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, sign(c.in(0)));
}
void b_tanh(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, affine(mul(c.out(), c.out()), -1.0, 1.0));
}
void b_sigmoid(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, mul(c.out(), affine(c.out(), -1.0, 1.0)));
}
void b_softplus(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, sigmoid(c.in(0)));
}
void b_relu(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = mul(c.gout, step(c.in(0)));
}
void b_add_n(BackwardCtx &c) {
  for (size_t i = 0; i < c.gin.size(); ++i)
    if (c.need(static_cast<int>(i)))
      c.gin[i] = sum_to(c.gout, c.in_meta(static_cast<int>(i)).shape);
}

Tensor contiguous_copy(const Tensor &t) {
  return run(OpId::contiguous, {t}, Attrs{}, t.shape(), t.dtype());
}

}  // namespace detail

using namespace detail;

// The public functions of the table's UNARY and BINARY rows (declared in ops.h).
#define ADCORE_NO_FUNCTION(...)
#define ADCORE_UNARY_FUNCTION(n, ...) \
  Tensor n(const Tensor &a) { return unary(OpId::n, a); }
#define ADCORE_BINARY_FUNCTION(n, ...) \
  Tensor n(const Tensor &a, const Tensor &b) { return binary(OpId::n, a, b); }
ADCORE_OP_TABLE(ADCORE_NO_FUNCTION, ADCORE_UNARY_FUNCTION, ADCORE_BINARY_FUNCTION)
#undef ADCORE_NO_FUNCTION
#undef ADCORE_UNARY_FUNCTION
#undef ADCORE_BINARY_FUNCTION

Tensor pow(const Tensor &a, double p) {
  Attrs at;
  at.s[0] = p;
  return unary(OpId::pow_scalar, a, at);
}
Tensor affine(const Tensor &a, double alpha, double beta) {
  Attrs at;
  at.s[0] = alpha;
  at.s[1] = beta;
  return unary(OpId::affine, a, at);
}

Tensor copy(const Tensor &a) { return run(OpId::copy, {a}, Attrs{}, a.shape(), a.dtype()); }

Tensor cast(const Tensor &a, DType t) {
  Attrs at;
  at.dtype = t;
  return run(OpId::cast, {a}, at, a.shape(), t);
}

Tensor add_n(std::span<const Tensor> xs) {
  if (xs.empty()) throw std::invalid_argument("add_n: no inputs");
  for (const Tensor &x : xs) {
    check_same_dtype(xs[0], x, "add_n");
    if (x.shape() != xs[0].shape()) throw std::invalid_argument("add_n: shapes differ");
  }
  return run(OpId::add_n, xs, Attrs{}, xs[0].shape(), xs[0].dtype());
}

void add_inplace(Tensor &a, const Tensor &b) {
  check_same_dtype(a, b, "add_inplace");
  if (!a.is_contiguous()) throw std::invalid_argument("add_inplace: target not contiguous");
  if (broadcast_shapes(a.shape(), b.shape()) != a.shape())
    throw std::invalid_argument("add_inplace: shapes do not match");
  const Tensor ins[2] = {a, b};
  run_inplace(OpId::add_inplace, ins, Attrs{});
}

Tensor sum_to(const Tensor &g, const Shape &shape) {
  if (g.shape() == shape) return g;
  const int lead = g.rank() - shape.rank;
  if (lead < 0) throw std::invalid_argument("sum_to: target rank larger");
  int axes[kMaxRank];
  int na = 0;
  for (int d = 0; d < g.rank(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes[na++] = d;
  Tensor s = sum(g, std::span<const int>(axes, static_cast<size_t>(na)), true);
  return s.shape() == shape ? s : reshape(s, shape);
}

}  // namespace adcore
