// quadform: the gradient of f(A, x) = sum_k dot(x, A_k x) with respect to x alone.
#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("quadform options");
  d.add_options()("dim", po::value<int64_t>()->default_value(500), "D, size of x")(
      "k", po::value<int>()->default_value(10), "K, number of matrices")(
      "calls", po::value<int>()->default_value(3), "gradient evaluations (each an adprof step)")(
      "active-A",
      "mark the A_k as requiring gradients (like parameters); the gradient is still "
      "asked for x only, through grad(loss, {x}) on the tape");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "quadform",
      "quadform: gradient of f(A, x) = sum_k dot(x, A_k x) w.r.t. x (D=500, K=10, f64).\n"
      "Demonstrates activity analysis (policy 1): with it, no A-sized adjoint is ever allocated\n"
      "(Zygote users report 19 MiB and 947 allocations where 40 KiB suffice); --naive or\n"
      "--no-activity-analysis computes the K dense A_k gradients (K*D*D*8 bytes) and drops them.\n"
      "--no-reuse-tape shows the per-call allocations; --no-early-release keeps the K cached\n"
      "products A_k x until the end of backward.",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t D = vm["dim"].as<int64_t>();
  const int K = vm["k"].as<int>(), calls = vm["calls"].as<int>();
  const bool active = vm.count("active-A") > 0;

  std::vector<Tensor> args = samples::quadform_args(D, K, active);
  Tape tape(c.opts);
  const size_t wrt[1] = {0};
  Tensor grads[1];
  Tensor loss;
  reset_alloc_stats();
  const auto t0 = samples::Clock::now();
  for (int i = 0; i < calls; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    if (!active) {
      loss = tape.value_and_grad(samples::quadform_f, args, wrt, grads);
    } else {
      TapeScope ts(tape);
      args[0].set_requires_grad(true);
      loss = samples::quadform_f(args);
      const Tensor x[1] = {args[0]};
      tape.gradients(loss, x, grads);
    }
  }
  const double dt = samples::seconds_since(t0) / calls;
  std::printf("quadform D=%lld K=%d A %s | policies: %s\n", static_cast<long long>(D), K,
              active ? "active (requires grad)" : "constant", samples::policies(c.opts).c_str());
  std::printf("loss = %.10g\ngrad norm = %.10g\ntime per gradient = %.3f ms\n", loss.item(),
              samples::norm(grads[0]), dt * 1e3);
  samples::print_memory("quadform");
  samples::dump(c, grads[0]);
  return 0;
}
