// The AD analysis composed over the memory analysis (ad_analysis.h).
#include "adprof/ad_analysis.h"

#include <stdexcept>

#include "adprof/findings.h"
#include "memory/analyze_with.h"
#include "whatif/pass.h"

namespace adprof {

void add_predictions(Report &r, const WhatIf &w) {
  r.policy_savings.clear();
  for (const PolicyPrediction &p : w.policies)
    if (p.applicable && !p.recorded_on)
      r.policy_savings.push_back({p.name, p.title, p.switch_on, p.predicted_peak, p.saving,
                                  p.explanation, p.engine_predicted});
  if (!r.engine.described()) r.engine = w.engine;
  // Wordings with placeholders (ad_protocol.h) as the prediction filled them.
  for (const PolicyPrediction &p : w.policies)
    if (p.applicable && p.id >= 0 && ad::has_placeholder(r.engine.policy(p.id).switch_on))
      r.engine.policies[static_cast<size_t>(p.id)].switch_on = p.switch_on;
  r.findings = find_findings(r);
}

// Pass 1's state: the replay the report's pass read into and the what-if's pass riding on it
// (which holds a reference to that replay), with the reader pass 2 reads again.
struct PendingPrediction::State {
  State(TraceReader &r, const std::string &path) : reader(r), trace(path), pass(replay) {}
  State(std::unique_ptr<TraceReader> owned, const std::string &path)
      : owned_reader(std::move(owned)), reader(*owned_reader), trace(path), pass(replay) {}
  std::unique_ptr<TraceReader> owned_reader;
  TraceReader &reader;
  std::string trace;
  Replay replay;
  whatif::Pass pass;
  uint64_t events = 0, measured_peak = 0;
  bool finished = false;

  // The report's pass, pass 1 on it.
  Report first_pass(const AnalyzeOptions &options) {
    Report report = analyze_with(reader, trace, options, replay, &pass);
    events = report.events;
    measured_peak = report.peak;
    return report;
  }
  // `stage_progress`: the caller's (AnalyzeOptions::stage_progress), told how far pass 2 is.
  WhatIf second_pass(const std::function<void(const char *, double)> &stage_progress) {
    if (finished) throw std::logic_error("PendingPrediction::finish called twice");
    finished = true;
    std::function<void(double)> progress;
    if (stage_progress)
      progress = [&](double f) { stage_progress("predicting each policy (what-if)", f); };
    WhatIf w = pass.finish(reader, events, measured_peak, progress);
    w.trace = trace;
    return w;
  }
};

PendingPrediction::PendingPrediction(std::unique_ptr<State> state) : state_(std::move(state)) {}
PendingPrediction::~PendingPrediction() = default;
WhatIf PendingPrediction::finish(const std::function<void(const char *, double)> &stage_progress) {
  return state_->second_pass(stage_progress);
}

Analysis analyze_all(TraceReader &reader, const std::string &trace_path,
                     const AnalyzeOptions &options) {
  // One pass for the report with the what-if's pass 1 riding on it; pass 2 only for a trace
  // with an AD tape (or an engine's what-ifs of its compiled programs).
  Analysis a;
  PendingPrediction::State state(reader, trace_path);
  a.report = state.first_pass(options);
  if (state.pass.predicts()) {
    a.whatif = state.second_pass(options.stage_progress);
    add_predictions(a.report, *a.whatif);
  }
  return a;
}

Analysis analyze_all(const std::string &trace_path, const AnalyzeOptions &options) {
  TraceReader reader(trace_path);
  return analyze_all(reader, trace_path, options);
}

FirstPass analyze_first(const std::string &trace_path, const AnalyzeOptions &options) {
  auto state = std::make_unique<PendingPrediction::State>(std::make_unique<TraceReader>(trace_path),
                                                          trace_path);
  FirstPass f;
  f.report = state->first_pass(options);
  if (state->pass.predicts()) f.prediction = std::make_shared<PendingPrediction>(std::move(state));
  return f;
}

}  // namespace adprof
