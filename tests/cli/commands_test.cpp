// The adprof CLI end to end on the seed samples: run, report, diff, check, timeline, export,
// exit codes and one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "../support/temp_dir.h"
#include "../support/terminal.h"
#include "adprof/report.h"
#include "adprof/role_style.h"

namespace fs = std::filesystem;

namespace {

using Result = adprof_test::ProcessResult;

using adprof_test::read_file;

class Cli : public ::testing::Test {
 protected:
  Result sh(const std::string &command) { return adprof_test::run_shell(command, dir_); }
  Result adprof(const std::string &args) { return sh(std::string(ADPROF_CLI) + " " + args); }

  // Records PROGRAM and returns its report (the program's own stdout stays out of the JSON).
  adprof::Report run_report(const std::string &name, const std::string &program) {
    std::string trace = record(name, program);
    Result r = adprof("report --json " + trace);
    EXPECT_EQ(r.code, 0) << r.err;
    return adprof::report_from_json(nlohmann::json::parse(r.out));
  }

  // Records a sample; returns the trace path.
  std::string record(const std::string &name, const std::string &program) {
    std::string trace = (dir_ / (name + ".adtrace")).string();
    Result r = adprof("run --no-report -o " + trace + " -- " + program);
    EXPECT_EQ(r.code, 0) << r.err;
    return trace;
  }

  adprof_test::TempDir tmp_;  // removed with everything in it when the test ends
  const fs::path dir_{tmp_.path()};
};

constexpr const char *kSmall = " --size 262144 --n 8";

// The what-if reads the trace a second time (once per scenario's plan), on a long PyTorch run
// for as long as the first reading: it says how far it is too, on a terminal. The charlm
// sample's 2.2 M events give a line every 2^20 events. Before, `report` went quiet after
// "reading the trace 100%" and `whatif` said nothing at all.
TEST_F(Cli, WhatIfsSecondReadingSaysHowFarItIs) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string trace = record("charlm", CHARLM);
  for (const char *command : {"report", "whatif"}) {
    const std::string shown = adprof_test::stderr_on_a_terminal({ADPROF_CLI, command, trace},
                                                                "ADPROF_PROGRESS_DELAY_MS=0");
    EXPECT_NE(shown.find("reading the trace"), std::string::npos) << command << ": " << shown;
    EXPECT_NE(shown.find("predicting each policy (what-if)"), std::string::npos)
        << command << ": " << shown;
  }
}

TEST_F(Cli, RunReportsAccumulationAndExitsWithProgramStatus) {
  ADPROF_SKIP_IF_SANITIZED();
  adprof::Report rep = run_report("naive", DENSENET " --naive --quiet" + std::string(kSmall));
  EXPECT_TRUE(rep.complete);
  // 8 layers: about (n+1)^2/4 = 20 contributions of 1 MiB each pending at the peak.
  uint64_t mib = 262144 * 4;
  EXPECT_GE(rep.peak_by_role[ADPROF_ROLE_ACCUMULATION], 16 * mib);
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_EQ(rep.findings[0].kind, "non_inplace_accumulation");
  EXPECT_EQ(rep.peak_phase, "backward");

  adprof::Report o = run_report("opt", DENSENET " --quiet" + std::string(kSmall));
  EXPECT_EQ(o.peak_by_role[ADPROF_ROLE_ACCUMULATION], 0u);
  EXPECT_LT(o.peak, rep.peak * 3 / 5);

  EXPECT_EQ(adprof("run -o three.adtrace -- sh -c 'exit 3'").code, 3);
  EXPECT_EQ(adprof("run -o killed.adtrace -- sh -c 'kill -9 $$'").code, 128 + 9);
  Result missing = adprof("run -o m.adtrace -- /nonexistent/program");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("cannot run '/nonexistent/program'"), std::string::npos)
      << missing.err;
  Result exists = adprof("run -o three.adtrace -- true");
  EXPECT_EQ(exists.code, 2);
  EXPECT_NE(exists.err.find("already exists"), std::string::npos);
}

