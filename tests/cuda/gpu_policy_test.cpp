// Each memory policy's effect on DEVICE peak memory, by role, on the seed samples' workloads run
// on the GPU; figures from the caching allocator (bytes requested by live blocks). The tape's
// arena is off except where reuse is the subject, so that freed buffers leave the device's live
// set. Also: the allocator's limit raises an out-of-memory error naming what was live.
// Skips when no CUDA device is present.
#include <adcore/adcore.h>
#include <adcore/cuda/cuda.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "workloads.h"

using namespace adcore;

namespace {

using Fn = std::function<Tensor(std::span<const Tensor>)>;

struct DevRun {
  std::vector<std::vector<double>> grads;
  devalloc::Stats stats;  // peaks over the gradient call(s)
};

Tensor gpu(const Tensor &t) { return to_device(t, cuda::device()); }

DevRun run_grad(Options o, const Fn &f, const std::vector<Tensor> &cpu_args,
                std::vector<size_t> wrt, int calls = 1, bool keep_arena = false) {
  if (!keep_arena) o.reuse_tape = false;
  DevRun r;
  DeviceScope on_gpu(cuda::device());
  std::vector<Tensor> args;
  for (const Tensor &t : cpu_args) args.push_back(gpu(t));
  {
    Tape tape(o);
    std::vector<Tensor> g(wrt.size());
    cuda::synchronize();
    cuda::allocator().reset_peaks();
    for (int i = 0; i < calls; ++i) tape.value_and_grad(f, args, wrt, g);
    r.stats = cuda::allocator().stats();
    for (const Tensor &t : g) r.grads.push_back(t.to_vector());
  }
  return r;
}

void expect_same(const DevRun &a, const DevRun &b, double tol) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t k = 0; k < a.grads.size(); ++k)
    for (size_t j = 0; j < a.grads[k].size(); ++j)
      ASSERT_NEAR(a.grads[k][j], b.grads[k][j], tol * (1 + std::abs(a.grads[k][j])));
}

uint64_t peak(const DevRun &r, adprof_role role) { return r.stats.peak_by_role.bytes[role]; }

Options with(bool Options::*field, bool on) {
  Options o;
  o.*field = on;
  return o;
}

void print(const char *what, const DevRun &on, const DevRun &off) {
  std::printf("[device peak] %-22s on %10llu B  off %10llu B  (reserved %llu / %llu)\n", what,
              static_cast<unsigned long long>(on.stats.requested_peak),
              static_cast<unsigned long long>(off.stats.requested_peak),
              static_cast<unsigned long long>(on.stats.reserved_peak),
              static_cast<unsigned long long>(off.stats.reserved_peak));
}

class GpuPolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  }
};

}  // namespace

TEST_F(GpuPolicy, ActivityAnalysisQuadform) {
  const int64_t D = 200;
  const int K = 4;
  const std::vector<Tensor> args = samples::quadform_args(D, K, false);
  const DevRun on = run_grad(Options{}, samples::quadform_f, args, {0});
  const DevRun off =
      run_grad(with(&Options::activity_analysis, false), samples::quadform_f, args, {0});
  print("activity_analysis", on, off);
  expect_same(on, off, 1e-10);
  const uint64_t a_bytes = D * D * 8;
  EXPECT_LT(peak(on, ADPROF_ROLE_ADJOINT), a_bytes);
  EXPECT_GE(peak(off, ADPROF_ROLE_ADJOINT), K * a_bytes);
  EXPECT_GT(off.stats.requested_peak, on.stats.requested_peak);
}

TEST_F(GpuPolicy, EarlyReleaseParallelBranches) {
  const int L = 6;
  const int64_t S = 20000;
  const std::vector<Tensor> args = samples::branches_args(L, S);
  const std::vector<size_t> wrt = samples::branches_wrt(L);
  const DevRun on = run_grad(Options{}, samples::branches_f, args, wrt);
  const DevRun off = run_grad(with(&Options::early_release, false), samples::branches_f, args, wrt);
  print("early_release", on, off);
  expect_same(on, off, 1e-12);
  EXPECT_EQ(peak(on, ADPROF_ROLE_FORWARD_CACHE), static_cast<uint64_t>(L * S * 8));
  EXPECT_GE(off.stats.requested_peak, on.stats.requested_peak + (L - 2) * S * 8);
}

TEST_F(GpuPolicy, InPlaceAccumulationDensenet) {
  constexpr int n = 8;  // a constant: the lambda needs no capture
  const int64_t S = 10000;
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1, DType::F32)};
  auto f = [](std::span<const Tensor> in) { return samples::densenet_f(in, n); };
  const DevRun on = run_grad(Options{}, f, args, {0});
  const DevRun off = run_grad(with(&Options::inplace_accumulation, false), f, args, {0});
  print("inplace_accumulation", on, off);
  expect_same(on, off, 1e-6);
  EXPECT_EQ(on.grads[0][0], 128.0);
  EXPECT_EQ(peak(on, ADPROF_ROLE_ACCUMULATION), 0u);
  EXPECT_GE(off.stats.peak_by_role.count[ADPROF_ROLE_ACCUMULATION],
            static_cast<uint64_t>((n + 1) * (n + 1) / 4 - 1));
  EXPECT_GT(off.stats.requested_peak, on.stats.requested_peak + 10 * S * 4);
}

