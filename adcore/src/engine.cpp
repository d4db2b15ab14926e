// The tape, the dispatcher and reverse mode. See engine.h; the tape events it emits are the AD
// protocol of profiler/include/adprof/ad_protocol.h (docs/ADCORE.md, "Tape events").
#include "adcore/engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "adcore/optim.h"
#include "adprof/ad_protocol.h"
#include "internal.h"
#include "plan.h"

namespace adcore {
namespace {

thread_local bool g_grad_enabled = true;
thread_local Tape *g_current = nullptr;
thread_local adprof_phase g_phase = ADPROF_PHASE_OTHER;
thread_local adprof_role g_out_role = ADPROF_ROLE_ACTIVATION;
thread_local uint64_t g_untaped_instance = 0;
uint32_t g_next_tape_id = 1;
// Replay plans (plan.h): the one recording the current value_and_grad call, the one replaying it.
thread_local detail::Plan *g_rec = nullptr;
thread_local detail::Plan *g_play = nullptr;
// Calls replayed after this many plans were built on one tape run on the normal path (a tape
// whose calls keep changing signature would otherwise build a plan every call).
constexpr int kMaxPlanBuilds = 8;

constexpr uint64_t kNoNode = ADPROF_AD_NONE;

// The AD protocol's kinds (profiler/include/adprof/ad_protocol.h); interned once.
struct Kinds {
  uint32_t begin, leaf, node, save, release, backward_begin, backward_node, contribution, complete,
      optimizer_step, checkpoint, end, requested, adjoint_sum;
  Kinds()
      : begin(intern(ADPROF_AD_TAPE_BEGIN)),
        leaf(intern(ADPROF_AD_TAPE_LEAF)),
        node(intern(ADPROF_AD_TAPE_NODE)),
        save(intern(ADPROF_AD_TAPE_SAVE)),
        release(intern(ADPROF_AD_TAPE_RELEASE)),
        backward_begin(intern(ADPROF_AD_TAPE_BACKWARD_BEGIN)),
        backward_node(intern(ADPROF_AD_TAPE_BACKWARD_NODE)),
        contribution(intern(ADPROF_AD_TAPE_CONTRIBUTION)),
        complete(intern(ADPROF_AD_TAPE_ADJOINT_COMPLETE)),
        optimizer_step(intern(ADPROF_AD_TAPE_OPTIMIZER_STEP)),
        checkpoint(intern(ADPROF_AD_TAPE_CHECKPOINT)),
        end(intern(ADPROF_AD_TAPE_END)),
        requested(intern(ADPROF_AD_TAPE_REQUESTED)),
        adjoint_sum(intern(ADPROF_AD_TAPE_ADJOINT_SUM)) {}
};
const Kinds &kinds() {
  static const Kinds k;
  return k;
}

// The protocol's policy mask of a tape's options (bit 1 << adprof_ad_policy: on).
uint64_t policy_mask(const Options &o) {
  auto bit = [](bool on, adprof_ad_policy p) { return on ? 1ULL << p : 0ULL; };
  return bit(o.activity_analysis, ADPROF_AD_POLICY_ACTIVITY_ANALYSIS) |
         bit(o.early_release, ADPROF_AD_POLICY_EARLY_RELEASE) |
         bit(o.inplace_accumulation, ADPROF_AD_POLICY_INPLACE_ACCUMULATION) |
         bit(o.fused_optimizer, ADPROF_AD_POLICY_FUSED_OPTIMIZER) |
         bit(o.checkpointing, ADPROF_AD_POLICY_CHECKPOINTING) |
         bit(o.reuse_tape, ADPROF_AD_POLICY_REUSABLE_TAPE) |
         bit(o.native_i32_indices, ADPROF_AD_POLICY_NO_INDEX_WIDENING);
}

// adcore's description of itself (ad.engine, ad.policy), once per process before its first
// tape: each policy with the words an adcore user switches it with (the Options field, and the
// samples' flag), which the profiler's findings and what-if table quote.
void describe_engine(const Options &o) {
  static const bool described = [&] {
    adprof_ad_describe_engine("adcore", "1");
    struct Policy {
      adprof_ad_policy id;
      bool on;
      const char *switch_on, *switch_off;
    };
    const Policy policies[] = {
        {ADPROF_AD_POLICY_ACTIVITY_ANALYSIS, o.activity_analysis,
         "Options::activity_analysis = true (drop --no-activity-analysis)",
         "--no-activity-analysis"},
        {ADPROF_AD_POLICY_EARLY_RELEASE, o.early_release,
         "Options::early_release = true (drop --no-early-release)", "--no-early-release"},
        {ADPROF_AD_POLICY_INPLACE_ACCUMULATION, o.inplace_accumulation,
         "Options::inplace_accumulation = true (drop --no-inplace-accumulation)",
         "--no-inplace-accumulation"},
        {ADPROF_AD_POLICY_FUSED_OPTIMIZER, o.fused_optimizer,
         "Options::fused_optimizer = true with the optimizer passed to backward (drop "
         "--no-fused-optimizer)",
         "--no-fused-optimizer"},
        {ADPROF_AD_POLICY_CHECKPOINTING, o.checkpointing,
         "run the chain's layers through adcore::checkpoint_sequential (sqrt(n) segments) with "
         "Options::checkpointing = true (no --no-checkpoint)",
         "--no-checkpoint"},
        {ADPROF_AD_POLICY_REUSABLE_TAPE, o.reuse_tape,
         "Options::reuse_tape = true, one Tape for the repeated calls (drop --no-reuse-tape)",
         "--no-reuse-tape"},
        {ADPROF_AD_POLICY_NO_INDEX_WIDENING, o.native_i32_indices,
         "Options::native_i32_indices = true: gathers and scatters read i32 indices natively "
         "(drop --widen-indices)",
         "--widen-indices"},
    };
    for (const Policy &p : policies)
      adprof_ad_describe_policy(p.id, p.on ? 1 : 0, p.switch_on, p.switch_off);
    return true;
  }();
  (void)described;
}
template <size_t N>
void annotate(uint32_t kind, const uint64_t (&v)[N]) {
  adprof_annotate(kind, v, static_cast<uint32_t>(N));
}
uint64_t addr(const void *p) { return reinterpret_cast<uint64_t>(p); }

bool unique(const Tensor &t) { return t.impl()->refs == 1 && t.impl()->storage->refs == 1; }

// A tensor the caller may own: contiguous, covering its whole storage, held by nobody else.
Tensor owned(Tensor g) {
  if (unique(g) && g.is_contiguous() && g.impl()->offset == 0 &&
      g.nbytes() == g.impl()->storage->bytes)
    return g;
  return copy(g);
}

}  // namespace

// ---------------- grad mode, phase, output role ----------------
bool grad_enabled() { return g_grad_enabled; }
NoGrad::NoGrad() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGrad::~NoGrad() { g_grad_enabled = prev_; }

adprof_phase current_phase() { return g_phase; }
Phase::Phase(adprof_phase p) : prev_(g_phase) {
  g_phase = p;
  adprof_set_phase(p);
}
Phase::~Phase() {
  g_phase = prev_;
  adprof_set_phase(prev_);
}
adprof_role output_role() { return g_out_role; }
OutputRole::OutputRole(adprof_role r) : prev_(g_out_role) { g_out_role = r; }
OutputRole::~OutputRole() { g_out_role = prev_; }

namespace {
// Grad mode on again inside a NoGrad region (checkpoint recomputation).
class EnableGrad {
 public:
  EnableGrad() : prev_(g_grad_enabled) { g_grad_enabled = true; }
  ~EnableGrad() { g_grad_enabled = prev_; }
  EnableGrad(const EnableGrad &) = delete;
  EnableGrad &operator=(const EnableGrad &) = delete;

