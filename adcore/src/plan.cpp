// The replay plan of a reusable tape: see plan.h and docs/ADCORE.md ("Replayed calls").
#include "plan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace adcore::detail {
namespace {

PlanMeta meta_of(const TensorImpl &t) { return {t.offset, t.shape, t.strides, t.dtype}; }
bool same(const PlanMeta &m, const TensorImpl &t) {
  return m.dtype == t.dtype && m.offset == t.offset && m.shape == t.shape && m.strides == t.strides;
}
void set_plan(StorageImpl &s, void *plan, int32_t slot) {
  s.plan = plan;
  s.plan_slot = slot;
}
constexpr int32_t kPlannedBuffer = -2;

// Does the op's kernel on `dev` allocate scratch of its own (with the op's workspace role)? The
// op table says so for the CPU kernels (its `scratch` column: never for the elementwise kernels
// and the sum/mean/max reductions), so a replayed call runs those without the role scope, which
// could only tag such allocations; every other kernel (BLAS, index, nn, other reductions, any
// other device) keeps it.
bool kernel_allocates(OpId op, const Device &dev) {
  return dev.kind() != DeviceKind::CPU || op_def(op).scratch;
}

}  // namespace

void plan_storage_died(StorageImpl &s) {
  if (s.plan_slot >= 0) static_cast<Plan *>(s.plan)->storage_died(s);
}
void plan_storage_retagged(StorageImpl &s, adprof_role role) {
  static_cast<Plan *>(s.plan)->storage_retagged(s, role);
}

Plan::Plan(Tape &tape, std::span<const Tensor> call_args, std::span<const size_t> wrt)
    : tape_(&tape), args_(call_args), key_wrt_(wrt.begin(), wrt.end()) {
  for (const Tensor &a : call_args) {
    key_args_.push_back(meta_of(*a.impl()));
    key_devs_.push_back(&a.device());
  }
}

Plan::~Plan() { untag(); }

void Plan::untag() {
  // Storages of the recording call still alive, and the planned buffers, forget the plan.
  for (StorageImpl *s : slot_storage_)
    if (s && s->plan == this) set_plan(*s, nullptr, -1);
  slot_storage_.clear();
  for (Buffer &b : buffers_)
    if (b.storage && b.storage->plan == this) set_plan(*b.storage, nullptr, -1);
}

// ---------------- recording ----------------
int32_t Plan::add_value(int32_t slot, int32_t ext, const TensorImpl &t) {
  const auto id = static_cast<int32_t>(values_.size());
  values_.push_back(Value{slot, ext, meta_of(t)});
  if (slot >= 0)
    slot_values_[static_cast<size_t>(slot)].push_back(id);
  else
    exts_[static_cast<size_t>(ext)].values.push_back(id);
  return id;
}

int32_t Plan::value_of(const Tensor &t) {
  TensorImpl &ti = *t.impl();
  StorageImpl *s = ti.storage.get();
  if (s->plan == this && s->plan_slot >= 0) {
    for (int32_t v : slot_values_[static_cast<size_t>(s->plan_slot)])
      if (same(values_[static_cast<size_t>(v)].meta, ti)) return v;
    return add_value(s->plan_slot, -1, ti);
  }
  if (s->plan) {  // a storage another plan knows (nested recordings): not supported
    failed_ = true;
    return -1;
  }
  // A tensor from outside the planned kernels: an argument, a captured tensor, one f created.
  // Known by its object; in backward also by its storage (views of a saved input).
  for (const auto &[impl, v] : view_aliases_)
    if (impl.get() == &ti) return v;
  int32_t ext = -1;
  for (size_t e = 0; e < exts_.size() && ext < 0; ++e)
    if (exts_[e].first.get() == &ti) ext = static_cast<int32_t>(e);
  if (ext < 0 && in_backward_) {
    for (size_t e = 0; e < exts_.size() && ext < 0; ++e)
      if (exts_[e].first->storage.get() == s) ext = static_cast<int32_t>(e);
    if (ext < 0) {
      failed_ = true;
      return -1;
    }
  }
  if (ext < 0) {
    Ext x;
    x.first = Ref<TensorImpl>(&ti);
    x.dev = s->device;
    x.active = tape_->active(t);
    for (size_t i = 0; i < args_.size(); ++i)
      if (args_[i].impl() == &ti) x.arg = static_cast<int32_t>(i);
    ext = static_cast<int32_t>(exts_.size());
    exts_.push_back(std::move(x));
    return add_value(-1, ext, ti);
  }
  for (int32_t v : exts_[static_cast<size_t>(ext)].values)
    if (same(values_[static_cast<size_t>(v)].meta, ti)) return v;
  return add_value(-1, ext, ti);
}

