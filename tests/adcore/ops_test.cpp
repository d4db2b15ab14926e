// Every op's gradient against central finite differences (f64), on random shapes with
// broadcasting.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <cmath>

#include "fd.h"

using namespace adcore;
using adtest::check_grad;

namespace {
Tensor R(Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return rand_uniform(s, seed, lo, hi, DType::F64);
}
Tensor P(Shape s, uint64_t seed) { return R(s, seed, 0.5, 2.0); }
// Broadcasting shape pairs (a, b).
const std::vector<std::pair<Shape, Shape>> kPairs = {
    {Shape{3}, Shape{3}},          {Shape{2, 3}, Shape{3}}, {Shape{2, 1}, Shape{1, 4}},
    {Shape{4, 1, 3}, Shape{2, 1}}, {Shape{}, Shape{2, 2}},  {Shape{2, 3, 4}, Shape{2, 3, 4}}};
}  // namespace

TEST(AdcoreOps, BinaryElementwiseWithBroadcasting) {
  uint64_t seed = 1;
  for (const auto &[sa, sb] : kPairs) {
    SCOPED_TRACE(sa.str() + " x " + sb.str());
    check_grad([](auto in) { return add(in[0], in[1]); }, {R(sa, seed++), R(sb, seed++)});
    check_grad([](auto in) { return sub(in[0], in[1]); }, {R(sa, seed++), R(sb, seed++)});
    check_grad([](auto in) { return mul(in[0], in[1]); }, {R(sa, seed++), R(sb, seed++)});
    check_grad([](auto in) { return div(in[0], in[1]); }, {R(sa, seed++), P(sb, seed++)});
    check_grad([](auto in) { return pow(in[0], in[1]); }, {P(sa, seed++), R(sb, seed++)});
  }
}

TEST(AdcoreOps, UnaryElementwise) {
  const Shape s{3, 4};
  check_grad([](auto in) { return neg(in[0]); }, {R(s, 1)});
  check_grad([](auto in) { return exp(in[0]); }, {R(s, 2)});
  check_grad([](auto in) { return log(in[0]); }, {P(s, 3)});
  check_grad([](auto in) { return sqrt(in[0]); }, {P(s, 4)});
  check_grad([](auto in) { return abs(in[0]); }, {R(s, 5)});
  check_grad([](auto in) { return tanh(in[0]); }, {R(s, 6)});
  check_grad([](auto in) { return sigmoid(in[0]); }, {R(s, 7)});
  check_grad([](auto in) { return softplus(in[0]); }, {R(s, 14, -4.0, 4.0)});
  check_grad([](auto in) { return relu(in[0]); }, {R(s, 8)});
  check_grad([](auto in) { return affine(in[0], -3.0, 2.0); }, {R(s, 9)});
  for (double p : {2.0, 3.0, 4.0, 0.5, -1.5})
    check_grad([p](auto in) { return pow(in[0], p); }, {P(s, 10)});
  check_grad([](auto in) { return copy(in[0]); }, {R(s, 11)});
  check_grad([](auto in) { return transpose(in[0]).contiguous(); }, {R(s, 12)});
}

TEST(AdcoreOps, SoftplusValues) {
  const Tensor x = from_vector(std::vector<double>{-30, -1, 0, 1, 19.5, 20.5, 30}, Shape{7});
  const std::vector<double> y = softplus(x).to_vector();
  const std::vector<double> xs = x.to_vector();
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(y[i], std::log1p(std::exp(xs[i])), 1e-14 * (1 + std::abs(y[i]))) << xs[i];
  EXPECT_GT(y[0], 0.0);
  // No overflow where exp(x) does: softplus(1000) = 1000, softplus(-1000) = 0.
  const std::vector<double> big =
      softplus(from_vector(std::vector<double>{1000, -1000}, Shape{2})).to_vector();
  EXPECT_EQ(big[0], 1000.0);
  EXPECT_EQ(big[1], 0.0);
  const std::vector<double> f32 =
      softplus(from_vector(std::vector<double>{100, -2}, Shape{2}, DType::F32)).to_vector();
  EXPECT_EQ(f32[0], 100.0);
  EXPECT_NEAR(f32[1], std::log1p(std::exp(-2.0)), 1e-7);
}