 private:
  bool prev_;
};
}  // namespace

// ---------------- dispatcher ----------------
namespace detail {

// What the tape-private parts of a replay need.
struct TapeAccess {
  // The replayed call diverged from its plan: the entries played so far become tape nodes, the
  // plan is dropped, and the call goes on on the normal path.
  static void abandon_replay() {
    Plan *p = g_play;
    g_play = nullptr;
    Tape &t = *p->tape();
    try {
      p->materialize();
    } catch (...) {
      p->end();
      t.plan_.reset();
      throw;
    }
    p->end();
    t.plan_.reset();
  }
};

uint64_t untaped_instance() { return (1ULL << 63) | ++g_untaped_instance; }
uint64_t untaped_instances(uint64_t n) {
  const uint64_t first = g_untaped_instance + 1;
  g_untaped_instance += n;
  return (1ULL << 63) | first;
}

namespace {
bool recordable(const Tape &tape, OpId op, std::span<const Tensor> ins) {
  if (!g_grad_enabled || !op_def(op).backward) return false;
  for (const Tensor &t : ins)
    if (tape.active(t)) return true;
  return false;
}
}  // namespace

Tensor run(OpId op, std::span<const Tensor> ins, const Attrs &a, const Shape &shape, DType dt) {
  if (Plan *p = g_play; p && p->tape() == g_current) {  // (CallScope made it current)
    if (const PlanEntry *e = p->match(PlanStep::Kernel, op, ins, a, &shape, dt, g_grad_enabled)) {
      const bool other = g_phase == ADPROF_PHASE_OTHER;
      if (other) adprof_set_phase(ADPROF_PHASE_FORWARD);
      Tensor out;
      {
        adprof::OpScope scope(e->name_id, e->rec ? e->instance : untaped_instance());
        if (e->scratch) {
          adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);  // the kernel's own scratch
          p->execute(*e);
        } else {
          p->execute(*e);
        }
        out = p->produce(*e);
      }
      if (other) adprof_set_phase(ADPROF_PHASE_OTHER);
      return out;
    }
    TapeAccess::abandon_replay();
  }
  Device &dev = ins.empty() ? default_device() : ins[0].device();
  for (const Tensor &t : ins)
    if (&t.device() != &dev)
      throw std::invalid_argument(std::string("op ") + op_name(op) + ": inputs on different " +
                                  "devices (" + dev.name() + " and " + t.device().name() + ")");
  KernelFn k = dev.kernel(op);
  if (!k)
    throw std::runtime_error(std::string("op ") + op_name(op) + " not supported on " + dev.name());
  Tape &tape = Tape::current();
  const bool rec = recordable(tape, op, ins);
  const bool other = g_phase == ADPROF_PHASE_OTHER;
  if (other) adprof_set_phase(ADPROF_PHASE_FORWARD);
  Tensor out;
  {
    const uint64_t instance = rec ? tape.size() : (1ULL << 63) | ++g_untaped_instance;
    adprof::OpScope scope(op_name_id(op), instance);
    adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
    out = empty(shape, dt, g_out_role, dev);
    if (op_def(op).duplicates_input)
      retag_storage(*out.impl()->storage, ADPROF_ROLE_DUPLICATE, ins[0].storage_ptr());
    KernelArgs args{ins.data(), static_cast<int>(ins.size()), &out, &a};
    k(args);
    Plan *recording = g_rec && g_rec->tape() == &tape ? g_rec : nullptr;
    if (recording) recording->rec_kernel(PlanStep::Kernel, op, k, ins, a, &out, rec, instance);
    if (rec) tape.record(op, ins, a, out);
    if (recording && rec) recording->rec_node(out.impl()->node);
    if (tape.options().hash_contents && profiled()) {
      adprof_content_hash(out.storage_ptr(), content_hash(out));
      // Inputs too (leaves and data no op made), when they cover their whole storage: a copy of
      // an input is then found byte-identical to it.
      for (const Tensor &t : ins)
        if (t.is_contiguous() && t.nbytes() == t.impl()->storage->bytes)
          adprof_content_hash(t.storage_ptr(), content_hash(t));
    }
  }
  if (other) adprof_set_phase(ADPROF_PHASE_OTHER);
  return out;
}

Tensor run_view(OpId op, const Tensor &in, const Attrs &a, Tensor view) {
  Tape &tape = Tape::current();
  const bool rec = g_grad_enabled && tape.active(in);
  if (Plan *p = g_play; p && p->tape() == &tape) {
    if (!rec) return view;  // not on the tape: nothing was planned for it either
    if (const PlanEntry *e = p->match(PlanStep::View, op, std::span<const Tensor>(&in, 1), a,
                                      nullptr, in.dtype(), true, &view)) {
      adprof::OpScope scope(e->name_id, e->instance);
      p->tag_view(*e, view);
      return view;
    }
    TapeAccess::abandon_replay();
  }
  if (rec) {
    const uint64_t instance = tape.size();
    adprof::OpScope scope(op_name_id(op), instance);
    Plan *recording = g_rec && g_rec->tape() == &tape ? g_rec : nullptr;
    if (recording) recording->rec_view(op, in, a, view, instance);
    tape.record(op, std::span<const Tensor>(&in, 1), a, view);
    if (recording) recording->rec_node(view.impl()->node);
  }
  return view;
}

void run_inplace(OpId op, std::span<const Tensor> ins, const Attrs &a) {
  if (Plan *p = g_play; p && p->tape() == g_current) {  // (CallScope made it current)
    if (const PlanEntry *e =
            p->match(PlanStep::InPlace, op, ins, a, nullptr, ins[0].dtype(), g_grad_enabled)) {
      adprof::OpScope scope(e->name_id, untaped_instance());
      if (e->scratch) {
        adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
        p->execute(*e);
      } else {
        p->execute(*e);
      }
      p->retags();
      return;
    }
    TapeAccess::abandon_replay();
  }
  Device &dev = ins[0].device();
  for (const Tensor &t : ins)
    if (&t.device() != &dev)
      throw std::invalid_argument(std::string("op ") + op_name(op) + ": inputs on different " +
                                  "devices (" + dev.name() + " and " + t.device().name() + ")");
  KernelFn k = dev.kernel(op);
  if (!k)
    throw std::runtime_error(std::string("op ") + op_name(op) + " not supported on " + dev.name());
  {
    adprof::OpScope scope(op_name_id(op), (1ULL << 63) | ++g_untaped_instance);
    adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
    Tensor out = ins[0];
    KernelArgs args{ins.data(), static_cast<int>(ins.size()), &out, &a};
    k(args);
  }
  if (g_rec && g_rec->tape() == &Tape::current())
    g_rec->rec_kernel(PlanStep::InPlace, op, k, ins, a, nullptr, false, 0);
}

}  // namespace detail

