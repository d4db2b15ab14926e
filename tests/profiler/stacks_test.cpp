// Call stacks (`adprof run --stacks`): the evidence test. A program with allocations from known
// call sites (workloads/sites.cpp: a function of its own, an always-inlined function, a function
// of a library dlopen'd and dlclose'd before exit) runs under `adprof run --stacks`; the report
// must name exactly those sites, with file:line, and their exact counts and sizes.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "../support/terminal.h"
#include "adprof/call_stacks.h"
#include "adprof/compare.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

using namespace adprof_test;

namespace {

// The line of `marker` in a workload source file (1-based).
int line_of(const std::string &file, const std::string &marker) {
  const std::vector<std::string> lines = lines_of(read_file(file));
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("// " + marker) != std::string::npos &&
        lines[i].find("// " + marker + "_") == std::string::npos)
      return static_cast<int>(i + 1);
  return -1;
}

bool ends_with(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const nlohmann::json *find_site(const nlohmann::json &sites, const std::string &prefix) {
  const nlohmann::json *found = nullptr;
  for (const auto &s : sites)
    if (s["site"].get<std::string>().rfind(prefix, 0) == 0) {
      if (found) return nullptr;  // two sites with the same function: not what was made
      found = &s;
    }
  return found;
}

class StacksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_ / "sites.adtrace";
    Result run = run_cli({"run", "--stacks", "--no-report", "-o", trace_, "--", ADPROF_TEST_SITES,
                          ADPROF_TEST_SITES_LIB});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    Result report = run_cli({"report", "--json", "--full", trace_});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    json_ = nlohmann::json::parse(report.out);
  }

  TempDir dir_;
  std::string trace_;
  nlohmann::json json_;
  const std::string source_ = std::string(ADPROF_TEST_WORKLOADS) + "/sites.cpp";
  const std::string lib_source_ = std::string(ADPROF_TEST_WORKLOADS) + "/sites_lib.cpp";
};

