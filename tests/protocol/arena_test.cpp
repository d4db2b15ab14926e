// Arenas (ad_protocol.h version 4): the slicer shows an announced arena as its logical buffers,
// with their roles, ops, labels and sources, each while it is live over the schedule (spread
// over the call's time), its free bytes at its fullest as one workspace block, all freed with
// the arena; and it leaves every other event, and every trace without arenas, as it is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <tuple>
#include <vector>

#include "adprof/ad_protocol.h"
#include "adprof/arena_slicer.h"
#include "adprof/replay.h"

namespace adprof {
namespace {

// Events made by hand, with the storage their payloads point to.
class Events {
 public:
  Event &add(format::EventType type, uint32_t thread = 0) {
    Event &e = events_.emplace_back();
    e.type = type;
    e.thread = thread;
    e.ticks = ++ticks_;
    return e;
  }
  void name(uint64_t id, const std::string &text) {
    texts_.push_back(text);
    Event &e = add(format::EventType::kName);
    e.a = id;
    e.set_text(texts_.back());
  }
  void annotate(uint64_t kind, std::vector<uint64_t> values, uint32_t thread = 0) {
    values_.push_back(std::move(values));
    Event &e = add(format::EventType::kAnnotate, thread);
    e.a = kind;
    e.set_values(values_.back());
  }
  Event &alloc(uint64_t addr, uint64_t size, uint32_t thread = 0,
               uint8_t space = ADPROF_SPACE_HEAP) {
    Event &e = add(format::EventType::kAlloc, thread);
    e.operand = space;
    e.addr = addr;
    e.a = size;
    return e;
  }
  Event &free(uint64_t addr, uint32_t thread = 0, uint8_t space = ADPROF_SPACE_HEAP) {
    Event &e = add(format::EventType::kFree, thread);
    e.operand = space;
    e.addr = addr;
    return e;
  }
  std::vector<Event> all() const { return {events_.begin(), events_.end()}; }
  void at(uint64_t ticks) { ticks_ = ticks - 1; }  // the next event's time