// ---------------- Node, Tape ----------------
void Node::clear() {
  in_node.clear();
  in_meta.clear();
  saved.clear();
  saved_out = Tensor();
  leaf = Tensor();
  segment = nullptr;
  requested = false;
  released = false;
  attrs = Attrs{};
}

Tape::Tape(Options opts) : opts_(opts), id_(g_next_tape_id++) {
  if (opts_.reuse_tape) arena_ = Ref<Arena>(new Arena());
}

Tape::~Tape() {
  plan_.reset();
  reset();
  for (Node *n : nodes_) delete n;
  if (arena_) arena_->set_open(false);
  if (g_current == this) g_current = nullptr;
}

void Tape::set_options(const Options &o) {
  plan_.reset();
  plan_builds_ = 0;
  reset();
  opts_ = o;
  if (opts_.reuse_tape && !arena_) arena_ = Ref<Arena>(new Arena());
  if (!opts_.reuse_tape && arena_) {
    arena_->set_open(false);
    arena_.reset();
  }
}

Tape &Tape::thread_default() {
  thread_local Tape t;
  return t;
}
Tape &Tape::current() { return g_current ? *g_current : thread_default(); }

TapeScope::TapeScope(Tape &t) : prev_(g_current) { g_current = &t; }
TapeScope::~TapeScope() { g_current = prev_; }

