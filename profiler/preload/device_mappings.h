// The device mappings adprof recorded (cuMemMap, the driver's virtual memory management), so that
// a cuMemUnmap records the free of every mapping in its range: one unmap may cover several maps.
// A sorted table of their start addresses under a mutex: maps and unmaps are rare driver calls
// (a page of PyTorch's expandable segments, XLA's peer-to-peer buffers), never the hot path. The
// table (512 KiB) is mapped on the first map: a program that maps nothing does not pay its
// address space (Signals.ProfilersOwnAddressSpaceIsSmall runs under a 40 MiB limit). The caller
// holds the thread's guard, so that the interposer does not take that mmap for the program's.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace adprof::preload::cuda {

class DeviceMappings {
 public:
  // Mappings live at once beyond which new ones are not recorded (their unmap could not be).
  static constexpr size_t kCapacity = 65536;

  // False when the table is full (or cannot be mapped): the mapping must not be recorded.
  bool add(uint64_t start) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!starts_) {
      void *table = mmap(nullptr, kCapacity * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (table == MAP_FAILED) return false;
      starts_ = static_cast<uint64_t *>(table);
    }
    uint64_t *end = starts_ + size_;
    uint64_t *at = std::lower_bound(starts_, end, start);
    if (at != end && *at == start) return true;  // mapped again where it was (not unmapped)
    if (size_ == kCapacity) return false;
    std::move_backward(at, end, end + 1);
    *at = start;
    ++size_;
    return true;
  }

  // Calls each(start) for every mapping that starts in [begin, begin + length), then forgets them.
  template <typename Each>
  void remove_in(uint64_t begin, uint64_t length, Each &&each) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!starts_) return;
    uint64_t *end = starts_ + size_;
    uint64_t *first = std::lower_bound(starts_, end, begin);
    uint64_t *last = first;
    while (last != end && *last - begin < length) each(*last++);
    std::move(last, end, first);
    size_ -= static_cast<size_t>(last - first);
  }

 private:
  std::mutex mutex_;
  size_t size_ = 0;
  uint64_t *starts_ = nullptr;  // kCapacity entries, sorted; size_ of them used
};

}  // namespace adprof::preload::cuda
