// The heap coder: state that the writer and the reader of a trace both keep per thread stream,
// so that the commonest events, heap allocations and frees, need few bytes. Documented with the
// rest of the encoding in trace_format.h ("Heap events").
//
// Both sides reset it at the start of every chunk (a chunk still decodes alone) and update it
// with the same heap events in the same order, so they agree on its contents:
//   - slots for the blocks this thread allocated in this chunk and has not freed: a free of
//     one is written as the block's slot (13 bits) instead of its address;
//   - for each small size class, a stack of the addresses this thread freed last, mirroring
//     jemalloc's per-thread cache, which hands a freed block back first (LIFO): an allocation
//     that gets the top of its class's stack is written without an address.
// Neither side depends on the other being jemalloc-exact: a prediction that fails only costs
// the bytes of the address, and the slots only serve blocks they hold.
//
// Version 3 (HeapCoder) gives slots from a free list, last freed first: the reader mirrors it
// with an array and a stack, and only the writer looks addresses up (in a hash index of its
// own). Version 2 (HeapCoderV2, read only) made the slot a block's place in a hash table,
// which the reader had to mirror probe by probe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace adprof::format {

// jemalloc's usable size for a malloc of `size` under its default size classes (16-byte
// quantum, four classes per doubling); 0 when out of range. An allocation whose usable size is
// this one is written without its slack.
inline uint64_t default_usable_size(uint64_t size) {
  if (size <= 8) return 8;
  if (size <= 128) return (size + 15) & ~uint64_t{15};
  if (size > (uint64_t{1} << 48)) return 0;
  int lg = 64 - __builtin_clzll(size - 1);  // 2^(lg-1) < size <= 2^lg
  uint64_t delta = uint64_t{1} << (lg - 3);
  return (size + delta - 1) & ~(delta - 1);
}

// What both versions share: the class stacks that predict allocations.
class ClassStacks {
 public:
  static constexpr uint32_t kSmallClasses = 49;  // usable sizes up to 32 KiB
  static constexpr uint32_t kLargeClass = kSmallClasses;
  static constexpr uint32_t kStackDepth = 64;
  static constexpr uint32_t kNoSlot = ~0u;

  // Index of a usable size: 0..48 for sizes up to 32 KiB (one per jemalloc class), else 49.
  static uint32_t class_of(uint64_t usable) {
    if (usable <= 128) return static_cast<uint32_t>(usable >> 3);
    if (usable > 32768) return kLargeClass;
    uint64_t x = usable - 1;
    int lg = 63 - __builtin_clzll(x);  // 7..14
    return 17 + static_cast<uint32_t>((lg - 7) * 4) + static_cast<uint32_t>((x >> (lg - 2)) & 3);
  }

  // The address an allocation of class `cls` would get if it took the top of the class's
  // stack; 0 when the stack is empty (or the class is large).
  uint64_t predicted(uint32_t cls) const {
    return cls < kSmallClasses && depth_[cls] ? stack_[cls][top_[cls]] : 0;
  }
  // Base of the address delta of an allocation that was not predicted: the address after the
  // class's last allocation (jemalloc fills an empty cache with consecutive regions).
  uint64_t next_expected(uint32_t cls, uint64_t usable) const { return last_alloc_[cls] + usable; }
  // A free written with its address and class (a block the slots do not hold).
  void on_free_address(uint64_t addr, uint32_t cls) { push(addr, cls); }

 protected:
  void reset_stacks() {
    std::memset(depth_, 0, sizeof depth_);
    std::memset(last_alloc_, 0, sizeof last_alloc_);
  }
  // Every heap allocation: pops the stack if it predicted `addr` (else the stack no longer
  // mirrors jemalloc's cache and is emptied).
  void stacks_on_alloc(uint64_t addr, uint32_t cls) {
    if (cls < kSmallClasses && depth_[cls]) {
      if (stack_[cls][top_[cls]] == addr) {
        --depth_[cls];
        top_[cls] = (top_[cls] - 1) & (kStackDepth - 1);
      } else {
        depth_[cls] = 0;
      }
    }
    last_alloc_[cls] = addr;
  }
  void push(uint64_t addr, uint32_t cls) {
    if (cls >= kSmallClasses) return;
    top_[cls] = (top_[cls] + 1) & (kStackDepth - 1);
    stack_[cls][top_[cls]] = addr;
    if (depth_[cls] < kStackDepth) ++depth_[cls];
  }

