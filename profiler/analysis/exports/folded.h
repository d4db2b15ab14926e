// Folded stacks of the live bytes at the peak ("frame;frame;frame BYTES" per line), the input of
// flamegraph.pl, inferno and speedscope: made from the report's live set at the peak, so they
// ride on the report's pass (export_pass.cpp).
#pragma once

#include <string>

#include "adprof/report.h"

namespace adprof {

// Recorded with call stacks (Report::stacks, Report::peak_stacks: AnalyzeOptions::folded_stacks
// asked for them): the allocations' frames, outermost first. Otherwise the AD context of each
// buffer: "phase;op;role[;label] BYTES", op without its instance, spaces as '_', sorted.
std::string folded_stacks(const Report &r);

}  // namespace adprof
