// The caching device allocator's bookkeeping on a fake device (no GPU, no CUDA runtime):
// size classes, splitting and reuse, merging, fragmentation figures, release on demand, the
// limit, the out-of-memory path and the two levels reported to the profiler.
#include <adcore/cuda/caching_allocator.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace adcore::devalloc;

// A fake device: hands out addresses from a bump pointer (never dereferenced) and holds at most
// `capacity` bytes at once.
class FakeDriver final : public SegmentDriver {
 public:
  explicit FakeDriver(size_t capacity = 1ull << 40) : capacity_(capacity) {}
  void *reserve(size_t bytes) override {
    ++reserve_calls;
    if (held + bytes > capacity_) {
      ++refusals;
      return nullptr;
    }
    held += bytes;
    const uintptr_t p = next_;
    next_ += (bytes + kMiB - 1) / kMiB * kMiB + kMiB;  // a gap between segments
    sizes.push_back(bytes);
    return reinterpret_cast<void *>(p);
  }
  void release(void *, size_t bytes) override {
    held -= bytes;
    ++release_calls;
  }
  uint32_t device() const override { return 3; }
  const char *name() const override { return "fake:3"; }

  size_t held = 0;
  int reserve_calls = 0, release_calls = 0, refusals = 0;
  std::vector<size_t> sizes;

 private:
  size_t capacity_;
  uintptr_t next_ = 0x7f0000000000;
};

// Records what the profiler would be told.
class RecordingTracker final : public Tracker {
 public:
  struct Ev {
    char what;  // S segment reserved, s segment released, B block, b block freed, O oom
    uintptr_t p;
    size_t bytes;
    uint32_t device;
  };
  void segment_reserved(const void *p, size_t bytes, uint32_t d) override {
    ev.push_back({'S', reinterpret_cast<uintptr_t>(p), bytes, d});
  }
  void segment_released(const void *p, uint32_t d) override {
    ev.push_back({'s', reinterpret_cast<uintptr_t>(p), 0, d});
  }
  void block_allocated(const void *p, size_t bytes, uint32_t d) override {
    ev.push_back({'B', reinterpret_cast<uintptr_t>(p), bytes, d});
  }
  void block_freed(const void *p, uint32_t d) override {
    ev.push_back({'b', reinterpret_cast<uintptr_t>(p), 0, d});
  }
  void oom(size_t requested, const Stats &s, uint32_t d) override {
    ev.push_back({'O', 0, requested, d});
    oom_stats = s;
  }
  std::string kinds() const {
    std::string k;
    for (const Ev &e : ev) k += e.what;
    return k;
  }
  std::vector<Ev> ev;
  Stats oom_stats;
};

uintptr_t u(void *p) { return reinterpret_cast<uintptr_t>(p); }

struct Fixture : ::testing::Test {
  FakeDriver drv;
  RecordingTracker tr;
  void expect_ok(const CachingAllocator &a) { EXPECT_EQ(a.check(), ""); }
};

TEST(AllocatorSizes, RoundingAndSegmentClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(31 * kMiB), 32 * kMiB);
}

TEST_F(Fixture, SmallRequestsShareOneSegmentAndAreSplit) {
  CachingAllocator a(drv, {}, &tr);
  void *p = a.allocate(100, ADPROF_ROLE_ACTIVATION);
  void *q = a.allocate(1000, ADPROF_ROLE_ADJOINT);
  void *r = a.allocate(0, ADPROF_ROLE_INPUT);
  EXPECT_EQ(drv.reserve_calls, 1);
  ASSERT_EQ(drv.sizes, std::vector<size_t>{2 * kMiB});
  EXPECT_EQ(u(q), u(p) + 512);   // 100 -> 512
  EXPECT_EQ(u(r), u(q) + 1024);  // 1000 -> 1024
  const Stats s = a.stats();
  EXPECT_EQ(s.reserved, 2 * kMiB);
  EXPECT_EQ(s.allocated, 2048u);
  EXPECT_EQ(s.requested, 1100u);
  EXPECT_EQ(s.splits, 3u);
  EXPECT_EQ(s.cache_hits, 2u);
  EXPECT_EQ(s.active_blocks, 3u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.largest_free, 2 * kMiB - 2048);
  EXPECT_EQ(s.live_by_role.bytes[ADPROF_ROLE_ACTIVATION], 100u);
  EXPECT_EQ(s.live_by_role.bytes[ADPROF_ROLE_ADJOINT], 1000u);
  EXPECT_EQ(s.live_by_role.count[ADPROF_ROLE_INPUT], 1u);
  expect_ok(a);
}

