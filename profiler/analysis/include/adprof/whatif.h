// What-if analysis: replays the tape an AD engine recorded (the AD protocol,
// adprof/ad_protocol.h) with one memory policy switched on (or all of them) and predicts the host
// peak it would have had. See docs/WHATIF.md for the model of each
// policy and its measured accuracy.
//
// The prediction re-simulates the recorded host memory timeline: the recorded blocks keep their
// sizes, and the policy moves their births and deaths (a forward cache freed when its node's
// backward rule has run, a contribution added in place instead of copied, ...), suppresses
// blocks the policy would never allocate, or adds the few it would (an out-of-place gradient
// sum). Blocks of a tape that reuses its arena go back to a per-size idle pool, as an engine's
// arena does, so the predicted peak counts idle arena memory as the real run would.
//
// Two streaming passes over the trace; memory is bounded by the live blocks and the nodes of
// the tape generations in flight, never by the number of events.
#pragma once

#include <cstdint>
#include <functional>
// json_fwd: every report, CLI and GUI file includes this header; json.hpp itself took 2-3 s of
// each one's compile, and only the files that build JSON include it.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "adprof/ad_events.h"
#include "adprof/trace_reader.h"

namespace adprof {

// The checkpointing what-if: the longest chain of the tape checkpointed in sqrt(n) segments, one
// recomputed at a time in backward (docs/WHATIF.md).
struct CheckpointChain {
  uint64_t nodes = 0;              // tape nodes checkpointed (layers x ops_per_layer)
  uint64_t layers = 0;             // repeats of the layer's op sequence (n of the schedule)
  uint64_t ops_per_layer = 0;      // nodes per layer
  uint64_t segments = 0;           // about sqrt(layers)
  uint64_t generations = 0;        // tape generations checkpointed (each one's longest chain)
  uint64_t dropped_bytes = 0;      // outputs the forward no longer keeps
  uint64_t recomputed_bytes = 0;   // allocated again by the recomputation in backward
  std::vector<std::string> layer;  // op names of one layer ("affine", "tanh")
  // A chain of layers (an engine that describes its layers, ad_protocol.h version 2): the
  // labels of its first and last layers and of the layer holding them; the layers the schedule
  // checkpoints (every segment but the last).
  bool layered = false;
  std::string first, last, parent;
  uint64_t checkpointed_layers = 0;
};

struct PolicyPrediction {
  std::string name;             // "inplace_accumulation" (the protocol's stable name)
  std::string title;            // "in-place accumulation"
  std::string switch_on;        // the engine's words for switching it on (a finding's fix)
  std::string switch_off;       // ... and off (the what-if table's column)
  int id = -1;                  // adprof_ad_policy (-1: all)
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
  bool engine_predicted = false;  // from the engine's what-ifs of its compiled programs
};

struct WhatIf {
  std::string trace;
  bool ad_tape = false;  // the trace holds tape events of the AD protocol
  // The engine predicted what-ifs of its compiled programs (ad.arena.whatif,
  // ad.result_in_argument: ad_protocol.h version 6), applied to the recording like a tape's.
  bool programs = false;
  std::string reason;            // when neither: why nothing is predicted
  ad::EngineDescription engine;  // who recorded the tape (empty: it did not say)
  uint64_t measured_peak = 0;
  uint64_t tapes = 0;                                    // tape generations seen
  uint64_t recorded_bits_and = 0, recorded_bits_or = 0;  // policy bits over all tapes
  // Replaying the recording with nothing changed, through the same model: equal to
  // measured_peak unless the model lost track of a block (a check on the replay itself).
  uint64_t replayed_peak = 0;
  std::vector<PolicyPrediction> policies;  // one per policy of the shared list, in id order
  PolicyPrediction all;                    // every policy that was off, switched on together
};

// Predicts from an open trace (read from its start; rewound between the passes).
// `stage_progress`, when given, is told each pass's fraction read now and then (what it is, as
// AnalyzeOptions::stage_progress).
WhatIf predict_policies(TraceReader &reader,
                        const std::function<void(const char *, double)> &stage_progress = {});
WhatIf predict_policies(const std::string &trace_path);

// The prediction of one policy by stable name, title or the engine's switch-off words
// ("inplace_accumulation", "in-place accumulation", or what the engine said); nullptr if unknown.
// For findings: cite predicted_peak/saving next to the named naive behaviour.
const PolicyPrediction *find_policy(const WhatIf &w, const std::string &name_or_flag);

nlohmann::json to_json(const WhatIf &w);
std::string render_text(const WhatIf &w);

}  // namespace adprof
