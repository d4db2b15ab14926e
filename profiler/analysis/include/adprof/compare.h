// Metrics of a report, gates over them (`--fail-if 'peak > +5%'`, `--max-peak 64MiB`) and the
// diff of two reports. `adprof diff` and `adprof check` are thin views over this.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "adprof/report.h"

namespace adprof {

// Where a metric was read, for a person who has to find it: the step whose span holds the peak
// it is read at (-1: none holds it), and whether that step is a summarized one (outside a step
// window, `adprof run --steps A:B`: the writer's summary of the step, without its buffers).
// Known for peak and role.<role> (the trace's peak, trace_peak.h) and for device.peak and
// device.role.<role> (the device peak, trace_device_peak; never a summarized step's).
struct MetricSource {
  int64_t step = -1;
  bool summarized = false;
};

// Named numbers of a report: peak, allocations, bytes_allocated, temporaries,
// allocations_per_step, device.peak, device.reserved_peak, device.ooms, device.role.<role>
// (bytes at the device peak), role.<role> (bytes at the peak), phase.<phase> (peak while in that
// phase), op.<op> (bytes at the peak), op_allocations.<op>. peak and role.<role> are the
// trace's (trace_peak.h: under a step window, a summarized step's when higher); phase.<phase>
// and op.<op> those of the events recorded in full.
struct Metrics {
  std::map<std::string, double> values;
  std::map<std::string, MetricSource> sources;  // the metrics read at a peak (MetricSource)
  // Whether the run recorded device memory at all (records_device_memory): a device.* metric
  // of a run that recorded none is no measurement, and a gate on it is an input error.
  bool device_recorded = false;
};
Metrics report_metrics(const Report &report);

// Whether a run recorded any device memory: a device block or allocation, an allocator's
// reserve, an out-of-memory event. A run on the host alone (or on a device adprof does not see,
// docs/CUDA.md) records none, and its device figures are zeros nobody measured.
bool records_device_memory(const Report &report);

// A gate: METRIC OP VALUE, where OP is one of > >= < <= == and VALUE is a number with an
// optional unit (B, KiB, MiB, GiB, KB, MB, GB, %). A signed value (+5%, -1MiB) is compared with
// the change from the base report; an unsigned one with the new report's own value.
struct Gate {
  std::string text;
  std::string metric;
  std::string op;
  double value = 0;
  bool relative = false;  // value is a percentage of the base
  bool change = false;    // compare the change from the base, not the value itself
};
Gate parse_gate(const std::string &text);       // throws std::invalid_argument with a clear message
uint64_t parse_bytes(const std::string &text);  // "64MiB" -> 67108864; throws invalid_argument

struct GateResult {
  Gate gate;
  bool failed = false;
  double base = 0;
  double current = 0;
  // Where base and current were read (MetricSource), for the metrics read at a peak.
  bool sourced = false;
  MetricSource base_source, current_source;
  // "peak: 12.0 MiB -> 13.1 MiB (+9.2%) ..."; a value read in a summarized step says so:
  // "peak: 10.0 MiB in step 7, summarized, LIMIT BROKEN (fails when over 5.0 MiB)".
  std::string explanation;
};

// A gate on a figure the run did not record: a device.* gate on a run that recorded no device
// memory. Thrown by evaluate(): an input error (exit 2 in the CLI), never a pass. in_base: the
// base run is the one (adprof diff), not the new one.
struct UnrecordedMetric : std::invalid_argument {
  UnrecordedMetric(const std::string &what, bool in_base)
      : std::invalid_argument(what), in_base(in_base) {}
  bool in_base;
};

// base may be null for absolute gates (adprof check). Throws std::invalid_argument for an
// unknown metric or a change without a base, UnrecordedMetric for a figure not recorded.
GateResult evaluate(const Gate &gate, const Metrics *base, const Metrics &current);

struct DiffRow {
  std::string metric;
  double base = 0;
  double current = 0;
  bool bytes = false;    // render as bytes
  bool sourced = false;  // read at a peak: where, below
  MetricSource base_source, current_source;
};

struct ReportDiff {
  std::vector<DiffRow> rows;          // every metric in either report, in order
  std::vector<std::string> appeared;  // ops / labelled buffers live at the new peak only
  std::vector<std::string> vanished;  // ... at the base peak only
};
ReportDiff diff_reports(const Report &base, const Report &current);

std::string render_diff_text(const ReportDiff &diff, const std::vector<GateResult> &gates);
std::string render_diff_markdown(const ReportDiff &diff, const std::vector<GateResult> &gates);

// Loads a trace (analysed) or a report JSON, whichever the file is.
Report load_report(const std::string &path, const AnalyzeOptions &options = {});

}  // namespace adprof
