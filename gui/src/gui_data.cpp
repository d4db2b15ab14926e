#include "gui_data.h"

#include <map>

namespace adprof::gui {

std::vector<DiffRow> diff_rows(const Report &base, const Report &current) {
  std::vector<DiffRow> rows;
  rows.push_back({"total", "peak", base.peak, current.peak});
  for (int r = 0; r < kRoleCount; ++r) {
    if (base.peak_by_role[r] == 0 && current.peak_by_role[r] == 0) continue;
    rows.push_back({"role", role_name(r), base.peak_by_role[r], current.peak_by_role[r]});
  }
  std::map<std::string, std::pair<uint64_t, uint64_t>> ops;
  for (const NamedBytes &o : base.peak_by_op) ops[o.name].first = o.bytes;
  for (const NamedBytes &o : current.peak_by_op) ops[o.name].second = o.bytes;
  for (const auto &[name, b] : ops) rows.push_back({"op", name, b.first, b.second});
  return rows;
}

WhatIfData whatif_data(const WhatIf &w) {
  WhatIfData d;
  d.measured_peak = w.measured_peak;
  d.reason = w.reason;
  if (!w.ad_tape && !w.programs) return d;
  auto row = [](const PolicyPrediction &p) {
    WhatIfRow r;
    r.policy = p.title.empty() ? p.name : p.title;
    r.applicable = p.applicable;
    r.predicted_peak = p.applicable ? p.predicted_peak : 0;
    r.note = p.applicable ? p.explanation : p.reason;
    if (!p.switch_off.empty())
      r.note += (r.note.empty() ? "" : "  ") + std::string("[off: ") + p.switch_off + "]";
    return r;
  };
  for (const PolicyPrediction &p : w.policies) d.rows.push_back(row(p));
  if (w.all.applicable) {
    WhatIfRow all = row(w.all);
    all.policy = "all of the above";
    d.rows.push_back(all);
  }
  return d;
}

InstantData instant_at_peak(const Report &report) {
  InstantData d;
  d.time = report.peak_time;
  d.host = report.peak;
  d.at_peak = true;
  d.buffers = report.live_at_peak;
  d.buffer_count = buffer_count(report.peak_by_label, d.buffers.size());
  d.groups = report.peak_by_role_op;
  return d;
}

InstantData instant_from_snapshot(const Snapshot &snapshot) {
  InstantData d;
  d.time = snapshot.time;
  d.host = snapshot.host;
  d.buffers = snapshot.buffers;
  d.buffer_count = buffer_count(snapshot.by_label, d.buffers.size());
  d.groups = snapshot.by_role_op;
  return d;
}

FindingTarget finding_target(const Report &report, const Finding &f) {
  FindingTarget t;
  t.time = report.peak_time;
  if (f.kind == "duplicate") {
    t.role = "duplicate";
    // The message names the op that made it ("... made by cast#3"): pick that buffer.
    auto at = f.message.rfind(" made by ");
    if (at != std::string::npos) t.text = f.message.substr(at + 9);
  } else if (f.kind == "non_inplace_accumulation") {
    t.role = "accumulation";
  } else if (f.kind == "forward_caches") {
    t.role = "forward_cache";
  } else if (f.kind == "gradients_held_for_optimizer") {
    t.role = "adjoint";
  } else if (f.kind == "allocations_per_step" && report.steps.size() >= 2) {
    t.range_from = report.steps[1].start;
    t.range_to = report.steps.back().end;
  }
  return t;
}

std::string labels_text(const std::vector<NamedBytes> &labels, size_t named) {
  std::string text;
  size_t shown = 0, more = 0;
  for (const NamedBytes &l : labels) {
    if (l.name.empty()) continue;
    if (shown == named) {
      ++more;
      continue;
    }
    if (shown++) text += ", ";
    text += l.name;
  }
  if (more) text += " (+" + std::to_string(more) + ")";
  return text;
}

}  // namespace adprof::gui
