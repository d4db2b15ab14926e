// mlp: a small tanh network trained a few steps with SGD and with Adam.
#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("mlp options");
  d.add_options()("batch", po::value<int64_t>()->default_value(1000), "batch size")(
      "steps", po::value<int>()->default_value(5), "training steps per optimizer")(
      "optimizer", po::value<std::string>()->default_value("both"), "sgd, adam or both");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "mlp",
      "mlp: 1 -> 16 -> 16 -> 1 tanh network, f32, batch 1000, trained a few steps with SGD and\n"
      "with Adam. Demonstrates the fused optimizer step (policy 4): each parameter is updated and\n"
      "its gradient freed as soon as its adjoint is complete, inside backward\n"
      "(--no-fused-optimizer: all gradients live until the step after backward), and\n"
      "checkpointing (policy 5): each hidden layer is a checkpoint segment whose activations are\n"
      "recomputed in backward (--no-checkpoint keeps them as forward caches).",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t batch = vm["batch"].as<int64_t>();
  const int steps = vm["steps"].as<int>();
  const std::string which = vm["optimizer"].as<std::string>();
  if (which != "sgd" && which != "adam" && which != "both") {
    std::fprintf(stderr, "mlp: --optimizer must be sgd, adam or both\n");
    return 2;
  }
  std::printf("mlp batch=%lld steps=%d | policies: %s\n", static_cast<long long>(batch), steps,
              samples::policies(c.opts).c_str());
  Tape &tape = Tape::thread_default();
  {  // gradient at the initial point (for --dump-grad and the gradient norm)
    samples::Mlp m = samples::make_mlp(batch);
    const Tensor loss = samples::mlp_loss(m, c.opts.checkpointing);
    const Tensor all = samples::flat_gradient(loss, m.params());
    std::printf("initial loss = %.8g\ngrad norm = %.8g\n", loss.item(), samples::norm(all));
    samples::dump(c, all);
  }
  reset_alloc_stats();
  uint64_t step_no = 0;
  for (const char *name : {"sgd", "adam"}) {
    if (which != "both" && which != name) continue;
    samples::Mlp m = samples::make_mlp(batch);
    SGD sgd(0.1);
    Adam adam(0.01);
    Optimizer &opt = std::string(name) == "sgd" ? static_cast<Optimizer &>(sgd) : adam;
    for (const Tensor &p : m.params()) opt.add_param(p);
    Tensor loss;
    for (int s = 0; s < steps; ++s) {
      adprof_step(step_no++);
      loss = samples::mlp_loss(m, c.opts.checkpointing);
      if (!c.quiet) std::printf("  %s step %d loss = %.8g\n", name, s, loss.item());
      tape.backward(loss, &opt);
    }
    NoGrad ng;
    std::printf("%s final loss = %.8g\n", name, samples::mlp_loss(m, false).item());
  }
  samples::print_memory("mlp");
  return 0;
}