const Options &current_options() { return Tape::current().options(); }
void set_default_options(const Options &o) { Tape::thread_default().set_options(o); }

Node &Tape::new_node(OpId op) {
  if (n_ == nodes_.size()) nodes_.push_back(new Node());
  Node &n = *nodes_[n_];
  n.id = static_cast<int32_t>(n_);
  n.op = op;
  ++n_;
  if (n_ == 1 && profiled()) {
    describe_engine(opts_);
    annotate(kinds().begin, {id_, gen_, policy_mask(opts_)});
  }
  return n;
}

int32_t Tape::leaf_node(const Tensor &t) {
  TensorImpl *i = t.impl();
  if (i->tape == this && i->tape_gen == gen_ && i->node >= 0) return i->node;
  Node &n = new_node(OpId::leaf);
  n.leaf = t;
  n.out_meta = {t.shape(), t.dtype()};
  i->tape = this;
  i->tape_gen = gen_;
  i->node = n.id;
  if (profiled())
    annotate(kinds().leaf, {static_cast<uint64_t>(n.id), addr(t.storage_ptr()), t.nbytes(),
                            t.requires_grad() ? 1u : 0u});
  return n.id;
}

namespace {
void save_tensor(Node &n, Tensor &slot, const Tensor &t, uint64_t which, uint64_t users) {
  slot = t;
  StorageImpl &s = *t.impl()->storage;
  if (s.role == ADPROF_ROLE_ACTIVATION || s.role == ADPROF_ROLE_FORWARD_CACHE) {
    if (s.saved++ == 0) retag_storage(s, ADPROF_ROLE_FORWARD_CACHE);
  }
  if (profiled())
    annotate(kinds().save, {static_cast<uint64_t>(n.id), addr(s.data), s.bytes, which, users});
}
void unsave_tensor(Node &n, Tensor &slot) {
  if (!slot.defined()) return;
  StorageImpl &s = *slot.impl()->storage;
  if (profiled()) annotate(kinds().release, {static_cast<uint64_t>(n.id), addr(s.data)});
  if (s.role == ADPROF_ROLE_FORWARD_CACHE && s.saved > 0 && --s.saved == 0) {
    const bool dies = s.refs == 1 && slot.impl()->refs == 1;
    if (!dies) retag_storage(s, ADPROF_ROLE_ACTIVATION);
  }
  slot = Tensor();
}
}  // namespace

void Tape::record(OpId op, std::span<const Tensor> ins, const Attrs &a, Tensor &out) {
  // Leaves first, so that every input's node id is below this node's.
  for (const Tensor &t : ins)
    if (active(t)) leaf_node(t);
  Node &n = new_node(op);
  n.attrs = a;
  const OpDef &d = op_def(op);
  const size_t k = ins.size();
  n.in_node.resize(k);
  n.in_meta.resize(k);
  n.saved.resize(k);
  uint8_t need = 0;
  for (size_t i = 0; i < k; ++i) {
    const bool act = active(ins[i]);
    n.in_node[i] = act ? ins[i].impl()->node : -1;
    n.in_meta[i] = {ins[i].shape(), ins[i].dtype()};
    if (act || !opts_.activity_analysis) need |= d.save_for_grad[std::min<size_t>(i, 3)];
  }
  if (op == OpId::checkpoint) need = 0x0f;
  // For the what-if replay: which inputs' gradients need a saved slot (bit i: input i).
  auto users = [&](uint8_t bit) {
    uint64_t m = 0;
    for (size_t j = 0; j < k && j < 64; ++j)
      if (op == OpId::checkpoint || (d.save_for_grad[std::min<size_t>(j, 3)] & bit)) m |= 1ULL << j;
    return m;
  };
  for (size_t i = 0; i < k; ++i)
    if ((need >> std::min<size_t>(i, 3)) & 1u)
      save_tensor(n, n.saved[i], ins[i], i,
                  profiled() ? users(static_cast<uint8_t>(1u << std::min<size_t>(i, 3))) : 0);
  if (need & kSaveOut)
    save_tensor(n, n.saved_out, out, ADPROF_AD_SAVE_OUTPUT, profiled() ? users(kSaveOut) : 0);
  n.out_meta = {out.shape(), out.dtype()};
  TensorImpl *oi = out.impl();
  oi->tape = this;
  oi->tape_gen = gen_;
  oi->node = n.id;
  if (profiled()) {
    uint64_t v[32];
    uint32_t c = 0;
    v[c++] = static_cast<uint64_t>(n.id);
    v[c++] = op_name_id(op);
    v[c++] = addr(out.storage_ptr());
    v[c++] = out.nbytes();
    v[c++] = k;
    for (size_t i = 0; i < k && c < 32; ++i)
      v[c++] = n.in_node[i] >= 0 ? static_cast<uint64_t>(n.in_node[i]) : kNoNode;
    adprof_annotate(kinds().node, v, c);
  }
}

