// SGD and Adam through the registered in-place update ops, in the optimizer phase.
#include "adcore/optim.h"

#include "adcore/engine.h"
#include "internal.h"

namespace adcore {

int Optimizer::find(const Tensor &p) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].impl() == p.impl() || params_[i].storage_ptr() == p.storage_ptr())
      return static_cast<int>(i);
  return -1;
}

void Optimizer::update(size_t index, const Tensor &grad) {
  Phase phase(ADPROF_PHASE_OPTIMIZER);
  NoGrad ng;
  apply(index, params_[index], grad);
}

void Optimizer::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) update(i, g);
  }
  zero_grad();
}

void Optimizer::zero_grad() {
  for (Tensor &p : params_) p.zero_grad();
}

void SGD::apply(size_t, Tensor &param, const Tensor &grad) {
  Attrs a;
  a.s[0] = lr_;
  const Tensor ins[2] = {param, grad};
  detail::run_inplace(OpId::sgd_update, ins, a);
}

void Adam::apply(size_t index, Tensor &param, const Tensor &grad) {
  if (m_.size() < params_.size()) {
    m_.resize(params_.size());
    v_.resize(params_.size());
    t_.resize(params_.size(), 0);
  }
  if (!m_[index].defined()) {
    DeviceScope on_param(param.device());
    m_[index] = zeros(param.shape(), param.dtype(), ADPROF_ROLE_OPTIMIZER_STATE);
    v_[index] = zeros(param.shape(), param.dtype(), ADPROF_ROLE_OPTIMIZER_STATE);
  }
  Attrs a;
  a.s[0] = lr_;
  a.s[1] = b1_;
  a.s[2] = b2_;
  a.s[3] = eps_;
  a.i[0] = ++t_[index];
  const Tensor ins[4] = {param, grad.contiguous(), m_[index], v_[index]};
  detail::run_inplace(OpId::adam_update, ins, a);
}

}  // namespace adcore
