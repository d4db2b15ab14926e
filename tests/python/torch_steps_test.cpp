// Step windows on PyTorch (`adprof run --torch --steps A:B`; docs/RECORDING.md, "Step
// windows"): a 200-step training loop recorded with the window 100:110 has every step's peak as
// the whole recording has it, full events only for the window's steps, and a much smaller
// trace; a loop that keeps each step's loss with its graph is a growth finding naming the role
// and the module, a steady loop none. A DataLoader's workers mark their batches as steps: under
// the window their traces are bounded as their rank's, numbered by the rank's step that
// consumes each batch (persistent workers too), the program's losses are unchanged, and the
// job's report counts their peaks as without a window, and a rank's whose highest step was
// folded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "adprof/trace_reader.h"
#include "python_packages.h"
#include "torch_support.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

// Debian's python3 with its torch 1.13, or the one ADPROF_TEST_PYTHON names (the venv's 2.x).
const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");
const std::string kScripts = env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS);

bool python_has_torch() {
  static const bool has = !said_versions("torch", kPython, {"torch"}, "torch").empty();
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

// scripts/job_ddp.py (a plain launcher, two ranks, ARGS) recorded whole (jobs[0]) and under
// --steps 1:2 (jobs[1]), each job's `report --job --json`; PORT_SALT keeps two tests' rendezvous
// ports apart.
void record_whole_and_windowed(const TempDir &tmp, const std::vector<std::string> &args,
                               int port_salt, json (&jobs)[2]) {
  for (int windowed = 0; windowed < 2; ++windowed) {
    const std::string dir = tmp / (windowed ? "windowed" : "whole");
    std::filesystem::create_directory(dir);
    SpawnOptions o;
    o.argv = {ADPROF_TEST_CLI, "run", "--torch", "--no-report", "-o", dir + "/job.adtrace"};
    if (windowed) o.argv.insert(o.argv.end(), {"--steps", "1:2"});
    o.argv.insert(o.argv.end(), {"--", kPython, kScripts + "/job_ddp.py", dir, "--launch", "2"});
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(
        o.argv.end(),
        {"--port", std::to_string(20000 + (getpid() * 7 + port_salt + windowed) % 20000)});
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
  record_whole_and_windowed(tmp, {"--workers", "2", "--context", "default", "--steps", "3"}, 11,
                            jobs);
  if (HasFatalFailure()) return;
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

// A rank whose highest step lies outside the window: scripts/job_ddp.py's rank 0 (a plain
// launcher, two ranks, 5 steps) holds 128 MiB more from its forward to its optimizer step in
// step 3 (--spike 0:3:128), folded under --steps 1:2. In the job's report its peak is that
// step's, as the whole recording's (5%: the Python objects vary a little from run to run), said
// to be a summarized step's, and rank 0 is the outlier in both (before, under the window its
// peak was the window's, 128 MiB less, and rank 1, with twice the batch, was named).
TEST(TorchSteps, ARanksPeakInAFoldedStepIsItsPeakInTheJob) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  json jobs[2];
  record_whole_and_windowed(tmp, {"--steps", "5", "--spike", "0:3:128"}, 13, jobs);
  if (HasFatalFailure()) return;
  const json &whole = jobs[0]["ranks"][0], &windowed = jobs[1]["ranks"][0];
  const double peak = whole["peak"].get<double>();
  std::printf(
      "[ rank 0   ] peak: whole %.0f (step %s), window 1:2 %.0f (step %s%s; the window's "
      "own %.0f)\n",
      peak, whole["peak_step"].dump().c_str(), windowed["peak"].get<double>(),
      windowed["peak_step"].dump().c_str(),
      windowed.value("peak_summarized", false) ? ", summarized" : "",
      windowed["report"]["peak"]["bytes"].get<double>());
  EXPECT_EQ(whole["peak_step"], 3);
  EXPECT_FALSE(whole.value("peak_summarized", true));
  EXPECT_EQ(windowed["peak_step"], 3);
  EXPECT_TRUE(windowed.value("peak_summarized", false));
  EXPECT_NEAR(windowed["peak"].get<double>(), peak, 0.05 * peak);
  EXPECT_LT(windowed["report"]["peak"]["bytes"].get<double>() + 100.0 * (1 << 20), peak)
      << "the window's own peak holds the spike: the test shows nothing";
  EXPECT_EQ(jobs[0]["outlier"]["rank"], 0);
  EXPECT_EQ(jobs[1]["outlier"]["rank"], 0);
}

// A loop fed by a DataLoader's two persistent workers (scripts/loader_steps.py), `epochs` epochs
// of `batches` batches each, recorded by `adprof run --torch` (with `window` when not empty; no
// adprof at all when `plain`) into DIR/job.adtrace. RANK and WORLD_SIZE make the program rank 0
// of a job of one, so that the job's report says whose workers they are.
struct LoaderRun {
  std::string dir;
  json job;                          // adprof report --job --json (null when plain)
  std::vector<std::string> losses;   // every step's loss, repr() of the float
  std::vector<uint64_t> batch_pids;  // every step's batch: the pid of the worker that loaded it
  std::vector<std::string> workers;  // their traces (the job's report's)
  uint64_t worker_bytes = 0;         // their traces' bytes, summed
  size_t workers_counted = 0;        // the processes that ran worker_init_fn
};

LoaderRun run_loader(const TempDir &tmp, const std::string &name, int batches,
                     const std::string &window, const std::string &context = "default",
                     bool plain = false, int epochs = 2) {
  LoaderRun out;
  out.dir = tmp / name;
  std::filesystem::create_directory(out.dir);
  SpawnOptions o;
  if (!plain) {
    o.argv = {ADPROF_TEST_CLI, "run", "--torch", "--no-report", "-o", out.dir + "/job.adtrace"};
    if (!window.empty()) o.argv.insert(o.argv.end(), {"--steps", window});
    o.argv.push_back("--");
  }
  o.argv.insert(o.argv.end(), {kPython, kScripts + "/loader_steps.py", out.dir, "--batches",
                               std::to_string(batches), "--epochs", std::to_string(epochs),
                               "--context", context});
  o.env = {{"PYTHONDONTWRITEBYTECODE", "1"},
           {"OMP_NUM_THREADS", "1"},
           {"RANK", "0"},
           {"WORLD_SIZE", "1"}};
  o.timeout_s = 600;
  const Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << name << ": " << r.out << r.err;
  std::ifstream losses(out.dir + "/losses.json");
  const json l = json::parse(losses, nullptr, false);
  if (l.is_array())
    for (const json &v : l) out.losses.push_back(v.get<std::string>());
  EXPECT_EQ(out.losses.size(), static_cast<size_t>(epochs * batches)) << name;
  std::ifstream pids(out.dir + "/batch_pids.json");
  const json p = json::parse(pids, nullptr, false);
  if (p.is_array())
    for (const json &v : p) out.batch_pids.push_back(v.get<uint64_t>());
  EXPECT_EQ(out.batch_pids.size(), out.losses.size()) << name;
  for (const auto &e : std::filesystem::directory_iterator(out.dir))
    if (e.path().filename().string().rfind("worker-", 0) == 0) ++out.workers_counted;
  if (plain) return out;
  const Result report = run_cli({"report", "--job", "--json", out.dir + "/job.adtrace"}, 600);
  EXPECT_EQ(report.exit_code, 0) << name << ": " << report.err;
  out.job = json::parse(report.out, nullptr, false);
  if (!out.job.is_object() || out.job["ranks"].size() != 1) {
    ADD_FAILURE() << name << ": not a job of one rank: " << report.out;
    out.job = json();
    return out;
  }
  for (const json &w : out.job["ranks"][0]["workers"]) {
    out.workers.push_back(w["trace"].get<std::string>());
    out.worker_bytes += std::filesystem::file_size(out.workers.back());
  }
  return out;
}

// A DataLoader's worker marks a step per batch it takes (python/adprof/torch/_workers.py): its
// rank's step when the batch's epoch began plus the batch's index in the epoch. Under a window its
// trace is then bounded as its rank's: a summary per batch, no longer every event of every batch
// (which it was, as a process that marks no step).
TEST(TorchSteps, WorkersMarkTheirBatchesAsSteps) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  constexpr int kShort = 10, kLong = 30;  // batches per epoch; 2 epochs
  const LoaderRun plain = run_loader(tmp, "plain", kLong, "", "default", true);
  const LoaderRun whole_short = run_loader(tmp, "whole10", kShort, "");
  const LoaderRun whole_long = run_loader(tmp, "whole30", kLong, "");
  const LoaderRun window_short = run_loader(tmp, "window10", kShort, "4:6");
  const LoaderRun window_long = run_loader(tmp, "window30", kLong, "4:6");
  for (const LoaderRun *r : {&whole_short, &whole_long, &window_short, &window_long}) {
    SCOPED_TRACE(r->dir);
    ASSERT_TRUE(r->job.is_object());
    // The job's report counts the workers as the program's own count does (persistent: 2).
    EXPECT_EQ(r->workers.size(), 2u);
    EXPECT_EQ(r->workers_counted, 2u);
  }
  // The program is unchanged: the same batches in the same order give the same losses.
  EXPECT_EQ(whole_long.losses, plain.losses);
  EXPECT_EQ(window_long.losses, plain.losses);
  EXPECT_EQ(window_short.losses, whole_short.losses);

  // Bounded: 40 batches more add a fraction of what they add to the whole recording's workers.
  const double whole_growth = static_cast<double>(whole_long.worker_bytes) -
                              static_cast<double>(whole_short.worker_bytes),
               window_growth = static_cast<double>(window_long.worker_bytes) -
                               static_cast<double>(window_short.worker_bytes);
  std::printf(
      "[ workers  ] trace bytes, 2 workers, %d / %d batches: whole %llu / %llu (+%.0f), "
      "window 4:6 %llu / %llu (+%.0f)\n",
      2 * kShort, 2 * kLong, static_cast<unsigned long long>(whole_short.worker_bytes),
      static_cast<unsigned long long>(whole_long.worker_bytes), whole_growth,
      static_cast<unsigned long long>(window_short.worker_bytes),
      static_cast<unsigned long long>(window_long.worker_bytes), window_growth);
  EXPECT_GT(whole_growth, 0);
  EXPECT_LT(window_growth, 0.3 * whole_growth) << "a worker's trace grows with its batches";

  // Each batch is one worker's step: numbers rising within the process, within the job's
  // steps; outside the window they are summaries.
  size_t steps = 0;
  for (const std::string &trace : window_long.workers) {
    SCOPED_TRACE(trace);
    const json report = report_of(trace);
    EXPECT_EQ(report["step_window"], true);
    size_t summarized = 0;
    int64_t last = -1;
    for (const json &s : report["steps"]) {
      const int64_t step = s["step"].get<int64_t>();
      EXPECT_GT(step, last) << "a worker's step numbers go back";
      EXPECT_LT(step, 2 * kLong);
      last = step;
      summarized += s.value("summarized", false) ? 1 : 0;
    }
    steps += report["steps"].size();
    EXPECT_GE(summarized + 1, report["steps"].size()) << "at most one step (4 or 5) in full";
  }
  EXPECT_EQ(steps, static_cast<size_t>(2 * kLong)) << "a step per batch";

  // The job's workers' total under the window against the whole recording's (another run of
  // the same program: within a few percent of each other). A DataLoader worker's main thread
  // allocates each batch and its feeder thread frees it: the summaries merge the threads by
  // time (docs/RECORDING.md, step windows). Before, they counted buffer by buffer and a batch
  // stayed live until the feeder's buffer reached the writer: 3-11% above the whole recording's
  // (506-535 KB for 481 KB); now within 1% in the runs measured.
  const double whole_peak = whole_long.job["ranks"][0]["workers_peak"].get<double>(),
               window_peak = window_long.job["ranks"][0]["workers_peak"].get<double>();
  std::printf("[ workers  ] workers_peak: whole %.0f, window 4:6 %.0f\n", whole_peak, window_peak);
  EXPECT_GE(window_peak, 0.95 * whole_peak) << "the window's workers lost memory";
  EXPECT_LE(window_peak, 1.05 * whole_peak) << "the summaries count freed blocks as live";
}

// A persistent worker serves every epoch, and numbers each batch by the rank's step that will
// consume it: each worker's steps are exactly the steps whose batch it loaded (the program's
// own account: the pid that came with each step's batch), over 3 epochs of 7 batches (odd: the
// workers' shares of an epoch differ), forked and spawned. Before, a worker counted on from its
// own last batch at each epoch, and drifted from its rank's steps by up to workers - 1 an epoch
// (the batches of the epoch that went to the other worker were not its): two workers marked
// the same steps, and a step's batch was marked by none.
TEST(TorchSteps, PersistentWorkersNumberEachBatchByTheStepThatConsumesIt) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  constexpr int kBatches = 7, kEpochs = 3;
  for (const std::string context : {"default", "spawn"}) {
    SCOPED_TRACE(context);
    const LoaderRun run = run_loader(tmp, context, kBatches, "4:6", context, false, kEpochs);
    ASSERT_TRUE(run.job.is_object());
    ASSERT_EQ(run.batch_pids.size(), static_cast<size_t>(kBatches * kEpochs));
    ASSERT_EQ(run.job["ranks"][0]["workers"].size(), 2u);
    // The rank's own steps: one per batch, numbered from 0.
    const json rank = report_of(run.job["ranks"][0]["trace"].get<std::string>());
    std::set<int64_t> rank_steps;
    for (const json &s : rank["steps"]) rank_steps.insert(s["step"].get<int64_t>());
    for (int step = 0; step < kBatches * kEpochs; ++step)
      EXPECT_TRUE(rank_steps.count(step)) << "the rank has no step " << step;
    for (const json &w : run.job["ranks"][0]["workers"]) {
      const uint64_t pid = w["pid"].get<uint64_t>();
      std::set<int64_t> loaded, marked;
      for (size_t step = 0; step < run.batch_pids.size(); ++step)
        if (run.batch_pids[step] == pid) loaded.insert(static_cast<int64_t>(step));
      const json report = report_of(w["trace"].get<std::string>());
      std::string steps;
      for (const json &s : report["steps"]) {
        marked.insert(s["step"].get<int64_t>());
        steps += " " + std::to_string(s["step"].get<int64_t>());
      }
      std::string expected;
      for (int64_t step : loaded) expected += " " + std::to_string(step);
      std::printf("[ worker   ] %s, pid %llu: loaded the batches of steps%s; marked%s\n",
                  context.c_str(), static_cast<unsigned long long>(pid), expected.c_str(),
                  steps.c_str());
      EXPECT_FALSE(loaded.empty()) << "worker " << pid << " loaded no batch";
      EXPECT_EQ(marked, loaded) << "worker " << pid << ": marked" << steps << ", loaded"
                                << expected;
      EXPECT_EQ(report["steps"].size(), loaded.size()) << "a step per batch";
    }
  }
}

// A spawned worker (multiprocessing_context="spawn") is sent the step marking through pickle:
// its batches are steps too, and its batches are the forked workers'.
TEST(TorchSteps, SpawnedWorkersMarkTheirBatchesAsSteps) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const LoaderRun forked = run_loader(tmp, "forked", 6, "", "default", true);
  const LoaderRun spawned = run_loader(tmp, "spawned", 6, "2:3", "spawn");
  ASSERT_TRUE(spawned.job.is_object());
  EXPECT_EQ(spawned.losses, forked.losses);
  ASSERT_EQ(spawned.workers.size(), 2u);
  EXPECT_EQ(spawned.workers_counted, 2u);
  size_t steps = 0;
  for (const std::string &trace : spawned.workers) {
    const json report = report_of(trace);
    EXPECT_EQ(report["step_window"], true) << trace;
    steps += report["steps"].size();
  }
  EXPECT_EQ(steps, 12u) << "a step per batch";
}

}  // namespace
