// The recorder's life cycle: normal exit, fork (the child in TRACE.<pid>, naming its parent;
// untraced under ADPROF_FORK=0), exec (same pid: TRACE.1),
// fork+exec (TRACE.<pid>), abort (footer names SIGABRT), SIGKILL (chunks flushed), and the exit
// status of `adprof run`.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "../support/process.h"
#include "../support/trace_summary.h"
#include "adprof/job.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace {

using namespace adprof_test;

// `adprof run -o TRACE --no-report -- lifecycle ARGS...`
Result run_lifecycle(const std::string &trace, std::vector<std::string> args, double timeout_s = 60,
                     std::vector<std::pair<std::string, std::string>> env = {}) {
  SpawnOptions o;
  o.argv = {cli_path(), "run", "-o", trace, "--no-report", "--", ADPROF_TEST_LIFECYCLE};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_s = timeout_s;
  o.env = std::move(env);
  return run(o);
}

// Under ADPROF_FORK=0 a fork child is not traced unless it execs (the behaviour before issue 29).
const std::vector<std::pair<std::string, std::string>> kNoForkTracing = {{"ADPROF_FORK", "0"}};

// A run of the workload to a normal end (status 0), its trace read back (it must be complete).
struct CleanRun {
  Result result;  // adprof run's, with the program's output
  TraceSummary summary;
  adprof::Report report;
  std::vector<std::string> files;  // in the trace's directory
};

CleanRun a_clean_run(std::vector<std::string> args, double timeout_s = 60) {
  TempDir dir;
  const std::string trace = dir / "t";
  CleanRun run;
  run.result = run_lifecycle(trace, std::move(args), timeout_s);
  EXPECT_TRUE(run.result.exited) << "the program did not end: " << run.result.err;
  EXPECT_EQ(run.result.exit_code, 0) << run.result.err;
  run.summary = summarize(trace);
  EXPECT_TRUE(is_complete_with(run.summary));
  run.report = adprof::analyze(trace);
  run.files = files_in(dir.path());
  return run;
}

TraceSummary summary_of_a_clean_run(std::vector<std::string> args, double timeout_s = 60) {
  return a_clean_run(std::move(args), timeout_s).summary;
}

pid_t child_pid(const std::string &out) {
  auto kv = key_values(out);
  return kv.count("child") ? static_cast<pid_t>(std::stol(kv["child"])) : -1;
}

TEST(Lifecycle, NormalExitIsComplete) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"exit", "0"});
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(
      is_complete_with(s, {{"main", {.allocations = 100, .frees = 50, .live_at_end = 50 * 1111}}}));
  EXPECT_FALSE(s.cut);
  EXPECT_EQ(s.reason, "complete");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"t"});
}

// glibc runs the destructors of a library the program loaded after the interposer's: the
// frees they make are recorded (before: 20 of 41, and 51,020 bytes read as live at exit).
TEST(Lifecycle, FreesInLibraryDestructorsAreRecorded) {
  const TraceSummary s = summary_of_a_clean_run({"library_destructor", ADPROF_TEST_DESTRUCTOR_LIB});
  EXPECT_TRUE(
      has_op_counts(s, {{"library_blocks", {.allocations = 41, .frees = 41, .live_at_end = 0}},
                        {"main", {.allocations = 100, .live_at_end = 50 * 1111}}}));
}

// The exit_group system call made through glibc's syscall() ends the trace as _exit does (before:
// the trace was cut, the last flush interval's events lost); other calls through it return what
// they return without the profiler.
TEST(Lifecycle, ExitGroupSystemCallIsComplete) {
  const CleanRun run = a_clean_run({"exit_group_syscall"});
  EXPECT_EQ(key_values(run.result.out)["same"], "yes") << run.result.out;
  const TraceSummary &s = run.summary;
  EXPECT_FALSE(s.cut);
  EXPECT_TRUE(has_op_counts(s, {{"before_exit", {.allocations = 300, .frees = 150}}}));
}

