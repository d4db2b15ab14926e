// Python frames in call stacks (`adprof run --stacks` on CPython; docs/STACKS.md, "Python
// frames"): a Python program with allocations from known lines (workloads/python_stacks: three
// functions in two files, one on a thread of its own, one in a module imported late) runs under
// each CPython found (Debian's 3.11, and pyenv's 3.12 and 3.13 where installed); the report must
// name each function, file and line with its exact count and size. An unsupported CPython says
// so once and keeps native frames; a program that replaces the profile function is not read
// through it any more.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/process.h"

using namespace adprof_test;

namespace {

const std::string kScripts = std::string(ADPROF_TEST_WORKLOADS) + "/python_stacks";

// The line of `# marker` in a script (1-based).
int line_of(const std::string &file, const std::string &marker) {
  const std::vector<std::string> lines = lines_of(read_file(file));
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("# " + marker) != std::string::npos) return static_cast<int>(i + 1);
  return -1;
}

// A CPython of version 3.`minor`: Debian's for 3.11, else pyenv's; empty when none is here.
std::string interpreter(int minor) {
  const std::string version = "3." + std::to_string(minor);
  if (minor == 11 && fs::exists("/usr/bin/python3.11")) return "/usr/bin/python3.11";
  const char *home = getenv("HOME");
  const fs::path root = getenv("PYENV_ROOT") ? fs::path(getenv("PYENV_ROOT"))
                                             : fs::path(home ? home : "/root") / ".pyenv";
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(root / "versions", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(version + ".", 0) == 0 && fs::exists(entry.path() / "bin" / "python3"))
      return (entry.path() / "bin" / "python3").string();
  }
  return "";
}

// The sites of `script` run by `python` under `adprof run --stacks`, and the run's stderr.
struct Recorded {
  nlohmann::json sites;
  std::string err;
};
Recorded record(const std::string &python, const std::string &script) {
  TempDir dir;
  const std::string trace = dir / "py.adtrace";
  Result run = run_cli({"run", "--stacks", "--no-report", "-o", trace, "--", python, script});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  Result report = run_cli({"report", "--json", "--top", "100000", trace});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  if (report.exit_code != 0) return {};
  return {nlohmann::json::parse(report.out)["sites"], run.err};
}

// The sites whose text is `site` exactly.
std::vector<nlohmann::json> sites_named(const nlohmann::json &sites, const std::string &site) {
  std::vector<nlohmann::json> out;
  for (const auto &s : sites)
    if (s["site"] == site) out.push_back(s);
  return out;
}

class PythonStacks : public ::testing::TestWithParam<int> {};

TEST_P(PythonStacks, ReportNamesEachFunctionFileAndLineWithExactCounts) {
  const std::string python = interpreter(GetParam());
  if (python.empty()) GTEST_SKIP() << "no CPython 3." << GetParam() << " here";
  const std::string main_py = kScripts + "/main.py", late_py = kScripts + "/late.py";
  const Recorded r = record(python, main_py);
  EXPECT_EQ(r.err.find("native frames only"), std::string::npos) << r.err;
  struct Expected {
    std::string function, file, marker;
    uint64_t count, size;
  };
  // bytes(N): one allocation of 33 + N bytes (the object's header and a NUL).
  const Expected expected[] = {{"alpha", main_py, "SITE_ALPHA", 100, 1033},
                               {"beta", main_py, "SITE_BETA", 50, 3033},
                               {"gamma", late_py, "SITE_GAMMA", 20, 7033}};
  for (const Expected &e : expected) {
    const int line = line_of(e.file, e.marker);
    ASSERT_GT(line, 0) << e.marker;
    const std::string site = e.function + " (" + e.file + ":" + std::to_string(line) + ")";
    const auto found = sites_named(r.sites, site);
    ASSERT_EQ(found.size(), 1u) << "no site " << site << " in " << r.sites.dump(1).substr(0, 4000);
    EXPECT_EQ(found[0]["allocations"].get<uint64_t>(), e.count) << site;
    EXPECT_EQ(found[0]["bytes"].get<uint64_t>(), e.count * e.size) << site;
    // Its stack: the native frames, then the Python frames from the site outward.
    const auto stack = found[0]["stack"].get<std::vector<std::string>>();
    const auto at = std::find(stack.begin(), stack.end(), site);
    ASSERT_NE(at, stack.end()) << found[0].dump(1);
    EXPECT_NE(at, stack.begin()) << "no native frame under the Python frames";
    if (e.function != "beta") {  // beta's thread starts in threading's frames
      const std::string caller = *(at + 1);
      EXPECT_EQ(caller.rfind("main (" + main_py + ":", 0), 0u) << caller;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CPython, PythonStacks, ::testing::Values(11, 12, 13),
                         [](const auto &info) { return "Python3_" + std::to_string(info.param); });

TEST(PythonStacksVersions, AnUnsupportedCPythonSaysSoOnceAndKeepsNativeFrames) {
  const std::string python = interpreter(10);
  if (python.empty()) GTEST_SKIP() << "no CPython 3.10 here";
  const Recorded r = record(python, kScripts + "/main.py");
  const std::string said = "adprof: Python 3.10 (cpython): call stacks show native frames only";
  const size_t first = r.err.find(said);
  EXPECT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(said, first + 1), std::string::npos) << "said more than once: " << r.err;
  ASSERT_FALSE(r.sites.empty());
  for (const auto &s : r.sites)
    EXPECT_EQ(s["site"].get<std::string>().find(".py:"), std::string::npos) << s["site"];
}

TEST(PythonStacksVersions, PythonMinusCSaysItsStacksAreNative) {
  TempDir dir;
  Result run = run_cli({"run", "--stacks", "--no-report", "-o", dir / "c.adtrace", "--",
                        "/usr/bin/python3", "-c", "x = bytes(5000)"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("python3 -c: call stacks show native frames only"), std::string::npos)
      << run.err;
}

// sys.setprofile replaces adprof's profile function: the allocations after it are recorded
// (with native frames: the shadow stack is no longer kept), those before keep their line.
TEST(PythonStacksVersions, AProgramThatReplacesTheProfileFunctionIsNotReadThroughIt) {
  const std::string script = kScripts + "/replaced.py";
  const Recorded r = record("/usr/bin/python3", script);
  const std::string site =
      "allocate (" + script + ":" + std::to_string(line_of(script, "SITE_ALLOCATE")) + ")";
  const auto found = sites_named(r.sites, site);
  ASSERT_EQ(found.size(), 1u) << r.sites.dump(1).substr(0, 4000);
  EXPECT_EQ(found[0]["allocations"].get<uint64_t>(), 10u);
  EXPECT_EQ(found[0]["bytes"].get<uint64_t>(), 10u * 2033u);
  // The allocations after it: not put on a Python line from the stale shadow stack (main's
  // frame at the call, which it would name without the check).
  const std::string stale = script + ":" + std::to_string(line_of(script, "SITE_AFTER_CALL"));
  for (const auto &s : r.sites)
    EXPECT_EQ(s["site"].get<std::string>().find(stale), std::string::npos) << s["site"];
}

}  // namespace
