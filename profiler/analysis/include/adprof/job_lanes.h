// A job's ranks on one time axis (adprof-gui's job view): each rank's memory over time, moved
// onto the job's wall clock. Each process's timeline rides on its report's pass, so the job
// view reads each trace once, as `adprof report --job` does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adprof/job.h"
#include "adprof/timeline.h"

namespace adprof::job {

// One lane: a process's memory over time.
struct Lane {
  size_t process = 0;  // index into Job::processes
  // Seconds from the job's start to this process's start: its timeline's 0 on the job's axis
  // (a sample at `time` is at `offset + time` on the job's clock).
  double offset = 0;
  Timeline timeline;  // seconds since the process's own start, as build_timeline() makes it
};

struct JobLanes {
  Job job;
  // The job's clock: 0 is the earliest start (wall clock, from the traces' headers) among the
  // lanes' processes. Processes of several machines share it as far as their clocks agree.
  uint64_t start_wall_ns = 0;
  double end = 0;           // the last lane's end, in seconds on the job's clock
  uint64_t peak = 0;        // the highest lane's peak: one scale for every lane
  std::vector<Lane> lanes;  // one per rank, by rank; a run without ranks: one per process
  // The lane of the rank with the highest peak (Job::outlier: the device's when the ranks hold
  // device memory); -1: fewer than two ranks.
  int outlier_lane = -1;
  bool outlier_on_device = false;
};

struct LaneOptions {
  size_t max_samples = 2048;  // per lane (TimelineOptions::max_samples)
  // The fraction of the job read (all traces together), called now and then.
  std::function<void(double)> progress;
};

// Each trace's report and timeline (one pass each) and facts, assembled as analyze_job() does.
// Throws TraceError for an unreadable trace or traces that are not one job.
JobLanes analyze_job_lanes(const std::vector<std::string> &traces, const AnalyzeOptions &options,
                           const LaneOptions &lane_options = {});

}  // namespace adprof::job
