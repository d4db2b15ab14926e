// The highest host bytes a trace holds, over a step window's summaries too, and its highest
// device bytes (trace_peak.h).
#include "adprof/trace_peak.h"

namespace adprof {

namespace {

int64_t step_at(const Report &r, double time) {
  for (const StepSummary &s : r.steps)
    if (time >= s.start && time <= s.end) return static_cast<int64_t>(s.step);
  return -1;
}

}  // namespace

TracePeak trace_peak(const Report &r) {
  TracePeak peak{r.peak, r.peak_time, step_at(r, r.peak_time), false, r.peak_by_role};
  for (const StepSummary &s : r.steps)
    if (s.summarized && s.peak > peak.bytes)
      peak = {s.peak, s.peak_time, static_cast<int64_t>(s.step), true, s.peak_by_role};
  return peak;
}

TracePeak trace_device_peak(const Report &r) {
  return {r.device_peak, r.device_peak_time, r.device_peak ? step_at(r, r.device_peak_time) : -1,
          false, r.device_peak_by_role};
}

}  // namespace adprof
