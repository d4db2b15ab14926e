// Step windows on PyTorch (`adprof run --torch --steps A:B`; docs/RECORDING.md, "Step
// windows"): a 200-step training loop recorded with the window 100:110 has every step's peak as
// the whole recording has it, full events only for the window's steps, and a much smaller
// trace; a loop that keeps each step's loss with its graph is a growth finding naming the role
// and the module, a steady loop none. A job's DataLoader workers, which mark no step, are
// recorded whole under the window: the job's report counts them as without one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "adprof/trace_reader.h"
#include "torch_support.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

// Debian's python3 with its torch 1.13, or the one ADPROF_TEST_PYTHON names (the venv's 2.x).
const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");
const std::string kScripts = env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS);

bool python_has_torch() {
  static const bool has = [] {
    SpawnOptions o;
    o.argv = {kPython, "-c", "import torch; print(torch.__version__)"};
    const Result r = run(o);
    std::printf("[ torch    ] %s: %s", kPython.c_str(),
                r.exited && r.exit_code == 0 ? ("PyTorch " + r.out).c_str() : "no torch\n");
    return r.exited && r.exit_code == 0;
  }();
  return has;
}

#define SKIP_WITHOUT_TORCH()                                             \
  do {                                                                   \
    ADPROF_SKIP_IF_SANITIZED();                                          \
    if (!python_has_torch()) GTEST_SKIP() << "no torch for " << kPython; \
  } while (0)

constexpr int kSteps = 200;

// A small training loop of kSteps steps; `keep` = "graph": each step also computes a
// monitoring loss outside torch.no_grad() and keeps it in a list, with its graph and the
// tensors the graph saved (a leak); "none": nothing kept.
const char *const kLoop =
    "import sys, torch\n"
    "torch.manual_seed(0)\n"
    "torch.set_num_threads(1)\n"
    "class Net(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.body = torch.nn.Linear(128, 512)\n"
    "        self.head = torch.nn.Linear(512, 16)\n"
    "    def forward(self, x):\n"
    "        return self.head(torch.relu(self.body(x)))\n"
    "net = Net()\n"
    "opt = torch.optim.Adam(net.parameters(), lr=1e-3)\n"
    "x, y = torch.randn(64, 128), torch.randn(64, 16)\n"
    "losses = []\n"
    "for step in range(int(sys.argv[1])):\n"
    "    opt.zero_grad()\n"
    "    loss = (net(x) - y).square().mean()\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "    if sys.argv[2] == 'graph':\n"
    "        losses.append((net(x) - y).square().mean())\n";

Result record(const TempDir &dir, const std::string &trace, const std::string &keep,
              const std::string &steps) {
  write_file(dir / "loop.py", kLoop);
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CLI, "run", "--torch", "--no-report", "-o", trace};
  if (!steps.empty()) {
    o.argv.push_back("--steps");
    o.argv.push_back(steps);
  }
  o.argv.insert(o.argv.end(), {"--", kPython, dir / "loop.py", std::to_string(kSteps), keep});
  o.env.emplace_back("PYTHONDONTWRITEBYTECODE", "1");
  o.timeout_s = 600;
  return run(o);
}

// The bytes of the trace's chunks that begin at `ticks` or later (trace_format.h: a 64-byte
// header, then chunks, each a 40-byte header, its payload's size at offset 16 and its base
// timestamp at 24), and the time of the first step's mark (the whole trace's kStep, the
// windowed one's summary).
uint64_t chunk_bytes_from(const std::string &trace, uint64_t ticks) {
  const std::string bytes = read_file(trace);
  uint64_t total = 0;
  for (size_t at = 64; at + 40 <= bytes.size();) {
    uint32_t stored = 0;
    uint64_t base = 0;
    std::memcpy(&stored, bytes.data() + at + 16, sizeof stored);
    std::memcpy(&base, bytes.data() + at + 24, sizeof base);
    if (base >= ticks) total += 40 + stored;
    at += 40 + stored;
  }
  return total;
}

