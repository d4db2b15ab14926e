// eam: a small scalar function of a vector, its AD gradient called many times in a loop, beside
// a hand-written gradient.
#include <algorithm>
#include <vector>

#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("eam options");
  d.add_options()("n", po::value<int64_t>()->default_value(100), "N, size of x (100 or 1000)")(
      "calls,repeat", po::value<int>()->default_value(20000),
      "gradient evaluations in the loop (each an adprof step)")(
      "no-hand", "skip the hand-written gradient loop");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "eam",
      "eam: rho = sum(exp(-3(x+1))), f = rho^2 + rho^3 + rho^4/4 (f64), its gradient evaluated\n"
      "--calls times in a loop, then a hand-written gradient for comparison. Demonstrates the\n"
      "reusable tape and arena (policy 6): from the second call on, the AD gradient makes no heap\n"
      "allocation and is replayed from the plan the first call recorded (--no-reuse-tape / "
      "--naive:\n"
      "every call allocates its buffers afresh). Under the profiler every call takes the normal "
      "path.",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t N = vm["n"].as<int64_t>();
  const int calls = std::max(1, vm["calls"].as<int>());
  Tensor x = rand_uniform(Shape{N}, 5, 0.0, 1.0, DType::F64).label("eam.x");
  const Tensor args[1] = {x};
  Tape tape(c.opts);
  const size_t wrt[1] = {0};
  Tensor grads[1], loss;
  reset_alloc_stats();
  uint64_t allocs_after_first = 0;
  const auto t0 = samples::Clock::now();
  for (int i = 0; i < calls; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    loss = tape.value_and_grad(samples::eam_f, args, wrt, grads);
    if (i == 0) allocs_after_first = alloc_stats().heap_allocs;
  }
  const double t_ad = samples::seconds_since(t0) / calls;
  const uint64_t later = alloc_stats().heap_allocs - allocs_after_first;
  std::printf("eam N=%lld, %d calls | policies: %s\n", static_cast<long long>(N), calls,
              samples::policies(c.opts).c_str());
  std::printf("loss = %.12g\ngrad norm = %.12g\n", loss.item(), samples::norm(grads[0]));
  std::printf(
      "AD gradient:          %.3f us per call, %.2f storage allocations per call after "
      "the first, %llu of %d calls replayed from the tape's plan\n",
      t_ad * 1e6, calls > 1 ? static_cast<double>(later) / (calls - 1) : 0.0,
      static_cast<unsigned long long>(tape.replayed_calls()), calls);
  if (!vm.count("no-hand")) {
    std::vector<double> g(static_cast<size_t>(N));
    const double *px = x.data<double>();
    const auto t1 = samples::Clock::now();
    for (int i = 0; i < calls; ++i) samples::eam_grad_hand(px, g.data(), N);
    const double t_hand = samples::seconds_since(t1) / calls;
    double diff = 0;
    const double *pg = grads[0].data<double>();
    for (int64_t i = 0; i < N; ++i)
      diff = std::max(diff, std::abs(g[static_cast<size_t>(i)] - pg[i]));
    std::printf("hand-written gradient: %.3f us per call, 0 allocations per call\n", t_hand * 1e6);
    std::printf("AD / hand-written time = %.2fx, max |difference| = %.3g\n", t_ad / t_hand, diff);
  }
  samples::print_memory("eam");
  samples::dump(c, grads[0]);
  return 0;
}