 private:
  uint8_t depth_[kSmallClasses];
  uint8_t top_[kSmallClasses];
  uint64_t stack_[kSmallClasses][kStackDepth];
  uint64_t last_alloc_[kSmallClasses + 1];
};

// Version 6: a free by slot of a block at most this old (in allocations, HeapCoder::age_of)
// names it by its age in a plain chunk and by its recency rank in a columnar one (trace_format.h,
// "Heap events"); an older block is named by its slot in both. A recent block's rank takes a few
// word and count reads (LiveOrder); an old one's would take up to a hundred, and a program that
// frees old blocks in no particular order (the storm) gains nothing from ranks.
inline constexpr uint64_t kRankedAge = 512;

// Version 3. Every heap allocation (compact or not) takes a slot, if its address is below
// 2^48 and a slot is left: the slot freed last, else the next never used. A free by slot gives
// it back. Both sides run on_alloc() and on_free_slot(); the writer also keeps its index (an
// address's slot) with remember() and take().
class HeapCoder : public ClassStacks {
 public:
  static constexpr uint32_t kSlots = 6144;  // slot < kSlots: 13 bits
  static constexpr uint32_t kIndexBits = 13;
  static constexpr uint32_t kIndexSize = 1u << kIndexBits;  // at most 3/4 full

  void reset() {
    reset_stacks();
    allocations_ = 0;
    free_count_ = 0;
    next_slot_ = 0;
    if (index_used_) std::memset(index_, 0, sizeof index_);
    index_used_ = false;
  }

  // Every heap allocation: the class stacks, then a slot. Returns the slot (kNoSlot: none).
  uint32_t on_alloc(uint64_t addr, uint32_t cls) {
    stacks_on_alloc(addr, cls);
    const uint32_t ordinal = allocations_++;
    if (addr == 0 || addr >> 48) return kNoSlot;
    uint32_t slot;
    if (free_count_ > 0)
      slot = free_[--free_count_];
    else if (next_slot_ < kSlots)
      slot = next_slot_++;
    else
      return kNoSlot;
    slots_[slot] = addr | static_cast<uint64_t>(cls + 1) << 56;
    ordinal_[slot] = ordinal;
    return slot;
  }
  // The chunk's heap allocations so far (on_alloc calls): the next one's ordinal.
  uint32_t allocations() const { return allocations_; }
  // Version 6: a block's age, the allocations since its own, counting it (1: the last one),
  // and the ordinal of its allocation.
  uint32_t age_of(uint32_t slot) const { return allocations_ - ordinal_[slot]; }
  uint32_t ordinal_of(uint32_t slot) const { return ordinal_[slot]; }
  // The address in a slot; 0 for a free or never used slot, or one out of range.
  uint64_t address_at(uint64_t slot) const {
    return slot < next_slot_ ? slots_[slot] & kAddrMask : 0;
  }
  // A free written as its slot: gives the slot back and pushes the address on its class's
  // stack. Returns the address (0: a slot that holds no block).
  uint64_t on_free_slot(uint32_t slot) {
    const uint64_t entry = slot < next_slot_ ? slots_[slot] : 0;
    if (entry == 0) return 0;
    slots_[slot] = 0;
    free_[free_count_++] = static_cast<uint16_t>(slot);
    const uint64_t addr = entry & kAddrMask;
    push(addr, static_cast<uint32_t>(entry >> 56) - 1);
    return addr;
  }
  // A hint: the slot a coming free will read.
  void prefetch_slot(uint64_t slot) const {
    if (slot < kSlots) __builtin_prefetch(&slots_[slot]);
  }

