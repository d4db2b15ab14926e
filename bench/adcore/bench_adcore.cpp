// adcore benchmark: time, heap allocations (counted by a malloc-family interposer in this
// binary) and adcore's peak memory per gradient, for every sample naive vs optimised (and with
// only the sample's own policy off), and eam against its hand-written gradient.
#include <adcore/adcore.h>
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <functional>

#include "../../tests/support/counting_malloc.h"
#include "workloads.h"

using namespace adcore;

namespace {

enum Variant { kOptimised = 0, kNaive = 1, kPolicyOff = 2 };

Options variant_options(int v, bool Options::*policy) {
  if (v == kNaive) return Options::naive();
  Options o;
  if (v == kPolicyOff) o.*policy = false;
  return o;
}

const char *variant_name(int v, const char *policy) {
  return v == kOptimised ? "optimised" : v == kNaive ? "naive" : policy;
}

void report(benchmark::State &st, uint64_t mallocs0) {
  const AllocStats &s = alloc_stats();
  const double it = static_cast<double>(st.iterations());
  st.counters["allocs_per_grad"] =
      static_cast<double>(adprof_support::g_heap_calls.load() - mallocs0) / it;
  st.counters["peak_MiB"] = static_cast<double>(s.peak_total) / (1 << 20);
  st.counters["adjoint_MiB"] = static_cast<double>(s.peak_bytes[ADPROF_ROLE_ADJOINT]) / (1 << 20);
  st.counters["accum_MiB"] =
      static_cast<double>(s.peak_bytes[ADPROF_ROLE_ACCUMULATION]) / (1 << 20);
  st.counters["cache_MiB"] =
      static_cast<double>(s.peak_bytes[ADPROF_ROLE_FORWARD_CACHE]) / (1 << 20);
  st.counters["dup_MiB"] = static_cast<double>(s.peak_bytes[ADPROF_ROLE_DUPLICATE]) / (1 << 20);
}

// Repeated value_and_grad of f w.r.t. args[0]; the first (warm-up) call is not timed.
void run_grad(benchmark::State &st, const Options &o,
              const std::function<Tensor(std::span<const Tensor>)> &f,
              const std::vector<Tensor> &args) {
  Tape tape(o);
  const size_t wrt[1] = {0};
  Tensor g[1];
  tape.value_and_grad(f, args, wrt, g);
  reset_alloc_stats();
  const uint64_t m0 = adprof_support::g_heap_calls.load();
  for (auto _ : st) {
    Tensor loss = tape.value_and_grad(f, args, wrt, g);
    benchmark::DoNotOptimize(loss.impl());
  }
  report(st, m0);
}

void BM_eam(benchmark::State &st) {
  const int64_t N = st.range(0);
  const int v = static_cast<int>(st.range(1));
  st.SetLabel(variant_name(v, "no-reuse-tape"));
  const std::vector<Tensor> args = {rand_uniform(Shape{N}, 5, 0, 1)};
  run_grad(st, variant_options(v, &Options::reuse_tape), samples::eam_f, args);
}

void BM_eam_hand(benchmark::State &st) {
  const int64_t N = st.range(0);
  const Tensor x = rand_uniform(Shape{N}, 5, 0, 1);
  std::vector<double> g(static_cast<size_t>(N));
  reset_alloc_stats();
  const uint64_t m0 = adprof_support::g_heap_calls.load();
  for (auto _ : st) {
    samples::eam_grad_hand(x.data<double>(), g.data(), N);
    benchmark::DoNotOptimize(g.data());
  }
  st.SetLabel("hand-written");
  report(st, m0);
}

void BM_quadform(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  st.SetLabel(variant_name(v, "no-activity-analysis"));
  run_grad(st, variant_options(v, &Options::activity_analysis), samples::quadform_f,
           samples::quadform_args(500, 10, false));
}

void BM_densenet(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  st.SetLabel(variant_name(v, "no-inplace-accumulation"));
  run_grad(st, variant_options(v, &Options::inplace_accumulation),
           [](auto in) { return samples::densenet_f(in, 8); },
           {rand_uniform(Shape{1 << 20}, 11, -1, 1, DType::F32)});
}

void BM_gather(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  st.SetLabel(variant_name(v, "widen-indices"));
  run_grad(st, variant_options(v, &Options::native_i32_indices), samples::gather_f,
           samples::gather_args(64, 1 << 21, DType::I32));
}

// One training step (forward, backward, optimizer) of the mlp.
void BM_mlp(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  const bool adam = st.range(1) != 0;
  st.SetLabel(std::string(adam ? "adam " : "sgd ") + variant_name(v, "no-fused-optimizer"));
  const Options o = variant_options(v, &Options::fused_optimizer);
  set_default_options(o);
  samples::Mlp m = samples::make_mlp(1000);
  SGD sgd(0.1);
  Adam ad(0.01);
  Optimizer &opt = adam ? static_cast<Optimizer &>(ad) : sgd;
  for (const Tensor &p : m.params()) opt.add_param(p);
  Tape::thread_default().backward(samples::mlp_loss(m, o.checkpointing), &opt);
  reset_alloc_stats();
  const uint64_t m0 = adprof_support::g_heap_calls.load();
  for (auto _ : st) Tape::thread_default().backward(samples::mlp_loss(m, o.checkpointing), &opt);
  report(st, m0);
  set_default_options(Options{});
}

// Early release and checkpointing on their test workloads.
void BM_branches(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  st.SetLabel(variant_name(v, "no-early-release"));
  const Options o = variant_options(v, &Options::early_release);
  const std::vector<Tensor> args = samples::branches_args(8, 100000);
  const std::vector<size_t> wrt = samples::branches_wrt(8);
  const auto f = samples::branches_f;
  Tape tape(o);
  std::vector<Tensor> g(wrt.size());
  tape.value_and_grad(f, args, wrt, g);
  reset_alloc_stats();
  const uint64_t m0 = adprof_support::g_heap_calls.load();
  for (auto _ : st) tape.value_and_grad(f, args, wrt, g);
  report(st, m0);
}

void BM_chain_checkpoint(benchmark::State &st) {
  const int v = static_cast<int>(st.range(0));
  st.SetLabel(variant_name(v, "no-checkpoint"));
  std::vector<std::function<Tensor(const Tensor &)>> layers;
  for (int i = 0; i < 16; ++i)
    layers.push_back([](const Tensor &t) { return tanh(affine(t, 1.1, 0.1)); });
  run_grad(st, variant_options(v, &Options::checkpointing),
           [&](auto in) { return sum(checkpoint_sequential(layers, in[0])); },
           {rand_uniform(Shape{100000}, 1, -1, 1)});
}

}  // namespace

BENCHMARK(BM_eam)->ArgsProduct({{100, 1000}, {kOptimised, kNaive}});
BENCHMARK(BM_eam_hand)->Arg(100)->Arg(1000);
BENCHMARK(BM_quadform)
    ->Arg(kOptimised)
    ->Arg(kNaive)
    ->Arg(kPolicyOff)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_densenet)
    ->Arg(kOptimised)
    ->Arg(kNaive)
    ->Arg(kPolicyOff)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gather)
    ->Arg(kOptimised)
    ->Arg(kNaive)
    ->Arg(kPolicyOff)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_mlp)
    ->ArgsProduct({{kOptimised, kNaive, kPolicyOff}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_branches)->Arg(kOptimised)->Arg(kPolicyOff)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_chain_checkpoint)->Arg(kOptimised)->Arg(kPolicyOff)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
