// Every op on the GPU against the CPU engine: forward values and gradients (value_and_grad on
// both devices, same inputs), f64 and f32. A counting shim around the CUDA column proves that
// every op with a CPU kernel runs on the GPU (a test that runs every exercise itself). Skips when
// no CUDA device is present.
#include <adcore/adcore.h>
#include <adcore/cuda/cuda.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <utility>

using namespace adcore;

namespace {

std::array<KernelFn, kOpCount> g_real{};
std::array<int, kOpCount> g_runs{};

template <int I>
void counting(const KernelArgs &a) {
  ++g_runs[I];
  g_real[I](a);
}
template <int... I>
void install(std::integer_sequence<int, I...>) {
  ((g_real[I] = op_def(static_cast<OpId>(I)).kernel[static_cast<int>(DeviceKind::CUDA)],
    g_real[I] ? register_kernel(static_cast<OpId>(I), DeviceKind::CUDA, &counting<I>) : void()),
   ...);
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    static bool installed = false;
    if (!installed) {
      // The device fills the registry's CUDA column when it is first asked for: the shim
      // must wrap that column, not the empty one before it (it then counted nothing).
      (void)cuda::device();
      install(std::make_integer_sequence<int, kOpCount>{});
      installed = true;
    }
  }
};

// Every Gpu test below is also an exercise that the coverage test runs itself.
std::vector<std::pair<const char *, void (*)()>> &exercises() {
  static std::vector<std::pair<const char *, void (*)()>> e;
  return e;
}
bool add_exercise(const char *name, void (*run)()) {
  exercises().emplace_back(name, run);
  return true;
}

using Fn = std::function<Tensor(std::span<const Tensor>)>;

// f on CPU and on GPU (inputs copied), gradients w.r.t. the floating inputs.
void compare(const Fn &f, std::vector<Tensor> cpu_args, double tol = 1e-9) {
  std::vector<size_t> wrt;
  for (size_t i = 0; i < cpu_args.size(); ++i)
    if (is_floating(cpu_args[i].dtype())) wrt.push_back(i);
  std::vector<Tensor> gc(wrt.size()), gg(wrt.size());
  Tape tc;
  const Tensor vc = tc.value_and_grad(f, cpu_args, wrt, gc);
  std::vector<Tensor> gpu_args;
  for (const Tensor &t : cpu_args) gpu_args.push_back(to_device(t, cuda::device()));
  Tape tg;
  Tensor vg;
  {
    DeviceScope on_gpu(cuda::device());
    vg = tg.value_and_grad(f, gpu_args, wrt, gg);
  }
  ASSERT_EQ(&vg.device(), &cuda::device());
  const auto a = vc.to_vector(), b = vg.to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(a[i]))) << "value " << i;
  for (size_t k = 0; k < wrt.size(); ++k) {
    ASSERT_EQ(&gg[k].device(), &cuda::device());
    const auto x = gc[k].to_vector(), y = gg[k].to_vector();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(x[i], y[i], tol * (1 + std::abs(x[i])))
          << "grad of input " << wrt[k] << " at " << i;
  }
}

Tensor R(Shape s, uint64_t seed, DType dt = DType::F64, double lo = -1, double hi = 1) {
  return rand_uniform(s, seed, lo, hi, dt);
}
Tensor P(Shape s, uint64_t seed, DType dt = DType::F64) { return R(s, seed, dt, 0.5, 2.0); }

const std::vector<std::pair<Shape, Shape>> kPairs = {
    {Shape{3}, Shape{3}},          {Shape{2, 3}, Shape{3}}, {Shape{2, 1}, Shape{1, 4}},
    {Shape{4, 1, 3}, Shape{2, 1}}, {Shape{}, Shape{2, 2}},  {Shape{64, 300}, Shape{64, 300}}};

}  // namespace

// A Gpu test whose body is also listed in exercises().
#define GPU_TEST(Name)                                                     \
  static void exercise_##Name();                                           \
  static const bool listed_##Name = add_exercise(#Name, &exercise_##Name); \
  TEST_F(Gpu, Name) {                                                      \
    (void)listed_##Name;                                                   \
    exercise_##Name();                                                     \
  }                                                                        \
  static void exercise_##Name()