TEST_F(Fixture, LargeRequestsUseTheirOwnPools) {
  CachingAllocator a(drv, {}, &tr);
  void *small = a.allocate(4096);
  void *large = a.allocate(3 * kMiB);   // 20 MiB segment
  void *large2 = a.allocate(5 * kMiB);  // cut from the same 20 MiB segment
  void *huge = a.allocate(25 * kMiB);   // its own 26 MiB segment
  ASSERT_EQ(drv.sizes, (std::vector<size_t>{2 * kMiB, 20 * kMiB, 26 * kMiB}));
  EXPECT_EQ(u(large2), u(large) + 3 * kMiB);
  (void)small;
  (void)huge;
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  int smalls = 0;
  for (const SegmentInfo &s : snap) smalls += s.small;
  EXPECT_EQ(smalls, 1);
  expect_ok(a);
}

TEST_F(Fixture, LargeRemainderOfOneMiBOrLessIsNotSplit) {
  CachingAllocator a(drv, {}, &tr);
  void *p = a.allocate(19 * kMiB + 512);  // 20 MiB segment, remainder 1 MiB - 512: kept
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].size, 20 * kMiB);
  EXPECT_EQ(a.stats().allocated, 20 * kMiB);
  EXPECT_EQ(a.stats().requested, 19 * kMiB + 512);
  a.deallocate(p);
  expect_ok(a);
}

TEST_F(Fixture, FreedBlocksAreReusedBestFitWithoutNewSegments) {
  CachingAllocator a(drv, {}, &tr);
  void *p1 = a.allocate(8 * kKiB);
  void *p2 = a.allocate(64 * kKiB);
  void *p3 = a.allocate(8 * kKiB);
  void *p4 = a.allocate(16 * kKiB);
  a.deallocate(p2);  // 64 KiB hole
  a.deallocate(p4);  // merges with the tail
  // 10 KiB: best fit is the 64 KiB hole, not the large tail.
  void *q = a.allocate(10 * kKiB);
  EXPECT_EQ(u(q), u(p2));
  // 54 KiB fits exactly in what is left of the hole.
  void *r = a.allocate(54 * kKiB);
  EXPECT_EQ(u(r), u(p2) + 10 * kKiB);
  EXPECT_EQ(drv.reserve_calls, 1);
  EXPECT_EQ(a.stats().cache_hits, 5u);
  (void)p1;
  (void)p3;
  expect_ok(a);
}

TEST_F(Fixture, FreeingMergesNeighboursBackIntoOneBlock) {
  CachingAllocator a(drv, {}, &tr);
  std::vector<void *> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(a.allocate(100 * kKiB));
  for (int i : {1, 3, 5, 7, 0, 2, 4, 6}) a.deallocate(ps[static_cast<size_t>(i)]);
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_TRUE(snap[0].blocks[0].free);
  EXPECT_EQ(snap[0].blocks[0].size, 2 * kMiB);
  const Stats s = a.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.reserved, 2 * kMiB);  // cached, not released
  EXPECT_GE(s.merges, 8u);
  EXPECT_EQ(drv.release_calls, 0);
  expect_ok(a);
}

