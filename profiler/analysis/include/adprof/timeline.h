// Live memory over time, for `adprof timeline`, the GUI's chart and the Perfetto export.
// Samples are taken at every change and thinned on the fly (adjacent pairs merge keeping the
// higher one), so the series stays within max_samples and still shows every peak's height. Its
// last sample is the state after the window's last change (the live bytes at the trace's end).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adprof/call_stacks.h"
#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace adprof {

struct TimelineSample {
  double time = 0;
  uint64_t host = 0;
  std::array<uint64_t, kRoleCount> by_role{};
  std::array<uint64_t, kPhaseCount> by_phase{};  // by phase of allocation
  std::vector<uint64_t> by_op;                   // tracked ops, then "other ops"
  std::vector<uint64_t> by_site;                 // tracked allocation sites (traces with stacks)
  uint64_t device = 0;
  uint64_t device_reserved = 0;
};

struct PhaseBand {
  double start = 0;
  double end = 0;
  int phase = 0;
};

struct StepMark {
  double time = 0;
  uint64_t step = 0;
};

struct Timeline {
  std::vector<TimelineSample> samples;
  std::vector<PhaseBand> phases;  // the process's phase (Replay::process_phase)
  std::vector<StepMark> steps;
  std::vector<std::string> op_names;    // names of the by_op series (last: "other ops")
  std::vector<std::string> site_names;  // names of the by_site series (sites.h)
  std::string memory = "host memory";   // what `host` counts (TraceHeader::memory)
  double start = 0;                     // the window, seconds since the start of the recording
  double end = 0;
  uint64_t peak = 0;
  double peak_time = 0;
  uint64_t device_peak = 0;
  uint64_t events = 0;
};

struct TimelineOptions {
  size_t max_samples = 4096;
  double from = 0;  // window in seconds; samples outside it are not kept
  double to = 1e300;
  std::vector<std::string> tracked_ops;  // op kinds to give their own by_op series
  // Allocation sites (SiteSummary::site, traces recorded with stacks) to give a by_site series:
  // the live bytes of the blocks each allocated (symbolised in the pass, call_stacks.h).
  std::vector<std::string> tracked_sites;
  std::function<void(double)> progress;
  std::function<bool()> cancelled;  // polled now and then; true stops early
};

Timeline build_timeline(TraceReader &reader, const TimelineOptions &options = {});

// build_timeline()'s pass as an observer of a pass that another runs (replay_driver.h), so that
// a timeline rides on it instead of reading the trace again (the exports, exports/). Give it
// every event after `replay` applied it: stop_before() first (the timeline's clock; true past
// the window), then on_heap() or on_event(); finish() once at the end.
class TimelineBuilder {
 public:
  TimelineBuilder(TraceReader &reader, const Replay &replay, const TimelineOptions &options);
  ~TimelineBuilder();
  TimelineBuilder(const TimelineBuilder &) = delete;
  TimelineBuilder &operator=(const TimelineBuilder &) = delete;
  bool stop_before(const Event &e);
  void on_heap(const Event &e, const Replay::HeapChange &c);
  void on_event(const Event &e, bool changed);
  Timeline finish();

 private:
  class Impl;
  friend Timeline build_timeline(TraceReader &reader, const TimelineOptions &options);
  std::unique_ptr<Impl> impl_;
};

// Writes the timeline as CSV (time_s, host, one column per role, phase and op, device).
std::string timeline_csv(const Timeline &t);

}  // namespace adprof
