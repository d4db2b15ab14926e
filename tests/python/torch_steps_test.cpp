// Step windows on PyTorch (`adprof run --torch --steps A:B`; docs/RECORDING.md, "Step
// windows"): a 200-step training loop recorded with the window 100:110 has every step's peak as
// the whole recording has it, full events only for the window's steps, and a much smaller
// trace; a loop that keeps each step's loss with its graph is a growth finding naming the role
// and the module, a steady loop none.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "torch_support.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

// Debian's python3 with its torch 1.13, or the one ADPROF_TEST_PYTHON names (the venv's 2.x).
const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");

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
  const auto whole_bytes = std::filesystem::file_size(whole),
             windowed_bytes = std::filesystem::file_size(windowed);
  std::printf("[ bytes    ] whole %ju, window 100:110 %ju\n", static_cast<uintmax_t>(whole_bytes),
              static_cast<uintmax_t>(windowed_bytes));
  EXPECT_LT(windowed_bytes * 4, whole_bytes);
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

}  // namespace
