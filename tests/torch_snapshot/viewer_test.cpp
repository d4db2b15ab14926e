// PyTorch's own tools on adprof's snapshots, and on the hand-made ones adprof reads (label
// torch2, run on the tests' venv): viewer_check.py runs `torch.cuda._memory_viz`'s `trace` and
// `segsum` (the `trace` and `stats` commands) and the viewer's timeline rules on a snapshot; its
// figures must equal adprof's own reading of the same run. The interpreter is ADPROF_TEST_PYTHON
// (ctest sets the venv's; by hand default /usr/bin/python3); a torch whose _memory_viz has no
// `trace` (1.13) skips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");
const std::string kData = SNAPSHOT_DATA;

bool python_has_memory_viz() {
  static const bool has = [] {
    SpawnOptions o;
    o.argv = {kPython, "-c", "from torch.cuda import _memory_viz as v; assert hasattr(v, 'trace')"};
    Result r = run(o);
    return r.exited && r.exit_code == 0;
  }();
  return has;
}

#define SKIP_WITHOUT_MEMORY_VIZ()                                                    \
  do {                                                                               \
    ADPROF_SKIP_IF_SANITIZED();                                                      \
    if (!python_has_memory_viz())                                                    \
      GTEST_SKIP() << "no torch.cuda._memory_viz.trace for " << kPython              \
                   << " (PyTorch 2.x: the tests' venv, scripts/setup-test-venv.sh)"; \
  } while (0)

// What viewer_check.py reads from each snapshot, in order (one interpreter for all of them).
std::vector<json> viewer(const std::vector<std::string> &snapshots) {
  SpawnOptions o;
  o.argv = {kPython, VIEWER_CHECK};
  o.argv.insert(o.argv.end(), snapshots.begin(), snapshots.end());
  o.timeout_s = 600;
  Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    out.push_back(json::parse(line, nullptr, false));
    EXPECT_FALSE(out.back().is_discarded()) << line << r.err;
  }
  EXPECT_EQ(out.size(), snapshots.size()) << r.out << r.err;
  out.resize(snapshots.size(), json::object());
  return out;
}

json report(const std::string &path) {
  Result r = run_cli({"report", "--json", path}, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

// The viewer's bytes by category at its peak against the report's by role (non-zero ones).
void expect_roles_equal(const json &viz_categories, const json &by_role) {
  json roles = json::object();
  for (const auto &[role, bytes] : by_role.items())
    if (bytes.get<uint64_t>()) roles[role] = bytes;
  EXPECT_EQ(viz_categories, roles);
}

// The PyTorch sample recorded, exported and read by PyTorch's tools: the same peak, bytes by
// role at it, allocations (one `trace` line each) and bytes live at the end (`stats`).
TEST(TorchSnapshotViewer, ExportOfThePyTorchSampleReadByPyTorch) {
  SKIP_WITHOUT_MEMORY_VIZ();
  TempDir dir;
  const std::string trace = dir.path() + "/fm.adtrace", pickle = dir.path() + "/fm.pickle";
  Result run = run_cli({"run", "--torch", "--no-report", "-o", trace, "--", kPython,
                        SOURCE_DIR "/samples/torch/fashion_mnist.py", "--steps", "2", "--batch",
                        "64", "--train-images", "256", "--test-images", "0", "-q"},
                       600);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result ex = run_cli({"export", trace, "--torch-snapshot", pickle}, 600);
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  const json r = report(trace), v = viewer({pickle})[0];
  ASSERT_EQ(v["devices"].size(), 1u);  // no GPU here: device 0 is the host heap
  const json &d = v["devices"][0];
  EXPECT_GT(r["peak"]["bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(d["peak"], r["peak"]["bytes"]);
  expect_roles_equal(d["by_category"], r["peak"]["by_role"]);
  EXPECT_EQ(d["trace_allocations"], r["totals"]["allocations"]);
  EXPECT_EQ(d["trace_entries"].get<uint64_t>(),
            r["totals"]["allocations"].get<uint64_t>() + 2 * r["totals"]["frees"].get<uint64_t>());
  EXPECT_EQ(v["stats_total_allocated"], v["format_bytes"]);  // `stats` on the live blocks
  // The legend: adprof's roles.
  for (const auto &c : v["categories"])
    EXPECT_TRUE(r["peak"]["by_role"].contains(c.get<std::string>())) << c;
  EXPECT_TRUE(r["peak"]["by_role"].contains("forward_cache"));
}

// The hand-made snapshots: adprof's peak is the viewer's (one device each); exported again by
// adprof, the viewer's bytes by category at its peak are adprof's by role.
TEST(TorchSnapshotViewer, HandMadeSnapshotsReadAlike) {
  SKIP_WITHOUT_MEMORY_VIZ();
  TempDir dir;
  // (Not unknown_action.pickle: PyTorch's `trace` itself fails on an entry without an action.)
  const std::vector<std::string> names = {"basic.pickle",     "oom.pickle",
                                          "no_frames.pickle", "segments_only.pickle",
                                          "before.pickle",    "after.pickle"};
  std::vector<std::string> snapshots, exported;
  std::vector<json> reports;
  for (const std::string &name : names) {
    snapshots.push_back(kData + "/" + name);
    exported.push_back(dir.path() + "/" + name);
    reports.push_back(report(snapshots.back()));
    ASSERT_EQ(run_cli({"export", snapshots.back(), "--torch-snapshot", exported.back()}).exit_code,
              0)
        << name;
  }
  std::vector<std::string> both = snapshots;
  both.insert(both.end(), exported.begin(), exported.end());
  const std::vector<json> read = viewer(both);
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const json &r = reports[i], &v = read[i], &back = read[names.size() + i];
    EXPECT_EQ(v["devices"][0]["peak"], r["peak"]["bytes"]);
    EXPECT_EQ(back["devices"][0]["peak"], r["peak"]["bytes"]);
    expect_roles_equal(back["devices"][0]["by_category"], r["peak"]["by_role"]);
  }
}

}  // namespace