// A thread whose own thread-specific destructors allocate and free after the profiler's
// thread-exit handler ran, in every round glibc makes, the last included; then the program
// unmaps the thread's stack and TLS. The run ends normally, the trace is complete, and every
// event of those destructors is in it (before: the recorder kept the thread registered with
// its state in the TLS, read it at exit, and the program died of SIGSEGV after its last line,
// as Python programs with PyTorch 2.11 did on a GPU machine).
TEST(Lifecycle, LateThreadDestructorsLoseNothing) {
  const CleanRun run = a_clean_run({"late_thread_destructors"});
  EXPECT_TRUE(
      has_op_counts(run.summary, {{"thread", {.allocations = 300}},
                                  {"late_blocks", {.allocations = 4, .frees = 4, .live_at_end = 0}},
                                  {"main", {.allocations = 100}}}));
}

// quick_exit runs the program's at_quick_exit handlers, then _exit from inside glibc (past the
// _exit hook): the trace has every event, the handler's too (before: 0 events, trace cut).
TEST(Lifecycle, QuickExitIsComplete) {
  EXPECT_TRUE(has_op_counts(summary_of_a_clean_run({"quick_exit"}),
                            {{"before_quick_exit", {.allocations = 300, .frees = 150}},
                             {"quick_exit_handler", {.allocations = 10, .frees = 5}}}));
}

// The main thread leaves with pthread_exit, its other thread finishes later: glibc ends the
// process then, counting the profiler's writer among the threads it waits for. Before, the
// program never ended under the profiler (nor under heaptrack) and the trace was never
// finished; now it ends as without it, the atexit handler's allocations recorded.
TEST(Lifecycle, ProgramEndsWhenItsLastThreadDoes) {
  EXPECT_TRUE(has_op_counts(summary_of_a_clean_run({"main_thread_exits"}, 20),
                            {{"main", {.allocations = 100}},
                             {"worker", {.allocations = 200, .frees = 100}},
                             {"atexit_handler", {.allocations = 10}}}));
}

// 8,000 threads alive at once, each allocating between two barriers (issue 28, item 1). The
// writer waited for room in its own queue (its counter samples need a buffer too) once the
// program's threads had filled it, and the program hung for good (1 of 1 runs at 4,000 threads
// alive, 2 of 4 at 2,000). Then the process ends with all of them still alive: their last
// events are in their buffers only, which the registry must hold (it held 4,096 threads).
// Label `heavy`: about 10 s on two cores.
TEST(LifecycleHeavy, ThousandsOfThreadsAliveAtOnce) {
  constexpr unsigned kThreads = 8000;
  for (const char *ending : {"join", "exit"}) {
    SCOPED_TRACE(ending);
    const CleanRun run =
        a_clean_run({"threads_alive", std::to_string(kThreads), ending}, /*timeout_s=*/120);
    ASSERT_FALSE(run.result.timed_out) << "the program hung under the profiler";
    EXPECT_NE(run.result.out.find("threads 8000"), std::string::npos) << run.result.err;
    EXPECT_TRUE(has_op_counts(run.summary,
                              {{"alive", {.allocations = 4u * kThreads, .frees = 4u * kThreads}},
                               {"main", {.allocations = 10}}}));
    EXPECT_GE(run.report.threads, kThreads);
  }
}

TEST(Lifecycle, RunExitsWithTheProgramsStatus) {
  TempDir dir;
  Result r = run_lifecycle(dir / "t", {"exit", "3"});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(is_complete_with(summarize(dir / "t")));
}

