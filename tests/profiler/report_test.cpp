// `adprof report` and the reader on bad input: missing, empty, foreign, truncated and damaged
// files give a clear one-line error (exit 2) or a report that says the trace was cut or
// damaged — never a crash. The same inputs are kept as a fuzz corpus (corpus/), which the
// reader also reads here.
#include "adprof/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/process.h"
#include "adprof/findings.h"
#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace {

using namespace adprof_test;

void expect_one_line_error(const Result &r, const std::string &what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(r.exited) << "adprof report crashed (signal " << r.signal << ")";
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("adprof: error: ", 0), 0u) << lines[0];
}

// Exit 2 with one line, or a report (exit 0) that warns about the cut or the damage.
void expect_error_or_warning(const Result &r, const std::string &what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(r.exited) << "adprof report crashed (signal " << r.signal << ")";
  if (r.exit_code == 2) {
    expect_one_line_error(r, what);
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("WARNING"), std::string::npos) << r.out;
}

// Reads every event and analyses; returns false when the reader refused the file.
bool read_through(const std::string &path, adprof::TraceEnd *end = nullptr,
                  adprof::ReadStats *stats = nullptr) {
  try {
    adprof::TraceReader reader(path);
    adprof::Replay replay;
    adprof::Event e;
    while (reader.next(e)) replay.apply(e);
    if (end) *end = reader.end();
    if (stats) *stats = reader.stats();
    reader.rewind();
    adprof::Report report = adprof::analyze(reader, path);
    (void)adprof::render_text(report);
    (void)adprof::to_json(report).dump();
    return true;
  } catch (const adprof::TraceError &) {
    return false;
  }
}

std::string small_trace(const TempDir &dir) {
  std::string trace = dir / "small.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_ATTRIBUTION, "scopes"};
  o.trace = trace;
  Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return trace;
}

TEST(ReportCli, MissingFile) {
  TempDir dir;
  expect_one_line_error(run_cli({"report", dir / "nope.adtrace"}), "missing");
}

TEST(ReportCli, EmptyFile) {
  TempDir dir;
  write_file(dir / "empty", "");
  expect_one_line_error(run_cli({"report", dir / "empty"}), "empty");
}

TEST(ReportCli, ForeignFiles) {
  TempDir dir;
  expect_one_line_error(run_cli({"report", "/bin/ls"}), "/bin/ls");
  expect_one_line_error(run_cli({"report", dir.path()}), "a directory");
  write_file(dir / "text", "ADPROFTR but not really a trace, just text long enough to be read\n");
  expect_one_line_error(run_cli({"report", dir / "text"}), "text with the magic");
  expect_one_line_error(run_cli({"report"}), "no argument");
}

TEST(ReportCli, TruncatedTraces) {
  TempDir dir;
  std::string trace = small_trace(dir);
  std::string bytes = read_file(trace);
  ASSERT_GT(bytes.size(), 200u);
  // The CLI at a few offsets: inside the header, just after it, inside the first chunk header,
  // inside the first payload, just before the end.
  for (size_t cut : {size_t{1}, size_t{63}, size_t{64}, size_t{80}, size_t{150}, bytes.size() / 2,
                     bytes.size() - 1}) {
    std::string path = dir / ("cut" + std::to_string(cut));
    write_file(path, bytes.substr(0, cut));
    Result r = run_cli({"report", path});
    expect_error_or_warning(r, "cut at " + std::to_string(cut));
    if (cut >= 64) {
      EXPECT_EQ(r.exit_code, 0) << "a trace cut after its header is reported";
      EXPECT_NE(r.out.find("cut"), std::string::npos) << r.out;
    }
  }
  // The reader at every offset.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::string path = dir / "every";
    write_file(path, bytes.substr(0, cut));
    adprof::TraceEnd end;
    bool read = read_through(path, &end);
    EXPECT_EQ(read, cut >= 64) << cut;
    if (read) {
      EXPECT_TRUE(end.cut) << cut;
    }
  }
}