int32_t Plan::new_slot_value(const Tensor &t) {
  StorageImpl *s = t.impl()->storage.get();
  if (s->plan) {
    failed_ = true;
    return -1;
  }
  const auto id = static_cast<int32_t>(slots_.size());
  set_plan(*s, this, id);
  slots_.push_back(Slot{s->device, s->bytes, s->role, t.dtype(), t.shape(), events_++});
  slot_storage_.push_back(s);
  slot_values_.emplace_back();
  return add_value(id, -1, *t.impl());
}

void Plan::storage_died(StorageImpl &s) {
  const auto i = static_cast<size_t>(s.plan_slot);
  slots_[i].death = events_++;
  slot_storage_[i] = nullptr;
}

void Plan::storage_retagged(StorageImpl &s, adprof_role role) {
  if (failed_ || s.role == role) return;
  PlanEntry e;
  e.step = PlanStep::Retag;
  e.out = s.plan_slot;
  e.role = role;
  (in_backward_ ? bwd_ : fwd_).push_back(e);
}

void Plan::rec_node(int32_t node) {
  if (!failed_ && last_entry_ < fwd_.size()) fwd_[last_entry_].node = node;
}

// What an op's entry starts with: its op, attributes and where its inputs will lie.
PlanEntry Plan::op_entry(PlanStep step, OpId op, const Attrs &a, uint64_t instance) {
  PlanEntry e;
  e.step = step;
  e.op = op;
  e.name_id = op_name_id(op);
  e.instance = instance;
  e.attrs = static_cast<uint32_t>(attrs_.size());
  attrs_.push_back(a);
  e.in_begin = static_cast<uint32_t>(in_val_.size());
  return e;
}

void Plan::rec_kernel(PlanStep step, OpId op, KernelFn k, std::span<const Tensor> ins,
                      const Attrs &a, const Tensor *out, bool rec, uint64_t instance) {
  if (failed_) return;
  PlanEntry e = op_entry(step, op, a, instance);
  e.rec = rec;
  e.has_backward = op_def(op).backward != nullptr;
  e.kernel = k;
  e.nin = static_cast<uint32_t>(ins.size());
  for (const Tensor &t : ins) {
    const int32_t v = value_of(t);
    if (v < 0) return;
    in_val_.push_back(v);
  }
  e.scratch = kernel_allocates(op, step == PlanStep::Kernel ? out->device() : ins[0].device());
  if (step == PlanStep::Kernel) {
    e.out = new_slot_value(*out);
    if (e.out < 0) return;
    e.role = slots_.back().role;
  } else {
    e.out = in_val_[e.in_begin];  // in place: input 0 is written
  }
  if (!in_backward_) last_entry_ = fwd_.size();
  (in_backward_ ? bwd_ : fwd_).push_back(e);
}

void Plan::rec_view(OpId op, const Tensor &in, const Attrs &a, const Tensor &view,
                    uint64_t instance) {
  if (failed_) return;
  PlanEntry e = op_entry(PlanStep::View, op, a, instance);
  e.rec = true;
  e.has_backward = true;
  e.nin = 1;
  const int32_t v = value_of(in);
  if (v < 0) return;
  in_val_.push_back(v);
  const Value &base = values_[static_cast<size_t>(v)];
  if (base.slot >= 0) {
    e.out = value_of(view);
  } else {
    // A view of an outside tensor: a value of the same outside tensor, known by this object too.
    Ext &x = exts_[static_cast<size_t>(base.ext)];
    e.out = -1;
    for (int32_t w : x.values)
      if (same(values_[static_cast<size_t>(w)].meta, *view.impl())) e.out = w;
    if (e.out < 0) e.out = add_value(-1, base.ext, *view.impl());
    view_aliases_.push_back({Ref<TensorImpl>(view.impl()), e.out});  // later uses of this object
  }
  if (e.out < 0) return;
  last_entry_ = fwd_.size();
  fwd_.push_back(e);
}

