// Step windows (`adprof run --steps A:B`; trace_format.h, "Step windows"): a long run recorded
// in full only inside the window keeps every step's peak, and the growth over steps is found
// from the summaries outside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "adprof/findings.h"
#include "adprof/job.h"
#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace {

using namespace adprof_test;

constexpr int kSteps = 200;
constexpr uint64_t kFirst = 100, kEnd = 110;

// The steps workload (workloads/steps.cpp) under the preload library, with a step window or
// whole; `worker`: it loads a dataset before step 0 and forks a worker that never marks a step.
// Returns its trace; `worker_pid`, when asked, the worker's pid.
std::string record(const TempDir &dir, const std::string &name, bool leak, bool window,
                   bool worker = false, std::string *worker_pid = nullptr) {
  const std::string trace = dir / name;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STEPS, std::to_string(kSteps), leak ? "leak" : "steady", "2000",
            worker ? "worker" : "none"};
  o.trace = trace;
  if (window)
    o.env.emplace_back("ADPROF_STEPS", std::to_string(kFirst) + ":" + std::to_string(kEnd));
  const Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (worker_pid) {
    const size_t at = r.out.find("worker ");
    *worker_pid =
        at == std::string::npos ? "" : r.out.substr(at + 7, r.out.find('\n', at) - at - 7);
  }
  return trace;
}

const adprof::Finding *growth_of(const std::vector<adprof::Finding> &found) {
  auto it = std::find_if(found.begin(), found.end(),
                         [](const adprof::Finding &f) { return f.kind == "growth"; });
  return it == found.end() ? nullptr : &*it;
}

class StepWindow : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    whole_ = record(*dir_, "whole.adtrace", false, false, true, &whole_worker_);
    windowed_ = record(*dir_, "windowed.adtrace", false, true, true, &windowed_worker_);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir *dir_;
  static std::string whole_, windowed_, whole_worker_, windowed_worker_;
};
TempDir *StepWindow::dir_ = nullptr;
std::string StepWindow::whole_, StepWindow::windowed_, StepWindow::whole_worker_,
    StepWindow::windowed_worker_;

