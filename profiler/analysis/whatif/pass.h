// Pass 1 of the what-if analysis as an observer of the replay driver, and what follows it
// (pass 2 and the results). predict_policies runs it alone; analyze_all (ad_analysis.h) rides it
// on the report's own pass, so a report with its prediction reads the trace twice, not three
// times. Until the trace names something it costs one test per event.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "adprof/whatif.h"
#include "plan.h"
#include "simulation.h"
#include "tape_collector.h"

namespace adprof::whatif {

class Pass {
 public:
  explicit Pass(const Replay &replay);
  Pass(const Pass &) = delete;
  Pass &operator=(const Pass &) = delete;

  // Event number `index`, after the replay applied it.
  __attribute__((always_inline)) void on_heap(const Event &e, const Replay::HeapChange &c,
                                              uint64_t index) {
    if (tape_.active()) tape_.on_heap(e, c, index);
  }
  void on_event(const Event &e, uint64_t index) { tape_.on_event(e, index); }
  bool ad_tape() const { return tape_.ad_tape; }
  // Pass 2 has something to predict: a tape, or an engine's what-ifs of its compiled programs.
  bool predicts() const { return tape_.ad_tape || tape_.programs.any(); }

  // Pass 1 ended after `events` events; runs pass 2 (reads `reader` from its start again) and
  // returns the predictions. `measured_peak`: the recording's host peak.
  // `progress`, when given, is told the fraction of pass 2's reading done now and then.
  WhatIf finish(TraceReader &reader, uint64_t events, uint64_t measured_peak,
                const std::function<void(double)> &progress = {});

 private:
  VirtualIds ids_;  // one counter per analysis: two analyses at once share nothing
  std::vector<Scenario> sc_;
  std::vector<int> policy_scenario_;
  int all_scenario_ = 0, chain_scenario_ = 0;
  // Trace-level planners of parameters' gradients (version 2), one per scenario.
  std::vector<FreeGradients> free_gradients_;
  std::vector<FusedSteps> fused_steps_;
  TapeCollector tape_;
};

}  // namespace adprof::whatif