void Tape::record_checkpoint(SegmentFn fn, std::span<const Tensor> ins, Tensor &out) {
  if (g_rec && g_rec->tape() == this) g_rec->fail();  // segments recompute on nested tapes
  {
    adprof::OpScope scope(op_name_id(OpId::checkpoint), size());
    record(OpId::checkpoint, ins, Attrs{}, out);
  }
  Node &n = *nodes_[n_ - 1];
  n.segment = std::move(fn);
  if (profiled())
    annotate(kinds().checkpoint,
             {static_cast<uint64_t>(n.id), ins.size(), addr(out.storage_ptr())});
}

void Tape::release_node(Node &n) {
  if (n.released) return;
  n.released = true;
  for (Tensor &s : n.saved) unsave_tensor(n, s);
  unsave_tensor(n, n.saved_out);
}

void Tape::reset() {
  for (size_t i = 0; i < n_; ++i) {
    release_node(*nodes_[i]);
    nodes_[i]->clear();
  }
  if (n_ && profiled()) annotate(kinds().end, {id_, gen_});
  n_ = 0;
  ++gen_;
  if (!opts_.reuse_tape) {
    for (Node *n : nodes_) delete n;
    nodes_.clear();
    nodes_.shrink_to_fit();
    adj_.clear();
    adj_.shrink_to_fit();
    pending_.clear();
    pending_.shrink_to_fit();
  }
}

// ---------------- accumulation: the ONE place gradients meet ----------------
void Tape::accumulate(int32_t target, int32_t from, Tensor c) {
  const size_t t = static_cast<size_t>(target);
  const uint64_t src = addr(c.storage_ptr());
  if (!opts_.inplace_accumulation) {
    // Naive: every contribution is materialised as its own accumulation buffer; all are summed
    // when the adjoint is needed (finish_adjoint).
    Tensor m;
    {
      OutputRole role(ADPROF_ROLE_ACCUMULATION);
      m = copy(c);
    }
    if (profiled())
      annotate(kinds().contribution,
               {static_cast<uint64_t>(target), static_cast<uint64_t>(from), addr(m.storage_ptr()),
                m.nbytes(), ADPROF_AD_CONTRIBUTION_DEFERRED, src});
    pending_[t].push_back(std::move(m));
    return;
  }
  Tensor &cur = adj_[t];
  uint64_t mode;
  if (!cur.defined()) {
    cur = std::move(c);  // adopt (it may be shared: then the next contribution copies)
    mode = ADPROF_AD_CONTRIBUTION_ADOPTED;
  } else if (unique(cur) && cur.is_contiguous() && cur.shape() == c.shape()) {
    add_inplace(cur, c);
    mode = ADPROF_AD_CONTRIBUTION_INPLACE;
  } else {
    cur = add(cur, c);
    mode = ADPROF_AD_CONTRIBUTION_OUT_OF_PLACE;
  }
  if (profiled())
    annotate(kinds().contribution, {static_cast<uint64_t>(target), static_cast<uint64_t>(from),
                                    addr(cur.storage_ptr()), cur.nbytes(), mode, src});
}

void Tape::finish_adjoint(int32_t id) {
  auto &p = pending_[static_cast<size_t>(id)];
  if (p.empty()) return;
  Tensor &cur = adj_[static_cast<size_t>(id)];
  if (cur.defined()) p.push_back(std::move(cur));
  if (p.size() == 1) {
    cur = std::move(p[0]);
    retag_storage(*cur.impl()->storage, ADPROF_ROLE_ADJOINT);
  } else {
    cur = add_n(std::span<const Tensor>(p.data(), p.size()));
  }
  if (profiled())
    annotate(kinds().adjoint_sum, {static_cast<uint64_t>(id), addr(cur.storage_ptr()), cur.nbytes(),
                                   static_cast<uint64_t>(p.size())});
  p.clear();
}

// ---------------- reverse sweep ----------------
// A node's adjoint is complete: to where it goes (a requested result, the naive engine's
// unrequested ones, the optimizer, the leaf's .grad) or nowhere.
void Tape::deliver(int32_t id, Optimizer *opt, bool to_leaf_grads) {
  Node &n = *nodes_[static_cast<size_t>(id)];
  finish_adjoint(id);
  Tensor g = std::move(adj_[static_cast<size_t>(id)]);
  if (!g.defined()) return;
  if (profiled())
    annotate(kinds().complete, {static_cast<uint64_t>(id), addr(g.storage_ptr()), g.nbytes()});
  if (n.requested) {
    hand_over_result(id, std::move(g));
    return;
  }
  if (!opts_.activity_analysis && n.op == OpId::leaf &&
      !(to_leaf_grads && n.leaf.requires_grad())) {
    // The naive engine returns a gradient for every input (as gradient(f, A, x) does); the
    // caller drops the ones it did not ask for when the call ends.
    unrequested_.push_back(std::move(g));
    return;
  }
  if (!to_leaf_grads || n.op != OpId::leaf || !n.leaf.requires_grad()) return;
  if (opt && opts_.fused_optimizer && step_fused(id, n, *opt, g)) return;  // the gradient dies
  add_to_leaf_grad(n, g);
}

