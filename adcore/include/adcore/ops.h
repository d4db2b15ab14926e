// The differentiable (and a few helper) ops. Each is recorded on the current tape when a
// gradient may flow through it; see registry.h for the single declaration of each.
#pragma once
#include <functional>
#include <span>
#include <vector>

#include "adcore/tensor.h"

namespace adcore {

// Elementwise, numpy broadcasting, float dtypes (inputs must share a dtype).
Tensor add(const Tensor &a, const Tensor &b);
Tensor sub(const Tensor &a, const Tensor &b);
Tensor mul(const Tensor &a, const Tensor &b);
Tensor div(const Tensor &a, const Tensor &b);
Tensor pow(const Tensor &a, const Tensor &b);
Tensor pow(const Tensor &a, double p);
Tensor affine(const Tensor &a, double alpha, double beta);  // alpha * a + beta
Tensor neg(const Tensor &a);
Tensor exp(const Tensor &a);
Tensor log(const Tensor &a);
Tensor sqrt(const Tensor &a);
Tensor abs(const Tensor &a);
Tensor sign(const Tensor &a);  // not differentiable
Tensor tanh(const Tensor &a);
Tensor sigmoid(const Tensor &a);
Tensor softplus(const Tensor &a);  // log(1 + exp(a)), without overflow
Tensor relu(const Tensor &a);
Tensor step(const Tensor &a);              // 1 where a > 0, else 0; not differentiable
Tensor add_n(std::span<const Tensor> xs);  // sum of same-shape tensors
Tensor copy(const Tensor &a);              // a fresh buffer with a's values
// In place a += b (b broadcast to a); not recorded (used by accumulation and optimizers).
void add_inplace(Tensor &a, const Tensor &b);

// Reductions over `axes` (empty: all axes).
Tensor sum(const Tensor &a, std::span<const int> axes = {}, bool keepdim = false);
Tensor mean(const Tensor &a, std::span<const int> axes = {}, bool keepdim = false);
Tensor max(const Tensor &a, std::span<const int> axes = {}, bool keepdim = false);
Tensor logsumexp(const Tensor &a, std::span<const int> axes = {}, bool keepdim = false);
inline Tensor sum(const Tensor &a, std::initializer_list<int> axes, bool keepdim = false) {
  return sum(a, std::span<const int>(axes.begin(), axes.size()), keepdim);
}
inline Tensor mean(const Tensor &a, std::initializer_list<int> axes, bool keepdim = false) {
  return mean(a, std::span<const int>(axes.begin(), axes.size()), keepdim);
}
inline Tensor max(const Tensor &a, std::initializer_list<int> axes, bool keepdim = false) {
  return max(a, std::span<const int>(axes.begin(), axes.size()), keepdim);
}
inline Tensor logsumexp(const Tensor &a, std::initializer_list<int> axes, bool keepdim = false) {
  return logsumexp(a, std::span<const int>(axes.begin(), axes.size()), keepdim);
}
// Sums `g` down to `shape` (the adjoint of broadcasting).
Tensor sum_to(const Tensor &g, const Shape &shape);

// Linear algebra through BLAS. matmul: (m,k)@(k,n), (m,k)@(k), (k)@(k,n), (k)@(k) and batched
// (b,m,k)@(b,k,n); bmm: batched only; dot: 1-D.
Tensor matmul(const Tensor &a, const Tensor &b);
Tensor bmm(const Tensor &a, const Tensor &b);
Tensor dot(const Tensor &a, const Tensor &b);

// Shape ops (views when possible).
Tensor transpose(const Tensor &a, int d0 = 0, int d1 = 1);
Tensor reshape(const Tensor &a, const Shape &shape);  // one -1 allowed
Tensor view(const Tensor &a, const Shape &shape);     // must be expressible as a view
Tensor slice(const Tensor &a, int dim, int64_t start, int64_t end);
Tensor concat(std::span<const Tensor> xs, int dim);
Tensor stack(std::span<const Tensor> xs, int dim);
Tensor expand(const Tensor &a, const Shape &shape);

// Indexing with i32 or i64 indices.
Tensor index_select(const Tensor &x, int dim, const Tensor &idx);  // idx 1-D
Tensor gather(const Tensor &x, int dim, const Tensor &idx);        // torch.gather
Tensor gather_nd(const Tensor &x, const Tensor &idx);  // idx (..., k): x[idx[...,0], ...]
Tensor scatter_add(const Tensor &x, int dim, const Tensor &idx, const Tensor &src);
Tensor embedding(const Tensor &weight, const Tensor &idx);
Tensor cast(const Tensor &a, DType t);

// Neural-network ops.
Tensor softmax(const Tensor &a, int axis = -1);
Tensor log_softmax(const Tensor &a, int axis = -1);
Tensor cross_entropy(const Tensor &logits, const Tensor &target);  // (N,C), (N) -> mean
Tensor layer_norm(const Tensor &x, const Tensor &gamma, const Tensor &beta, double eps = 1e-5);
Tensor conv2d(const Tensor &x, const Tensor &w, int stride = 1, int padding = 0);
Tensor max_pool2d(const Tensor &x, int kernel, int stride = 0);
Tensor avg_pool2d(const Tensor &x, int kernel, int stride = 0);

// Operators.
inline Tensor operator+(const Tensor &a, const Tensor &b) { return add(a, b); }
inline Tensor operator-(const Tensor &a, const Tensor &b) { return sub(a, b); }
inline Tensor operator*(const Tensor &a, const Tensor &b) { return mul(a, b); }
inline Tensor operator/(const Tensor &a, const Tensor &b) { return div(a, b); }
inline Tensor operator-(const Tensor &a) { return neg(a); }
inline Tensor operator+(const Tensor &a, double s) { return affine(a, 1.0, s); }
inline Tensor operator+(double s, const Tensor &a) { return affine(a, 1.0, s); }
inline Tensor operator-(const Tensor &a, double s) { return affine(a, 1.0, -s); }
inline Tensor operator*(const Tensor &a, double s) { return affine(a, s, 0.0); }
inline Tensor operator*(double s, const Tensor &a) { return affine(a, s, 0.0); }
inline Tensor operator/(const Tensor &a, double s) { return affine(a, 1.0 / s, 0.0); }

}  // namespace adcore
