// The caching device allocator's bookkeeping (see caching_allocator.h for the design).
#include "adcore/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "adprof/ad_protocol.h"

namespace adcore::devalloc {

const char *role_name(adprof_role r) {
  static const char *const kNames[ADPROF_ROLE_COUNT] = {
      "foreign", "parameter",    "input",     "activation",      "forward_cache",
      "adjoint", "accumulation", "duplicate", "optimizer_state", "workspace"};
  const int i = static_cast<int>(r);
  return i >= 0 && i < ADPROF_ROLE_COUNT ? kNames[i] : "?";
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= kMiB * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (kMiB * 1024.0));
  else if (bytes >= kMiB)
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / kMiB);
  else if (bytes >= kKiB)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / kKiB);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

// ---- the profiler tracker ----
void ProfilerTracker::segment_reserved(const void *p, size_t bytes, uint32_t device) {
  adprof_track_alloc(p, bytes, ADPROF_SPACE_DEVICE_SEGMENT, device);
}
void ProfilerTracker::segment_released(const void *p, uint32_t device) {
  adprof_track_free(p, ADPROF_SPACE_DEVICE_SEGMENT, device);
}
void ProfilerTracker::block_allocated(const void *p, size_t requested, uint32_t device) {
  adprof_track_alloc(p, requested, ADPROF_SPACE_DEVICE_BLOCK, device);
}
void ProfilerTracker::block_freed(const void *p, uint32_t device) {
  adprof_track_free(p, ADPROF_SPACE_DEVICE_BLOCK, device);
}
void ProfilerTracker::oom(size_t requested, const Stats &s, uint32_t device) {
  static const uint32_t kind = adprof_name(ADPROF_AD_DEVICE_OOM);
  uint64_t v[5 + ADPROF_ROLE_COUNT] = {requested, s.reserved, s.allocated, s.limit, device};
  for (int r = 0; r < ADPROF_ROLE_COUNT; ++r)
    v[5 + r] = s.live_by_role.bytes[static_cast<size_t>(r)];
  adprof_annotate(kind, v, static_cast<uint32_t>(std::size(v)));
}
ProfilerTracker &profiler_tracker() {
  static ProfilerTracker t;
  return t;
}

// ---- blocks and segments ----
struct CachingAllocator::Block {
  uintptr_t addr = 0;
  size_t size = 0;
  size_t requested = 0;
  bool free = true;
  bool small = false;
  adprof_role role = ADPROF_ROLE_FOREIGN;
  uint64_t seq = 0;
  Block *prev = nullptr, *next = nullptr;  // neighbours in the same segment
  Segment *seg = nullptr;
};

struct CachingAllocator::Segment {
  uintptr_t addr = 0;
  size_t size = 0;
  bool small = false;
  Block *first = nullptr;
  size_t used = 0;  // bytes of live blocks
  ~Segment() {
    for (Block *b = first; b;) {
      Block *n = b->next;
      delete b;
      b = n;
    }
  }
};

bool CachingAllocator::BySize::operator()(const Block *a, const Block *b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::CachingAllocator(SegmentDriver &driver, Config cfg, Tracker *tracker)
    : driver_(driver), cfg_(cfg), tracker_(tracker) {
  s_.limit = cfg.limit;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto &[addr, seg] : segments_) {
    for (Block *b = seg->first; b; b = b->next)
      if (!b->free && tracker_)
        tracker_->block_freed(reinterpret_cast<void *>(b->addr), driver_.device());
    if (tracker_) tracker_->segment_released(reinterpret_cast<void *>(seg->addr), driver_.device());
    driver_.release(reinterpret_cast<void *>(seg->addr), seg->size);
  }
  segments_.clear();
}

