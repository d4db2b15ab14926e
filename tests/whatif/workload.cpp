// whatif_workload: workloads whose peak depends on one policy, for the what-if tests.
//   branches (default): L parallel branches sum(tanh(w_k * x)), gradient of every w_k requested;
//             each branch caches an S-element tanh output, which early release frees as soon as
//             the branch's backward rule has run.
//   --chain L: a deep stack of L layers tanh(1.1*h + 0.1) on S f64 elements, loss sum(h_L),
//             gradient w.r.t. the input. Plain layers (every tanh output cached until its rule
//             runs) unless --checkpoint, which runs the stack through checkpoint_sequential with
//             the default sqrt(L) schedule (--segments N to force N segments).
// Takes the samples' policy switches (--naive, --no-early-release, --no-checkpoint, ...).
#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("whatif_workload options");
  d.add_options()("branches", po::value<int>()->default_value(8), "L, parallel branches")(
      "size", po::value<int64_t>()->default_value(100000), "S, elements per branch/layer (f64)")(
      "chain", po::value<int>()->default_value(0), "L > 0: a chain of L layers instead")(
      "checkpoint", "run the chain through checkpoint_sequential")(
      "segments", po::value<int>()->default_value(0),
      "checkpoint_sequential's segments (0: sqrt(L))");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "whatif_workload",
      "whatif_workload: L parallel branches sum(tanh(w_k * x)), or (--chain L) a stack of L "
      "tanh layers, plain or (--checkpoint) through checkpoint_sequential.",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t S = vm["size"].as<int64_t>();
  const int chain = vm["chain"].as<int>();
  if (chain > 0) {
    const bool ckpt = vm.count("checkpoint") > 0;
    const int segments = vm["segments"].as<int>();
    std::vector<std::function<Tensor(const Tensor &)>> layers;
    for (int i = 0; i < chain; ++i)
      layers.push_back([](const Tensor &t) { return tanh(affine(t, 1.1, 0.1)); });
    auto f = [&](std::span<const Tensor> in) {
      if (ckpt) return sum(checkpoint_sequential(layers, in[0], segments));
      Tensor h = in[0];
      for (const auto &layer : layers) h = layer(h);
      return sum(h);
    };
    const std::vector<Tensor> args = {rand_uniform(Shape{S}, 1, -1, 1)};
    const size_t wrt[1] = {0};
    Tensor g[1];
    Tape tape(c.opts);
    adprof_step(0);
    const Tensor loss = tape.value_and_grad(f, args, wrt, g);
    std::printf("chain L=%d S=%lld %s| policies: %s\nloss = %.10g\n", chain,
                static_cast<long long>(S), ckpt ? "checkpoint_sequential " : "",
                samples::policies(c.opts).c_str(), loss.item());
    if (!c.quiet) samples::print_memory("whatif_workload");
    return 0;
  }
  const int L = vm["branches"].as<int>();
  const std::vector<Tensor> args = samples::branches_args(L, S);
  const std::vector<size_t> wrt = samples::branches_wrt(L);
  Tape tape(c.opts);
  std::vector<Tensor> grads(wrt.size());
  adprof_step(0);
  const Tensor loss = tape.value_and_grad(samples::branches_f, args, wrt, grads);
  std::printf("branches L=%d S=%lld | policies: %s\nloss = %.10g\n", L, static_cast<long long>(S),
              samples::policies(c.opts).c_str(), loss.item());
  if (!c.quiet) samples::print_memory("whatif_workload");
  return 0;
}
