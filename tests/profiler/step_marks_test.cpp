// The step marks' ring (profiler/preload/step_window.h) with several threads publishing at once
// while the writer thread reads: every mark read is one that was published, whole (never the
// fields of two), each publisher's in its order; the reader never stalls behind an entry (it
// ends at the last mark claimed); and while the ring has room no mark is lost. Small rings, so
// that publishers lap each other and the reader all the time.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "step_window.h"

namespace adprof::preload {
namespace {

// Every field of a mark follows from its step, which says who published it and its count.
constexpr int kPublisherShift = 40;
StepMark mark_of(uint64_t publisher, uint64_t count) {
  const uint64_t step = publisher << kPublisherShift | count;
  return {step, step * 0x9E3779B97F4A7C15ull, ~step, static_cast<uint32_t>(publisher)};
}

struct Checker {
  std::vector<uint64_t> last;  // the count last read, by publisher (+1; 0: none yet)
  uint64_t read = 0, torn = 0, out_of_order = 0;
  explicit Checker(int publishers) : last(publishers, 0) {}
  void operator()(const StepMark &m) {
    ++read;
    const uint64_t publisher = m.step >> kPublisherShift;
    const uint64_t count = m.step & ((uint64_t{1} << kPublisherShift) - 1);
    const StepMark want = mark_of(publisher, count);
    if (publisher >= last.size() || m.ticks != want.ticks || m.ns != want.ns ||
        m.thread != want.thread) {
      ++torn;
      return;
    }
    if (count + 1 <= last[publisher]) ++out_of_order;
    last[publisher] = count + 1;
  }
};

template <uint64_t kCapacity>
void publish_while_reading(int publishers, uint64_t marks_each) {
  auto ring = std::make_unique<StepMarkRing<kCapacity>>();
  std::atomic<int> waiting{publishers + 1}, running{publishers};
  std::vector<std::thread> threads;
  for (int p = 0; p < publishers; ++p)
    threads.emplace_back([&, p] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();  // all at once
      for (uint64_t c = 0; c < marks_each; ++c) ring->publish(mark_of(p, c));
      running.fetch_sub(1);
    });
  Checker check(publishers);
  uint64_t next = 0;
  waiting.fetch_sub(1);
  while (running.load() > 0) ring->read(next, check);
  for (std::thread &t : threads) t.join();
  ring->read(next, check);
  EXPECT_EQ(check.torn, 0u) << "of " << check.read << " marks read";
  EXPECT_EQ(check.out_of_order, 0u);
  // Every entry is settled: the reader is past the last mark claimed, none left behind it.
  EXPECT_EQ(next, ring->claimed()) << "the reader stalled behind an entry";
  EXPECT_GT(check.read, 0u);
}

TEST(StepMarks, SeveralPublishersInOneEntryNeverTearAMark) { publish_while_reading<1>(4, 200'000); }

TEST(StepMarks, SeveralPublishersLappingASmallRingNeverTearAMark) {
  publish_while_reading<4>(6, 200'000);
}

// A publisher held up in the middle of a mark while others lap the ring, made certain: a timer
// interrupts the publishing thread every few microseconds, and its signal handler publishes a
// lap of the ring from inside whatever mark (or read) it interrupted. The thread reads after each
// of its own marks, so that nothing it could tear is overwritten before it is read.
constexpr uint64_t kLap = 2;
StepMarkRing<kLap> *g_signal_ring;
std::atomic<uint64_t> g_handler_marks{0};
void publish_a_lap(int) {
  for (uint64_t i = 0; i < kLap; ++i)
    g_signal_ring->publish(mark_of(1, g_handler_marks.fetch_add(1, std::memory_order_relaxed)));
}

TEST(StepMarks, APublisherHeldUpMidMarkWhileOthersLapItTearsNothing) {
  auto ring = std::make_unique<StepMarkRing<kLap>>();
  g_signal_ring = ring.get();
  g_handler_marks = 0;
  struct sigaction action {
  }, old{};
  action.sa_handler = publish_a_lap;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR1, &action, &old), 0);
  Checker check(2);
  uint64_t next = 0;
  std::thread publisher([&] {
    sigevent to_me{};
    to_me.sigev_notify = SIGEV_THREAD_ID;
    to_me.sigev_signo = SIGUSR1;
    to_me._sigev_un._tid = static_cast<pid_t>(gettid());
    timer_t timer;
    ASSERT_EQ(timer_create(CLOCK_MONOTONIC, &to_me, &timer), 0);
    const itimerspec every{{0, 50'000}, {0, 50'000}};
    ASSERT_EQ(timer_settime(timer, 0, &every, nullptr), 0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (uint64_t c = 0; g_handler_marks.load() < 5'000 * kLap &&
                         (c % 1024 || std::chrono::steady_clock::now() < until);
         ++c) {
      ring->publish(mark_of(0, c));
      ring->read(next, check);
    }
    timer_delete(timer);
  });
  publisher.join();
  sigaction(SIGUSR1, &old, nullptr);
  ring->read(next, check);
  EXPECT_GT(g_handler_marks.load(), 1'000u) << "the timer hardly interrupted the publisher";
  EXPECT_EQ(check.torn, 0u) << "of " << check.read << " marks read";
  EXPECT_EQ(check.out_of_order, 0u);
  EXPECT_EQ(next, ring->claimed()) << "the reader stalled behind an entry";
}

TEST(StepMarks, NoMarkLostWhileTheRingHasRoom) {
  constexpr int kPublishers = 4;
  constexpr uint64_t kEach = 200;
  for (int round = 0; round < 50; ++round) {
    auto ring = std::make_unique<StepMarkRing<1024>>();
    std::vector<std::thread> threads;
    for (int p = 0; p < kPublishers; ++p)
      threads.emplace_back([&, p] {
        for (uint64_t c = 0; c < kEach; ++c) ring->publish(mark_of(p, c));
      });
    for (std::thread &t : threads) t.join();
    Checker check(kPublishers);
    uint64_t next = 0;
    ring->read(next, check);
    ASSERT_EQ(check.read, kPublishers * kEach) << "round " << round;
    ASSERT_EQ(check.torn + check.out_of_order, 0u);
    for (uint64_t last : check.last) ASSERT_EQ(last, kEach);
    ASSERT_EQ(next, ring->claimed());
  }
}

}  // namespace
}  // namespace adprof::preload
