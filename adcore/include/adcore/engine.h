// Reverse mode on a tape.
//
// Ops append nodes to the thread's current tape (Tape::current()) when gradients may flow.
// Backward walks the tape once, iteratively, in reverse recording order (a topological order),
// with dependency counts that tell when an adjoint is complete: never recursion, so a 100,000
// node chain is fine. Gradients that meet are summed in ONE function, Tape::accumulate, which is
// where the in-place accumulation policy lives.
//
// Two styles:
//   * backward():  `loss.backward()` accumulates into .grad() of requires-grad leaves on the
//                  thread's default tape (or the current one);
//   * value_and_grad(): a reusable Tape evaluates f and returns the gradients w.r.t. any subset
//                  of its arguments; with reuse_tape the second and later calls make no heap
//                  allocation (buffers come back from the tape's arena, nodes are recycled).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "adcore/ops.h"
#include "adcore/options.h"
#include "adcore/registry.h"
#include "adcore/tensor.h"

namespace adcore {

class Optimizer;
namespace detail {
class Plan;
struct TapeAccess;
}  // namespace detail

struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
};

using SegmentFn = std::function<Tensor(std::span<const Tensor>)>;

struct Node {
  OpId op = OpId::leaf;
  int32_t id = -1;
  Attrs attrs;
  std::vector<int32_t> in_node;     // per input: the node producing it, -1 if inactive
  std::vector<TensorMeta> in_meta;  // per input: shape and dtype
  std::vector<Tensor> saved;        // per input: the tensor saved for backward (or empty)
  Tensor saved_out;                 // the output, when saved
  TensorMeta out_meta;
  Tensor leaf;             // leaf nodes: the leaf tensor
  SegmentFn segment;       // checkpoint nodes: the segment to recompute
  bool requested = false;  // its gradient was asked for
  bool released = false;   // its caches were released
  void clear();
};

// What a backward rule sees.
struct BackwardCtx {
  const Node &node;
  const Tensor &gout;
  std::span<Tensor> gin;           // gin[i]: write the gradient of input i here
  std::span<const uint8_t> needs;  // needs[i]: is input i's gradient wanted
  const Tensor &in(int i) const { return node.saved[static_cast<size_t>(i)]; }
  const Tensor &out() const { return node.saved_out; }
  const Attrs &attrs() const { return node.attrs; }
  const TensorMeta &in_meta(int i) const { return node.in_meta[static_cast<size_t>(i)]; }
  bool need(int i) const { return needs[static_cast<size_t>(i)] != 0; }
};

// Grad mode (thread-local): ops under NoGrad are not recorded.
bool grad_enabled();
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad &) = delete;
  NoGrad &operator=(const NoGrad &) = delete;

 private:
  bool prev_;
};

class Tape {
 public:
  explicit Tape(Options opts = Options{});
  ~Tape();
  Tape(const Tape &) = delete;
  Tape &operator=(const Tape &) = delete;

  const Options &options() const { return opts_; }
  void set_options(const Options &o);
  uint64_t generation() const { return gen_; }
  size_t size() const { return n_; }
  const Node &node(int32_t id) const { return *nodes_[static_cast<size_t>(id)]; }
  uint32_t id() const { return id_; }

  // The tape ops record on (innermost TapeScope, else the thread's default tape).
  static Tape &current();
  static Tape &thread_default();

  // --- recording (used by the op dispatcher) ---
  // Is `t` a value gradients may flow through on this tape?
  bool active(const Tensor &t) const {
    const TensorImpl *i = t.impl();
    if (i->tape == this && i->tape_gen == gen_ && i->node >= 0) return true;
    if (i->requires_grad) return true;
    return !opts_.activity_analysis && is_floating(i->dtype);
  }
  // Appends a node for `out` = op(ins) and saves what the backward rule will need.
  void record(OpId op, std::span<const Tensor> ins, const Attrs &a, Tensor &out);
  void record_checkpoint(SegmentFn fn, std::span<const Tensor> ins, Tensor &out);
  // Drops every node (saved caches released); a new generation starts.
  void reset();

