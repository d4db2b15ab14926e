// What-if analysis: replays a recorded adcore run with one memory policy switched on (or all of
// them) and predicts the host peak it would have had. See docs/WHATIF.md for the model of each
// policy and its measured accuracy.
//
// The prediction re-simulates the recorded host memory timeline: the recorded blocks keep their
// sizes, and the policy moves their births and deaths (a forward cache freed when its node's
// backward rule has run, a contribution added in place instead of copied, ...), suppresses
// blocks the policy would never allocate, or adds the few it would (an out-of-place gradient
// sum). Blocks of a tape that reuses its arena go back to a per-size idle pool, as adcore's
// arena does, so the predicted peak counts idle arena memory as the real run would.
//
// Two streaming passes over the trace; memory is bounded by the live blocks and the nodes of
// the tape generations in flight, never by the number of events.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "adprof/trace_reader.h"

namespace adprof {

// The checkpointing what-if: the longest chain of the tape run through adcore's
// checkpoint_sequential with its sqrt(n) schedule (docs/WHATIF.md).
struct CheckpointChain {
  uint64_t nodes = 0;              // tape nodes checkpointed (layers x ops_per_layer)
  uint64_t layers = 0;             // repeats of the layer's op sequence (n of the schedule)
  uint64_t ops_per_layer = 0;      // nodes per layer
  uint64_t segments = 0;           // about sqrt(layers), as adcore::sqrt_schedule
  uint64_t generations = 0;        // tape generations checkpointed (each one's longest chain)
  uint64_t dropped_bytes = 0;      // outputs the forward no longer keeps
  uint64_t recomputed_bytes = 0;   // allocated again by the recomputation in backward
  std::vector<std::string> layer;  // op names of one layer ("affine", "tanh")
};

struct PolicyPrediction {
  std::string name;             // "inplace_accumulation" (the adcore::Options field)
  std::string title;            // "in-place accumulation"
  std::string flag;             // the sample switch that turns it off: "--no-inplace-accumulation"
  int bit = -1;                 // policy bit in adcore.tape.begin / backward_begin (-1: all)
  bool recorded_on = false;     // on in every tape of the recording
  bool recorded_mixed = false;  // on in some tapes, off in others
  bool applicable = false;      // a prediction was made (false: see reason)
  std::string reason;           // why there is no prediction ("already on", "not predictable ...")
  uint64_t measured_peak = 0;   // host peak of the recording (= adprof report's peak)
  uint64_t predicted_peak = 0;  // host peak with the switch on
  int64_t saving = 0;           // measured - predicted (bytes; negative: the policy costs)
  double saving_fraction = 0;   // saving / measured
  std::string explanation;      // one line: what changes, in bytes and buffers
  CheckpointChain chain;        // checkpointing only, when applicable: the chain and schedule
};

struct WhatIf {
  std::string trace;
  bool adcore_tape = false;  // the trace holds adcore tape annotations
  std::string reason;        // when !adcore_tape: why nothing is predicted
  uint64_t measured_peak = 0;
  uint64_t tapes = 0;                                    // tape generations seen
  uint64_t recorded_bits_and = 0, recorded_bits_or = 0;  // policy bits over all tapes
  // Replaying the recording with nothing changed, through the same model: equal to
  // measured_peak unless the model lost track of a block (a check on the replay itself).
  uint64_t replayed_peak = 0;
  std::vector<PolicyPrediction> policies;  // one per policy, adcore's order
  PolicyPrediction all;                    // every policy that was off, switched on together
};

// Predicts from an open trace (read from its start; rewound between the passes).
WhatIf predict_policies(TraceReader &reader);
WhatIf predict_policies(const std::string &trace_path);

// The prediction of one policy by name or flag ("inplace_accumulation", "in-place
// accumulation", "--no-inplace-accumulation"); nullptr if unknown. For findings: cite
// predicted_peak/saving next to the named naive behaviour.
const PolicyPrediction *find_policy(const WhatIf &w, const std::string &name_or_flag);

nlohmann::json to_json(const WhatIf &w);
std::string render_text(const WhatIf &w);

}  // namespace adprof