GPU_TEST(BinaryWithBroadcasting) {
  uint64_t s = 1;
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 2e-4;
    for (const auto &[sa, sb] : kPairs) {
      SCOPED_TRACE(sa.str() + " x " + sb.str());
      compare([](auto in) { return sum(add(in[0], in[1])); }, {R(sa, s++, dt), R(sb, s++, dt)},
              tol);
      compare([](auto in) { return sum(mul(sub(in[0], in[1]), in[0])); },
              {R(sa, s++, dt), R(sb, s++, dt)}, tol);
      compare([](auto in) { return sum(div(in[0], in[1])); }, {R(sa, s++, dt), P(sb, s++, dt)},
              tol);
      compare([](auto in) { return sum(pow(in[0], in[1])); }, {P(sa, s++, dt), R(sb, s++, dt)},
              tol);
    }
  }
}

GPU_TEST(Unary) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 2e-4;
    const Shape s{33, 17};
    compare([](auto in) { return sum(neg(in[0])); }, {R(s, 1, dt)}, tol);
    compare([](auto in) { return sum(exp(in[0])); }, {R(s, 2, dt)}, tol);
    compare([](auto in) { return sum(log(in[0])); }, {P(s, 3, dt)}, tol);
    compare([](auto in) { return sum(sqrt(in[0])); }, {P(s, 4, dt)}, tol);
    compare([](auto in) { return sum(abs(in[0])); }, {R(s, 5, dt)}, tol);
    compare([](auto in) { return sum(tanh(in[0])); }, {R(s, 6, dt)}, tol);
    compare([](auto in) { return sum(sigmoid(in[0])); }, {R(s, 7, dt)}, tol);
    compare([](auto in) { return sum(softplus(affine(in[0], 30.0, 0.0))); }, {R(s, 14, dt)}, tol);
    compare([](auto in) { return sum(relu(in[0])); }, {R(s, 8, dt)}, tol);
    compare([](auto in) { return sum(mul(sign(in[0]), step(in[0]))); }, {R(s, 9, dt)}, tol);
    compare([](auto in) { return sum(affine(in[0], -3.0, 2.0)); }, {R(s, 10, dt)}, tol);
    for (double p : {2.0, 3.0, 4.0, 1.0, 0.0, 0.5, -1.5})
      compare([p](auto in) { return sum(pow(in[0], p)); }, {P(s, 11, dt)}, tol);
    compare([](auto in) { return sum(mul(copy(in[0]), in[0])); }, {R(s, 12, dt)}, tol);
    compare([](auto in) { return sum(mul(transpose(in[0]).contiguous(), transpose(in[0]))); },
            {R(s, 13, dt)}, tol);
  }
}

// Every UNARY/BINARY row of the op table (adcore/op_table.h), value and gradient against the
// CPU, on inputs where all of them are defined: a new elementwise op is compared without an edit
// here.
GPU_TEST(EveryElementwiseRowOfTheTable) {
#define ROW_SKIP(...)
#define ROW_UNARY(n, ...) {#n, static_cast<Tensor (*)(const Tensor &)>(&adcore::n)},
#define ROW_BINARY(n, ...) \
  {#n, static_cast<Tensor (*)(const Tensor &, const Tensor &)>(&adcore::n)},
  const std::pair<const char *, Tensor (*)(const Tensor &)> unary[] = {
      ADCORE_OP_TABLE(ROW_SKIP, ROW_UNARY, ROW_SKIP)};
  const std::pair<const char *, Tensor (*)(const Tensor &, const Tensor &)> binary[] = {
      ADCORE_OP_TABLE(ROW_SKIP, ROW_SKIP, ROW_BINARY)};
#undef ROW_SKIP
#undef ROW_UNARY
#undef ROW_BINARY
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 2e-4;
    for (const auto &[name, f] : unary) {
      SCOPED_TRACE(name);
      compare([f](auto in) { return sum(f(in[0])); }, {P(Shape{33, 17}, 31, dt)}, tol);
    }
    for (const auto &[name, f] : binary) {
      SCOPED_TRACE(name);
      compare([f](auto in) { return sum(f(in[0], in[1])); },
              {P(Shape{33, 17}, 32, dt), P(Shape{17}, 33, dt)}, tol);
    }
  }
}