TEST_F(Fixture, FragmentationFigures) {
  CachingAllocator a(drv, {}, &tr);
  void *b[4];
  for (void *&p : b) p = a.allocate(512 * kKiB);  // fills one 2 MiB segment exactly
  EXPECT_EQ(a.stats().free_blocks, 0u);
  EXPECT_DOUBLE_EQ(a.stats().utilization(), 1.0);
  a.deallocate(b[0]);
  a.deallocate(b[2]);
  Stats s = a.stats();
  EXPECT_EQ(s.cached, 1 * kMiB);
  EXPECT_EQ(s.largest_free, 512 * kKiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.5);
  EXPECT_DOUBLE_EQ(s.utilization(), 0.5);
  // 1 MiB is free in total but not in one piece: a new segment is reserved.
  void *big = a.allocate(kMiB);
  EXPECT_EQ(drv.reserve_calls, 2);
  a.deallocate(big);
  a.deallocate(b[1]);  // b0..b2 merge: the free space is one 1.5 MiB block
  s = a.stats();
  EXPECT_EQ(s.largest_free, 2 * kMiB);  // the second segment, wholly free
  a.deallocate(b[3]);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.5);  // two equal free segments
  a.empty_cache();
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.0);
  expect_ok(a);
}

TEST_F(Fixture, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  CachingAllocator a(drv, {}, &tr);
  void *s1 = a.allocate(kKiB);
  void *l1 = a.allocate(4 * kMiB);
  void *l2 = a.allocate(30 * kMiB);
  a.deallocate(l1);
  a.deallocate(l2);
  EXPECT_EQ(a.stats().reserved, (2 + 20 + 30) * kMiB);
  EXPECT_EQ(a.empty_cache(), 50 * kMiB);
  EXPECT_EQ(drv.release_calls, 2);
  EXPECT_EQ(a.stats().reserved, 2 * kMiB);
  EXPECT_EQ(drv.held, 2 * kMiB);
  a.deallocate(s1);
  EXPECT_EQ(a.empty_cache(), 2 * kMiB);
  EXPECT_EQ(drv.held, 0u);
  EXPECT_EQ(a.stats().segment_releases, 3u);
  expect_ok(a);
}

TEST_F(Fixture, ReleaseOnDemandWhenTheLimitIsReached) {
  CachingAllocator a(drv, Config{40 * kMiB}, &tr);
  void *p = a.allocate(30 * kMiB);  // 30 MiB segment
  a.deallocate(p);                  // cached
  // 32 MiB does not fit in the cached 30 MiB block and needs its own segment: 30 + 32 > 40,
  // so the cached segment is released first.
  void *q = a.allocate(32 * kMiB);
  const Stats s = a.stats();
  EXPECT_EQ(s.releases_on_demand, 1u);
  EXPECT_EQ(s.reserved, 32 * kMiB);
  EXPECT_EQ(s.reserved_peak, 32 * kMiB);  // never both at once
  EXPECT_EQ(drv.release_calls, 1);
  a.deallocate(q);
  expect_ok(a);
}

TEST_F(Fixture, ReleaseOnDemandWhenTheDriverRefuses) {
  FakeDriver small(24 * kMiB);
  CachingAllocator a(small, {}, &tr);
  void *p = a.allocate(2 * kMiB);  // 20 MiB segment
  a.deallocate(p);
  void *q = a.allocate(22 * kMiB);  // driver refuses 22 MiB more; cache released, retried
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(small.refusals, 1);
  EXPECT_EQ(a.stats().releases_on_demand, 1u);
  EXPECT_EQ(small.held, 22 * kMiB);
  expect_ok(a);
}

TEST_F(Fixture, TightLimitFallsBackToAnExactSegment) {
  CachingAllocator a(drv, Config{6 * kMiB}, &tr);
  void *p = a.allocate(3 * kMiB);  // a 20 MiB segment would exceed the limit: 4 MiB instead
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(drv.sizes.back(), 4 * kMiB);
  void *q = a.allocate(100 * kKiB);  // small pool: its 2 MiB segment still fits
  EXPECT_EQ(a.stats().reserved, 6 * kMiB);
  a.deallocate(p);
  a.deallocate(q);
  expect_ok(a);
}

