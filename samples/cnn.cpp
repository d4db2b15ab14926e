// cnn: a small convolutional network trained with Adam on Fashion-MNIST (Debian package
// dataset-fashion-mnist): conv 1->8 3x3, relu, max-pool 2, conv 8->16 3x3, relu, max-pool 2,
// linear 400->10, cross-entropy. Prints the loss, the test accuracy and adcore's peaks by role.
#include <algorithm>
#include <numeric>
#include <random>

#include "common.h"
#include "idx_loader.h"
#include "training.h"

using namespace adcore;

namespace {

struct Cnn {
  Tensor w1, b1, w2, b2, w3, b3;
  std::vector<Tensor> params() const { return {w1, b1, w2, b2, w3, b3}; }
};

Tensor he_uniform(const Shape &s, int64_t fan_in, uint64_t seed, const char *label) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in));
  Tensor t = rand_uniform(s, seed, -bound, bound, DType::F32, ADPROF_ROLE_PARAMETER);
  t.set_requires_grad(true);
  t.label(label);
  return t;
}

Tensor zero_param(const Shape &s, const char *label) {
  Tensor t = zeros(s, DType::F32, ADPROF_ROLE_PARAMETER);
  t.set_requires_grad(true);
  t.label(label);
  return t;
}

Cnn make_cnn(int c1, int c2, uint64_t seed) {
  Cnn m;
  m.w1 = he_uniform(Shape{c1, 1, 3, 3}, 9, seed + 1, "cnn.conv1.w");
  m.b1 = zero_param(Shape{1, c1, 1, 1}, "cnn.conv1.b");
  m.w2 = he_uniform(Shape{c2, c1, 3, 3}, 9 * c1, seed + 2, "cnn.conv2.w");
  m.b2 = zero_param(Shape{1, c2, 1, 1}, "cnn.conv2.b");
  m.w3 = he_uniform(Shape{c2 * 5 * 5, 10}, c2 * 5 * 5, seed + 3, "cnn.fc.w");
  m.b3 = zero_param(Shape{10}, "cnn.fc.b");
  return m;
}

// conv 3x3 -> + bias -> relu -> max-pool 2. in = {h, w, b}.
Tensor conv_block(std::span<const Tensor> in) {
  return max_pool2d(relu(add(conv2d(in[0], in[1]), in[2])), 2);
}

// (N,1,28,28) -> (N,10) logits. With `ckpt` each conv block is a checkpoint segment.
Tensor forward(const Cnn &m, const Tensor &x, bool ckpt) {
  const Tensor a1[3] = {x, m.w1, m.b1};
  Tensor h = ckpt ? checkpoint(conv_block, a1) : conv_block(a1);
  const Tensor a2[3] = {h, m.w2, m.b2};
  h = ckpt ? checkpoint(conv_block, a2) : conv_block(a2);
  h = reshape(h, Shape{x.size(0), -1});
  return add(matmul(h, m.w3), m.b3);
}

// Fashion-MNIST mean and standard deviation of the pixel values (over the training set).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

// Images idx[0..n) of `im` as an (n,1,28,28) f32 input tensor, labels as (n) i32, on the
// default device (filled on the host, then copied there when it is not the CPU).
void make_batch(const samples::IdxImages &im, const std::vector<uint8_t> &labels,
                std::span<const int64_t> idx, Tensor &x, Tensor &y) {
  const int64_t n = static_cast<int64_t>(idx.size()), px = im.rows * im.cols;
  x = empty(Shape{n, 1, im.rows, im.cols}, DType::F32, ADPROF_ROLE_INPUT, cpu());
  y = empty(Shape{n}, DType::I32, ADPROF_ROLE_INPUT, cpu());
  float *xd = x.data<float>();
  int32_t *yd = y.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t *src = im.pixels.data() + idx[static_cast<size_t>(i)] * px;
    for (int64_t p = 0; p < px; ++p)
      xd[i * px + p] = (static_cast<float>(src[p]) / 255.0f - kMean) / kStd;
    yd[i] = labels[static_cast<size_t>(idx[static_cast<size_t>(i)])];
  }
  x = x.to(default_device());
  y = y.to(default_device());
  x.label("cnn.batch.images");
  y.label("cnn.batch.labels");
}

