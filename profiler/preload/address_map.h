// A hash map from 64-bit keys (block addresses, label keys) to small values, for the step
// window's writer (step_window.cpp), which looks up every heap event's block in its live map.
// std::unordered_map cost the writer a node allocation and free per block and two dependent
// cache misses per lookup (bucket, then node); this is one flat table: open addressing, linear
// probing, a power-of-two size, at most 3/4 full, and backward-shift deletion (Knuth, TAOCP
// vol. 3, 6.4, Algorithm R), so no tombstones pile up under the churn of an allocation storm.
// One thread only (the writer's); no lock. Its memory is about std::unordered_map's: 40 B a
// slot for the live map's blocks, 3/8 to 3/4 of them in use, 53 to 107 B a block (measured with
// glibc's malloc, 16 K to 1 M blocks: 70 to 105 B, against 73 to 78); a growth holds the old
// table and the new one at once.
//
// Layout: `slots_` holds capacity() slots and, after them, one more for the key 0. A slot of
// the table whose key is 0 is empty, so the key 0 (a label key of role 0 and no label; any key
// is allowed) lives in that last slot, occupied when `has_zero_`. A key's home slot is the top
// bits of its product by 2^64 / phi (Fibonacci hashing; Knuth, 6.4) after its high half is
// folded into its low: addresses aligned to 16 or to pages differ only in their middle bits.
//
// As std::unordered_map but: iterators and pointers to values are invalidated by any insert
// (a growth moves every slot) and by any erase (later slots of the run shift back); erase()
// returns nothing; clear() gives the table's memory back. Iteration order is that of the slots:
// a function of the keys and of the order of the inserts and erases, the same on every run of
// the same events (no random seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace adprof::preload {

template <class V>
class AddressMap {
 public:
  // Not pair<const uint64_t, V>: the slots move (growth, backward shift).
  using value_type = std::pair<uint64_t, V>;
  using Slot = value_type;

  template <bool kConst>
  class Iterator {
   public:
    using Map = std::conditional_t<kConst, const AddressMap, AddressMap>;
    using Entry = std::conditional_t<kConst, const Slot, Slot>;
    using iterator_category = std::forward_iterator_tag;
    using value_type = AddressMap::Slot;
    using difference_type = std::ptrdiff_t;
    using pointer = Entry *;
    using reference = Entry &;
    Iterator() = default;
    Iterator(Map *map, size_t index) : map_(map), index_(index) { skip_empty(); }
    // An iterator converts to a const one, as the std maps' do.
    operator Iterator<true>() const  // NOLINT(google-explicit-constructor)
        requires(!kConst) {
      return {map_, index_};
    }
    Entry &operator*() const { return map_->slots_[index_]; }
    Entry *operator->() const { return &map_->slots_[index_]; }
    Iterator &operator++() {
      ++index_;
      skip_empty();
      return *this;
    }
    Iterator operator++(int) {
      Iterator was = *this;
      ++*this;
      return was;
    }
    bool operator==(const Iterator &o) const { return index_ == o.index_; }

   private:
    friend class AddressMap;
    void skip_empty() {
      while (index_ < map_->slots_.size() && !map_->occupied(index_)) ++index_;
    }
    Map *map_ = nullptr;
    size_t index_ = 0;
  };
  using iterator = Iterator<false>;
  using const_iterator = Iterator<true>;

  iterator begin() { return {this, 0}; }
  iterator end() { return {this, slots_.size()}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, slots_.size()}; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Slots in the table (0 before the first insert), the key 0's aside.
  size_t capacity() const { return slots_.empty() ? 0 : mask_ + 1; }

  iterator find(uint64_t key) { return {this, index_of(key)}; }
  const_iterator find(uint64_t key) const { return {this, index_of(key)}; }
  bool contains(uint64_t key) const { return index_of(key) != slots_.size(); }