void Plan::rec_fill(const Tensor &t, double value) {
  if (failed_) return;
  PlanEntry e;
  e.step = PlanStep::Fill;
  e.fill = value;
  e.out = new_slot_value(t);
  if (e.out < 0) return;
  e.role = slots_.back().role;
  (in_backward_ ? bwd_ : fwd_).push_back(e);
}

void Plan::rec_scope(bool begin, uint32_t name_id, uint64_t instance) {
  if (failed_) return;
  PlanEntry e;
  e.step = begin ? PlanStep::ScopeBegin : PlanStep::ScopeEnd;
  e.name_id = name_id;
  e.instance = instance;
  (in_backward_ ? bwd_ : fwd_).push_back(e);
}

void Plan::rec_loss(const Tensor &loss) {
  if (failed_) return;
  loss_ = value_of(loss);
  if (loss_ >= 0 && values_[static_cast<size_t>(loss_)].slot < 0) failed_ = true;
  in_backward_ = true;
}

void Plan::rec_results(std::span<const Tensor> out) {
  if (failed_) return;
  for (const Tensor &t : out) {
    const int32_t v = value_of(t);
    if (v < 0 || values_[static_cast<size_t>(v)].slot < 0) {
      failed_ = true;
      return;
    }
    results_.push_back(v);
  }
}

