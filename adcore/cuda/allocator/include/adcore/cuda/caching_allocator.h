// The caching device allocator: its bookkeeping, in plain C++ (no CUDA header, no GPU).
//
// Two levels, both reported to the profiler:
//   * segments: memory reserved from the driver (cudaMalloc) through a SegmentDriver;
//     reported as ADPROF_SPACE_DEVICE_SEGMENT (the replay's "device_reserved" series);
//   * blocks: pieces of segments handed to tensors; reported as ADPROF_SPACE_DEVICE_BLOCK with
//     the bytes the caller asked for (the "device_live" series, by role). Reserved minus used
//     is the allocator's overhead: size-class rounding, split remainders and cached segments.
//
// Size classes (PyTorch's scheme, which GPU users already know):
//   * every request is rounded up to a multiple of 512 bytes (0 bytes -> 512);
//   * "small" requests (<= 1 MiB after rounding) are cut from 2 MiB segments;
//   * "large" requests below 10 MiB are cut from 20 MiB segments; larger ones get a segment of
//     their own size rounded up to 2 MiB. Small and large blocks never share a segment.
// Splitting and reuse: a request takes the best-fitting free block of its pool (smallest size,
// then lowest address); the remainder becomes a new free block when it is at least 512 bytes
// (small pool) or more than 1 MiB (large pool), else it stays inside the block as rounding.
// A freed block merges with free neighbours of the same segment. Segments are kept cached when
// wholly free and go back to the driver only on demand: empty_cache(), or when a reservation
// would exceed the limit or fails in the driver (then every wholly free segment is released
// and the reservation is tried once more). If a standard segment does not fit under the limit,
// a segment of exactly the (rounded) request is tried before giving up.
// Out of memory: OutOfMemory is thrown with a report of what filled the device (bytes by role,
// the largest live blocks, reserved vs allocated, the largest free block); the tracker gets an
// oom() call first (the profiler: an "ad.device.oom" event of the AD protocol in the trace). The
// allocator's state is unchanged by a failed request.
#pragma once
#include <adprof/context.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace adcore::devalloc {

inline constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;
inline constexpr size_t kMinBlock = 512;             // rounding granularity
inline constexpr size_t kSmallSize = 1 * kMiB;       // largest "small" request
inline constexpr size_t kSmallSegment = 2 * kMiB;    // segment size of the small pool
inline constexpr size_t kMinLargeAlloc = 10 * kMiB;  // below: 20 MiB segments
inline constexpr size_t kLargeSegment = 20 * kMiB;
inline constexpr size_t kRoundLarge = 2 * kMiB;  // huge segments are rounded to this

// Where segments come from: cudaMalloc/cudaFree on a GPU, a fake address space in tests.
class SegmentDriver {
 public:
  virtual ~SegmentDriver() = default;
  // Reserves `bytes` of device memory; nullptr when the device has no room.
  virtual void *reserve(size_t bytes) = 0;
  virtual void release(void *p, size_t bytes) = 0;
  virtual uint32_t device() const { return 0; }
  virtual const char *name() const = 0;  // "cuda:0", "fake"
};

struct RoleBytes {
  std::array<uint64_t, ADPROF_ROLE_COUNT> bytes{};
  std::array<uint64_t, ADPROF_ROLE_COUNT> count{};
};

struct Stats {
  uint64_t requested = 0, requested_peak = 0;  // bytes asked for by live blocks
  uint64_t allocated = 0, allocated_peak = 0;  // bytes of live blocks (rounded)
  uint64_t reserved = 0, reserved_peak = 0;    // bytes of segments held from the driver
  uint64_t cached = 0;                         // reserved - allocated (free inside segments)
  uint64_t largest_free = 0;                   // largest free block
  uint64_t segments = 0, active_blocks = 0, free_blocks = 0;
  uint64_t alloc_calls = 0, free_calls = 0;
  uint64_t cache_hits = 0;  // requests served without reserving a segment
  uint64_t splits = 0, merges = 0;
  uint64_t segment_reserves = 0, segment_releases = 0;
  uint64_t releases_on_demand = 0;  // times cached segments were released to make room
  uint64_t ooms = 0;
  uint64_t limit = 0;  // 0: no limit but the driver's
  RoleBytes live_by_role, peak_by_role;
  // 1 - largest_free / cached: 0 when the cached bytes are one block (or none), near 1 when
  // they are scattered in many small pieces.
  double fragmentation() const {
    return cached ? 1.0 - static_cast<double>(largest_free) / static_cast<double>(cached) : 0.0;
  }
  // allocated / reserved (1 when nothing is reserved).
  double utilization() const {
    return reserved ? static_cast<double>(allocated) / static_cast<double>(reserved) : 1.0;
  }
};

