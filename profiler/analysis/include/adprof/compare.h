// Metrics of a report, gates over them (`--fail-if 'peak > +5%'`, `--max-peak 64MiB`) and the
// diff of two reports. `adprof diff` and `adprof check` are thin views over this.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "adprof/report.h"

namespace adprof {

// Named numbers of a report: peak, allocations, bytes_allocated, temporaries,
// allocations_per_step, device.peak, device.reserved_peak, role.<role> (bytes at the peak),
// phase.<phase> (peak while in that phase), op.<op> (bytes at the peak), op_allocations.<op>.
// peak and role.<role> are the trace's (trace_peak.h: under a step window, a summarized step's
// when higher); phase.<phase> and op.<op> those of the events recorded in full.
std::map<std::string, double> report_metrics(const Report &report);

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
  std::string explanation;  // "peak: 12.0 MiB -> 13.1 MiB (+9.2%) > +5%"
};
// base may be null for absolute gates (adprof check).
GateResult evaluate(const Gate &gate, const std::map<std::string, double> *base,
                    const std::map<std::string, double> &current);

struct DiffRow {
  std::string metric;
  double base = 0;
  double current = 0;
  bool bytes = false;  // render as bytes
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