uint64_t first_mark(const std::string &trace) {
  adprof::TraceReader reader(trace);
  adprof::Event e;
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kStep && e.a == 0) return e.ticks;
    if (e.type == adprof::format::EventType::kStepSummary && e.a == 0)
      return e.values()[adprof::format::kSummaryStart];
  }
  return 0;
}

const json *finding(const json &report, const std::string &kind) {
  for (const json &f : report["findings"])
    if (f["kind"] == kind) return &f;
  return nullptr;
}

TEST(TorchSteps, WindowOfALongRunKeepsEveryStepsPeak) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string whole = tmp / "whole.adtrace", windowed = tmp / "windowed.adtrace";
  Result r = record(tmp, whole, "none", "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = record(tmp, windowed, "none", "100:110");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json a = report_of(whole), b = report_of(windowed);
  ASSERT_EQ(a["steps"].size(), static_cast<size_t>(kSteps)) << a["steps"].size();
  ASSERT_EQ(b["steps"].size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(b.value("step_window", false));
  std::set<uint64_t> full;
  for (size_t i = 0; i < b["steps"].size(); ++i) {
    const json &s = b["steps"][i], &w = a["steps"][i];
    SCOPED_TRACE("step " + std::to_string(i));
    ASSERT_EQ(s["step"], w["step"]);
    if (!s.value("summarized", false)) full.insert(s["step"].get<uint64_t>());
    // Two runs of one script: PyTorch asks for the same tensors step by step; what differs is
    // Python's own small objects (its allocator's 256 KiB arenas, made or given back at other
    // moments) and glibc's, at most a few arenas against a step peak of tens of MiB: 2%.
    const double peak = w["peak"].get<double>();
    EXPECT_NEAR(s["peak"].get<double>(), peak, 0.02 * peak);
    // The parameters at every step's peak, summarized or replayed: the model's four tensors,
    // (128 * 512 + 512 + 512 * 16 + 16) floats.
    EXPECT_EQ(s["peak_by_role"]["parameter"].get<uint64_t>(), 297024u);
  }
  // Full events for steps 100 to 109 only: those are the steps the report replays.
  std::set<uint64_t> window;
  for (uint64_t s = 100; s < 110; ++s) window.insert(s);
  EXPECT_EQ(full, window);
  // Both record the start-up (imports, the model: everything before the first step's mark) in
  // full; from there on the window's trace holds ten steps and the others' summaries.
  const uint64_t whole_bytes = std::filesystem::file_size(whole),
                 windowed_bytes = std::filesystem::file_size(windowed);
  const uint64_t whole_mark = first_mark(whole), windowed_mark = first_mark(windowed);
  ASSERT_NE(whole_mark, 0u);
  ASSERT_NE(windowed_mark, 0u);
  const uint64_t whole_steps = chunk_bytes_from(whole, whole_mark),
                 windowed_steps = chunk_bytes_from(windowed, windowed_mark);
  std::printf(
      "[ bytes    ] whole %ju (from step 0 on %ju), window 100:110 %ju (from step 0 on %ju)\n",
      static_cast<uintmax_t>(whole_bytes), static_cast<uintmax_t>(whole_steps),
      static_cast<uintmax_t>(windowed_bytes), static_cast<uintmax_t>(windowed_steps));
  EXPECT_LT(windowed_steps * 4, whole_steps);
  EXPECT_LT(windowed_bytes, whole_bytes);
  EXPECT_EQ(finding(b, "growth"), nullptr) << b["findings"].dump(1);
}

TEST(TorchSteps, LossesKeptWithTheirGraphAreALeakOutsideTheWindow) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "leak.adtrace";
  const Result r = record(tmp, trace, "graph", "100:110");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = report_of(trace);
  const json *growth = finding(report, "growth");
  ASSERT_NE(growth, nullptr) << report["findings"].dump(1);
  const std::string message = (*growth)["message"];
  EXPECT_NE(message.find("forward_cache memory grows every step"), std::string::npos) << message;
  // The saved relu output (128 KiB of the 132 a step) is made in Net.forward itself: the
  // module that grows is the root, "net".
  EXPECT_NE(message.find("+132.0 KiB a step"), std::string::npos) << message;
  EXPECT_NE(message.find(", in net"), std::string::npos) << message;
}

