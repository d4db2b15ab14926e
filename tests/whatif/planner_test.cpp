// The what-if planners on tape generations built by hand (profiler/analysis/whatif/plan.h),
// and the tape collector on events built by hand (whatif/tape_collector.h).
#include <gtest/gtest.h>

#include "whatif/plan.h"
#include "whatif/tape_collector.h"

namespace adprof::whatif {
namespace {

// One target (leaf 0) receives `n` deferred contributions: the first two from node 2's rule,
// both the same buffer, which lives on until that rule is over (so it is shared: the second is
// added out of place); the others from node 1's rule, each a fresh buffer that dies right after
// (added in place into the out-of-place sum, which nobody else holds).
Gen deferred_contributions(int n) {
  Gen g;
  g.backward = true;
  g.end_index = 1000;
  constexpr uint64_t kBytes = 800, kShared = 5;
  g.node(0).leaf = true;
  g.node(0).requested = true;
  g.fact(kShared, kBytes).death = 100 + n * 10;  // after every contribution
  for (int i = 0; i < n; ++i) {
    const uint64_t index = 100 + static_cast<uint64_t>(i) * 10;
    const uint64_t pending = 200 + static_cast<uint64_t>(i);  // the deferred copy
    g.fact(pending, kBytes).death = 900;
    uint64_t source = kShared;
    if (i >= 2) {
      source = 300 + static_cast<uint64_t>(i);
      g.fact(source, kBytes).death = index + 1;
    }
    g.node(0).contributions.push_back(
        {i < 2 ? 2 : 1, pending, source, kBytes, ADPROF_AD_CONTRIBUTION_DEFERRED, index});
  }
  g.node(0).sum = 400;  // the deferred sum, made before the gradient is handed over
  g.node(0).sum_index = 800;
  g.fact(400, kBytes).death = 0;
  return g;
}

// A target with three or more contributions through out-of-place adds: the out-of-place sum
// (a virtual storage of the plan) is unique, so later contributions go in place. Before the
// fix, virtual ids were tested against the next id to hand out, never true: each later
// contribution made another out-of-place copy (4 for 6 contributions instead of 1).
TEST(Planner, InplaceAddsIntoItsOwnOutOfPlaceSum) {
  for (int n : {3, 4, 6}) {
    Gen g = deferred_contributions(n);
    Plan p;
    VirtualIds ids;
    Planner(g, 1ULL << ADPROF_AD_POLICY_INPLACE_ACCUMULATION, p, ids).run();
    EXPECT_EQ(p.virtual_count, 1u) << n << " contributions";
    EXPECT_EQ(p.virtual_bytes, 800u) << n << " contributions";
    // Every deferred copy and the deferred sum are never made.
    EXPECT_EQ(p.suppressed_count, static_cast<uint64_t>(n) + 1) << n << " contributions";
  }
}

// Two analyses at once share no state: virtual ids come from each one's own counter.
TEST(Planner, VirtualIdsPerAnalysis) {
  VirtualIds a, b;
  EXPECT_EQ(a.take(), b.take());
  EXPECT_TRUE(VirtualIds::is_virtual(a.take()));
  EXPECT_FALSE(VirtualIds::is_virtual(1000));
}

// An op scope that acquires and releases a million storages (a data loader's op, a step run
// as one op): each release looked for its storage in a scan of everything the scope had
// acquired, quadratic in the scope's size: stopped after 60 s before the fix (about seven
// minutes by extrapolation, past the test's timeout), 0.4 s after; an op of 80,000
// allocations took 2.6 s to report. Whether a storage died in its scope
// (transient) must still be known when a node takes the scope's storages.
TEST(TapeCollector, FollowsAnOpScopeOfAMillionStorages) {
  using T = format::EventType;
  Replay replay;
  TapeCollector tapes(replay, [](Gen &, uint64_t) {});
  uint64_t index = 0;
  auto feed = [&](T type, uint64_t addr = 0, uint64_t a = 0, uint64_t b = 0) {
    Event e;
    e.type = type;
    e.operand = ADPROF_SPACE_HEAP;
    e.addr = addr;
    e.a = a;
    e.b = b;
    e.ticks = index;
    replay.apply(e);
    tapes.on_event(e, ++index);
  };
  feed(T::kName, 0, 1);
  feed(T::kOpBegin, 0, 1, 1);
  constexpr uint64_t kStorages = 1000000;
  for (uint64_t i = 0; i < kStorages; ++i) {
    const uint64_t addr = 0x10000 + (i % 64) * 64;
    feed(T::kAlloc, addr, 48);
    feed(T::kFree, addr);
  }
  feed(T::kOpEnd);
  EXPECT_TRUE(tapes.active());
  EXPECT_EQ(index, 2 * kStorages + 3);
  EXPECT_EQ(replay.live_blocks(), 0u);
  tapes.finish(index);
}

}  // namespace
}  // namespace adprof::whatif
