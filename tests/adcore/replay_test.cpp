// The reusable tape's replay plan (docs/ADCORE.md, "Replayed calls"): replayed calls recompute
// from the current inputs, give the normal path's results, fall back when anything differs, and
// never hand out a buffer someone still holds.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <cmath>

#include "workloads.h"

using namespace adcore;

namespace {

std::vector<double> hand_grad(const Tensor &x) {
  std::vector<double> g(static_cast<size_t>(x.numel()));
  samples::eam_grad_hand(x.data<double>(), g.data(), x.numel());
  return g;
}

void expect_near(const std::vector<double> &a, const std::vector<double> &b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << i;
}

Options no_reuse() {
  Options o;
  o.reuse_tape = false;
  return o;
}

}  // namespace

TEST(AdcoreReplay, ChangingTheInputsChangesTheReplayedGradient) {
  Tensor x = rand_uniform(Shape{100}, 5, 0, 1);
  const Tensor args[1] = {x};
  const size_t wrt[1] = {0};
  Tensor g[1];
  Tape tape;
  tape.value_and_grad(samples::eam_f, args, wrt, g);  // records
  EXPECT_TRUE(tape.has_plan());
  EXPECT_EQ(tape.replayed_calls(), 0u);
  const std::vector<double> first = g[0].to_vector();
  // The same tensor, new contents.
  double *px = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = 0.5 * px[i] - 0.25;
  Tensor v = tape.value_and_grad(samples::eam_f, args, wrt, g);
  EXPECT_EQ(tape.replayed_calls(), 1u);
  EXPECT_NEAR(v.item(), samples::eam_value_hand(px, x.numel()), 1e-9 * std::abs(v.item()));
  expect_near(g[0].to_vector(), hand_grad(x), 1e-12);
  EXPECT_NE(g[0].to_vector(), first);
  // Another tensor of the same layout.
  const Tensor args2[1] = {rand_uniform(Shape{100}, 9, -1, 1)};
  tape.value_and_grad(samples::eam_f, args2, wrt, g);
  EXPECT_EQ(tape.replayed_calls(), 2u);
  expect_near(g[0].to_vector(), hand_grad(args2[0]), 1e-12);
}

TEST(AdcoreReplay, ShapeOrDtypeChangeFallsBackAndRecordsAgain) {
  Tape tape;
  const size_t wrt[1] = {0};
  Tensor g[1];
  for (int64_t n : {100, 100, 50, 50, 100}) {
    const Tensor args[1] = {rand_uniform(Shape{n}, static_cast<uint64_t>(n), 0, 1)};
    tape.value_and_grad(samples::eam_f, args, wrt, g);
    ASSERT_EQ(g[0].numel(), n);
    expect_near(g[0].to_vector(), hand_grad(args[0]), 1e-12);
  }
  // The second call of a shape replays; the first of a new shape records a new plan.
  EXPECT_EQ(tape.replayed_calls(), 2u);
  // f32 after f64: a new plan, the same (f32-accurate) gradient.
  const Tensor a32[1] = {rand_uniform(Shape{100}, 100, 0, 1, DType::F32)};
  tape.value_and_grad(samples::eam_f, a32, wrt, g);
  tape.value_and_grad(samples::eam_f, a32, wrt, g);
  EXPECT_EQ(g[0].dtype(), DType::F32);
  EXPECT_EQ(tape.replayed_calls(), 3u);
  expect_near(g[0].to_vector(), hand_grad(a32[0].to(DType::F64)), 1e-5);
  // New options drop the plan.
  tape.set_options(Options{});
  EXPECT_FALSE(tape.has_plan());
}

TEST(AdcoreReplay, ReplayGivesTheNormalPathsResults) {
  struct Case {
    const char *name;
    std::function<Tensor(std::span<const Tensor>)> f;
    std::vector<Tensor> args;
    std::vector<size_t> wrt;
    double tol;
  };
  std::vector<Case> cases = {
      {"eam", samples::eam_f, {rand_uniform(Shape{100}, 3, 0, 1)}, {0}, 1e-12},
      {"quadform", samples::quadform_f, samples::quadform_args(30, 3, true), {0, 1}, 1e-12},
      {"densenet",
       [](auto in) { return samples::densenet_f(in, 5); },
       {rand_uniform(Shape{1000}, 2, -1, 1, DType::F32)},
       {0},
       1e-6},
      {"gather", samples::gather_f, samples::gather_args(8, 512, DType::I32), {0}, 1e-6},
      {"branches", samples::branches_f, samples::branches_args(4, 300), samples::branches_wrt(4),
       1e-12},
      {"views",
       [](std::span<const Tensor> in) {
         const Tensor t = transpose(reshape(in[0], Shape{4, 6}));
         const Tensor s = slice(t, 0, 1, 5);
         return sum(mul(s, s)) + mean(softmax(in[0] * 2.0));
       },
       {rand_uniform(Shape{24}, 4, -1, 1)},
       {0},
       1e-12},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    for (const Options &o : {Options{}, Options::naive()}) {
      Options reuse = o;
      reuse.reuse_tape = true;
      Tape replaying(reuse), plain(no_reuse());
      std::vector<Tensor> gr(c.wrt.size()), gp(c.wrt.size());
      for (int call = 0; call < 3; ++call) {
        const Tensor vr = replaying.value_and_grad(c.f, c.args, c.wrt, gr);
        const Tensor vp = plain.value_and_grad(c.f, c.args, c.wrt, gp);
        EXPECT_NEAR(vr.item(), vp.item(), c.tol * (1 + std::abs(vp.item())));
        for (size_t k = 0; k < gr.size(); ++k)
          expect_near(gr[k].to_vector(), gp[k].to_vector(), c.tol);
      }
      EXPECT_EQ(replaying.replayed_calls(), 2u);
    }
  }
}