// Fraction of correctly classified images among the first `count` of the set.
double accuracy(const Cnn &m, const samples::IdxImages &im, const std::vector<uint8_t> &labels,
                int64_t batch) {
  NoGrad ng;
  int64_t correct = 0;
  std::vector<int64_t> idx;
  for (int64_t s = 0; s < im.count; s += batch) {
    idx.resize(static_cast<size_t>(std::min(batch, im.count - s)));
    std::iota(idx.begin(), idx.end(), s);
    Tensor x, y;
    make_batch(im, labels, idx, x, y);
    const std::vector<double> lg = forward(m, x, false).to_vector();
    for (size_t i = 0; i < idx.size(); ++i) {
      const auto row = lg.begin() + static_cast<std::ptrdiff_t>(i * 10);
      const auto best = std::max_element(row, row + 10) - row;
      if (best == labels[static_cast<size_t>(idx[i])]) ++correct;
    }
  }
  return im.count ? static_cast<double>(correct) / static_cast<double>(im.count) : 0.0;
}

}  // namespace

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("cnn options");
  d.add_options()("batch", po::value<int64_t>()->default_value(64), "training batch size")(
      "steps", po::value<int>()->default_value(300), "training steps (Adam)")(
      "lr", po::value<double>()->default_value(3e-3), "Adam learning rate")(
      "channels", po::value<std::string>()->default_value("8,16"),
      "output channels of the two conv layers, C1,C2")("train-images",
                                                       po::value<int64_t>()->default_value(12000),
                                                       "train on the first N training images")(
      "test-images", po::value<int64_t>()->default_value(2000),
      "measure accuracy on the first N test images (0: skip)")(
      "data-dir", po::value<std::string>()->default_value(samples::kFashionMnistDir),
      "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz")(
      "log-every", po::value<int>()->default_value(50), "print the loss every N steps")(
      "seed", po::value<uint64_t>()->default_value(1), "seed of the initial weights and batches");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "cnn",
      "cnn: a small convolutional network trained with Adam on Fashion-MNIST (Debian package\n"
      "dataset-fashion-mnist): conv 1->8 3x3, relu, max-pool, conv 8->16 3x3, relu, max-pool,\n"
      "linear 400->10, cross-entropy with i32 labels. Prints the training loss, the test accuracy\n"
      "and adcore's peaks by role. The activations (conv outputs, im2col scratch) dominate the\n"
      "forward peak; parameter gradients and Adam's moments meet at the step. Each conv block is\n"
      "a checkpoint segment (policy 5; --no-checkpoint keeps its activations as forward caches);\n"
      "the label array is i32 (--widen-indices copies it to i64 inside cross_entropy's gather).",
      d, vm, c);
  if (rc >= 0) return rc;
  const int64_t batch = vm["batch"].as<int64_t>();
  const int steps = vm["steps"].as<int>(), log_every = std::max(1, vm["log-every"].as<int>());
  const double lr = vm["lr"].as<double>();
  const uint64_t seed = vm["seed"].as<uint64_t>();
  int c1 = 0, c2 = 0;
  if (std::sscanf(vm["channels"].as<std::string>().c_str(), "%d,%d", &c1, &c2) != 2 || c1 < 1 ||
      c2 < 1 || batch < 1 || steps < 0 || vm["train-images"].as<int64_t>() < 1 ||
      vm["test-images"].as<int64_t>() < 0) {
    std::fprintf(stderr,
                 "cnn: --batch, --train-images >= 1, --steps, --test-images >= 0 and "
                 "--channels C1,C2 with C1, C2 >= 1 (try --help)\n");
    return 2;
  }

  samples::FashionMnist data;
  try {
    data = samples::load_fashion_mnist(vm["data-dir"].as<std::string>(),
                                       vm["train-images"].as<int64_t>(),
                                       vm["test-images"].as<int64_t>());
  } catch (const samples::DataError &e) {
    std::fprintf(stderr, "cnn: %s\n", e.what());
    return 1;
  }
  if (data.train_images.rows != 28 || data.train_images.cols != 28 || data.test_images.rows != 28 ||
      data.test_images.cols != 28) {
    std::fprintf(stderr, "cnn: expected 28x28 images; install the Debian package %s\n",
                 samples::kFashionMnistPackage);
    return 1;
  }
  std::printf(
      "cnn conv 1->%d->%d, batch=%lld steps=%d lr=%g, %lld train / %lld test images | "
      "policies: %s\n",
      c1, c2, static_cast<long long>(batch), steps, lr,
      static_cast<long long>(data.train_images.count),
      static_cast<long long>(data.test_images.count), samples::policies(c.opts).c_str());

  Cnn m = make_cnn(c1, c2, seed);
  Adam adam(lr);
  for (const Tensor &p : m.params()) adam.add_param(p);
  Tape &tape = Tape::thread_default();

  std::mt19937_64 rng(seed);
  std::vector<int64_t> order(static_cast<size_t>(data.train_images.count));
  std::iota(order.begin(), order.end(), 0);
  size_t pos = order.size();
  std::vector<int64_t> idx(static_cast<size_t>(batch));
  const bool ckpt = c.opts.checkpointing;
  if (!c.dump_grad.empty()) {  // the gradient at the initial point, on the first images
    std::vector<int64_t> first(idx.size());
    for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int64_t>(i % order.size());
    Tensor x, y;
    make_batch(data.train_images, data.train_labels, first, x, y);
    samples::dump(c, samples::flat_gradient(cross_entropy(forward(m, x, ckpt), y), m.params()));
  }
  const double first = samples::train(tape, adam, steps, log_every, c.quiet, [&](int) {
    for (int64_t &i : idx) {
      if (pos == order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        pos = 0;
      }
      i = order[pos++];
    }
    samples::Step step;
    make_batch(data.train_images, data.train_labels, idx, step.inputs, step.targets);
    step.loss = cross_entropy(forward(m, step.inputs, ckpt), step.targets);
    return step;
  });
  std::printf("first loss %.4f\n", first);
  {
    NoGrad ng;  // loss of the training batch of the last step, after it
    ArenaScope arena_scope(tape.arena());
    Tensor x, y;
    make_batch(data.train_images, data.train_labels, idx, x, y);
    std::printf("final loss %.4f\n", cross_entropy(forward(m, x, false), y).item());
  }
  samples::print_memory("cnn");
  // Evaluation takes its buffers from the training arena too (same batch size, same shapes).
  ArenaScope arena_scope(tape.arena());
  if (data.test_images.count > 0)
    std::printf("test accuracy %.2f%% on %lld images (chance 10%%)\n",
                100.0 * accuracy(m, data.test_images, data.test_labels, batch),
                static_cast<long long>(data.test_images.count));
  return 0;
}