  // --- reverse mode ---
  // Gradients of one-element `root` w.r.t. `wrt` (leaves or intermediate values on this tape)
  // into `out` (same length). Inactive wrt get zeros. Resets the tape afterwards.
  void gradients(const Tensor &root, std::span<const Tensor> wrt, std::span<Tensor> out);
  // Accumulates into .grad() of every requires-grad leaf reached from `root`. With `opt` and
  // fused_optimizer, each parameter of `opt` is updated as soon as its adjoint is complete
  // (and its gradient freed); with `opt` but without the policy, opt->step() runs after
  // backward and the gradients are zeroed. Resets the tape afterwards.
  void backward(const Tensor &root, Optimizer *opt = nullptr);

  // Evaluates f on aliases of `args` (those in `wrt` active; with activity analysis off, every
  // floating argument active) and writes the gradient w.r.t. args[wrt[i]] into grads_out[i].
  // grads_out's previous contents are released first, so a loop that keeps passing the same
  // grads_out reuses the same buffers. Returns f's value.
  // With reuse_tape, the first call also records a replay plan; later calls with the same
  // signature (arguments' dtype/shape/strides/device, wrt) still run f, but each op only checks
  // that it is the next planned one and runs its kernel into a planned buffer, and backward is
  // replayed from the plan (docs/ADCORE.md, "Replayed calls"). Anything unplanned falls back to
  // the normal path.
  template <class F>
  Tensor value_and_grad(F &&f, std::span<const Tensor> args, std::span<const size_t> wrt,
                        std::span<Tensor> grads_out) {
    CallScope scope(*this, args, wrt, grads_out);
    Tensor loss = f(std::span<const Tensor>(call_args_.data(), call_args_.size()));
    scope.finish(loss);
    return loss;
  }

  // Gradient summation: the ONE place contributions meet (see file comment).
  void accumulate(int32_t target, int32_t from, Tensor contribution);

  // Arena of this tape (nullptr without reuse_tape).
  Arena *arena() const { return arena_.get(); }

  // Replay plan state (for tests): does the tape hold a plan ready to replay, and how many calls
  // of value_and_grad were replayed from one (to the end, without falling back).
  bool has_plan() const;
  uint64_t replayed_calls() const { return replayed_calls_; }

 private:
  friend class TapeScope;
  friend struct detail::TapeAccess;
  class CallScope {
   public:
    CallScope(Tape &t, std::span<const Tensor> args, std::span<const size_t> wrt,
              std::span<Tensor> grads_out);
    ~CallScope();
    void finish(Tensor &loss);
    CallScope(const CallScope &) = delete;
    CallScope &operator=(const CallScope &) = delete;

   private:
    enum Mode : uint8_t { kNormal, kRecord, kReplay };
    Tape &t_;
    std::span<const size_t> wrt_;
    std::span<Tensor> out_;
    Tape *prev_tape_;
    ArenaScope arena_;
    adprof_phase prev_phase_;
    detail::Plan *prev_rec_, *prev_play_;
    Mode mode_ = kNormal;
    bool finished_ = false;  // finish() ran to the end (else f or backward threw)
  };

