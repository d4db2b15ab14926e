// charlm: a character-level transformer language model trained with Adam on a plain-text file
// (default: the GPL-3 text every Debian system ships). Token embedding (a gather) plus a learned
// position embedding, pre-norm blocks of causal multi-head attention and a relu MLP, a final
// layer norm, cross-entropy on the next character. Prints the loss falling, a validation loss,
// a short generated sample and adcore's peaks by role.
#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "common.h"
#include "training.h"

using namespace adcore;

namespace {

struct Config {
  int64_t batch = 16, seq = 32, width = 64, layers = 2, heads = 4;
};

// Block parameters, in the order a block's segment receives them after its input.
struct Block {
  Tensor ln1_g, ln1_b;
  std::vector<Tensor> wq, wk, wv;  // per head (C, C/H)
  Tensor wo, ln2_g, ln2_b, w1, b1, w2, b2;
  std::vector<Tensor> list() const {
    std::vector<Tensor> v{ln1_g, ln1_b};
    v.insert(v.end(), wq.begin(), wq.end());
    v.insert(v.end(), wk.begin(), wk.end());
    v.insert(v.end(), wv.begin(), wv.end());
    v.insert(v.end(), {wo, ln2_g, ln2_b, w1, b1, w2, b2});
    return v;
  }
};

struct Model {
  Config cfg;
  int64_t vocab = 0;
  Tensor tok, pos;  // (V, C), (T, C)
  std::vector<Block> blocks;
  Tensor lnf_g, lnf_b, wout, bout;
  Tensor mask;  // (T, T): 0 on and below the diagonal, -1e4 above (input, not a parameter)
  std::vector<Tensor> params() const {
    std::vector<Tensor> v{tok, pos};
    for (const Block &b : blocks) {
      const std::vector<Tensor> l = b.list();
      v.insert(v.end(), l.begin(), l.end());
    }
    v.insert(v.end(), {lnf_g, lnf_b, wout, bout});
    return v;
  }
};

std::string name(const char *a, int64_t i, const char *b) {
  return std::string("charlm.") + a + std::to_string(i) + "." + b;
}

Tensor param(const Shape &s, double bound, uint64_t seed, const std::string &label) {
  Tensor t = bound > 0 ? rand_uniform(s, seed, -bound, bound, DType::F32, ADPROF_ROLE_PARAMETER)
                       : zeros(s, DType::F32, ADPROF_ROLE_PARAMETER);
  t.set_requires_grad(true);
  t.label(label.c_str());
  return t;
}
Tensor ones_param(const Shape &s, const std::string &label) {
  Tensor t = ones(s, DType::F32, ADPROF_ROLE_PARAMETER);
  t.set_requires_grad(true);
  t.label(label.c_str());
  return t;
}
// Uniform with variance 1/fan_in.
double lecun(int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); }

Model make_model(const Config &cfg, int64_t vocab, uint64_t seed) {
  Model m;
  m.cfg = cfg;
  m.vocab = vocab;
  const int64_t C = cfg.width, d = C / cfg.heads, T = cfg.seq;
  uint64_t k = seed * 1000;
  m.tok = param(Shape{vocab, C}, 0.5, ++k, "charlm.tok_emb");
  m.pos = param(Shape{T, C}, 0.1, ++k, "charlm.pos_emb");
  for (int64_t l = 0; l < cfg.layers; ++l) {
    Block b;
    b.ln1_g = ones_param(Shape{C}, name("block", l, "ln1.g"));
    b.ln1_b = param(Shape{C}, 0, 0, name("block", l, "ln1.b"));
    for (int64_t h = 0; h < cfg.heads; ++h) {
      b.wq.push_back(param(Shape{C, d}, lecun(C), ++k, name("block", l, "wq")));
      b.wk.push_back(param(Shape{C, d}, lecun(C), ++k, name("block", l, "wk")));
      b.wv.push_back(param(Shape{C, d}, lecun(C), ++k, name("block", l, "wv")));
    }
    b.wo = param(Shape{C, C}, lecun(C) / std::sqrt(2.0 * cfg.layers), ++k, name("block", l, "wo"));
    b.ln2_g = ones_param(Shape{C}, name("block", l, "ln2.g"));
    b.ln2_b = param(Shape{C}, 0, 0, name("block", l, "ln2.b"));
    b.w1 = param(Shape{C, 4 * C}, lecun(C), ++k, name("block", l, "mlp.w1"));
    b.b1 = param(Shape{4 * C}, 0, 0, name("block", l, "mlp.b1"));
    b.w2 = param(Shape{4 * C, C}, lecun(4 * C) / std::sqrt(2.0 * cfg.layers), ++k,
                 name("block", l, "mlp.w2"));
    b.b2 = param(Shape{C}, 0, 0, name("block", l, "mlp.b2"));
    m.blocks.push_back(std::move(b));
  }
  m.lnf_g = ones_param(Shape{C}, "charlm.lnf.g");
  m.lnf_b = param(Shape{C}, 0, 0, "charlm.lnf.b");
  m.wout = param(Shape{C, vocab}, lecun(C), ++k, "charlm.out.w");
  m.bout = param(Shape{vocab}, 0, 0, "charlm.out.b");
  std::vector<double> mv(static_cast<size_t>(T * T), 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) mv[static_cast<size_t>(i * T + j)] = -1e4;
  m.mask = from_vector(mv, Shape{T, T}, DType::F32).label("charlm.causal_mask");
  return m;
}

