// The replay plan of a reusable tape (policy reuse_tape; docs/ADCORE.md "Replayed calls").
//
// The first value_and_grad call of a Tape records, beside its normal work, every kernel it runs
// (forward and backward), what each kernel read and wrote, and when each buffer born in the call
// died. build() then plans the buffers (slots whose lifetimes do not overlap share one buffer, as
// in a two-phase graph allocator) and makes the plan's own tensors over them.
//
// A later call with the same signature (arguments' dtype/shape/strides/device, wrt, options)
// still runs f: each op f calls is matched against the next planned forward entry (op, attributes,
// inputs: the same planned value, or an outside tensor of the recorded layout and activity) and,
// when it matches, only runs its kernel into the planned buffer, in its op scope. Backward, which
// no user code drives, is replayed as a straight list of kernel calls. Nothing is allocated, no
// node is made and no shape is inferred. The values are recomputed from the current inputs.
//
// Any mismatch (a different op, input, layout or activity; f returning another value; a planned
// buffer still held by someone) ends the replay: the forward entries already played are recorded
// as tape nodes (materialize), the plan is dropped and the call goes on on the normal path.
#pragma once
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "internal.h"

namespace adcore::detail {

enum class PlanStep : uint8_t { Kernel, InPlace, View, Fill, ScopeBegin, ScopeEnd, Retag };

struct PlanEntry {
  PlanStep step = PlanStep::Kernel;
  OpId op = OpId::leaf;
  bool rec = false;  // forward: the op was recorded on the tape
  bool has_backward = false;
  bool scratch = true;      // the kernel may allocate scratch of its own (see kernel_allocates)
  bool check_excl = false;  // forward: the output buffer is shared, check nobody else holds it
  int32_t out_buffer = -1;  // Kernel, Fill, Retag: the buffer the output (slot) lives in
  adprof_role role = ADPROF_ROLE_FOREIGN;  // Kernel, Fill: the output's role; Retag: the new role
  KernelFn kernel = nullptr;
  uint32_t name_id = 0;
  uint64_t instance = 0;  // op scope instance (rec entries and backward node scopes)
  int32_t node = -1;      // rec entries: tape node id of the output
  int32_t out = -1;       // value written (Kernel, View, Fill); Retag: the slot
  uint32_t in_begin = 0, nin = 0;
  double fill = 0;
  uint32_t attrs = 0;  // index into the plan's attributes (kernels, views)
};

// Layout of a tensor over its storage.
struct PlanMeta {
  int64_t offset = 0;
  Shape shape, strides;
  DType dtype = DType::F32;
};

class Plan {
 public:
  Plan(Tape &tape, std::span<const Tensor> call_args, std::span<const size_t> wrt);
  ~Plan();
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;

  Tape *tape() const { return tape_; }
  bool ready() const { return ready_; }
  bool failed() const { return failed_; }

  // ---- recording (a normal call) ----
  void fail() { failed_ = true; }
  // A kernel ran: Kernel (out is a new buffer) or InPlace (ins[0] written).
  void rec_kernel(PlanStep step, OpId op, KernelFn k, std::span<const Tensor> ins, const Attrs &a,
                  const Tensor *out, bool rec, uint64_t instance);
  void rec_view(OpId op, const Tensor &in, const Attrs &a, const Tensor &view, uint64_t instance);
  // The tape node the last kernel or view entry's output became.
  void rec_node(int32_t node);
  void storage_retagged(StorageImpl &s, adprof_role role);
  void rec_fill(const Tensor &t, double value);
  void rec_scope(bool begin, uint32_t name_id, uint64_t instance);
  void rec_loss(const Tensor &loss);  // f's value; backward follows
  void rec_results(std::span<const Tensor> out);
  void storage_died(StorageImpl &s);
  // After the recording call: plans the buffers (taken from the arena at the first replay).
  bool build();

