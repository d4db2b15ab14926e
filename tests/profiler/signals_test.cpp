// How a recorded process ends and what it sees of the profiler's signal handling: every
// terminating signal leaves a trace with its footer and every thread's events; the program
// sees the dispositions it would see without the profiler (Python's KeyboardInterrupt);
// signals sent to the process reach the program's threads only; _exit keeps the events; a
// failed final write is said. (profiler/preload/signals.cpp, recording_end.cpp, process_hooks.cpp)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>

#include "../support/process.h"
#include "../support/same_lines.h"
#include "../support/trace_summary.h"

namespace {

using namespace adprof_test;

// `adprof run --no-report -o TRACE -- ARGV...` in a process group of its own (as a shell's job
// would be), signalled as a whole once MARKER exists; returns adprof's result.
Result run_and_signal_group(const std::string &trace, const std::string &marker,
                            std::vector<std::string> argv, int sig) {
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CLI, "run", "--no-report", "-o", trace, "--"};
  o.argv.insert(o.argv.end(), argv.begin(), argv.end());
  o.own_process_group = true;
  o.timeout_s = 60;
  Child adprof_run(o);
  if (wait_for_file(marker, 60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    adprof_run.signal_group(sig);
  }
  return adprof_run.wait();
}

class TerminatingSignal : public ::testing::TestWithParam<int> {};

TEST_P(TerminatingSignal, ToTheProcessGroupLeavesAFinishedTrace) {
  const int sig = GetParam();
  TempDir dir;
  std::string trace = dir / "t", marker = dir / "marker";
  Result r = run_and_signal_group(trace, marker, {ADPROF_TEST_LIFECYCLE, "sleep", marker}, sig);
  ASSERT_FALSE(r.timed_out) << strsignal(sig) << ": the program or adprof did not end";
  // adprof run ends as the program did: of the same signal, or 128+N for one that dumps core.
  if (sig == SIGQUIT) {
    ASSERT_TRUE(r.exited) << strsignal(sig) << ": adprof itself was ended by signal " << r.signal;
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
  } else {
    EXPECT_FALSE(r.exited) << strsignal(sig) << ": adprof exited " << r.exit_code;
    EXPECT_EQ(r.signal, sig) << r.err;
  }
  adprof::TraceReader reader(trace);
  const char *abbrev = sigabbrev_np(sig);
  const std::string named = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  EXPECT_NE(reader.end().reason.find("ended by " + named), std::string::npos)
      << strsignal(sig) << ": " << reader.end().reason;
  const TraceSummary s = summarize(trace);
  EXPECT_EQ(s.corrupt_chunks, 0u);
  EXPECT_TRUE(has_op_counts(s, {{"before_kill", {.allocations = 1000, .frees = 500}}}));
}

INSTANTIATE_TEST_SUITE_P(Signals, TerminatingSignal,
                         ::testing::Values(SIGINT, SIGHUP, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                                           SIGALRM, SIGPIPE, SIGRTMIN + 1),
                         [](const auto &info) {
                           return std::string(sigabbrev_np(info.param) ? sigabbrev_np(info.param)
                                                                       : "RT");
                         });

// Python installs its KeyboardInterrupt handler only where SIGINT's disposition is SIG_DFL,
// and dies of SIGINT after the traceback: both must happen as without the profiler.
TEST(Signals, PythonSeesSigintAsDefaultAndDiesOfIt) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  TempDir dir;
  std::string trace = dir / "t", marker = dir / "marker";
  std::string script = "import time\nkeep = [bytearray(1000) for i in range(1000)]\nopen('" +
                       marker + "', 'w').close()\ntime.sleep(60)\n";
  Result r = run_and_signal_group(trace, marker, {"/usr/bin/python3", "-c", script}, SIGINT);
  ASSERT_FALSE(r.timed_out);
  EXPECT_FALSE(r.exited) << r.exit_code;
  EXPECT_EQ(r.signal, SIGINT) << r.err;
  EXPECT_NE(r.err.find("KeyboardInterrupt"), std::string::npos)
      << "Python did not install its SIGINT handler:\n"
      << r.err;
  adprof::TraceReader reader(trace);
  EXPECT_NE(reader.end().reason.find("SIGINT"), std::string::npos) << reader.end().reason;
}

TEST(Signals, ProcessSignalsReachOnlyTheProgramsThreads) {
  TempDir dir;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "blocked_signal"};
  o.trace = dir / "t";
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = key_values(r.out);
  EXPECT_EQ(kv["elsewhere"], "0") << "a signal sent to the process ran its handler on a thread "
                                     "of the profiler";
  EXPECT_EQ(kv["handled"], "50");
  EXPECT_TRUE(has_op_counts(summarize(o.trace), {{"signals", {.allocations = 10}}}));
}

