// What-if analysis (whatif.h): the tape model (whatif/model.h), one planner per policy
// (whatif/plan_*.cpp, whatif/checkpoint.cpp), the simulation (whatif/simulation.cpp) and the
// rendering (whatif/render.cpp), composed here in two passes over the trace:
//
//   pass 1: follows every heap block as a sequence of logical storages (a malloc, or a take
//           from the engine's arena, starts one; a free, or a give back to the arena, ends it; a
//           storage is named by the index of the event that started it), and collects each
//           tape generation from the AD protocol's ad.tape.* events (whatif/tape_collector.h).
//           At each generation's end, a planner turns it, for every scenario (a set of policies
//           switched on), into a Plan: which storages are never allocated, which die earlier
//           (at which event), which live longer (held until some other storage dies), and which
//           virtual storages appear.
//   pass 2: replays the events again; each scenario applies its plan to the same storages
//           and keeps its own host total, with an arena model (idle buffers per size) for
//           storages the recording gave back to an arena. The scenario's peak is the largest
//           predicted total.
#include <algorithm>

#include "adprof/replay.h"
#include "adprof/replay_driver.h"
#include "adprof/whatif.h"
#include "pass.h"
#include "plan.h"
#include "render.h"
#include "simulation.h"
#include "tape_collector.h"