// Fork children that do not exec are process images of their own (issue 29): each writes
// TRACE.<pid>, says its parent (job.process), and holds exactly its own allocations: none of
// its parent's (the parent's unwritten events are wiped by the fork), and the free of a block
// it inherited is no allocation of its. The parent's trace is as without children.
TEST(Lifecycle, ForkedChildrenAreTracedWithTheirParent) {
  TempDir dir;
  const std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"fork_children"});
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = key_values(r.out);
  ASSERT_TRUE(kv.count("children") && kv.count("grandchild")) << r.out;
  std::vector<std::string> children;
  std::stringstream list(kv["children"]);
  for (std::string pid; std::getline(list, pid, ',');) children.push_back(pid);
  ASSERT_EQ(children.size(), 3u);
  const std::string grandchild = kv["grandchild"];
  std::vector<std::string> expected = {"t", "t." + grandchild};
  for (const std::string &child : children) expected.push_back("t." + child);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files_in(dir.path()), expected);

  const TraceSummary parent = summarize(trace);
  EXPECT_TRUE(is_complete_with(
      parent, {{"parent", {.allocations = 1000}}, {"after_fork", {.allocations = 10}}}));
  EXPECT_EQ(parent.ops.count("child"), 0u) << "a child's allocations in its parent's trace";
  EXPECT_EQ(parent.ops.count("grandchild"), 0u);
  EXPECT_EQ(parent.corrupt_chunks, 0u);
  adprof::TraceReader parent_reader(trace);
  EXPECT_EQ(parent_reader.end().untraced_fork_children, 0u);
  const uint64_t parent_pid = parent_reader.header().pid;

  auto check_image = [&](const std::string &pid, uint64_t its_parent, const char *op,
                         uint64_t count, uint64_t size) {
    SCOPED_TRACE(op + std::string(" ") + pid);
    const std::string path = trace + "." + pid;
    const TraceSummary s = summarize(path);
    EXPECT_TRUE(is_complete_with(
        s, {{op, {.allocations = count, .frees = count / 2, .bytes = count * size}}}));
    EXPECT_EQ(s.corrupt_chunks + s.missing_chunks, 0u);
    for (const auto &[name, counts] : s.ops) {
      if (name == op) continue;
      EXPECT_EQ(counts.allocations, 0u) << "op '" << name << "' in " << path;
    }
    adprof::TraceReader reader(path);
    EXPECT_EQ(reader.header().pid, std::stoull(pid));
    EXPECT_EQ(reader.header().run_id, parent_reader.header().run_id);
    const adprof::job::Process p = adprof::job::analyze_process(path, {});
    EXPECT_TRUE(p.said_process);
    EXPECT_EQ(p.parent, its_parent);
  };
  for (size_t k = 0; k < children.size(); ++k)
    check_image(children[k], parent_pid, "child", (k + 1) * 100, 1000 + k);
  check_image(grandchild, std::stoull(children[2]), "grandchild", 50, 555);
}

// Under a step window (--steps A:B) each process's writer folds its buffers outside the window
// into per-step summaries (step_window.cpp). A fork child's window is its own, over its own
// steps: the parent writer's state (its live map, the marks it had read, the ring's marks of
// the parent's steps) copied at the fork is not the child's. Before, each child's trace held
// the summaries of its parent's steps 1 and 2 beside its own step 3.
TEST(Lifecycle, ForkedChildrenHaveTheirOwnStepWindow) {
  TempDir dir;
  const std::string trace = dir / "t";
  SpawnOptions o;
  o.argv = {cli_path(),     "run", "--steps",
            "100:101",      "-o",  trace,
            "--no-report",  "--",  ADPROF_TEST_LIFECYCLE,
            "fork_children"};
  o.timeout_s = 60;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = key_values(r.out);
  ASSERT_TRUE(kv.count("children")) << r.out;
  std::vector<std::string> children;
  std::stringstream list(kv["children"]);
  for (std::string pid; std::getline(list, pid, ',');) children.push_back(pid);
  ASSERT_EQ(children.size(), 3u);
  const adprof::Report parent = adprof::analyze(trace);
  ASSERT_EQ(parent.steps.size(), 2u);
  EXPECT_EQ(parent.steps[0].allocations, 1000u);
  for (size_t k = 0; k < children.size(); ++k) {
    SCOPED_TRACE(children[k]);
    const adprof::Report child = adprof::analyze(trace + "." + children[k]);
    ASSERT_EQ(child.steps.size(), 1u) << "the parent's steps in a child's trace";
    EXPECT_EQ(child.steps[0].step, 3u);
    EXPECT_TRUE(child.steps[0].summarized);
    EXPECT_EQ(child.steps[0].allocations, (k + 1) * 100);
    EXPECT_EQ(child.steps[0].bytes, (k + 1) * 100 * (1000 + k));
    // (The free of the block it inherited is of a block allocated before its recording began.)
    EXPECT_EQ(child.steps[0].frees, (k + 1) * 50);
  }
}

