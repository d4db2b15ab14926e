// The AD analysis composed over the memory analysis (ad_analysis.h).
#include "adprof/ad_analysis.h"

#include "adprof/findings.h"
#include "analyze_with.h"
#include "whatif/pass.h"

namespace adprof {

void add_predictions(Report &r, const WhatIf &w) {
  r.policy_savings.clear();
  for (const PolicyPrediction &p : w.policies)
    if (p.applicable && !p.recorded_on)
      r.policy_savings.push_back(
          {p.name, p.title, p.switch_on, p.predicted_peak, p.saving, p.explanation});
  if (!r.engine.described()) r.engine = w.engine;
  // Wordings with placeholders (ad_protocol.h) as the prediction filled them.
  for (const PolicyPrediction &p : w.policies)
    if (p.applicable && p.id >= 0 && ad::has_placeholder(r.engine.policy(p.id).switch_on))
      r.engine.policies[static_cast<size_t>(p.id)].switch_on = p.switch_on;
  r.findings = find_findings(r);
}

Analysis analyze_all(TraceReader &reader, const std::string &trace_path,
                     const AnalyzeOptions &options) {
  // One pass for the report with the what-if's pass 1 riding on it; pass 2 only for a trace
  // with an AD tape.
  Analysis a;
  Replay replay;
  whatif::Pass pass(replay);
  a.report = analyze_with(reader, trace_path, options, replay, &pass);
  if (pass.ad_tape()) {
    a.whatif = pass.finish(reader, a.report.events, a.report.peak);
    a.whatif->trace = trace_path;
    add_predictions(a.report, *a.whatif);
  }
  return a;
}

Analysis analyze_all(const std::string &trace_path, const AnalyzeOptions &options) {
  TraceReader reader(trace_path);
  return analyze_all(reader, trace_path, options);
}

}  // namespace adprof