TEST_F(Fixture, OutOfMemoryNamesWhatWasLiveAndLeavesStateIntact) {
  CachingAllocator a(drv, Config{64 * kMiB}, &tr);
  void *act = a.allocate(30 * kMiB, ADPROF_ROLE_ACTIVATION);
  void *cache = a.allocate(20 * kMiB, ADPROF_ROLE_FORWARD_CACHE);
  void *adj = a.allocate(8 * kMiB, ADPROF_ROLE_ADJOINT);  // 20 MiB segment: 70 > 64 -> 8 MiB
  const Stats before = a.stats();
  const std::string kinds_before = tr.kinds();
  try {
    a.allocate(16 * kMiB, ADPROF_ROLE_ADJOINT);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device out of memory on fake:3"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 16.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit"), std::string::npos) << m;
    EXPECT_NE(m.find("activation 30.00 MiB (1)"), std::string::npos) << m;
    EXPECT_NE(m.find("forward_cache 20.00 MiB (1)"), std::string::npos) << m;
    EXPECT_NE(m.find("adjoint 8.00 MiB (1)"), std::string::npos) << m;
    // Roles are listed largest first.
    EXPECT_LT(m.find("activation"), m.find("forward_cache")) << m;
    EXPECT_NE(m.find("Largest live blocks: 30.00 MiB activation #1"), std::string::npos) << m;
    EXPECT_EQ(e.requested(), 16 * kMiB);
    EXPECT_EQ(e.stats().allocated, before.allocated);
    EXPECT_EQ(e.stats().ooms, 1u);
  }
  // The tracker saw an OOM event with the figures at the failure, and nothing else new.
  ASSERT_EQ(tr.kinds(), kinds_before + "O");
  EXPECT_EQ(tr.ev.back().bytes, 16 * kMiB);
  EXPECT_EQ(tr.ev.back().device, 3u);
  EXPECT_EQ(tr.oom_stats.live_by_role.bytes[ADPROF_ROLE_FORWARD_CACHE], 20 * kMiB);
  EXPECT_EQ(tr.oom_stats.limit, 64 * kMiB);
  // Unchanged state: the same blocks are live and can still be freed; then it fits.
  const Stats after = a.stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.reserved, before.reserved);
  expect_ok(a);
  a.deallocate(cache);
  void *again = a.allocate(16 * kMiB, ADPROF_ROLE_ADJOINT);
  EXPECT_NE(again, nullptr);
  a.deallocate(again);
  a.deallocate(act);
  a.deallocate(adj);
  expect_ok(a);
}