GPU_TEST(AddNCastAndInPlace) {
  compare([](auto in) { return sum(mul(add_n(in), in[0])); },
          {R(Shape{5, 7}, 1), R(Shape{5, 7}, 2), R(Shape{5, 7}, 3)});
  compare(
      [](auto in) {
        return sum(cast(mul(cast(in[0], DType::F32), cast(in[0], DType::F32)), DType::F64));
      },
      {R(Shape{100}, 4)}, 1e-5);
  // Integer and bool casts (no gradient: the value is compared).
  compare(
      [](auto in) {
        return sum(cast(cast(cast(affine(in[0], 10, 0), DType::I32), DType::Bool), DType::F64));
      },
      {R(Shape{64}, 5)});
  compare([](auto in) { return sum(cast(cast(affine(in[0], 1000, 0), DType::I64), DType::F64)); },
          {R(Shape{64}, 6)});
  compare(
      [](auto in) {
        Tensor t = copy(in[0]);
        NoGrad ng;
        add_inplace(t, in[1]);
        return sum(t);
      },
      {R(Shape{4, 6}, 7), R(Shape{6}, 8)});
}

GPU_TEST(Reductions) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 2e-4;
    for (const Shape &s : {Shape{2, 3, 4}, Shape{8, 300, 5}}) {
      for (std::vector<int> axes : std::vector<std::vector<int>>{{}, {0}, {1}, {-1}, {0, 2}}) {
        for (bool keep : {false, true}) {
          SCOPED_TRACE(s.str() + " " + std::to_string(axes.size()) + (keep ? " keep" : ""));
          compare([&](auto in) { return sum(mul(sum(in[0], axes, keep), sum(in[0], axes, keep))); },
                  {R(s, 1, dt)}, tol);
          compare([&](auto in) { return sum(exp(mean(in[0], axes, keep))); }, {R(s, 2, dt)}, tol);
          compare([&](auto in) { return sum(tanh(max(in[0], axes, keep))); }, {R(s, 3, dt)}, tol);
          compare([&](auto in) { return sum(tanh(logsumexp(in[0], axes, keep))); }, {R(s, 4, dt)},
                  tol);
        }
      }
    }
  }
  // Strided input (a transposed view).
  compare([](auto in) { return sum(tanh(max(transpose(in[0]), {0}))); }, {R(Shape{5, 400}, 9)});
}

GPU_TEST(MatrixProducts) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 1e-3;
    compare([](auto in) { return sum(tanh(matmul(in[0], in[1]))); },
            {R(Shape{7, 5}, 1, dt), R(Shape{5, 9}, 2, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(transpose(in[0]), in[1]))); },
            {R(Shape{5, 7}, 3, dt), R(Shape{5, 9}, 4, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(in[0], transpose(in[1])))); },
            {R(Shape{7, 5}, 5, dt), R(Shape{9, 5}, 6, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(in[0], in[1]))); },
            {R(Shape{7, 5}, 7, dt), R(Shape{5}, 8, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(in[0], in[1]))); },
            {R(Shape{5}, 9, dt), R(Shape{5, 9}, 10, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(in[0], transpose(in[1])))); },
            {R(Shape{5}, 9, dt), R(Shape{9, 5}, 10, dt)}, tol);
    compare([](auto in) { return sum(tanh(bmm(in[0], in[1]))); },
            {R(Shape{3, 4, 5}, 11, dt), R(Shape{3, 5, 6}, 12, dt)}, tol);
    compare([](auto in) { return sum(tanh(bmm(transpose(in[0], 1, 2), in[1]))); },
            {R(Shape{3, 5, 4}, 13, dt), R(Shape{3, 5, 6}, 14, dt)}, tol);
    compare([](auto in) { return tanh(dot(in[0], in[1])); },
            {R(Shape{300}, 15, dt), R(Shape{300}, 16, dt)}, tol);
    compare([](auto in) { return sum(tanh(matmul(in[0], in[1]))); },
            {R(Shape{128, 256}, 17, dt), R(Shape{256, 64}, 18, dt)}, tol * 10);
  }
}

