// densenet: x_k = sum_{j<k} x_j, the README's default demo of gradient accumulation.
#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("densenet options");
  d.add_options()("n", po::value<int>()->default_value(8), "number of layers")(
      "size", po::value<int64_t>()->default_value(1 << 20), "elements per vector (f32)")(
      "calls", po::value<int>()->default_value(1), "gradient evaluations");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "densenet",
      "densenet: x_1 = x_0, x_k = x_0 + ... + x_{k-1} (k <= n), loss = sum(x_n); gradient w.r.t.\n"
      "x_0 over 1M-element f32 vectors, n = 8. Demonstrates in-place gradient accumulation\n"
      "(policy 3): adjoint x̄_j receives one contribution from every later layer. In place, about\n"
      "n+1 adjoint buffers are ever live; --naive / --no-inplace-accumulation materialises every\n"
      "contribution and sums at the end: about (n+1)^2/4 buffers live at the peak.",
      d, vm, c);
  if (rc >= 0) return rc;
  const int n = vm["n"].as<int>(), calls = vm["calls"].as<int>();
  const int64_t size = vm["size"].as<int64_t>();
  if (n < 1 || size < 1) {
    std::fprintf(stderr, "densenet: --n and --size must be positive\n");
    return 2;
  }
  Tensor x0 = rand_uniform(Shape{size}, 11, -1.0, 1.0, DType::F32).label("densenet.x0");
  const Tensor args[1] = {x0};
  Tape tape(c.opts);
  const size_t wrt[1] = {0};
  Tensor grads[1], loss;
  reset_alloc_stats();
  for (int i = 0; i < calls; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    loss = tape.value_and_grad([n](std::span<const Tensor> a) { return samples::densenet_f(a, n); },
                               args, wrt, grads);
  }
  const AllocStats &s = alloc_stats();
  const double buf = static_cast<double>(size) * 4;
  std::printf("densenet n=%d, %lld-element f32 vectors | policies: %s\n", n,
              static_cast<long long>(size), samples::policies(c.opts).c_str());
  std::printf("loss = %.8g\ngrad norm = %.8g (each element %.0f = 2^(n-1))\n", loss.item(),
              samples::norm(grads[0]), grads[0].numel() ? slice(grads[0], 0, 0, 1).item() : 0.0);
  std::printf(
      "peak gradient memory: adjoint %.1f buffers + accumulation %.1f buffers "
      "(expected about n+1 = %d in place, (n+1)^2/4 = %.1f naive)\n",
      static_cast<double>(s.peak_bytes[ADPROF_ROLE_ADJOINT]) / buf,
      static_cast<double>(s.peak_bytes[ADPROF_ROLE_ACCUMULATION]) / buf, n + 1,
      (n + 1) * (n + 1) / 4.0);
  samples::print_memory("densenet");
  samples::dump(c, grads[0]);
  return 0;
}