namespace adprof {

using namespace whatif;  // NOLINT(google-build-using-namespace): this file composes it

namespace {

// Plans one generation for every scenario.
void plan_generation(Gen &g, std::vector<Scenario> &sc, uint64_t available, VirtualIds &ids) {
  for (Scenario &s : sc) {
    if (s.chain) {
      if (!(available & kCheckpoint)) continue;
      Planner planner(g, 0, s.plan, ids);
      if (g.layers.empty())
        planner.checkpoint_chain();
      else
        planner.checkpoint_layers();
      continue;
    }
    const uint64_t flip = s.flip & ~g.bits & available;
    if (flip) Planner(g, flip, s.plan, ids).run();
  }
}

}  // namespace

whatif::Pass::Pass(const Replay &replay)
    : tape_(
          replay, [this](Gen &g, uint64_t available) { plan_generation(g, sc_, available, ids_); },
          [this](const GradEvent &e, uint64_t available) {
            for (size_t i = 0; i < sc_.size(); ++i) {
              const uint64_t flip = sc_[i].flip & available;
              if (flip & kFused)  // the step frees the gradient: zeroing it is moot
                fused_steps_[i].on(e, sc_[i].plan);
              else if (flip & kFreeGradients)
                free_gradients_[i].on(e, sc_[i].plan);
            }
          }) {
  // Scenarios: 0 the recording as is; then one per predictable policy; then all of them.
  sc_.emplace_back();
  const auto &policies = ad::policy_names();
  policy_scenario_.assign(policies.size(), -1);
  for (size_t i = 0; i < policies.size(); ++i) {
    const uint64_t bit = 1ULL << policies[i].id;
    if (!(bit & kPredictable)) continue;
    policy_scenario_[i] = static_cast<int>(sc_.size());
    sc_.emplace_back();
    sc_.back().flip = bit;
  }
  all_scenario_ = static_cast<int>(sc_.size());
  sc_.emplace_back();
  sc_.back().flip = kPredictable | kReuse;
  // Checkpointing: a program change (the longest chain checkpointed in sqrt(n) segments), so
  // a scenario of its own, planned for every generation whatever its policy bits.
  chain_scenario_ = static_cast<int>(sc_.size());
  sc_.emplace_back();
  sc_.back().chain = true;
  for (size_t i = 0; i < policies.size(); ++i)
    if ((1ULL << policies[i].id) == kCheckpoint) policy_scenario_[i] = chain_scenario_;
  free_gradients_.resize(sc_.size());
  fused_steps_.assign(sc_.size(), FusedSteps(ids_));
}

WhatIf whatif::Pass::finish(TraceReader &reader, uint64_t events, uint64_t measured_peak,
                            const std::function<void(double)> &progress) {
  WhatIf w;
  w.measured_peak = measured_peak;
  TapeCollector &tape = tape_;
  std::vector<Scenario> &sc = sc_;
  const auto &policies = ad::policy_names();
  const std::vector<int> &policy_scenario = policy_scenario_;
  const int all_scenario = all_scenario_, chain_scenario = chain_scenario_;
  tape.finish(events);
  w.ad_tape = tape.ad_tape;
  w.tapes = tape.tapes;
  w.recorded_bits_and = tape.bits_and;
  w.recorded_bits_or = tape.bits_or;
  const ad::EngineDescription engine = tape.engine();
  const uint64_t available = available_policies(engine);
  for (Scenario &s : sc)
    if (s.flip & kNativeIndices) plan_no_index_widening(tape.widened, s.plan);
  // The engine's own what-ifs of its compiled programs (version 6): checkpointing's in the
  // checkpointing scenario, the others in their policy's scenarios and "all".
  w.programs = tape.programs.any();
  std::vector<ProgramPlans::Applied> applied(ADPROF_AD_POLICY_COUNT);
  for (Scenario &s : sc)
    for (int id = 0; id < ADPROF_AD_POLICY_COUNT; ++id) {
      const uint64_t bit = 1ULL << id;
      if (!(available & bit) || !tape.programs.predicts(id)) continue;
      if (bit == kCheckpoint ? s.chain : (s.flip & bit) != 0) {
        ProgramPlans::Applied a = tape.programs.apply(id, s.plan, ids_);
        if (bit == kCheckpoint || s.flip == bit) applied[static_cast<size_t>(id)] = a;
      }
    }

  // ---- pass 2 ----
  Replay replay;  // its names serve the explanations
  simulate(reader, sc, tape.gave, tape.activated_at(), replay, progress);

  // ---- results ----
  w.replayed_peak = sc[0].peak;
  const uint64_t measured = w.measured_peak;
  auto fill = [&](PolicyPrediction &p, const Scenario &s) {
    p.measured_peak = measured;
    p.predicted_peak = s.peak;
    // The model's own error on the recording (replayed vs measured) is taken out.
    const int64_t offset = static_cast<int64_t>(measured) - static_cast<int64_t>(w.replayed_peak);
    p.predicted_peak =
        static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(s.peak) + offset));
    p.saving = static_cast<int64_t>(measured) - static_cast<int64_t>(p.predicted_peak);
    p.saving_fraction =
        measured ? static_cast<double>(p.saving) / static_cast<double>(measured) : 0;
  };
  w.engine = engine;
  const std::string no_tape = "no AD tape in this trace (no " ADPROF_AD_TAPE_BEGIN " events)";
  for (size_t i = 0; i < policies.size(); ++i) {
    const ad::PolicyName &d = policies[i];
    const ad::EnginePolicy &ep = engine.policy(d.id);
    // A policy added after version 1 is listed only for an engine that describes it (the table
    // and JSON of an engine that knows only the first ones stay as they were).
    if (!ep.described && d.since > 1) continue;
    PolicyPrediction p;
    p.name = d.name;
    p.title = d.title;
    p.switch_on = ep.switch_on;
    p.switch_off = ep.switch_off;
    p.id = d.id;
    const uint64_t bit = 1ULL << d.id;
    p.recorded_on = w.ad_tape && (w.recorded_bits_and & bit);
    p.recorded_mixed = w.ad_tape && !p.recorded_on && (w.recorded_bits_or & bit);
    p.measured_peak = measured;
    if ((available & bit) && tape.programs.predicts(d.id) && policy_scenario[i] >= 0) {
      // The engine's prediction for its compiled programs, applied to the recording.
      const Scenario &s = sc[static_cast<size_t>(policy_scenario[i])];
      p.applicable = true;
      p.engine_predicted = true;
      fill(p, s);
      p.explanation = explain_programs(d.id, applied[static_cast<size_t>(d.id)]);
    } else if (!w.ad_tape && !w.programs) {
      p.reason = no_tape;
    } else if (!(available & bit)) {
      p.reason = "the engine (" + engine.name + ") does not describe this policy";
    } else if (!w.ad_tape) {
      p.reason = no_tape;
    } else if (bit == kCheckpoint && tape.checkpoint_nodes) {
      p.reason = "already on in the recording (it has checkpoint segments)";
    } else if (p.recorded_on && bit != kCheckpoint) {
      p.reason = "already on in the recording";
    } else if (bit == kCheckpoint &&
               !sc[static_cast<size_t>(chain_scenario)].plan.chain.generations) {
      p.reason =
          "no chain of at least 2 layers in the tape (nodes each consuming the previous one's "
          "output alone)";
    } else if (bit == kFreeGradients && !tape.grad_zeroed) {
      p.reason =
          "the program never zeroes a gradient buffer in place (no " ADPROF_AD_TAPE_GRAD_ZEROED
          " events): nothing to free";
    } else if (bit == kNativeIndices && tape.widened.empty()) {
      // A row of "0 widened copies not made" read as if the program widened and it did not.
      p.reason = "no index array widened in the recording (no " ADPROF_AD_LABEL_INDEX_WIDENED
                 " copies): nothing to remove";
    } else if (bit == kFused && tape.grad_ready && !tape.optimizer_steps) {
      p.reason =
          "no separate optimizer step in this trace (no " ADPROF_AD_TAPE_OPTIMIZER_END " events)";
    } else if (policy_scenario[i] < 0) {
      p.reason =
          "not predictable from this trace: the reusable tape changes how often memory "
          "is allocated, not what is live (peak within an arena's idle buffers)";
    } else {
      const Scenario &s = sc[static_cast<size_t>(policy_scenario[i])];
      p.applicable = true;
      fill(p, s);
      p.explanation =
          explain(d.id, s.plan, replay, tape.widened.size(), tape.widened_bytes, p.chain);
      if (bit == kCheckpoint && p.chain.layered) {  // the engine's words name the chain
        const std::string &first = p.chain.first;
        const size_t dot = first.rfind('.');
        const std::string container = dot == std::string::npos ? first : first.substr(0, dot);
        const std::string root = first.substr(0, first.find('.'));
        const std::string container_path =
            container.size() > root.size() ? container.substr(root.size() + 1) : "";
        const std::vector<std::pair<std::string, std::string>> values = {
            {"container", container},
            {"container_path", container_path},
            {"root", root},
            {"first", p.chain.first},
            {"last", p.chain.last},
            {"parent", p.chain.parent},
            {"count", std::to_string(p.chain.layers)},
            {"segments", std::to_string(p.chain.segments)},
            {"checkpointed", std::to_string(p.chain.checkpointed_layers)}};
        p.switch_on = ad::fill_wording(p.switch_on, values);
        p.switch_off = ad::fill_wording(p.switch_off, values);
      }
    }
    w.policies.push_back(std::move(p));
  }
  w.all.name = "all";
  w.all.title = "all policies on";
  w.all.measured_peak = measured;
  if (!w.ad_tape && !w.programs) {
    w.all.reason = no_tape;
  } else if ((w.recorded_bits_and & kPredictable & available) == (kPredictable & available)) {
    w.all.reason = "every predictable policy is already on";
  } else {
    w.all.applicable = true;
    fill(w.all, sc[static_cast<size_t>(all_scenario)]);
    std::string on;
    // Only the policies the "all" scenario switches: checkpointing is a program change with a
    // row of its own (listing it here read "... checkpointing ...; checkpointing not included").
    for (const PolicyPrediction &p : w.policies)
      if (p.applicable && p.id >= 0 && ((1ULL << p.id) & kPredictable))
        on += (on.empty() ? "" : ", ") + p.title;
    w.all.explanation = "switched on together: " + on;
    if (!(w.recorded_bits_and & kReuse) && (available & kReuse))
      w.all.explanation += ", and the reusable tape's arena (idle buffers kept by size)";
    w.all.explanation +=
        "; checkpointing not included (the program must mark its segments: see its own row)";
  }
  if (!w.ad_tape && !w.programs) w.reason = no_tape;
  return w;
}