bool Plan::build() {
  // Storages that survived the recording call (the value, the gradients, anything f kept)
  // forget the plan; the plan takes its own buffers at the first replay.
  untag();
  view_aliases_.clear();
  for (Ext &x : exts_) x.first.reset();
  if (failed_ || loss_ < 0 || results_.size() != key_wrt_.size()) {
    failed_ = true;
    return false;
  }
  // Buffers (interval colouring in birth order): a slot takes a buffer of its device and size
  // whose last occupant died before it was born; a slot that survived the call keeps its buffer
  // to the end. So the plan needs as many buffers of each size as the call had live at once.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot &s = slots_[i];
    // Among the free buffers, one whose last occupant had the same role saves a retag per call.
    size_t b = buffers_.size();
    for (size_t j = 0; j < buffers_.size(); ++j) {
      const Buffer &c = buffers_[j];
      const Slot &f = slots_[static_cast<size_t>(c.first_slot)];
      if (c.free_at < s.birth && f.dev == s.dev && f.bytes == s.bytes &&
          (b == buffers_.size() || c.role == s.role))
        b = j;
      if (b == j && c.role == s.role) break;
    }
    if (b == buffers_.size()) {
      buffers_.emplace_back();
      buffers_.back().first_slot = static_cast<int32_t>(i);
    }
    Buffer &buf = buffers_[b];
    buf.role = s.role;  // (planning: the last occupant's role)
    buf.free_at = s.death < 0 ? std::numeric_limits<int64_t>::max() : s.death;
    buf.nslots += 1;
    s.buffer = static_cast<int32_t>(b);
  }
  vals_.resize(values_.size());
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value &x = values_[v];
    TensorImpl *t = TensorImpl::make();
    if (x.slot >= 0) {
      Buffer &b = buffers_[static_cast<size_t>(slots_[static_cast<size_t>(x.slot)].buffer)];
      b.expected_refs += 1;
      b.values.push_back(static_cast<int32_t>(v));
    }
    t->offset = x.meta.offset;
    t->shape = x.meta.shape;
    t->strides = x.meta.strides;
    t->dtype = x.meta.dtype;
    vals_[v] = Tensor(Ref<TensorImpl>(t));
  }
  in_.resize(in_val_.size());
  expected_refs_.assign(values_.size(), 1);
  uses_.resize(values_.size());
  for (size_t i = 0; i < in_val_.size(); ++i) {
    const auto v = static_cast<size_t>(in_val_[i]);
    in_[i] = vals_[v];
    expected_refs_[v] += 1;
    uses_[v].push_back(static_cast<uint32_t>(i));
  }
  loss_buffer_ = buffer_of(loss_);
  for (std::vector<PlanEntry> *list : {&fwd_, &bwd_})
    for (PlanEntry &e : *list) {
      if (e.step == PlanStep::Kernel || e.step == PlanStep::Fill) e.out_buffer = buffer_of(e.out);
      if (e.step == PlanStep::Retag) e.out_buffer = slots_[static_cast<size_t>(e.out)].buffer;
    }
  // Roles through one call: a buffer starts a call with the role it ended the last one with.
  for (Buffer &b : buffers_) b.start_role = slots_[static_cast<size_t>(b.first_slot)].role;
  for (const std::vector<PlanEntry> *list : {&fwd_, &bwd_})
    for (const PlanEntry &e : *list)
      if (e.step == PlanStep::Kernel || e.step == PlanStep::Fill || e.step == PlanStep::Retag)
        buffers_[static_cast<size_t>(e.out_buffer)].start_role = e.role;
  {
    std::vector<adprof_role> role(buffers_.size());
    for (size_t b = 0; b < buffers_.size(); ++b) role[b] = buffers_[b].start_role;
    int64_t bytes[ADPROF_ROLE_COUNT] = {}, count[ADPROF_ROLE_COUNT] = {};
    for (const std::vector<PlanEntry> *list : {&fwd_, &bwd_})
      for (const PlanEntry &e : *list) {
        if (e.step != PlanStep::Kernel && e.step != PlanStep::Fill && e.step != PlanStep::Retag)
          continue;
        const auto b = static_cast<size_t>(e.out_buffer);
        if (role[b] == e.role) continue;
        const auto n =
            static_cast<int64_t>(slots_[static_cast<size_t>(buffers_[b].first_slot)].bytes);
        bytes[role[b]] -= n;
        count[role[b]] -= 1;
        bytes[e.role] += n;
        count[e.role] += 1;
        peak_bytes_[e.role] = std::max(peak_bytes_[e.role], bytes[e.role]);
        peak_count_[e.role] = std::max(peak_count_[e.role], count[e.role]);
        role[b] = e.role;
      }
  }
  // f holds tensors only of forward outputs: a forward output written over an earlier one's
  // buffer checks that nobody still holds that one; backward, which reuses buffers forward
  // outputs had, checks them all once (finish_forward).
  {
    std::vector<uint8_t> used(buffers_.size(), 0);
    for (PlanEntry &e : fwd_) {
      if (e.step != PlanStep::Kernel) continue;
      const auto b = static_cast<size_t>(e.out_buffer);
      std::vector<int32_t> &h = buffers_[b].handed;
      if (std::find(h.begin(), h.end(), e.out) == h.end()) h.push_back(e.out);
      e.check_excl = used[b] != 0;
      used[b] = 1;
    }
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (used[b] && buffers_[b].nslots > 1 && static_cast<int32_t>(b) != loss_buffer_)
        shared_.push_back(static_cast<int32_t>(b));
  }
  for (const PlanEntry &e : bwd_)
    if (e.step == PlanStep::Kernel || e.step == PlanStep::InPlace) ++bwd_kernels_;
  // Buffers a caller can hold a tensor of across calls: f's outputs, the value, the gradients.
  {
    std::vector<uint8_t> exposed(buffers_.size(), 0);
    for (const Buffer &b : buffers_)
      if (!b.handed.empty()) exposed[static_cast<size_t>(&b - buffers_.data())] = 1;
    exposed[static_cast<size_t>(loss_buffer_)] = 1;
    for (int32_t v : results_) exposed[static_cast<size_t>(buffer_of(v))] = 1;
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (exposed[b]) exposed_.push_back(static_cast<int32_t>(b));
  }
  slot_values_.clear();
  slot_values_.shrink_to_fit();
  // Replayed calls take their tensor objects (one per forward output and view f sees, the
  // arguments' aliases, the gradients) and the buffers' storage objects from the thread's pools.
  reserve_tensor_impls(fwd_.size() + results_.size() + key_args_.size() + 16);
  reserve_storage_impls(2 * buffers_.size() + 4);
  // Buffers change hands through the tape's arena (the caller's previous gradients and value go
  // back to it, swapped buffers come from it): its buckets for these sizes exist from now on.
  if (Arena *arena = tape_->arena()) {
    for (const Buffer &b : buffers_) {
      const Slot &s = slots_[static_cast<size_t>(b.first_slot)];
      arena->prepare(*s.dev, s.bytes, buffers_.size());
    }
  }
  ready_ = true;
  return true;
}

