// Pass 1 of the what-if analysis: reads the tape generations off the AD protocol's events
// (through ad::Decoder) and the storages off the heap events, and hands each generation to
// `plan` (with the policies the engine has) when it ends (or, for a cut trace, at finish()). An
// observer of the replay: the caller applies each event to its Replay first, then calls on_event.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include "adprof/ad_events.h"
#include "adprof/replay.h"
#include "model.h"
#include "plan.h"
#include "program_plans.h"

namespace adprof::whatif {

class TapeCollector {
 public:
  using PlanFn = std::function<void(Gen &, uint64_t available)>;
  // Parameters' gradients and the optimizer's steps (version 2), with the policies available.
  using GradFn = std::function<void(const GradEvent &, uint64_t available)>;
  TapeCollector(const Replay &replay, PlanFn plan, GradFn grads = {})
      : replay_(replay),
        decoder_(replay),
        plan_(std::move(plan)),
        grads_(std::move(grads)),
        tracker_(replay) {}

  // Event number `index` (from 1), already applied to the replay. Nothing is followed until
  // the trace names something (the first name event: any engine talks through names), so a
  // plain program costs one test per event; then the replay's live blocks are taken over.
  void on_event(const Event &e, uint64_t index) {
    if (!active_) {
      if (e.type != format::EventType::kName) return;
      activate(index);
    }
    follow(e, tracker_.apply(e, index), index);
  }
  // A heap allocation or free (Replay::is_heap_event), `c` what the replay did with it.
  void on_heap(const Event &e, const Replay::HeapChange &c, uint64_t index) {
    if (active_) follow(e, tracker_.apply_heap(e, c, index), index);
  }
  bool active() const { return active_; }
  // The event at which following began (0: never).
  uint64_t activated_at() const { return activated_at_; }
  // The end of the trace: generations never ended (a cut trace) are planned as seen.
  void finish(uint64_t index);

  ad::EngineDescription engine() const { return decoder_.engine(); }

  // What the recording says, for the results.
  bool ad_tape = false;                // it has tape events
  uint64_t tapes = 0;                  // tape generations
  uint64_t bits_and = 0, bits_or = 0;  // policy masks over all generations
  bool checkpoint_nodes = false;       // it has checkpoint segments
  std::unordered_set<uint64_t> gave;   // storages the recording gave back to an arena
  std::vector<uint64_t> widened;       // storages labelled ad.index_widened
  uint64_t widened_bytes = 0;
  // Version 2: gradient buffers zeroed in place, gradients ready, separate optimizer steps.
  uint64_t grad_zeroed = 0, grad_ready = 0, optimizer_steps = 0;
  // Version 6: what-ifs the engine of compiled programs predicted for itself.
  ProgramPlans programs;

 private:
  ThreadState &thread(uint32_t t) {
    if (t >= threads_.size()) threads_.resize(t + 1);
    return threads_[t];
  }

  void activate(uint64_t index);
  void follow(const Event &e, const Change &c, uint64_t index);

  bool active_ = false;
  uint64_t activated_at_ = 0;
  const Replay &replay_;
  ad::Decoder decoder_;
  PlanFn plan_;
  GradFn grads_;
  std::unordered_set<uint64_t> watched_;  // zeroed gradient buffers: their deaths are reported
  // A separate optimizer step in progress: what it allocated (storage, size, index) and which
  // of those died in it (storage -> index), for its largest transient.
  bool in_step_ = false;
  std::vector<Birth> step_births_;
  std::unordered_map<uint64_t, uint64_t> step_deaths_;
  uint64_t step_transient_peak() const;
  Tracker tracker_;
  std::vector<ThreadState> threads_;
  std::vector<std::unique_ptr<Gen>> open_;  // generations in flight
  bool first_bits_ = true;
  bool watching_arenas_ = false;  // an arena was described: follow its blocks' labels
};

}  // namespace adprof::whatif