TEST(AdcoreReplay, DataDependentControlFlowFallsBack) {
  // f branches on a value: a replayed call that takes the other branch leaves the plan (the ops
  // played so far become tape nodes) and finishes on the normal path, with the right gradient.
  auto f = [](std::span<const Tensor> in) {
    const Tensor s = sum(in[0]);
    return s.item() > 0 ? sum(exp(in[0])) : sum(tanh(in[0]));
  };
  Tape tape;
  const size_t wrt[1] = {0};
  Tensor g[1];
  for (double sign : {1.0, 1.0, -1.0, -1.0, 1.0}) {
    const Tensor args[1] = {full(Shape{5}, 0.5 * sign, DType::F64)};
    tape.value_and_grad(f, args, wrt, g);
    const double x = 0.5 * sign;
    const double want = sign > 0 ? std::exp(x) : 1 - std::tanh(x) * std::tanh(x);
    for (double v : g[0].to_vector()) EXPECT_NEAR(v, want, 1e-12) << sign;
  }
  EXPECT_GE(tape.replayed_calls(), 1u);
}

TEST(AdcoreReplay, CapturedTensorsAreReadWhereTheyAreNow) {
  // f captures W by reference; W is rebound to another tensor between calls.
  Tensor W = rand_uniform(Shape{10}, 1, -1, 1);
  auto f = [&W](std::span<const Tensor> in) { return sum(mul(in[0], W)); };
  const Tensor args[1] = {rand_uniform(Shape{10}, 2, -1, 1)};
  const size_t wrt[1] = {0};
  Tensor g[1];
  Tape tape;
  tape.value_and_grad(f, args, wrt, g);
  for (int call = 0; call < 3; ++call) {
    W = rand_uniform(Shape{10}, 3 + static_cast<uint64_t>(call), -1, 1);
    tape.value_and_grad(f, args, wrt, g);
    expect_near(g[0].to_vector(), W.to_vector(), 0);
  }
  EXPECT_EQ(tape.replayed_calls(), 3u);
}

TEST(AdcoreReplay, HeldResultsAreNotOverwritten) {
  // The previous call's value and a gradient the caller kept stay as they were.
  Tape tape;
  const size_t wrt[1] = {0};
  Tensor g[1], loss;
  std::vector<Tensor> kept;
  std::vector<double> kept_values, kept_loss;
  std::vector<Tensor> losses;
  for (int call = 0; call < 4; ++call) {
    const Tensor args[1] = {rand_uniform(Shape{100}, 20 + static_cast<uint64_t>(call), 0, 1)};
    loss = tape.value_and_grad(samples::eam_f, args, wrt, g);
    kept.push_back(g[0]);
    kept_values.push_back(g[0].to_vector()[0]);
    losses.push_back(loss);
    kept_loss.push_back(loss.item());
  }
  EXPECT_EQ(tape.replayed_calls(), 3u);
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_EQ(kept[k].to_vector()[0], kept_values[k]) << k;
    EXPECT_EQ(losses[k].item(), kept_loss[k]) << k;
  }
  EXPECT_NE(kept_values[0], kept_values[1]);
}

TEST(AdcoreReplay, AnArgumentAskedForTwiceGetsTwoGradients) {
  const Tensor args[1] = {rand_uniform(Shape{100}, 7, 0, 1)};
  const size_t wrt[2] = {0, 0};
  Tensor g[2];
  Tape tape;
  for (int call = 0; call < 3; ++call) {
    tape.value_and_grad(samples::eam_f, args, wrt, g);
    expect_near(g[0].to_vector(), hand_grad(args[0]), 1e-12);
    expect_near(g[1].to_vector(), hand_grad(args[0]), 1e-12);
    EXPECT_NE(g[0].storage_ptr(), g[1].storage_ptr());
  }
  EXPECT_EQ(tape.replayed_calls(), 2u);
}