TEST(ReportCli, FlippedBytes) {
  TempDir dir;
  std::string trace = small_trace(dir);
  std::string bytes = read_file(trace);
  const size_t chunk = 64;  // first chunk header
  uint32_t stored;
  memcpy(&stored, bytes.data() + chunk + 16, 4);
  // In the first chunk's payload: that chunk is skipped, the report says it was damaged.
  {
    std::string b = bytes;
    b[chunk + 40 + stored / 2] ^= 0x10;
    write_file(dir / "payload", b);
    Result r = run_cli({"report", dir / "payload"});
    expect_error_or_warning(r, "payload");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("damaged chunk"), std::string::npos) << r.out;
  }
  // In the first chunk's header: its magic, sizes, thread, flags, sequence.
  for (size_t at : {size_t{0}, size_t{4}, size_t{8}, size_t{12}, size_t{16}, size_t{20}, size_t{24},
                    size_t{32}, size_t{36}}) {
    std::string b = bytes;
    b[chunk + at] ^= 0x04;
    std::string path = dir / ("header" + std::to_string(at));
    write_file(path, b);
    Result r = run_cli({"report", path});
    expect_error_or_warning(r, "chunk header byte " + std::to_string(at));
    EXPECT_EQ(r.exit_code, 0);
  }
  // In the file header: refused with one line.
  {
    std::string b = bytes;
    b[20] ^= 0x01;
    write_file(dir / "fileheader", b);
    expect_one_line_error(run_cli({"report", dir / "fileheader"}), "file header");
  }
  // The reader with every byte flipped in turn, and every byte set to 0xFF.
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::string b = bytes;
      b[at] = static_cast<char>(b[at] ^ mask);
      write_file(dir / "flip", b);
      adprof::TraceEnd end;
      adprof::ReadStats stats;
      bool read = read_through(dir / "flip", &end, &stats);
      if (at >= 64) {
        EXPECT_TRUE(read) << at;
        // Nothing damaged goes unnoticed, except bytes the format does not check: the CRC
        // covers all chunk bytes but the magic, and a flipped magic ends the readable part.
        EXPECT_TRUE(end.cut || stats.corrupt_chunks > 0) << "flip at " << at << " unnoticed";
      } else if (at < 56 && at >= 8) {
        EXPECT_FALSE(read) << "damaged file header accepted, byte " << at;
      }
    }
  }
}

