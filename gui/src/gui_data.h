// Plain value structs that cross from the background jobs to the UI thread (STYLE.md item 9).
// They hold what the analysis library computed, unchanged; no model or widget header is
// needed to produce them, and none of them knows about Qt item models.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adprof/report.h"
#include "adprof/snapshot.h"
#include "adprof/timeline.h"
#include "adprof/whatif.h"

namespace adprof::gui {

// The result of one background job: a value, or the reason there is none.
template <class T>
struct Outcome {
  std::shared_ptr<const T> value;  // null when failed or cancelled
  std::string error;               // plain words, for the user
  bool cancelled = false;
  double seconds = 0;  // wall time the job took
};

// The live set at one instant, as the "At an instant" view shows it.
struct InstantData {
  double time = 0;
  uint64_t host = 0;
  bool at_peak = false;
  std::vector<LiveBuffer> buffers;  // descending by size: the largest (AnalyzeOptions' cap)
  uint64_t buffer_count = 0;        // every host buffer live then, listed or not
  std::vector<RoleOpBytes> groups;  // every host buffer live then by role and op kind
};

// One policy's predicted peak, from adprof/whatif.h's predict_policies(). A policy the
// analysis could not predict has no number (applicable false, the reason in note).
struct WhatIfRow {
  std::string policy;
  uint64_t predicted_peak = 0;
  std::string note;
  bool applicable = true;
};

struct WhatIfData {
  uint64_t measured_peak = 0;
  std::vector<WhatIfRow> rows;  // empty: no what-if data in this trace
  std::string reason;           // why there is none
};

// The what-if panel's rows from the library's prediction (no AD tape in the trace: no rows).
WhatIfData whatif_data(const WhatIf &w);

// One row of the diff table: a role or an op, its bytes at the peak in the base and this trace.
struct DiffRow {
  std::string kind;  // "role", "op", "total"
  std::string name;
  uint64_t base = 0;
  uint64_t current = 0;
};

// Builds the diff rows from two reports (roles and op kinds at each one's peak).
std::vector<DiffRow> diff_rows(const Report &base, const Report &current);

// The labels of an op's buffers (module paths), most bytes first, in a few words:
// "model.fc1, model.fc2 (+3)"; unlabelled buffers are not named; "" when none is labelled.
std::string labels_text(const std::vector<NamedBytes> &labels, size_t named = 2);

// The live set at the peak, straight from the report (equal to snapshot_at the peak event).
InstantData instant_at_peak(const Report &report);
InstantData instant_from_snapshot(const Snapshot &snapshot);

// Which buffers and time a finding speaks of, from its kind (the report's findings are all
// about the live set at the peak; "allocations_per_step" speaks of the steps).
struct FindingTarget {
  double time = 0;
  std::string role;        // the role its buffers have ("" for all)
  std::string text;        // a filter text that picks the buffer out ("" for none)
  double range_from = -1;  // a time range it speaks of (-1: none)
  double range_to = -1;
};
FindingTarget finding_target(const Report &report, const Finding &finding);

}  // namespace adprof::gui
