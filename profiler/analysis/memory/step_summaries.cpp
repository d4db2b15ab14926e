// The writer's step summaries read into the report (step_summaries.h).
#include "step_summaries.h"

#include <algorithm>
#include <unordered_map>

namespace adprof {

bool step_from_summary(const Event &e, const TraceReader &reader, const Replay &names,
                       StepSummary &out) {
  namespace fmt = format;
  const auto v = e.values();
  const size_t roles_at = fmt::kStepSummaryFixedFields;
  const size_t labels_at = roles_at + 2 * kRoleCount;
  if (v.size() < labels_at + 1) return false;
  const uint64_t labels = v[labels_at];
  if (v.size() != labels_at + 1 + 3 * labels) return false;
  out = StepSummary{};
  out.summarized = true;
  out.step = e.a;
  out.start = reader.seconds(v[fmt::kSummaryStart]);
  out.end = reader.seconds(e.ticks);
  out.peak_time = reader.seconds(v[fmt::kSummaryPeakTime]);
  out.allocations = v[fmt::kSummaryAllocations];
  out.frees = v[fmt::kSummaryFrees];
  out.bytes = v[fmt::kSummaryBytes];
  out.peak = v[fmt::kSummaryPeak];
  for (int role = 0; role < kRoleCount; ++role) {
    out.peak_by_role[role] = v[roles_at + role];
    out.live_by_role[role] = v[roles_at + kRoleCount + role];
  }
  for (uint64_t i = 0; i < labels; ++i) {
    const uint64_t label = v[labels_at + 1 + 3 * i], role = v[labels_at + 2 + 3 * i];
    if (label > UINT32_MAX || role >= kRoleCount) return false;
    LabelBytes &l = out.labels_at_start.emplace_back();
    l.label = label ? names.name(static_cast<uint32_t>(label)) : "";
    l.role = role_name(static_cast<int>(role));
    l.bytes = v[labels_at + 3 + 3 * i];
  }
  return true;
}

void merge_step_summaries(std::vector<StepSummary> &steps, std::vector<StepSummary> summaries) {
  if (summaries.empty()) return;
  std::unordered_map<uint64_t, size_t> summary_of;  // step -> index in summaries
  for (size_t i = 0; i < summaries.size(); ++i) summary_of[summaries[i].step] = i;
  std::vector<StepSummary> merged;
  merged.reserve(steps.size() + summaries.size());
  for (StepSummary &s : steps)
    if (!summary_of.contains(s.step)) merged.push_back(std::move(s));
  for (StepSummary &s : summaries) merged.push_back(std::move(s));
  std::stable_sort(merged.begin(), merged.end(),
                   [](const StepSummary &a, const StepSummary &b) { return a.start < b.start; });
  steps = std::move(merged);
}

}  // namespace adprof