// A thread that ends while the trace is being finished (after the recording stopped, before the
// other threads' buffers were written as the final snapshots): its exit handler wrote nothing
// (the recording was over) and took its buffer out of the registry, so the final snapshots did
// not see it either; every event of the thread was lost from a trace that read as complete. A
// Python thread does this when its joiner ends the program at once (about 1 run in 30 of the
// Python stacks test under load). Several runs: the window is short.
TEST(Lifecycle, ThreadEndingWhileTheTraceIsFinishedKeepsItsEvents) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    SCOPED_TRACE(attempt);
    TempDir dir;
    const std::string trace = dir / "t";
    Result r = run_lifecycle(trace, {"thread_ends_while_finishing"});
    ASSERT_TRUE(r.exited) << r.err;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(
        is_complete_with(summarize(trace), {{"late_thread", {.allocations = 100, .frees = 50}}}));
  }
}

// A hand-off under way when the trace is finished: a thread's exit handler read the recording
// as on and handed its buffer over (taken out of its slot first), but reached the writer's queue
// only after the end of the recording had written the queue and the final snapshots, which no
// longer saw the buffer: every event in it was lost. The workload holds the hand-off at the
// queue's lock until the trace is being finished, at exit or in the handler of a fatal signal.
TEST(Lifecycle, HandOffUnderWayWhenTheTraceIsFinishedLosesNothing) {
  for (const std::string ending : {"exit", "signal"}) {
    SCOPED_TRACE(ending);
    TempDir dir;
    const std::string trace = dir / "t";
    SpawnOptions o;
    o.argv = {cli_path(), "run", "-o", trace, "--no-report", "--", ADPROF_TEST_LATE_HAND_OFF,
              ending};
    o.timeout_s = 60;
    Result r = run(o);
    if (ending == "exit") {
      ASSERT_TRUE(r.exited) << r.err;
      EXPECT_EQ(r.exit_code, 0) << r.err;
    } else {
      EXPECT_EQ(r.signal, SIGTERM) << r.err;  // adprof run ends as its program did
    }
    const TraceSummary s = summarize(trace);
    if (ending == "exit") {
      EXPECT_TRUE(is_complete_with(s));
    }
    EXPECT_EQ(s.corrupt_chunks, 0u);
    EXPECT_TRUE(has_op_counts(s, {{"late_hand_off", {.allocations = 100, .frees = 50}}}));
  }
}

// ADPROF_FORK=0: the child records nothing and writes nothing.
TEST(Lifecycle, ForkedChildIsNotTracedUnderForkZero) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"fork"}, 60, kNoForkTracing);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pid_t child = child_pid(r.out);
  ASSERT_GT(child, 0) << r.out;
  EXPECT_FALSE(fs::exists(trace + "." + std::to_string(child)));
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"t"});
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(is_complete_with(
      s, {{"parent", {.allocations = 1000}}, {"after_fork", {.allocations = 10}}}));
  EXPECT_EQ(s.ops.count("child"), 0u) << "the child's allocations leaked into the parent's trace";
  EXPECT_EQ(s.corrupt_chunks, 0u);
}

// A fork child with no trace of its own (ADPROF_FORK=0 here; a child killed before its first
// chunk) is counted in its parent's footer, and adprof run says so once, after the program, with
// how many (issue 28, item 9). A child that execs has its own trace and is not counted. The
// program's own output is unchanged.
TEST(Lifecycle, UntracedForkChildrenAreSaidOnce) {
  TempDir dir;
  Result r = run_lifecycle(dir / "t", {"fork"}, 60, kNoForkTracing);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t said = 0;
  for (const std::string &line : lines_of(r.err))
    if (line.find("had no trace of its own") != std::string::npos) {
      ++said;
      EXPECT_EQ(line.rfind("adprof: 1 process forked by ", 0), 0u) << line;
    }
  EXPECT_EQ(said, 1u) << r.err;
  EXPECT_EQ(adprof::TraceReader(dir / "t").end().untraced_fork_children, 1u);
  SpawnOptions plain;
  plain.argv = {ADPROF_TEST_LIFECYCLE, "fork"};
  EXPECT_EQ(child_pid(run(plain).out) > 0, child_pid(r.out) > 0);

  for (const char *mode : {"forkexec", "fork"}) {  // exec'd, or traced as it is
    Result traced = run_lifecycle(dir / mode, {mode});
    ASSERT_EQ(traced.exit_code, 0) << traced.err;
    EXPECT_EQ(traced.err.find("trace of its own"), std::string::npos) << traced.err;
    EXPECT_EQ(adprof::TraceReader(dir / mode).end().untraced_fork_children, 0u);
  }
}

