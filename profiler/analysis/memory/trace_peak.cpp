// The highest host bytes a trace holds, over a step window's summaries too (trace_peak.h).
#include "adprof/trace_peak.h"

namespace adprof {

TracePeak trace_peak(const Report &r) {
  TracePeak peak{r.peak, r.peak_time, -1, false, r.peak_by_role};
  for (const StepSummary &s : r.steps)
    if (r.peak_time >= s.start && r.peak_time <= s.end) {
      peak.step = static_cast<int64_t>(s.step);
      break;
    }
  for (const StepSummary &s : r.steps)
    if (s.summarized && s.peak > peak.bytes)
      peak = {s.peak, s.peak_time, static_cast<int64_t>(s.step), true, s.peak_by_role};
  return peak;
}

}  // namespace adprof