 private:
  std::deque<Event> events_;
  std::deque<std::string> texts_;
  std::deque<std::vector<uint64_t>> values_;
  uint64_t ticks_ = 0;
};

enum : uint64_t {
  kLayoutKind = 1,
  kSliceKind,
  kCallKind,
  kCallEndKind,
  kOpCopy,
  kOpAdd,
  kLabelCopy,
  kLabelSum,
  kLabelFree,
  kProgram
};
constexpr uint64_t N = ADPROF_AD_NONE;

void describe(Events &ev) {
  ev.name(kLayoutKind, ADPROF_AD_ARENA_LAYOUT);
  ev.name(kSliceKind, ADPROF_AD_ARENA_SLICE);
  ev.name(kCallKind, ADPROF_AD_ARENA_CALL);
  ev.name(kCallEndKind, ADPROF_AD_ARENA_CALL_END);
  ev.name(kOpCopy, "jit(f)/jvp()/concatenate");
  ev.name(kOpAdd, "jit(f)/transpose(jvp())/add");
  ev.name(kLabelCopy, "idx copy");
  ev.name(kLabelSum, "sum");
  ev.name(kLabelFree, "free");
  ev.name(kProgram, "jit_f");
  // Layout 7: 1000 bytes, fullest at position 3 of 5: a copy of argument 0 (bytes 0-599,
  // positions 1-4), an adjoint (600-899, 3-4); an activation at position 0 only (600-999).
  ev.annotate(kLayoutKind, {7, 1000, 3, 3, 5, kProgram, kLabelFree});
  ev.annotate(kSliceKind, {7, 0, 600, ADPROF_ROLE_DUPLICATE, ADPROF_PHASE_FORWARD, kOpCopy,
                           kLabelCopy, 1, 4, 0, N, ADPROF_DTYPE_I32, 50, 3});
  ev.annotate(kSliceKind, {7, 600, 300, ADPROF_ROLE_ADJOINT, ADPROF_PHASE_BACKWARD, kOpAdd,
                           kLabelSum, 3, 4, N, N});
  ev.annotate(kSliceKind, {7, 600, 400, ADPROF_ROLE_ACTIVATION, ADPROF_PHASE_FORWARD, kOpAdd,
                           kLabelSum, 0, 0, N, N});
}

// Each event as the replay sees it, to the trace's end (the driver flushes the slicer there;
// a run's events are valid until the slicer's next call).
template <class Each>
void sliced(const std::vector<Event> &events, ArenaSlicer &slicer, Each each) {
  for (const Event &e : slicer.rewrite(events)) each(e);
  for (const Event &e : slicer.flush()) each(e);
}

TEST(ArenaSlicer, ArenaBecomesItsLogicalBuffersAndTheirFreeBytes) {
  Events ev;
  describe(ev);
  ev.alloc(0x5000, 64);  // the argument
  ev.annotate(kCallKind, {7, 1, 0x5000});
  ev.alloc(0x9000, 1000, 3);  // the arena, on a worker thread
  ev.annotate(kCallEndKind, {7});
  ArenaSlicer slicer;
  Replay replay;
  sliced(ev.all(), slicer, [&](const Event &e) { replay.apply(e); });
  EXPECT_EQ(slicer.arenas_found(), 1u);
  const Block *copy = replay.blocks().get(0x9000);
  const Block *sum = replay.blocks().get(0x9000 + 600);
  const Block *free_bytes = replay.blocks().get(0x9000 + 999);
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(sum, nullptr);
  ASSERT_NE(free_bytes, nullptr);
  EXPECT_EQ(copy->size, 600u);
  EXPECT_EQ(copy->role, ADPROF_ROLE_DUPLICATE);
  EXPECT_EQ(copy->source, 0x5000u);
  EXPECT_EQ(copy->op_name, kOpCopy);
  EXPECT_EQ(copy->op_instance, 1u);
  EXPECT_EQ(copy->phase, ADPROF_PHASE_FORWARD);
  EXPECT_EQ(copy->label, kLabelCopy);
  EXPECT_EQ(copy->thread, 3u);
  EXPECT_EQ(copy->dtype, ADPROF_DTYPE_I32);
  ASSERT_NE(replay.shape_of(*copy), nullptr);
  EXPECT_EQ(*replay.shape_of(*copy), (std::vector<int64_t>{50, 3}));
  EXPECT_EQ(sum->size, 300u);
  EXPECT_EQ(sum->role, ADPROF_ROLE_ADJOINT);
  EXPECT_EQ(sum->phase, ADPROF_PHASE_BACKWARD);
  EXPECT_EQ(free_bytes->size, 100u);
  EXPECT_EQ(free_bytes->role, ADPROF_ROLE_WORKSPACE);
  EXPECT_EQ(free_bytes->label, kLabelFree);
  // The arena's bytes, once: 64 + 1000.
  EXPECT_EQ(replay.host_live(), 1064u);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_DUPLICATE], 600u);
  // The thread's phase is what it was before the arena.
  EXPECT_EQ(replay.thread_phase(3), ADPROF_PHASE_OTHER);

  Events end;
  end.free(0x9000, 3);
  sliced(end.all(), slicer, [&](const Event &e) { replay.apply(e); });
  EXPECT_EQ(replay.host_live(), 64u);
  EXPECT_EQ(replay.unmatched_frees(), 0u);
}

