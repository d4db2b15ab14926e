// Each memory policy on each device: the same gradients on and off, and its memory effect
// asserted from the device's own counters on the sample workloads: adcore's allocator counters
// (allocations and peak by role) on the CPU, the caching allocator's on a GPU (bytes requested
// by live blocks). The CPU runs always; CUDA where the tests are built with the CUDA parts
// (ADCORE_TEST_CUDA: nvcc was found), skipped with the reason when no GPU is usable. On the GPU
// the tape's arena is off except where reuse is the subject, so that freed buffers leave the
// device's live set; there the allocator's limit also raises an out-of-memory error naming what
// was live. scripts/gpu-check.sh runs the CUDA ones: --gtest_filter='*/cuda:AdcorePolicyCuda.*'.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>

#include "workloads.h"
#ifdef ADCORE_TEST_CUDA
#include <adcore/cuda/cuda.h>
#endif

using namespace adcore;

namespace {

using Fn = std::function<Tensor(std::span<const Tensor>)>;

enum class Where { kCpu, kCuda };
void PrintTo(Where where, std::ostream *out) { *out << (where == Where::kCpu ? "cpu" : "cuda"); }

// What a run left in the device's counters.
struct Memory {
  std::array<uint64_t, ADPROF_ROLE_COUNT> peak_bytes{}, peak_count{};
  uint64_t peak_total = 0;     // CPU: adcore's live tensor bytes; CUDA: bytes requested, live
  uint64_t reserved_peak = 0;  // CUDA: bytes of segments held
  uint64_t allocations = 0;    // CPU: heap allocations; CUDA: the allocator's calls
  std::array<uint64_t, ADPROF_ROLE_COUNT> allocs{};  // CPU: storages created by role
};

struct GradRun {
  std::vector<std::vector<double>> grads;
  Memory memory;
};

Options with(bool Options::*field, bool on) {
  Options o;
  o.*field = on;
  return o;
}

void expect_same(const GradRun &a, const GradRun &b, double tol) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t k = 0; k < a.grads.size(); ++k) {
    ASSERT_EQ(a.grads[k].size(), b.grads[k].size());
    for (size_t j = 0; j < a.grads[k].size(); ++j)
      ASSERT_NEAR(a.grads[k][j], b.grads[k][j], tol * (1 + std::abs(a.grads[k][j])));
  }
}

class Policy : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    if (!gpu()) return;
#ifdef ADCORE_TEST_CUDA
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
#else
    GTEST_SKIP() << "built without the CUDA parts (no nvcc at configure time)";
