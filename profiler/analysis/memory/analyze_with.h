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

}  // namespace adprof
