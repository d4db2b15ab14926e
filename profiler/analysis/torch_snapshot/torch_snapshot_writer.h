// A trace as a memory snapshot (torch_snapshot.h), made by an observer of the one export pass
// (exports/export_pass.cpp, `adprof export`'s snapshot): it keeps every allocation and
// free as the pass goes, and writes the pickle after it from the replay at the trace's end
// (torch_snapshot_write.cpp says what is written).
#pragma once

#include <memory>
#include <string>

#include "adprof/replay.h"
#include "adprof/torch_snapshot.h"
#include "adprof/trace_reader.h"

namespace adprof {

class TorchSnapshotWriter {
 public:
  // `replay` is the pass's replay (names, the blocks live at the end).
  TorchSnapshotWriter(const TraceReader &reader, const Replay &replay);
  ~TorchSnapshotWriter();
  TorchSnapshotWriter(const TorchSnapshotWriter &) = delete;
  TorchSnapshotWriter &operator=(const TorchSnapshotWriter &) = delete;

  // Every event, after the replay applied it (a replay driver's observer, replay_driver.h).
  void on_heap(const Event &e, const Replay::HeapChange &c);
  void on_event(const Event &e, bool changed);

  // After the pass, the replay at the trace's end: the snapshot's bytes (pickle protocol 4).
  std::string finish(SnapshotExportStats *stats);

 private:
  class Exporter;
  std::unique_ptr<Exporter> exporter_;
};

}  // namespace adprof
