// Each memory policy: the same gradients on and off, and its memory effect asserted from
// adcore's allocator counters (allocations and peak by role) on the sample workloads.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include "workloads.h"

using namespace adcore;

namespace {

struct GradRun {
  std::vector<std::vector<double>> grads;
  AllocStats stats;
};

GradRun run_grad(const Options &o, const std::function<Tensor(std::span<const Tensor>)> &f,
                 const std::vector<Tensor> &args, std::vector<size_t> wrt, int calls = 1) {
  GradRun r;
  Tape tape(o);
  std::vector<Tensor> g(wrt.size());
  reset_alloc_stats();
  for (int i = 0; i < calls; ++i) tape.value_and_grad(f, args, wrt, g);
  r.stats = alloc_stats();
  for (const Tensor &t : g) r.grads.push_back(t.to_vector());
  return r;
}

void expect_same(const GradRun &a, const GradRun &b, double tol) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t k = 0; k < a.grads.size(); ++k) {
    ASSERT_EQ(a.grads[k].size(), b.grads[k].size());
    for (size_t j = 0; j < a.grads[k].size(); ++j)
      ASSERT_NEAR(a.grads[k][j], b.grads[k][j], tol * (1 + std::abs(a.grads[k][j])));
  }
}

Options with(bool Options::*field, bool on) {
  Options o;
  o.*field = on;
  return o;
}

}  // namespace

TEST(AdcorePolicy, ActivityAnalysisQuadformHasNoASizedAdjoint) {
  const int64_t D = 200;
  const int K = 4;
  for (bool active_A : {false, true}) {
    const std::vector<Tensor> args = samples::quadform_args(D, K, active_A);
    const GradRun on = run_grad(Options{}, samples::quadform_f, args, {0});
    const GradRun off =
        run_grad(with(&Options::activity_analysis, false), samples::quadform_f, args, {0});
    expect_same(on, off, 1e-10);
    const int64_t a_bytes = D * D * 8;
    EXPECT_LT(on.stats.peak_bytes[ADPROF_ROLE_ADJOINT], a_bytes);
    EXPECT_EQ(on.stats.peak_bytes[ADPROF_ROLE_ACCUMULATION], 0);
    // Without it: every A_k gets its (dropped) gradient, K A-sized adjoints live at once.
    EXPECT_GE(off.stats.peak_bytes[ADPROF_ROLE_ADJOINT], K * a_bytes);
  }
}

TEST(AdcorePolicy, EarlyReleaseFreesCachesAtLastBackwardUse) {
  // L parallel branches sum(tanh(w_k * x)): each caches an S-element tanh output; the gradient
  // of every w_k is requested. Released early, branch k's cache dies as w_k's gradient appears.
  const int L = 6;
  const int64_t S = 20000;
  const std::vector<Tensor> args = samples::branches_args(L, S);
  const std::vector<size_t> wrt = samples::branches_wrt(L);
  const GradRun on = run_grad(Options{}, samples::branches_f, args, wrt);
  const GradRun off =
      run_grad(with(&Options::early_release, false), samples::branches_f, args, wrt);
  expect_same(on, off, 1e-12);
  EXPECT_EQ(on.stats.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], L * S * 8);
  EXPECT_GE(off.stats.peak_total - on.stats.peak_total, (L - 2) * S * 8);
}

TEST(AdcorePolicy, InPlaceAccumulationDensenet) {
  constexpr int n = 8;  // a constant: the lambda needs no capture
  const int64_t S = 10000;
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1, DType::F32)};
  auto f = [](std::span<const Tensor> in) { return samples::densenet_f(in, n); };
  const GradRun on = run_grad(Options{}, f, args, {0});
  const GradRun off = run_grad(with(&Options::inplace_accumulation, false), f, args, {0});
  expect_same(on, off, 1e-6);
  EXPECT_EQ(on.grads[0][0], 128.0);
  // In place: at most n+1 adjoint buffers, no accumulation buffers.
  EXPECT_LE(on.stats.peak_count[ADPROF_ROLE_ADJOINT], n + 1);
  EXPECT_EQ(on.stats.allocs[ADPROF_ROLE_ACCUMULATION], 0u);
  // Materialised: about (n+1)^2/4 = 20 contributions pending at the peak.
  EXPECT_GE(off.stats.peak_count[ADPROF_ROLE_ACCUMULATION], (n + 1) * (n + 1) / 4 - 1);
  EXPECT_GT(off.stats.peak_total, on.stats.peak_total + 10 * S * 4);
}