GPU_TEST(ShapeOps) {
  compare([](auto in) { return sum(tanh(reshape(in[0], Shape{4, 6}))); }, {R(Shape{2, 3, 4}, 1)});
  compare([](auto in) { return sum(tanh(slice(in[0], 1, 1, 3))); }, {R(Shape{2, 4, 3}, 2)});
  compare(
      [](auto in) {
        const Tensor xs[2] = {in[0], in[1]};
        return sum(tanh(concat(xs, 1)));
      },
      {R(Shape{2, 3}, 3), R(Shape{2, 5}, 4)});
  compare(
      [](auto in) {
        const Tensor xs[3] = {in[0], in[1], in[0]};
        return sum(tanh(stack(xs, 1)));
      },
      {R(Shape{2, 3}, 5), R(Shape{2, 3}, 6)});
  compare(
      [](auto in) {
        return sum(tanh(mul(expand(in[0], Shape{4, 3}), in[1])));
      },
      {R(Shape{1, 3}, 7), R(Shape{4, 3}, 8)});
}

GPU_TEST(IndexingWithI32AndI64) {
  for (DType it : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(it));
    const Tensor idx1 = cast(randint(Shape{7}, 1, 5), it);
    compare([](auto in) { return sum(tanh(index_select(in[0], 0, in[1]))); },
            {R(Shape{5, 3}, 1), idx1});
    compare([](auto in) { return sum(tanh(index_select(in[0], 1, in[1]))); },
            {R(Shape{2, 5, 3}, 2), idx1});
    const Tensor idx2 = cast(randint(Shape{4, 3}, 2, 6), it);
    compare([](auto in) { return sum(tanh(gather(in[0], 1, in[1]))); }, {R(Shape{4, 6}, 3), idx2});
    const Tensor idxnd = cast(randint(Shape{9, 2}, 3, 4), it);
    compare([](auto in) { return sum(tanh(gather_nd(in[0], in[1]))); },
            {R(Shape{4, 4, 3}, 4), idxnd});
    compare([](auto in) { return sum(tanh(gather_nd(in[0], in[1]))); }, {R(Shape{4, 4}, 5), idxnd});
    compare([](auto in) { return sum(tanh(scatter_add(in[0], 1, in[1], in[2]))); },
            {R(Shape{4, 6}, 6), idx2, R(Shape{4, 3}, 7)});
  }
  // An out-of-range index is an error on the GPU too.
  DeviceScope on_gpu(cuda::device());
  const Tensor x = R(Shape{5}, 1);
  const Tensor bad = from_ints(std::vector<int64_t>{1, 7}, Shape{2});
  EXPECT_THROW(index_select(x, 0, bad), std::out_of_range);
}

GPU_TEST(NeuralNetworkOps) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-9 : 1e-3;
    compare([](auto in) { return sum(mul(softmax(in[0]), in[1])); },
            {R(Shape{4, 7}, 1, dt), R(Shape{4, 7}, 2, dt)}, tol);
    compare([](auto in) { return sum(mul(log_softmax(in[0], 0), in[1])); },
            {R(Shape{4, 7}, 3, dt), R(Shape{4, 7}, 4, dt)}, tol);
    compare([](auto in) { return sum(tanh(conv2d(in[0], in[1], 1, 1))); },
            {R(Shape{2, 3, 6, 6}, 5, dt), R(Shape{4, 3, 3, 3}, 6, dt)}, tol);
    compare([](auto in) { return sum(tanh(conv2d(in[0], in[1], 2, 0))); },
            {R(Shape{2, 2, 7, 7}, 7, dt), R(Shape{3, 2, 3, 3}, 8, dt)}, tol);
    compare([](auto in) { return sum(tanh(max_pool2d(in[0], 2))); }, {R(Shape{2, 3, 6, 6}, 9, dt)},
            tol);
    compare([](auto in) { return sum(tanh(max_pool2d(in[0], 3, 1))); },
            {R(Shape{1, 2, 5, 5}, 10, dt)}, tol);
    compare([](auto in) { return sum(tanh(avg_pool2d(in[0], 2))); }, {R(Shape{2, 3, 6, 6}, 11, dt)},
            tol);
    compare([](auto in) { return sum(tanh(avg_pool2d(in[0], 3, 1))); },
            {R(Shape{1, 2, 5, 5}, 12, dt)}, tol);
  }
  const Tensor target = randint(Shape{6}, 3, 5);
  compare([](auto in) { return cross_entropy(in[0], in[1]); }, {R(Shape{6, 5}, 13), target});
}

