// Gradient time and peak memory, CPU versus GPU, for the sample workloads. The peak on both
// devices is adcore's peak of live storages above what was live before the timed calls (the
// same counters, whatever the device: the tape's arena holds the buffers from the warm-up call,
// so the figure shows what a call adds beside them); the GPU's reserved figure is the caching
// allocator's peak reserved from the driver (whole process). The allocator's own "requested"
// counts the arena's idle buffers as handed out, so its peak above the baseline read 0 for
// every workload on the H200. Usage: bench_cuda [--json FILE] [--reps N]
#include <adcore/adcore.h>
#include <adcore/cuda/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "workloads.h"

using namespace adcore;
using Fn = std::function<Tensor(std::span<const Tensor>)>;

namespace {

struct Case {
  const char *name;
  Fn f;
  std::vector<Tensor> args;  // on the CPU
  std::vector<size_t> wrt;
};

struct Result {
  double ms = 0;
  uint64_t peak = 0, reserved = 0;
};

Result measure(const Case &c, bool gpu, int reps) {
  Result r;
  std::vector<Tensor> args;
  for (const Tensor &t : c.args) args.push_back(gpu ? to_device(t, cuda::device()) : t);
  DeviceScope scope(gpu ? cuda::device() : cpu());
  Tape tape;
  std::vector<Tensor> g(c.wrt.size());
  tape.value_and_grad(c.f, args, c.wrt, g);  // warm-up (and the tape's arena)
  if (gpu) {
    cuda::synchronize();
    cuda::allocator().reset_peaks();
  }
  reset_peaks();
  const uint64_t base = static_cast<uint64_t>(alloc_stats().live_total);  // other cases' inputs
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    tape.value_and_grad(c.f, args, c.wrt, g);
    if (gpu) cuda::synchronize();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  r.ms = times[times.size() / 2];
  r.peak = static_cast<uint64_t>(alloc_stats().peak_total) - base;
  if (gpu) r.reserved = cuda::allocator().stats().reserved_peak;
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  std::string json;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  const bool have_gpu = cuda::available();
  if (!have_gpu)
    std::printf("no CUDA device: %s (CPU figures only)\n", cuda::unavailable_reason().c_str());
  samples::Mlp m = samples::make_mlp(4096);
  std::vector<Case> cases;
  {
    std::vector<Tensor> qa = samples::quadform_args(1024, 8, false);
    cases.push_back({"quadform D=1024 K=8", samples::quadform_f, qa, {0}});
  }
  cases.push_back({"densenet n=32 S=1e5",
                   [](std::span<const Tensor> in) { return samples::densenet_f(in, 32); },
                   {rand_uniform(Shape{100000}, 1, -1, 1, DType::F32)},
                   {0}});
  cases.push_back({"eam N=1e6", samples::eam_f, {rand_uniform(Shape{1000000}, 5, 0, 1)}, {0}});
  cases.push_back({"mlp batch=4096",
                   [&m](std::span<const Tensor> in) {
                     samples::Mlp mm = m;
                     mm.W1 = in[0];
                     mm.b1 = in[1];
                     mm.W2 = in[2];
                     mm.b2 = in[3];
                     mm.W3 = in[4];
                     mm.b3 = in[5];
                     mm.x = in[6];
                     mm.y = in[7];
                     return samples::mlp_loss(mm, false);
                   },
                   {m.W1, m.b1, m.W2, m.b2, m.W3, m.b3, m.x, m.y},
                   {0, 1, 2, 3, 4, 5}});
  cases.push_back({"gather side=64 rows=2^18",
                   samples::gather_f,
                   samples::gather_args(64, 1 << 18, DType::I32),
                   {0}});

  FILE *jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  std::printf("%-26s %12s %14s | %12s %14s %14s\n", "workload", "cpu ms", "cpu peak B", "gpu ms",
              "gpu peak B", "gpu reserved B");
  for (const Case &c : cases) {
    const Result cpu_r = measure(c, false, reps);
    Result gpu_r;
    if (have_gpu) gpu_r = measure(c, true, reps);
    std::printf("%-26s %12.3f %14llu | %12.3f %14llu %14llu\n", c.name, cpu_r.ms,
                static_cast<unsigned long long>(cpu_r.peak), gpu_r.ms,
                static_cast<unsigned long long>(gpu_r.peak),
                static_cast<unsigned long long>(gpu_r.reserved));
    if (jf)
      std::fprintf(
          jf,
          "{\"workload\":\"%s\",\"cpu_ms\":%.4f,\"cpu_peak\":%llu,\"gpu\":%s,\"gpu_ms\":%.4f,"
          "\"gpu_peak\":%llu,\"gpu_reserved_peak\":%llu}\n",
          c.name, cpu_r.ms, static_cast<unsigned long long>(cpu_r.peak),
          have_gpu ? "true" : "false", gpu_r.ms, static_cast<unsigned long long>(gpu_r.peak),
          static_cast<unsigned long long>(gpu_r.reserved));
  }
  if (jf) std::fclose(jf);
  return 0;
}