// Every step of the run is in the report, its peak the one the whole recording replays: the
// steps outside the window from the writer's summaries, those inside from their events.
TEST_F(StepWindow, EveryStepsPeakAsTheWholeRecordingHasIt) {
  const adprof::Report whole = adprof::analyze(whole_);
  const adprof::Report windowed = adprof::analyze(windowed_);
  ASSERT_TRUE(windowed.complete) << windowed.end_reason;
  EXPECT_FALSE(whole.step_window);
  EXPECT_TRUE(windowed.step_window);
  ASSERT_EQ(whole.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(windowed.steps.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < windowed.steps.size(); ++i) {
    const adprof::StepSummary &w = windowed.steps[i], &full = whole.steps[i];
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(w.step, i);
    EXPECT_EQ(w.summarized, i < kFirst || i >= kEnd);
    // Two runs of one deterministic program: the same requests step by step, the same peaks
    // to the byte; the only allowance is the C runtime's own allocations (stdio's buffer),
    // well under 1% of a step's peak (about 6 MiB here).
    const double tolerance = 0.01 * static_cast<double>(full.peak);
    EXPECT_NEAR(static_cast<double>(w.peak), static_cast<double>(full.peak), tolerance);
    EXPECT_NEAR(static_cast<double>(w.live_by_role[ADPROF_ROLE_PARAMETER]),
                static_cast<double>(full.live_by_role[ADPROF_ROLE_PARAMETER]), tolerance);
    EXPECT_NEAR(static_cast<double>(w.peak_by_role[ADPROF_ROLE_FORWARD_CACHE]),
                static_cast<double>(full.peak_by_role[ADPROF_ROLE_FORWARD_CACHE]), tolerance);
    // The dataset made before step 0 (8 MiB, and 2 MiB of staging to step 50): live in every
    // step, in the window's replay too.
    EXPECT_EQ(w.live_by_role[ADPROF_ROLE_INPUT], full.live_by_role[ADPROF_ROLE_INPUT]);
    EXPECT_EQ(w.live_by_role[ADPROF_ROLE_INPUT], (i <= 50 ? 10u : 8u) << 20);
    // 16 blocks, 2,000 temporaries a step (and the vector's own).
    EXPECT_GE(w.allocations, 2016u);
    EXPECT_LE(w.allocations, full.allocations + 8);
  }
}

// A program that stalls right after a step mark for longer than the merge's settle time (0.4 s:
// descheduled on a loaded machine, or blocked in a system call) while the writer samples its
// counters has every step's figures as the whole recording has them. The stall is at step 51,
// just after step 50 freed the 2 MiB of staging: the events before it (since the program's last
// flush tick) reach the writer only after the stall, and no step's start may be taken before
// them (StepWindow.EveryStepsPeakAsTheWholeRecordingHasIt failed so on a loaded machine).
TEST(StepWindowStall, AProgramStalledAfterAMarkKeepsEveryStepsFigures) {
  TempDir dir;
  auto record_stalled = [&](const std::string &name, bool window) {
    SpawnOptions o;
    o.argv = {ADPROF_TEST_STEPS, "60", "steady", "2000", "worker", "51", "600"};
    o.trace = dir / name;
    if (window) o.env.emplace_back("ADPROF_STEPS", "55:58");
    const Result r = run(o);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return o.trace;
  };
  const adprof::Report whole = adprof::analyze(record_stalled("whole.adtrace", false));
  const adprof::Report windowed = adprof::analyze(record_stalled("windowed.adtrace", true));
  ASSERT_TRUE(windowed.complete) << windowed.end_reason;
  ASSERT_EQ(whole.steps.size(), 60u);
  ASSERT_EQ(windowed.steps.size(), 60u);
  for (size_t i = 0; i < windowed.steps.size(); ++i) {
    const adprof::StepSummary &w = windowed.steps[i], &full = whole.steps[i];
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_NEAR(static_cast<double>(w.peak), static_cast<double>(full.peak),
                0.01 * static_cast<double>(full.peak));
    for (const adprof_role role :
         {ADPROF_ROLE_INPUT, ADPROF_ROLE_ACTIVATION, ADPROF_ROLE_FORWARD_CACHE})
      EXPECT_EQ(w.live_by_role[role], full.live_by_role[role]) << "role " << role;
  }
}

// A process that never marks a step (a DataLoader's worker, a launcher) is recorded whole under
// a window, as without one: the worker the workload forks at step 1 has its 160 blocks and its
// peak (three batches of four 256 KiB blocks) in both traces.
TEST_F(StepWindow, AProcessThatNeverMarksAStepIsRecordedWhole) {
  ASSERT_FALSE(whole_worker_.empty());
  ASSERT_FALSE(windowed_worker_.empty());
  const adprof::Report whole = adprof::analyze(whole_ + "." + whole_worker_);
  const adprof::Report windowed = adprof::analyze(windowed_ + "." + windowed_worker_);
  ASSERT_TRUE(windowed.complete) << windowed.end_reason;
  constexpr uint64_t kBatchesLive = 3 * 4 * 256 * 1024;
  EXPECT_GE(whole.peak, kBatchesLive);
  EXPECT_LT(whole.peak, kBatchesLive + 64 * 1024);
  EXPECT_EQ(windowed.peak, whole.peak);
  EXPECT_GE(windowed.allocations, 160u);
  EXPECT_EQ(windowed.allocations, whole.allocations);
  EXPECT_EQ(windowed.bytes_allocated, whole.bytes_allocated);
  EXPECT_TRUE(windowed.steps.empty());
}

// What a process does before its first step mark is recorded in full under a window: the
// dataset it loads (16 MiB of scratch, then 8 MiB kept) makes the run's peak, before step 0, as
// the whole recording has it, and the dataset's block is the program's own allocation, at its
// time (not one of the window's live set).
TEST_F(StepWindow, BeforeTheFirstStepRecordedInFull) {
  const adprof::Report whole = adprof::analyze(whole_);
  const adprof::Report windowed = adprof::analyze(windowed_);
  ASSERT_FALSE(whole.steps.empty());
  ASSERT_FALSE(windowed.steps.empty());
  ASSERT_LT(whole.peak_time, whole.steps[0].start) << "the workload's peak is before step 0";
  EXPECT_LT(windowed.peak_time, windowed.steps[0].start);
  EXPECT_NEAR(static_cast<double>(windowed.peak), static_cast<double>(whole.peak),
              0.01 * static_cast<double>(whole.peak));
  EXPECT_EQ(windowed.peak_by_role[ADPROF_ROLE_INPUT], 26u << 20);
  EXPECT_EQ(windowed.peak_by_role[ADPROF_ROLE_INPUT], whole.peak_by_role[ADPROF_ROLE_INPUT]);
  adprof::TraceReader reader(windowed_);
  adprof::Event e;
  std::map<uint32_t, std::string> names;
  uint64_t step0 = 0, dataset_at = 0;
  std::string dataset_thread;
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kThreadName) names[e.thread] = std::string(e.text());
    if (e.type == adprof::format::EventType::kStepSummary && e.a == 0)
      step0 = e.values()[adprof::format::kSummaryStart];
    if (e.type == adprof::format::EventType::kAlloc && e.operand == ADPROF_SPACE_HEAP &&
        e.a == 8u << 20) {
      dataset_at = e.ticks;
      dataset_thread = names[e.thread];
    }
  }
  // The start-up ends at the first step's mark (a summary's), as in the whole recording.
  EXPECT_NEAR(windowed.start_up_end, windowed.steps[0].start, 1e-6);
  EXPECT_NEAR(whole.start_up_end, whole.steps[0].start, 1e-6);
  ASSERT_NE(step0, 0u);
  ASSERT_NE(dataset_at, 0u) << "no allocation of the dataset";
  EXPECT_LT(dataset_at, step0);
  EXPECT_NE(dataset_thread, "adprof-live-set");
}