GPU_TEST(OptimizerUpdatesMatchTheCpu) {
  for (bool adam : {false, true}) {
    std::vector<double> result[2];
    for (int gpu = 0; gpu < 2; ++gpu) {
      Tensor w = R(Shape{50, 3}, 1);
      if (gpu) w = to_device(w, cuda::device());
      w.set_requires_grad();
      const Tensor x = gpu ? to_device(R(Shape{3, 4}, 2), cuda::device()) : R(Shape{3, 4}, 2);
      SGD sgd(0.1);
      Adam ad(0.01);
      Optimizer &opt = adam ? static_cast<Optimizer &>(ad) : sgd;
      opt.add_param(w);
      for (int s = 0; s < 3; ++s) {
        Tensor loss = sum(tanh(matmul(w, x)));
        loss.backward();
        opt.step();
      }
      result[gpu] = w.to_vector();
    }
    for (size_t i = 0; i < result[0].size(); ++i) ASSERT_NEAR(result[0][i], result[1][i], 1e-9);
  }
}

GPU_TEST(EveryPolicyCombinationGivesTheSameGradients) {
  for (int bits = 0; bits < 128; bits += 9) {
    Options o;
    o.activity_analysis = bits & 1;
    o.early_release = bits & 2;
    o.inplace_accumulation = bits & 4;
    o.fused_optimizer = bits & 8;
    o.checkpointing = bits & 16;
    o.reuse_tape = bits & 32;
    o.native_i32_indices = bits & 64;
    set_default_options(o);
    compare(
        [](auto in) {
          const std::function<Tensor(const Tensor &)> l = [](const Tensor &t) {
            return tanh(affine(t, 1.1, 0.1));
          };
          std::vector<std::function<Tensor(const Tensor &)>> layers(6, l);
          return sum(mul(checkpoint_sequential(layers, in[0]), in[0]));
        },
        {R(Shape{100}, 1)});
  }
  set_default_options(Options{});
}

// Self-contained, so it holds in any order, alone or under a filter: it runs every exercise
// above itself, with the counting shim around the CUDA column, then checks that every op with a
// CPU kernel ran on the GPU.
TEST_F(Gpu, EveryOpWithACpuKernelRunsOnTheGpu) {
  g_runs.fill(0);
  ASSERT_FALSE(exercises().empty());
  for (const auto &[name, run] : exercises()) {
    SCOPED_TRACE(name);
    run();
  }
  std::string missing;
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef &d = op_def(static_cast<OpId>(i));
    if (!d.kernel[static_cast<int>(DeviceKind::CPU)]) continue;
    if (!cuda::device().supports(static_cast<OpId>(i)))
      missing += std::string(" ") + d.name + "(no kernel)";
    else if (g_runs[static_cast<size_t>(i)] == 0)
      missing += std::string(" ") + d.name;
  }
  EXPECT_EQ(missing, "") << "ops never run on the GPU by the exercises:" << missing;
}

// No GPU needed: the CUDA column covers the CPU column.
TEST(GpuRegistry, CudaColumnCoversTheCpuColumn) {
  (void)cuda::device();  // registers the device and fills the CUDA column
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef &d = op_def(static_cast<OpId>(i));
    EXPECT_EQ(d.kernel[0] != nullptr, d.kernel[1] != nullptr) << d.name;
  }
  EXPECT_EQ(find_device("cuda"), &cuda::device());
}