// A safety net behind the per-op checks above: every differentiable UNARY/BINARY row of the op
// table (adcore/op_table.h), on inputs where all of them are defined and smooth.
TEST(AdcoreOps, EveryElementwiseRowOfTheTableHasAGradient) {
  struct Row {
    const char *name;
    bool differentiable;
    Tensor (*unary)(const Tensor &);
    Tensor (*binary)(const Tensor &, const Tensor &);
  };
#define ROW_SKIP(...)
#define ROW_IS_grad true
#define ROW_IS_nograd false
#define ROW_UNARY(n, backward, ...) \
  Row{#n, ROW_IS_##backward, static_cast<Tensor (*)(const Tensor &)>(&adcore::n), nullptr},
#define ROW_BINARY(n, backward, ...)  \
  Row{#n, ROW_IS_##backward, nullptr, \
      static_cast<Tensor (*)(const Tensor &, const Tensor &)>(&adcore::n)},
  const Row rows[] = {ADCORE_OP_TABLE(ROW_SKIP, ROW_UNARY, ROW_BINARY)};
#undef ROW_SKIP
#undef ROW_IS_grad
#undef ROW_IS_nograd
#undef ROW_UNARY
#undef ROW_BINARY
  int checked = 0;
  for (const Row &r : rows) {
    if (!r.differentiable) continue;
    SCOPED_TRACE(r.name);
    if (r.unary)
      check_grad([f = r.unary](auto in) { return f(in[0]); }, {P(Shape{2, 3}, 21)});
    else
      check_grad([f = r.binary](auto in) { return f(in[0], in[1]); },
                 {P(Shape{2, 3}, 22), P(Shape{3}, 23)});
    ++checked;
  }
  EXPECT_GE(checked, 14);
}

TEST(AdcoreOps, AddNAndCast) {
  check_grad([](auto in) { return add_n(in); }, {R(Shape{5}, 1), R(Shape{5}, 2), R(Shape{5}, 3)});
  check_grad(
      [](auto in) {
        const Tensor xs[2] = {in[0], in[0]};
        return add_n(xs);
      },
      {R(Shape{4}, 4)});
  // Through f32 and back (finite differences are meaningless at f32 precision: compare with
  // the analytic gradient 2x instead).
  const Tensor x = R(Shape{6}, 5);
  const Tensor args[1] = {x};
  const size_t wrt[1] = {0};
  Tensor g[1];
  Tape tape;
  tape.value_and_grad(
      [](auto in) {
        const Tensor f = cast(in[0], DType::F32);
        return sum(cast(mul(f, f), DType::F64));
      },
      args, wrt, g);
  ASSERT_EQ(g[0].dtype(), DType::F64);
  const auto gv = g[0].to_vector(), xv = x.to_vector();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], 2 * xv[i], 1e-6);
}

TEST(AdcoreOps, Reductions) {
  const Shape s{2, 3, 4};
  for (std::vector<int> axes : std::vector<std::vector<int>>{{}, {0}, {1}, {-1}, {0, 2}}) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE(std::to_string(axes.size()) + (keep ? " keep" : ""));
      check_grad([&](auto in) { return sum(in[0], axes, keep); }, {R(s, 1)});
      check_grad([&](auto in) { return mean(in[0], axes, keep); }, {R(s, 2)});
      check_grad([&](auto in) { return max(in[0], axes, keep); }, {R(s, 3)});
      check_grad([&](auto in) { return logsumexp(in[0], axes, keep); }, {R(s, 4)});
    }
  }
  // Reductions of strided views.
  check_grad([](auto in) { return sum(transpose(in[0]), {0}); }, {R(Shape{3, 4}, 5)});
}

