// Step windows over threads (`adprof run --steps A:B`): the writer counts each buffer's events as
// it receives them, one thread's at a time, so a block's free may be read before its allocation
// when another thread frees it (a DataLoader worker's batch, freed by its queue's feeder thread).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "../support/process.h"
#include "adprof/report.h"

namespace {

using namespace adprof_test;

constexpr int kSteps = 8;
constexpr uint64_t kFirst = 6, kEnd = 8;
constexpr double kMiB = 1 << 20;

std::string record(const TempDir &dir, const std::string &name, bool window,
                   const char *mode = nullptr,
                   const char *workload = ADPROF_TEST_STEPS_FREED_ELSEWHERE) {
  const std::string trace = dir / name;
  SpawnOptions o;
  o.argv = {workload, std::to_string(kSteps)};
  if (mode) o.argv.emplace_back(mode);
  o.trace = trace;
  if (window)
    o.env.emplace_back("ADPROF_STEPS", std::to_string(kFirst) + ":" + std::to_string(kEnd));
  const Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return trace;
}

// Every step's peak under the window against the whole recording's.
void expect_steps_as_whole(const std::string &whole_trace, const std::string &windowed_trace) {
  const adprof::Report whole = adprof::analyze(whole_trace);
  const adprof::Report windowed = adprof::analyze(windowed_trace);
  ASSERT_TRUE(windowed.complete) << windowed.end_reason;
  ASSERT_EQ(whole.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(windowed.steps.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < windowed.steps.size(); ++i) {
    const adprof::StepSummary &w = windowed.steps[i], &full = whole.steps[i];
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(w.summarized, i < kFirst);
    std::printf("[ step %zu   ] peak: whole %.3f MiB, window %d:%d %.3f MiB%s\n", i,
                static_cast<double>(full.peak) / kMiB, static_cast<int>(kFirst),
                static_cast<int>(kEnd), static_cast<double>(w.peak) / kMiB,
                w.summarized ? " (summarized)" : "");
    // Two runs of one program: the same blocks; the allowance is the C runtime's own (stdio's
    // buffer, the thread's), a few KiB.
    EXPECT_GT(static_cast<double>(full.peak), 0.99 * kMiB);  // whole blocks of 1 MiB
    EXPECT_NEAR(static_cast<double>(w.peak), static_cast<double>(full.peak), 64 << 10);
  }
  EXPECT_NEAR(static_cast<double>(windowed.peak), static_cast<double>(whole.peak), 64 << 10);
}

// workloads/steps_freed_elsewhere.cpp: each step allocates 1 MiB that a second thread frees,
// whose buffer reaches the writer first. Every step's peak under the window is the whole
// recording's: the summaries' (steps 0 to 5) and the window's own (its live set). Before, each
// free read before its allocation was dropped as one of a block from before the recording: the
// summaries rose by 1 MiB a step (step 5: 6 MiB above the whole recording's) and the window's
// live set held the 6 MiB of blocks long freed.
TEST(StepWindowThreads, BlocksFreedOnAnotherThreadEndInEveryStep) {
  TempDir dir;
  expect_steps_as_whole(record(dir, "whole.adtrace", false), record(dir, "windowed.adtrace", true));
}

// `late`: the thread that frees each step's first MiB hands its buffer over after the main
// thread's, which holds a second MiB allocated after those frees. A summary merges the threads'
// events by time, as the reader does: each step's peak is 1 MiB above the steps' base. Before,
// the summaries counted buffer by buffer and each step's first MiB stayed live until the frees'
// buffer was read: every summarized step's peak 2 MiB above the base, not 1.
TEST(StepWindowThreads, AFreeHandedOverLateEndsItsBlockAtItsTime) {
  TempDir dir;
  expect_steps_as_whole(record(dir, "whole.adtrace", false, "late"),
                        record(dir, "windowed.adtrace", true, "late"));
}

// `idle`: the thread that frees each step's first MiB then stays blocked for 800 ms, its
// buffer unread, while the main thread records 0.7 s past those frees (its second MiB among
// them, and the next step's start). The summaries and the window's live set wait for the blocked
// thread's events (it holds them since its buffer's time). Before, they were merged once the
// reading was 0.4 s past them, the frees not read yet: every summarized step's peak 2 MiB above
// the steps' base, not 1, and the window's steps 1 MiB above it, the live set holding the last
// summarized step's MiB.
TEST(StepWindowThreads, AFreeHeldByAnIdleThreadEndsItsBlockAtItsTime) {
  TempDir dir;
  expect_steps_as_whole(record(dir, "whole.adtrace", false, "idle"),
                        record(dir, "windowed.adtrace", true, "idle"));
}

// workloads/steps_pool_reuse.cpp `own`: the main thread allocates and frees a temporary where
// it then allocates the batch that the other thread frees, and the other thread's free is read
// first. That free ends the batch, not the temporary (the thread's own free comes first). Before,
// the temporary took it, and the batch stayed live for good: every summarized step 1 MiB above
// the one before (step 5: 6 MiB above the steps' base).
TEST(StepWindowThreads, AFreeReadEarlyEndsTheBlockItFreed) {
  TempDir dir;
  expect_steps_as_whole(record(dir, "whole.adtrace", false, "own", ADPROF_TEST_STEPS_POOL_REUSE),
                        record(dir, "windowed.adtrace", true, "own", ADPROF_TEST_STEPS_POOL_REUSE));
}

// `replaced`: the batch's address is reused by the main thread after the other thread freed it,
// and that reuse is read before the free. The batch ends at its free, not at the reuse. Before,
// it counted live until the reuse, beside the 1 MiB allocated in between: every summarized
// step's peak 2 MiB above the steps' base, not 1.
TEST(StepWindowThreads, AFreeReadAfterItsAddressWasReusedEndsTheBlockAtItsTime) {
  TempDir dir;
  expect_steps_as_whole(
      record(dir, "whole.adtrace", false, "replaced", ADPROF_TEST_STEPS_POOL_REUSE),
      record(dir, "windowed.adtrace", true, "replaced", ADPROF_TEST_STEPS_POOL_REUSE));
}

// A process killed (SIGKILL) while idle after its window opened: the live set's host blocks
// (written once 0.4 s past the window's start was read, or by the clock) are in its trace, the
// 4 MiB made in a folded step among them, and they come before the window's first step. The
// window opens on the freeing thread's buffer, whose first event (a free) comes after the main
// thread's allocations of the step: before, the live set took its time from that buffer, and
// the window's first step's peak was 4.19 MB, without the step's MiB.
TEST(StepWindowThreads, ALiveSetReachesTheTraceOfAProcessKilledAfterTheWindow) {
  TempDir dir;
  const std::string trace = dir / "killed.adtrace", marker = dir / "marker";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STEPS_FREED_ELSEWHERE, std::to_string(kSteps), "stay", marker};
  o.trace = trace;
  // The last step alone: the program's time after the window's start is about 0.25 s.
  o.env.emplace_back("ADPROF_STEPS", std::to_string(kEnd - 1) + ":" + std::to_string(kEnd));
  Child child(o);
  ASSERT_TRUE(wait_for_file(marker, 60));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  child.kill_with(SIGKILL);
  const Result r = child.wait();
  ASSERT_EQ(r.signal, SIGKILL) << r.err;
  const adprof::Report windowed = adprof::analyze(trace);
  ASSERT_EQ(windowed.steps.size(), static_cast<size_t>(kSteps));
  for (size_t i = kEnd - 1; i < kEnd; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_FALSE(windowed.steps[i].summarized);
    EXPECT_GT(static_cast<double>(windowed.steps[i].peak), 4.99 * kMiB);  // 4 MiB kept + 1 MiB
  }
}

}  // namespace
