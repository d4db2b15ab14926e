// analyze() on a replay the caller owns, with an AD-layer observer riding on the same pass:
// ad_analysis.cpp gives it the what-if's pass 1 (whatif/pass.h), so a report and its prediction
// read the trace twice instead of three times. `ad_pass` may be null (analyze() itself).
#pragma once

#include <string>

#include "adprof/report.h"

namespace adprof {
namespace whatif {
class Pass;
}

Report analyze_with(TraceReader &reader, const std::string &trace_path,
                    const AnalyzeOptions &options, Replay &replay, whatif::Pass *ad_pass);

// An observer riding on analyze()'s pass (the exports, exports/export_pass.cpp): it sees every
// event after `replay` applied it, as a replay driver's observer does (replay_driver.h).
class PassRider {
 public:
  virtual ~PassRider() = default;
  virtual void on_heap(const Event &e, const Replay::HeapChange &c) = 0;
  virtual void on_event(const Event &e, bool changed) = 0;
};

Report analyze_with_rider(TraceReader &reader, const std::string &trace_path,
                          const AnalyzeOptions &options, Replay &replay, PassRider &rider);

}  // namespace adprof
