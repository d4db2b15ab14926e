// What-if rendering helpers shared by the analysis (render.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "adprof/whatif.h"
#include "plan.h"
#include "program_plans.h"

namespace adprof {
class Replay;
namespace whatif {

std::string mib(double bytes);  // "1.5 MiB"
// The one line of a prediction the engine made for its compiled programs (program_plans.h).
std::string explain_programs(int policy, const ProgramPlans::Applied &a);
// One line on what policy `id` changed in bytes and buffers; the checkpointing chain's figures
// go to `chain`.
std::string explain(int id, const Plan &plan, const Replay &replay, uint64_t widened,
                    uint64_t widened_bytes, CheckpointChain &chain);

}  // namespace whatif
}  // namespace adprof
