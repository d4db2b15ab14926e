// The exports byte for byte: `adprof export --perfetto/--folded/--torch-snapshot` and `adprof
// timeline`'s CSV, SVG and terminal chart of committed traces (tests/profiler/corpus), and the
// snapshot export of committed PyTorch snapshots (tests/torch_snapshot/data), against files stored
// under tests/cli/golden/exports/TRACE/. Any change of an export's bytes fails here; a change meant
// to be made is stored again with
//   ADPROF_UPDATE_GOLDEN=1 build/release/tests/cli/cli_export_golden_test
// (it rewrites the stored files in the source tree; review them with `git diff`).
//
// Each export is written alone and together with the others (`export --perfetto A --folded B
// --torch-snapshot C`): the ways through the library (a plain replay, or a replay that also
// analyses, every export riding on it) must agree.
//
// Call stacks are symbolised from the libraries of the machine that reads the trace (debug
// information found by build id, call_stacks.h): the stack-dependent files (Perfetto, folded)
// of the trace with stacks are compared only where this machine names the stacks' frames as the
// one that stored them did (symbols.txt, taken from `adprof report --json`, another path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../support/process.h"
#include "../support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using adprof_test::read_file;
using adprof_test::run_shell;
using adprof_test::shell_quote;
using adprof_test::TempDir;

const std::string kCli = ADPROF_CLI;
const fs::path kCorpus = fs::path(SOURCE_DIR) / "tests/profiler/corpus";
const fs::path kGolden = fs::path(SOURCE_DIR) / "tests/cli/golden/exports";

bool updating() {
  const char *v = getenv("ADPROF_UPDATE_GOLDEN");
  return v && *v && std::string(v) != "0";
}

struct Case {
  std::string trace;  // in tests/profiler/corpus, without .adtrace
  bool stacks = false;
};

void PrintTo(const Case &c, std::ostream *out) { *out << c.trace; }

// Runs `command` (the CLI, then arguments, quoted), which must succeed.
void cli(const std::vector<std::string> &args, const std::string &stdout_to = {}) {
  std::string command = shell_quote(kCli);
  for (const std::string &a : args) command += ' ' + shell_quote(a);
  if (!stdout_to.empty()) command += " >" + shell_quote(stdout_to);
  const adprof_test::ProcessResult r = run_shell(command);
  ASSERT_EQ(r.code, 0) << command << '\n' << r.err;
}

// The distinct frames the report names in its sites' stacks: how this machine symbolises.
std::string frames_of(const std::string &trace, const TempDir &dir) {
  const std::string json = dir / "report.json";
  cli({"report", trace, "--json"}, json);
  std::set<std::string> frames;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  for (const auto &site : j.value("sites", nlohmann::json::array()))
    for (const auto &frame : site.value("stack", std::vector<std::string>{})) frames.insert(frame);
  std::string out;
  for (const std::string &f : frames) out += f + '\n';
  return out;
}

// `made` equals the stored `name`, or (updating) replaces it.
void expect_golden(const fs::path &golden_dir, const std::string &name, const std::string &made) {
  const fs::path stored = golden_dir / name;
  const std::string made_bytes = read_file(made);
  if (updating()) {
    fs::create_directories(golden_dir);
    std::ofstream(stored, std::ios::binary) << made_bytes;
    return;
  }
  ASSERT_TRUE(fs::exists(stored)) << stored << " is missing (ADPROF_UPDATE_GOLDEN=1 stores it)";
  const std::string want = read_file(stored);
  EXPECT_FALSE(made_bytes.empty()) << made;
  if (made_bytes == want) return;
  // Where the two first differ, to read the failure without a diff tool.
  const auto diff = std::mismatch(made_bytes.begin(), made_bytes.end(), want.begin(), want.end());
  const size_t at = static_cast<size_t>(diff.first - made_bytes.begin());
  const size_t from = at > 80 ? at - 80 : 0;
  ADD_FAILURE() << name << " differs from " << stored << " at byte " << at << " (made "
                << made_bytes.size() << " bytes, stored " << want.size() << ")\nmade:   ..."
                << made_bytes.substr(from, 160) << "\nstored: ..." << want.substr(from, 160);
}

class ExportGolden : public testing::TestWithParam<Case> {};

