// Neural-network ops: softmax family, cross entropy, layer norm, conv2d and pooling.
#include <string>

#include "internal.h"

namespace adcore {
namespace detail {
namespace {
Attrs pool_attrs(int kernel, int stride) {
  Attrs a;
  a.i[0] = kernel;
  a.i[1] = stride > 0 ? stride : kernel;
  return a;
}
Shape pool_shape(const Tensor &x, const Attrs &a) {
  if (x.rank() != 4) throw std::invalid_argument("pool2d: input must be (N,C,H,W)");
  const int64_t k = a.i[0], s = a.i[1];
  if (x.shape()[2] < k || x.shape()[3] < k) throw std::invalid_argument("pool2d: input too small");
  return Shape{x.shape()[0], x.shape()[1], (x.shape()[2] - k) / s + 1, (x.shape()[3] - k) / s + 1};
}
}  // namespace

void b_softmax(BackwardCtx &c) {
  if (!c.need(0)) return;
  const int ax = static_cast<int>(c.attrs().i[0]);
  const Tensor gy = mul(c.gout, c.out());
  c.gin[0] = sub(gy, mul(c.out(), sum(gy, {ax}, true)));
}
void b_log_softmax(BackwardCtx &c) {
  if (!c.need(0)) return;
  const int ax = static_cast<int>(c.attrs().i[0]);
  c.gin[0] = sub(c.gout, mul(exp(c.out()), sum(c.gout, {ax}, true)));
}
void b_conv2d(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = conv2d_backward_input(c.gout, c.in(1), c.in_meta(0).shape, c.attrs());
  if (c.need(1)) c.gin[1] = conv2d_backward_weight(c.gout, c.in(0), c.in_meta(1).shape, c.attrs());
}
void b_max_pool2d(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = max_pool2d_backward(c.gout, c.in(0), c.attrs());
}
void b_avg_pool2d(BackwardCtx &c) {
  if (c.need(0)) c.gin[0] = avg_pool2d_backward(c.gout, c.in_meta(0).shape, c.attrs());
}

Tensor conv2d_backward_input(const Tensor &g, const Tensor &w, const Shape &in_shape,
                             const Attrs &a) {
  return run(OpId::conv2d_backward_input, {g.contiguous(), w}, a, in_shape, g.dtype());
}
Tensor conv2d_backward_weight(const Tensor &g, const Tensor &x, const Shape &w_shape,
                              const Attrs &a) {
  return run(OpId::conv2d_backward_weight, {g.contiguous(), x}, a, w_shape, g.dtype());
}
Tensor max_pool2d_backward(const Tensor &g, const Tensor &x, const Attrs &a) {
  return run(OpId::max_pool2d_backward, {g.contiguous(), x}, a, x.shape(), g.dtype());
}
Tensor avg_pool2d_backward(const Tensor &g, const Shape &in_shape, const Attrs &a) {
  return run(OpId::avg_pool2d_backward, {g.contiguous()}, a, in_shape, g.dtype());
}

}  // namespace detail

using namespace detail;

Tensor softmax(const Tensor &a, int axis) {
  check_float(a, "softmax");
  Attrs at;
  at.i[0] = norm_axis(axis, a.rank());
  return run(OpId::softmax, {a.contiguous()}, at, a.shape(), a.dtype());
}

Tensor log_softmax(const Tensor &a, int axis) {
  check_float(a, "log_softmax");
  Attrs at;
  at.i[0] = norm_axis(axis, a.rank());
  return run(OpId::log_softmax, {a.contiguous()}, at, a.shape(), a.dtype());
}

// Composite ops run their parts inside an op scope of their own name (scopes nest), so the
// profiler attributes the parts to "cross_entropy" / "layer_norm".
Tensor cross_entropy(const Tensor &logits, const Tensor &target) {
  static const uint32_t name = intern("cross_entropy");
  adprof::OpScope scope(name, 0);
  if (logits.rank() != 2 || target.rank() != 1 || target.numel() != logits.shape()[0])
    throw std::invalid_argument("cross_entropy: expects (N,C) logits and (N) targets");
  const Tensor lp = log_softmax(logits, 1);
  const Tensor picked = gather(lp, 1, reshape(target, Shape{target.numel(), 1}));
  return neg(mean(picked));
}

Tensor layer_norm(const Tensor &x, const Tensor &gamma, const Tensor &beta, double eps) {
  static const uint32_t name = intern("layer_norm");
  adprof::OpScope scope(name, 0);
  const int last = x.rank() - 1;
  const Tensor mu = mean(x, {last}, true);
  const Tensor xc = sub(x, mu);
  const Tensor var = mean(mul(xc, xc), {last}, true);
  const Tensor inv = pow(affine(var, 1.0, eps), -0.5);
  return add(mul(mul(xc, inv), gamma), beta);
}

Tensor conv2d(const Tensor &x, const Tensor &w, int stride, int padding) {
  check_same_dtype(x, w, "conv2d");
  if (x.rank() != 4 || w.rank() != 4 || x.shape()[1] != w.shape()[1])
    throw std::invalid_argument("conv2d: expects x (N,C,H,W) and w (O,C,KH,KW), got " +
                                x.shape().str() + " and " + w.shape().str());
  if (stride < 1 || padding < 0) throw std::invalid_argument("conv2d: bad stride/padding");
  const int64_t oh = (x.shape()[2] + 2 * padding - w.shape()[2]) / stride + 1;
  const int64_t ow = (x.shape()[3] + 2 * padding - w.shape()[3]) / stride + 1;
  if (oh < 1 || ow < 1) throw std::invalid_argument("conv2d: kernel larger than input");
  Attrs a;
  a.i[0] = stride;
  a.i[1] = padding;
  return run(OpId::conv2d, {x.contiguous(), w.contiguous()}, a,
             Shape{x.shape()[0], w.shape()[0], oh, ow}, x.dtype());
}

Tensor max_pool2d(const Tensor &x, int kernel, int stride) {
  check_float(x, "max_pool2d");
  const Attrs a = pool_attrs(kernel, stride);
  return run(OpId::max_pool2d, {x.contiguous()}, a, pool_shape(x, a), x.dtype());
}

Tensor avg_pool2d(const Tensor &x, int kernel, int stride) {
  check_float(x, "avg_pool2d");
  const Attrs a = pool_attrs(kernel, stride);
  return run(OpId::avg_pool2d, {x.contiguous()}, a, pool_shape(x, a), x.dtype());
}

}  // namespace adcore