// execl (through glibc's execve), execveat, which reaches the kernel without it, and the system
// call made through glibc's syscall().
class ExecForms : public ::testing::TestWithParam<const char *> {};

TEST_P(ExecForms, ExecSamePidWritesTheNextImage) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {GetParam()});
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"t", "t.1"}));
  const TraceSummary first = summarize(trace);
  EXPECT_TRUE(first.exec) << first.reason;
  EXPECT_FALSE(first.cut);
  EXPECT_TRUE(has_op_counts(first, {{"before_exec", {.allocations = 10}}}));
  const TraceSummary second = summarize(trace + ".1");
  EXPECT_TRUE(is_complete_with(second, {{"main", {.allocations = 100}}}));
  EXPECT_FALSE(second.exec);
  EXPECT_EQ(second.ops.count("before_exec"), 0u);
  adprof::TraceReader a(trace), b(trace + ".1");
  EXPECT_EQ(a.header().pid, b.header().pid);
}

INSTANTIATE_TEST_SUITE_P(Lifecycle, ExecForms,
                         ::testing::Values("exec", "execveat", "execve_syscall"),
                         [](const auto &info) { return std::string(info.param); });

// Execs that fail (execvp through every directory of PATH, execl of a missing file) return to
// the program, whose trace goes on: every event after them is recorded, a worker thread's made
// while they ran too, and a block allocated before them is freed after. Before, the first
// failed exec ended the trace with an "exec" footer and everything later was lost.
TEST(Lifecycle, FailedExecLosesNoEvent) {
  const CleanRun run = a_clean_run({"failed_exec"});
  EXPECT_EQ(run.files, std::vector<std::string>{"t"});
  const TraceSummary &s = run.summary;
  EXPECT_FALSE(s.exec);
  EXPECT_EQ(s.corrupt_chunks, 0u);
  EXPECT_EQ(s.missing_chunks, 0u);
  EXPECT_TRUE(has_op_counts(s, {{"before_exec", {.allocations = 10}},
                                {"worker", {.allocations = 2000, .frees = 1000}},
                                {"held", {.allocations = 1, .frees = 1, .live_at_end = 0}},
                                {"after_failed_exec", {.allocations = 100}}}));
  // The restarted writer goes on as the same profiler thread: the program's two and it.
  const adprof::Report &report = run.report;
  EXPECT_EQ(report.threads, 3u);
  EXPECT_EQ(std::count(report.thread_names.begin(), report.thread_names.end(), "adprof-writer"), 1);
}