TEST_F(GpuPolicy, FusedOptimizerMlp) {
  for (bool adam : {false, true}) {
    uint64_t peak_adjoint[2];
    std::vector<std::vector<double>> params[2];
    for (int fused = 0; fused < 2; ++fused) {
      Options o;
      o.fused_optimizer = fused;
      o.checkpointing = false;
      o.reuse_tape = false;
      set_default_options(o);
      DeviceScope on_gpu(cuda::device());
      samples::Mlp m = samples::make_mlp(1000);
      SGD sgd(0.1);
      Adam ad(0.01);
      Optimizer &opt = adam ? static_cast<Optimizer &>(ad) : sgd;
      for (const Tensor &p : m.params()) opt.add_param(p);
      cuda::synchronize();
      cuda::allocator().reset_peaks();
      for (int s = 0; s < 3; ++s)
        Tape::thread_default().backward(samples::mlp_loss(m, false), &opt);
      peak_adjoint[fused] = cuda::allocator().stats().peak_by_role.bytes[ADPROF_ROLE_ADJOINT];
      for (const Tensor &p : m.params()) {
        ASSERT_EQ(&p.device(), &cuda::device());
        params[fused].push_back(p.to_vector());
      }
    }
    set_default_options(Options{});
    for (size_t k = 0; k < params[0].size(); ++k)
      for (size_t j = 0; j < params[0][k].size(); ++j)
        ASSERT_NEAR(params[0][k][j], params[1][k][j], 1e-5);
    std::printf("[device peak] fused_optimizer(%s) adjoint on %llu B off %llu B\n",
                adam ? "adam" : "sgd", static_cast<unsigned long long>(peak_adjoint[1]),
                static_cast<unsigned long long>(peak_adjoint[0]));
    EXPECT_LT(peak_adjoint[1], peak_adjoint[0]) << (adam ? "adam" : "sgd");
  }
}

TEST_F(GpuPolicy, CheckpointingSqrtSchedule) {
  const int L = 16;
  const int64_t S = 20000;
  std::vector<std::function<Tensor(const Tensor &)>> layers;
  for (int i = 0; i < L; ++i)
    layers.push_back([](const Tensor &t) { return tanh(affine(t, 1.1, 0.1)); });
  auto f = [&](std::span<const Tensor> in) { return sum(checkpoint_sequential(layers, in[0])); };
  const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
  const DevRun on = run_grad(Options{}, f, args, {0});
  const DevRun off = run_grad(with(&Options::checkpointing, false), f, args, {0});
  print("checkpointing", on, off);
  expect_same(on, off, 1e-12);
  EXPECT_GE(peak(off, ADPROF_ROLE_FORWARD_CACHE), static_cast<uint64_t>(L * S * 8));
  EXPECT_LE(peak(on, ADPROF_ROLE_FORWARD_CACHE), static_cast<uint64_t>(8 * S * 8));
  EXPECT_LT(on.stats.requested_peak, off.stats.requested_peak);
}

TEST_F(GpuPolicy, ReusableTapeMakesNoDeviceAllocationsAfterTheFirstCall) {
  const std::vector<Tensor> args = {rand_uniform(Shape{1000}, 5, 0, 1)};
  DeviceScope on_gpu(cuda::device());
  const std::vector<Tensor> dargs = {gpu(args[0])};
  Tape tape;
  const size_t wrt[1] = {0};
  Tensor g[1];
  tape.value_and_grad(samples::eam_f, dargs, wrt, g);
  const uint64_t after_first = cuda::allocator().stats().alloc_calls;
  for (int i = 0; i < 20; ++i) tape.value_and_grad(samples::eam_f, dargs, wrt, g);
  EXPECT_EQ(cuda::allocator().stats().alloc_calls, after_first);
  std::vector<double> hand(1000);
  samples::eam_grad_hand(args[0].data<double>(), hand.data(), 1000);
  const auto v = g[0].to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], hand[i], 1e-9 * (1 + std::abs(hand[i])));
  // Without the policy every call allocates device blocks.
  Options o;
  o.reuse_tape = false;
  const uint64_t before = cuda::allocator().stats().alloc_calls;
  run_grad(o, samples::eam_f, args, {0}, 5);
  EXPECT_GE(cuda::allocator().stats().alloc_calls - before, 5u * 5u);
}

TEST_F(GpuPolicy, NativeI32IndicesGather) {
  const int64_t side = 16, rows = 1 << 12;
  const std::vector<Tensor> args = samples::gather_args(side, rows, DType::I32);
  const DevRun on = run_grad(Options{}, samples::gather_f, args, {0});
  const DevRun off =
      run_grad(with(&Options::native_i32_indices, false), samples::gather_f, args, {0});
  print("native_i32_indices", on, off);
  expect_same(on, off, 1e-6);
  EXPECT_EQ(peak(on, ADPROF_ROLE_DUPLICATE), 0u);
  EXPECT_GE(peak(off, ADPROF_ROLE_DUPLICATE), static_cast<uint64_t>(rows * 3 * 8));
}

TEST_F(GpuPolicy, LimitRaisesOutOfMemoryNamingWhatWasLive) {
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