  // ---- replay ----
  // Same signature as the recording call?
  bool matches(std::span<const Tensor> call_args, std::span<const size_t> wrt) const;
  // Starts a replayed call (the current arena must be the tape's): takes the buffers the first
  // time; planned buffers still held from outside are replaced.
  void begin(std::span<const Tensor> call_args);
  // The next forward entry if it matches (its inputs bound), else nullptr. `grad_enabled`: the
  // grad mode now (with the inputs' activity it decides whether the op would be recorded).
  const PlanEntry *match(PlanStep step, OpId op, std::span<const Tensor> ins, const Attrs &a,
                         const Shape *shape, DType dt, bool grad_enabled,
                         const Tensor *view = nullptr);
  // Runs the entry's kernel (retagging its output buffer to the output's role).
  void execute(const PlanEntry &e);
  // Applies the role changes that followed the last played forward entry.
  void retags() {
    if (cursor_ < fwd_.size() && fwd_[cursor_].step == PlanStep::Retag) drain_retags();
  }
  // The entry's output for f (the plan's own tensor), tagged as the tape node the entry made.
  Tensor produce(const PlanEntry &e);
  void tag_view(const PlanEntry &e, Tensor &view);
  // End of f: every entry played, f returned the planned value, no planned buffer held outside.
  bool finish_forward(const Tensor &loss);
  void play_backward();
  // The gradients, and the value (f's), as tensor objects of the caller's own.
  void results(std::span<Tensor> out, Tensor &loss);
  // Releases the outside tensors bound during the call.
  void end();
  // Divergence: the forward entries played so far become tape nodes.
  void materialize();

 private:
  struct Value {
    int32_t slot = -1, ext = -1;
    PlanMeta meta;
  };
  struct Slot {
    Device *dev;
    size_t bytes;
    adprof_role role;
    DType dtype;
    Shape shape;
    int64_t birth, death = -1;  // event numbers; death -1: survived the call
    int32_t buffer = -1;
  };
  struct Ext {
    Ref<TensorImpl> first;  // recording: the tensor f passed at first use
    int32_t arg = -1;       // index into the call's arguments, or -1
    bool active = false;
    Device *dev = nullptr;
    uint64_t bound_call = 0;
    Tensor bound;  // replay: the tensor bound in this call
    std::vector<int32_t> values;
  };
  struct Buffer {
    Storage storage;
    int32_t first_slot = -1;
    int expected_refs = 1;  // the plan's own references (this one and its values' tensors)
    int nslots = 0;
    int64_t free_at = -1;  // planning: death of the last occupant
    std::vector<int32_t> values;
    std::vector<int32_t> handed;                   // values produced for f (forward kernel outputs)
    adprof_role role = ADPROF_ROLE_FOREIGN;        // the current occupant's role
    adprof_role start_role = ADPROF_ROLE_FOREIGN;  // its role when a call starts (and ends)
  };

  PlanEntry op_entry(PlanStep step, OpId op, const Attrs &a, uint64_t instance);
  int32_t value_of(const Tensor &t);
  int32_t new_slot_value(const Tensor &t);
  int32_t add_value(int32_t slot, int32_t ext, const TensorImpl &t);
  bool bind(int32_t v, const Tensor &t);
  int32_t buffer_of(int32_t v) const;
  bool exclusive(const Buffer &b) const;  // nobody outside holds the buffer or its tensors
  void swap_buffer(Buffer &b);
  static Tensor fresh(const Tensor &v);
  void acquire();
  // A new occupant of the buffer (Kernel, Fill) takes the role the normal path would have
  // allocated it with, and a Retag entry replays a role change. Profiled (or off the CPU): every
  // retag, as the normal path made them. Else only the plan's view of the role changes; the
  // storages keep their roles at the start of a call, which the call ends with again, and end()
  // folds the call's peaks by role (computed once, in build) into adcore's counters.
  void set_role(const PlanEntry &e) {
    if (exact_roles_)
      set_role_exact(e);
    else
      buffers_[static_cast<size_t>(e.out_buffer)].role = e.role;
  }
  void set_role_exact(const PlanEntry &e);
  void drain_retags();
  void sync_roles();      // storages take the roles the plan has for their buffers
  void roles_at_start();  // buffers (and storages) take their roles at the start of a call
  void untag();

