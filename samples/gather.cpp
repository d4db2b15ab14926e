// gather: loss = sum(x[idx] * 2.5) over 2^21 index triples into a 64^3 volume.
#include "common.h"
#include "workloads.h"

using namespace adcore;

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("gather options");
  d.add_options()("side", po::value<int64_t>()->default_value(64), "x is side^3 f32")(
      "rows", po::value<int64_t>()->default_value(int64_t{1} << 21), "number of index triples")(
      "calls", po::value<int>()->default_value(1), "gradient evaluations");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "gather",
      "gather: x of 64^3 f32, idx of 2^21 x 3 i32 index triples, loss = sum(x[idx] * 2.5),\n"
      "gradient w.r.t. x. Demonstrates native i32 indices (policy 7): --widen-indices / --naive\n"
      "copies the index array to i64 first (2^21*3*8 = 48 MiB), a duplicate of the i32 array that\n"
      "the tape then keeps until backward, as in the JAX report.",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t side = vm["side"].as<int64_t>(), rows = vm["rows"].as<int64_t>();
  const int calls = vm["calls"].as<int>();
  const std::vector<Tensor> args = samples::gather_args(side, rows, DType::I32);
  Tape tape(c.opts);
  const size_t wrt[1] = {0};
  Tensor grads[1], loss;
  reset_alloc_stats();
  for (int i = 0; i < calls; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    loss = tape.value_and_grad(samples::gather_f, args, wrt, grads);
  }
  double total = 0;
  for (double v : grads[0].to_vector()) total += v;
  std::printf("gather x=%lld^3 f32, idx=%lldx3 i32 | policies: %s\n", static_cast<long long>(side),
              static_cast<long long>(rows), samples::policies(c.opts).c_str());
  std::printf("loss = %.8g\ngrad norm = %.8g (sum of gradient %.1f = 2.5 * rows)\n", loss.item(),
              samples::norm(grads[0]), total);
  samples::print_memory("gather");
  samples::dump(c, grads[0]);
  return 0;
}