// A runtime on a device takes its arena from the driver, one buffer per call (XLA's allocator
// with XLA_PYTHON_CLIENT_ALLOCATOR=platform): the arena is device memory, and so are its
// logical buffers, on its device; the host's figures do not move. An arena in an allocator's
// reserve (DEVICE_SEGMENT) is never cut: it is no buffer of the program's.
TEST(ArenaSlicer, DeviceArenaBecomesDeviceBuffersOnItsDevice) {
  Events ev;
  describe(ev);
  ev.alloc(0x5000, 64, 0, ADPROF_SPACE_DEVICE_RAW).device = 2;  // the argument
  ev.annotate(kCallKind, {7, 1, 0x5000});
  ev.alloc(0x7f0000, 1000, 0, ADPROF_SPACE_DEVICE_SEGMENT).device = 2;  // a reserve: not it
  ev.alloc(0x9000, 1000, 3, ADPROF_SPACE_DEVICE_RAW).device = 2;
  ev.annotate(kCallEndKind, {7});
  ArenaSlicer slicer;
  Replay replay;
  sliced(ev.all(), slicer, [&](const Event &e) { replay.apply(e); });
  EXPECT_EQ(slicer.arenas_found(), 1u);
  const Block *copy = replay.blocks().get(Replay::key(0x9000, ADPROF_SPACE_DEVICE_RAW));
  ASSERT_NE(copy, nullptr) << "the arena's first buffer is a device block at its address";
  EXPECT_EQ(copy->size, 600u);
  EXPECT_EQ(copy->role, ADPROF_ROLE_DUPLICATE);
  EXPECT_EQ(copy->source, 0x5000u);
  EXPECT_EQ(copy->device, 2u);
  EXPECT_EQ(replay.host_live(), 0u) << "no host memory was made";
  EXPECT_EQ(replay.device_live(), 1064u) << "the argument and the arena, once";
  EXPECT_EQ(replay.device_by_role()[ADPROF_ROLE_DUPLICATE], 600u);
  EXPECT_EQ(replay.device_by_role()[ADPROF_ROLE_ADJOINT], 300u);
  EXPECT_EQ(replay.device_by_role()[ADPROF_ROLE_WORKSPACE], 100u);

  Events end;
  end.free(0x9000, 3, ADPROF_SPACE_HEAP);  // a heap free at that address is not the arena's
  end.free(0x9000, 3, ADPROF_SPACE_DEVICE_RAW);
  sliced(end.all(), slicer, [&](const Event &e) { replay.apply(e); });
  EXPECT_EQ(replay.device_live(), 64u);
  EXPECT_EQ(replay.unmatched_frees(), 1u) << "only the heap free matched nothing";
}

// Every logical buffer has a block while it is live, not only those live at the fullest point
// (issue 30): the schedule's positions spread over the call's time (arena at 1000, call's end
// at 1500: position p of 5 at 1000 + 100 p), among another thread's events, each buffer freed
// when its range ends or a buffer of a later position takes its bytes.
TEST(ArenaSlicer, EveryBufferHasABlockWhileItIsLive) {
  Events ev;
  describe(ev);
  ev.alloc(0x5000, 64);
  ev.annotate(kCallKind, {7, 1, 0x5000});
  ev.at(1000);
  ev.alloc(0x9000, 1000, 3);
  ev.at(1150);
  ev.alloc(0x7000, 8, 5);  // another thread, inside the call
  ev.at(1500);
  ev.annotate(kCallEndKind, {7});
  ArenaSlicer slicer;
  slicer.set_positions(true);
  Replay replay;
  // (what happened, address, size or 0, time) of the arena's blocks and the other thread's
  std::vector<std::tuple<char, uint64_t, uint64_t, uint64_t>> seen;
  uint64_t most = 0, activation = 0;
  sliced(ev.all(), slicer, [&](const Event &e) {
    replay.apply(e);
    most = std::max(most, replay.host_live());
    if (e.type == format::EventType::kAlloc && e.addr != 0x5000)
      seen.emplace_back('+', e.addr, e.a, e.ticks);
    if (e.type == format::EventType::kFree) seen.emplace_back('-', e.addr, 0, e.ticks);
    if (const Block *b = replay.blocks().get(0x9000 + 600); b && b->size == 400)
      activation = b->role == ADPROF_ROLE_ACTIVATION ? b->size : 0;
  });
  const std::vector<std::tuple<char, uint64_t, uint64_t, uint64_t>> expected = {
      {'+', 0x9000 + 600, 400, 1000},  // position 0: the activation,
      {'+', 0x9000 + 999, 600, 1000},  // the bytes no buffer holds
      {'-', 0x9000 + 600, 0, 1100},    // position 1: the activation's range ends,
      {'-', 0x9000 + 999, 0, 1100},    // the free bytes shrink (before the copy is made)
      {'+', 0x9000 + 999, 400, 1100}, {'+', 0x9000, 600, 1100},  // the copy begins
      {'+', 0x7000, 8, 1150},                                    // the other thread, in time order
      {'-', 0x9000 + 999, 0, 1300},                              // position 3
      {'+', 0x9000 + 999, 100, 1300}, {'+', 0x9000 + 600, 300, 1300},  // the adjoint
  };
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(activation, 400u) << "the activation had its block, with its role";
  // The arena is all there at every point, and never more.
  EXPECT_EQ(most, 64u + 1000 + 8);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_ADJOINT], 300u);
}

