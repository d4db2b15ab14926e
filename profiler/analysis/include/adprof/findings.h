// Plain-language findings: each names what AD added at the peak, the evidence, and the switch
// or change that would remove it. Computed from a Report (its live set at the peak and its
// totals), so they read the same from the CLI, the GUI and a report JSON.
#pragma once

#include <vector>

#include "adprof/report.h"

namespace adprof {

std::vector<Finding> find_findings(const Report &report);

}  // namespace adprof