void Plan::acquire() {
  // The buffers come from the tape's arena (where the recording call left its own).
  for (Buffer &b : buffers_) {
    const Slot &s = slots_[static_cast<size_t>(b.first_slot)];
    b.storage = allocate_storage(*s.dev, s.bytes, b.start_role, s.dtype, s.shape);
    b.role = b.start_role;
    set_plan(*b.storage, this, kPlannedBuffer);
    for (int32_t v : b.values) vals_[static_cast<size_t>(v)].impl()->storage = b.storage;
  }
  profiled_ = profiled();
  exact_roles_ = profiled_;
  for (const Buffer &b : buffers_)
    if (!b.storage->device->host_accessible()) exact_roles_ = true;  // device allocators count
  roles_at_start();
  acquired_ = true;
}

int32_t Plan::buffer_of(int32_t v) const {
  return slots_[static_cast<size_t>(values_[static_cast<size_t>(v)].slot)].buffer;
}

// ---------------- replay ----------------
bool Plan::matches(std::span<const Tensor> call_args, std::span<const size_t> wrt) const {
  if (call_args.size() != key_args_.size() || wrt.size() != key_wrt_.size()) return false;
  for (size_t i = 0; i < wrt.size(); ++i)
    if (wrt[i] != key_wrt_[i]) return false;
  for (size_t i = 0; i < call_args.size(); ++i)
    if (!same(key_args_[i], *call_args[i].impl()) || &call_args[i].device() != key_devs_[i])
      return false;
  return true;
}

void Plan::swap_buffer(Buffer &b) {
  // Someone outside still holds this buffer or one of its tensors (the previous call's value, a
  // kept gradient, something f kept): they become theirs, and the plan takes another buffer of
  // the same size (from the arena) and new tensor objects over it.
  const Slot &s = slots_[static_cast<size_t>(b.first_slot)];
  Storage fresh_storage = allocate_storage(*s.dev, s.bytes, b.role, s.dtype, s.shape);
  set_plan(*fresh_storage, this, kPlannedBuffer);
  set_plan(*b.storage, nullptr, -1);
  for (int32_t v : b.values) {
    Tensor &t = vals_[static_cast<size_t>(v)];
    TensorImpl *n = TensorImpl::make();
    n->storage = fresh_storage;
    n->offset = t.impl()->offset;
    n->shape = t.impl()->shape;
    n->strides = t.impl()->strides;
    n->dtype = t.impl()->dtype;
    t = Tensor(Ref<TensorImpl>(n));
    for (uint32_t pos : uses_[static_cast<size_t>(v)]) in_[pos] = t;
  }
  b.storage = std::move(fresh_storage);
}

void Plan::begin(std::span<const Tensor> call_args) {
  args_ = call_args;
  ++call_;
  cursor_ = 0;
  if (!acquired_) acquire();
  for (int32_t b : exposed_)
    if (!exclusive(buffers_[static_cast<size_t>(b)])) swap_buffer(buffers_[static_cast<size_t>(b)]);
}

void Plan::drain_retags() {
  while (cursor_ < fwd_.size() && fwd_[cursor_].step == PlanStep::Retag) set_role(fwd_[cursor_++]);
}

void Plan::set_role_exact(const PlanEntry &e) {
  Buffer &b = buffers_[static_cast<size_t>(e.out_buffer)];
  if (b.role == e.role && !profiled_) return;
  retag_storage(*b.storage, e.role);
  b.role = e.role;
}

void Plan::sync_roles() {
  for (Buffer &b : buffers_)
    if (b.storage && b.storage->role != b.role) retag_storage(*b.storage, b.role);
}

void Plan::roles_at_start() {
  for (Buffer &b : buffers_) {
    if (b.storage->role != b.start_role) retag_storage(*b.storage, b.start_role);
    b.role = b.start_role;
  }
}

Tensor Plan::fresh(const Tensor &v) {
  const TensorImpl &o = *v.impl();
  TensorImpl *t = TensorImpl::make();
  t->storage = o.storage;
  t->offset = o.offset;
  t->shape = o.shape;
  t->strides = o.strides;
  t->dtype = o.dtype;
  t->tape = o.tape;
  t->tape_gen = o.tape_gen;
  t->node = o.node;
  return Tensor(Ref<TensorImpl>(t));
}

