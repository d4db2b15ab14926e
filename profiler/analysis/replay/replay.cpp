#include "adprof/replay.h"

#include <cstring>

namespace adprof {

namespace {
constexpr const char *kRoleNames[kRoleCount] = {
    "foreign", "parameter",    "input",     "activation",      "forward_cache",
    "adjoint", "accumulation", "duplicate", "optimizer_state", "workspace"};
constexpr const char *kPhaseNames[kPhaseCount] = {"other", "forward", "backward", "optimizer"};
constexpr const char *kSpaceNames[kSpaceCount] = {"heap",           "mmap",       "device_block",
                                                  "device_segment", "device_raw", "host_pinned"};
const std::string kEmpty;
const std::vector<OpFrame> kNoOps;
}  // namespace

const char *role_name(int role) { return role >= 0 && role < kRoleCount ? kRoleNames[role] : "?"; }
const char *phase_name(int phase) {
  return phase >= 0 && phase < kPhaseCount ? kPhaseNames[phase] : "?";
}
const char *space_name(int space) {
  return space >= 0 && space < kSpaceCount ? kSpaceNames[space] : "?";
}
int role_from_name(const std::string &name) {
  for (int i = 0; i < kRoleCount; ++i)
    if (name == kRoleNames[i]) return i;
  return -1;
}

Replay::Replay() { names_.emplace_back(); }

Replay::ThreadContext &Replay::grow_context(uint32_t thread) {
  threads_.resize(thread + 1);
  thread_names_.resize(thread + 1);
  return threads_[thread];
}

const std::vector<OpFrame> &Replay::op_stack(uint32_t thread) const {
  return thread < threads_.size() ? threads_[thread].ops : kNoOps;
}

const std::string &Replay::name(uint32_t id) const {
  return id < names_.size() ? names_[id] : kEmpty;
}

std::string Replay::op_kind(uint32_t name_id) const {
  if (name_id == 0) return "(no op)";
  const std::string &n = name(name_id);
  return n.empty() ? "op" + std::to_string(name_id) : n;
}

std::string Replay::op_label(uint32_t name_id, uint64_t instance) const {
  if (name_id == 0) return op_kind(0);
  // Instances with the top bit set are calls outside the tape (backward-pass ops, no_grad).
  if (instance >> 63) return op_kind(name_id) + "#u" + std::to_string(instance & ~(1ull << 63));
  return op_kind(name_id) + "#" + std::to_string(instance);
}

const std::vector<int64_t> *Replay::shape_of(const Block &b) const {
  return b.describe_index ? &shapes_[b.describe_index - 1] : nullptr;
}

template <bool kAdd>
inline void Replay::add(const Block &b) {
  uint64_t delta = b.size;
  auto apply = [delta](uint64_t &v) { v = kAdd ? v + delta : v - delta; };
  apply(by_space_[b.space]);
  if (is_host_space(b.space)) {
    apply(host_live_);
    apply(host_by_role_[b.role]);
    apply(host_by_phase_[b.phase]);
    host_slack_ = kAdd ? host_slack_ + b.slack : host_slack_ - b.slack;
  } else if (is_device_space(b.space)) {
    apply(device_live_);
    apply(device_by_role_[b.role]);
  } else if (b.space == ADPROF_SPACE_DEVICE_SEGMENT) {
    apply(device_reserved_);
  }  // anonymous mappings: by_space_ only
}

Block *Replay::find(uint64_t addr) {
  for (int space : {ADPROF_SPACE_HEAP, ADPROF_SPACE_DEVICE_BLOCK, ADPROF_SPACE_DEVICE_RAW,
                    ADPROF_SPACE_HOST_PINNED, ADPROF_SPACE_DEVICE_SEGMENT}) {
    if (const BlockIndex::Entry *en = index_.find(key(addr, space))) return &store_[en->slot];
  }
  auto m = mmap_.find(addr);
  return m != mmap_.end() ? &m->second : nullptr;
}

void Replay::unmap_range(uint64_t start, uint64_t length) {
  if (length == 0 || mmap_.empty()) return;
  uint64_t end = start + length;
  auto it = mmap_.upper_bound(start);
  if (it != mmap_.begin()) --it;
  while (it != mmap_.end() && it->first < end) {
    uint64_t b_start = it->first, b_end = it->first + it->second.size;
    if (b_end <= start) {
      ++it;
      continue;
    }
    Block b = it->second;
    add<false>(b);
    it = mmap_.erase(it);
    last_.free = true;
    last_.block = note_removed(b_start, b, false);
    if (b_start < start) {  // keep the part before the hole
      Block head = b;
      head.size = start - b_start;
      head.slack = 0;
      head.serial = serial_;
      add<true>(head);
      mmap_.emplace(b_start, head);
    }
    if (b_end > end) {  // and the part after it
      Block tail = b;
      tail.size = b_end - end;
      tail.slack = 0;
      tail.serial = serial_;
      add<true>(tail);
      it = mmap_.emplace(end, tail).first;
      ++it;
    }
  }
}

const Block *Replay::note_removed(uint64_t key, const Block &b, bool stays) {
  const Block *kept = stays ? &b : &removed_copies_.emplace_back(b);
  last_.removed.emplace_back(key, kept);
  return kept;
}

void Replay::on_alloc(const Event &e) {
  const uint8_t space = e.operand;
  Block *b;
  if (space == ADPROF_SPACE_MMAP) {
    unmap_range(e.addr, e.a);  // MAP_FIXED over an older mapping replaces it
    b = &mmap_[e.addr];
  } else {
    if (space == ADPROF_SPACE_DEVICE_SEGMENT) {
      // An instrumented allocator declares a segment it got from cudaMalloc, which the
      // interposer also saw: count those bytes once, as reserved.
      if (const BlockIndex::Entry *raw = index_.find(key(e.addr, ADPROF_SPACE_DEVICE_RAW))) {
        const Block &old = store_[raw->slot];
        add<false>(old);
        note_removed(raw->key, old, false);  // its slot is reused below
        free_slots_.push_back(raw->slot);
        index_.erase(raw);
      }
    }
    last_.key = key(e.addr, space);
    auto [en, inserted] = index_.insert(last_.key, 0);
    if (inserted) {
      en->slot = new_slot();
    } else {  // the free was lost (cut chunk): the old block is gone
      const Block &old = store_[en->slot];
      add<false>(old);
      note_removed(en->key, old, false);
      if (old.describe_index) free_shapes_.push_back(old.describe_index - 1);
    }
    b = &store_[en->slot];
  }
  // The block is written in place, field by field: a Block built aside and copied in makes
  // the compiler read back its small fields as wide words before they are stored (a stall).
  ThreadContext &ctx = context(e.thread);
  ctx.last_alloc_serial = serial_;
  *b = Block{};
  b->size = e.a;
  b->slack = e.b;
  b->alloc_ticks = e.ticks;
  b->serial = serial_;
  b->thread = e.thread;
  b->device = e.device;
  b->stack = e.stack;
  b->role = ctx.role;
  b->phase = phase_of(ctx);
  b->space = space;
  if (!ctx.ops.empty()) {
    b->op_name = ctx.ops.back().name;
    b->op_instance = ctx.ops.back().instance;
  }
  last_.block = b;
  add<true>(*b);
  last_.alloc = true;
}

void Replay::on_free(const Event &e) {
  if (e.operand == ADPROF_SPACE_MMAP) {
    unmap_range(e.addr, e.a);
    return;
  }
  const BlockIndex::Entry *en = index_.find(key(e.addr, e.operand));
  if (!en && (e.operand == ADPROF_SPACE_DEVICE_RAW || e.operand == ADPROF_SPACE_DEVICE_SEGMENT)) {
    // The same driver memory, seen in the other space: a segment an allocator declared over a
    // raw cudaMalloc (or released with the interposer's cudaFree alone), or driver memory that
    // became reserve (adprof_device_memory_is_reserve) while it was live.
    en = index_.find(key(e.addr, e.operand == ADPROF_SPACE_DEVICE_RAW ? ADPROF_SPACE_DEVICE_SEGMENT
                                                                      : ADPROF_SPACE_DEVICE_RAW));
  }
  if (!en) {
    ++unmatched_frees_;  // allocated before recording started, or lost with a cut chunk
    return;
  }
  uint32_t slot = en->slot;
  const Block &b = store_[slot];
  last_.block = note_removed(en->key, b, true);  // the slot is reused from the next apply()
  index_.erase(en);
  free_slots_.push_back(slot);
  if (b.describe_index) free_shapes_.push_back(b.describe_index - 1);
  add<false>(b);
  last_.free = true;
  last_.temporary = is_temporary(b, e.thread);
}

bool Replay::freed_in_its_op(const Block &b, uint32_t thread) {
  for (const OpFrame &f : context(thread).ops)
    if (f.instance == b.op_instance && f.name == b.op_name) return true;
  return false;
}

bool Replay::apply(const Event &e) {
  last_.alloc = last_.free = last_.retag = last_.temporary = false;
  last_.block = nullptr;
  last_.removed.clear();
  namespace fmt = format;
  if (is_heap_event(e)) {  // the heap's changes have one definition: apply_heap()
    const HeapChange c = apply_heap(e);
    last_.block = c.block;
    last_.key = e.addr;
    if (c.removed) last_.removed.emplace_back(e.addr, c.removed);
    if (e.type == fmt::EventType::kAlloc) {
      last_.alloc = true;
      return true;
    }
    last_.free = c.block != nullptr;
    last_.temporary = c.temporary;
    return last_.free;
  }
  ++serial_;
  if (!removed_copies_.empty()) removed_copies_.clear();
  switch (e.type) {
    case fmt::EventType::kAlloc:
      on_alloc(e);
      return true;
    case fmt::EventType::kFree:
      on_free(e);
      return last_.free;
    case fmt::EventType::kRetag: {
      Block *b = find(e.addr);
      if (!b) {
        ++unknown_retags_;
        return false;
      }
      last_.before = *b;
      last_.key = b->space == ADPROF_SPACE_MMAP ? e.addr : key(e.addr, b->space);
      last_.old_role = b->role;
      add<false>(*b);
      b->role = e.operand;
      // A copy stays a copy of its source whatever role it takes later (a widened index that
      // the backward then keeps is a forward cache and still a duplicate).
      if (e.b) b->source = e.b;
      add<true>(*b);
      last_.retag = true;
      last_.block = b;
      return true;
    }
    case fmt::EventType::kOpBegin:
      context(e.thread).ops.push_back({static_cast<uint32_t>(e.a), e.b});
      return false;
    case fmt::EventType::kOpEnd: {
      auto &ops = context(e.thread).ops;
      if (!ops.empty()) ops.pop_back();
      return false;
    }
    case fmt::EventType::kPhase: {
      ThreadContext &ctx = context(e.thread);
      ctx.phase = e.operand;
      ctx.names_phases |= e.operand != ADPROF_PHASE_OTHER;
      if (ctx.names_phases) process_phase_ = e.operand;
      return false;
    }
    case fmt::EventType::kRole:
      context(e.thread).role = e.operand;
      return false;
    case fmt::EventType::kName:
      if (e.a < (1u << 24)) {  // ids are dense and small; bound what a damaged file can ask
        if (e.a >= names_.size()) names_.resize(e.a + 1);
        names_[e.a] = std::string(e.text());
      }
      return false;
    case fmt::EventType::kThreadName:
      context(e.thread);
      thread_names_[e.thread] = std::string(e.text());
      return false;
    case fmt::EventType::kCounter:
      counters_[e.operand] = e.a;
      have_counter_[e.operand] = true;
      return false;
    case fmt::EventType::kLabel:
      if (Block *b = find(e.addr)) b->label = static_cast<uint32_t>(e.a);
      return false;
    case fmt::EventType::kContentHash:
      if (Block *b = find(e.addr)) b->content_hash = e.a;
      return false;
    case fmt::EventType::kDescribe:
      if (Block *b = find(e.addr)) {
        b->dtype = static_cast<uint8_t>(e.a);
        uint32_t index;
        if (b->describe_index) {
          index = b->describe_index - 1;
        } else if (!free_shapes_.empty()) {
          index = free_shapes_.back();
          free_shapes_.pop_back();
        } else {
          index = static_cast<uint32_t>(shapes_.size());
          shapes_.emplace_back();
        }
        shapes_[index].assign(e.values().begin(), e.values().end());
        b->describe_index = index + 1;
      }
      return false;
    case fmt::EventType::kStep:
    case fmt::EventType::kAnnotate:
    case fmt::EventType::kHeap:   // the reader yields compact heap events as kAlloc / kFree
    case fmt::EventType::kStack:  // call stacks: the symbolizer's (stacks.h), not the replay's
    case fmt::EventType::kMapping:
    case fmt::EventType::kUnmapping:
    case fmt::EventType::kStepSummary:  // the report's (analysis/memory/step_summaries.cpp)
      return false;
  }
  return false;
}

}  // namespace adprof