#endif
  }

  bool gpu() const { return GetParam() == Where::kCuda; }

  Device &device() const {
#ifdef ADCORE_TEST_CUDA
    if (gpu()) return cuda::device();
#endif
    return cpu();
  }

  // The device's allocation counter, cumulative.
  uint64_t allocation_calls() const {
#ifdef ADCORE_TEST_CUDA
    if (gpu()) return cuda::allocator().stats().alloc_calls;
#endif
    return alloc_stats().heap_allocs;
  }

  // The peaks start again from what is live now.
  void reset_peaks() const {
#ifdef ADCORE_TEST_CUDA
    if (gpu()) {
      cuda::synchronize();
      cuda::allocator().reset_peaks();
      return;
    }
#endif
    reset_alloc_stats();
  }

  // The peaks since reset_peaks(); `allocations` counts from `calls_before`.
  Memory memory(uint64_t calls_before) const {
    Memory m;
#ifdef ADCORE_TEST_CUDA
    if (gpu()) {
      const devalloc::Stats s = cuda::allocator().stats();
      for (int r = 0; r < ADPROF_ROLE_COUNT; ++r) {
        m.peak_bytes[r] = s.peak_by_role.bytes[r];
        m.peak_count[r] = s.peak_by_role.count[r];
      }
      m.peak_total = s.requested_peak;
      m.reserved_peak = s.reserved_peak;
      m.allocations = s.alloc_calls - calls_before;
      return m;
    }
#endif
    const AllocStats &s = alloc_stats();
    for (int r = 0; r < ADPROF_ROLE_COUNT; ++r) {
      m.peak_bytes[r] = static_cast<uint64_t>(s.peak_bytes[r]);
      m.peak_count[r] = static_cast<uint64_t>(s.peak_count[r]);
      m.allocs[r] = s.allocs[r];
    }
    m.peak_total = static_cast<uint64_t>(s.peak_total);
    m.allocations = s.heap_allocs - calls_before;
    return m;
  }

  // Options as the device's runs take them: no arena on the GPU.
  Options on_device(Options o) const {
    if (gpu()) o.reuse_tape = false;
    return o;
  }

  // CPU tensors where the run takes place (copies on the GPU; the same tensors on the CPU).
  std::vector<Tensor> place(const std::vector<Tensor> &cpu_args) const {
    if (!gpu()) return cpu_args;
    std::vector<Tensor> out;
    for (const Tensor &t : cpu_args) out.push_back(to_device(t, device()));
    return out;
  }

  // `calls` gradient calls of f on one tape; the gradients of the last and the run's memory.
  GradRun run_grad(const Options &o, const Fn &f, const std::vector<Tensor> &cpu_args,
                   std::vector<size_t> wrt, int calls = 1) const {
    GradRun r;
    const uint64_t calls_before = allocation_calls();  // on the GPU, the copies' count too
    DeviceScope on(device());
    const std::vector<Tensor> args = place(cpu_args);
    Tape tape(on_device(o));
    std::vector<Tensor> g(wrt.size());
    reset_peaks();  // on the CPU, the allocation count too
    for (int i = 0; i < calls; ++i) tape.value_and_grad(f, args, wrt, g);
    r.memory = memory(gpu() ? calls_before : 0);
    for (const Tensor &t : g) r.grads.push_back(t.to_vector());
    return r;
  }

  // The GPU's figures on the test's output, for scripts/gpu-check.sh's log.
  void print(const char *what, const GradRun &on, const GradRun &off) const {
    if (!gpu()) return;
    std::printf("[device peak] %-22s on %10llu B  off %10llu B  (reserved %llu / %llu)\n", what,
                static_cast<unsigned long long>(on.memory.peak_total),
                static_cast<unsigned long long>(off.memory.peak_total),
                static_cast<unsigned long long>(on.memory.reserved_peak),
                static_cast<unsigned long long>(off.memory.reserved_peak));
  }
};

}  // namespace

TEST_P(Policy, ActivityAnalysisQuadformHasNoASizedAdjoint) {
  const int64_t D = 200;
  const int K = 4;
  const std::vector<bool> active =
      gpu() ? std::vector<bool>{false} : std::vector<bool>{false, true};
  for (bool active_A : active) {
    const std::vector<Tensor> args = samples::quadform_args(D, K, active_A);
    const GradRun on = run_grad(Options{}, samples::quadform_f, args, {0});
    const GradRun off =
        run_grad(with(&Options::activity_analysis, false), samples::quadform_f, args, {0});
    print("activity_analysis", on, off);
    expect_same(on, off, 1e-10);
    const uint64_t a_bytes = D * D * 8;
    EXPECT_LT(on.memory.peak_bytes[ADPROF_ROLE_ADJOINT], a_bytes);
    if (!gpu()) {
      EXPECT_EQ(on.memory.peak_bytes[ADPROF_ROLE_ACCUMULATION], 0u);
    }
    // Without it: every A_k gets its (dropped) gradient, K A-sized adjoints live at once.
    EXPECT_GE(off.memory.peak_bytes[ADPROF_ROLE_ADJOINT], K * a_bytes);
    if (gpu()) {
      EXPECT_GT(off.memory.peak_total, on.memory.peak_total);
    }
  }
}

TEST_P(Policy, EarlyReleaseFreesCachesAtLastBackwardUse) {
  // L parallel branches sum(tanh(w_k * x)): each caches an S-element tanh output; the gradient
  // of every w_k is requested. Released early, branch k's cache dies as w_k's gradient appears.
  const int L = 6;
  const int64_t S = 20000;
  const std::vector<Tensor> args = samples::branches_args(L, S);
  const std::vector<size_t> wrt = samples::branches_wrt(L);
  const GradRun on = run_grad(Options{}, samples::branches_f, args, wrt);
  const GradRun off =
      run_grad(with(&Options::early_release, false), samples::branches_f, args, wrt);
  print("early_release", on, off);
  expect_same(on, off, 1e-12);
  EXPECT_EQ(on.memory.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], static_cast<uint64_t>(L * S * 8));
  EXPECT_GE(off.memory.peak_total, on.memory.peak_total + (L - 2) * S * 8);
}