  Tape *tape_;
  std::span<const Tensor> args_;  // the tape's call arguments (valid during a call)
  std::vector<PlanMeta> key_args_;
  std::vector<Device *> key_devs_;
  std::vector<size_t> key_wrt_;
  bool ready_ = false, failed_ = false, in_backward_ = false, acquired_ = false;
  bool profiled_ = false;
  bool exact_roles_ = true;  // every role change goes to the storage (profiled, or off the CPU)
  bool backward_played_ = false;
  // Peak live bytes / storages by role over one replayed call, above its start (build()).
  int64_t peak_bytes_[ADPROF_ROLE_COUNT] = {}, peak_count_[ADPROF_ROLE_COUNT] = {};
  int64_t events_ = 0;

  std::vector<PlanEntry> fwd_, bwd_;
  size_t last_entry_ = 0;        // recording: the last kernel or view entry in fwd_
  uint64_t bwd_kernels_ = 0;     // kernel entries in bwd_ (op scope instances to reserve)
  std::vector<int32_t> in_val_;  // per entry input: value id
  std::vector<Attrs> attrs_;     // the entries' op attributes (kept apart: entries stay small)
  std::vector<Value> values_;
  std::vector<Slot> slots_;
  std::vector<StorageImpl *> slot_storage_;  // recording: the storage of each slot
  std::vector<std::vector<int32_t>> slot_values_;
  std::vector<Ext> exts_;
  std::vector<std::pair<Ref<TensorImpl>, int32_t>> view_aliases_;  // recording: views of exts
  std::vector<Buffer> buffers_;
  std::vector<int32_t> shared_;   // buffers of forward outputs that later slots reuse
  std::vector<int32_t> exposed_;  // buffers whose tensors a caller may still hold at a call start
  int32_t loss_ = -1, loss_buffer_ = -1;
  std::vector<int32_t> results_;

