// The sample workloads as functions, shared by the sample programs, the policy tests and the
// benchmark (so the memory effects asserted in tests are those of the samples).
#pragma once
#include <adcore/adcore.h>

#include <cstdint>
#include <span>
#include <vector>

namespace samples {

using adcore::Tensor;

// quadform: f(A, x) = sum_k dot(x, A_k x). args = {x, A_1, ..., A_K}.
std::vector<Tensor> quadform_args(int64_t D, int K, bool active_A, uint64_t seed = 1);
Tensor quadform_f(std::span<const Tensor> args);

// densenet: x_k = sum_{j<k} x_j (k = 1..n), loss = sum(x_n). args = {x_0}.
Tensor densenet_f(std::span<const Tensor> args, int n);

// eam: rho = sum(exp(-3(x+1))), f = rho^2 + rho^3 + rho^4/4. args = {x}.
Tensor eam_f(std::span<const Tensor> args);
double eam_value_hand(const double *x, int64_t n);
// Hand-written gradient into preallocated g (no allocation).
void eam_grad_hand(const double *x, double *g, int64_t n);

// mlp: 1 -> 16 -> 16 -> 1 with tanh, f32; loss = mean((net(x) - y)^2).
struct Mlp {
  Tensor W1, b1, W2, b2, W3, b3;  // parameters (role parameter, requires_grad)
  Tensor x, y;                    // data (batch, 1)
  std::vector<Tensor> params() const { return {W1, b1, W2, b2, W3, b3}; }
};
Mlp make_mlp(int64_t batch, uint64_t seed = 7);
// With `checkpoint_layers`, each hidden layer is a checkpoint segment (inputs h, W, b).
Tensor mlp_loss(const Mlp &m, bool checkpoint_layers);

// gather: loss = sum(x[idx] * 2.5) with idx (M, 3) index triples into x (S, S, S).
// args = {x, idx}.
Tensor gather_f(std::span<const Tensor> args);
std::vector<Tensor> gather_args(int64_t side, int64_t rows, adcore::DType idx_dtype,
                                uint64_t seed = 3);

// branches: L parallel branches sum(tanh(w_k * x)), loss = their add_n; each branch caches an
// S-element tanh output, which early release frees as soon as the branch's backward rule ran.
// args = {x, w_1, ..., w_L} (f64, x seed 1, w_k seed 10 + k - 1); the gradient of every w_k is
// requested (branches_wrt: 1..L).
std::vector<Tensor> branches_args(int L, int64_t S);
std::vector<size_t> branches_wrt(int L);
Tensor branches_f(std::span<const Tensor> args);

}  // namespace samples