// One pre-norm transformer block on x (B*T, C). in = {x, block parameters in Block::list order}.
Tensor block_fn(std::span<const Tensor> in, int64_t B, int64_t T, int64_t H, const Tensor &mask) {
  const Tensor &x = in[0];
  const int64_t C = x.size(1), d = C / H;
  size_t p = 1;
  const Tensor &g1 = in[p++], &be1 = in[p++];
  const std::span<const Tensor> wq = in.subspan(p, static_cast<size_t>(H));
  const std::span<const Tensor> wk = in.subspan(p + static_cast<size_t>(H), static_cast<size_t>(H));
  const std::span<const Tensor> wv =
      in.subspan(p + 2 * static_cast<size_t>(H), static_cast<size_t>(H));
  p += 3 * static_cast<size_t>(H);
  const Tensor &wo = in[p++], &g2 = in[p++], &be2 = in[p++];
  const Tensor &w1 = in[p++], &b1 = in[p++], &w2 = in[p++], &b2 = in[p++];

  const Tensor h = layer_norm(x, g1, be1);
  const Tensor m = slice(slice(mask, 0, 0, T), 1, 0, T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<Tensor> heads;
  for (int64_t i = 0; i < H; ++i) {
    const size_t u = static_cast<size_t>(i);
    const Tensor q = reshape(matmul(h, wq[u]), Shape{B, T, d});
    const Tensor k = reshape(matmul(h, wk[u]), Shape{B, T, d});
    const Tensor v = reshape(matmul(h, wv[u]), Shape{B, T, d});
    const Tensor s = add(bmm(q, transpose(k, 1, 2)) * scale, m);  // (B, T, T)
    heads.push_back(bmm(softmax(s, -1), v));                      // (B, T, d)
  }
  const Tensor att = reshape(concat(heads, 2), Shape{B * T, C});
  const Tensor x1 = add(x, matmul(att, wo));
  const Tensor h2 = layer_norm(x1, g2, be2);
  return add(x1, add(matmul(relu(add(matmul(h2, w1), b1)), w2), b2));
}

// tokens (B, T) i32 -> logits (B*T, V).
Tensor forward(const Model &m, const Tensor &tokens, bool ckpt) {
  const int64_t B = tokens.size(0), T = tokens.size(1), C = m.cfg.width, H = m.cfg.heads;
  Tensor x = reshape(add(embedding(m.tok, tokens), slice(m.pos, 0, 0, T)), Shape{B * T, C});
  const Tensor mask = m.mask;
  for (const Block &b : m.blocks) {
    std::vector<Tensor> in{x};
    const std::vector<Tensor> l = b.list();
    in.insert(in.end(), l.begin(), l.end());
    auto fn = [B, T, H, mask](std::span<const Tensor> a) { return block_fn(a, B, T, H, mask); };
    x = ckpt ? checkpoint(fn, in) : fn(in);
  }
  return add(matmul(layer_norm(x, m.lnf_g, m.lnf_b), m.wout), m.bout);
}

struct Corpus {
  std::vector<int32_t> ids;
  std::string chars;  // id -> character
};

// Random windows of text[lo, hi): tokens (B, T) and next-character targets (B*T), i32.
void make_batch(const Corpus &c, size_t lo, size_t hi, int64_t B, int64_t T, std::mt19937_64 &rng,
                Tensor &tokens, Tensor &targets) {
  tokens = empty(Shape{B, T}, DType::I32, ADPROF_ROLE_INPUT, cpu());    // filled here, then
  targets = empty(Shape{B * T}, DType::I32, ADPROF_ROLE_INPUT, cpu());  // copied to the device
  std::uniform_int_distribution<size_t> start(lo, hi - static_cast<size_t>(T) - 1);
  int32_t *td = tokens.data<int32_t>(), *yd = targets.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const size_t s = start(rng);
    for (int64_t t = 0; t < T; ++t) {
      td[b * T + t] = c.ids[s + static_cast<size_t>(t)];
      yd[b * T + t] = c.ids[s + static_cast<size_t>(t) + 1];
    }
  }
  tokens = tokens.to(default_device());
  targets = targets.to(default_device());
  tokens.label("charlm.batch.tokens");
  targets.label("charlm.batch.targets");
}

