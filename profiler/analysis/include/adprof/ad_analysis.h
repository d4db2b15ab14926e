// The AD analysis, layered over the memory analysis (docs/ARCHITECTURE.md, "Layers"):
//
//   memory analysis (any program)   analyze() -> Report, build_timeline, snapshot_at, diff
//   AD analysis (traces with an AD tape, ad_protocol.h)
//                                   predict_policies -> WhatIf (whatif.h); add_predictions puts
//                                   each policy's saving into the report and its findings, in
//                                   the engine's words
//
// The CLI and the GUI compose the two: analyze_all rides the what-if's first pass on the
// report's own pass and runs its second only when the trace has an AD tape, so a plain
// program's report is one pass and an AD program's two.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "adprof/report.h"
#include "adprof/whatif.h"

namespace adprof {

// Adds the prediction's savings (each policy that was off and applicable) to `report` and
// recomputes its findings. Reads nothing.
void add_predictions(Report &report, const WhatIf &whatif);

struct Analysis {
  Report report;
  std::optional<WhatIf> whatif;  // traces with an AD tape only
};

// The memory report and, for a trace with an AD tape, the prediction added to it (the reader
// is read once more for the what-if's second pass). Throws TraceError for unreadable traces.
Analysis analyze_all(TraceReader &reader, const std::string &trace_path,
                     const AnalyzeOptions &options = {});
Analysis analyze_all(const std::string &trace_path, const AnalyzeOptions &options = {});

// analyze_all in two halves, for a view that shows the report before the prediction is done
// (the GUI): the report's pass with the what-if's pass 1 riding on it, then, on demand, pass 2.
// The pending half owns the trace's reader and pass 1's state; finish() may run on another
// thread than the first half, not at the same time as anything else on this object.
class PendingPrediction {
 public:
  struct State;
  explicit PendingPrediction(std::unique_ptr<State> state);
  ~PendingPrediction();
  PendingPrediction(const PendingPrediction &) = delete;
  PendingPrediction &operator=(const PendingPrediction &) = delete;

  // Runs the what-if's pass 2 (reads the trace from its start again). Once: a second call
  // throws std::logic_error. `stage_progress`, when given, is told how far it is now and then
  // (on the calling thread; what it throws ends the pass).
  WhatIf finish(const std::function<void(const char *, double)> &stage_progress = {});

 private:
  std::unique_ptr<State> state_;
};

struct FirstPass {
  Report report;  // without the prediction's savings (add_predictions adds them)
  std::shared_ptr<PendingPrediction> prediction;  // traces with an AD tape only
};

FirstPass analyze_first(const std::string &trace_path, const AnalyzeOptions &options = {});

}  // namespace adprof
