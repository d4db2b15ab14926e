// layertape: an engine made of layers, emitting the AD protocol's version-2 events the way the
// PyTorch listener (python/adprof/torch/_tape.py) does, so that the what-if for such engines is
// tested without Python. A training loop of N blocks (Linear, then an activation) with an
// optimizer that keeps two state buffers per parameter, the shapes of PyTorch's memory:
//   forward   block k: z = linear(h) saves h; y = act(z) saves z; y is the next block's input
//   backward  the gradient of a block's output arrives; the parameter's gradient arrives and
//             is accumulated into its buffer (or becomes it); the saves are released
//   step      a separate optimizer step (state made at the first one, a transient per parameter)
//   zero      gradients zeroed in place and kept (zero_grad()), the recorded behaviour
// and --technique applies what a user would change:
//   checkpoint   the blocks in lround(sqrt(N)) segments, every segment but the last run without
//                saves and recomputed in backward (what checkpoint_sequential does)
//   fused        each parameter stepped as soon as its gradient is ready, which is then freed
//   set_to_none  gradients freed at the zeroing (the next backward's gradient becomes the buffer)
// usage: layertape [BLOCKS [ACTIVATION_BYTES [PARAMETER_BYTES [STEPS]]]] [--technique T]
#include <adprof/ad_protocol.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Storage {
  void *p;
  explicit Storage(size_t n) : p(std::malloc(n)) { std::memset(p, 1, n); }
  ~Storage() { std::free(p); }
};
using T = std::shared_ptr<Storage>;
T make(size_t n) { return std::make_shared<Storage>(n); }
uint64_t addr(const T &t) { return t ? reinterpret_cast<uint64_t>(t->p) : ADPROF_AD_NONE; }
void event(const char *kind, std::initializer_list<uint64_t> v) {
  adprof_annotate(adprof_name(kind), v.begin(), static_cast<uint32_t>(v.size()));
}
uint64_t name(const std::string &s) { return adprof_name(s.c_str()); }

struct Engine {
  size_t act = 0, param = 0;
  int blocks = 0;
  bool grad = true;         // saves kept (false: a checkpointed segment's forward)
  uint64_t next_layer = 0;  // layer ids, dense per generation
  std::vector<uint64_t> open;
  std::vector<T> grads, state;
  struct Saved {
    T h, z;
  };
  std::vector<Saved> saved;

  uint64_t begin(const std::string &label, const T &in) {
    const uint64_t id = next_layer++;
    event(ADPROF_AD_TAPE_LAYER_BEGIN,
          {id, name(label), open.empty() ? ADPROF_AD_NONE : open.back(), addr(in)});
    open.push_back(id);
    return id;
  }
  void end(uint64_t id, const T &out) {
    open.pop_back();
    event(ADPROF_AD_TAPE_LAYER_END, {id, addr(out)});
  }
  void save(const T &t) { event(ADPROF_AD_TAPE_SAVE_STORAGE, {addr(t), act}); }
  void release(T &t) {
    if (!t) return;
    event(ADPROF_AD_TAPE_RELEASE_STORAGE, {addr(t)});
    t.reset();
  }

  T block(int k, T h, std::vector<uint64_t> &ids) {
    const std::string label = "net.blocks." + std::to_string(k);
    const uint64_t b = begin(label, h);
    ids[static_cast<size_t>(k)] = b;
    const uint64_t l1 = begin(label + ".0", h);
    T z = make(4 * act);
    if (grad) {
      save(h);
      saved[static_cast<size_t>(k)].h = h;
    }
    end(l1, z);
    const uint64_t l2 = begin(label + ".1", z);
    T y = make(act);
    if (grad) {
      save(z);
      saved[static_cast<size_t>(k)].z = z;
    }
    end(l2, y);
    z.reset();  // the block's code lets go of its intermediate (kept only if saved)
    end(b, y);
    return y;
  }
  // The backward of block k: its output's gradient g in, its input's gradient out.
  T block_backward(int k, T g, bool fused, const std::vector<uint64_t> &ids, bool mark) {
    if (mark) event(ADPROF_AD_TAPE_LAYER_BACKWARD, {ids[static_cast<size_t>(k)]});
    const size_t i = static_cast<size_t>(k);
    T gz = make(4 * act);
    g.reset();
    release(saved[i].z);
    T gw = make(param);
    event(ADPROF_AD_TAPE_GRAD_ARRIVED, {uint64_t(k), addr(gw), param});
    if (!grads[i]) grads[i] = std::move(gw);  // the first gradient becomes the buffer
    gw.reset();                               // later ones are added into it
    event(ADPROF_AD_TAPE_GRAD_READY, {uint64_t(k), addr(grads[i]), param});
    if (fused) {
      step(k);
      grads[i].reset();
    }
    T gh = make(act);
    gz.reset();
    release(saved[i].h);
    return gh;
  }
  void step(int k) {
    const size_t i = static_cast<size_t>(k);
    if (!state[2 * i]) {
      state[2 * i] = make(param);
      state[2 * i + 1] = make(param);
    }
    T denom = make(param);
  }
};

}  // namespace