// Each failed exec stops the writer and starts it anew (end_before_exec); the counters are
// sampled on one schedule across those writers: a program whose execs fail every millisecond
// (execvp through PATH) for 50 ms has its counters sampled meanwhile (every 10 ms: a sample due
// is taken as the next writer starts, before the program goes on), and its trace holds the one
// profiler thread. Before, each writer first sampled 10 ms after its own start and none lived
// that long: the trace held no counter and no writer thread (FailedExecLosesNoEvent saw 2
// threads of 3 whenever its worker ended before its execs did, on a loaded machine).
TEST(Lifecycle, FailedExecsKeepTheCountersSampled) {
  TempDir dir;
  const std::string trace = dir / "t";
  const Result r = run_lifecycle(trace, {"failed_execs_alone"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(is_complete_with(summarize(trace), {{"before_exec", {.allocations = 10}},
                                                  {"after_failed_exec", {.allocations = 100}}}));
  const adprof::Report report = adprof::analyze(trace);
  EXPECT_EQ(report.threads, 2u);
  EXPECT_EQ(std::count(report.thread_names.begin(), report.thread_names.end(), "adprof-writer"), 1);
  // The samples (their clock counter) between the ops before and after the execs: 50 ms or
  // more, five sample intervals; two leave room for a late one.
  adprof::TraceReader reader(trace);
  adprof::Event e;
  std::map<uint64_t, std::string> names;
  uint64_t execs_begin = 0, execs_end = 0;
  std::vector<uint64_t> samples;
  while (reader.next(e)) {
    using adprof::format::EventType;
    if (e.type == EventType::kName) names[e.a] = std::string(e.text());
    if (e.type == EventType::kOpBegin && names[e.a] == "before_exec") execs_begin = e.ticks;
    if (e.type == EventType::kOpBegin && names[e.a] == "after_failed_exec") execs_end = e.ticks;
    if (e.type == EventType::kCounter &&
        e.operand == static_cast<uint8_t>(adprof::format::CounterKind::kClockNs))
      samples.push_back(e.ticks);
  }
  ASSERT_GT(execs_end, execs_begin);
  EXPECT_GE(std::count_if(samples.begin(), samples.end(),
                          [&](uint64_t t) { return t > execs_begin && t < execs_end; }),
            2)
      << samples.size() << " samples in all";
}

// A thread forks while the writer and the program's threads hold the recorder's locks now and
// then; in each child that thread leaves (pthread_exit's path, which runs the recorder's
// thread-exit handler), and the child must end: it takes no lock that another thread of its
// parent held at the fork (its recording's locks are its own, made at the fork), and once its
// only thread has left, its writer ends it as glibc would have. Each child is traced.
TEST(Lifecycle, ForkChildsThreadExitNeverHangs) {
  TempDir dir;
  const std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"fork_from_thread", "300"}, 120);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kv = key_values(r.out);
  EXPECT_EQ(kv["forks"], "300") << r.out;
  EXPECT_EQ(kv["hung"], "0") << r.out;
  const std::vector<std::string> files = files_in(dir.path());
  EXPECT_EQ(files.size(), 301u);
  EXPECT_TRUE(is_complete_with(summarize(trace)));
  EXPECT_EQ(adprof::TraceReader(trace).end().untraced_fork_children, 0u);
  size_t incomplete = 0;
  for (const std::string &file : files) incomplete += !summarize(dir / file).complete;
  EXPECT_EQ(incomplete, 0u);
}

TEST(Lifecycle, ForkedChildThatExecsHasItsOwnTrace) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"forkexec"});
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pid_t child = child_pid(r.out);
  ASSERT_GT(child, 0) << r.out;
  std::string child_trace = trace + "." + std::to_string(child);
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"t", "t." + std::to_string(child)}));
  const TraceSummary parent = summarize(trace);
  EXPECT_TRUE(is_complete_with(parent, {{"parent", {.allocations = 10}}}));
  EXPECT_EQ(parent.ops.count("main"), 0u);
  EXPECT_TRUE(is_complete_with(summarize(child_trace), {{"main", {.allocations = 100}}}));
  EXPECT_EQ(adprof::TraceReader(child_trace).header().pid, static_cast<uint64_t>(child));
}

TEST(Lifecycle, AbortLeavesAReadableCutTrace) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"abort"});
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGABRT);
  adprof::TraceReader reader(trace);
  EXPECT_TRUE(reader.end().cut);
  EXPECT_FALSE(reader.end().complete);
  EXPECT_NE(reader.end().reason.find("SIGABRT"), std::string::npos) << reader.end().reason;
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(has_op_counts(s, {{"before_abort", {.allocations = 500, .frees = 250}}}));
  EXPECT_EQ(s.corrupt_chunks, 0u);
  // The CLI's report on it says so.
  Result rep = run_cli({"report", trace});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("SIGABRT"), std::string::npos) << rep.out;
}