// Receives both levels of bookkeeping. The default (ProfilerTracker) forwards to the adprof
// context API; tests record the calls.
class Tracker {
 public:
  virtual ~Tracker() = default;
  virtual void segment_reserved(const void *p, size_t bytes, uint32_t device) = 0;
  virtual void segment_released(const void *p, uint32_t device) = 0;
  virtual void block_allocated(const void *p, size_t requested, uint32_t device) = 0;
  virtual void block_freed(const void *p, uint32_t device) = 0;
  virtual void block_retagged(const void *, adprof_role) {}
  virtual void oom(size_t requested, const Stats &at_failure, uint32_t device) = 0;
};

// adprof_track_alloc/free with DEVICE_SEGMENT and DEVICE_BLOCK; oom() writes an annotation
// "ad.device.oom" (adprof/ad_protocol.h) with values {requested, reserved, allocated, limit,
// device, live bytes of role 0..9} (15 values).
class ProfilerTracker final : public Tracker {
 public:
  void segment_reserved(const void *p, size_t bytes, uint32_t device) override;
  void segment_released(const void *p, uint32_t device) override;
  void block_allocated(const void *p, size_t requested, uint32_t device) override;
  void block_freed(const void *p, uint32_t device) override;
  void oom(size_t requested, const Stats &at_failure, uint32_t device) override;
};
ProfilerTracker &profiler_tracker();

struct Config {
  uint64_t limit = 0;  // maximum reserved bytes (0: none but the driver's)
};

struct BlockInfo {
  uintptr_t addr = 0;
  size_t size = 0;       // block size (rounded)
  size_t requested = 0;  // 0 for a free block
  bool free = true;
  adprof_role role = ADPROF_ROLE_FOREIGN;
  uint64_t seq = 0;  // allocation number (1-based) of a live block
};
struct SegmentInfo {
  uintptr_t addr = 0;
  size_t size = 0;
  bool small = false;
  std::vector<BlockInfo> blocks;  // in address order, covering the segment exactly
};

class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string &what, size_t requested, const Stats &s)
      : std::runtime_error(what), requested_(requested), stats_(s) {}
  size_t requested() const { return requested_; }
  const Stats &stats() const { return stats_; }  // at the failure

 private:
  size_t requested_;
  Stats stats_;
};

const char *role_name(adprof_role r);
std::string format_bytes(uint64_t bytes);  // "1.50 MiB"

class CachingAllocator {
 public:
  explicit CachingAllocator(SegmentDriver &driver, Config cfg = {},
                            Tracker *tracker = &profiler_tracker());
  // Returns every segment to the driver (blocks still live are dropped with them).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  // A block of at least `bytes` (aligned to 512 bytes within a driver segment); throws
  // OutOfMemory.
  void *allocate(size_t bytes, adprof_role role = ADPROF_ROLE_FOREIGN);
  // Frees a block from allocate(); nullptr is ignored; an unknown pointer throws
  // std::invalid_argument.
  void deallocate(void *p);
  // The live block changes role (adcore retags a storage); keeps the by-role figures true.
  void retag(const void *p, adprof_role role);
  // Releases every wholly free segment; returns the bytes given back to the driver.
  size_t empty_cache();

  void set_limit(uint64_t bytes);
  Stats stats() const;
  void reset_peaks();
  std::vector<SegmentInfo> snapshot() const;
  // What fills the device now, in words (the text of an OutOfMemory).
  std::string memory_report(size_t top_blocks = 8) const;
  // Checks the internal invariants (blocks tile segments, no two adjacent free blocks, free
  // sets and totals agree); returns an empty string or the first violation.
  std::string check() const;
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  SegmentDriver &driver() const { return driver_; }

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block *a, const Block *b) const;
  };
  using FreeSet = std::set<Block *, BySize>;
  struct Segment;

  Block *find_free(FreeSet &pool, size_t rounded);
  Block *reserve_segment(size_t rounded, bool small, size_t requested);
  size_t release_free_segments_locked();
  void free_block_locked(Block *b);
  void update_peaks_locked();
  Stats stats_locked() const;
  std::string report_locked(size_t top_blocks) const;
  [[noreturn]] void fail_locked(size_t requested, const char *why);

  SegmentDriver &driver_;
  Config cfg_;
  Tracker *tracker_;
  mutable std::mutex mu_;
  FreeSet small_free_, large_free_;
  std::unordered_map<uintptr_t, Block *> active_;
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;
  Stats s_;  // counters and running totals (cached/largest_free computed on demand)
  uint64_t seq_ = 0;
};

}  // namespace adcore::devalloc