TEST_F(Cli, DiffAndCheckGateRegressions) {
  ADPROF_SKIP_IF_SANITIZED();
  std::string naive = record("naive", DENSENET " --naive --quiet" + std::string(kSmall));
  std::string opt = record("opt", DENSENET " --quiet" + std::string(kSmall));
  // The naive engine as the "new" run regresses the peak; as the base it does not.
  Result d = adprof("diff " + opt + " " + naive + " --fail-if 'peak > +5%'");
  EXPECT_EQ(d.code, 1) << d.out << d.err;
  EXPECT_NE(d.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(adprof("diff " + naive + " " + opt + " --fail-if 'peak > +5%'").code, 0);
  Result md = adprof("diff " + opt + " " + naive + " --markdown --fail-if 'role.accumulation > 0'");
  EXPECT_EQ(md.code, 1);
  EXPECT_NE(md.out.find("| `peak` |"), std::string::npos) << md.out;
  // A report JSON is as good as a trace on either side.
  Result base_json = adprof("report --json " + opt);
  ASSERT_EQ(base_json.code, 0);
  std::ofstream(dir_ / "base.json") << base_json.out;
  EXPECT_EQ(adprof("diff base.json " + opt + " --fail-if 'peak > +1%'").code, 0);
  Result dj = adprof("diff base.json " + naive + " --json --fail-if 'peak > +1%'");
  EXPECT_EQ(dj.code, 1);
  EXPECT_TRUE(nlohmann::json::parse(dj.out)["failed"].get<bool>());

  EXPECT_EQ(adprof("check " + naive + " --max-role accumulation=0").code, 1);
  EXPECT_EQ(adprof("check " + opt + " --max-role accumulation=0 --max-role duplicate=0").code, 0);
  EXPECT_EQ(adprof("check " + opt + " --max-peak 1KiB").code, 1);
  EXPECT_EQ(adprof("check " + opt + " --max-peak 1GiB").code, 0);
  EXPECT_EQ(adprof("check " + opt + " --max-role nosuchrole=0").code, 2);
  EXPECT_EQ(adprof("check " + opt + " --fail-if 'peak > +5%'").code, 2);
  EXPECT_EQ(adprof("check " + opt).code, 2);
  EXPECT_EQ(adprof("diff " + opt + " " + naive + " --fail-if 'bogus > 1'").code, 2);
  // A device budget on a run on the host has nothing to weigh: an input error naming the run
  // (before, its device peak read 0 and the budget held), in check and in diff, a report JSON
  // as a trace.
  for (const std::string device_gate :
       {" --max-device-peak 1GiB", " --max-device-role adjoint=1GiB",
        " --fail-if 'device.ooms > 0'"}) {
    SCOPED_TRACE(device_gate);
    Result no_device = adprof("check " + opt + device_gate);
    EXPECT_EQ(no_device.code, 2) << no_device.out << no_device.err;
    EXPECT_NE(no_device.err.find("weighs device memory, and '" + opt + "' recorded none"),
              std::string::npos)
        << no_device.err;
    EXPECT_EQ(no_device.out, "");
  }
  Result no_device_diff = adprof("diff base.json " + naive + " --fail-if 'device.peak > +5%'");
  EXPECT_EQ(no_device_diff.code, 2) << no_device_diff.out;
  EXPECT_NE(no_device_diff.err.find("and the base run 'base.json' recorded none"),
            std::string::npos)
      << no_device_diff.err;
}

TEST_F(Cli, GatherNaiveShowsTheWidenedIndexCopy) {
  ADPROF_SKIP_IF_SANITIZED();
  adprof::Report rep = run_report("g", GATHER " --naive --quiet");
  const uint64_t widened = (1u << 21) * 3 * 8;  // 2^21 x 3 i64 indices
  EXPECT_EQ(rep.peak_by_role[ADPROF_ROLE_DUPLICATE], widened);
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_EQ(rep.findings[0].kind, "duplicate");
  EXPECT_EQ(rep.findings[0].bytes, widened);
  EXPECT_NE(rep.findings[0].message.find("i64 copy"), std::string::npos) << rep.findings[0].message;
  EXPECT_EQ(run_report("g2", GATHER " --quiet").peak_by_role[ADPROF_ROLE_DUPLICATE], 0u);
}

TEST_F(Cli, TimelineAndExports) {
  ADPROF_SKIP_IF_SANITIZED();
  std::string trace = record("t", DENSENET " --naive --quiet" + std::string(kSmall));
  Result t = adprof("timeline " + trace + " --csv t.csv --svg t.svg --width 60 --height 10");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("v peak"), std::string::npos);
  EXPECT_NE(t.out.find('S'), std::string::npos);  // accumulation glyph
  std::string csv = read_file(dir_ / "t.csv");
  EXPECT_EQ(csv.rfind("time_s,host,role.foreign", 0), 0u);
  EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 10);
  EXPECT_EQ(read_file(dir_ / "t.svg").rfind("<svg", 0), 0u);
  {
    // The GUI's colour per role and its stacking order (role_style.h): forward caches were
    // orange in the SVG and green in the GUI, the roles stacked in opposite orders.
    const std::string svg = read_file(dir_ / "t.svg");
    const size_t parameter = svg.find("<title>parameter</title>");
    const size_t cache = svg.find("<title>forward_cache</title>");
    const size_t foreign = svg.find("<title>foreign</title>");
    ASSERT_NE(cache, std::string::npos) << svg;
    EXPECT_LT(parameter, cache);
    EXPECT_LT(cache, foreign);
    const size_t fill = svg.rfind("fill=\"", cache);
    EXPECT_EQ(svg.substr(fill, 13), "fill=\"" + adprof::role_hex(ADPROF_ROLE_FORWARD_CACHE))
        << svg.substr(fill, 40);
    EXPECT_EQ(adprof::role_hex(ADPROF_ROLE_FORWARD_CACHE), "#117733");
  }

  ASSERT_EQ(adprof("export " + trace + " --perfetto p.json --folded f.txt").code, 0);
  auto p = nlohmann::json::parse(read_file(dir_ / "p.json"));
  int begins = 0, ends = 0, counters = 0;
  for (const auto &e : p["traceEvents"]) {
    std::string ph = e["ph"];
    begins += ph == "B";
    ends += ph == "E";
    counters += ph == "C";
  }
  EXPECT_GT(begins, 0);
  EXPECT_EQ(begins, ends);
  EXPECT_GT(counters, 0);
  std::string folded = read_file(dir_ / "f.txt");
  EXPECT_NE(folded.find("backward;"), std::string::npos) << folded;
  EXPECT_NE(folded.find(";accumulation"), std::string::npos) << folded;
}

