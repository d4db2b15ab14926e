// The AD analysis composed over the memory analysis (ad_analysis.h).
#include "adprof/ad_analysis.h"

#include "adprof/findings.h"

namespace adprof {

void add_predictions(Report &r, const WhatIf &w) {
  r.policy_savings.clear();
  for (const PolicyPrediction &p : w.policies)
    if (p.applicable && !p.recorded_on)
      r.policy_savings.push_back(
          {p.name, p.title, p.switch_on, p.predicted_peak, p.saving, p.explanation});
  if (!r.engine.described()) r.engine = w.engine;
  r.findings = find_findings(r);
}

Analysis analyze_all(TraceReader &reader, const std::string &trace_path,
                     const AnalyzeOptions &options) {
  Analysis a;
  a.report = analyze(reader, trace_path, options);
  if (a.report.ad_tape) {
    reader.rewind();
    a.whatif = predict_policies(reader);
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