// A one-shot handler (glibc's __sysv_signal: `signal` in a strict ISO C program) is the
// program's, as it reads back; after it ran, SIGTERM's default action ends the process with
// the profiler's handler in between: the trace ends with the signal and keeps every event.
void expect_handler_then_death_by_sigterm(const char *mode, bool one_shot) {
  for (bool profiled : {false, true}) {
    SCOPED_TRACE(profiled ? "profiled" : "plain");
    TempDir dir;
    SpawnOptions o;
    o.argv = {ADPROF_TEST_LIFECYCLE, mode};
    if (profiled) o.trace = dir / "t";
    Result r = run(o);
    ASSERT_FALSE(r.timed_out);
    EXPECT_FALSE(r.exited) << r.err;
    EXPECT_EQ(r.signal, SIGTERM) << r.err;
    auto kv = key_values(r.out);
    EXPECT_EQ(kv["installed"], "yes") << "the program reads back its own handler";
    if (one_shot) {
      EXPECT_EQ(kv["runs"], "1");
    }
    EXPECT_EQ(kv["then"], "SIG_DFL");
    if (!profiled) continue;
    const TraceSummary s = summarize(o.trace);
    EXPECT_NE(s.reason.find("SIGTERM"), std::string::npos) << s.reason;
    EXPECT_TRUE(has_op_counts(
        s, {{"before_signal", {.allocations = 100}}, {"after_signal", {.allocations = 10}}}));
  }
}

TEST(Signals, OneShotHandlerRunsOnceAndTheNextSignalEndsATrace) {
  expect_handler_then_death_by_sigterm("one_shot_handler", true);
}

// System V's sigset, which glibc implements past the sigaction hook: the handler is read back,
// and SIG_DFL set with it gives the profiler's handler back.
TEST(Signals, SigsetHandlerThenDefaultEndsATrace) {
  expect_handler_then_death_by_sigterm("sigset_handler", false);
}

// A fault signal sent by kill or raise (faulthandler's _sigsegv, a harness's kill), a
// breakpoint's SIGTRAP and raise(SIGSYS) are not made again by returning from a handler: the
// profiler's handler raises them again, so the process dies of them as without it. It returned
// instead, and the program went on: exit status 0 ("survived"), 8 of CPython's faulthandler
// tests failing under adprof.
struct EndingSignal {
  std::vector<std::string> mode;
  int sig;
};

void expect_death_as_alone(const EndingSignal &e) {
  TempDir dir;
  std::vector<std::string> argv = {ADPROF_TEST_LIFECYCLE};
  argv.insert(argv.end(), e.mode.begin(), e.mode.end());
  const AloneAndUnder r = run_alone_and_under(argv, dir / "t");
  const std::string named = std::string("SIG") + sigabbrev_np(e.sig);
  ASSERT_FALSE(r.alone.exited) << named << ": alone, exited " << r.alone.exit_code;
  ASSERT_EQ(r.alone.signal, e.sig);
  EXPECT_FALSE(r.under.exited) << named << ": under adprof, exited " << r.under.exit_code
                               << " printing " << r.under.out;
  EXPECT_EQ(r.under.signal, e.sig) << r.under.err;
  EXPECT_EQ(r.under.out, r.alone.out);
  const TraceSummary s = summarize(dir / "t");
  EXPECT_NE(s.reason.find("ended by " + named), std::string::npos) << s.reason;
  EXPECT_TRUE(has_op_counts(s, {{"before_signal", {.allocations = 100}}}));
}

TEST(Signals, SentFaultSignalsEndTheProcessAsWithout) {
  for (const EndingSignal &e : std::vector<EndingSignal>{
           {{"raise", std::to_string(SIGSEGV)}, SIGSEGV},
           {{"kill", std::to_string(SIGSEGV)}, SIGSEGV},
           {{"raise", std::to_string(SIGBUS)}, SIGBUS},
           {{"raise", std::to_string(SIGILL)}, SIGILL},
           {{"kill", std::to_string(SIGFPE)}, SIGFPE},
           {{"raise", std::to_string(SIGTRAP)}, SIGTRAP},
           {{"raise", std::to_string(SIGSYS)}, SIGSYS},
       }) {
    SCOPED_TRACE(e.mode[0] + " " + sigabbrev_np(e.sig));
    expect_death_as_alone(e);
  }
}

TEST(Signals, BreakpointEndsTheProcessAsWithout) {
  expect_death_as_alone({{"breakpoint"}, SIGTRAP});
}

