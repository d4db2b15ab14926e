// A signal whose handler ends the process (_exit), taken while the trace is being ended
// (profiler/preload/recording_end.cpp, finish): the process ends, with its handler's status, and
// its trace is complete. Before, the handler's _exit came back into the trace's end on the thread
// that was ending it and waited for good for the lock that thread held: a DataLoader worker that
// its rank sent SIGTERM (PyTorch's handler calls _exit(0)) hung, and its rank with it.
#include <gtest/gtest.h>

#include <cstdio>

#include "../support/process.h"
#include "adprof/report.h"

namespace {

using namespace adprof_test;

TEST(ExitSignal, HandlerThatExitsWhileTheTraceEndsEndsTheProcess) {
  TempDir dir;
  int handled_while_ending = 0;
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    const std::string trace = dir / ("exit" + std::to_string(i) + ".adtrace");
    SpawnOptions o;
    // 2 million allocations: the writer still has buffers to write when the program exits.
    o.argv = {ADPROF_TEST_EXIT_SIGNAL, "2000000"};
    o.trace = trace;
    o.timeout_s = 30;
    const Result r = run(o);
    ASSERT_FALSE(r.timed_out) << "the process never ended: " << r.err;
    ASSERT_TRUE(r.exited) << "signal " << r.signal << ": " << r.err;
    // 7: the workload's SIGTERM handler ended it (the signal reached the main thread while it
    // waited in the trace's end); 0: the process ended before the signal was sent.
    EXPECT_TRUE(r.exit_code == 7 || r.exit_code == 0) << r.exit_code << r.out << r.err;
    handled_while_ending += r.exit_code == 7;
    const adprof::Report report = adprof::analyze(trace);
    EXPECT_TRUE(report.complete) << report.end_reason;
  }
  std::printf("[ exit     ] the handler ended %d of 5 runs\n", handled_while_ending);
  EXPECT_GT(handled_while_ending, 0) << "the signal never came while the trace was ending";
}

}  // namespace