TEST_F(StacksTest, ReportNamesExactlyTheProgramsSitesWithFileLineAndCounts) {
  ASSERT_TRUE(json_.contains("sites")) << "a trace recorded with --stacks has sites";
  const nlohmann::json &sites = json_["sites"];
  struct Expected {
    std::string function, file;
    int line;
    uint64_t count, size;
  };
  const Expected expected[] = {
      {"site_direct(int)", source_, line_of(source_, "SITE_DIRECT"), 100, 48},
      {"site_inlined(int)", source_, line_of(source_, "SITE_INLINED"), 30, 200},
      {"lib_allocate", lib_source_, line_of(lib_source_, "SITE_LIB"), 20, 1000},
      {"site_temporary(int)", source_, line_of(source_, "SITE_TEMPORARY"), 40, 64},
  };
  for (const Expected &e : expected) {
    ASSERT_GT(e.line, 0) << e.function;
    const nlohmann::json *s = find_site(sites, e.function + " (");
    ASSERT_NE(s, nullptr) << "no single site for " << e.function << " in " << sites.dump(1);
    const std::string site = (*s)["site"];
    EXPECT_TRUE(ends_with(
        site, "/" + fs::path(e.file).filename().string() + ":" + std::to_string(e.line) + ")"))
        << site << " (expected line " << e.line << ")";
    EXPECT_EQ((*s)["allocations"].get<uint64_t>(), e.count) << site;
    EXPECT_EQ((*s)["bytes"].get<uint64_t>(), e.count * e.size) << site;
  }
  // Exactly those sites in the program's own sources: nothing else is attributed to them.
  int in_sources = 0;
  for (const auto &s : sites) {
    const std::string site = s["site"];
    if (site.find("/sites.cpp:") != std::string::npos ||
        site.find("/sites_lib.cpp:") != std::string::npos)
      ++in_sources;
  }
  EXPECT_EQ(in_sources, 4) << sites.dump(1);

  // The inlined site is followed by the function it was inlined into, at the call's line.
  const nlohmann::json *inlined = find_site(sites, "site_inlined(int) (");
  ASSERT_NE(inlined, nullptr);
  const auto stack = (*inlined)["stack"].get<std::vector<std::string>>();
  ASSERT_GE(stack.size(), 3u);
  EXPECT_TRUE(ends_with(stack[1],
                        "sites.cpp:" + std::to_string(line_of(source_, "SITE_INLINED_CALL")) + ")"))
      << stack[1];
  EXPECT_EQ(stack[1].rfind("run_inlined(int) (", 0), 0u) << stack[1];
  EXPECT_EQ(stack[2].rfind("main (", 0), 0u) << stack[2];

  // Live at exit: site_direct's blocks only, of the three.
  EXPECT_EQ((*find_site(sites, "site_direct(int) ("))["exit_blocks"].get<uint64_t>(), 100u);
  EXPECT_EQ((*find_site(sites, "site_direct(int) ("))["exit_bytes"].get<uint64_t>(), 4800u);
  EXPECT_EQ((*inlined)["exit_blocks"].get<uint64_t>(), 0u);
  EXPECT_EQ((*find_site(sites, "lib_allocate ("))["exit_blocks"].get<uint64_t>(), 0u);

  // Temporaries outside any op (heaptrack's definition): a block its thread frees before it
  // allocates anything else. Each of site_temporary's; of the others, the last block of the
  // ones freed in a row (site_inlined's, lib_allocate's).
  const std::pair<const char *, uint64_t> temporaries[] = {{"site_temporary(int) (", 40},
                                                           {"site_inlined(int) (", 1},
                                                           {"lib_allocate (", 1},
                                                           {"site_direct(int) (", 0}};
  for (const auto &[function, count] : temporaries) {
    const nlohmann::json *s = find_site(sites, function);
    ASSERT_NE(s, nullptr) << function;
    EXPECT_EQ((*s)["temporaries"].get<uint64_t>(), count) << function;
  }
  EXPECT_EQ((*find_site(sites, "site_temporary(int) ("))["temporary_bytes"].get<uint64_t>(),
            40u * 64u);

  // The JSON round-trips, and the text report names the sites too.
  adprof::JsonOptions full;  // json_ is the --full JSON
  full.full = true;
  EXPECT_EQ(adprof::to_json(adprof::report_from_json(json_), full), json_);
  Result text = run_cli({"report", trace_});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Allocation sites by allocations"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Allocation sites making the most temporaries"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("site_direct(int) ("), std::string::npos) << text.out;
}

// The trace says which objects were mapped, the dlclose'd library included (with its unload),
// so the stacks symbolise after the program and its library are gone from memory.
TEST_F(StacksTest, TraceRecordsTheLibraryLoadAndItsUnload) {
  adprof::TraceReader reader(trace_);
  EXPECT_TRUE(reader.header().stacks());
  EXPECT_GE(reader.header().version, 4u);  // call stacks: version 4 on
  adprof::Event e;
  bool mapped = false, unmapped = false, stack_before_use = true;
  uint64_t lib_bias = 0, lib_start = 0;
  std::set<uint32_t> defined;
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kMapping &&
        adprof::mapping_path(e) == ADPROF_TEST_SITES_LIB) {
      mapped = true;
      lib_bias = e.addr;
      lib_start = e.a;
      EXPECT_FALSE(adprof::mapping_build_id(e).empty()) << "the linker gives a build-id";
    } else if (e.type == adprof::format::EventType::kUnmapping && mapped && e.addr == lib_bias &&
               e.a == lib_start) {
      unmapped = true;
    } else if (e.type == adprof::format::EventType::kStack) {
      defined.insert(static_cast<uint32_t>(e.a));
    } else if (e.type == adprof::format::EventType::kAlloc && e.stack != 0 &&
               !defined.count(e.stack)) {
      stack_before_use = false;
    }
  }
  EXPECT_TRUE(mapped);
  EXPECT_TRUE(unmapped);
  EXPECT_TRUE(stack_before_use) << "every stack is defined before an allocation uses it";
}