TEST_P(Policy, InPlaceAccumulationDensenet) {
  constexpr int n = 8;  // a constant: the lambda needs no capture
  const int64_t S = 10000;
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1, DType::F32)};
  auto f = [](std::span<const Tensor> in) { return samples::densenet_f(in, n); };
  const GradRun on = run_grad(Options{}, f, args, {0});
  const GradRun off = run_grad(with(&Options::inplace_accumulation, false), f, args, {0});
  print("inplace_accumulation", on, off);
  expect_same(on, off, 1e-6);
  EXPECT_EQ(on.grads[0][0], 128.0);
  if (gpu()) {
    EXPECT_EQ(on.memory.peak_bytes[ADPROF_ROLE_ACCUMULATION], 0u);
  } else {
    // In place: at most n+1 adjoint buffers, no accumulation buffers.
    EXPECT_LE(on.memory.peak_count[ADPROF_ROLE_ADJOINT], static_cast<uint64_t>(n + 1));
    EXPECT_EQ(on.memory.allocs[ADPROF_ROLE_ACCUMULATION], 0u);
  }
  // Materialised: about (n+1)^2/4 = 20 contributions pending at the peak.
  EXPECT_GE(off.memory.peak_count[ADPROF_ROLE_ACCUMULATION],
            static_cast<uint64_t>((n + 1) * (n + 1) / 4 - 1));
  EXPECT_GT(off.memory.peak_total, on.memory.peak_total + 10 * S * 4);
}

TEST_P(Policy, FusedOptimizerFreesGradientsInBackward) {
  for (bool adam : {false, true}) {
    std::vector<std::vector<double>> params[2];
    uint64_t peak_adjoint[2];
    for (int fused = 0; fused < 2; ++fused) {
      Options o;
      o.fused_optimizer = fused;
      o.checkpointing = false;
      set_default_options(on_device(o));
      DeviceScope on(device());
      samples::Mlp m = samples::make_mlp(1000);
      SGD sgd(0.1);
      Adam ad(0.01);
      Optimizer &opt = adam ? static_cast<Optimizer &>(ad) : sgd;
      for (const Tensor &p : m.params()) opt.add_param(p);
      reset_peaks();
      for (int s = 0; s < 3; ++s)
        Tape::thread_default().backward(samples::mlp_loss(m, false), &opt);
      peak_adjoint[fused] = memory(0).peak_bytes[ADPROF_ROLE_ADJOINT];
      for (const Tensor &p : m.params()) {
        if (gpu()) {
          ASSERT_EQ(&p.device(), &device());
        } else {
          EXPECT_FALSE(p.grad().defined());
        }
        params[fused].push_back(p.to_vector());
      }
    }
    set_default_options(Options{});
    for (size_t k = 0; k < params[0].size(); ++k)
      for (size_t j = 0; j < params[0][k].size(); ++j)
        ASSERT_NEAR(params[0][k][j], params[1][k][j], 1e-5);
    if (gpu())
      std::printf("[device peak] fused_optimizer(%s) adjoint on %llu B off %llu B\n",
                  adam ? "adam" : "sgd", static_cast<unsigned long long>(peak_adjoint[1]),
                  static_cast<unsigned long long>(peak_adjoint[0]));
    EXPECT_LT(peak_adjoint[1], peak_adjoint[0]) << (adam ? "adam" : "sgd");
  }
}

TEST_P(Policy, CheckpointingSqrtScheduleCutsForwardCaches) {
  const int L = 16;
  const int64_t S = 20000;
  std::vector<std::function<Tensor(const Tensor &)>> layers;
  for (int i = 0; i < L; ++i)
    layers.push_back([](const Tensor &t) { return tanh(affine(t, 1.1, 0.1)); });
  auto f = [&](std::span<const Tensor> in) { return sum(checkpoint_sequential(layers, in[0])); };
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
  const GradRun on = run_grad(Options{}, f, args, {0});
  const GradRun off = run_grad(with(&Options::checkpointing, false), f, args, {0});
  print("checkpointing", on, off);
  expect_same(on, off, 1e-12);
  EXPECT_GE(off.memory.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], static_cast<uint64_t>(L * S * 8));
  // sqrt(16) = 4 segments: 3 boundary caches + one recomputed segment of 4 layers.
  EXPECT_LE(on.memory.peak_bytes[ADPROF_ROLE_FORWARD_CACHE], static_cast<uint64_t>(8 * S * 8));
  if (gpu()) {
    EXPECT_LT(on.memory.peak_total, off.memory.peak_total);
  }
}