// The gradient is handed over (owned() copies it only if someone else holds it); a leaf asked
// for twice gets a copy the second time.
void Tape::hand_over_result(int32_t id, Tensor g) {
  size_t first = result_node_.size();
  for (size_t k = 0; k < result_node_.size(); ++k) {
    if (result_node_[k] != id) continue;
    if (first == result_node_.size()) {
      first = k;
      results_[k] = owned(std::move(g));
    } else {
      results_[k] = copy(results_[first]);
    }
  }
}

// Policy 4: the optimizer steps the leaf with its gradient at once. False when the optimizer
// does not hold the leaf.
bool Tape::step_fused(int32_t id, Node &n, Optimizer &opt, const Tensor &g) {
  const int k = opt.find(n.leaf);
  if (k < 0) return false;
  if (profiled())
    annotate(kinds().optimizer_step, {static_cast<uint64_t>(id), addr(n.leaf.storage_ptr())});
  opt.update(static_cast<size_t>(k), g);
  return true;
}

void Tape::add_to_leaf_grad(Node &n, const Tensor &g) {
  TensorImpl *li = n.leaf.impl();
  if (!li->grad) {
    Tensor o = owned(g);
    li->grad = Ref<TensorImpl>(o.impl());
  } else {
    Tensor cur(li->grad);
    add_inplace(cur, g);
  }
}

// Activity (policy 1): only nodes on a path to a requested gradient get adjoints and run
// backward.
void Tape::mark_useful(int32_t root, bool to_leaf_grads) {
  for (size_t i = 0; i <= static_cast<size_t>(root); ++i) {
    Node &nd = *nodes_[i];
    bool u = nd.requested || (to_leaf_grads && nd.op == OpId::leaf && nd.leaf.requires_grad());
    for (int32_t j : nd.in_node)
      if (j >= 0 && useful_[static_cast<size_t>(j)]) u = true;
    useful_[i] = u ? 1 : 0;
  }
}

// Reachability from the root and dependency counts (consumers still to run).
void Tape::count_dependencies(int32_t root) {
  reach_[static_cast<size_t>(root)] = 1;
  for (int32_t i = root; i >= 0; --i) {
    if (!reach_[static_cast<size_t>(i)] || !useful_[static_cast<size_t>(i)]) continue;
    for (int32_t j : nodes_[static_cast<size_t>(i)]->in_node) {
      if (j < 0 || !useful_[static_cast<size_t>(j)]) continue;
      reach_[static_cast<size_t>(j)] = 1;
      ++deps_[static_cast<size_t>(j)];
    }
  }
}

// The profiler's record of the sweep about to run: its root, policies and flags, then the
// requested nodes (32 to an annotation).
void Tape::annotate_backward_begin(int32_t root, Optimizer *opt, bool to_leaf_grads) {
  const uint64_t flags = (to_leaf_grads ? ADPROF_AD_BACKWARD_TO_LEAF_GRADS : 0u) |
                         (!call_args_.empty() ? ADPROF_AD_BACKWARD_IN_CALL : 0u) |
                         (opt ? ADPROF_AD_BACKWARD_OPTIMIZER : 0u);
  annotate(kinds().backward_begin, {static_cast<uint64_t>(root), n_, policy_mask(opts_), flags});
  uint64_t v[32];
  uint32_t c = 0;
  for (int32_t id : result_node_) {
    if (id < 0) continue;
    v[c++] = static_cast<uint64_t>(id);
    if (c == 32) {
      adprof_annotate(kinds().requested, v, c);
      c = 0;
    }
  }
  if (c) adprof_annotate(kinds().requested, v, c);
}

// The root's adjoint: `seed`, or ones of the root's shape.
void Tape::seed_root(const Tensor &root, int32_t r, const Tensor *seed) {
  if (seed) {
    adj_[static_cast<size_t>(r)] = *seed;
  } else {
    DeviceScope on_root(root.device());
    adj_[static_cast<size_t>(r)] = full(root.shape(), 1.0, root.dtype(), ADPROF_ROLE_ADJOINT);
    if (g_rec && g_rec->tape() == this) g_rec->rec_fill(adj_[static_cast<size_t>(r)], 1.0);
  }
}

// Node i's backward with its complete adjoint `g`: the contributions to its inputs that need
// one, into gin_ (needs_ says which).
void Tape::backward_node(int32_t i, Node &nd, const Tensor &g) {
  const size_t k = nd.in_node.size();
  adprof::OpScope scope(op_name_id(nd.op), static_cast<uint64_t>(i));
  adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
  detail::Plan *recording = g_rec && g_rec->tape() == this ? g_rec : nullptr;
  if (recording) recording->rec_scope(true, op_name_id(nd.op), static_cast<uint64_t>(i));
  if (profiled()) annotate(kinds().backward_node, {static_cast<uint64_t>(i)});
  std::span<Tensor> gin(gin_.data(), k);
  std::span<const uint8_t> needs(needs_.data(), k);
  if (nd.op == OpId::checkpoint) {
    run_checkpoint_backward(nd, g, gin, needs);
  } else {
    BackwardCtx ctx{nd, g, gin, needs};
    op_def(nd.op).backward(ctx);
  }
  if (recording) recording->rec_scope(false, 0, 0);
}