// Anonymous mappings and device blocks at the window's first step as the whole recording has
// them: of those made before step 0, what step 50 unmapped or freed is gone (the second half of
// a mapping whose first half it unmapped stays), and what step 60 made is there.
TEST_F(StepWindow, MappingsAndDeviceBlocksAtTheWindowsStart) {
  struct Live {
    uint64_t mapped = UINT64_MAX, device = UINT64_MAX;
  };
  auto at_window = [](const std::string &trace) {
    adprof::TraceReader reader(trace);
    adprof::Replay replay;
    adprof::Event e;
    Live live;
    while (reader.next(e)) {
      if (e.type == adprof::format::EventType::kStep && e.a == kFirst) {
        live = {replay.mapped_live(), replay.device_live()};
        break;
      }
      replay.apply(e);
    }
    return live;
  };
  const Live whole = at_window(whole_), windowed = at_window(windowed_);
  EXPECT_EQ(whole.device, 8u << 20);
  EXPECT_GE(whole.mapped, (3u << 20) / 2);
  EXPECT_EQ(windowed.device, whole.device);
  EXPECT_EQ(windowed.mapped, whole.mapped);
}

// Full events only before the first step and inside the window: the program's step marks and
// allocations are those of its start-up and of steps 100 to 109 (the blocks born in the steps
// between and live at the window's start come as the live set's, at its start), and the trace
// is a fraction of the whole one.
TEST_F(StepWindow, FullEventsOnlyBeforeTheStepsAndInsideTheWindow) {
  adprof::TraceReader reader(windowed_);
  adprof::Event e;
  std::set<uint64_t> marks;
  std::map<uint32_t, std::string> names;
  std::map<uint32_t, uint64_t> allocations;  // by thread
  uint64_t first = 0, open = 0, close = UINT64_MAX;
  std::vector<uint64_t> program_times;  // the program's allocations
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kThreadName) names[e.thread] = std::string(e.text());
    if (e.type == adprof::format::EventType::kStep) {
      marks.insert(e.a);
      if (e.a == kFirst) open = e.ticks;
    }
    if (e.type == adprof::format::EventType::kStepSummary && e.a == 0)
      first = e.values()[adprof::format::kSummaryStart];
    if (e.type == adprof::format::EventType::kStepSummary && e.a == kEnd)
      close = e.values()[adprof::format::kSummaryStart];
    if (e.type == adprof::format::EventType::kAlloc) {
      ++allocations[e.thread];
      if (names[e.thread] != "adprof-live-set") program_times.push_back(e.ticks);
    }
  }
  ASSERT_NE(first, 0u);
  uint64_t start_up = 0;
  for (const uint64_t t : program_times) {
    if (t < first) {
      ++start_up;
      continue;
    }
    EXPECT_GE(t, open) << "an allocation before the window";
    EXPECT_LT(t, close) << "an allocation after the window";
  }
  // The parameters, the dataset's scratch, the dataset and its staging (the C runtime's own).
  EXPECT_GE(start_up, 4u);
  EXPECT_LE(start_up, 16u);
  std::set<uint64_t> window;
  for (uint64_t s = kFirst; s < kEnd; ++s) window.insert(s);
  EXPECT_EQ(marks, window);
  ASSERT_NE(close, UINT64_MAX);
  uint64_t program_allocations = 0;
  for (const auto &[thread, n] : allocations)
    if (names[thread] != "adprof-live-set") program_allocations += n;
  EXPECT_EQ(program_allocations, program_times.size());
  EXPECT_GE(program_allocations - start_up, (kEnd - kFirst) * 2016);
  EXPECT_LE(program_allocations - start_up, (kEnd - kFirst) * 2100);
  const auto whole_bytes = std::filesystem::file_size(whole_);
  const auto windowed_bytes = std::filesystem::file_size(windowed_);
  EXPECT_LT(windowed_bytes * 5, whole_bytes) << windowed_bytes << " against " << whole_bytes;
  // The report's text names the window and every step's peak.
  const std::string text = adprof::render_text(adprof::analyze(windowed_));
  EXPECT_NE(text.find("Step window: steps 100 to 109 recorded in full"), std::string::npos) << text;
  EXPECT_NE(text.find("190 summarized"), std::string::npos) << text;
  // The JSON has every step, the summarized ones said to be.
  const nlohmann::json j = adprof::to_json(adprof::analyze(windowed_));
  ASSERT_EQ(j["steps"].size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(j["steps"][0].value("summarized", false));
  EXPECT_FALSE(j["steps"][kFirst].value("summarized", false));
  EXPECT_TRUE(j["steps"][0]["peak_by_role"].contains("forward_cache"));
}

