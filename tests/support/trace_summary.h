// What a trace holds, counted through the analysis library's reader and replay: events by type,
// allocations and frees per op, live bytes at the end, how the trace ended. For the tests that
// record programs and check their traces (profiler, PyTorch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
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

}  // namespace adprof_test