CachingAllocator::Block *CachingAllocator::find_free(FreeSet &pool, size_t rounded) {
  Block key;
  key.size = rounded;
  key.addr = 0;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block *b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block *CachingAllocator::reserve_segment(size_t rounded, bool small,
                                                           size_t requested) {
  const size_t standard = segment_size(rounded);
  // Candidate sizes: the standard segment, then (only if the limit forbids the standard one)
  // the request itself, rounded to the large granularity, or to 512 bytes as a last resort.
  std::vector<size_t> sizes{standard};
  if (cfg_.limit && s_.reserved + standard > cfg_.limit) {
    const size_t exact2m = (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    if (exact2m < standard) sizes.push_back(exact2m);
    if (rounded < exact2m) sizes.push_back(rounded);
  }
  auto fits = [&](size_t sz) { return !cfg_.limit || s_.reserved + sz <= cfg_.limit; };
  void *p = nullptr;
  size_t got = 0;
  for (int attempt = 0; attempt < 2 && !p; ++attempt) {
    for (size_t sz : sizes) {
      if (!fits(sz)) continue;
      p = driver_.reserve(sz);
      if (p) {
        got = sz;
        break;
      }
    }
    if (!p && attempt == 0) {
      // Release on demand: give the cached segments back and try again.
      if (release_free_segments_locked() == 0) break;
      s_.releases_on_demand += 1;
    }
  }
  if (!p) {
    const bool over_limit = cfg_.limit && !fits(sizes.back());
    fail_locked(requested, over_limit ? "the allocator's limit" : "the device");
  }
  auto seg = std::make_unique<Segment>();
  seg->addr = reinterpret_cast<uintptr_t>(p);
  seg->size = got;
  seg->small = small;
  Block *b = new Block();
  b->addr = seg->addr;
  b->size = got;
  b->small = small;
  b->seg = seg.get();
  seg->first = b;
  s_.reserved += got;
  s_.segment_reserves += 1;
  if (tracker_) tracker_->segment_reserved(p, got, driver_.device());
  segments_.emplace(seg->addr, std::move(seg));
  return b;
}

void *CachingAllocator::allocate(size_t bytes, adprof_role role) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t rounded = round_size(bytes);
  const bool small = rounded <= kSmallSize;
  FreeSet &pool = small ? small_free_ : large_free_;
  Block *b = find_free(pool, rounded);
  if (b) {
    s_.cache_hits += 1;
  } else {
    b = reserve_segment(rounded, small, bytes);
  }
  // Split off the remainder when it is worth a block of its own.
  const size_t rest = b->size - rounded;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    Block *r = new Block();
    r->addr = b->addr + rounded;
    r->size = rest;
    r->small = small;
    r->seg = b->seg;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    pool.insert(r);
    s_.splits += 1;
  }
  b->free = false;
  b->requested = bytes;
  b->role = role;
  b->seq = ++seq_;
  b->seg->used += b->size;
  active_.emplace(b->addr, b);
  s_.alloc_calls += 1;
  s_.allocated += b->size;
  s_.requested += bytes;
  s_.live_by_role.bytes[role] += bytes;
  s_.live_by_role.count[role] += 1;
  update_peaks_locked();
  void *p = reinterpret_cast<void *>(b->addr);
  if (tracker_) tracker_->block_allocated(p, bytes, driver_.device());
  return p;
}

void CachingAllocator::update_peaks_locked() {
  s_.allocated_peak = std::max(s_.allocated_peak, s_.allocated);
  s_.requested_peak = std::max(s_.requested_peak, s_.requested);
  s_.reserved_peak = std::max(s_.reserved_peak, s_.reserved);
  for (size_t r = 0; r < ADPROF_ROLE_COUNT; ++r) {
    s_.peak_by_role.bytes[r] = std::max(s_.peak_by_role.bytes[r], s_.live_by_role.bytes[r]);
    s_.peak_by_role.count[r] = std::max(s_.peak_by_role.count[r], s_.live_by_role.count[r]);
  }
}

void CachingAllocator::deallocate(void *p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(reinterpret_cast<uintptr_t>(p));
  if (it == active_.end())
    throw std::invalid_argument("CachingAllocator::deallocate: pointer not allocated here");
  Block *b = it->second;
  active_.erase(it);
  if (tracker_) tracker_->block_freed(p, driver_.device());
  free_block_locked(b);
}