  // ---- the writer's index ----
  // After on_alloc() gave `addr` a slot. An address already in the index is a block this
  // thread allocated and another thread freed: its old slot stays taken (unused) to the end of
  // the chunk, as the reader, which sees no such free, keeps it too.
  void remember(uint64_t addr, uint32_t slot) {
    index_used_ = true;
    const uint64_t entry = addr | static_cast<uint64_t>(slot + 1) << 48;
    for (uint32_t i = home(addr);; i = (i + 1) & (kIndexSize - 1)) {
      if (index_[i] == 0 || (index_[i] & kIndexAddrMask) == addr) {
        index_[i] = entry;
        return;
      }
    }
  }
  // A free: the slot of `addr` (kNoSlot: none), which leaves the index.
  uint32_t take(uint64_t addr) {
    if (!index_used_ || addr == 0 || addr >> 48) return kNoSlot;
    for (uint32_t i = home(addr);; i = (i + 1) & (kIndexSize - 1)) {
      const uint64_t entry = index_[i];
      if (entry == 0) return kNoSlot;
      if ((entry & kIndexAddrMask) == addr) {
        erase(i);
        return static_cast<uint32_t>(entry >> 48) - 1;
      }
    }
  }

 private:
  static constexpr uint64_t kAddrMask = (uint64_t{1} << 56) - 1;
  static constexpr uint64_t kIndexAddrMask = (uint64_t{1} << 48) - 1;

  static uint32_t home(uint64_t addr) {
    return static_cast<uint32_t>(((addr >> 3) * 0x9E3779B97F4A7C15ull) >> (64 - kIndexBits));
  }
  // Linear probing's backward-shift deletion: no tombstones, so lookups stay short.
  void erase(uint32_t at) {
    uint32_t hole = at;
    for (uint32_t j = (at + 1) & (kIndexSize - 1); index_[j] != 0; j = (j + 1) & (kIndexSize - 1)) {
      const uint32_t h = home(index_[j] & kIndexAddrMask);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      if (((j - h) & (kIndexSize - 1)) >= ((j - hole) & (kIndexSize - 1))) {
        index_[hole] = index_[j];
        hole = j;
      }
    }
    index_[hole] = 0;
  }

  uint64_t slots_[kSlots];    // 0: free; else address | (class + 1) << 56
  uint32_t ordinal_[kSlots];  // the ordinal of the allocation that holds the slot
  uint32_t allocations_ = 0;
  uint16_t free_[kSlots];  // the free slots below next_slot_, last freed on top
  uint32_t free_count_ = 0;
  uint32_t next_slot_ = 0;
  bool index_used_ = false;
  // The writer's: 0, or address | (slot + 1) << 48. No initialiser: the writer's coders are
  // zeroed pages (mapped, never constructed), the reader's never use it and are made
  // default-initialised so that their untouched pages stay unmapped; a value-initialised coder
  // (make_unique) is zeroed whole.
  uint64_t index_[kIndexSize];
};

// Version 6: the chunk's heap allocations in stream order (their ordinals 0, 1, ..., one per
// HeapCoder::on_alloc), each marked live until it is freed by slot, so that such a free is
// written as the block's recency rank: how many blocks allocated after it in the chunk are still
// live (0: the newest). A program frees mostly what it allocated last, and the ranks repeat with
// its allocation pattern where slot numbers, handed out from a free list, do not (the Python
// JSON run of docs/PERFORMANCE.md: 0.020 -> 0.002 B/event). The writer thread's column split
// turns the recording threads' ages (HeapCoder::age_of) into ranks with one of these, the
// reader turns ranks back into ordinals with another.
// A bitmap of the ordinals with the live counts of its blocks of 8 words (512 ordinals) and of
// its groups of 64 blocks (32768): an allocation or a free updates one bit and two counts, and a
// rank sums what lies after the block: a few words and counts for a block freed soon after its
// allocation, as most are, and at most 7 words, 63 blocks and 15 groups for the oldest block of
// a full chunk. (A Fenwick tree bounds a rank better but costs a dozen scattered updates per
// free, which was a quarter of the writer thread's time on the storm.) Storage is the caller's
// (the writer reserves it at start-up).
class LiveOrder {
 public:
  static constexpr uint32_t kNone = ~0u;
  static constexpr uint32_t kWordsPerBlock = 8, kBlocksPerGroup = 64;
  // The words, and the counts (blocks, then groups), for `capacity` ordinals.
  static constexpr size_t words_for(size_t capacity) { return capacity / 64 + 1; }
  static constexpr size_t counts_for(size_t capacity) {
    return words_for(capacity) / kWordsPerBlock + 1 +
           words_for(capacity) / kWordsPerBlock / kBlocksPerGroup + 1;
  }