TEST(ReportCli, JsonIsValidAndRoundTrips) {
  TempDir dir;
  std::string trace = small_trace(dir);
  Result r = run_cli({"report", "--json", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  adprof::Report back = adprof::report_from_json(j);
  EXPECT_EQ(adprof::to_json(back), j);
  EXPECT_THROW(adprof::report_from_json(nlohmann::json::object()), std::runtime_error);
  EXPECT_THROW(adprof::report_from_json(nlohmann::json::parse(R"({"schema":"adprof.report",
      "schema_version": 99})")),
               std::runtime_error);
}

// The largest-buffers list counts every buffer live at the peak, not the ones it kept (before,
// a Python run's text said "top 10 of 100000", the cap, of 517,725 buffers).
TEST(ReportText, LargestBuffersCountEveryBufferLiveAtThePeak) {
  TempDir dir;
  std::string trace = small_trace(dir);
  adprof::Report all = adprof::analyze(trace);
  ASSERT_GT(all.live_at_peak.size(), 5u);
  adprof::AnalyzeOptions capped;
  capped.max_live_buffers = 5;
  adprof::Report kept = adprof::analyze(trace, capped);
  EXPECT_EQ(kept.live_at_peak.size(), 5u);
  const std::string line = "Largest buffers live at the peak (top 10 of " +
                           std::to_string(all.live_at_peak.size()) + "):";
  EXPECT_NE(adprof::render_text(kept, 10, true).find(line), std::string::npos)
      << adprof::render_text(kept, 10, true);
  EXPECT_NE(adprof::render_text(all, 10, true).find(line), std::string::npos);
  // Without --details the count of every buffer is left out ("top 10 of 349,104" is noise).
  EXPECT_NE(adprof::render_text(all).find("Largest buffers live at the peak (top 10):"),
            std::string::npos)
      << adprof::render_text(all);
}

// What a PyTorch user cannot act on is folded under --details (issue 35, item 6): the
// allocator's overhead, anonymous mappings, findings about the allocator or the engine. The
// gap between RSS and the peak is said in words, and the peak's step is named.
TEST(ReportText, DetailsFoldWhatTheUserCannotActOn) {
  adprof::Report r;
  r.peak = 200 << 20;
  r.peak_time = 2.5;
  r.peak_phase = "backward";
  r.peak_slack = 1 << 20;
  r.have_allocator_stats = true;
  r.jemalloc_allocated_at_peak = 201 << 20;
  r.jemalloc_resident_at_peak = 231 << 20;
  r.rss_at_peak = 400 << 20;
  r.max_rss = 410 << 20;
  r.mapped_peak = r.mapped_at_peak = 64 << 20;
  for (uint64_t i = 0; i < 5; ++i) r.steps.push_back({i, 1.0 * i, 1.0 * i + 1, 10, 100, 0});
  adprof::Finding act{"duplicate", "a duplicate to remove", "", "remove it", 1 << 20};
  adprof::Finding noise{"allocator_overhead", "held by the allocator", "", "fewer buffers", 0};
  noise.detail = true;
  r.findings = {act, noise};
  const std::string brief = adprof::render_text(r);
  for (const char *folded : {"Allocator overhead", "Anonymous mappings", "held by the allocator"})
    EXPECT_EQ(brief.find(folded), std::string::npos) << folded << " in\n" << brief;
  for (const char *shown :
       {"(backward phase of step 2; 5 steps recorded)", "1. a duplicate to remove",
        "(1 more about the allocator or the engine: --details)",
        "RSS at the peak 400.0 MiB, highest RSS 410.0 MiB: 200.0 MiB more than the peak",
        "30.0 MiB of it freed memory the allocator keeps for reuse"})
    EXPECT_NE(brief.find(shown), std::string::npos) << shown << " not in\n" << brief;
  const std::string full = adprof::render_text(r, 10, true);
  for (const char *shown : {"Allocator overhead", "Anonymous mappings", "held by the allocator"})
    EXPECT_NE(full.find(shown), std::string::npos) << shown << " not in\n" << full;
}

// Past --top findings of one kind, the text counts the rest with their bytes (a torchvision
// MobileNetV3 under SGD printed 198 findings, 190 of them duplicates); --details and the JSON
// keep every one. Other kinds are not held back by a crowded one.
TEST(ReportText, FindingsOfOneKindPastTopAreCounted) {
  adprof::Report r;
  r.peak = 200 << 20;
  for (int i = 0; i < 13; ++i)
    r.findings.push_back({"duplicate", "copy " + std::to_string(i), "", "remove it",
                          static_cast<uint64_t>(13 - i) << 20});
  r.findings.push_back({"growth", "a list that grows", "", "keep a number", 5 << 20});
  const std::string brief = adprof::render_text(r, 10, false);
  for (int i = 0; i < 10; ++i)
    EXPECT_NE(brief.find(". copy " + std::to_string(i) + "\n"), std::string::npos) << brief;
  for (int i = 10; i < 13; ++i)
    EXPECT_EQ(brief.find(". copy " + std::to_string(i) + "\n"), std::string::npos) << brief;
  EXPECT_NE(brief.find("11. a list that grows"), std::string::npos) << brief;
  EXPECT_NE(brief.find("(3 more duplicate findings, 6.0 MiB in all: --top, --details or --json)"),
            std::string::npos)
      << brief;
  const std::string wider = adprof::render_text(r, 13, false);
  EXPECT_NE(wider.find(". copy 12\n"), std::string::npos) << wider;
  EXPECT_EQ(wider.find("more duplicate findings"), std::string::npos) << wider;
  const std::string full = adprof::render_text(r, 10, true);
  EXPECT_NE(full.find("13. copy 12\n"), std::string::npos) << full;
  EXPECT_EQ(full.find("more duplicate findings"), std::string::npos) << full;
}

// A program nobody described (a plain C program: no op, step, role or label): one line says
// there were no AD events instead of four lines of 0 B, and the roles follow. A trace with AD
// events keeps the block.
TEST(ReportText, NoAdBlockForATraceWithoutAdEvents) {
  TempDir dir;
  const std::string plain = dir / "plain.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CNEW, ADPROF_TEST_CXX_NEW_LIB, "3", "4096"};
  o.trace = plain;
  ASSERT_EQ(run(o).exit_code, 0);
  Result text = run_cli({"report", plain});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("What AD added at the peak"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("forward caches"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  No AD events in this trace"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  By role at the peak:\n    foreign"), std::string::npos) << text.out;
  Result json = run_cli({"report", "--json", plain});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["trace"]["ad_events"].get<uint64_t>(), 0u);

  const std::string described = small_trace(dir);
  Result ad = run_cli({"report", described});
  ASSERT_EQ(ad.exit_code, 0) << ad.err;
  EXPECT_NE(ad.out.find("  What AD added at the peak:\n    forward caches"), std::string::npos)
      << ad.out;
  EXPECT_EQ(ad.out.find("No AD events"), std::string::npos) << ad.out;
  // A report JSON from before the count (no "ad_events"): shown as before.
  nlohmann::json old = nlohmann::json::parse(json.out);
  old["trace"].erase("ad_events");
  EXPECT_NE(adprof::render_text(adprof::report_from_json(old)).find("What AD added at the peak"),
            std::string::npos);
}

// A section with nothing in it says "none" on its heading's line, not a heading over nothing.
TEST(ReportText, EmptySectionsSayNone) {
  adprof::Report r;
  r.stacks = true;
  adprof::SiteSummary freed;  // a site whose blocks were all freed before the end
  freed.site = "f (f.c:1)";
  freed.allocations = 1;
  freed.bytes = 64;
  r.sites.push_back(freed);
  const std::string text = adprof::render_text(r);
  for (const char *line :
       {"Live at exit by allocation site: none\n", "Live at the peak by op: none\n",
        "Largest buffers live at the peak: none\n", "Ops that allocate most: none\n",
        "Allocation sites live at the peak, by role (call stacks): none\n",
        "Live at the peak by phase of allocation: none\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  EXPECT_EQ(text.find("(top 10):\nAllocation"), std::string::npos) << text;
  EXPECT_EQ(text.find("Live at exit by allocation site (top"), std::string::npos) << text;
}

// workloads/start_up.cpp with `args`, recorded into `trace`: its report's JSON.
nlohmann::json start_up_report(const std::string &trace, std::vector<std::string> args) {
  SpawnOptions o;
  o.argv = {ADPROF_TEST_START_UP};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.trace = trace;
  EXPECT_EQ(run(o).exit_code, 0);
  Result json = run_cli({"report", "--json", trace});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  return nlohmann::json::parse(json.out, nullptr, false);
}

// Foreign memory at the peak split by when it was made: before the first op or step (start-up)
// and after it (workloads/start_up.cpp: 1 MiB at start-up, 2 x 128 KiB by the steps).
TEST(ReportText, ForeignAtThePeakSplitIntoStartUpAndSteps) {
  TempDir dir;
  const std::string trace = dir / "start_up.adtrace";
  const nlohmann::json j = start_up_report(trace, {});
  const nlohmann::json &split = j["peak"]["foreign_split"];
  ASSERT_TRUE(split.is_object()) << j["peak"].dump(1);
  const uint64_t start_up = split["start_up"], after = split["after_start_up"];
  EXPECT_EQ(after, 2u * (128u << 10));
  // The program's 1 MiB and what the C and C++ runtimes allocated before main (a few KiB).
  EXPECT_GE(start_up, 1u << 20);
  EXPECT_LT(start_up, (1u << 20) + (64u << 10));
  EXPECT_EQ(start_up + after, j["peak"]["by_role"]["foreign"].get<uint64_t>());
  EXPECT_EQ(j["peak"]["by_role"]["activation"].get<uint64_t>(), 2u * (64u << 10));
  EXPECT_GT(split["start_up_end_s"].get<double>(), 0.0);
  EXPECT_EQ(adprof::to_json(adprof::report_from_json(j)), j);
  Result text = run_cli({"report", trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("256.0 KiB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("before the first op or step"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("      after start-up"), std::string::npos) << text.out;
  // Made on the program's first thread alone: no line by thread.
  EXPECT_TRUE(split["after_start_up_by_other_threads"].empty()) << split.dump(1);
  EXPECT_EQ(text.out.find("        on "), std::string::npos) << text.out;
  // No op or step: no split.
  const std::string plain = dir / "plain.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CNEW, ADPROF_TEST_CXX_NEW_LIB, "3", "4096"};
  o.trace = plain;
  ASSERT_EQ(run(o).exit_code, 0);
  EXPECT_FALSE(adprof::to_json(adprof::analyze(plain))["peak"].contains("foreign_split"));
}

// The foreign bytes made after start-up by the threads that made them, by name, when a thread
// other than the program's first made some (workloads/start_up.cpp pool: two threads named
// lib_pool, 96 KiB each, outside any op, as a library's workers allocate).
TEST(ReportText, ForeignAfterStartUpByTheThreadsThatMadeIt) {
  TempDir dir;
  const std::string trace = dir / "pool.adtrace";
  const nlohmann::json j = start_up_report(trace, {"pool"});
  const nlohmann::json &split = j["peak"]["foreign_split"];
  const nlohmann::json &threads = split["after_start_up_by_other_threads"];
  ASSERT_EQ(threads.size(), 1u) << split.dump(1);
  EXPECT_EQ(threads[0]["name"], "lib_pool");
  EXPECT_EQ(threads[0]["bytes"].get<uint64_t>(), 2u * (96u << 10));
  EXPECT_EQ(threads[0]["threads"].get<uint64_t>(), 2u);
  // The rest, on the first thread: the loader's 2 x 128 KiB and what creating the threads took.
  EXPECT_GE(split["after_start_up"].get<uint64_t>(), 2u * (96u << 10) + 2u * (128u << 10));
  EXPECT_EQ(adprof::to_json(adprof::report_from_json(j)), j);
  Result text = run_cli({"report", trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const size_t at = text.out.find("        on lib_pool");
  ASSERT_NE(at, std::string::npos) << text.out;
  const std::string line = text.out.substr(at, text.out.find('\n', at) - at);
  EXPECT_NE(line.find("192.0 KiB"), std::string::npos) << line;
  EXPECT_NE(line.find("2 threads"), std::string::npos) << line;
}

// Every file of the fuzz corpus: the reader and analyze() never crash, and the CLI gives an
// error line or a report.
TEST(ReportCli, Corpus) {
  size_t files = 0;
  for (auto &entry : fs::directory_iterator(ADPROF_TEST_CORPUS)) {
    if (!entry.is_regular_file()) continue;
    std::string path = entry.path().string();
    if (path.ends_with(".sh") || path.ends_with(".md")) continue;
    ++files;
    EXPECT_LT(entry.file_size(), 20u * 1024) << path;
    SCOPED_TRACE(path);
    bool read = read_through(path);
    Result r = run_cli({"report", path});
    ASSERT_TRUE(r.exited) << "adprof report crashed on " << path;
    if (read) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
    } else {
      expect_one_line_error(r, path);
    }
  }
  EXPECT_GE(files, 10u);
}

}  // namespace

// A role that grows from step to step is a finding naming the role and the label that grows
// (issue 35, item 3: outputs kept in a list raised the peak with no finding at all).
TEST(Findings, PerStepGrowthOfARoleNamesTheLabel) {
  adprof::Report r;
  r.peak = 300 << 20;
  r.engine.name = "pytorch";
  const uint64_t mib = 1 << 20;
  for (uint64_t i = 0; i < 5; ++i) {
    adprof::StepSummary s;
    s.step = i;
    s.start = 1.0 * i;
    s.end = 1.0 * i + 1;
    s.live_by_role[ADPROF_ROLE_PARAMETER] = 50 * mib;  // steady
    s.live_by_role[ADPROF_ROLE_ACTIVATION] = i * 16 * mib;
    r.steps.push_back(s);
    adprof::LiveBuffer kept;  // each step's output, kept
    kept.size = 16 * mib;
    kept.role = "activation";
    kept.label = "model.head";
    kept.alloc_time = 1.0 * i + 0.5;
    r.live_at_peak.push_back(kept);
  }
  adprof::LiveBuffer once;  // a large buffer of one step only
  once.size = 40 * mib;
  once.role = "activation";
  once.label = "model.lstm";
  once.alloc_time = 4.2;
  r.live_at_peak.push_back(once);
  const std::vector<adprof::Finding> found = adprof::find_findings(r);
  auto it = std::find_if(found.begin(), found.end(),
                         [](const adprof::Finding &f) { return f.kind == "growth"; });
  ASSERT_NE(it, found.end());
  EXPECT_EQ(it->bytes, 48 * mib);
  EXPECT_NE(it->message.find("activation memory grows every step: +16.0 MiB a step"),
            std::string::npos)
      << it->message;
  EXPECT_NE(it->message.find("in model.head"), std::string::npos) << it->message;
  EXPECT_NE(it->evidence.find("model.head: 5 buffers (80.0 MiB) live at the peak, made in 5"),
            std::string::npos)
      << it->evidence;
  // (in words for any engine: the analysis names none)
  EXPECT_NE(it->fix.find("keep a plain number"), std::string::npos) << it->fix;
  EXPECT_NE(it->fix.find("detached from the computation graph"), std::string::npos) << it->fix;
  // Steady roles, and a role that grew once and then stayed, are no finding.
  for (adprof::StepSummary &s : r.steps)
    s.live_by_role[ADPROF_ROLE_ACTIVATION] = s.step ? 64 * mib : 0;
  const std::vector<adprof::Finding> steady = adprof::find_findings(r);
  EXPECT_TRUE(std::none_of(steady.begin(), steady.end(),
                           [](const adprof::Finding &f) { return f.kind == "growth"; }));
}

// A duplicate's fix quotes the engine's index words only for a copy the index policy removes:
// a widened index (labelled so, or wider than its source), or any integer copy where the
// engine says its words remove those in their own width too (ad_protocol.h, "Index copies").
// A Hugging Face causal LM clones its i64 labels (the shift): that clone was told to "pass the
// int32 index as it is, without .long()", in a program that never widened an index.
TEST(Findings, IndexWordsOnlyForCopiesTheIndexPolicyRemoves) {
  adprof::Report r;
  r.peak = 100 << 20;
  r.engine.name = "engine";
  r.engine.protocol = ADPROF_AD_PROTOCOL_VERSION;
  adprof::ad::EnginePolicy &index = r.engine.policies[ADPROF_AD_POLICY_NO_INDEX_WIDENING];
  index.described = true;
  index.switch_on = "index words";
  auto fix_of = [&](const std::string &dtype, const std::string &source_dtype,
                    const std::string &label) {
    adprof::Report one = r;
    adprof::LiveBuffer copy;
    copy.size = 2048;
    copy.role = "duplicate";
    copy.dtype = dtype;
    copy.source = 0x1000;
    copy.source_label = "model.input";
    copy.source_dtype = source_dtype;
    copy.label = label;
    one.live_at_peak.push_back(copy);
    for (const adprof::Finding &f : adprof::find_findings(one))
      if (f.kind == "duplicate") return f.fix;
    return std::string("no finding");
  };
  const std::string words = "engine: index words";
  const std::string generic = "operate on the source directly instead of materialising a copy";
  EXPECT_EQ(fix_of("i64", "i32", "model"), words);                     // wider than its source
  EXPECT_EQ(fix_of("i64", "", ADPROF_AD_LABEL_INDEX_WIDENED), words);  // the engine's label
  EXPECT_EQ(fix_of("i64", "", "adcore.widened_index"), words);         // a legacy trace's label
  EXPECT_EQ(fix_of("i64", "i64", "model"), generic);                   // a clone in its own width
  EXPECT_EQ(fix_of("i64", "", "model"), generic);  // a source no longer live: not known wider
  EXPECT_EQ(fix_of("f32", "f32", "model"), generic);
  index.index_copies = ADPROF_AD_INDEX_COPIES_SAME_WIDTH;  // re-assembled indices: the words'
  EXPECT_EQ(fix_of("i64", "i64", "model"), words);
  EXPECT_EQ(fix_of("i32", "", "model"), words);
  EXPECT_EQ(fix_of("f32", "f32", "model"), generic);
}