// Without --stacks, nothing of it: the trace has no stacks and the report no sites.
// Long work says how far it is on a terminal (here from its first moment, the delay of one
// second set to 0), and nothing when standard error is not one.
TEST_F(StacksTest, ReportSaysHowFarItIsOnATerminalOnly) {
  const std::string shown = adprof_test::stderr_on_a_terminal({cli_path(), "report", trace_},
                                                              "ADPROF_PROGRESS_DELAY_MS=0");
  EXPECT_NE(shown.find("reading the trace"), std::string::npos) << shown;
  EXPECT_NE(shown.find("symbolising stacks 100%"), std::string::npos) << shown;
  SpawnOptions piped;
  piped.argv = {cli_path(), "report", trace_};
  piped.env = {{"ADPROF_PROGRESS_DELAY_MS", "0"}};
  const Result r = run(piped);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "stderr not a terminal: no progress";
}

TEST(Stacks, OffWithoutTheOption) {
  TempDir dir;
  const std::string trace = dir / "plain.adtrace";
  Result run =
      run_cli({"run", "--no-report", "-o", trace, "--", ADPROF_TEST_SITES, ADPROF_TEST_SITES_LIB});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  adprof::TraceReader reader(trace);
  EXPECT_FALSE(reader.header().stacks());
  Result report = run_cli({"report", "--json", trace});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_FALSE(nlohmann::json::parse(report.out).contains("sites"));
}

// A module that is gone degrades to module+offset; an undefined id to "(unknown stack)".
// Symbols as their language writes them: C++ as before; Rust's v0 names (`_R...`, std's own
// since Rust 1.79 or so; before: shown mangled) and legacy names without their hash (before:
// "...::h914a6bee378ed6fc"); anything else as it is.
TEST(Stacks, CxxAndRustNamesAreDemangled) {
  EXPECT_EQ(adprof::demangle_symbol("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)");
  EXPECT_EQ(adprof::demangle_symbol("_RNvNtNtNtNtNtCsjrHSEGnQ3l9_3std3sys3pal4unix14stack_overflow"
                                    "11thread_info16set_current_info"),
            "std::sys::pal::unix::stack_overflow::thread_info::set_current_info");
  EXPECT_EQ(adprof::demangle_symbol("_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h914a6be"
                                    "e378ed6fcE"),
            "std::sys::backtrace::__rust_begin_short_backtrace");
  EXPECT_EQ(adprof::demangle_symbol("_ZN5alloc7raw_vec20RawVecInner$LT$A$GT$11finish_grow17h1da5c3"
                                    "929bbd3b48E"),
            "alloc::raw_vec::RawVecInner<A>::finish_grow");
  EXPECT_EQ(adprof::demangle_symbol("malloc"), "malloc");
  EXPECT_EQ(adprof::demangle_symbol("_Rnot_a_symbol"), "_Rnot_a_symbol");
  // Not a hash (not hex): a C++ name whose last part is kept.
  EXPECT_EQ(adprof::demangle_symbol("_ZN3foo17hzzzzzzzzzzzzzzzzE"), "foo::hzzzzzzzzzzzzzzzz");
}

TEST(Stacks, MissingFilesDegradeToModuleAndOffset) {
  adprof::CallStacks stacks;
  std::string text = std::string("/nonexistent/libgone.so") + '\0';
  adprof::Event mapping;
  mapping.type = adprof::format::EventType::kMapping;
  mapping.addr = 0x7f0000000000;
  mapping.a = 0x7f0000000000;
  mapping.b = 0x7f0000100000;
  mapping.set_text(text);
  ASSERT_TRUE(stacks.on_event(mapping));
  std::vector<uint64_t> frames = {0x7f0000001234, 0x1000};
  adprof::Event stack;
  stack.type = adprof::format::EventType::kStack;
  stack.a = 7;
  stack.set_values(frames);
  ASSERT_TRUE(stacks.on_event(stack));
  const auto &f = stacks.frames(7);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].text(), "libgone.so+0x1234");
  EXPECT_EQ(f[1].text(), "0x1000");
  EXPECT_EQ(stacks.site(8), "(unknown stack)");
}

}  // namespace