  // Storage for up to `capacity` ordinals: words_for(capacity) words, counts_for(capacity)
  // counts.
  void attach(uint64_t *words, uint16_t *counts, size_t capacity) {
    words_ = words;
    counts_ = counts;
    capacity_ = capacity;
    next_ = live_ = 0;
    blocks_ = groups_ = nullptr;
  }
  // Empty, for a chunk of up to `capacity` allocations; false if the storage is too small.
  bool restart(size_t capacity) {
    if (capacity > capacity_) return false;
    limit_ = static_cast<uint32_t>(words_for(capacity) * 64);
    const size_t block_count = words_for(capacity) / kWordsPerBlock + 1;
    blocks_ = counts_;
    groups_ = counts_ + block_count;
    std::memset(words_, 0, words_for(capacity) * sizeof *words_);
    std::memset(counts_, 0, counts_for(capacity) * sizeof *counts_);
    next_ = live_ = 0;
    return true;
  }
  // The next allocation, live. False when there is no room (a malformed chunk).
  bool push() {
    const uint32_t ordinal = next_;
    if (ordinal >= limit_) return false;
    ++next_;
    words_[ordinal / 64] |= uint64_t{1} << (ordinal % 64);
    ++blocks_[ordinal / kBlockOrdinals];
    ++groups_[ordinal / kGroupOrdinals];
    ++live_;
    return true;
  }
  uint32_t size() const { return next_; }
  bool live(uint32_t ordinal) const {
    return ordinal < next_ && (words_[ordinal / 64] >> (ordinal % 64) & 1);
  }
  // The live ordinals after `ordinal`.
  uint32_t rank_of(uint32_t ordinal) const {
    const uint32_t w = ordinal / 64, b = ordinal / kBlockOrdinals, g = ordinal / kGroupOrdinals;
    const uint32_t last = next_ - 1;  // the newest ordinal: nothing lies after it
    uint32_t rank = ordinal % 64 == 63 ? 0 : popcount(words_[w] >> (ordinal % 64 + 1));
    for (uint32_t i = w + 1, end = std::min((b + 1) * kWordsPerBlock, last / 64 + 1); i < end; ++i)
      rank += popcount(words_[i]);
    for (uint32_t i = b + 1, end = std::min((g + 1) * kBlocksPerGroup, last / kBlockOrdinals + 1);
         i < end; ++i)
      rank += blocks_[i];
    for (uint32_t i = g + 1, end = last / kGroupOrdinals + 1; i < end; ++i) rank += groups_[i];
    return rank;
  }
  // A live ordinal freed.
  void remove(uint32_t ordinal) {
    words_[ordinal / 64] &= ~(uint64_t{1} << (ordinal % 64));
    --blocks_[ordinal / kBlockOrdinals];
    --groups_[ordinal / kGroupOrdinals];
    --live_;
  }
  // The live ordinal with `rank` live ones after it; kNone if there is none.
  uint32_t with_rank(uint32_t rank) const {
    if (rank >= live_ || next_ == 0) return kNone;
    const uint32_t last = next_ - 1;
    uint32_t g = last / kGroupOrdinals;
    for (; groups_[g] <= rank; --g) rank -= groups_[g];
    uint32_t b = std::min((g + 1) * kBlocksPerGroup, last / kBlockOrdinals + 1) - 1;
    for (; blocks_[b] <= rank; --b) rank -= blocks_[b];
    uint32_t w = std::min((b + 1) * kWordsPerBlock, last / 64 + 1) - 1;
    for (; popcount(words_[w]) <= rank; --w) rank -= popcount(words_[w]);
    // The bit with `rank` set bits above it.
    uint64_t bits = words_[w];
    for (uint32_t k = popcount(bits) - rank; k > 1; --k) bits &= bits - 1;
    return w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
  }

