#include "trace_loader.h"

#include <QElapsedTimer>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>

#include "adprof/trace_reader.h"

namespace adprof::gui {

namespace {

// Thrown from analyze()'s progress callback to stop it (it has no cancel hook of its own).
struct Cancelled {};

}  // namespace

TraceLoader::TraceLoader(QObject *parent) : QObject(parent) {
  pool_.setMaxThreadCount(std::max(3, QThread::idealThreadCount()));
  progress_timer_.setInterval(50);
  connect(&progress_timer_, &QTimer::timeout, this, &TraceLoader::pollProgress);
}

TraceLoader::~TraceLoader() {
  for (auto &job : jobs_) job->cancel->store(true);
  pool_.waitForDone();
}

template <class T>
void TraceLoader::start(std::shared_ptr<Job> job, std::function<T(Job &)> work,
                        std::function<void(Outcome<T>)> done) {
  auto result = std::make_shared<Outcome<T>>();
  job->future = QtConcurrent::run(&pool_, [job, work, result] {
    QElapsedTimer clock;
    clock.start();
    try {
      if (job->cancel->load()) throw Cancelled{};
      result->value = std::make_shared<const T>(work(*job));
      if (job->cancel->load()) result->value.reset(), result->cancelled = true;
    } catch (const Cancelled &) {
      result->cancelled = true;
    } catch (const TraceError &e) {
      result->error = e.what();
    } catch (const std::bad_alloc &) {
      result->error = "out of memory while reading the trace";
    } catch (const std::exception &e) {
      result->error = e.what();
    }
    result->seconds = static_cast<double>(clock.nsecsElapsed()) * 1e-9;
  });
  auto *watcher = new QFutureWatcher<void>(this);
  connect(watcher, &QFutureWatcher<void>::finished, this, [this, watcher, job, result, done] {
    watcher->deleteLater();
    std::erase(jobs_, job);
    if (job->cancel->load()) result->cancelled = true, result->value.reset();
    if (done) done(std::move(*result));
    pollProgress();
  });
  jobs_.push_back(job);
  watcher->setFuture(job->future);
  if (!progress_timer_.isActive()) progress_timer_.start();
  pollProgress();
}

void TraceLoader::load(int slot, const QString &path,
                       std::function<void(Outcome<Timeline>)> on_timeline, ReportDone on_report) {
  cancelLoad(slot);
  const std::string file = path.toStdString();
  auto timeline_job = std::make_shared<Job>();
  timeline_job->slot = slot;
  start<Timeline>(
      timeline_job,
      [file](Job &job) {
        TraceReader reader(file);
        TimelineOptions options;
        options.max_samples = 8192;
        options.progress = [&job](double f) { job.progress->store(f); };
        options.cancelled = [&job] { return job.cancel->load(); };
        Timeline t = build_timeline(reader, options);
        if (job.cancel->load()) throw Cancelled{};
        return t;
      },
      std::move(on_timeline));
  auto report_job = std::make_shared<Job>();
  report_job->slot = slot;
  const bool with_prediction = slot == 0;
  start<FirstPass>(
      report_job,
      [file, with_prediction](Job &job) {
        AnalyzeOptions options;
        options.progress = [&job](double f) {
          job.progress->store(f);
          if (job.cancel->load()) throw Cancelled{};
        };
        // Symbolising a trace's stacks after the reading: the bar runs again for it.
        options.stage_progress = [&job](const char *, double f) {
          job.progress->store(f);
          if (job.cancel->load()) throw Cancelled{};
        };
        if (with_prediction) return analyze_first(file, options);
        FirstPass report_alone;
        report_alone.report = analyze(file, options);
        return report_alone;
      },
      [on_report = std::move(on_report)](Outcome<FirstPass> f) {
        Outcome<Report> r;
        if (f.value) r.value = std::shared_ptr<const Report>(f.value, &f.value->report);
        r.error = std::move(f.error);
        r.cancelled = f.cancelled;
        r.seconds = f.seconds;
        on_report(std::move(r), f.value ? f.value->prediction : nullptr);
      });
}

void TraceLoader::loadJob(const QStringList &paths,
                          std::function<void(Outcome<job::JobLanes>)> done) {
  cancelLoad(kJobSlot);
  std::vector<std::string> files;
  for (const QString &path : paths) files.push_back(path.toStdString());
  auto job = std::make_shared<Job>();
  job->slot = kJobSlot;
  start<job::JobLanes>(
      job,
      [files](Job &j) {
        AnalyzeOptions options;
        options.site_stacks = false;  // the rank's own view reads its trace again, whole
        job::LaneOptions lanes;
        lanes.progress = [&j](double f) {
          j.progress->store(f);
          if (j.cancel->load()) throw Cancelled{};
        };
        return job::analyze_job_lanes(job::job_traces(files), options, lanes);
      },
      std::move(done));
}

void TraceLoader::cancelLoad(int slot) {
  for (auto &job : jobs_)
    if (job->slot == slot) job->cancel->store(true);
}

bool TraceLoader::loading() const {
  for (const auto &job : jobs_)
    if (job->slot >= 0 && !job->cancel->load()) return true;
  return false;
}

void TraceLoader::cancelChannel(const QString &channel) {
  for (auto &job : jobs_)
    if (job->channel == channel) job->cancel->store(true);
}

void TraceLoader::snapshot(const QString &path, double time,
                           std::function<void(Outcome<Snapshot>)> done) {
  cancelChannel("snapshot");
  auto job = std::make_shared<Job>();
  job->channel = "snapshot";
  const std::string file = path.toStdString();
  start<Snapshot>(
      job,
      [file, time](Job &) {
        TraceReader reader(file);
        return snapshot_at(reader, time);
      },
      std::move(done));
}

void TraceLoader::timeline(const QString &channel, const QString &path, TimelineOptions options,
                           std::function<void(Outcome<Timeline>)> done) {
  cancelChannel(channel);
  auto job = std::make_shared<Job>();
  job->channel = channel;
  const std::string file = path.toStdString();
  start<Timeline>(
      job,
      [file, options](Job &j) {
        TraceReader reader(file);
        TimelineOptions o = options;
        o.cancelled = [&j] { return j.cancel->load(); };
        Timeline t = build_timeline(reader, o);
        if (j.cancel->load()) throw Cancelled{};
        return t;
      },
      std::move(done));
}

void TraceLoader::whatIf(std::shared_ptr<PendingPrediction> prediction,
                         std::function<void(Outcome<WhatIf>)> done) {
  cancelChannel("whatif");
  auto job = std::make_shared<Job>();
  job->channel = "whatif";
  start<WhatIf>(
      job,
      [prediction](Job &job) {
        // Pass 2 reads the whole trace again: the bar runs for it, and Cancel stops it.
        return prediction->finish([&job](const char *, double f) {
          job.progress->store(f);
          if (job.cancel->load()) throw Cancelled{};
        });
      },
      std::move(done));
}

void TraceLoader::exportTrace(const QString &path, Export what, const QString &out,
                              std::function<void(Outcome<ExportSummary>)> done) {
  auto job = std::make_shared<Job>();
  job->channel = "export";
  const std::string file = path.toStdString(), target = out.toStdString();
  start<ExportSummary>(
      job,
      [file, what, target](Job &j) {
        TraceReader reader(file);  // first: an unreadable trace leaves `out` untouched
        // Beside the target (the same file system, so the rename is atomic), removed unless
        // renamed.
        const std::string temp = target + ".adprof-export";
        struct RemoveTemp {
          const std::string &path;
          ~RemoveTemp() { std::remove(path.c_str()); }
        } remove_temp{temp};
        std::ofstream stream(temp, std::ios::binary | std::ios::trunc);
        if (!stream) throw std::runtime_error("cannot write " + temp);
        ExportStreams streams;
        switch (what) {
          case Export::kPerfetto:
            streams.perfetto = &stream;
            break;
          case Export::kFolded:
            streams.folded = &stream;
            break;
          case Export::kTimelineCsv:
            streams.timeline_csv = &stream;
            break;
          case Export::kTimelineSvg:
            streams.timeline_svg = &stream;
            break;
          case Export::kTorchSnapshot:
            streams.torch_snapshot = &stream;
            break;
        }
        ExportOptions options;
        options.progress = [&j](double) {
          if (j.cancel->load()) throw Cancelled{};
        };
        options.stage_progress = [&j](const char *, double) {
          if (j.cancel->load()) throw Cancelled{};
        };
        ExportSummary summary = write_exports(reader, file, streams, options);
        stream.close();
        if (!stream) throw std::runtime_error("cannot write " + target + " (is the disk full?)");
        if (std::rename(temp.c_str(), target.c_str()) != 0)
          throw std::runtime_error("cannot write " + target + ": " + std::strerror(errno));
        return summary;
      },
      std::move(done));
}

void TraceLoader::waitForIdle() {
  while (!jobs_.empty()) {
    pool_.waitForDone();
    QCoreApplication::sendPostedEvents();
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
  }
}

void TraceLoader::pollProgress() {
  double sum = 0;
  int n = 0;
  for (const auto &job : jobs_)
    if (job->slot >= 0 && !job->cancel->load()) sum += job->progress->load(), ++n;
  if (n) emit progress(sum / n);
  bool busy = n > 0;
  if (busy != busy_) {
    busy_ = busy;
    emit busyChanged(busy);
  }
  if (jobs_.empty()) progress_timer_.stop();
}

}  // namespace adprof::gui