// An op named with 1,500 bytes of quotes and backslashes: the Perfetto export formatted names
// into a 512-byte buffer, so a long label was cut mid-string and the file was no JSON.
TEST_F(Cli, PerfettoKeepsLongOpNamesWhole) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string trace = record("long", std::string(ENGINE_STEPS_WORKLOAD) + " longname");
  ASSERT_EQ(adprof("export " + trace + " --perfetto long.json").code, 0);
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "op\"name\\" + std::to_string(1000 + i);
  const auto p = nlohmann::json::parse(read_file(dir_ / "long.json"), nullptr, false);
  ASSERT_FALSE(p.is_discarded()) << "the export is no JSON";
  int named = 0;
  for (const auto &e : p["traceEvents"])
    if (e["ph"] == "B" && e["pid"] == 1) {
      EXPECT_EQ(e["name"].get<std::string>().rfind(expected, 0), 0u) << e["name"];
      ++named;
    }
  EXPECT_EQ(named, 4);  // one op a step
}

// A name over several lines (a fix's code, as the PyTorch integration names them) printed raw
// broke `dump`'s one line per event: the models test, which finds the peak's event by its line,
// read the event two lines before it and, at an op's edge, the wrong op.
TEST_F(Cli, DumpPrintsOneLinePerEventWhateverTheNames) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string trace = record("ml", std::string(ENGINE_STEPS_WORKLOAD) + " multiline");
  Result r = adprof("dump " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::regex event_line(R"(^ *[0-9]+\.[0-9]{6} t[0-9]+ +[a-z_]+( .*)?$)");
  std::istringstream lines(r.out);
  std::string line;
  int events = 0, op_begins = 0;
  while (std::getline(lines, line)) {
    EXPECT_TRUE(std::regex_match(line, event_line)) << "not an event's line: " << line;
    ++events;
    if (line.find(" op_begin ") != std::string::npos) {
      EXPECT_NE(line.find(R"(for b in \"blocks\":\n\tb.forward = wrap(b)\nthen \\ done#)"),
                std::string::npos)
          << line;
      ++op_begins;
    }
  }
  EXPECT_EQ(op_begins, 4);  // one op a step
  EXPECT_NE(r.out.find(R"("for b in \"blocks\":\n\tb.forward = wrap(b)\nthen \\ done")"),
            std::string::npos)
      << "the name event, quoted and escaped";
  // --limit N prints the first N events: N lines.
  Result limited = adprof("dump --limit 7 " + trace);
  EXPECT_EQ(std::count(limited.out.begin(), limited.out.end(), '\n'), 7) << limited.out;
  EXPECT_GT(events, 7);
}

