// Runs the analysis library's jobs off the UI thread and hands their results back as plain
// values (gui_data.h) on the UI thread. Each job opens its own TraceReader (a reader is not
// thread-safe). Loading a trace runs the report's pass and build_timeline() at the same time on
// two threads; the timeline usually arrives first and is shown at once. The report's pass
// carries the what-if's pass 1 (analyze_first, ad_analysis.h), so a trace with an AD tape
// needs only pass 2 for its prediction: three passes in all, not four.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <QTimer>
#include <QtConcurrent/QtConcurrent>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "adprof/ad_analysis.h"
#include "adprof/exports.h"
#include "adprof/job_lanes.h"
#include "gui_data.h"

namespace adprof::gui {

class TraceLoader : public QObject {
  Q_OBJECT

 public:
  explicit TraceLoader(QObject *parent = nullptr);
  ~TraceLoader() override;  // cancels and waits for every job

  // Loads `path`: `on_timeline` and `on_report` are called on the UI thread when each is ready
  // (or failed / cancelled). A new load of the same slot cancels the previous one.
  // Slot 0: the trace, whose report comes with the what-if's pending half when the trace has an
  // AD tape (for whatIf); slot 1: the base trace of a diff (a report alone).
  using ReportDone = std::function<void(Outcome<Report>, std::shared_ptr<PendingPrediction>)>;
  void load(int slot, const QString &path, std::function<void(Outcome<Timeline>)> on_timeline,
            ReportDone on_report);
  void cancelLoad(int slot);
  bool loading() const;

  // A job (adprof/job.h): `paths` as `adprof report --job` takes them (a folder, a trace of the
  // run, or one per machine), each trace's report and timeline in one pass, the ranks' lanes on
  // the job's clock (adprof/job_lanes.h). Slot kJobSlot: a new job cancels the one loading.
  static constexpr int kJobSlot = 2;
  void loadJob(const QStringList &paths, std::function<void(Outcome<job::JobLanes>)> done);

  // The live set at `time` (a replay up to there). A new request cancels the previous one.
  void snapshot(const QString &path, double time, std::function<void(Outcome<Snapshot>)> done);

  // A timeline with other options (a finer window after a zoom, or op series to track).
  // `channel` names the purpose: a new request on a channel cancels the one before it.
  void timeline(const QString &channel, const QString &path, TimelineOptions options,
                std::function<void(Outcome<Timeline>)> done);

  // The what-if predictions (adprof/whatif.h): the pass 2 a load left pending.
  void whatIf(std::shared_ptr<PendingPrediction> prediction,
              std::function<void(Outcome<WhatIf>)> done);

  // Writes an export of the trace at `path` to the file `out` (adprof/exports.h: the library
  // functions and the one pass of `adprof export` and `adprof timeline`, so the file equals
  // theirs). Written beside `out` and renamed over it when whole: a failure leaves `out` as it
  // was. `done` gets the pass's summary, or the error in plain words. kTorchSnapshot: the
  // PyTorch memory snapshot of `adprof export --torch-snapshot` (a pickle; its counts in the
  // summary's torch_snapshot).
  enum class Export { kPerfetto, kFolded, kTimelineCsv, kTimelineSvg, kTorchSnapshot };
  void exportTrace(const QString &path, Export what, const QString &out,
                   std::function<void(Outcome<ExportSummary>)> done);

  // Waits for every job to finish (tests, screenshots, benchmarks).
  void waitForIdle();

 signals:
  // Fraction of the current load done (both jobs together), 0..1; emitted while loading.
  void progress(double fraction);
  void busyChanged(bool busy);

 private:
  struct Job {
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<std::atomic<double>> progress = std::make_shared<std::atomic<double>>(0.0);
    QFuture<void> future;
    int slot = -1;
    QString channel;
  };
  template <class T>
  void start(std::shared_ptr<Job> job, std::function<T(Job &)> work,
             std::function<void(Outcome<T>)> done);
  void cancelChannel(const QString &channel);
  void pollProgress();

  QThreadPool pool_;
  std::vector<std::shared_ptr<Job>> jobs_;
  QTimer progress_timer_;
  bool busy_ = false;
};

}  // namespace adprof::gui