TEST(AdcoreOps, MatrixProducts) {
  check_grad([](auto in) { return matmul(in[0], in[1]); }, {R(Shape{3, 4}, 1), R(Shape{4, 5}, 2)});
  check_grad([](auto in) { return matmul(in[0], in[1]); }, {R(Shape{3, 4}, 3), R(Shape{4}, 4)});
  check_grad([](auto in) { return matmul(in[0], in[1]); }, {R(Shape{4}, 5), R(Shape{4, 2}, 6)});
  check_grad([](auto in) { return matmul(in[0], in[1]); }, {R(Shape{4}, 7), R(Shape{4}, 8)});
  check_grad([](auto in) { return matmul(transpose(in[0]), in[1]); },
             {R(Shape{4, 3}, 9), R(Shape{4, 2}, 10)});
  check_grad([](auto in) { return matmul(in[0], transpose(in[1])); },
             {R(Shape{3, 4}, 11), R(Shape{2, 4}, 12)});
  check_grad([](auto in) { return bmm(in[0], in[1]); },
             {R(Shape{2, 3, 4}, 13), R(Shape{2, 4, 2}, 14)});
  check_grad([](auto in) { return matmul(in[0], in[1]); },
             {R(Shape{2, 3, 4}, 15), R(Shape{4, 2}, 16)});
  check_grad([](auto in) { return dot(in[0], in[1]); }, {R(Shape{6}, 17), R(Shape{6}, 18)});
}

TEST(AdcoreOps, ShapeOps) {
  check_grad([](auto in) { return reshape(in[0], Shape{4, -1}); }, {R(Shape{2, 3, 2}, 1)});
  check_grad([](auto in) { return reshape(transpose(in[0]), Shape{-1}); }, {R(Shape{3, 4}, 2)});
  check_grad([](auto in) { return view(in[0], Shape{6}); }, {R(Shape{2, 3}, 3)});
  check_grad([](auto in) { return slice(in[0], 1, 1, 3); }, {R(Shape{2, 4, 2}, 4)});
  check_grad([](auto in) { return expand(in[0], Shape{3, 2, 4}); }, {R(Shape{2, 1}, 5)});
  check_grad([](auto in) { return concat(in, 1); }, {R(Shape{2, 1}, 6), R(Shape{2, 3}, 7)});
  check_grad([](auto in) { return stack(in, 0); }, {R(Shape{2, 3}, 8), R(Shape{2, 3}, 9)});
  check_grad([](auto in) { return stack(in, 2); }, {R(Shape{2, 3}, 10), R(Shape{2, 3}, 11)});
}

TEST(AdcoreOps, IndexingWithI32AndI64) {
  for (DType it : {DType::I32, DType::I64}) {
    for (bool native : {true, false}) {
      Options o;
      o.native_i32_indices = native;
      const std::vector<int64_t> iv = {2, 0, 2, 1};
      const Tensor idx = from_ints(iv, Shape{4}, it);
      check_grad([idx](auto in) { return index_select(in[0], 0, idx); }, {R(Shape{3, 2}, 1)}, 1e-6,
                 o);
      check_grad([idx](auto in) { return index_select(in[0], 1, idx); }, {R(Shape{2, 3}, 2)}, 1e-6,
                 o);
      check_grad(
          [idx](auto in) {
            return embedding(in[0], reshape(idx, Shape{2, 2}));
          },
          {R(Shape{3, 5}, 3)}, 1e-6, o);
      const std::vector<int64_t> gv = {1, 0, 0, 2, 2, 2};
      const Tensor gidx = from_ints(gv, Shape{3, 2}, it);
      check_grad([gidx](auto in) { return gather(in[0], 1, gidx); }, {R(Shape{3, 3}, 4)}, 1e-6, o);
      check_grad([gidx](auto in) { return scatter_add(in[0], 1, gidx, in[1]); },
                 {R(Shape{3, 4}, 5), R(Shape{3, 2}, 6)}, 1e-6, o);
      const std::vector<int64_t> nv = {0, 1, 1, 2, 0, 1, 1, 0};
      const Tensor nidx = from_ints(nv, Shape{4, 2}, it);
      check_grad([nidx](auto in) { return gather_nd(in[0], nidx); }, {R(Shape{2, 3, 2}, 7)}, 1e-6,
                 o);
    }
  }
}

