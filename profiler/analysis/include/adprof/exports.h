// Exports of a trace for other tools, all made in one pass over it (exports/export_pass.cpp):
// the observers of each export ride on one replay (replay_driver.h), on the report's pass
// (analyze_with.h) when an export needs the live set at the peak. `adprof export`,
// `adprof timeline` and the GUI's File > Export call these; none reads the trace itself.
//   Perfetto: Chrome trace event JSON (exports/perfetto.h)
//   folded:   folded stacks of the live bytes at the peak (exports/folded.h)
//   timeline CSV and SVG: the timeline of kTimelineExportSamples (timeline_csv(), timeline_svg())
//   memory snapshot: the pickle of torch_snapshot.h
//                            (torch_snapshot/torch_snapshot_write.cpp)
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "adprof/torch_snapshot.h"
#include "adprof/trace_reader.h"

namespace adprof {

// Where each export goes; a null stream: that export is not made.
struct ExportStreams {
  std::ostream *perfetto = nullptr;
  std::ostream *folded = nullptr;
  std::ostream *timeline_csv = nullptr;
  std::ostream *timeline_svg = nullptr;
  std::ostream *torch_snapshot = nullptr;  // binary: a pickle
};

struct ExportOptions {
  std::function<void(double)> progress;                      // fraction of the trace read
  std::function<void(const char *, double)> stage_progress;  // after the pass (symbolising)
};

struct ExportSummary {
  uint64_t events = 0;   // events read
  bool complete = true;  // the trace was read whole (TraceReader::end())
  std::string end_reason;
  SnapshotExportStats torch_snapshot;  // what the snapshot holds, when one was made
};

// Reads `reader` (opened on `trace_path`, not read yet) once and writes every export asked for.
// Throws TraceError as the reader does; what was written to the streams by then is partial.
ExportSummary write_exports(TraceReader &reader, const std::string &trace_path,
                            const ExportStreams &streams, const ExportOptions &options = {});

}  // namespace adprof