// A vfork child (Python's subprocess) shares its parent's memory but has dispositions of its
// own: what it sets must not change the profiler's view of the parent's. The children's
// SIG_DFL was written into it: the second child kept SIGPIPE ignored (Python's
// restore_signals undone), and the parent's later SIG_DFL on SIGINT was taken for a no-op, so
// its handler ran where SIGINT should have ended it (a Python program interrupted after any
// subprocess call died of SIGSEGV).
TEST(Signals, VforkChildrensDispositionsAreTheirOwn) {
  TempDir dir;
  const AloneAndUnder r =
      run_alone_and_under({ADPROF_TEST_LIFECYCLE, "vfork_dispositions"}, dir / "t");
  ASSERT_FALSE(r.alone.exited) << r.alone.out;
  ASSERT_EQ(r.alone.signal, SIGINT);
  EXPECT_EQ(r.alone.out, "SIGPIPE default\nSIGPIPE default\nparent SIGINT handler\nhandled 1\n");
  EXPECT_TRUE(same_lines(r.alone.out, r.under.out));
  EXPECT_FALSE(r.under.exited) << r.under.exit_code;
  EXPECT_EQ(r.under.signal, SIGINT) << r.under.err;
  const TraceSummary s = summarize(dir / "t");
  EXPECT_NE(s.reason.find("ended by SIGINT"), std::string::npos) << s.reason;
  EXPECT_TRUE(has_op_counts(s, {{"before_signal", {.allocations = 100}}}));
}

TEST(Signals, UnderscoreExitKeepsEveryEvent) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_cli({"run", "--no-report", "-o", trace, "--", ADPROF_TEST_LIFECYCLE, "_exit"});
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(
      is_complete_with(summarize(trace), {{"before_exit", {.allocations = 300, .frees = 150}}}));
}

// The file size limit leaves room for the header only: every chunk is written at exit, and
// fails. One line says so; the program's status is unchanged.
TEST(Signals, FailedFinalWriteIsSaid) {
  TempDir dir;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "exit", "0"};
  o.trace = dir / "t";
  o.fsize_limit = 64;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_code, 0);
  auto said = adprof_lines(r.err);
  ASSERT_EQ(said.size(), 1u) << r.err;
  EXPECT_NE(said[0].find("trace write failed"), std::string::npos) << said[0];
}

// A program near its RLIMIT_AS that handles malloc failure cleanly does so under the profiler
// too (the writer crashed allocating its compressor there, in 4 to 10 runs of 10), gets about
// as much memory, and its trace is whole.
// Runs `o` with this process's RLIMIT_AS at `bytes` (the child inherits it; this process's own
// limit is put back after). False: the limit could not be set.
bool run_under_address_limit(const SpawnOptions &o, rlim_t bytes, Result &result) {
  ScopedLimit limit(RLIMIT_AS, bytes);
  if (!limit.ok()) return false;
  result = run(o);
  return true;
}

// The address space the profiler takes from a recording program (issue 28, item 7): what a
// recording process holds beyond the same process with the interposer inert (jemalloc and the
// libraries loaded either way). It was 28.0 MiB (two 8 MiB compression scratch areas, level
// 5's 3.6 MiB tables, ...), so that under a 40 MB RLIMIT_AS the writer could not start and the
// program got nothing (0 of 1,000 malloc(16)); now 13.2 MiB (docs/RECORDING.md, "Life-cycle
// rules", Memory).
TEST(Signals, ProfilersOwnAddressSpaceIsSmall) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the limit is set in this process, whose sanitizer runtime reserves terabytes "
                  "of address space; covered by the release build";
#endif
  TempDir dir;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "vmsize"};
  o.env = {{"LD_PRELOAD", preload_path()}};
  // Without address-space randomisation: jemalloc maps a 4 MiB leaf of its radix tree of
  // extents (a 6 MiB block) for each 1 GiB of address space its mappings reach, and with ASLR
  // the start-up's mappings straddle a 1 GiB boundary in about 3% of runs (6 of 200 recordings
  // held 6 MiB more, 0 of 200 without ASLR).
  o.fixed_layout = true;
  Result inert = run(o);
  ASSERT_EQ(inert.exit_code, 0) << inert.err;
  o.env.clear();
  // The smallest of three recordings: a recording also holds 1 MiB more or less now and then
  // (a buffer that the writer's flush tick maps, or not yet, when the program reads its size).
  // A profiler that grew would exceed the bound in all three.
  double own_mib = 1e9;
  for (int i = 0; i < 3; ++i) {
    o.trace = dir / ("t" + std::to_string(i));
    Result recording = run(o);
    ASSERT_EQ(recording.exit_code, 0) << recording.err;
    own_mib = std::min(own_mib, (std::stod(key_values(recording.out)["vmsize_kib"]) -
                                 std::stod(key_values(inert.out)["vmsize_kib"])) /
                                    1024);
  }
  RecordProperty("profiler_address_space_mib", std::to_string(own_mib));
  EXPECT_LE(own_mib, 16.0) << "the profiler's own address space grew";
  // Under a 40 MiB limit the program still gets memory, and is recorded: every run ends as the
  // program does and its trace is whole; the best of three got memory.
  o.argv = {ADPROF_TEST_LIFECYCLE, "until_out_of_memory"};
  double best = 0;
  for (int i = 0; i < 3 && best < 2.0; ++i) {
    o.trace = dir / ("limited" + std::to_string(i));
    Result limited;
    ASSERT_TRUE(run_under_address_limit(o, 40u << 20, limited));
    ASSERT_TRUE(limited.exited) << "signal " << limited.signal;
    EXPECT_EQ(limited.exit_code, 3) << limited.err;
    EXPECT_TRUE(adprof_lines(limited.err).empty()) << limited.err;
    EXPECT_TRUE(is_complete_with(summarize(dir / ("limited" + std::to_string(i)))));
    best = std::max(best, std::stod(key_values(limited.out)["allocated"]));
  }
  EXPECT_GE(best, 2.0) << "the program got no memory under a 40 MiB RLIMIT_AS";
}

