// whatif_workload: a workload whose peak depends on early release, for the what-if tests.
//   branches: L parallel branches sum(tanh(w_k * x)), gradient of every w_k requested; each
//             branch caches an S-element tanh output, which early release frees as soon as the
//             branch's backward rule has run.
// Takes the samples' policy switches (--naive, --no-early-release, ...).
#include "common.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("whatif_workload options");
  d.add_options()("branches", po::value<int>()->default_value(8), "L, parallel branches")(
      "size", po::value<int64_t>()->default_value(100000), "S, elements per branch (f64)");
  po::variables_map vm;
  samples::Common c;
  const int rc =
      samples::parse(argc, argv, "whatif_workload",
                     "whatif_workload: L parallel branches sum(tanh(w_k * x)).", d, vm, c);
  if (rc >= 0) return rc;
  const int L = vm["branches"].as<int>();
  const int64_t S = vm["size"].as<int64_t>();
  std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
  std::vector<size_t> wrt;
  for (int k = 0; k < L; ++k) {
    args.push_back(rand_uniform(Shape{S}, 10 + static_cast<uint64_t>(k), -1, 1));
    wrt.push_back(static_cast<size_t>(k) + 1);
  }
  auto f = [](std::span<const Tensor> in) {
    std::vector<Tensor> parts;
    for (size_t k = 1; k < in.size(); ++k) parts.push_back(sum(tanh(mul(in[k], in[0]))));
    return add_n(parts);
  };
  Tape tape(c.opts);
  std::vector<Tensor> grads(wrt.size());
  adprof_step(0);
  const Tensor loss = tape.value_and_grad(f, args, wrt, grads);
  std::printf("branches L=%d S=%lld | policies: %s\nloss = %.10g\n", L, static_cast<long long>(S),
              samples::policies(c.opts).c_str(), loss.item());
  if (!c.quiet) samples::print_memory("whatif_workload");
  return 0;
}
