// The steps of a trace recorded with a step window (`adprof run --steps A:B`; trace_format.h,
// "Step windows"): the writer's summary of each step outside the window, read into the
// report's steps beside the window's own, replayed ones.
#pragma once

#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace adprof {

// A kStepSummary event as a step of the report (labels resolved through `names`). False:
// its values do not make a summary (a role or label id out of range).
bool step_from_summary(const Event &e, const TraceReader &reader, const Replay &names,
                       StepSummary &out);

// The summaries in place of the replayed steps of the same number (the window's edges, whose
// chunks were written whole while the rest of the step was folded), every step in time order.
void merge_step_summaries(std::vector<StepSummary> &steps, std::vector<StepSummary> summaries);

}  // namespace adprof