// A call whose end never comes (a cut trace): its positions end with the trace.
TEST(ArenaSlicer, CallNeverEndedEndsWithTheTrace) {
  Events ev;
  describe(ev);
  ev.annotate(kCallKind, {7, 1});
  ev.alloc(0x9000, 1000);
  ArenaSlicer slicer;
  slicer.set_positions(true);
  const std::vector<Event> in = ev.all();
  std::span<const Event> first = slicer.rewrite(in);
  const size_t made_now = first.size();
  Replay replay;
  for (const Event &e : first) replay.apply(e);
  EXPECT_EQ(replay.host_live(), 1000u) << "position 0, and the bytes free then";
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_WORKSPACE], 600u);
  std::span<const Event> rest = slicer.flush();
  EXPECT_GT(rest.size(), 0u);
  for (const Event &e : rest) replay.apply(e);
  EXPECT_EQ(replay.host_live(), 1000u);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_WORKSPACE], 100u) << "the last position's";
  EXPECT_GT(made_now, 0u);
}

TEST(ArenaSlicer, OnlyTheAnnouncedCallsArenaIsCut) {
  Events ev;
  describe(ev);
  ev.alloc(0x9000, 1000);  // same size, no call announced: left alone
  ev.annotate(kCallKind, {7, 1});
  ev.alloc(0xA000, 999);  // another size
  ev.annotate(kCallEndKind, {7});
  ev.alloc(0xB000, 1000);  // after the call's end
  ArenaSlicer slicer;
  const std::vector<Event> in = ev.all();
  std::span<const Event> out = slicer.rewrite(in);
  EXPECT_EQ(out.data(), in.data()) << "a run with nothing to cut is passed through, not copied";
  EXPECT_EQ(slicer.arenas_found(), 0u);
  EXPECT_EQ(slicer.calls_announced(), 1u);
}

TEST(ArenaSlicer, TraceWithoutArenasIsPassedThrough) {
  Events ev;
  ev.name(1, "matmul");
  ev.alloc(0x100, 1000);
  ev.free(0x100);
  ArenaSlicer slicer;
  const std::vector<Event> in = ev.all();
  EXPECT_EQ(slicer.rewrite(in).data(), in.data());
}

TEST(ArenaSlicer, DamagedSlicesGetNoBlock) {
  Events ev;
  describe(ev);
  // Outside the arena, and empty: ignored; the arena is then all free bytes but the copy.
  ev.annotate(kSliceKind, {7, 990, 20, ADPROF_ROLE_ADJOINT, 2, kOpAdd, kLabelSum, 0, 9, N, N});
  ev.annotate(kSliceKind, {7, 10, 0, ADPROF_ROLE_ADJOINT, 2, kOpAdd, kLabelSum, 0, 9, N, N});
  ev.annotate(kCallKind, {7, 1});
  ev.alloc(0x9000, 1000);
  ArenaSlicer slicer;
  Replay replay;
  sliced(ev.all(), slicer, [&](const Event &e) { replay.apply(e); });
  EXPECT_EQ(replay.host_live(), 1000u);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_DUPLICATE], 600u);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_ADJOINT], 300u);
  EXPECT_EQ(replay.host_by_role()[ADPROF_ROLE_WORKSPACE], 100u);
}

}  // namespace
}  // namespace adprof
