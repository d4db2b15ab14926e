// Central finite differences against the tape's gradients (f64).
#pragma once
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace adtest {

using adcore::Tensor;
using Fn = std::function<Tensor(std::span<const Tensor>)>;

// Checks d f / d inputs[i] for every floating input against central differences. The output of
// f may have any shape; it is reduced with fixed random weights so every element matters.
inline void check_grad(const Fn &f, std::vector<Tensor> inputs, double tol = 1e-6,
                       adcore::Options opts = adcore::Options{}) {
  using namespace adcore;
  Tensor wts;
  auto loss = [&](std::span<const Tensor> in) {
    Tensor out = f(in);
    if (!wts.defined()) {
      NoGrad ng;
      wts = rand_uniform(out.shape(), 99, 0.5, 1.5, out.dtype());
    }
    return sum(mul(out, wts));
  };
  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (is_floating(inputs[i].dtype())) wrt.push_back(i);
  std::vector<Tensor> grads(wrt.size());
  Tape tape(opts);
  tape.value_and_grad(loss, inputs, wrt, grads);
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor x = inputs[wrt[k]];
    ASSERT_EQ(x.dtype(), DType::F64);
    ASSERT_TRUE(x.is_contiguous());
    ASSERT_EQ(grads[k].shape(), x.shape()) << "input " << wrt[k];
    double *p = x.data<double>();
    const std::vector<double> g = grads[k].to_vector();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double h = 1e-6 * std::max(1.0, std::abs(p[j])), v = p[j];
      double fp, fm;
      {
        NoGrad ng;
        p[j] = v + h;
        fp = loss(inputs).item();
        p[j] = v - h;
        fm = loss(inputs).item();
        p[j] = v;
      }
      const double fd = (fp - fm) / (2 * h);
      ASSERT_NEAR(g[static_cast<size_t>(j)], fd, tol * (1 + std::abs(fd)))
          << "input " << wrt[k] << " element " << j;
    }
  }
}

}  // namespace adtest