  Node &new_node(OpId op);
  int32_t leaf_node(const Tensor &t);
  // The reverse sweep shared by gradients() and backward().
  void run_backward(const Tensor &root, Optimizer *opt, bool to_leaf_grads, const Tensor *seed);
  void gradients_impl(const Tensor &root, const Tensor *seed, std::span<const Tensor> wrt,
                      std::span<Tensor> out);
  void finish_adjoint(int32_t id);  // naive accumulation: sum the pending contributions
  // The sweep's steps (engine.cpp, "reverse sweep").
  void mark_useful(int32_t root, bool to_leaf_grads);
  void count_dependencies(int32_t root);
  void annotate_backward_begin(int32_t root, Optimizer *opt, bool to_leaf_grads);
  void seed_root(const Tensor &root, int32_t r, const Tensor *seed);
  void backward_node(int32_t i, Node &nd, const Tensor &g);
  void pass_contributions(int32_t i, Node &nd, Optimizer *opt, bool to_leaf_grads);
  void deliver(int32_t id, Optimizer *opt, bool to_leaf_grads);
  void hand_over_result(int32_t id, Tensor g);
  bool step_fused(int32_t id, Node &n, Optimizer &opt, const Tensor &g);
  void add_to_leaf_grad(Node &n, const Tensor &g);
  void release_node(Node &n);
  void run_checkpoint_backward(Node &n, const Tensor &g, std::span<Tensor> gin,
                               std::span<const uint8_t> needs);

  Options opts_;
  uint32_t id_;
  uint64_t gen_ = 1;
  std::vector<Node *> nodes_;  // nodes_[0..n_) are live; the rest wait for reuse
  size_t n_ = 0;
  Ref<Arena> arena_;
  std::vector<Tensor> call_args_, wrt_args_;
  // backward scratch (kept across calls for reuse)
  std::vector<Tensor> adj_;
  std::vector<std::vector<Tensor>> pending_;
  std::vector<int32_t> deps_;
  std::vector<uint8_t> useful_, reach_;
  std::vector<Tensor> gin_, unrequested_;
  std::vector<uint8_t> needs_;
  std::span<Tensor> results_;  // gradients() outputs, indexed through node.requested order
  std::vector<int32_t> result_node_;
  // replay plan (value_and_grad with reuse_tape)
  std::unique_ptr<detail::Plan> plan_;
  int plan_builds_ = 0;
  uint64_t replayed_calls_ = 0;
};

// Makes `t` the current tape for the scope.
class TapeScope {
 public:
  explicit TapeScope(Tape &t);
  ~TapeScope();
  TapeScope(const TapeScope &) = delete;
  TapeScope &operator=(const TapeScope &) = delete;

 private:
  Tape *prev_;
};

// Convenience: gradients of `root` w.r.t. `wrt` on the current tape.
std::vector<Tensor> grad(const Tensor &root, std::span<const Tensor> wrt);
inline std::vector<Tensor> grad(const Tensor &root, std::initializer_list<Tensor> wrt) {
  return grad(root, std::span<const Tensor>(wrt.begin(), wrt.size()));
}

// Options of the current tape (what ops consult).
const Options &current_options();
// Sets the options of the thread's default tape.
void set_default_options(const Options &o);

// Checkpointing: fn(inputs) runs without keeping caches; backward recomputes it. Tensors fn
// captures instead of taking as inputs are treated as constants. Without the checkpointing
// policy this is just fn(inputs).
Tensor checkpoint(const SegmentFn &fn, std::span<const Tensor> inputs);
// sqrt(n) schedule for a chain of one-input layers: segments of about sqrt(n) layers each
// (segments <= 0: round(sqrt(n))). Returns the segment start indices.
std::vector<size_t> sqrt_schedule(size_t n, int segments = 0);
Tensor checkpoint_sequential(std::span<const std::function<Tensor(const Tensor &)>> layers,
                             const Tensor &x, int segments = 0);

// Internal phase/role plumbing (exposed for samples and optimizers).
adprof_phase current_phase();
class Phase {
 public:
  explicit Phase(adprof_phase p);
  ~Phase();
  Phase(const Phase &) = delete;
  Phase &operator=(const Phase &) = delete;

 private:
  adprof_phase prev_;
};
// Role given to op outputs (activation in forward, adjoint in backward, ...).
adprof_role output_role();
class OutputRole {
 public:
  explicit OutputRole(adprof_role r);
  ~OutputRole();
  OutputRole(const OutputRole &) = delete;
  OutputRole &operator=(const OutputRole &) = delete;

 private:
  adprof_role prev_;
};

}  // namespace adcore
