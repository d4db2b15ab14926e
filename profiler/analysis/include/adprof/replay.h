// Replays a trace's events into live memory: which blocks are live, with what role, op, phase
// and thread, and the running totals by role, phase, space and op. The report, the timeline,
// the GUI and the what-if analysis are all built on this one replay.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "adprof/context.h"
#include "adprof/trace_reader.h"

namespace adprof {

inline constexpr int kRoleCount = ADPROF_ROLE_COUNT;
inline constexpr int kPhaseCount = ADPROF_PHASE_COUNT;
inline constexpr int kSpaceCount = ADPROF_SPACE_COUNT;

const char *role_name(int role);              // "forward_cache", ...
const char *phase_name(int phase);            // "backward", ...
const char *space_name(int space);            // "heap", "mmap", ...
int role_from_name(const std::string &name);  // -1 if unknown

// Host bytes: the heap and pinned host memory. Anonymous mappings are counted apart: what a
// program maps itself (BLAS buffers, thread stacks, runtimes' arenas) is mostly reserved
// address space that is touched little by little, and counting it at its full length would
// bury the heap's picture (OpenBLAS maps 128 MiB it barely touches). Device bytes: blocks
// handed to tensors and raw cudaMalloc; a caching allocator's reserved segments apart.
inline bool is_host_space(int space) {
  return space == ADPROF_SPACE_HEAP || space == ADPROF_SPACE_HOST_PINNED;
}
inline bool is_device_space(int space) {
  return space == ADPROF_SPACE_DEVICE_BLOCK || space == ADPROF_SPACE_DEVICE_RAW;
}

struct Block {
  // What a free reads comes first: the replay walks blocks at random, one cache line apiece.
  uint64_t size = 0;
  uint64_t slack = 0;   // usable - requested
  uint64_t serial = 0;  // number of events applied when this block took its shape
  uint64_t op_instance = 0;
  uint32_t op_name = 0;         // innermost op at allocation (name id; 0: none)
  uint32_t describe_index = 0;  // 1 + index into Replay's shapes, 0: none
  uint8_t role = ADPROF_ROLE_FOREIGN;
  uint8_t phase = ADPROF_PHASE_OTHER;
  uint8_t space = ADPROF_SPACE_HEAP;
  uint8_t dtype = 0;
  uint32_t thread = 0;
  uint32_t device = 0;
  uint32_t label = 0;
  uint32_t stack = 0;  // the allocation's call stack id (trace with stacks; 0: none)
  uint64_t alloc_ticks = 0;
  uint64_t source = 0;  // duplicate: the address of the buffer it copies
  uint64_t content_hash = 0;
};

struct OpFrame {
  uint32_t name;
  uint64_t instance;
};

// A prefetch hint. The empty volatile asm keeps the functions that give hints from being taken
// for side-effect free (GCC drops calls to such a function: its result is unused).
inline void prefetch_hint(const void *p) {
  __builtin_prefetch(p);
  asm volatile("" : : "r"(p));
}

// Replay's index of live blocks: key -> slot of the block in Replay's store. Open addressing
// with linear probing, mostly empty (max_load()), deletion by backward shift (no tombstones): a
// lookup reads one 16-byte entry, mostly in one cache line, whose place prefetch() knows in
// advance.
class BlockIndex {
 public:
  static constexpr uint32_t kEmpty = ~0u;
  struct Entry {
    uint64_t key = 0;
    uint32_t slot = kEmpty;  // kEmpty: an unused entry
  };

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Entry *find(uint64_t key) const {
    if (size_ == 0) return nullptr;
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Entry &en = entries_[i];
      if (en.slot == kEmpty) return nullptr;
      if (en.key == key) return &en;
    }
  }
  // The entry of key: inserted with `slot` (second: true) or the one already there.
  [[gnu::always_inline]] std::pair<Entry *, bool> insert(uint64_t key, uint32_t slot) {
    if (size_ + 1 > max_load()) [[unlikely]]
      grow();
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      Entry &en = entries_[i];
      if (en.slot == kEmpty) {
        en = {key, slot};
        ++size_;
        return {&en, true};
      }
      if (en.key == key) return {&en, false};
    }
  }
  void erase(const Entry *en) {
    size_t i = static_cast<size_t>(en - entries_.data());
    for (size_t j = (i + 1) & mask_; entries_[j].slot != kEmpty; j = (j + 1) & mask_) {
      // An entry further along moves back into the hole unless the hole lies before its home.
      if (((j - home(entries_[j].key)) & mask_) >= ((j - i) & mask_)) {
        entries_[i] = entries_[j];
        i = j;
      }
    }
    entries_[i].slot = kEmpty;
    --size_;
  }
  void prefetch(uint64_t key) const {
    if (!entries_.empty()) prefetch_hint(&entries_[home(key)]);
  }
  const Entry *begin() const { return entries_.data(); }
  const Entry *end() const { return entries_.data() + entries_.size(); }

 private:
  // Sparse tables probe less and shift less on erase: an eighth full up to 2^19 entries
  // (8 MiB, 64 Ki live blocks), a quarter beyond, where memory matters more.
  size_t max_load() const {
    return entries_.size() <= (size_t{1} << 19) ? entries_.size() / 8 : entries_.size() / 4;
  }
  size_t home(uint64_t key) const {  // Fibonacci hashing: the product's top bits
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  [[gnu::noinline]] void grow() {
    std::vector<Entry> old = std::move(entries_);
    size_t capacity = old.empty() ? 64 : 2 * old.size();
    entries_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (const Entry &en : old)
      if (en.slot != kEmpty) insert(en.key, en.slot);
  }

  std::vector<Entry> entries_;
  size_t mask_ = 0, size_ = 0;
  int shift_ = 64;
};