TEST_F(Fixture, OutOfMemoryFromTheDriver) {
  FakeDriver tiny(2 * kMiB);
  CachingAllocator a(tiny, {}, &tr);
  void *p = a.allocate(kMiB, ADPROF_ROLE_PARAMETER);
  EXPECT_THROW(a.allocate(4 * kMiB), OutOfMemory);
  try {
    a.allocate(4 * kMiB);
  } catch (const OutOfMemory &e) {
    EXPECT_NE(std::string(e.what()).find("exceed the device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parameter 1.00 MiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().ooms, 2u);
  a.deallocate(p);
  expect_ok(a);
}

TEST_F(Fixture, SetLimitAppliesToLaterReservations) {
  CachingAllocator a(drv, {}, &tr);
  void *p = a.allocate(kMiB);
  a.set_limit(2 * kMiB);
  EXPECT_THROW(a.allocate(kMiB + 512), OutOfMemory);  // would need a large segment
  void *q = a.allocate(512 * kKiB);                   // fits in the small segment
  a.set_limit(0);
  void *r = a.allocate(kMiB + 512);
  a.deallocate(p);
  a.deallocate(q);
  a.deallocate(r);
  expect_ok(a);
}

TEST_F(Fixture, ReportsBothLevelsToTheTracker) {
  {
    CachingAllocator a(drv, {}, &tr);
    void *p = a.allocate(1000, ADPROF_ROLE_ACTIVATION);
    void *q = a.allocate(3000, ADPROF_ROLE_ADJOINT);
    a.deallocate(p);
    a.deallocate(q);
    a.empty_cache();
    ASSERT_EQ(tr.kinds(), "SBBbbs");
    EXPECT_EQ(tr.ev[0].bytes, 2 * kMiB);  // the segment: reserved bytes
    EXPECT_EQ(tr.ev[1].p, tr.ev[0].p);    // the first block shares the segment's address
    EXPECT_EQ(tr.ev[1].bytes, 1000u);     // blocks: the bytes asked for
    EXPECT_EQ(tr.ev[2].bytes, 3000u);
    EXPECT_EQ(tr.ev[5].p, tr.ev[0].p);
    for (const auto &e : tr.ev) EXPECT_EQ(e.device, 3u);
    tr.ev.clear();
    void *r = a.allocate(10);
    (void)r;
  }
  // The destructor frees live blocks, then returns the segments.
  EXPECT_EQ(tr.kinds(), "SBbs");
  EXPECT_EQ(drv.held, 0u);
}

TEST_F(Fixture, PeaksAndRetagByRole) {
  CachingAllocator a(drv, {}, &tr);
  void *p = a.allocate(kMiB, ADPROF_ROLE_ACTIVATION);
  void *q = a.allocate(2 * kMiB, ADPROF_ROLE_ACTIVATION);
  a.retag(p, ADPROF_ROLE_FORWARD_CACHE);
  Stats s = a.stats();
  EXPECT_EQ(s.live_by_role.bytes[ADPROF_ROLE_ACTIVATION], 2 * kMiB);
  EXPECT_EQ(s.live_by_role.bytes[ADPROF_ROLE_FORWARD_CACHE], kMiB);
  EXPECT_EQ(s.peak_by_role.bytes[ADPROF_ROLE_ACTIVATION], 3 * kMiB);
  a.deallocate(q);
  a.reset_peaks();
  s = a.stats();
  EXPECT_EQ(s.requested_peak, kMiB);
  EXPECT_EQ(s.peak_by_role.bytes[ADPROF_ROLE_ACTIVATION], 0u);
  EXPECT_EQ(s.reserved_peak, s.reserved);
  a.deallocate(p);
  EXPECT_EQ(a.stats().live_by_role.bytes[ADPROF_ROLE_FORWARD_CACHE], 0u);
}

TEST_F(Fixture, UnknownPointerIsAnErrorAndNullIsIgnored) {
  CachingAllocator a(drv, {}, &tr);
  a.deallocate(nullptr);
  void *p = a.allocate(64);
  EXPECT_THROW(a.deallocate(static_cast<char *>(p) + 512), std::invalid_argument);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), std::invalid_argument);  // double free
  expect_ok(a);
}

TEST_F(Fixture, RandomWorkloadKeepsTheInvariants) {
  CachingAllocator a(drv, Config{256 * kMiB}, &tr);
  std::mt19937_64 rng(42);
  std::vector<std::pair<void *, size_t>> live;
  uint64_t requested = 0;
  for (int i = 0; i < 4000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const int cls = static_cast<int>(rng() % 10);
      size_t n = cls < 6 ? rng() % (64 * kKiB) : cls < 9 ? rng() % (6 * kMiB) : rng() % (24 * kMiB);
      try {
        void *p = a.allocate(n, static_cast<adprof_role>(rng() % ADPROF_ROLE_COUNT));
        live.emplace_back(p, n);
        requested += n;
      } catch (const OutOfMemory &) {
        // Under the limit everything that was live still is.
      }
    } else {
      const size_t k = rng() % live.size();
      a.deallocate(live[k].first);
      requested -= live[k].second;
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 97 == 0) a.empty_cache();
    if (i % 50 == 0) {
      ASSERT_EQ(a.check(), "") << "after step " << i;
      ASSERT_EQ(a.stats().requested, requested);
      ASSERT_LE(a.stats().reserved, 256 * kMiB);
    }
  }
  for (auto &[p, n] : live) a.deallocate(p);
  EXPECT_EQ(a.check(), "");
  EXPECT_EQ(a.stats().allocated, 0u);
  a.empty_cache();
  EXPECT_EQ(drv.held, 0u);
}

TEST(AllocatorFormat, Bytes) {
  EXPECT_EQ(format_bytes(10), "10 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * kMiB), "3.00 MiB");
  EXPECT_STREQ(role_name(ADPROF_ROLE_FORWARD_CACHE), "forward_cache");
}

}  // namespace