// SIGKILL runs no handler: what was flushed before it is what the trace holds. The program
// allocates, then sleeps for longer than the recorder's flush interval (100 ms) before the kill.
TEST(Lifecycle, SigkillAfterSleepKeepsFlushedEvents) {
  TempDir dir;
  std::string trace = dir / "t", marker = dir / "marker";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CLI,       "run",   "-o",  trace, "--no-report", "--",
            ADPROF_TEST_LIFECYCLE, "sleep", marker};
  Child adprof_run(o);
  ASSERT_TRUE(wait_for_file(marker, 30));
  pid_t pid = static_cast<pid_t>(std::stol(read_file(marker)));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  Result r = adprof_run.wait();
  // adprof run dies of the signal that ended the program, as a shell would see it without adprof.
  EXPECT_FALSE(r.exited) << r.err;
  EXPECT_EQ(r.signal, SIGKILL);
  adprof::TraceReader reader(trace);
  EXPECT_TRUE(reader.end().cut);
  EXPECT_FALSE(reader.end().complete);
  EXPECT_NE(reader.end().reason.find("cut"), std::string::npos) << reader.end().reason;
  const TraceSummary s = summarize(trace);
  EXPECT_EQ(s.corrupt_chunks, 0u);
  // Every event of the allocating thread was made > 400 ms before the kill.
  EXPECT_TRUE(has_op_counts(s, {{"before_kill", {.allocations = 1000, .frees = 500}}}))
      << "events made before a long sleep were lost on SIGKILL: an idle thread's partial "
         "buffer is never flushed";
}

TEST(Lifecycle, RunWithMissingProgramFailsWithOneLine) {
  TempDir dir;
  Result r = run_cli({"run", "-o", dir / "t", "--", dir / "no-such-program"});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("adprof: error:", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("no-such-program"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "t"));
}

TEST(Lifecycle, RunNeverOverwritesAnExistingTrace) {
  TempDir dir;
  write_file(dir / "t", "precious");
  Result r = run_lifecycle(dir / "t", {"exit", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_EQ(read_file(dir / "t"), "precious");
}

// A file of an earlier run where this run's next image would go is passed over: the image
// writes the next free name and adprof reports that one (the header's run id says whose).
TEST(Lifecycle, StaleImageOfAnEarlierRunIsNeverReported) {
  TempDir dir;
  std::string trace = dir / "t";
  Result earlier = run_lifecycle(dir / "earlier", {"exit", "0"});
  ASSERT_EQ(earlier.exit_code, 0) << earlier.err;
  fs::rename(dir / "earlier", trace + ".1");
  const std::string stale = read_file(trace + ".1");
  Result r = run_lifecycle(trace, {"exec"});
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(trace + ".1"), stale);
  EXPECT_NE(r.err.find("reporting its last image: " + trace + ".2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(trace + ".1 "), std::string::npos) << "the stale file was listed:\n"
                                                          << r.err;
  EXPECT_TRUE(has_op_counts(summarize(trace + ".2"), {{"main", {.allocations = 100}}}));
}

// A relative -o names a file in adprof's directory, wherever the program goes before it execs.
TEST(Lifecycle, RelativeOutputStaysPutWhenTheProgramChangesDirectory) {
  TempDir dir, elsewhere;
  SpawnOptions o;
  o.argv = {"/bin/bash", "-c",
            "cd '" + dir.path() + "' && exec " + ADPROF_TEST_CLI +
                " run --no-report -o rel.adtrace -- " + ADPROF_TEST_LIFECYCLE + " cd_exec '" +
                elsewhere.path() + "'"};
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(files_in(elsewhere.path()).empty());
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"rel.adtrace", "rel.adtrace.1"}));
  EXPECT_NE(r.err.find("reporting its last image: " + dir.path() + "/rel.adtrace.1"),
            std::string::npos)
      << r.err;
}

// Every process image of the run is listed, with where its trace is.
TEST(Lifecycle, RunListsTheChildProcessesItTraced) {
  TempDir dir;
  std::string trace = dir / "t";
  Result r = run_lifecycle(trace, {"forkexec"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pid_t child = child_pid(r.out);
  ASSERT_GT(child, 0);
  EXPECT_NE(r.err.find("traced 2 process images"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(trace + "." + std::to_string(child) + "  pid " + std::to_string(child)),
            std::string::npos)
      << r.err;
}

TEST(Lifecycle, RunRejectsAnEmptyOutputName) {
  Result r = run_cli({"run", "-o", "", "--", ADPROF_TEST_LIFECYCLE, "exit", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(r.out.empty()) << "the program ran: " << r.out;
}

}  // namespace
