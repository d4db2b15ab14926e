// The checks of a recorded trace (tests/support/trace_summary.h) fail where they must and say
// what differs, so that a test built on them can fail: every count that differs, by op, and
// why a trace is not complete.
#include "../support/trace_summary.h"

#include <gtest/gtest.h>

namespace {

using namespace adprof_test;

TraceSummary a_summary(bool complete, std::string reason) {
  TraceSummary s;
  s.complete = complete;
  s.reason = std::move(reason);
  OpCounts &main = s.ops["main"];
  main.allocations = 100;
  main.bytes = 1000;
  main.frees = 50;
  main.freed_bytes = 500;
  main.live_at_end = 500;
  return s;
}

TEST(TraceSummaryChecks, EveryCountThatDiffersIsNamed) {
  const TraceSummary s = a_summary(true, "complete");
  EXPECT_TRUE(has_op_counts(s, {{"main",
                                 {.allocations = 100,
                                  .frees = 50,
                                  .bytes = 1000,
                                  .freed_bytes = 500,
                                  .live_at_end = 500}}}));
  EXPECT_TRUE(has_op_counts(s, {{"main", {.frees = 50}}})) << "a count left out is not checked";
  EXPECT_TRUE(has_op_counts(s, {{"absent", {.allocations = 0, .frees = 0}}}))
      << "an op the trace lacks holds none";
  const ::testing::AssertionResult differ =
      has_op_counts(s, {{"main", {.allocations = 99, .frees = 50, .live_at_end = 0}},
                        {"absent", {.allocations = 1}}});
  EXPECT_FALSE(differ);
  EXPECT_STREQ(differ.message(),
               "op 'main': allocations 100, expected 99; op 'main': live_at_end 500, expected 0; "
               "op 'absent': allocations 0, expected 1");
}

TEST(TraceSummaryChecks, AnIncompleteTraceFailsWithItsReason) {
  const TraceSummary cut = a_summary(false, "cut: the trace has no end record");
  const ::testing::AssertionResult counts_right = is_complete_with(cut, {{"main", {.frees = 50}}});
  EXPECT_FALSE(counts_right);
  EXPECT_STREQ(counts_right.message(),
               "the trace is not complete: cut: the trace has no end record");
  const ::testing::AssertionResult both = is_complete_with(cut, {{"main", {.frees = 49}}});
  EXPECT_FALSE(both);
  EXPECT_STREQ(both.message(),
               "the trace is not complete: cut: the trace has no end record; op 'main': frees 50, "
               "expected 49");
  EXPECT_FALSE(is_complete_with(cut));
  const TraceSummary whole = a_summary(true, "complete");
  EXPECT_TRUE(is_complete_with(whole));
  EXPECT_TRUE(is_complete_with(whole, {{"main", {.frees = 50}}}));
  const ::testing::AssertionResult count_wrong = is_complete_with(whole, {{"main", {.frees = 49}}});
  EXPECT_FALSE(count_wrong);
  EXPECT_STREQ(count_wrong.message(), "op 'main': frees 50, expected 49");
}

}  // namespace