void CachingAllocator::free_block_locked(Block *b) {
  FreeSet &pool = b->small ? small_free_ : large_free_;
  s_.free_calls += 1;
  s_.allocated -= b->size;
  s_.requested -= b->requested;
  s_.live_by_role.bytes[b->role] -= b->requested;
  s_.live_by_role.count[b->role] -= 1;
  b->seg->used -= b->size;
  b->free = true;
  b->requested = 0;
  b->seq = 0;
  b->role = ADPROF_ROLE_FOREIGN;
  // Merge with free neighbours.
  if (b->prev && b->prev->free) {
    Block *p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
    s_.merges += 1;
  }
  if (b->next && b->next->free) {
    Block *n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
    s_.merges += 1;
  }
  pool.insert(b);
}

void CachingAllocator::retag(const void *p, adprof_role role) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(reinterpret_cast<uintptr_t>(p));
  if (it == active_.end()) return;
  Block *b = it->second;
  if (b->role == role) return;
  s_.live_by_role.bytes[b->role] -= b->requested;
  s_.live_by_role.count[b->role] -= 1;
  b->role = role;
  s_.live_by_role.bytes[role] += b->requested;
  s_.live_by_role.count[role] += 1;
  update_peaks_locked();
  if (tracker_) tracker_->block_retagged(p, role);
}

size_t CachingAllocator::release_free_segments_locked() {
  size_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment &seg = *it->second;
    if (seg.used == 0) {
      Block *b = seg.first;  // one free block covering the segment
      (b->small ? small_free_ : large_free_).erase(b);
      if (tracker_)
        tracker_->segment_released(reinterpret_cast<void *>(seg.addr), driver_.device());
      driver_.release(reinterpret_cast<void *>(seg.addr), seg.size);
      s_.reserved -= seg.size;
      s_.segment_releases += 1;
      released += seg.size;
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

size_t CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_free_segments_locked();
}

void CachingAllocator::set_limit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cfg_.limit = bytes;
  s_.limit = bytes;
}

Stats CachingAllocator::stats_locked() const {
  Stats s = s_;
  s.cached = s.reserved - s.allocated;
  s.segments = segments_.size();
  s.active_blocks = active_.size();
  s.free_blocks = small_free_.size() + large_free_.size();
  s.largest_free = 0;
  if (!small_free_.empty()) s.largest_free = (*small_free_.rbegin())->size;
  if (!large_free_.empty())
    s.largest_free = std::max<uint64_t>(s.largest_free, (*large_free_.rbegin())->size);
  return s;
}

Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_locked();
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.allocated_peak = s_.allocated;
  s_.requested_peak = s_.requested;
  s_.reserved_peak = s_.reserved;
  s_.peak_by_role = s_.live_by_role;
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SegmentInfo> out;
  out.reserve(segments_.size());
  for (const auto &[addr, seg] : segments_) {
    SegmentInfo si;
    si.addr = seg->addr;
    si.size = seg->size;
    si.small = seg->small;
    for (const Block *b = seg->first; b; b = b->next)
      si.blocks.push_back(BlockInfo{b->addr, b->size, b->requested, b->free, b->role, b->seq});
    out.push_back(std::move(si));
  }
  return out;
}

