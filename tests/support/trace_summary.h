// What a trace holds, counted through the analysis library's reader and replay: events by type,
// allocations and frees per op, live bytes at the end, how the trace ended. For the tests that
// record programs and check their traces (profiler, PyTorch); is_complete_with and
// has_op_counts, the checks of such a trace.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace adprof_test {

// Per op kind: what the replay attributes to blocks allocated inside it.
struct OpCounts {
  uint64_t allocations = 0, bytes = 0, frees = 0, freed_bytes = 0, live_at_end = 0;
  std::vector<uint64_t> sizes;  // every allocation's size, in trace order
};

struct TraceSummary {
  std::map<std::string, OpCounts> ops;  // by op name ("" : outside any op)
  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  bool complete = false, cut = false, exec = false;
  std::string reason;
  uint64_t corrupt_chunks = 0, missing_chunks = 0;
  std::map<adprof::format::EventType, uint64_t> by_type;
};

inline TraceSummary summarize(const std::string &path, bool keep_sizes = false) {
  adprof::TraceReader reader(path);
  adprof::Replay replay;
  TraceSummary s;
  adprof::Event e;
  while (reader.next(e)) {
    ++s.events;
    ++s.by_type[e.type];
    if (!replay.apply(e)) continue;
    const auto &c = replay.last();
    if (c.block->space != ADPROF_SPACE_HEAP) continue;
    std::string op = c.block->op_name ? replay.name(c.block->op_name) : "";
    OpCounts &oc = s.ops[op];
    if (c.alloc) {
      ++s.allocations;
      ++oc.allocations;
      oc.bytes += c.block->size;
      if (keep_sizes) oc.sizes.push_back(c.block->size);
    } else if (c.free) {
      ++s.frees;
      ++oc.frees;
      oc.freed_bytes += c.block->size;
    }
  }
  for (const auto &[addr, b] : replay.blocks())
    if (b.space == ADPROF_SPACE_HEAP)
      s.ops[b.op_name ? replay.name(b.op_name) : ""].live_at_end += b.size;
  s.complete = reader.end().complete;
  s.cut = reader.end().cut;
  s.exec = reader.end().exec;
  s.reason = reader.end().reason;
  s.corrupt_chunks = reader.stats().corrupt_chunks;
  s.missing_chunks = reader.stats().missing_chunks;
  return s;
}

// What a test expects of one op's heap blocks (OpCounts); a count left out is not checked.
// (Each says = std::nullopt so that GCC 12's -Wmissing-field-initializers leaves designated
// initializers that name only some of them alone.)
struct ExpectedCounts {
  std::optional<uint64_t> allocations = std::nullopt, frees = std::nullopt, bytes = std::nullopt,
                          freed_bytes = std::nullopt, live_at_end = std::nullopt;
};
// By op name ("": outside any op), in the order the test names them.
using ExpectedOps = std::vector<std::pair<std::string, ExpectedCounts>>;

// Whether each op named holds exactly the counts given (an op the trace lacks holds none), for
// EXPECT_TRUE: a failure names every count that differs, its op, what it is and what was
// expected.
inline ::testing::AssertionResult has_op_counts(const TraceSummary &s, const ExpectedOps &ops) {
  std::ostringstream differ;
  for (const auto &[op, want] : ops) {
    static const OpCounts none;
    const auto it = s.ops.find(op);
    const OpCounts &got = it == s.ops.end() ? none : it->second;
    auto check = [&, &op = op](const char *count, uint64_t is, std::optional<uint64_t> expected) {
      if (expected && is != *expected)
        differ << (differ.tellp() > 0 ? "; " : "") << "op '" << op << "': " << count << " " << is
               << ", expected " << *expected;
    };
    check("allocations", got.allocations, want.allocations);
    check("frees", got.frees, want.frees);
    check("bytes", got.bytes, want.bytes);
    check("freed_bytes", got.freed_bytes, want.freed_bytes);
    check("live_at_end", got.live_at_end, want.live_at_end);
  }
  if (differ.tellp() > 0) return ::testing::AssertionFailure() << differ.str();
  return ::testing::AssertionSuccess();
}

// Whether the trace was read as complete (TraceEnd::complete: an end record of a normal exit or
// an exec, nothing missing) and each op named holds exactly the counts given: the check of a
// run that ended normally. A failure says why the trace is not complete (its reason) and every
// count that differs.
inline ::testing::AssertionResult is_complete_with(const TraceSummary &s,
                                                   const ExpectedOps &ops = {}) {
  ::testing::AssertionResult counts = has_op_counts(s, ops);
  if (s.complete && counts) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  if (!s.complete) failure << "the trace is not complete: " << s.reason;
  if (!s.complete && !counts) failure << "; ";
  if (!counts) failure << counts.message();
  return failure;
}

}  // namespace adprof_test