  // As try_emplace: `value` stored only if `key` is not there; the slot of `key`, and whether
  // it was inserted.
  std::pair<iterator, bool> emplace(uint64_t key, const V &value) {
    const size_t found = index_of(key);
    if (found != slots_.size()) return {iterator(this, found), false};
    const size_t at = insert_new(key);
    slots_[at].second = value;
    return {iterator(this, at), true};
  }

  // The value of `key`, value-initialised if it was not there.
  V &operator[](uint64_t key) {
    const size_t found = index_of(key);
    if (found != slots_.size()) return slots_[found].second;
    const size_t at = insert_new(key);
    slots_[at].second = V{};
    return slots_[at].second;
  }

  void erase(const_iterator it) { erase_at(it.index_); }
  size_t erase(uint64_t key) {
    const size_t found = index_of(key);
    if (found == slots_.size()) return 0;
    erase_at(found);
    return 1;
  }

  void clear() {
    std::vector<Slot>().swap(slots_);
    mask_ = 0;
    shift_ = 64;
    size_ = 0;
    has_zero_ = false;
  }

 private:
  static constexpr size_t kMinCapacity = 16;

  // The slot where the probe for `key` starts.
  size_t home(uint64_t key) const {
    return static_cast<size_t>(((key ^ key >> 32) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  size_t zero_slot() const { return mask_ + 1; }
  bool occupied(size_t i) const { return i <= mask_ ? slots_[i].first != 0 : has_zero_; }

  // The slot holding `key`, or slots_.size() (end) when it is not there.
  size_t index_of(uint64_t key) const {
    if (slots_.empty()) return 0;
    if (key == 0) return has_zero_ ? zero_slot() : slots_.size();
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const uint64_t k = slots_[i].first;
      if (k == key) return i;
      if (k == 0) return slots_.size();
    }
  }

  // A slot for `key`, known absent, its key set (the caller sets the value).
  size_t insert_new(uint64_t key) {
    if (slots_.empty() || (size_ - has_zero_ + 1) * 4 > capacity() * 3)
      grow(slots_.empty() ? kMinCapacity : 2 * capacity());
    ++size_;
    if (key == 0) {
      has_zero_ = true;
      return zero_slot();
    }
    size_t i = home(key);
    while (slots_[i].first != 0) i = (i + 1) & mask_;
    slots_[i].first = key;
    return i;
  }

  void grow(size_t capacity) {
    std::vector<Slot> old(capacity + 1);
    old.swap(slots_);
    const size_t old_table = old.empty() ? 0 : old.size() - 1;
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (size_t j = 0; j < old_table; ++j) {
      if (old[j].first == 0) continue;
      size_t i = home(old[j].first);
      while (slots_[i].first != 0) i = (i + 1) & mask_;
      slots_[i] = std::move(old[j]);
    }
    if (has_zero_) slots_[zero_slot()] = std::move(old[old_table]);
  }

  // Backward shift: each later slot of the run that may move into the hole (its home is not
  // within the hole's side of it, cyclically) does, and leaves the hole behind it; the run ends
  // at an empty slot. Every key stays reachable from its home without a gap.
  void erase_at(size_t hole) {
    --size_;
    if (hole == zero_slot()) {
      has_zero_ = false;
      slots_[hole].second = V{};
      return;
    }
    for (size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
      const uint64_t k = slots_[j].first;
      if (k == 0) break;
      // From its home to j is at least from the hole to j: the hole is on its probe path.
      if (((j - home(k)) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = std::move(slots_[j]);
        hole = j;
      }
    }
    slots_[hole].first = 0;
    slots_[hole].second = V{};
  }

  std::vector<Slot> slots_;  // capacity() of the table, then the key 0's
  size_t mask_ = 0;          // capacity() - 1
  unsigned shift_ = 64;      // 64 - log2(capacity())
  size_t size_ = 0;
  bool has_zero_ = false;
};

}  // namespace adprof::preload