  // replay state
  std::vector<Tensor> vals_;                 // the plan's tensors, one per value
  std::vector<Tensor> in_;                   // per entry input (kernel arguments)
  std::vector<int> expected_refs_;           // per value: references the plan holds
  std::vector<std::vector<uint32_t>> uses_;  // per value: its positions in in_
  uint64_t call_ = 0;
  size_t cursor_ = 0;
};

// ---- the replay's per-op path, inline for the dispatcher ----
namespace plan_detail {
inline bool same(const TensorImpl &a, const TensorImpl &b) {
  return a.dtype == b.dtype && a.offset == b.offset && a.shape == b.shape && a.strides == b.strides;
}
inline bool same_attrs(const Attrs &x, const Attrs &y) {
  return std::memcmp(x.s, y.s, sizeof x.s) == 0 && std::memcmp(x.i, y.i, sizeof x.i) == 0 &&
         x.ni == y.ni && x.keepdim == y.keepdim && x.dtype == y.dtype;
}
}  // namespace plan_detail

inline bool Plan::exclusive(const Buffer &b) const {
  // Views f made hold the storage; the plan's tensors f got are the forward outputs (`handed`).
  if (b.storage->refs != b.expected_refs) return false;
  for (int32_t v : b.handed)
    if (vals_[static_cast<size_t>(v)].impl()->refs != expected_refs_[static_cast<size_t>(v)])
      return false;
  return true;
}

inline bool Plan::bind(int32_t v, const Tensor &t) {
  const TensorImpl &ti = *t.impl();
  TensorImpl &vi = *vals_[static_cast<size_t>(v)].impl();
  if (&ti == &vi) return true;  // the plan's own tensor, as produced in this call
  if (!plan_detail::same(vi, ti)) return false;
  const int32_t xi = values_[static_cast<size_t>(v)].ext;
  if (xi < 0) return ti.storage.get() == vi.storage.get();
  Ext &x = exts_[static_cast<size_t>(xi)];
  if (x.bound_call == call_) return ti.storage.get() == x.bound.impl()->storage.get();
  // First use in this call of a tensor from outside: same device, not one of the plan's own
  // buffers, the same argument (or, for any other tensor, the same activity).
  if (ti.storage->plan == this || ti.storage->device != x.dev) return false;
  if (x.arg >= 0) {
    if (static_cast<size_t>(x.arg) >= args_.size() ||
        args_[static_cast<size_t>(x.arg)].impl() != &ti)
      return false;
  } else if (tape_->active(t) != x.active) {
    return false;
  }
  x.bound = t;
  x.bound_call = call_;
  for (int32_t w : x.values) vals_[static_cast<size_t>(w)].impl()->storage = ti.storage;
  return true;
}

inline const PlanEntry *Plan::match(PlanStep step, OpId op, std::span<const Tensor> ins,
                                    const Attrs &a, const Shape *shape, DType dt, bool grad_enabled,
                                    const Tensor *view) {
  retags();
  if (cursor_ >= fwd_.size()) return nullptr;
  const PlanEntry &e = fwd_[cursor_];
  if (e.step != step || e.op != op || e.nin != ins.size() ||
      !plan_detail::same_attrs(attrs_[e.attrs], a))
    return nullptr;
  // Would the normal path record it? (the same rule as the dispatcher's)
  bool rec = false;
  if (grad_enabled && e.has_backward)
    for (const Tensor &t : ins)
      if (tape_->active(t)) {
        rec = true;
        break;
      }
  if (rec != e.rec) return nullptr;
  // (The output's shape and dtype follow from the op, its attributes and its inputs' layouts,
  // all checked here; `shape`/`dt` are the caller's inference of them.)
  (void)shape;
  (void)dt;
  for (size_t i = 0; i < ins.size(); ++i)
    if (!bind(in_val_[e.in_begin + i], ins[i])) return nullptr;
  if (e.check_excl && !exclusive(buffers_[static_cast<size_t>(e.out_buffer)])) return nullptr;
  if (view) {  // the view f made is the planned one
    const TensorImpl &o = *vals_[static_cast<size_t>(e.out)].impl();
    if (!plan_detail::same(o, *view->impl()) || o.storage.get() != view->impl()->storage.get())
      return nullptr;
  }
  ++cursor_;
  return &e;
}

inline void Plan::execute(const PlanEntry &e) {
  if (e.step == PlanStep::Kernel) set_role(e);
  Tensor *out = e.step == PlanStep::InPlace ? &in_[e.in_begin] : &vals_[static_cast<size_t>(e.out)];
  const KernelArgs args{in_.data() + e.in_begin, static_cast<int>(e.nin), out, &attrs_[e.attrs]};
  e.kernel(args);
}

inline Tensor Plan::produce(const PlanEntry &e) {
  // f gets the plan's own tensor of the value (the normal path's fresh output: no gradient flag,
  // tagged as the node the op made). Who else holds it is checked where it matters (begin,
  // shared buffers).
  TensorImpl &o = *vals_[static_cast<size_t>(e.out)].impl();
  o.requires_grad = false;
  o.tape = e.rec ? tape_ : nullptr;
  o.tape_gen = e.rec ? tape_->generation() : 0;
  o.node = e.rec ? e.node : -1;
  retags();
  return vals_[static_cast<size_t>(e.out)];
}

// Called by StorageImpl::destroy for a storage a plan tagged.
void plan_storage_died(StorageImpl &s);
// Called by retag_storage for a storage a plan tagged.
void plan_storage_retagged(StorageImpl &s, adprof_role role);

}  // namespace adcore::detail
