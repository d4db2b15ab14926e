// A job's ranks on one time axis (job_lanes.h): each process's timeline rides on its report's
// pass (analyze_with_rider), the job is assembled from the facts, and each lane's times are
// moved onto the job's wall clock by the difference of the processes' start times.
#include "adprof/job_lanes.h"

#include <algorithm>
#include <map>
#include <optional>

#include "memory/analyze_with.h"

namespace adprof::job {

namespace {

// A timeline riding on the report's pass: its window is the whole trace, so it never stops it.
class TimelineRider final : public PassRider {
 public:
  TimelineRider(TraceReader &reader, const Replay &replay, const TimelineOptions &options)
      : builder_(reader, replay, options) {}
  void on_heap(const Event &e, const Replay::HeapChange &c) override {
    builder_.stop_before(e);
    builder_.on_heap(e, c);
  }
  void on_event(const Event &e, bool changed) override {
    builder_.stop_before(e);
    builder_.on_event(e, changed);
  }
  Timeline finish() { return builder_.finish(); }

 private:
  TimelineBuilder builder_;
};

}  // namespace

JobLanes analyze_job_lanes(const std::vector<std::string> &traces, const AnalyzeOptions &options,
                           const LaneOptions &lane_options) {
  std::vector<Process> processes;
  std::map<std::string, Timeline> timelines;  // by trace: assemble_job() reorders the processes
  for (size_t i = 0; i < traces.size(); ++i) {
    Process p;
    p.trace = traces[i];
    AnalyzeOptions o = options;
    o.on_annotation = [&p](const Event &e, const Replay &replay) { read_fact(e, replay, p); };
    if (lane_options.progress)
      o.progress = [&](double f) {
        lane_options.progress((static_cast<double>(i) + f) / static_cast<double>(traces.size()));
      };
    TraceReader reader(p.trace);
    p.run_id = reader.header().run_id;
    p.pid = reader.header().pid;
    p.start_wall_ns = reader.header().start_wall_ns;
    Replay replay;
    TimelineOptions timeline_options;
    timeline_options.max_samples = lane_options.max_samples;
    TimelineRider rider(reader, replay, timeline_options);
    p.report = analyze_with_rider(reader, p.trace, o, replay, rider);
    timelines[p.trace] = rider.finish();
    processes.push_back(std::move(p));
  }
  JobLanes out;
  out.job = assemble_job(std::move(processes));
  std::vector<size_t> shown = out.job.ranks();
  if (shown.empty())
    for (size_t i = 0; i < out.job.processes.size(); ++i) shown.push_back(i);
  if (shown.empty()) return out;
  out.start_wall_ns = out.job.processes[shown[0]].start_wall_ns;
  for (size_t i : shown)
    out.start_wall_ns = std::min(out.start_wall_ns, out.job.processes[i].start_wall_ns);
  const auto outlier = out.job.outlier();
  out.outlier_on_device = outlier && outlier->memory == Memory::kDevice;
  for (size_t i : shown) {
    const Process &p = out.job.processes[i];
    Lane lane;
    lane.process = i;
    lane.offset = static_cast<double>(p.start_wall_ns - out.start_wall_ns) * 1e-9;
    lane.timeline = std::move(timelines[p.trace]);
    out.end = std::max(out.end, lane.offset + lane.timeline.end);
    out.peak = std::max(out.peak, lane.timeline.peak);
    if (outlier && outlier->high == i) out.outlier_lane = static_cast<int>(out.lanes.size());
    out.lanes.push_back(std::move(lane));
  }
  return out;
}

}  // namespace adprof::job
