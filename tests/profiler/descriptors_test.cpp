// The profiler's own descriptors are out of the program's reach: a program that closes or
// takes every descriptor number it did not open gets its own file untouched, and the trace
// still gets every event (profiler/preload/own_fds.h).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "../support/process.h"
#include "../support/trace_summary.h"

namespace {

using namespace adprof_test;

const char kProgramText[] = "the program's own line\nand its last line\n";

void expect_untouched_file_and_whole_trace(const std::string &mode) {
  ScopedLimit limit(RLIMIT_NOFILE, 256);  // the profiler's descriptors in reach
  TempDir dir;
  std::string trace = dir / "t.adtrace", file = dir / "mine.txt";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_DESCRIPTORS, mode, file};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
  EXPECT_EQ(read_file(file), kProgramText) << mode << ": the program's file was written to";
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(is_complete_with(s, {{"after_close", {.allocations = 80000, .frees = 80000}}}))
      << mode;
  EXPECT_EQ(s.corrupt_chunks, 0u);
  EXPECT_EQ(s.missing_chunks, 0u);
}

TEST(Descriptors, CloseOfEveryNumberLeavesTheTraceAlone) {
  expect_untouched_file_and_whole_trace("close");
}

TEST(Descriptors, ClosefromLeavesTheTraceAlone) {
  expect_untouched_file_and_whole_trace("closefrom");
}

TEST(Descriptors, Dup2OntoEveryNumberMovesTheTraceAway) {
  expect_untouched_file_and_whole_trace("dup2");
}

// A vfork child's descriptors are a copy of its parent's, but it runs in the parent's memory:
// its dup2 onto the profiler's numbers must not move the parent's (the parent then lost its
// trace descriptor and reopened the trace at another number: exit status 6).
TEST(Descriptors, Dup2InAVforkChildLeavesTheParentsAlone) {
  expect_untouched_file_and_whole_trace("vfork_dup2");
}

// A close the hooks cannot see: the next write notices and reopens the trace by its path.
TEST(Descriptors, RawCloseSyscallIsNoticedBeforeTheNextWrite) {
  expect_untouched_file_and_whole_trace("rawclose");
}

// The shell form of the finding: `exec 3>file` takes number 3, whatever it was.
TEST(Descriptors, ShellRedirectionOntoALowNumber) {
  ScopedLimit limit(RLIMIT_NOFILE, 256);  // the profiler's descriptors in reach
  TempDir dir;
  std::string trace = dir / "t.adtrace", file = dir / "mine.txt";
  SpawnOptions o;
  o.argv = {"/bin/bash", "-c",
            "exec 3>" + file + " 4>" + file + ".4 5>" + file +
                ".5; echo hello >&3; for i in $(seq 1 300); do x=$(printf '%05000d' $i); done; "
                "sleep 0.3; echo bye >&3"};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(file), "hello\nbye\n");
  EXPECT_EQ(read_file(file + ".4"), "");
  EXPECT_EQ(read_file(file + ".5"), "");
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(is_complete_with(s));
  EXPECT_GT(s.allocations, 1000u);
}

// Without the profiler no descriptor above 2 is open in these programs: a redirection from any
// number (a dup2 of it) fails, and so it does with the profiler.
TEST(Descriptors, ProgramSeesNoExtraOpenDescriptor) {
  ScopedLimit limit(RLIMIT_NOFILE, 256);  // the profiler's descriptors in reach
  TempDir dir;
  std::string trace = dir / "t.adtrace";
  SpawnOptions o;
  o.argv = {"/bin/bash", "-c",
            "for fd in $(seq 3 255); do ( exec 2>/dev/null; : >&$fd ) && echo open $fd; done; "
            "true"};
  Result plain = run(o);
  o.trace = trace;
  Result traced = run(o);
  ASSERT_EQ(plain.exit_code, 0);
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, plain.out);
  // With call stacks too (issue 28, item 9): libunwind's pipe, opened on its first use and kept,
  // took the program's lowest free numbers (3 and 4); it is the profiler's now, kept high.
  o.trace = dir / "stacks.adtrace";
  o.env = {{"ADPROF_STACKS", "1"}};
  Result stacks = run(o);
  ASSERT_EQ(stacks.exit_code, 0) << stacks.err;
  EXPECT_EQ(stacks.out, plain.out);
  EXPECT_TRUE(is_complete_with(summarize(dir / "stacks.adtrace")));
}

}  // namespace
