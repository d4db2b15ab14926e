// Chrome trace event JSON (ui.perfetto.dev, chrome://tracing), written as the one pass goes
// (export_pass.cpp): op slices per thread (pid 1), phase slices per thread (pid 2) and step marks
// as the events come, streamed; after the pass, the phases still open closed at the last event,
// a counter track of live bytes by role (a timeline of kCounterSamples riding on the same pass),
// for a trace recorded with call stacks the largest buffers live at the peak as instant events
// at their allocation with site and stack (pid 3, from the report), and the track names.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/timeline.h"
#include "adprof/trace_reader.h"

namespace adprof {

class PerfettoWriter {
 public:
  static constexpr size_t kCounterSamples = 20000;  // the counter track's timeline
  static constexpr size_t kMaxBuffers = 1000;       // instants of buffers live at the peak

  // Writes the document's head. `replay` is the pass's replay (op names, thread names).
  PerfettoWriter(std::ostream &out, const TraceReader &reader, const Replay &replay);

  // Every event, after the replay applied it; heap events need only note_time().
  void note_time(const Event &e) { last_ticks_ = e.ticks; }
  void on_event(const Event &e);

  // After the pass: `counter` is the live-bytes timeline; `report` the report of the same pass
  // when the trace has call stacks (null otherwise).
  void finish(const Timeline &counter, const Report *report);

 private:
  void emit(const std::string &event);

  std::ostream &out_;
  const TraceReader &reader_;
  const Replay &replay_;
  bool first_ = true;
  std::vector<int> phase_open_;  // by thread
  uint64_t last_ticks_ = Event{}.ticks;
};

}  // namespace adprof