TEST_P(ExportGolden, ExportsAreByteIdentical) {
  const Case &c = GetParam();
  const std::string trace = (kCorpus / (c.trace + ".adtrace")).string();
  const fs::path golden = kGolden / c.trace;
  TempDir dir;

  // The timeline: its CSV, SVG and terminal chart (not a terminal: no colours), whole and in a
  // window (the pass stops at the window's end).
  cli({"timeline", trace, "--csv", dir / "timeline.csv", "--svg", dir / "timeline.svg"},
      dir / "timeline.txt");
  cli({"timeline", trace, "--from", "0.001", "--to", "0.004", "--width", "60", "--height", "8",
       "--csv", dir / "window.csv"},
      dir / "window.txt");
  for (const char *name :
       {"timeline.csv", "timeline.svg", "timeline.txt", "window.csv", "window.txt"})
    expect_golden(golden, name, dir / name);

  // Perfetto, folded and the PyTorch snapshot alone, then Perfetto and folded from one command,
  // then all three.
  cli({"export", trace, "--perfetto", dir / "perfetto.json"});
  cli({"export", trace, "--folded", dir / "folded.txt"});
  cli({"export", trace, "--torch-snapshot", dir / "torch.pickle"});
  cli({"export", trace, "--perfetto", dir / "both.json", "--folded", dir / "both.txt"});
  cli({"export", trace, "--perfetto", dir / "all.json", "--folded", dir / "all.txt",
       "--torch-snapshot", dir / "all.pickle"});
  if (c.stacks) {
    const std::string frames = frames_of(trace, dir);
    const fs::path stored = golden / "symbols.txt";
    if (updating()) {
      std::ofstream(stored, std::ios::binary) << frames;
    } else if (frames != read_file(stored)) {
      GTEST_SKIP() << "this machine symbolises " << c.trace
                   << "'s stacks otherwise than the one that stored its exports (" << stored
                   << "); its Perfetto and folded exports are not compared here";
    }
  }
  expect_golden(golden, "perfetto.json", dir / "perfetto.json");
  expect_golden(golden, "folded.txt", dir / "folded.txt");
  expect_golden(golden, "torch.pickle", dir / "torch.pickle");
  if (updating()) return;
  expect_golden(golden, "perfetto.json", dir / "both.json");
  expect_golden(golden, "folded.txt", dir / "both.txt");
  expect_golden(golden, "perfetto.json", dir / "all.json");
  expect_golden(golden, "folded.txt", dir / "all.txt");
  expect_golden(golden, "torch.pickle", dir / "all.pickle");
}

// Valid traces of the corpus: ops, phases, labels and two threads (real-scopes), call stacks
// (real-v5-stacks), a trace ended by SIGABRT (incomplete, threads that allocate in storms), and a
// hand-packed one with a backward phase.
INSTANTIATE_TEST_SUITE_P(Corpus, ExportGolden,
                         testing::Values(Case{"real-scopes"}, Case{"real-v5-stacks", true},
                                         Case{"real-abort"}, Case{"packed-reference"}),
                         [](const testing::TestParamInfo<Case> &info) {
                           std::string name = info.param.trace;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A PyTorch snapshot exported as one again (`--torch-snapshot`), alone and riding on the pass
// of the other exports: devices, segments, an OOM, retags (annotate) and the peak's roles.
class SnapshotExportGolden : public testing::TestWithParam<std::string> {};

TEST_P(SnapshotExportGolden, SnapshotsAreByteIdentical) {
  const std::string name = GetParam();
  const std::string snapshot =
      (fs::path(SOURCE_DIR) / "tests/torch_snapshot/data" / (name + ".pickle")).string();
  const fs::path golden = kGolden / ("snapshot-" + name);
  TempDir dir;
  cli({"export", snapshot, "--torch-snapshot", dir / "torch.pickle"});
  expect_golden(golden, "torch.pickle", dir / "torch.pickle");
  if (updating()) return;
  cli({"export", snapshot, "--perfetto", dir / "all.json", "--folded", dir / "all.txt",
       "--torch-snapshot", dir / "all.pickle"});
  expect_golden(golden, "torch.pickle", dir / "all.pickle");
}

INSTANTIATE_TEST_SUITE_P(Snapshots, SnapshotExportGolden,
                         testing::Values("basic", "oom", "two_devices", "annotate", "categories",
                                         "segments_only", "expandable", "after", "peak_roles"));

}  // namespace