// --from, --limit and --types select events by the numbers of the whole dump (the numbers
// report --json gives its peak), so a script reads a few lines where it read millions: the
// models test finds the op open at the peak from the op scopes and the peak's own line.
TEST_F(Cli, DumpSelectsEventsByNumberAndType) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string trace = record("sel", std::string(ENGINE_STEPS_WORKLOAD));
  Result all = adprof("dump " + trace);
  ASSERT_EQ(all.code, 0) << all.err;
  std::vector<std::string> whole;
  std::istringstream lines(all.out);
  for (std::string line; std::getline(lines, line);) whole.push_back(line);
  ASSERT_GT(whole.size(), 20u);

  Result numbered = adprof("dump --numbered " + trace);
  std::istringstream numbered_lines(numbered.out);
  size_t n = 0;
  for (std::string line; std::getline(numbered_lines, line); ++n) {
    ASSERT_LT(n, whole.size());
    EXPECT_EQ(line, std::to_string(n + 1) + " " + whole[n]);
  }
  EXPECT_EQ(n, whole.size());

  // One event: --from N --limit N.
  Result one = adprof("dump --from 12 --limit 12 " + trace);
  EXPECT_EQ(one.out, whole[11] + "\n");

  // Op scopes up to event 40, numbered as in the whole dump.
  Result ops = adprof("dump --numbered --types op_end,op_begin --limit 40 " + trace);
  ASSERT_EQ(ops.code, 0) << ops.err;
  std::string expected;
  for (size_t i = 0; i < 40; ++i)
    if (whole[i].find(" op_begin ") != std::string::npos ||
        whole[i].find(" op_end") != std::string::npos)
      expected += std::to_string(i + 1) + " " + whole[i] + "\n";
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(ops.out, expected);
}

TEST_F(Cli, HashContentsFindsByteIdenticalBuffers) {
  ADPROF_SKIP_IF_SANITIZED();
  // densenet's x1 is x0 summed alone: the same bytes in a second buffer.
  adprof::Report r =
      run_report("hc", DENSENET " --hash-contents --no-reuse-tape --quiet" + std::string(kSmall));
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [](const adprof::Finding &f) { return f.kind == "content_duplicate"; });
  ASSERT_NE(it, r.findings.end());
  EXPECT_EQ(it->bytes, 262144u * 4);
  EXPECT_NE(it->evidence.find("densenet.x0"), std::string::npos) << it->evidence;
  EXPECT_NE(it->evidence.find("densenet.x1"), std::string::npos) << it->evidence;
  // Without hashes there is nothing to compare.
  adprof::Report plain =
      run_report("plain", DENSENET " --no-reuse-tape --quiet" + std::string(kSmall));
  EXPECT_TRUE(std::none_of(plain.findings.begin(), plain.findings.end(),
                           [](const adprof::Finding &f) { return f.kind == "content_duplicate"; }));
}

