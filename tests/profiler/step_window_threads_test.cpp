// Step windows over threads (`adprof run --steps A:B`): the writer counts each buffer's events as
// it receives them, one thread's at a time, so a block's free may be read before its allocation
// when another thread frees it (a DataLoader worker's batch, freed by its queue's feeder thread).
#include <gtest/gtest.h>

#include "../support/process.h"
#include "adprof/report.h"

namespace {

using namespace adprof_test;

constexpr int kSteps = 8;
constexpr uint64_t kFirst = 6, kEnd = 8;
constexpr double kMiB = 1 << 20;

std::string record(const TempDir &dir, const std::string &name, bool window) {
  const std::string trace = dir / name;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STEPS_FREED_ELSEWHERE, std::to_string(kSteps)};
  o.trace = trace;
  if (window)
    o.env.emplace_back("ADPROF_STEPS", std::to_string(kFirst) + ":" + std::to_string(kEnd));
  const Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return trace;
}

// workloads/steps_freed_elsewhere.cpp: each step allocates 1 MiB that a second thread frees,
// whose buffer reaches the writer first. Every step's peak under the window is the whole
// recording's: the summaries' (steps 0 to 5) and the window's own (its live set). Before, each
// free read before its allocation was dropped as one of a block from before the recording: the
// summaries rose by 1 MiB a step (step 5: 6 MiB above the whole recording's) and the window's
// live set held the 6 MiB of blocks long freed.
TEST(StepWindowThreads, BlocksFreedOnAnotherThreadEndInEveryStep) {
  TempDir dir;
  const adprof::Report whole = adprof::analyze(record(dir, "whole.adtrace", false));
  const adprof::Report windowed = adprof::analyze(record(dir, "windowed.adtrace", true));
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

}  // namespace