TEST_P(Policy, ReusableTapeMakesNoAllocationsAfterTheFirstCall) {
  const std::vector<int64_t> sizes =
      gpu() ? std::vector<int64_t>{1000} : std::vector<int64_t>{100, 1000};
  const int reuse_calls = gpu() ? 20 : 50, naive_calls = gpu() ? 5 : 10;
  for (int64_t N : sizes) {
    const std::vector<Tensor> args = {rand_uniform(Shape{N}, 5, 0, 1)};
    {
      DeviceScope on(device());
      const std::vector<Tensor> placed = place(args);
      Tape tape;
      const size_t wrt[1] = {0};
      Tensor g[1];
      tape.value_and_grad(samples::eam_f, placed, wrt, g);
      const uint64_t after_first = allocation_calls();
      for (int i = 0; i < reuse_calls; ++i) tape.value_and_grad(samples::eam_f, placed, wrt, g);
      EXPECT_EQ(allocation_calls(), after_first);
      std::vector<double> hand(static_cast<size_t>(N));
      samples::eam_grad_hand(args[0].data<double>(), hand.data(), N);
      const auto v = g[0].to_vector();
      for (size_t i = 0; i < v.size(); ++i)
        EXPECT_NEAR(v[i], hand[i], 1e-9 * (1 + std::abs(hand[i])));
    }
    // Without the policy every call allocates afresh.
    const GradRun naive =
        run_grad(with(&Options::reuse_tape, false), samples::eam_f, args, {0}, naive_calls);
    EXPECT_GE(naive.memory.allocations, static_cast<uint64_t>(naive_calls * naive_calls));
  }
}

TEST_P(Policy, NativeI32IndicesMakeNoWideningDuplicate) {
  const int64_t side = 16, rows = 1 << 12;
  const std::vector<Tensor> args = samples::gather_args(side, rows, DType::I32);
  const GradRun on = run_grad(Options{}, samples::gather_f, args, {0});
  const GradRun off =
      run_grad(with(&Options::native_i32_indices, false), samples::gather_f, args, {0});
  print("native_i32_indices", on, off);
  expect_same(on, off, 1e-6);
  if (gpu()) {
    EXPECT_EQ(on.memory.peak_bytes[ADPROF_ROLE_DUPLICATE], 0u);
  } else {
    EXPECT_EQ(on.memory.allocs[ADPROF_ROLE_DUPLICATE], 0u);
  }
  EXPECT_GE(off.memory.peak_bytes[ADPROF_ROLE_DUPLICATE], static_cast<uint64_t>(rows * 3 * 8));
  if (!gpu()) {
    double total = 0;
    for (double v : on.grads[0]) total += v;
    EXPECT_NEAR(total, 2.5 * rows, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Policy, ::testing::Values(Where::kCpu, Where::kCuda),
                         [](const ::testing::TestParamInfo<Where> &info) {
                           return std::string(info.param == Where::kCpu ? "cpu" : "cuda");
                         });

TEST(AdcorePolicy, NaiveAndOptimisedAgreeOnEverySample) {
  struct Case {
    const char *name;
    Fn f;
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
    Tape on, naive(Options::naive());
    std::vector<Tensor> g_on(1), g_naive(1);
    const size_t wrt[1] = {0};
    on.value_and_grad(c.f, c.args, wrt, g_on);
    naive.value_and_grad(c.f, c.args, wrt, g_naive);
    const auto a = g_on[0].to_vector(), b = g_naive[0].to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], c.tol * (1 + std::abs(a[j])));
  }
}

#ifdef ADCORE_TEST_CUDA
TEST(AdcorePolicyCuda, LimitRaisesOutOfMemoryNamingWhatWasLive) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  DeviceScope on_gpu(cuda::device());
  cuda::synchronize();
  cuda::allocator().empty_cache();
  const uint64_t reserved = cuda::allocator().stats().reserved;
  cuda::set_memory_limit(reserved + 64 * devalloc::kMiB);
  Tensor keep = zeros(Shape{6 * 1024 * 1024}, DType::F64, ADPROF_ROLE_ACTIVATION);  // 48 MiB
  try {
    Tensor big = zeros(Shape{4 * 1024 * 1024}, DType::F64, ADPROF_ROLE_FORWARD_CACHE);  // 32 MiB
    FAIL() << "expected an out-of-memory error";
  } catch (const devalloc::OutOfMemory &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device out of memory on cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 32.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("activation 48.00 MiB"), std::string::npos) << m;
  }
  keep = Tensor();
  cuda::set_memory_limit(0);
  Tensor ok = zeros(Shape{4 * 1024 * 1024}, DType::F64);
  EXPECT_EQ(&ok.device(), &cuda::device());
}
#endif