// Node i's contributions (gin_) into its inputs' adjoints; a leaf whose consumers have all run
// gets its gradient delivered.
void Tape::pass_contributions(int32_t i, Node &nd, Optimizer *opt, bool to_leaf_grads) {
  for (size_t j = 0; j < nd.in_node.size(); ++j) {
    if (!needs_[j]) {
      gin_[j] = Tensor();
      continue;
    }
    const int32_t in = nd.in_node[j];
    if (gin_[j].defined()) accumulate(in, i, std::move(gin_[j]));
    gin_[j] = Tensor();
    if (--deps_[static_cast<size_t>(in)] == 0 && nodes_[static_cast<size_t>(in)]->op == OpId::leaf)
      deliver(in, opt, to_leaf_grads);
  }
}

void Tape::run_backward(const Tensor &root, Optimizer *opt, bool to_leaf_grads,
                        const Tensor *seed) {
  if (!seed && root.numel() != 1)
    throw std::invalid_argument("backward: root must have one element");
  if (!active(root)) throw std::invalid_argument("backward: root does not depend on the tape");
  Phase phase(ADPROF_PHASE_BACKWARD);
  ArenaScope arena(arena_ ? arena_.get() : current_arena());
  NoGrad ng;
  OutputRole orole(ADPROF_ROLE_ADJOINT);
  const int32_t r = root.impl()->tape == this && root.impl()->tape_gen == gen_ ? root.impl()->node
                                                                               : leaf_node(root);
  const size_t n = n_;
  adj_.resize(n);
  if (pending_.size() < n) pending_.resize(n);
  deps_.assign(n, 0);
  useful_.assign(n, 1);
  reach_.assign(n, 0);
  if (opts_.activity_analysis) mark_useful(r, to_leaf_grads);
  count_dependencies(r);
  if (profiled()) annotate_backward_begin(r, opt, to_leaf_grads);
  seed_root(root, r, seed);
  if (nodes_[static_cast<size_t>(r)]->op == OpId::leaf) deliver(r, opt, to_leaf_grads);

  for (int32_t i = r; i >= 0; --i) {
    const size_t ui = static_cast<size_t>(i);
    Node &nd = *nodes_[ui];
    if (nd.op == OpId::leaf || !reach_[ui] || !useful_[ui]) continue;
    finish_adjoint(i);
    Tensor g = std::move(adj_[ui]);
    if (nd.requested && g.defined()) {
      for (size_t k = 0; k < result_node_.size(); ++k)
        if (result_node_[k] == i) results_[k] = owned(g);
    }
    const size_t k = nd.in_node.size();
    gin_.resize(k);
    needs_.resize(k);
    for (size_t j = 0; j < k; ++j) {
      const int32_t in = nd.in_node[j];
      needs_[j] = in >= 0 && useful_[static_cast<size_t>(in)] ? 1 : 0;
    }
    if (g.defined()) backward_node(i, nd, g);
    g = Tensor();
    if (opts_.early_release) release_node(nd);
    pass_contributions(i, nd, opt, to_leaf_grads);
  }
  for (size_t i = 0; i < n; ++i) adj_[i] = Tensor();
}

void Tape::run_checkpoint_backward(Node &n, const Tensor &g, std::span<Tensor> gin,
                                   std::span<const uint8_t> needs) {
  // Recompute the segment on a nested tape (same policies, no arena of its own) in the backward
  // phase; the recomputed values are activations / forward caches again. Then differentiate
  // the nested tape with `g` as the seed.
  if (g_rec && g_rec->tape() == this) g_rec->fail();
  Options o = opts_;
  o.reuse_tape = false;
  Tape inner(o);
  std::vector<Tensor> args(n.saved.size()), wrt, grads;
  std::vector<size_t> slot;
  TapeScope ts(inner);
  Tensor y;
  {
    EnableGrad eg;
    OutputRole role(ADPROF_ROLE_ACTIVATION);
    for (size_t i = 0; i < args.size(); ++i) {
      args[i] = n.saved[i].detach();
      if (needs[i]) {
        args[i].set_requires_grad(true);
        wrt.push_back(args[i]);
        slot.push_back(i);
      }
    }
    y = n.segment(std::span<const Tensor>(args.data(), args.size()));
  }
  if (wrt.empty() || !inner.active(y)) return;
  grads.resize(wrt.size());
  inner.gradients_impl(y, &g, wrt, grads);
  for (size_t k = 0; k < slot.size(); ++k) gin[slot[k]] = std::move(grads[k]);
}

void Tape::gradients(const Tensor &root, std::span<const Tensor> wrt, std::span<Tensor> out) {
  gradients_impl(root, nullptr, wrt, out);
}

void Tape::gradients_impl(const Tensor &root, const Tensor *seed, std::span<const Tensor> wrt,
                          std::span<Tensor> out) {
  if (wrt.size() != out.size()) throw std::invalid_argument("gradients: wrt/out size mismatch");
  result_node_.resize(wrt.size());
  results_ = out;
  for (size_t k = 0; k < wrt.size(); ++k) {
    out[k] = Tensor();
    const Tensor &t = wrt[k];
    int32_t id = -1;
    if (t.impl()->tape == this && t.impl()->tape_gen == gen_ && t.impl()->node >= 0)
      id = t.impl()->node;
    if (id >= 0) nodes_[static_cast<size_t>(id)]->requested = true;
    result_node_[k] = id;
  }
  if (active(root)) run_backward(root, nullptr, false, seed);
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (!out[k].defined()) {
      OutputRole role(ADPROF_ROLE_ADJOINT);
      DeviceScope on_wrt(wrt[k].device());
      out[k] = zeros(wrt[k].shape(), wrt[k].dtype(), ADPROF_ROLE_ADJOINT);
      if (g_rec && g_rec->tape() == this) g_rec->rec_fill(out[k], 0.0);
    }
  }
  results_ = {};
  result_node_.clear();
  unrequested_.clear();
  reset();
}