// A job's DataLoader(num_workers=2) in each of two ranks (scripts/job_ddp.py, a plain launcher,
// the workers forked): the workers run no optimizer and mark no step, so under --steps 1:2 they
// are recorded whole, as without a window (before, their events were folded with no step to
// hold them: each worker's trace held its names only, and the job's report counted their
// peaks as nothing). Each rank's workers, and the sum of their peaks, as in a whole recording
// of the same job (5%: the workers' Python objects vary a little from run to run); and the
// launcher's peak.
TEST(TorchSteps, JobsWorkersUnderAWindowAsRecordedWhole) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  json jobs[2];
  for (int windowed = 0; windowed < 2; ++windowed) {
    const std::string dir = tmp / (windowed ? "windowed" : "whole");
    std::filesystem::create_directory(dir);
    SpawnOptions o;
    o.argv = {ADPROF_TEST_CLI, "run", "--torch", "--no-report", "-o", dir + "/job.adtrace"};
    if (windowed) o.argv.insert(o.argv.end(), {"--steps", "1:2"});
    o.argv.insert(o.argv.end(), {"--", kPython, kScripts + "/job_ddp.py", dir, "--launch", "2",
                                 "--workers", "2", "--context", "default", "--steps", "3", "--port",
                                 std::to_string(20000 + (getpid() * 7 + 11 + windowed) % 20000)});
    o.env = {{"PYTHONDONTWRITEBYTECODE", "1"}, {"OMP_NUM_THREADS", "1"}};
    o.timeout_s = 600;
    const Result r = run(o);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const Result report = run_cli({"report", "--job", "--json", dir + "/job.adtrace"}, 600);
    ASSERT_EQ(report.exit_code, 0) << report.err;
    jobs[windowed] = json::parse(report.out, nullptr, false);
    ASSERT_TRUE(jobs[windowed].is_object()) << report.out;
    ASSERT_EQ(jobs[windowed]["ranks"].size(), 2u) << report.out;
  }
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json &whole = jobs[0]["ranks"][rank], &windowed = jobs[1]["ranks"][rank];
    EXPECT_EQ(windowed["report"]["step_window"], true);
    ASSERT_EQ(windowed["workers"].size(), 2u);
    ASSERT_EQ(whole["workers"].size(), 2u);
    for (const json &w : windowed["workers"]) {
      EXPECT_EQ(w["complete"], true);
      EXPECT_GT(w["peak"].get<uint64_t>(), 256u << 10) << "a worker's memory lost under the window";
    }
    const double peak = whole["workers_peak"].get<double>();
    std::printf("[ workers  ] rank %d: whole %.0f, window 1:2 %.0f\n", rank, peak,
                windowed["workers_peak"].get<double>());
    EXPECT_NEAR(windowed["workers_peak"].get<double>(), peak, 0.05 * peak);
  }
  // The launcher marks no step either: its peak (its imports) as in the whole recording.
  double launcher_peaks[2] = {};
  for (int windowed = 0; windowed < 2; ++windowed)
    for (const json &p : jobs[windowed]["processes"])
      if (p["kind"] == "launcher") launcher_peaks[windowed] = p["peak"].get<double>();
  std::printf("[ launcher ] whole %.0f, window 1:2 %.0f\n", launcher_peaks[0], launcher_peaks[1]);
  EXPECT_GT(launcher_peaks[0], 0);
  EXPECT_NEAR(launcher_peaks[1], launcher_peaks[0], 0.05 * launcher_peaks[0]);
}

}  // namespace