 private:
  static constexpr uint32_t kBlockOrdinals = 64 * kWordsPerBlock;
  static constexpr uint32_t kGroupOrdinals = kBlockOrdinals * kBlocksPerGroup;
  // Without a call to libgcc (the baseline x86-64 has no popcnt instruction).
  static uint32_t popcount(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return static_cast<uint32_t>((x * 0x0101010101010101ull) >> 56);
  }

  uint64_t *words_ = nullptr;
  uint16_t *counts_ = nullptr;
  uint16_t *blocks_ = nullptr, *groups_ = nullptr;  // within counts_
  size_t capacity_ = 0;
  uint32_t limit_ = 0;  // ordinals the chunk has room for
  uint32_t next_ = 0, live_ = 0;
};

// Version 2 (read only): a block's slot is its place in a hash table of 8192 entries, at most
// 3/4 full, with linear probing and backward-shift deletion.
class HeapCoderV2 : public ClassStacks {
 public:
  static constexpr uint32_t kTableBits = 13;
  static constexpr uint32_t kTableSize = 1u << kTableBits;
  static constexpr uint32_t kTableMaxLoad = kTableSize / 4 * 3;

  void reset() {
    reset_stacks();
    std::memset(table_, 0, sizeof table_);
    count_ = 0;
  }

  // Every heap allocation, compact or not: the class stacks, then the block enters the table
  // (unless it is full).
  void on_alloc(uint64_t addr, uint32_t cls) {
    stacks_on_alloc(addr, cls);
    insert(addr, cls);
  }
  // The address in a slot; 0 for an empty slot or one out of range (a damaged stream).
  uint64_t address_at(uint64_t slot) const {
    return slot < kTableSize ? table_[slot] & kAddrMask : 0;
  }
  // A hint: the entry of a slot a coming free will read.
  void prefetch_slot(uint64_t slot) const {
    if (slot < kTableSize) __builtin_prefetch(&table_[slot]);
  }
  // A free written as its slot: takes the block out of the table and pushes its address on
  // its class's stack. Returns the address (0: empty slot).
  uint64_t on_free_slot(uint32_t slot) {
    if (slot >= kTableSize) return 0;
    uint64_t entry = table_[slot];
    if (entry == 0) return 0;
    uint64_t addr = entry & kAddrMask;
    erase(slot);
    push(addr, static_cast<uint32_t>(entry >> 56) - 1);
    return addr;
  }

 private:
  static constexpr uint64_t kAddrMask = (uint64_t{1} << 56) - 1;

  static uint32_t home(uint64_t addr) {
    return static_cast<uint32_t>(((addr >> 3) * 0x9E3779B97F4A7C15ull) >> (64 - kTableBits));
  }
  void insert(uint64_t addr, uint32_t cls) {
    if (addr == 0 || addr >> 56) return;
    uint64_t entry = addr | (static_cast<uint64_t>(cls + 1) << 56);
    uint32_t i = home(addr);
    for (;; i = (i + 1) & (kTableSize - 1)) {
      if (table_[i] == 0) break;
      if ((table_[i] & kAddrMask) == addr) {  // freed by another thread, allocated again
        table_[i] = entry;
        return;
      }
    }
    if (count_ >= kTableMaxLoad) return;
    table_[i] = entry;
    ++count_;
  }
  void erase(uint32_t slot) {
    uint32_t hole = slot;
    for (uint32_t j = (slot + 1) & (kTableSize - 1); table_[j] != 0;
         j = (j + 1) & (kTableSize - 1)) {
      uint32_t h = home(table_[j] & kAddrMask);
      if (((j - h) & (kTableSize - 1)) >= ((j - hole) & (kTableSize - 1))) {
        table_[hole] = table_[j];
        hole = j;
      }
    }
    table_[hole] = 0;
    --count_;
  }

  uint64_t table_[kTableSize];  // 0: empty; else address | (class + 1) << 56
  uint32_t count_ = 0;
};

}  // namespace adprof::format
