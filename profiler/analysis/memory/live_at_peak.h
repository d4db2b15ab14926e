// The live set of one memory at its peak, observed over one replay (analyze.cpp uses it twice:
// the host's and the devices'). Copying the live set at every new peak would cost a copy per
// allocation while memory rises, so blocks carry the serial of the event that made them, and a
// block live at the peak that is freed or retagged afterwards leaves its state at the peak in a
// log, which a new peak clears. At the end, the live set at the peak is the blocks still live
// that are older than the peak (and not retagged since), plus the log. The log holds at most one
// entry per block live at the peak: memory is bounded by live blocks, not by events.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "adprof/replay.h"

namespace adprof {

enum class PeakMemory : uint8_t {
  kHost,    // the heap and pinned host memory, with the anonymous mappings live then
  kDevice,  // device blocks handed to tensors and raw device allocations
};

template <PeakMemory kMemory>
class LiveAtPeak {
 public:
  // The blocks of this memory. The host's live set takes the mappings along (the report lists
  // the largest of them apart; its host figures leave them out).
  static bool holds(int space) {
    if constexpr (kMemory == PeakMemory::kHost)
      return is_host_space(space) || space == ADPROF_SPACE_MMAP;
    else
      return is_device_space(space);
  }

  explicit LiveAtPeak(const Replay &replay) : replay_(replay) {}

  // The caller found a new peak of this memory after the event just applied: the live set now
  // is the one kept.
  void at_new_peak() {
    peak_serial_ = replay_.serial();
    log_.clear();
    shapes_.clear();
    if (!retagged_.empty()) retagged_.clear();
  }

  // A heap block that stopped being live on the replay's fast path (Replay::HeapChange).
  [[gnu::always_inline]] void on_heap_removed(uint64_t key, const Block &b) {
    static_assert(kMemory == PeakMemory::kHost, "only the host holds heap blocks");
    if (b.serial <= peak_serial_ && (retagged_.empty() || !retagged_.contains(key))) log(key, b);
  }
  // Any other change (Replay::LastChange): blocks that stopped being live, a block retagged
  // (its state at the peak logged once, the first time; the block still live is left out).
  void on_change(const Replay::LastChange &c) {
    for (const auto &[key, old] : c.removed)
      if (old->serial <= peak_serial_ && holds(old->space) &&
          (retagged_.empty() || !retagged_.contains(key)))
        log(key, *old);
    if (c.retag && c.before.serial <= peak_serial_ && holds(c.before.space) &&
        retagged_.insert(c.key).second)
      log(c.key, c.before);
  }

  // At the end of the replay (the pointers valid until the next apply): this memory's blocks
  // live at its peak, (address, block): the live ones older than the peak, the mappings, then
  // the logged states. Empty when the memory never held a byte.
  std::vector<std::pair<uint64_t, const Block *>> blocks() const {
    std::vector<std::pair<uint64_t, const Block *>> at_peak;
    if (peak_serial_ == 0) return at_peak;
    for (const auto &[key, blk] : replay_.blocks())
      if (blk.serial <= peak_serial_ && holds(blk.space) && !retagged_.contains(key))
        at_peak.emplace_back(Replay::address_of(key), &blk);
    if constexpr (kMemory == PeakMemory::kHost)
      for (const auto &[addr, blk] : replay_.mmap_blocks())
        if (blk.serial <= peak_serial_ && !retagged_.contains(addr))
          at_peak.emplace_back(addr, &blk);
    for (const auto &[key, blk] : log_) at_peak.emplace_back(Replay::address_of(key), &blk);
    return at_peak;
  }
  // The shapes of the logged host blocks (address, shape): the replay recycles a freed block's.
  const std::vector<std::pair<uint64_t, std::vector<int64_t>>> &logged_shapes() const {
    return shapes_;
  }

 private:
  void log(uint64_t key, const Block &b) {
    log_.emplace_back(key, b);
    if constexpr (kMemory == PeakMemory::kHost)  // only the host's buffers are described
      if (const auto *shape = replay_.shape_of(b))
        shapes_.emplace_back(Replay::address_of(key), *shape);
  }

  const Replay &replay_;
  uint64_t peak_serial_ = 0;  // the serial of the event that made the peak (0: none yet)
  std::vector<std::pair<uint64_t, Block>> log_;                    // (key, state at the peak)
  std::vector<std::pair<uint64_t, std::vector<int64_t>>> shapes_;  // (address, shape)
  absl::flat_hash_set<uint64_t> retagged_;  // keys whose state at the peak is logged
};

}  // namespace adprof
