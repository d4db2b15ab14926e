// The tape: both styles, subsets of inputs, no_grad, deep chains, checkpoint, registry, .npy.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

using namespace adcore;

TEST(AdcoreEngine, BackwardStyleAccumulatesIntoLeafGrads) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3}, Shape{3}).set_requires_grad();
  Tensor y = from_vector(std::vector<double>{4, 5, 6}, Shape{3}).set_requires_grad();
  Tensor loss = sum(mul(x, y));
  loss.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(y.grad().to_vector(), (std::vector<double>{1, 2, 3}));
  sum(mul(x, x)).backward();  // accumulates
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{6, 9, 12}));
}

TEST(AdcoreEngine, SharedContributionsDoNotAliasLeafGrads) {
  Tensor x = scalar(2.0).set_requires_grad();
  Tensor y = scalar(3.0).set_requires_grad();
  add(x, y).backward();
  add(x, y).backward();
  EXPECT_EQ(x.grad().item(), 2.0);
  EXPECT_EQ(y.grad().item(), 2.0);
}

TEST(AdcoreEngine, GradientsForAnySubsetAndIntermediates) {
  Tensor a = from_vector(std::vector<double>{1, 2}, Shape{2}).set_requires_grad();
  Tensor b = from_vector(std::vector<double>{3, 4}, Shape{2}).set_requires_grad();
  Tensor h = mul(a, b);
  Tensor loss = sum(exp(h));
  std::vector<Tensor> g = grad(loss, {b, h});
  EXPECT_NEAR(g[0].to_vector()[1], 2 * std::exp(8.0), 1e-9);
  EXPECT_NEAR(g[1].to_vector()[0], std::exp(3.0), 1e-9);
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdcoreEngine, ValueAndGradSubsetOfArguments) {
  Tape tape;
  const Tensor args[3] = {scalar(2.0), scalar(3.0), scalar(5.0)};
  const size_t wrt[2] = {2, 0};
  Tensor g[2];
  Tensor v = tape.value_and_grad(
      [](std::span<const Tensor> in) { return mul(mul(in[0], in[1]), in[2]); }, args, wrt, g);
  EXPECT_EQ(v.item(), 30.0);
  EXPECT_EQ(g[0].item(), 6.0);
  EXPECT_EQ(g[1].item(), 15.0);
}

TEST(AdcoreEngine, UnusedInputGetsZeros) {
  Tape tape;
  const Tensor args[2] = {scalar(2.0), zeros(Shape{3}, DType::F64)};
  const size_t wrt[1] = {1};
  Tensor g[1];
  tape.value_and_grad([](std::span<const Tensor> in) { return mul(in[0], in[0]); }, args, wrt, g);
  EXPECT_EQ(g[0].to_vector(), (std::vector<double>{0, 0, 0}));
}

TEST(AdcoreEngine, NoGradRegionsAreNotRecorded) {
  Tensor x = scalar(3.0).set_requires_grad();
  Tensor c;
  {
    NoGrad ng;
    c = mul(x, x);
  }
  EXPECT_FALSE(c.on_tape());
  Tensor loss = mul(c, x);
  loss.backward();
  EXPECT_EQ(x.grad().item(), 9.0);  // c is a constant
}

TEST(AdcoreEngine, HundredThousandNodeChainDoesNotOverflowTheStack) {
  Tape tape;
  TapeScope ts(tape);
  Tensor x = scalar(1.0).set_requires_grad();
  Tensor h = x;
  for (int i = 0; i < 100000; ++i) h = affine(h, 1.0, 1e-6);
  tape.backward(h);
  EXPECT_EQ(x.grad().item(), 1.0);
}

TEST(AdcoreEngine, CheckpointMatchesPlainAndSqrtSchedule) {
  EXPECT_EQ(sqrt_schedule(16).size(), 4u);
  EXPECT_EQ(sqrt_schedule(10, 3), (std::vector<size_t>{0, 3, 6}));
  std::vector<std::function<Tensor(const Tensor &)>> layers;
  for (int i = 0; i < 9; ++i)
    layers.push_back([i](const Tensor &t) { return tanh(affine(t, 1.0 + 0.1 * i, 0.1)); });
  std::vector<double> ref;
  for (bool ck : {false, true}) {
    Options o;
    o.checkpointing = ck;
    Tape tape(o);
    const Tensor args[1] = {rand_uniform(Shape{5}, 3, -1, 1)};
    const size_t wrt[1] = {0};
    Tensor g[1];
    tape.value_and_grad(
        [&](std::span<const Tensor> in) { return sum(checkpoint_sequential(layers, in[0])); }, args,
        wrt, g);
    if (ref.empty()) {
      ref = g[0].to_vector();
    } else {
      const auto v = g[0].to_vector();
      for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], ref[i], 1e-12);
    }
  }
}

TEST(AdcoreEngine, RegistryIsComplete) {
  for (int i = 1; i < kOpCount; ++i) {
    const OpDef &d = op_def(static_cast<OpId>(i));
    EXPECT_EQ(static_cast<int>(d.id), i);
    const bool is_view = d.id == OpId::transpose || d.id == OpId::reshape || d.id == OpId::slice ||
                         d.id == OpId::expand || d.id == OpId::checkpoint;
    EXPECT_TRUE(is_view || cpu().supports(d.id)) << d.name;
    EXPECT_EQ(cpu().supports(d.id), op_has_kernel(d.id)) << d.name;  // the table's kernel column
    EXPECT_EQ(d.name, std::string(op_name(d.id)));
  }
  // The replay plan's scratch flag: none of the elementwise kernels allocates; BLAS ones may.
  EXPECT_FALSE(op_def(OpId::tanh).scratch);
  EXPECT_FALSE(op_def(OpId::add).scratch);
  EXPECT_FALSE(op_def(OpId::sum).scratch);
  EXPECT_TRUE(op_def(OpId::matmul).scratch);
  EXPECT_TRUE(op_def(OpId::logsumexp).scratch);
}

TEST(AdcoreEngine, NpyRoundTrip) {
  const Tensor t = rand_uniform(Shape{2, 3}, 1, -1, 1, DType::F32);
  const std::string path = ::testing::TempDir() + "/adcore_rt.npy";
  save_npy(path, t);
  const Tensor u = load_npy(path);
  EXPECT_EQ(u.shape(), t.shape());
  EXPECT_EQ(u.dtype(), DType::F32);
  EXPECT_EQ(u.to_vector(), t.to_vector());
  std::remove(path.c_str());
}

TEST(AdcoreEngine, ErrorsAreExceptions) {
  EXPECT_THROW(add(zeros(Shape{2}), zeros(Shape{3})), std::invalid_argument);
  EXPECT_THROW(add(zeros(Shape{2}), zeros(Shape{2}, DType::F64)), std::invalid_argument);
  EXPECT_THROW(matmul(zeros(Shape{2, 3}), zeros(Shape{2, 3})), std::invalid_argument);
  EXPECT_THROW(index_select(zeros(Shape{2, 3}), 0, from_ints(std::vector<int64_t>{5}, Shape{1})),
               std::out_of_range);
}