// A program that keeps a forward cache of every step (a loss kept with its graph): the growth
// finding names the role and the label from the summaries; the steady program has none.
TEST_F(StepWindow, GrowthOverSummarizedStepsNamesRoleAndLabel) {
  const std::string leaking = record(*dir_, "leak.adtrace", true, true);
  const adprof::Report r = adprof::analyze(leaking);
  ASSERT_TRUE(r.step_window);
  const std::vector<adprof::Finding> found = adprof::find_findings(r);
  const adprof::Finding *growth = growth_of(found);
  ASSERT_NE(growth, nullptr);
  EXPECT_NE(growth->message.find("forward_cache memory grows every step: +256.0 KiB a step"),
            std::string::npos)
      << growth->message;
  EXPECT_NE(growth->message.find("in model.head"), std::string::npos) << growth->message;
  // The losses kept in the summarized steps before the window are live in its replay.
  ASSERT_GT(r.steps.size(), kFirst);
  EXPECT_FALSE(r.steps[kFirst].summarized);
  EXPECT_EQ(r.steps[kFirst].live_by_role[ADPROF_ROLE_FORWARD_CACHE], kFirst * (256u << 10));
  EXPECT_EQ(growth_of(adprof::find_findings(adprof::analyze(windowed_))), nullptr);
}

TEST(StepWindowCli, MalformedWindowIsAUsageError) {
  for (const std::string bad : {"5:2", "3:3", "a:4", "4", "-1:3", ":5"}) {
    SCOPED_TRACE(bad);
    const Result r = run_cli({"run", "--steps", bad, "--no-report", "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--steps takes A:B"), std::string::npos) << r.err;
  }
}

}  // namespace

namespace {

// The job's report names a rank whose memory grows step by step (its growth finding), and only
// that rank.
TEST(StepWindowJob, TheRankThatGrowsIsNamed) {
  std::vector<adprof::job::Process> processes(2);
  for (int rank = 0; rank < 2; ++rank) {
    adprof::job::Process &p = processes[rank];
    p.trace = "rank" + std::to_string(rank) + ".adtrace";
    p.pid = 100 + rank;
    p.said_process = true;
    p.rank = rank;
    p.world_size = 2;
    p.report.peak = 64 << 20;
    p.report.complete = true;
    for (uint64_t i = 0; i < 6; ++i) {
      adprof::StepSummary s;
      s.step = i;
      s.start = static_cast<double>(i);
      s.end = s.start + 1;
      s.live_by_role[ADPROF_ROLE_FORWARD_CACHE] = rank == 1 ? (i + 1) << 21 : 1 << 21;
      p.report.steps.push_back(s);
    }
    p.report.findings = adprof::find_findings(p.report);
  }
  const std::string text = adprof::job::render_text(adprof::job::assemble_job(processes));
  EXPECT_NE(text.find("Rank 1 grows: forward_cache memory grows every step"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("Rank 0 grows"), std::string::npos) << text;
}

}  // namespace