int main(int argc, char **argv) {
  std::vector<std::string> pos;
  std::string technique = "none";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--technique") == 0 && i + 1 < argc)
      technique = argv[++i];
    else
      pos.emplace_back(argv[i]);
  }
  auto arg = [&](size_t i, long d) { return i < pos.size() ? std::atol(pos[i].c_str()) : d; };
  Engine e;
  e.blocks = static_cast<int>(arg(0, 9));
  e.act = static_cast<size_t>(arg(1, 1 << 20));
  e.param = static_cast<size_t>(arg(2, 1 << 20));
  const int steps = static_cast<int>(arg(3, 3));
  const bool checkpoint = technique == "checkpoint", fused = technique == "fused",
             set_to_none = technique == "set_to_none";
  const int n = e.blocks;
  e.grads.resize(static_cast<size_t>(n));
  e.state.resize(2 * static_cast<size_t>(n));
  e.saved.resize(static_cast<size_t>(n));

  adprof_ad_describe_engine("layertape", "0.1");
  adprof_ad_describe_policy(ADPROF_AD_POLICY_CHECKPOINTING, checkpoint,
                            "checkpoint {parent} ({first} .. {last}) in {segments} segments",
                            "no checkpoint");
  adprof_ad_describe_policy(ADPROF_AD_POLICY_FUSED_OPTIMIZER, fused, "--technique fused",
                            "a separate step");
  adprof_ad_describe_policy(ADPROF_AD_POLICY_FREE_GRADIENTS, set_to_none, "--technique set_to_none",
                            "zero in place");
  std::vector<T> params;
  for (int k = 0; k < n; ++k) params.push_back(make(e.param));
  T x = make(e.act);
  const int S = static_cast<int>(std::lround(std::sqrt(static_cast<double>(n))));
  const int per = checkpoint && S >= 2 ? n / S : n;
  const int plain_from = checkpoint && S >= 2 ? per * (S - 1) : 0;  // the last segment
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < n && !fused; ++k) {  // zero_grad
      T &g = e.grads[static_cast<size_t>(k)];
      if (!g) continue;
      if (set_to_none)
        g.reset();
      else
        event(ADPROF_AD_TAPE_GRAD_ZEROED, {uint64_t(k), addr(g), e.param});
    }
    const uint64_t mask = set_to_none ? 1u << ADPROF_AD_POLICY_FREE_GRADIENTS : 0;
    event(ADPROF_AD_TAPE_BEGIN, {1, uint64_t(s), mask});
    e.next_layer = 0;
    std::vector<uint64_t> ids(static_cast<size_t>(n));
    const uint64_t root = e.begin("net", x);
    const uint64_t stack = e.begin("net.blocks", x);
    std::vector<T> seg_in;  // checkpointed segments' inputs (saved by the checkpoint)
    T h = x;
    for (int k = 0; k < n; ++k) {
      e.grad = k >= plain_from;
      if (!e.grad && k % per == 0) {
        e.save(h);
        seg_in.push_back(h);
      }
      h = e.block(k, std::move(h), ids);
    }
    e.grad = true;
    e.end(stack, h);
    e.end(root, h);
    event(ADPROF_AD_TAPE_BACKWARD_BEGIN,
          {ADPROF_AD_NONE, 0, mask, ADPROF_AD_BACKWARD_TO_LEAF_GRADS});
    T g = make(e.act);
    h.reset();
    for (int k = n - 1; k >= plain_from; --k)
      g = e.block_backward(k, std::move(g), fused, ids, true);
    for (int seg = static_cast<int>(seg_in.size()) - 1; seg >= 0; --seg) {  // recompute
      T in = seg_in[static_cast<size_t>(seg)];
      std::vector<uint64_t> nested(static_cast<size_t>(n));
      T out = in;
      for (int k = seg * per; k < (seg + 1) * per; ++k) out = e.block(k, std::move(out), nested);
      for (int k = (seg + 1) * per - 1; k >= seg * per; --k)
        g = e.block_backward(k, std::move(g), fused, nested, false);
      out.reset();
      e.release(seg_in[static_cast<size_t>(seg)]);
    }
    g.reset();
    event(ADPROF_AD_TAPE_END, {1, uint64_t(s)});
    if (!fused) {
      event(ADPROF_AD_TAPE_OPTIMIZER_BEGIN, {uint64_t(s)});
      for (int k = 0; k < n; ++k) e.step(k);
      event(ADPROF_AD_TAPE_OPTIMIZER_END, {uint64_t(s)});
    }
  }
  return 0;
}
