// write_exports(): one pass for every export. A rider (analyze_with.h) carries the observers the
// exports need: the Perfetto writer's slices, the timeline of its counter track, the timeline of
// the CSV and SVG, the memory snapshot's entries (torch_snapshot.h). It rides on the report's pass
// when the folded stacks or the Perfetto instants of a trace with stacks need the live set at the
// peak; otherwise the replay driver runs it alone (no report's work).
#include <optional>

#include "adprof/exports.h"
#include "adprof/replay_driver.h"
#include "adprof/timeline_render.h"
#include "folded.h"
#include "memory/analyze_with.h"
#include "perfetto.h"
#include "torch_snapshot/torch_snapshot_writer.h"

namespace adprof {

namespace {

class ExportRider final : public PassRider {
 public:
  ExportRider(TraceReader &reader, const Replay &replay, const ExportStreams &streams) {
    if (streams.perfetto) {
      perfetto_.emplace(*streams.perfetto, reader, replay);
      TimelineOptions counter;
      counter.max_samples = PerfettoWriter::kCounterSamples;
      counter_.emplace(reader, replay, counter);
    }
    if (streams.timeline_csv || streams.timeline_svg) {
      TimelineOptions options;  // `adprof timeline`'s, whole trace
      options.max_samples = kTimelineExportSamples;
      timeline_.emplace(reader, replay, options);
    }
    if (streams.torch_snapshot) snapshot_.emplace(reader, replay);
  }

  bool empty() const { return !perfetto_ && !timeline_ && !snapshot_; }

  // The timelines' windows are the whole trace: they never stop the pass.
  bool stop_before(const Event &) { return false; }

  void on_heap(const Event &e, const Replay::HeapChange &c) override {
    if (perfetto_) {
      perfetto_->note_time(e);
      counter_->stop_before(e);
      counter_->on_heap(e, c);
    }
    if (timeline_) {
      timeline_->stop_before(e);
      timeline_->on_heap(e, c);
    }
    if (snapshot_) snapshot_->on_heap(e, c);
  }

  void on_event(const Event &e, bool changed) override {
    if (perfetto_) {
      perfetto_->on_event(e);
      counter_->stop_before(e);
      counter_->on_event(e, changed);
    }
    if (timeline_) {
      timeline_->stop_before(e);
      timeline_->on_event(e, changed);
    }
    if (snapshot_) snapshot_->on_event(e, changed);
  }

  // After the pass, the replay at the trace's end (the snapshot's segments are the blocks live
  // then).
  void finish(const ExportStreams &streams, const Report *report, ExportSummary &summary) {
    if (perfetto_) perfetto_->finish(counter_->finish(), report);
    if (timeline_) {
      const Timeline t = timeline_->finish();
      if (streams.timeline_csv) *streams.timeline_csv << timeline_csv(t);
      if (streams.timeline_svg) *streams.timeline_svg << timeline_svg(t);
    }
    if (snapshot_) {
      const std::string bytes = snapshot_->finish(&summary.torch_snapshot);
      streams.torch_snapshot->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
  }

 private:
  std::optional<PerfettoWriter> perfetto_;
  std::optional<TimelineBuilder> counter_;   // the Perfetto counter track's
  std::optional<TimelineBuilder> timeline_;  // the CSV's and the SVG's
  std::optional<TorchSnapshotWriter> snapshot_;
};

}  // namespace

ExportSummary write_exports(TraceReader &reader, const std::string &trace_path,
                            const ExportStreams &streams, const ExportOptions &options) {
  Replay replay;
  ExportRider rider(reader, replay, streams);
  // The folded stacks, and the Perfetto instants of a trace with call stacks, are made from the
  // live set at the peak: the report's pass, with the rider on it.
  const bool need_report = streams.folded || (streams.perfetto && reader.header().stacks());
  ExportSummary summary;
  if (need_report) {
    AnalyzeOptions analyze_options;
    analyze_options.progress = options.progress;
    analyze_options.stage_progress = options.stage_progress;
    analyze_options.folded_stacks = streams.folded != nullptr;
    // The folded stacks alone: the report's pass as it is, no rider to call.
    const Report report =
        rider.empty() ? analyze(reader, trace_path, analyze_options)
                      : analyze_with_rider(reader, trace_path, analyze_options, replay, rider);
    rider.finish(streams, reader.header().stacks() ? &report : nullptr, summary);
    if (streams.folded) *streams.folded << folded_stacks(report);
  } else {
    ReplayDriver driver(reader, replay);
    DriveOptions drive;
    drive.progress = options.progress;
    driver.run(rider, drive);
    if (options.progress) options.progress(1.0);
    rider.finish(streams, nullptr, summary);
  }
  summary.events = reader.stats().events;
  summary.complete = reader.end().complete;
  summary.end_reason = reader.end().reason;
  return summary;
}

}  // namespace adprof