class Replay {
 public:
  Replay();

  // Applies one event. Returns true when it changed live memory (alloc, free, retag).
  bool apply(const Event &e);

  // The fast path of apply() for nearly every event of a trace: a heap allocation or free
  // (is_heap_event(e)). The same changes to live memory, but last() is left as it was; what
  // changed is returned instead. Blocks it points to are valid until the next apply.
  static bool is_heap_event(const Event &e) {
    return e.operand == ADPROF_SPACE_HEAP &&
           (e.type == format::EventType::kAlloc || e.type == format::EventType::kFree);
  }
  struct HeapChange {
    const Block *block = nullptr;    // allocated or freed; nullptr: a free of no live block
    const Block *removed = nullptr;  // freed, or replaced by an allocation (its free was lost)
    bool temporary = false;          // a temporary's free (is_temporary)
  };
  [[gnu::always_inline]] HeapChange apply_heap(const Event &e);

  // Hints for a caller that reads ahead (they change nothing): a free's block can be anywhere
  // among the live ones. prefetch(e) some events before apply(e) fetches the index entry of the
  // block e allocates or frees; prefetch_block(e), later, the block itself.
  void prefetch(const Event &e) const {
    if (e.type == format::EventType::kFree || e.type == format::EventType::kAlloc)
      index_.prefetch(key(e.addr, e.operand));
  }
  void prefetch_block(const Event &e) const {
    if (e.type != format::EventType::kFree) return;
    if (const BlockIndex::Entry *en = index_.find(key(e.addr, e.operand))) {
      const char *p = reinterpret_cast<const char *>(&store_[en->slot]);
      prefetch_hint(p);
      prefetch_hint(p + sizeof(Block) - 1);
    }
  }

  // Live blocks by key (mmap ranges are kept apart, see mmap_blocks()). A heap block's key is
  // its address; other spaces put the space in the top byte, because a caching device
  // allocator's first block shares its address with the segment it was cut from.
  // blocks() is a read-only view, valid until the next apply(): it iterates as (key, block)
  // pairs, like a map, and has size(), count(key), contains(key), find(key) and get(key).
  class BlockMap;
  BlockMap blocks() const;
  static uint64_t key(uint64_t addr, int space) {
    return space == ADPROF_SPACE_HEAP ? addr : addr | (static_cast<uint64_t>(space) << 56);
  }
  static uint64_t address_of(uint64_t key) { return key & ((1ull << 56) - 1); }
  const std::map<uint64_t, Block> &mmap_blocks() const { return mmap_; }
  const std::vector<int64_t> *shape_of(const Block &b) const;

  // Running totals of live requested bytes.
  uint64_t host_live() const { return host_live_; }
  uint64_t device_live() const { return device_live_; }
  uint64_t device_reserved() const { return device_reserved_; }
  uint64_t mapped_live() const { return by_space_[ADPROF_SPACE_MMAP]; }
  const std::array<uint64_t, kRoleCount> &host_by_role() const { return host_by_role_; }
  const std::array<uint64_t, kRoleCount> &device_by_role() const { return device_by_role_; }
  const std::array<uint64_t, kPhaseCount> &host_by_phase() const { return host_by_phase_; }
  const std::array<uint64_t, kSpaceCount> &by_space() const { return by_space_; }
  uint64_t host_slack() const { return host_slack_; }
  uint64_t live_blocks() const { return index_.size() + mmap_.size(); }

  // Context of the thread of the last applied event. A thread that has never named a phase (a
  // library's worker pool: ATen's intra-op threads, OpenBLAS's) works for the process in the
  // phase the process is in: the phase a thread that names phases named last.
  int thread_phase(uint32_t thread) const {
    return thread < threads_.size() ? phase_of(threads_[thread]) : process_phase_;
  }
  int process_phase() const { return process_phase_; }
  const std::vector<OpFrame> &op_stack(uint32_t thread) const;

