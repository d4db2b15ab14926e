// The live set at one instant: every live buffer with its role, op, phase, label, dtype, shape
// and (for a duplicate) its source. The report's "live at the peak" and the GUI's "at an
// instant" view are both this.
#pragma once

#include <array>
#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace adprof {

struct Snapshot {
  double time = 0;
  uint64_t host = 0;
  std::array<uint64_t, kRoleCount> by_role{};
  std::array<uint64_t, kPhaseCount> by_phase{};
  std::vector<NamedBytes> by_op;        // op kinds, descending
  std::vector<LabelBytes> by_label;     // (label, role) pairs over every host buffer, descending
  std::vector<RoleOpBytes> by_role_op;  // (role, op kind) over every host buffer, descending
  // Per op kind, the labels of its buffers, most bytes first (at most kOpLabelsKept each).
  std::vector<std::pair<std::string, std::vector<NamedBytes>>> op_labels;
  std::vector<LiveBuffer> buffers;  // host buffers, descending by size (at most max_buffers)
  uint64_t slack = 0;
};

// Every host buffer a (label, role) breakdown counts, listed or not: a list of buffers keeps
// only the largest (`listed` of them), and its size is not their number.
uint64_t buffer_count(const std::vector<LabelBytes> &by_label, size_t listed);

// Describes the host buffers live in `replay` now.
Snapshot take_snapshot(const Replay &replay, const TraceReader &reader, size_t max_buffers);

// Describes a given set of blocks (address, block); `replay` resolves names. Host blocks only.
Snapshot describe_blocks(std::vector<std::pair<uint64_t, const Block *>> live, const Replay &replay,
                         const TraceReader &reader, size_t max_buffers);

// Replays `reader` from its start up to `time` (seconds) or up to event number `event` (1-based,
// 0: use time), and describes what is live there.
Snapshot snapshot_at(TraceReader &reader, double time, uint64_t event = 0,
                     size_t max_buffers = 100000);

}  // namespace adprof
