// The what-if analysis's recorded storages (docs/WHATIF.md): heap blocks as logical storages,
// read off the replay the passes ride on. A storage id is the index of the event that started
// it: the allocation that gave a block its shape (the replay's serial of the block), or the
// retag that took a buffer from an engine's arena. Both passes derive the same ids from
// identical replays.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <utility>

#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace adprof::whatif {

// What one event did to the storages.
struct Change {
  enum Type : uint8_t { kNoChange, kAcquire, kRelease, kIdleFree } type = kNoChange;
  uint64_t storage = 0;
  uint64_t size = 0;
  bool arena = false;  // acquire: taken from an arena; release: given back to one
  uint64_t addr = 0;
  // Release: the marks its acquire left (mark()); 0 for a storage never marked.
  uint64_t marks = 0;
};

// Follows the replay's live heap blocks as storages. The replay already finds each block (its
// index is prefetched ahead by the driver); the tracker keeps apart only the few blocks whose
// storage is not their serial, or that a caller marked: a small map of notes by address that
// stays in the cache, where a map of every live block missed it on nearly every free (it was a
// sixth of `adprof report`'s time on a long training run).
class Tracker {
 public:
  explicit Tracker(const Replay &replay) : replay_(replay) {}

  // Starts following at event number `index`, already applied to the replay: each live heap
  // block is the storage named by its serial.
  void seed(uint64_t index) {
    seed_serial_ = replay_.serial();
    offset_ = index - seed_serial_;
    notes_.clear();
    phys_ = 0;
    for (const auto &[key, b] : replay_.blocks())
      if (b.space == ADPROF_SPACE_HEAP) phys_ += b.size;
  }

  // A heap allocation or free (Replay::is_heap_event), event number `index`; `c` is what the
  // replay did with it.
  Change apply_heap(const Event &e, const Replay::HeapChange &c, uint64_t index) {
    if (e.type == format::EventType::kAlloc) {
      if (c.removed) {  // a lost free: the old block is gone
        phys_ -= c.removed->size;
        if (!notes_.empty()) notes_.erase(e.addr);
      }
      phys_ += e.a;
      return {Change::kAcquire, index, e.a, false, e.addr};
    }
    if (!c.block) return {};
    phys_ -= c.block->size;
    Change change{Change::kRelease, storage_of(*c.block), c.block->size, false, e.addr};
    if (!notes_.empty()) {
      auto it = notes_.find(e.addr);
      if (it != notes_.end()) {
        const Note n = it->second;
        notes_.erase(it);
        if (n.idle) return {Change::kIdleFree, 0, c.block->size, true, e.addr};
        change.storage = n.storage;
        change.marks = n.marks;
      }
    }
    return change;
  }

  // Any other event (after the replay applied it): a retag of a heap block to or from an
  // engine's arena (the role "workspace") releases or acquires a storage.
  Change apply(const Event &e, uint64_t index) {
    if (e.type != format::EventType::kRetag) return {};
    const Block *b = replay_.blocks().get(e.addr);
    if (!b || b->space != ADPROF_SPACE_HEAP) return {};
    auto it = notes_.find(e.addr);
    const bool idle = it != notes_.end() && it->second.idle;
    if (e.operand == ADPROF_ROLE_WORKSPACE && !idle) {  // given back to the arena
      Change c{Change::kRelease, storage_of(*b), b->size, true, e.addr};
      if (it != notes_.end()) {
        c.storage = it->second.storage;
        c.marks = it->second.marks;
      }
      notes_.insert_or_assign(e.addr, Note{c.storage, 0, true});
      return c;
    }
    if (e.operand != ADPROF_ROLE_WORKSPACE && idle) {  // taken from the arena
      it->second = Note{index, 0, false};
      return {Change::kAcquire, index, b->size, true, e.addr};
    }
    return {};
  }

  // f(address, storage, size) for every live storage (and idle arena buffer).
  template <class F>
  void for_each(F f) const {
    for (const auto &[key, b] : replay_.blocks())
      if (b.space == ADPROF_SPACE_HEAP) {
        auto it = notes_.find(key);
        f(key, it != notes_.end() ? it->second.storage : storage_of(b), b.size);
      }
  }
  // The storage live at a block address, with its size (0, 0: none).
  std::pair<uint64_t, uint64_t> storage_at(uint64_t addr) const {
    const Block *b = replay_.blocks().get(addr);
    if (!b || b->space != ADPROF_SPACE_HEAP) return {0, 0};
    auto it = notes_.find(addr);
    if (it == notes_.end()) return {storage_of(*b), b->size};
    if (it->second.idle) return {0, 0};
    return {it->second.storage, b->size};
  }
  // Marks the storage live at `addr` (acquired by the last event): its release reports them.
  void mark(uint64_t addr, uint64_t marks) {
    const Block *b = replay_.blocks().get(addr);
    if (!b) return;
    auto [it, inserted] = notes_.try_emplace(addr, Note{storage_of(*b), marks, false});
    if (!inserted) it->second.marks = marks;
  }
  // Bytes of the live heap blocks.
  uint64_t phys() const { return phys_; }

 private:
  // A block without a note is the storage of its serial: the event index of its allocation
  // (the replay counts the events the driver hands out, from the seed on in step).
  uint64_t storage_of(const Block &b) const {
    return b.serial > seed_serial_ ? b.serial + offset_ : b.serial;
  }
  struct Note {
    uint64_t storage;  // taken from an arena: the retag's index; given back: its last
    uint64_t marks;
    bool idle;  // given back to its arena
  };
  const Replay &replay_;
  absl::flat_hash_map<uint64_t, Note> notes_;  // by address (iteration order unused)
  uint64_t seed_serial_ = 0, offset_ = 0, phys_ = 0;
};

}  // namespace adprof::whatif