void Tape::backward(const Tensor &root, Optimizer *opt) {
  result_node_.clear();
  run_backward(root, opt, true, nullptr);
  unrequested_.clear();
  reset();
  if (opt && !opts_.fused_optimizer) opt->step();
}

std::vector<Tensor> grad(const Tensor &root, std::span<const Tensor> wrt) {
  std::vector<Tensor> out(wrt.size());
  Tape::current().gradients(root, wrt, out);
  return out;
}

// ---------------- value_and_grad ----------------
bool Tape::has_plan() const { return plan_ && plan_->ready(); }

Tape::CallScope::CallScope(Tape &t, std::span<const Tensor> args, std::span<const size_t> wrt,
                           std::span<Tensor> grads_out)
    : t_(t),
      wrt_(wrt),
      out_(grads_out),
      prev_tape_(g_current),
      arena_(t.arena_.get()),
      prev_phase_(g_phase),
      prev_rec_(g_rec),
      prev_play_(g_play) {
  if (wrt.size() != grads_out.size())
    throw std::invalid_argument("value_and_grad: wrt/grads_out size mismatch");
  for (Tensor &g : grads_out) g = Tensor();  // their buffers go back to the arena
  t.reset();
  g_current = &t;
  g_rec = g_play = nullptr;
  t.call_args_.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    bool act = !t.opts_.activity_analysis && is_floating(args[i].dtype());
    for (size_t w : wrt)
      if (w == i) act = true;
    Tensor a = args[i].detach();
    if (act) a.set_requires_grad(true);
    t.call_args_[i] = std::move(a);
  }
  g_phase = ADPROF_PHASE_FORWARD;
  adprof_set_phase(ADPROF_PHASE_FORWARD);
  // Replay plan: replay a ready plan of this signature; else record one (a plan that could not be
  // built for this signature keeps the calls on the normal path). Under the profiler every call
  // takes the normal path: its allocations, retags and tape annotations are what adprof's
  // analyses and what-if predictions read (docs/ADCORE.md, "Replayed calls").
  if (!t.opts_.reuse_tape || t.opts_.hash_contents || profiled()) return;
  const std::span<const Tensor> call(t.call_args_.data(), t.call_args_.size());
  if (t.plan_ && t.plan_->matches(call, wrt)) {
    if (!t.plan_->ready()) return;
    t.plan_->begin(call);
    g_play = t.plan_.get();
    mode_ = kReplay;
  } else if (t.plan_builds_ < kMaxPlanBuilds) {
    t.plan_.reset();  // a plan of another signature: its buffers go back to the arena
    t.plan_ = std::make_unique<detail::Plan>(t, call, wrt);
    ++t.plan_builds_;
    g_rec = t.plan_.get();
    mode_ = kRecord;
  }
}

Tape::CallScope::~CallScope() {
  const bool unwinding = !finished_;  // f or backward threw
  if (mode_ == kReplay && g_play) {
    g_play->end();
    if (unwinding) t_.plan_.reset();
  }
  t_.call_args_.clear();
  t_.reset();
  if (mode_ == kRecord && g_rec && g_rec == t_.plan_.get()) {
    bool ok = false;
    if (!unwinding) {
      try {
        ok = t_.plan_->build();
      } catch (...) {
        ok = false;
      }
    }
    // A plan that failed is kept (as "this signature is not planned") unless f threw.
    if (!ok && (unwinding || !t_.plan_->failed())) t_.plan_.reset();
  }
  g_rec = prev_rec_;
  g_play = prev_play_;
  g_current = prev_tape_;
  g_phase = prev_phase_;
  adprof_set_phase(prev_phase_);
}

void Tape::CallScope::finish(Tensor &loss) {
  if (mode_ == kReplay && g_play) {
    detail::Plan &p = *g_play;
    if (p.finish_forward(loss)) {
      {
        Phase phase(ADPROF_PHASE_BACKWARD);
        p.play_backward();
      }
      p.results(out_, loss);
      ++t_.replayed_calls_;
      finished_ = true;
      return;
    }
    detail::TapeAccess::abandon_replay();
  }
  detail::Plan *recording = g_rec && g_rec == t_.plan_.get() ? g_rec : nullptr;
  if (recording) recording->rec_loss(loss);
  // Leaves for every wrt argument (an argument f did not use gets zeros).
  t_.wrt_args_.resize(wrt_.size());
  for (size_t k = 0; k < wrt_.size(); ++k) t_.wrt_args_[k] = t_.call_args_[wrt_[k]];
  t_.gradients(loss, std::span<const Tensor>(t_.wrt_args_.data(), t_.wrt_args_.size()), out_);
  if (recording) recording->rec_results(out_);
  for (Tensor &w : t_.wrt_args_) w = Tensor();
  finished_ = true;
}

}  // namespace adcore