WhatIf predict_policies(const std::string &trace_path) {
  TraceReader reader(trace_path);
  WhatIf w = predict_policies(reader);
  w.trace = trace_path;
  return w;
}

WhatIf predict_policies(TraceReader &reader,
                        const std::function<void(const char *, double)> &stage_progress) {
  // ---- pass 1, alone (analyze_all rides it on the report's pass instead) ----
  Replay replay;
  Pass pass(replay);
  uint64_t measured = 0;
  ReplayDriver driver(reader, replay);
  auto on_heap = [&](const Event &e, const Replay::HeapChange &c) {
    if (e.type == format::EventType::kAlloc || c.block)  // what Replay::apply says changed
      measured = std::max(measured, replay.host_live());
    pass.on_heap(e, c, driver.index());
  };
  auto on_event = [&](const Event &e, bool changed) {
    if (changed) measured = std::max(measured, replay.host_live());
    pass.on_event(e, driver.index());
  };
  auto pass1 = observe(on_heap, on_event);
  DriveOptions drive;
  std::function<void(double)> pass2_progress;
  if (stage_progress) {
    drive.progress = [&](double f) { stage_progress("reading the trace", f); };
    pass2_progress = [&](double f) { stage_progress("predicting each policy (what-if)", f); };
  }
  const uint64_t events = driver.run(pass1, drive);
  return pass.finish(reader, events, measured, pass2_progress);
}

}  // namespace adprof