TEST_F(Cli, DeviceOutOfMemoryIsReported) {
  adprof::Report r = run_report("oom", OOM_WORKLOAD);
  EXPECT_EQ(r.device_ooms, 1u);
  EXPECT_EQ(r.oom_requested, 64u << 20);
  EXPECT_EQ(r.oom_limit, 100u << 20);
  EXPECT_EQ(r.oom_by_role[ADPROF_ROLE_ACTIVATION], 60u << 20);
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [](const adprof::Finding &f) { return f.kind == "device_oom"; });
  ASSERT_NE(it, r.findings.end());
  EXPECT_NE(it->message.find("ran out of memory asking for 64.0 MiB"), std::string::npos)
      << it->message;
  EXPECT_NE(it->evidence.find("activation 60.0 MiB adjoint 30.0 MiB"), std::string::npos)
      << it->evidence;
  EXPECT_EQ(
      adprof("check " + (dir_ / "oom.adtrace").string() + " --fail-if 'device.ooms > 0'").code, 1);
  // The text report gives the device peak by role (before: the peak alone).
  const auto text = adprof("report " + (dir_ / "oom.adtrace").string());
  EXPECT_NE(text.out.find("Device: peak 90.0 MiB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("reserved peak 96.0 MiB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("at the device peak: activation 60.0 MiB (66.7%), adjoint 30.0 MiB "
                          "(33.3%)"),
            std::string::npos)
      << text.out;
}

// Allocations repeated every step: the fix is the engine's own way to a reusable tape when it
// describes one, and says it has none when it does not (before: "an engine with a reusable
// tape", advice to change engines, given to PyTorch users).
TEST_F(Cli, AllocationsPerStepFixFollowsTheEnginesPolicies) {
  for (const bool tape : {false, true}) {
    const adprof::Report r = run_report(tape ? "tape" : "none",
                                        std::string(ENGINE_STEPS_WORKLOAD) + (tape ? " tape" : ""));
    auto it = std::find_if(r.findings.begin(), r.findings.end(), [](const adprof::Finding &f) {
      return f.kind == "allocations_per_step";
    });
    ASSERT_NE(it, r.findings.end()) << "no allocations_per_step finding";
    EXPECT_NE(it->message.find("8 heap allocations per step"), std::string::npos) << it->message;
    if (tape) {
      EXPECT_NE(it->fix.find("(tinyengine: export TINY_TAPE=1)"), std::string::npos) << it->fix;
    } else {
      // Nothing the program's author can do: said plainly, and folded under --details.
      EXPECT_NE(it->fix.find("nothing to change in the program: tinyengine allocates anew"),
                std::string::npos)
          << it->fix;
      EXPECT_TRUE(it->detail);
      EXPECT_EQ(it->fix.find("an engine with"), std::string::npos) << it->fix;
    }
  }
}

TEST_F(Cli, UsageAndInputErrors) {
  EXPECT_EQ(adprof("").code, 2);
  Result help = adprof("--help");
  EXPECT_EQ(help.code, 0);
  // A PyTorch user reads the top help first: it names run --torch, and says where man is.
  EXPECT_NE(help.out.find("run --torch"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("Once installed"), std::string::npos) << help.out;
  for (const char *cmd : {"run", "report", "diff", "check", "timeline", "export", "dump"})
    EXPECT_EQ(adprof(std::string(cmd) + " --help").code, 0) << cmd;
  Result unknown = adprof("frobnicate");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;
  Result flag = adprof("report --bogus x");
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.err.find("unrecognised option"), std::string::npos);
  for (const std::string &bad : {std::string("/nonexistent.adtrace"), std::string("/bin/sh")}) {
    Result r = adprof("report " + bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  std::ofstream(dir_ / "empty.adtrace").close();
  Result empty = adprof("report empty.adtrace");
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.err.find("empty"), std::string::npos);
  std::ofstream(dir_ / "bad.json") << "{\"schema\": \"something else\"}";
  EXPECT_EQ(adprof("diff bad.json bad.json").code, 2);
}

TEST_F(Cli, CiExampleFromTheDocsRuns) {
  ADPROF_SKIP_IF_SANITIZED();
  // docs/CI.md shows this script; the test runs exactly it.
  Result r = sh("bash " SOURCE_DIR "/docs/ci-example.sh " + std::string(ADPROF_CLI) + " " DENSENET);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("memory gates pass"), std::string::npos) << r.out;
  Result regression = sh("ADPROF_CI_EXAMPLE_REGRESS=1 bash " SOURCE_DIR "/docs/ci-example.sh " +
                         std::string(ADPROF_CLI) + " " DENSENET);
  EXPECT_EQ(regression.code, 1) << regression.out << regression.err;
}

}  // namespace