TEST(Signals, ProgramAtItsAddressSpaceLimitRunsAsWithout) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the limit is set in this process, whose sanitizer runtime reserves terabytes "
                  "of address space; covered by the release build";
#endif
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "until_out_of_memory"};
  Result plain, on_jemalloc;
  std::vector<Result> traced;
  TempDir dir;
  {
    ScopedLimit limit(RLIMIT_AS, 400u << 20);
    ASSERT_TRUE(limit.ok());
    plain = run(o);
    // The same allocator, not recording: what the profiler itself costs is the difference.
    o.env = {{"LD_PRELOAD", preload_path()}};
    on_jemalloc = run(o);
    o.env.clear();
    for (int i = 0; i < 5; ++i) {
      o.trace = dir / ("t" + std::to_string(i));
      traced.push_back(run(o));
    }
  }
  ASSERT_EQ(plain.exit_code, 3) << plain.err;
  ASSERT_EQ(on_jemalloc.exit_code, 3) << on_jemalloc.err;
  const double native = std::stod(key_values(plain.out)["allocated"]);
  const double jemalloc = std::stod(key_values(on_jemalloc.out)["allocated"]);
  for (int i = 0; i < 5; ++i) {
    const Result &r = traced[static_cast<size_t>(i)];
    ASSERT_TRUE(r.exited) << "run " << i << " ended by signal " << r.signal;
    ASSERT_EQ(r.exit_code, 3) << r.err;
    // glibc: 396 MiB of a 400 MiB limit; jemalloc 382 (its own maps); recording 353-360 (the
    // trace buffers, the compressor's workspace, the writer's stack and arena).
    const double got = std::stod(key_values(r.out)["allocated"]);
    EXPECT_GE(got, 0.85 * native) << r.out;
    EXPECT_GE(got, jemalloc - 40) << r.out;
    TraceSummary s = summarize(dir / ("t" + std::to_string(i)));
    EXPECT_TRUE(is_complete_with(s));
    EXPECT_EQ(s.ops["greedy"].allocations * 1.0, std::stod(key_values(r.out)["allocated"]));
  }
}

// A program that stays at its address-space limit while the profiler's clock runs on (its
// counter samples every 10 ms, its flush ticks every 100 ms, each of which starts a new buffer)
// is recorded whole: the profiler needs no address space the program has taken. Before, a
// thread's (or the writer's) next buffer was mapped then, failed, and recording stopped: the
// trace was cut, its events lost ("no memory for the trace's buffers"). That happened in
// ProgramAtItsAddressSpaceLimitRunsAsWithout whenever the program, slowed by a loaded machine,
// was still at its limit 10 ms after its start (the writer's first sample): here the program
// holds its memory there for 300 ms, then frees it.
TEST(Signals, ProgramHeldAtItsAddressSpaceLimitIsRecordedWhole) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the limit is set in this process, whose sanitizer runtime reserves terabytes "
                  "of address space; covered by the release build";
#endif
  TempDir dir;
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "until_out_of_memory", "300"};
  o.trace = dir / "t";
  Result r;
  ASSERT_TRUE(run_under_address_limit(o, 400u << 20, r));
  ASSERT_TRUE(r.exited) << "signal " << r.signal;
  ASSERT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(adprof_lines(r.err).empty()) << r.err;
  const auto blocks = static_cast<uint64_t>(std::stoull(key_values(r.out)["allocated"]));
  EXPECT_GT(blocks, 300u) << r.out;
  EXPECT_TRUE(
      is_complete_with(summarize(o.trace),
                       {{"greedy", {.allocations = blocks, .frees = blocks, .live_at_end = 0}}}));
}

}  // namespace