  const std::string &name(uint32_t id) const;   // "" for unknown ids
  std::string op_kind(uint32_t name_id) const;  // "cast", "(no op)", "op7" when unnamed
  std::string op_label(uint32_t name_id, uint64_t instance) const;  // "cast#3"
  const std::vector<std::string> &thread_names() const { return thread_names_; }
  const std::array<uint64_t, format::kCounterKindCount> &counters() const { return counters_; }
  const std::array<bool, format::kCounterKindCount> &have_counters() const { return have_counter_; }

  // What the last apply() did, for callers that account per event. The blocks it points to
  // are valid until the next apply() (a freed block stays in its slot until then).
  struct LastChange {
    bool alloc = false;
    bool free = false;
    bool retag = false;
    bool temporary = false;        // a temporary's free (is_temporary)
    const Block *block = nullptr;  // the block allocated, freed or retagged (after the change)
    uint8_t old_role = 0;          // retag: the role it had
    Block before;                  // retag: the block as it was
    uint64_t key = 0;              // retag, alloc: the block's key
    // Blocks that stopped being live: a free, an unmap (several ranges, or the parts of one
    // that was split), an allocation over a block whose free was lost. (key, block)
    std::vector<std::pair<uint64_t, const Block *>> removed;
  };
  const LastChange &last() const { return last_; }

  uint64_t serial() const { return serial_; }  // events applied so far
  uint64_t unmatched_frees() const { return unmatched_frees_; }
  uint64_t unknown_retags() const { return unknown_retags_; }

 private:
  struct ThreadContext {
    uint8_t phase = ADPROF_PHASE_OTHER;
    uint8_t role = ADPROF_ROLE_FOREIGN;
    // Has been in a phase other than "other": its "other" is its own from then on. (Each chunk
    // restates its thread's phase, so a phase event alone does not say the thread named one.)
    bool names_phases = false;
    std::vector<OpFrame> ops;
    uint64_t last_alloc_serial = 0;  // the serial of the thread's latest allocation
  };
  uint8_t phase_of(const ThreadContext &ctx) const {
    return ctx.names_phases ? ctx.phase : process_phase_;
  }
  ThreadContext &context(uint32_t thread) {
    return thread < threads_.size() ? threads_[thread] : grow_context(thread);
  }
  ThreadContext &grow_context(uint32_t thread);
  template <bool kAdd>
  void add(const Block &b);
  void on_alloc(const Event &e);
  void on_free(const Event &e);
  // A block allocated in an op is a temporary when it is freed within the same invocation of
  // it; one allocated outside any op (a foreign program's), when its thread frees it before it
  // allocates anything else (heaptrack's definition).
  bool is_temporary(const Block &b, uint32_t thread) {
    if (b.op_instance == 0)
      return b.thread == thread && context(thread).last_alloc_serial == b.serial;
    return freed_in_its_op(b, thread);
  }
  bool freed_in_its_op(const Block &b, uint32_t thread);
  void add_heap(const Block &b);
  void remove_heap(const Block &b);
  void unmap_range(uint64_t start, uint64_t length);
  // Records a block that stopped being live. `stays` says it keeps its place until the next
  // apply() (a freed slot); else it is copied, because the caller overwrites or erases it.
  const Block *note_removed(uint64_t key, const Block &b, bool stays);
  Block *find(uint64_t addr);
  uint32_t new_slot();

  // Live blocks (not mmap ranges): key -> slot in store_. The index holds 16-byte entries and
  // the blocks lie packed in store_ (freed slots are reused first).
  BlockIndex index_;
  std::vector<Block> store_;
  std::vector<uint32_t> free_slots_;
  std::map<uint64_t, Block> mmap_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<uint32_t> free_shapes_;
  std::vector<ThreadContext> threads_;
  std::vector<std::string> names_;
  std::vector<std::string> thread_names_;
  std::array<uint64_t, format::kCounterKindCount> counters_{};
  std::array<bool, format::kCounterKindCount> have_counter_{};
  uint64_t host_live_ = 0, device_live_ = 0, device_reserved_ = 0, host_slack_ = 0;
  std::array<uint64_t, kRoleCount> host_by_role_{}, device_by_role_{};
  std::array<uint64_t, kPhaseCount> host_by_phase_{};
  uint8_t process_phase_ = ADPROF_PHASE_OTHER;  // thread_phase()
  std::array<uint64_t, kSpaceCount> by_space_{};
  uint64_t unmatched_frees_ = 0, unknown_retags_ = 0, serial_ = 0;
  LastChange last_;
  std::deque<Block> removed_copies_;  // what last_ points to that left the store
};

