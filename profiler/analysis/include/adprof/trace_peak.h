// The highest host bytes a trace holds: a process's peak wherever it is compared (a job's
// ranks and workers, budgets and diffs), one rule for every view of it.
#pragma once

#include <array>
#include <cstdint>

#include "adprof/report.h"

namespace adprof {

// Recorded whole: the report's peak. Recorded with a step window (`adprof run --steps A:B`) the
// report's peak is that of the events recorded in full (the start-up before the first step mark
// and the window's steps), and a step outside the window may have risen higher (a step-dependent
// spike, a longest batch, a process whose steps all lie outside the window): the highest
// summarized step's peak is the trace's then (the first of equal ones; a tie keeps the peak
// recorded in full, whose live set the report holds).
struct TracePeak {
  uint64_t bytes = 0;
  double time = 0;          // seconds on the trace's clock
  int64_t step = -1;        // the step whose span holds it; -1: none (start-up, no steps)
  bool summarized = false;  // in a step outside the window: the writer's summary of that step
                            // (its bytes by role at its peak; no buffers, labels or ops)
  std::array<uint64_t, kRoleCount> by_role{};
};
TracePeak trace_peak(const Report &report);

// The highest device bytes a trace holds (device blocks and raw device allocations; a caching
// allocator's reserve apart): the report's device peak, its bytes by role, the step whose span
// holds it. The events recorded in full only: a step window's summaries carry host figures
// alone (trace_format.h, "Step windows"), so a device peak in a folded step is not seen.
TracePeak trace_device_peak(const Report &report);

}  // namespace adprof