TEST(AdcorePolicy, FusedOptimizerFreesGradientsInBackward) {
  for (bool adam : {false, true}) {
    std::vector<std::vector<double>> params[2];
    int64_t peak_adjoint[2];
    for (int fused = 0; fused < 2; ++fused) {
      Options o;
      o.fused_optimizer = fused;
      o.checkpointing = false;
      set_default_options(o);
      samples::Mlp m = samples::make_mlp(1000);
      SGD sgd(0.1);
      Adam ad(0.01);
      Optimizer &opt = adam ? static_cast<Optimizer &>(ad) : sgd;
      for (const Tensor &p : m.params()) opt.add_param(p);
      reset_alloc_stats();
      for (int s = 0; s < 3; ++s)
        Tape::thread_default().backward(samples::mlp_loss(m, false), &opt);
      peak_adjoint[fused] = alloc_stats().peak_bytes[ADPROF_ROLE_ADJOINT];
      for (const Tensor &p : m.params()) {
        params[fused].push_back(p.to_vector());
        EXPECT_FALSE(p.grad().defined());
      }
    }
    set_default_options(Options{});
    for (size_t k = 0; k < params[0].size(); ++k)
      for (size_t j = 0; j < params[0][k].size(); ++j)
        ASSERT_NEAR(params[0][k][j], params[1][k][j], 1e-5);
    EXPECT_LT(peak_adjoint[1], peak_adjoint[0]) << (adam ? "adam" : "sgd");
  }
}

TEST(AdcorePolicy, CheckpointingSqrtScheduleCutsForwardCaches) {
  const int L = 16;
  const int64_t S = 20000;
  std::vector<std::function<Tensor(const Tensor &)>> layers;
  for (int i = 0; i < L; ++i)
    layers.push_back([](const Tensor &t) { return tanh(affine(t, 1.1, 0.1)); });
  auto f = [&](std::span<const Tensor> in) { return sum(checkpoint_sequential(layers, in[0])); };
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
  const GradRun on = run_grad(Options{}, f, args, {0});
  const GradRun off = run_grad(with(&Options::checkpointing, false), f, args, {0});
  expect_same(on, off, 1e-12);
  EXPECT_GE(off.stats.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], L * S * 8);
  // sqrt(16) = 4 segments: 3 boundary caches + one recomputed segment of 4 layers.
  EXPECT_LE(on.stats.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], 8 * S * 8);
}

TEST(AdcorePolicy, ReusableTapeMakesNoAllocationsAfterTheFirstCall) {
  for (int64_t N : {100, 1000}) {
    const std::vector<Tensor> args = {rand_uniform(Shape{N}, 5, 0, 1)};
    Tape tape;
    const size_t wrt[1] = {0};
    Tensor g[1];
    tape.value_and_grad(samples::eam_f, args, wrt, g);
    const uint64_t after_first = alloc_stats().heap_allocs;
    for (int i = 0; i < 50; ++i) tape.value_and_grad(samples::eam_f, args, wrt, g);
    EXPECT_EQ(alloc_stats().heap_allocs, after_first);
    std::vector<double> hand(static_cast<size_t>(N));
    samples::eam_grad_hand(args[0].data<double>(), hand.data(), N);
    const auto v = g[0].to_vector();
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(v[i], hand[i], 1e-9 * (1 + std::abs(hand[i])));

    const GradRun naive =
        run_grad(with(&Options::reuse_tape, false), samples::eam_f, args, {0}, 10);
    EXPECT_GE(naive.stats.heap_allocs, 10u * 10u);
  }
}

TEST(AdcorePolicy, NativeI32IndicesMakeNoWideningDuplicate) {
  const int64_t side = 16, rows = 1 << 12;
  const std::vector<Tensor> args = samples::gather_args(side, rows, DType::I32);
  const GradRun on = run_grad(Options{}, samples::gather_f, args, {0});
  const GradRun off =
      run_grad(with(&Options::native_i32_indices, false), samples::gather_f, args, {0});
  expect_same(on, off, 1e-6);
  EXPECT_EQ(on.stats.allocs[ADPROF_ROLE_DUPLICATE], 0u);
  EXPECT_GE(off.stats.peak_bytes[ADPROF_ROLE_DUPLICATE], rows * 3 * 8);
  double total = 0;
  for (double v : on.grads[0]) total += v;
  EXPECT_NEAR(total, 2.5 * rows, 1e-3);
}

TEST(AdcorePolicy, NaiveAndOptimisedAgreeOnEverySample) {
  struct Case {
    const char *name;
    std::function<Tensor(std::span<const Tensor>)> f;
    std::vector<Tensor> args;
    double tol;
  };
  std::vector<Case> cases = {
      {"quadform", samples::quadform_f, samples::quadform_args(50, 3, false), 1e-10},
      {"densenet",
       [](auto in) { return samples::densenet_f(in, 5); },
       {rand_uniform(Shape{1000}, 2, -1, 1, DType::F32)},
       1e-6},
      {"eam", samples::eam_f, {rand_uniform(Shape{100}, 3, 0, 1)}, 1e-10},
      {"gather", samples::gather_f, samples::gather_args(8, 512, DType::I32), 1e-6},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    expect_same(run_grad(Options{}, c.f, c.args, {0}), run_grad(Options::naive(), c.f, c.args, {0}),
                c.tol);
  }
}