void Plan::tag_view(const PlanEntry &e, Tensor &view) {
  retags();
  for (TensorImpl *t : {vals_[static_cast<size_t>(e.out)].impl(), view.impl()}) {
    t->tape = tape_;
    t->tape_gen = tape_->generation();
    t->node = e.node;
  }
}

bool Plan::finish_forward(const Tensor &loss) {
  retags();
  if (cursor_ != fwd_.size()) return false;
  const TensorImpl &l = *vals_[static_cast<size_t>(loss_)].impl();
  if (!plan_detail::same(l, *loss.impl()) || l.storage.get() != loss.impl()->storage.get())
    return false;
  // Backward reuses shared buffers: nobody may still hold one (something f kept this time).
  for (int32_t b : shared_)
    if (!exclusive(buffers_[static_cast<size_t>(b)])) return false;
  return true;
}

void Plan::play_backward() {
  backward_played_ = true;
  // Every op of a normal backward runs inside its node's scope, with the workspace role (ops set
  // it, node scopes set it); allocations outside ops set their own. Nothing but these kernels runs
  // here, so the role is set once for the whole replayed backward.
  adprof::RoleScope role(ADPROF_ROLE_WORKSPACE);
  uint64_t instance = untaped_instances(bwd_kernels_);
  for (const PlanEntry &e : bwd_) {
    switch (e.step) {
      case PlanStep::Kernel:
      case PlanStep::InPlace: {
        adprof::OpScope scope(e.name_id, instance++);
        execute(e);
        break;
      }
      case PlanStep::Fill: {
        set_role(e);
        const Tensor &o = vals_[static_cast<size_t>(e.out)];
        o.device().fill(o.raw(), static_cast<size_t>(o.numel()), o.dtype(), e.fill);
        break;
      }
      case PlanStep::ScopeBegin:
        adprof_op_begin(e.name_id, e.instance);
        break;
      case PlanStep::ScopeEnd:
        adprof_op_end();
        break;
      case PlanStep::Retag:
        set_role(e);
        break;
      case PlanStep::View:
        break;
    }
  }
}

void Plan::results(std::span<Tensor> out, Tensor &loss) {
  // The caller's value and gradients are tensor objects of their own (over the planned buffers).
  for (size_t k = 0; k < out.size(); ++k) out[k] = fresh(vals_[static_cast<size_t>(results_[k])]);
  loss = fresh(loss);
}

void Plan::end() {
  if (!exact_roles_) {
    // A whole call leaves every buffer in its start role again; a call cut short leaves the
    // storages the roles the played entries gave them.
    if (cursor_ == fwd_.size() && backward_played_)
      note_role_peaks(peak_bytes_, peak_count_);
    else
      sync_roles();
  }
  backward_played_ = false;
  for (Ext &x : exts_) {
    if (x.bound_call != call_ || !x.bound.defined()) continue;
    x.bound = Tensor();
    for (int32_t w : x.values) vals_[static_cast<size_t>(w)].impl()->storage.reset();
  }
}

void Plan::materialize() {
  // The storages take the roles the played entries gave their buffers (the tape's saves look at
  // them), and the counters follow.
  if (!exact_roles_) sync_roles();
  std::vector<Tensor> ins;
  for (size_t j = 0; j < cursor_; ++j) {
    const PlanEntry &e = fwd_[j];
    if (!e.rec) continue;
    ins.clear();
    for (uint32_t i = 0; i < e.nin; ++i) {
      const auto v = static_cast<size_t>(in_val_[e.in_begin + i]);
      const int32_t xi = values_[v].ext;
      const Ext *x = xi >= 0 ? &exts_[static_cast<size_t>(xi)] : nullptr;
      // The tensor f passed (so that a leaf is the argument itself), else the plan's own.
      if (x && x->bound_call == call_ && x->bound.defined() &&
          plan_detail::same(*x->bound.impl(), *vals_[v].impl()))
        ins.push_back(x->bound);
      else
        ins.push_back(vals_[v]);
    }
    Tensor &out = vals_[static_cast<size_t>(e.out)];
    adprof::OpScope scope(e.name_id, e.instance);
    tape_->record(e.op, ins, attrs_[e.attrs], out);
    if (out.impl()->node != e.node)
      throw std::logic_error("adcore: replay plan out of step with the tape");
  }
}

}  // namespace adcore::detail