TEST(AdcoreOps, NeuralNetworkOps) {
  check_grad([](auto in) { return softmax(in[0], 1); }, {R(Shape{2, 4}, 1)});
  check_grad([](auto in) { return softmax(in[0], 0); }, {R(Shape{3, 2}, 2)});
  check_grad([](auto in) { return log_softmax(in[0], -1); }, {R(Shape{2, 5}, 3)});
  const std::vector<int64_t> tv = {1, 0, 3};
  const Tensor target = from_ints(tv, Shape{3}, DType::I32);
  check_grad([target](auto in) { return cross_entropy(in[0], target); }, {R(Shape{3, 4}, 4)});
  check_grad([](auto in) { return layer_norm(in[0], in[1], in[2]); },
             {R(Shape{2, 5}, 5), R(Shape{5}, 6), R(Shape{5}, 7)});
  check_grad([](auto in) { return conv2d(in[0], in[1], 1, 1); },
             {R(Shape{2, 2, 5, 5}, 8), R(Shape{3, 2, 3, 3}, 9)});
  check_grad([](auto in) { return conv2d(in[0], in[1], 2, 0); },
             {R(Shape{1, 2, 6, 6}, 10), R(Shape{2, 2, 2, 2}, 11)});
  check_grad([](auto in) { return max_pool2d(in[0], 2); }, {R(Shape{1, 2, 4, 4}, 12)});
  check_grad([](auto in) { return avg_pool2d(in[0], 2); }, {R(Shape{2, 1, 4, 6}, 13)});
}

TEST(AdcoreOps, SmallCnnEndToEnd) {
  const std::vector<int64_t> tv = {1, 0};
  const Tensor target = from_ints(tv, Shape{2}, DType::I64);
  check_grad(
      [target](auto in) {
        Tensor h = relu(conv2d(in[0], in[1], 1, 1));
        h = max_pool2d(h, 2);
        h = reshape(h, Shape{2, -1});
        return cross_entropy(matmul(h, in[2]), target);
      },
      {R(Shape{2, 1, 4, 4}, 1), R(Shape{2, 1, 3, 3}, 2), R(Shape{8, 3}, 3)});
}

TEST(AdcoreOps, EveryPolicyCombinationGivesTheSameGradients) {
  // A function touching accumulation, caches, indexing and checkpointing.
  const std::vector<int64_t> iv = {0, 2, 1, 2};
  const Tensor idx = from_ints(iv, Shape{4}, DType::I32);
  auto f = [idx](std::span<const Tensor> in) {
    const Tensor a = tanh(matmul(in[0], in[1]));
    const Tensor seg_in[1] = {a};
    const Tensor b = checkpoint([](auto s) { return sigmoid(mul(s[0], s[0])); }, seg_in);
    return add(sum(index_select(b, 0, idx)), sum(mul(a, b)));
  };
  const Tensor x = R(Shape{3, 4}, 1), w = R(Shape{4, 2}, 2);
  std::vector<std::vector<double>> ref;
  for (uint32_t bits = 0; bits < 128; ++bits) {
    Options o;
    o.activity_analysis = bits & 1;
    o.early_release = bits & 2;
    o.inplace_accumulation = bits & 4;
    o.fused_optimizer = bits & 8;
    o.checkpointing = bits & 16;
    o.reuse_tape = bits & 32;
    o.native_i32_indices = bits & 64;
    Tape tape(o);
    const Tensor args[2] = {x, w};
    const size_t wrt[2] = {0, 1};
    Tensor g[2];
    tape.value_and_grad(f, args, wrt, g);
    if (ref.empty()) {
      ref = {g[0].to_vector(), g[1].to_vector()};
      check_grad(f, {x, w}, 1e-6, o);
    }
    for (int k = 0; k < 2; ++k) {
      const std::vector<double> v = g[k].to_vector();
      for (size_t j = 0; j < v.size(); ++j)
        ASSERT_NEAR(v[j], ref[static_cast<size_t>(k)][j], 1e-12) << bits;
    }
  }
}
