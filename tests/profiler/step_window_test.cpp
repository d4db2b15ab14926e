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
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace {

using namespace adprof_test;

constexpr int kSteps = 200;
constexpr uint64_t kFirst = 100, kEnd = 110;

std::string record(const TempDir &dir, const std::string &name, bool leak, bool window) {
  const std::string trace = dir / name;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STEPS, std::to_string(kSteps), leak ? "leak" : "steady"};
  o.trace = trace;
  if (window)
    o.env.emplace_back("ADPROF_STEPS", std::to_string(kFirst) + ":" + std::to_string(kEnd));
  const Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
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
    whole_ = record(*dir_, "whole.adtrace", false, false);
    windowed_ = record(*dir_, "windowed.adtrace", false, true);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir *dir_;
  static std::string whole_, windowed_;
};
TempDir *StepWindow::dir_ = nullptr;
std::string StepWindow::whole_, StepWindow::windowed_;

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
    // 16 blocks, 2,000 temporaries a step (and the vector's own).
    EXPECT_GE(w.allocations, 2016u);
    EXPECT_LE(w.allocations, full.allocations + 8);
  }
}

// Full events only inside the window: the program's step marks and allocations are those of
// steps 100 to 109 (the blocks live before it come as the live set's, at its start), and the
// trace is a fraction of the whole one.
TEST_F(StepWindow, FullEventsOnlyInsideTheWindow) {
  adprof::TraceReader reader(windowed_);
  adprof::Event e;
  std::set<uint64_t> marks;
  std::map<uint32_t, std::string> names;
  std::map<uint32_t, uint64_t> allocations;  // by thread
  uint64_t open = 0, close = UINT64_MAX;
  std::vector<uint64_t> program_times;  // the program's allocations
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kThreadName) names[e.thread] = std::string(e.text());
    if (e.type == adprof::format::EventType::kStep) {
      marks.insert(e.a);
      if (e.a == kFirst) open = e.ticks;
    }
    if (e.type == adprof::format::EventType::kStepSummary && e.a == kEnd)
      close = e.values()[adprof::format::kSummaryStart];
    if (e.type == adprof::format::EventType::kAlloc) {
      ++allocations[e.thread];
      if (names[e.thread] != "adprof-live-set") program_times.push_back(e.ticks);
    }
  }
  for (const uint64_t t : program_times) {
    EXPECT_GE(t, open) << "an allocation before the window";
    EXPECT_LT(t, close) << "an allocation after the window";
  }
  std::set<uint64_t> window;
  for (uint64_t s = kFirst; s < kEnd; ++s) window.insert(s);
  EXPECT_EQ(marks, window);
  ASSERT_NE(close, UINT64_MAX);
  uint64_t program_allocations = 0;
  for (const auto &[thread, n] : allocations)
    if (names[thread] != "adprof-live-set") program_allocations += n;
  EXPECT_EQ(program_allocations, program_times.size());
  EXPECT_GE(program_allocations, (kEnd - kFirst) * 2016);
  EXPECT_LE(program_allocations, (kEnd - kFirst) * 2100);
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