namespace {

// `adprof check` and `adprof diff` by site: a site's metrics gate like any other, with the
// site's name (parentheses, and in C++ names '<' and '>') as it is in the report.
TEST_F(StacksTest, CheckAndDiffBySite) {
  const nlohmann::json *direct = find_site(json_["sites"], "site_direct(int) (");
  ASSERT_NE(direct, nullptr);
  const std::string site = (*direct)["site"];
  Result pass = run_cli({"check", trace_, "--fail-if", "site_allocations." + site + " > 100"});
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  Result fail = run_cli({"check", trace_, "--fail-if", "site_allocations." + site + " >= 100"});
  EXPECT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  EXPECT_NE(fail.out.find("site_allocations." + site + ": 100"), std::string::npos) << fail.out;
  // A template's name: the gate's operator is the last one in it.
  const adprof::Gate g = adprof::parse_gate("site.std::vector<int>::push_back(int) (v.h:3) > 1MiB");
  EXPECT_EQ(g.metric, "site.std::vector<int>::push_back(int) (v.h:3)");
  EXPECT_EQ(g.op, ">");
  // The diff of a run with itself and of a run with stacks against one without: the sites
  // live at the peak appear.
  Result same = run_cli({"diff", trace_, trace_});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  TempDir dir;
  const std::string plain = dir / "plain.adtrace";
  ASSERT_EQ(
      run_cli({"run", "--no-report", "-o", plain, "--", ADPROF_TEST_SITES, ADPROF_TEST_SITES_LIB})
          .exit_code,
      0);
  Result grown = run_cli({"diff", plain, trace_});
  EXPECT_EQ(grown.exit_code, 0) << grown.err;
  EXPECT_NE(grown.out.find("site " + site), std::string::npos) << grown.out;
}

}  // namespace

namespace {

// The stack walker (profiler/preload/stacks.cpp) reuses the outer frames of the thread's previous
// stack. workloads/unwind.cpp changes the stack between allocations in every way that reuse must
// notice (recursion of changing depth, two callers at the same depth, alloca frames, longjmp and
// exceptions through frames between two allocations, signal handlers, threads, recursion deeper
// than the frames recorded); each is recorded with ADPROF_STACKS_CHECK=1, which unwinds every
// stack with libunwind too and counts the differences.
class UnwindTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_ / "unwind.adtrace";
    SpawnOptions o;
    o.argv = {cli_path(), "run", "--stacks", "--no-report", "-o", trace_, "--", ADPROF_TEST_UNWIND};
    o.env = {{"ADPROF_STACKS_CHECK", "1"}};
    run_ = run(o);
    ASSERT_EQ(run_.exit_code, 0) << run_.err;
  }

  TempDir dir_;
  std::string trace_;
  Result run_;
};

TEST_F(UnwindTest, EveryReusedStackIsLibunwinds) {
  const std::string marker = "adprof: stack check: ";
  const size_t at = run_.err.find(marker);
  ASSERT_NE(at, std::string::npos) << run_.err;
  unsigned long long stacks = 0, reused = 0, by_libunwind = 0, differences = 0;
  ASSERT_EQ(
      sscanf(run_.err.c_str() + at + marker.size(),
             "%llu stacks, %llu with reused outer frames, %llu by libunwind, %llu differences",
             &stacks, &reused, &by_libunwind, &differences),
      4)
      << run_.err;
  EXPECT_EQ(differences, 0u) << run_.err;
  // 272 allocations a round, 3 rounds, 5 threads; 20 around and in the signal handlers.
  EXPECT_GE(stacks, 4080u);
  EXPECT_GT(reused, stacks / 3) << "the outer frames are reused";
  EXPECT_GE(by_libunwind, 10u) << "the handler's stacks hold a signal frame: libunwind's";
}