// Live blocks by key, as Replay::blocks() shows them.
class Replay::BlockMap {
 public:
  using value_type = std::pair<uint64_t, const Block &>;
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = BlockMap::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = value_type;
    struct pointer {
      value_type pair;
      const value_type *operator->() const { return &pair; }
    };
    const_iterator() = default;
    const_iterator(const BlockIndex::Entry *at, const BlockIndex::Entry *end, const Block *store)
        : at_(at), end_(end), store_(store) {
      skip();
    }
    value_type operator*() const { return {at_->key, store_[at_->slot]}; }
    pointer operator->() const { return {**this}; }
    const_iterator &operator++() {
      ++at_;
      skip();
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    bool operator==(const const_iterator &o) const { return at_ == o.at_; }

   private:
    void skip() {
      while (at_ != end_ && at_->slot == BlockIndex::kEmpty) ++at_;
    }
    const BlockIndex::Entry *at_ = nullptr, *end_ = nullptr;
    const Block *store_ = nullptr;
  };
  using iterator = const_iterator;

  BlockMap(const BlockIndex &index, const std::vector<Block> &store)
      : index_(&index), store_(store.data()) {}
  const_iterator begin() const { return {index_->begin(), index_->end(), store_}; }
  const_iterator end() const { return {index_->end(), index_->end(), store_}; }
  size_t size() const { return index_->size(); }
  bool empty() const { return index_->empty(); }
  size_t count(uint64_t key) const { return index_->find(key) ? 1 : 0; }
  bool contains(uint64_t key) const { return index_->find(key) != nullptr; }
  const_iterator find(uint64_t key) const {
    const BlockIndex::Entry *en = index_->find(key);
    return en ? const_iterator(en, index_->end(), store_) : end();
  }
  const Block *get(uint64_t key) const {  // nullptr when no block has that key
    const BlockIndex::Entry *en = index_->find(key);
    return en ? &store_[en->slot] : nullptr;
  }

 private:
  const BlockIndex *index_;
  const Block *store_;
};

inline Replay::BlockMap Replay::blocks() const { return BlockMap(index_, store_); }

// ---- the fast path, inline: analyze() calls it for nearly every event ----

inline uint32_t Replay::new_slot() {
  if (!free_slots_.empty()) {
    uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  store_.emplace_back();
  return static_cast<uint32_t>(store_.size() - 1);
}

// add<true>() and add<false>() for a heap block, without their tests of its space.
inline void Replay::add_heap(const Block &b) {
  by_space_[ADPROF_SPACE_HEAP] += b.size;
  host_live_ += b.size;
  host_by_role_[b.role] += b.size;
  host_by_phase_[b.phase] += b.size;
  host_slack_ += b.slack;
}
inline void Replay::remove_heap(const Block &b) {
  by_space_[ADPROF_SPACE_HEAP] -= b.size;
  host_live_ -= b.size;
  host_by_role_[b.role] -= b.size;
  host_by_phase_[b.phase] -= b.size;
  host_slack_ -= b.slack;
}

inline Replay::HeapChange Replay::apply_heap(const Event &e) {
  ++serial_;
  if (!removed_copies_.empty()) removed_copies_.clear();
  HeapChange change;
  if (e.type == format::EventType::kFree) {
    const BlockIndex::Entry *en = index_.find(e.addr);
    if (!en) {
      ++unmatched_frees_;
      return change;
    }
    const uint32_t slot = en->slot;
    const Block &b = store_[slot];  // stays in its slot until the next apply
    index_.erase(en);
    free_slots_.push_back(slot);
    if (b.describe_index) free_shapes_.push_back(b.describe_index - 1);
    remove_heap(b);
    change.block = change.removed = &b;
    change.temporary = is_temporary(b, e.thread);
    return change;
  }
  auto [en, inserted] = index_.insert(e.addr, 0);
  if (inserted) {
    en->slot = new_slot();
  } else {  // the free was lost (cut chunk): the old block is gone
    const Block &old = removed_copies_.emplace_back(store_[en->slot]);
    remove_heap(old);
    if (old.describe_index) free_shapes_.push_back(old.describe_index - 1);
    change.removed = &old;
  }
  ThreadContext &ctx = context(e.thread);
  ctx.last_alloc_serial = serial_;
  const OpFrame op = ctx.ops.empty() ? OpFrame{0, 0} : ctx.ops.back();
  Block &b = store_[en->slot];
  b = Block{.size = e.a,
            .slack = e.b,
            .serial = serial_,
            .op_instance = op.instance,
            .op_name = op.name,
            .role = ctx.role,
            .phase = phase_of(ctx),
            .thread = e.thread,
            .stack = e.stack,
            .alloc_ticks = e.ticks};
  add_heap(b);
  change.block = &b;
  return change;
}

}  // namespace adprof
