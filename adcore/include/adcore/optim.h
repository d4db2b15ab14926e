// Optimizers (SGD, Adam). Their updates are registered in-place ops (sgd_update, adam_update),
// so they run on any device; they run in the optimizer phase, and their state buffers have the
// optimizer_state role. With the fused_optimizer policy, Tape::backward calls update() for a
// parameter as soon as its adjoint is complete.
#pragma once
#include <vector>

#include "adcore/tensor.h"

namespace adcore {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  void add_param(const Tensor &p) { params_.push_back(p); }
  const std::vector<Tensor> &params() const { return params_; }
  // Index of `p` among the parameters, or -1.
  int find(const Tensor &p) const;
  // Updates one parameter with its gradient (runs in the optimizer phase).
  void update(size_t index, const Tensor &grad);
  // Non-fused: updates every parameter from its .grad(), then zeroes the gradients.
  void step();
  void zero_grad();

 protected:
  virtual void apply(size_t index, Tensor &param, const Tensor &grad) = 0;
  std::vector<Tensor> params_;
};

class SGD : public Optimizer {
 public:
  explicit SGD(double lr) : lr_(lr) {}

 protected:
  void apply(size_t index, Tensor &param, const Tensor &grad) override;

 private:
  double lr_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
      : lr_(lr), b1_(beta1), b2_(beta2), eps_(eps) {}

 protected:
  void apply(size_t index, Tensor &param, const Tensor &grad) override;

 private:
  double lr_, b1_, b2_, eps_;
  std::vector<Tensor> m_, v_;
  std::vector<int64_t> t_;
};

}  // namespace adcore