// The frames of every stack, symbolised: what the program did, allocation by allocation (the
// sizes say which), for the main thread and the four others.
TEST_F(UnwindTest, StacksAreTheProgramsCalls) {
  const std::string folded = dir_ / "folded.txt";
  Result exported = run_cli({"export", trace_, "--folded", folded});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::map<std::string, uint64_t> actual;  // from the thread's function on, for the workload's
  for (const std::string &line : lines_of(read_file(folded))) {
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    const std::string frames = line.substr(0, space);
    if (frames.find("unwind_") == std::string::npos) continue;
    size_t root = frames.find(";main;");
    root = root != std::string::npos ? root + 1 : frames.find("thread_main;");
    if (root == std::string::npos) root = 0;  // deeper than recorded: no root
    actual[frames.substr(root)] += std::stoull(line.substr(space + 1));
  }
  auto repeat = [](const std::string &frame, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += frame + ";";
    return s;
  };
  std::map<std::string, uint64_t> expected;
  const std::string leaf = "unwind_leaf";
  for (uint64_t base : {0, 10000, 20000, 30000, 40000}) {
    const std::string root = base == 0 ? "main;unwind_scenarios;" : "thread_main;unwind_scenarios;";
    auto add = [&](const std::string &frames, uint64_t bytes) { expected[frames] += bytes; };
    for (int depth = 0; depth < 40; ++depth)
      add(root + repeat("unwind_recurse", depth + 1) + leaf, 3 * (base + 1000 + depth));
    add(root + "unwind_caller_a;" + leaf, 3 * 50 * (base + 2000));
    add(root + "unwind_caller_b;" + leaf, 3 * 50 * (base + 2001));
    uint64_t alloca_bytes = 0;
    for (int k = 1; k < 50; ++k) alloca_bytes += 3 * (base + 3000 + k % 7 + 1);
    add(root + "unwind_alloca;" + leaf, alloca_bytes);
    for (int i = 0; i < 10; ++i) {
      add(root + "unwind_jump_once;" + repeat("unwind_jump_from", 6 + i) + leaf, 3 * (base + 4000));
      add(root + repeat("unwind_throw_from", 6 + i) + leaf, 3 * (base + 5000));
    }
    add(root + "unwind_jump_once;unwind_caller_a;" + leaf, 3 * 10 * (base + 4001));
    add(root + "unwind_jump_once;" + repeat("unwind_recurse", 4) + leaf, 3 * 10 * (base + 4002));
    add(root + "unwind_caller_b;" + leaf, 3 * 10 * (base + 5001));
    add(root + "unwind_same_sp;unwind_alloca_to;" + leaf, 3 * 10 * (base + 8000));
    add(root + "unwind_same_sp;unwind_wrapper;unwind_alloca_to;" + leaf, 3 * 10 * (base + 8001));
    add(root + repeat("unwind_recurse", 3) + leaf, 3 * 10 * (base + 5002));
    // Deeper than the 64 frames recorded: the innermost 64.
    add(root + repeat("unwind_recurse", 61) + leaf, 3 * (base + 7002));
    add(repeat("unwind_recurse", 63) + leaf, 3 * (base + 7000 + base + 7001));
  }
  // Around the signal handler, and in it (the frames from the handler on).
  for (int i = 0; i < 5; ++i) {
    const std::string at = "main;" + repeat("unwind_signal_at", 3 * i + 1);
    expected[at + leaf] += 6000 + 6001;
  }
  std::map<std::string, uint64_t> in_handler;
  for (auto it = actual.begin(); it != actual.end();) {
    const size_t handler = it->first.find("unwind_on_signal;");
    if (handler == std::string::npos) {
      ++it;
      continue;
    }
    EXPECT_EQ(it->first.rfind("main;unwind_signal_at;", 0), 0u) << it->first;
    in_handler[it->first.substr(handler)] += it->second;
    it = actual.erase(it);
  }
  EXPECT_EQ(in_handler, (std::map<std::string, uint64_t>{
                            {"unwind_on_signal;unwind_caller_a;unwind_leaf", 5 * 6101},
                            {"unwind_on_signal;unwind_leaf", 5 * 6100}}));
  for (const auto &[frames, bytes] : expected) {
    auto it = actual.find(frames);
    if (it == actual.end()) {
      ADD_FAILURE() << "no stack " << frames;
      continue;
    }
    EXPECT_EQ(it->second, bytes) << frames;
  }
  for (const auto &[frames, bytes] : actual)
    EXPECT_TRUE(expected.count(frames))
        << "a stack the program never had: " << frames << " " << bytes;
}

}  // namespace