std::string generate(const Model &m, const Corpus &c, const std::string &prompt, int n,
                     double temperature, uint64_t seed) {
  NoGrad ng;
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ctx;
  for (char ch : prompt) {
    const size_t id = c.chars.find(ch);
    if (id != std::string::npos) ctx.push_back(static_cast<int32_t>(id));
  }
  if (ctx.empty()) ctx.push_back(0);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ctx.size()), m.cfg.seq);
    Tensor tokens = empty(Shape{1, t}, DType::I32, ADPROF_ROLE_INPUT, cpu());
    std::copy(ctx.end() - t, ctx.end(), tokens.data<int32_t>());
    tokens = tokens.to(default_device());
    const Tensor logits = forward(m, tokens, false);
    const std::vector<double> last = slice(logits, 0, t - 1, t).to_vector();
    const double mx = *std::max_element(last.begin(), last.end());
    std::vector<double> p(last.size());
    for (size_t j = 0; j < p.size(); ++j) p[j] = std::exp((last[j] - mx) / temperature);
    std::discrete_distribution<int32_t> pick(p.begin(), p.end());
    const int32_t next = pick(rng);
    ctx.push_back(next);
    out += c.chars[static_cast<size_t>(next)];
  }
  return out;
}

}  // namespace

int main(int argc, char **argv) {
  namespace po = boost::program_options;
  po::options_description d("charlm options");
  Config cfg;
  d.add_options()("text",
                  po::value<std::string>()->default_value("/usr/share/common-licenses/GPL-3"),
                  "training text (plain text; the last 10% is held out for validation)")(
      "seq", po::value<int64_t>()->default_value(cfg.seq), "sequence length (context)")(
      "width", po::value<int64_t>()->default_value(cfg.width), "model width C")(
      "layers", po::value<int64_t>()->default_value(cfg.layers), "transformer blocks")(
      "heads", po::value<int64_t>()->default_value(cfg.heads), "attention heads (divide width)")(
      "batch", po::value<int64_t>()->default_value(cfg.batch), "sequences per step")(
      "steps", po::value<int>()->default_value(300), "training steps (Adam)")(
      "lr", po::value<double>()->default_value(3e-3), "Adam learning rate")(
      "generate", po::value<int>()->default_value(160), "characters to generate at the end")(
      "prompt", po::value<std::string>()->default_value("The "), "start of the generated text")(
      "temperature", po::value<double>()->default_value(0.7), "sampling temperature")(
      "log-every", po::value<int>()->default_value(50), "print the loss every N steps")(
      "seed", po::value<uint64_t>()->default_value(1), "seed of the weights, batches, sampling");
  po::variables_map vm;
  samples::Common c;
  const int rc = samples::parse(
      argc, argv, "charlm",
      "charlm: a character-level transformer language model trained with Adam on a plain-text\n"
      "file (default: /usr/share/common-licenses/GPL-3). Token embedding (an index_select, i32\n"
      "ids), learned positions, pre-norm blocks of causal multi-head attention and relu MLP,\n"
      "final layer norm, cross-entropy on the next character. Prints the loss falling, a\n"
      "validation loss and a generated sample. Each block is a checkpoint segment (policy 5;\n"
      "--no-checkpoint keeps its attention maps and MLP activations as forward caches).",
      d, vm, c);
  if (rc >= 0) return rc;
  cfg.seq = vm["seq"].as<int64_t>();
  cfg.width = vm["width"].as<int64_t>();
  cfg.layers = vm["layers"].as<int64_t>();
  cfg.heads = vm["heads"].as<int64_t>();
  cfg.batch = vm["batch"].as<int64_t>();
  const int steps = vm["steps"].as<int>(), log_every = std::max(1, vm["log-every"].as<int>());
  const double lr = vm["lr"].as<double>(), temperature = vm["temperature"].as<double>();
  const uint64_t seed = vm["seed"].as<uint64_t>();
  if (cfg.seq < 2 || cfg.width < 1 || cfg.layers < 0 || cfg.heads < 1 ||
      cfg.width % cfg.heads != 0 || cfg.batch < 1 || steps < 0 || temperature <= 0 ||
      vm["generate"].as<int>() < 0) {
    std::fprintf(stderr,
                 "charlm: --seq >= 2, --width >= 1 divisible by --heads >= 1, --batch >= "
                 "1, --layers, --steps, --generate >= 0, --temperature > 0 (try --help)\n");
    return 2;
  }

  const std::string path = vm["text"].as<std::string>();
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr,
                   "charlm: cannot read %s (it ships with Debian's base-files package; "
                   "pass --text FILE)\n",
                   path.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  Corpus corpus;
  {
    bool seen[256] = {};
    for (unsigned char ch : text) seen[ch] = true;
    for (int ch = 0; ch < 256; ++ch)
      if (seen[ch]) corpus.chars += static_cast<char>(ch);
    int32_t id_of[256] = {};
    for (size_t i = 0; i < corpus.chars.size(); ++i)
      id_of[static_cast<unsigned char>(corpus.chars[i])] = static_cast<int32_t>(i);
    for (unsigned char ch : text) corpus.ids.push_back(id_of[ch]);
  }
  const size_t split = text.size() * 9 / 10;
  if (split < static_cast<size_t>(cfg.seq) + 2 ||
      text.size() - split < static_cast<size_t>(cfg.seq) + 2) {
    std::fprintf(stderr, "charlm: %s is too short for --seq %lld (%zu characters)\n", path.c_str(),
                 static_cast<long long>(cfg.seq), text.size());
    return 1;
  }
  const int64_t V = static_cast<int64_t>(corpus.chars.size());
  std::printf(
      "charlm %s: %zu characters, vocabulary %lld | seq=%lld width=%lld layers=%lld "
      "heads=%lld batch=%lld steps=%d lr=%g | policies: %s\n",
      path.c_str(), text.size(), static_cast<long long>(V), static_cast<long long>(cfg.seq),
      static_cast<long long>(cfg.width), static_cast<long long>(cfg.layers),
      static_cast<long long>(cfg.heads), static_cast<long long>(cfg.batch), steps, lr,
      samples::policies(c.opts).c_str());

  Model m = make_model(cfg, V, seed);
  Adam adam(lr);
  size_t n_params = 0;
  for (const Tensor &p : m.params()) {
    adam.add_param(p);
    n_params += static_cast<size_t>(p.numel());
  }
  std::printf("parameters: %zu (%s f32)\n", n_params,
              samples::mib(static_cast<int64_t>(n_params * 4)).c_str());
  Tape &tape = Tape::thread_default();
  std::mt19937_64 rng(seed);
  const bool ckpt = c.opts.checkpointing;
  // --dump-grad: the gradient at the initial point, on the first batch.
  if (!c.dump_grad.empty()) {
    std::mt19937_64 first_rng = rng;  // a copy: training draws the same batches as without
    Tensor tokens, targets;
    make_batch(corpus, 0, split, cfg.batch, cfg.seq, first_rng, tokens, targets);
    samples::dump(
        c, samples::flat_gradient(cross_entropy(forward(m, tokens, ckpt), targets), m.params()));
  }
  const double first = samples::train(tape, adam, steps, log_every, c.quiet, [&](int) {
    samples::Step step;
    make_batch(corpus, 0, split, cfg.batch, cfg.seq, rng, step.inputs, step.targets);
    step.loss = cross_entropy(forward(m, step.inputs, ckpt), step.targets);
    return step;
  });
  std::printf("first loss %.4f (uniform guess: ln %lld = %.4f)\n", first, static_cast<long long>(V),
              std::log(static_cast<double>(V)));
  samples::print_memory("charlm");
  // Validation and generation take their buffers from the training arena too.
  ArenaScope arena_scope(tape.arena());
  {
    NoGrad ng;
    std::mt19937_64 vrng(seed + 99);
    double vl = 0;
    const int vb = 4;
    for (int i = 0; i < vb; ++i) {
      Tensor tokens, targets;
      make_batch(corpus, split, text.size(), cfg.batch, cfg.seq, vrng, tokens, targets);
      vl += cross_entropy(forward(m, tokens, false), targets).item();
    }
    std::printf("final loss %.4f (validation, held-out last 10%%)\n", vl / vb);
  }
  const int n_gen = vm["generate"].as<int>();
  if (n_gen > 0) {
    const std::string prompt = vm["prompt"].as<std::string>();
    std::string g = prompt + generate(m, corpus, prompt, n_gen, temperature, seed);
    for (char &ch : g)
      if (ch == '\n') ch = ' ';
    std::printf("sample: %s\n", g.c_str());
  }
  return 0;
}