std::string CachingAllocator::report_locked(size_t top_blocks) const {
  const Stats s = stats_locked();
  std::ostringstream os;
  os << "reserved " << format_bytes(s.reserved) << " in " << s.segments << " segment"
     << (s.segments == 1 ? "" : "s") << ", allocated " << format_bytes(s.allocated) << " in "
     << s.active_blocks << " block" << (s.active_blocks == 1 ? "" : "s") << " (requested "
     << format_bytes(s.requested) << "), cached free " << format_bytes(s.cached)
     << ", largest free block " << format_bytes(s.largest_free);
  if (s.limit) os << ", limit " << format_bytes(s.limit);
  os << ".\nLive by role:";
  std::vector<int> roles;
  for (int r = 0; r < ADPROF_ROLE_COUNT; ++r)
    if (s.live_by_role.count[static_cast<size_t>(r)]) roles.push_back(r);
  std::sort(roles.begin(), roles.end(), [&](int a, int b) {
    return s.live_by_role.bytes[static_cast<size_t>(a)] >
           s.live_by_role.bytes[static_cast<size_t>(b)];
  });
  if (roles.empty()) os << " nothing";
  for (int r : roles)
    os << ' ' << role_name(static_cast<adprof_role>(r)) << ' '
       << format_bytes(s.live_by_role.bytes[static_cast<size_t>(r)]) << " ("
       << s.live_by_role.count[static_cast<size_t>(r)] << ')' << (r == roles.back() ? "" : ",");
  std::vector<const Block *> live;
  live.reserve(active_.size());
  for (const auto &[addr, b] : active_) live.push_back(b);
  std::sort(live.begin(), live.end(), [](const Block *a, const Block *b) {
    return a->requested != b->requested ? a->requested > b->requested : a->seq < b->seq;
  });
  if (!live.empty()) {
    os << ".\nLargest live blocks:";
    for (size_t i = 0; i < live.size() && i < top_blocks; ++i)
      os << (i ? ", " : " ") << format_bytes(live[i]->requested) << ' ' << role_name(live[i]->role)
         << " #" << live[i]->seq;
  }
  os << '.';
  return os.str();
}

std::string CachingAllocator::memory_report(size_t top_blocks) const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_locked(top_blocks);
}

void CachingAllocator::fail_locked(size_t requested, const char *why) {
  s_.ooms += 1;
  const Stats s = stats_locked();
  if (tracker_) tracker_->oom(requested, s, driver_.device());
  std::ostringstream os;
  os << "device out of memory on " << driver_.name() << ": tried to allocate "
     << format_bytes(requested) << " (a new segment would exceed " << why << "); "
     << report_locked(8);
  throw OutOfMemory(os.str(), requested, s);
}

std::string CachingAllocator::check() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t reserved = 0, allocated = 0, requested = 0;
  size_t free_blocks = 0, active = 0;
  for (const auto &[addr, seg] : segments_) {
    reserved += seg->size;
    uintptr_t at = seg->addr;
    size_t used = 0;
    const Block *prev = nullptr;
    for (const Block *b = seg->first; b; b = b->next) {
      if (b->addr != at) return "segment " + std::to_string(addr) + ": gap or overlap";
      if (b->seg != seg.get() || b->prev != prev) return "bad block links";
      if (b->free && prev && prev->free) return "two adjacent free blocks";
      if (b->free) {
        ++free_blocks;
        const FreeSet &pool = b->small ? small_free_ : large_free_;
        if (!pool.count(const_cast<Block *>(b))) return "free block missing from its pool";
      } else {
        ++active;
        used += b->size;
        allocated += b->size;
        requested += b->requested;
        auto it = active_.find(b->addr);
        if (it == active_.end() || it->second != b) return "live block missing from the index";
        if (b->size % kMinBlock) return "block size not a multiple of 512";
        if (b->requested > b->size) return "block smaller than its request";
      }
      at += b->size;
      prev = b;
    }
    if (at != seg->addr + seg->size) return "blocks do not cover the segment";
    if (used != seg->used) return "segment use out of step";
  }
  if (reserved != s_.reserved) return "reserved total out of step";
  if (allocated != s_.allocated) return "allocated total out of step";
  if (requested != s_.requested) return "requested total out of step";
  if (free_blocks != small_free_.size() + large_free_.size()) return "free pools hold extra blocks";
  if (active != active_.size()) return "index holds extra blocks";
  if (cfg_.limit && s_.reserved > cfg_.limit) return "reserved above the limit";
  return {};
}

}  // namespace adcore::devalloc
