#include "workloads.h"

#include <cmath>

namespace samples {

using namespace adcore;

std::vector<Tensor> quadform_args(int64_t D, int K, bool active_A, uint64_t seed) {
  std::vector<Tensor> args;
  args.push_back(randn(Shape{D}, seed, DType::F64).label("quadform.x"));
  for (int k = 0; k < K; ++k) {
    Tensor m = randn(Shape{D, D}, seed + 100 + static_cast<uint64_t>(k), DType::F64);
    Tensor a;
    {
      NoGrad ng;
      OutputRole role(ADPROF_ROLE_INPUT);
      a = matmul(transpose(m), m);  // positive definite, like the report's M'M
    }
    a.label("quadform.A");
    if (active_A) a.set_requires_grad(true);
    args.push_back(a);
  }
  return args;
}

Tensor quadform_f(std::span<const Tensor> args) {
  const Tensor &x = args[0];
  Tensor acc;
  for (size_t k = 1; k < args.size(); ++k) {
    Tensor t = dot(x, matmul(args[k], x));
    acc = acc.defined() ? add(acc, t) : t;
  }
  return acc;
}

Tensor densenet_f(std::span<const Tensor> args, int n) {
  static const char *const labels[] = {"densenet.x0", "densenet.x1", "densenet.x2",
                                       "densenet.x3", "densenet.x4", "densenet.x5",
                                       "densenet.x6", "densenet.x7", "densenet.x8"};
  std::vector<Tensor> xs;
  xs.reserve(static_cast<size_t>(n) + 1);
  xs.push_back(args[0]);
  for (int k = 1; k <= n; ++k) {
    Tensor xk = add_n(std::span<const Tensor>(xs.data(), xs.size()));
    if (k < 9) xk.label(labels[k]);
    xs.push_back(xk);
  }
  return sum(xs.back());
}

Tensor eam_f(std::span<const Tensor> args) {
  const Tensor rho = sum(exp((args[0] + 1.0) * -3.0));
  return add(add(pow(rho, 2.0), pow(rho, 3.0)), pow(rho, 4.0) * 0.25);
}

double eam_value_hand(const double *x, int64_t n) {
  double rho = 0;
  for (int64_t i = 0; i < n; ++i) rho += std::exp(-3.0 * (x[i] + 1.0));
  return rho * rho + rho * rho * rho + 0.25 * rho * rho * rho * rho;
}

void eam_grad_hand(const double *x, double *g, int64_t n) {
  // As in the user's deam!: rho, dF, then g[n] = drho(x[n]) * dF.
  double rho = 0;
  for (int64_t i = 0; i < n; ++i) rho += std::exp(-3.0 * (x[i] + 1.0));
  const double dF = 2 * rho + 3 * rho * rho + rho * rho * rho;
  for (int64_t i = 0; i < n; ++i) g[i] = -3.0 * std::exp(-3.0 * (x[i] + 1.0)) * dF;
}

Mlp make_mlp(int64_t batch, uint64_t seed) {
  Mlp m;
  auto param = [&](Shape s, double scale, uint64_t k) {
    Tensor t = rand_uniform(s, seed + k, -scale, scale, DType::F32, ADPROF_ROLE_PARAMETER);
    t.set_requires_grad(true);
    return t;
  };
  m.W1 = param(Shape{1, 16}, 1.0, 1).label("mlp.W1");
  m.b1 = param(Shape{16}, 0.5, 2).label("mlp.b1");
  m.W2 = param(Shape{16, 16}, 0.25, 3).label("mlp.W2");
  m.b2 = param(Shape{16}, 0.25, 4).label("mlp.b2");
  m.W3 = param(Shape{16, 1}, 0.25, 5).label("mlp.W3");
  m.b3 = param(Shape{1}, 0.1, 6).label("mlp.b3");
  m.x = rand_uniform(Shape{batch, 1}, seed + 10, -1.0, 1.0, DType::F32).label("mlp.x");
  std::vector<double> yv(static_cast<size_t>(batch));
  const std::vector<double> xv = m.x.to_vector();
  for (size_t i = 0; i < yv.size(); ++i) yv[i] = std::sin(3.0 * xv[i]);
  m.y = from_vector(yv, Shape{batch, 1}, DType::F32).label("mlp.y");
  return m;
}

Tensor mlp_loss(const Mlp &m, bool checkpoint_layers) {
  auto layer = [](std::span<const Tensor> in) { return tanh(add(matmul(in[0], in[1]), in[2])); };
  Tensor h = m.x;
  const Tensor l1[3] = {h, m.W1, m.b1};
  h = checkpoint_layers ? checkpoint(layer, l1) : layer(l1);
  const Tensor l2[3] = {h, m.W2, m.b2};
  h = checkpoint_layers ? checkpoint(layer, l2) : layer(l2);
  const Tensor out = add(matmul(h, m.W3), m.b3);
  const Tensor d = sub(out, m.y);
  return mean(mul(d, d));
}

Tensor gather_f(std::span<const Tensor> args) { return sum(gather_nd(args[0], args[1]) * 2.5); }

std::vector<Tensor> gather_args(int64_t side, int64_t rows, DType idx_dtype, uint64_t seed) {
  Tensor x = randn(Shape{side, side, side}, seed, DType::F32).label("gather.x");
  Tensor idx = randint(Shape{rows, 3}, seed + 1, side, idx_dtype).label("gather.idx");
  return {x, idx};
}

std::vector<Tensor> branches_args(int L, int64_t S) {
  std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
  for (int k = 0; k < L; ++k)
    args.push_back(rand_uniform(Shape{S}, 10 + static_cast<uint64_t>(k), -1, 1));
  return args;
}

std::vector<size_t> branches_wrt(int L) {
  std::vector<size_t> wrt;
  for (int k = 0; k < L; ++k) wrt.push_back(static_cast<size_t>(k) + 1);
  return wrt;
}

Tensor branches_f(std::span<const Tensor> args) {
  std::vector<Tensor> parts;
  for (size_t k = 1; k < args.size(); ++k) parts.push_back(sum(tanh(mul(args[k], args[0]))));
  return add_n(parts);
}

}  // namespace samples
