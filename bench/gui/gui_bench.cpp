// gui_bench [--trace PATH] [--pairs N] [--runs R]
// Records (unless --trace is given) a trace of N malloc/free pairs under the preload, then
// prints medians of:
//   analyze, build_timeline, each alone and both at once on two threads (the GUI's load);
//   the GUI's own path: MainWindow::openTrace until the first timeline is shown / the report and
//   timeline are in / the what-if panel is filled (a trace with an AD tape: its prediction);
//   repaints of the timeline (offscreen, 1400x500) after zooms and pans.
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFileInfo>
#include <QProcess>
#include <QTimer>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/timeline.h"
#include "main_window.h"

using namespace adprof;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the calling thread: on a shared machine this is what the work costs, whatever
// else runs (wall times are printed beside it).
double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// CPU time of the whole process (every thread: the GUI's jobs run on a pool).
double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char **argv) {
  QApplication app(argc, argv);
  QString trace;
  QString pairs = "5000000";
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    QString k = argv[i], v = argv[i + 1];
    if (k == "--trace")
      trace = v;
    else if (k == "--pairs")
      pairs = v;
    else if (k == "--runs")
      runs = v.toInt();
  }
  if (trace.isEmpty()) {
    trace = QDir::temp().filePath(QString("adprof-gui-bench-%1.adtrace").arg(pairs));
    if (!QFileInfo::exists(trace)) {
      std::printf("recording %s malloc/free pairs into %s ...\n", qPrintable(pairs),
                  qPrintable(trace));
      auto t = Clock::now();
      QProcess p;
      p.setProcessChannelMode(QProcess::ForwardedChannels);
      p.start(ADPROF_CLI, {"run", "-o", trace, "--no-report", "--", GUI_BENCH_CHURN, pairs});
      if (!p.waitForFinished(-1) || p.exitCode() != 0) return 1;
      std::printf("recorded in %.2f s\n", since(t));
    }
  }
  const std::string path = trace.toStdString();
  {
    TraceReader r(path);
    std::printf("trace: %s, %.1f MiB, %u threads\n", path.c_str(),
                double(r.stats().bytes) / (1 << 20), r.thread_count());
  }

  std::vector<double> t_gui_first, t_gui_all, t_gui_whatif, cpu_gui_whatif;
  std::vector<double> t_read, t_replay, t_analyze, t_timeline, t_both, c_read, c_replay, c_analyze,
      c_timeline;
  uint64_t events = 0;
  for (int run = 0; run < runs; ++run) {
    // Per phase: reading (decompress + merge), replay, and the two analyses on top.
    auto t = Clock::now();
    double c = thread_cpu();
    {
      TraceReader reader(path);
      Event e;
      uint64_t n = 0;
      while (reader.next(e)) ++n;
      events = n;
    }
    t_read.push_back(since(t));
    c_read.push_back(thread_cpu() - c);
    t = Clock::now();
    c = thread_cpu();
    {
      TraceReader reader(path);
      Replay replay;
      Event e;
      while (reader.next(e)) replay.apply(e);
    }
    t_replay.push_back(since(t));
    c_replay.push_back(thread_cpu() - c);
    t = Clock::now();
    c = thread_cpu();
    Report rep = analyze(path);
    t_analyze.push_back(since(t));
    c_analyze.push_back(thread_cpu() - c);
    t = Clock::now();
    c = thread_cpu();
    {
      TraceReader reader(path);
      TimelineOptions o;
      o.max_samples = 8192;
      Timeline tl = build_timeline(reader, o);
    }
    t_timeline.push_back(since(t));
    c_timeline.push_back(thread_cpu() - c);
    t = Clock::now();
    std::thread a([&] { Report r2 = analyze(path); });
    std::thread b([&] {
      TraceReader reader(path);
      TimelineOptions o;
      o.max_samples = 8192;
      Timeline tl = build_timeline(reader, o);
    });
    a.join();
    b.join();
    t_both.push_back(since(t));
  }
  std::printf("events: %llu\n", static_cast<unsigned long long>(events));
  std::printf("phase                        wall median   cpu median\n");
  std::printf("read only (next())           %8.3f s   %8.3f s\n", median(t_read), median(c_read));
  std::printf("read + Replay::apply         %8.3f s   %8.3f s\n", median(t_replay),
              median(c_replay));
  std::printf("analyze (2 passes)           %8.3f s   %8.3f s\n", median(t_analyze),
              median(c_analyze));
  std::printf("build_timeline               %8.3f s   %8.3f s\n", median(t_timeline),
              median(c_timeline));
  std::printf("analyze || build_timeline    %8.3f s   (two threads, wall)\n", median(t_both));
  std::fflush(stdout);

  // The GUI's path: open, first timeline painted, everything in.
  adprof::gui::MainWindow window;
  window.resize(1400, 900);
  window.show();
  for (int run = 0; run < runs; ++run) {
    QElapsedTimer clock;
    clock.start();
    double first = -1;
    QEventLoop loop;
    auto c1 = QObject::connect(&window, &adprof::gui::MainWindow::timelineShown, [&] {
      window.timeline()->repaint();  // the first paint of the new timeline
      first = double(clock.nsecsElapsed()) * 1e-9;
    });
    auto c2 =
        QObject::connect(&window, &adprof::gui::MainWindow::traceLoaded, &loop, &QEventLoop::quit);
    double whatif = -1;
    QEventLoop whatif_loop;
    auto c3 = QObject::connect(&window, &adprof::gui::MainWindow::whatIfShown, [&] {
      whatif = double(clock.nsecsElapsed()) * 1e-9;
      whatif_loop.quit();
    });
    const double cpu_before = process_cpu();
    window.openTrace(trace);
    loop.exec();
    double all = double(clock.nsecsElapsed()) * 1e-9;
    if (whatif < 0) whatif_loop.exec();  // the prediction of a trace with an AD tape
    const double cpu = process_cpu() - cpu_before;
    QObject::disconnect(c1);
    QObject::disconnect(c2);
    QObject::disconnect(c3);
    t_gui_first.push_back(first);
    t_gui_all.push_back(all);
    t_gui_whatif.push_back(whatif);
    cpu_gui_whatif.push_back(cpu);
    window.loader().waitForIdle();  // the op series, built after the report
  }
  std::printf("GUI: open -> first timeline shown   median %.3f s\n", median(t_gui_first));
  std::printf("GUI: open -> report and timeline in median %.3f s\n", median(t_gui_all));
  std::printf("GUI: open -> what-if shown          median %.3f s (process CPU %.3f s)\n",
              median(t_gui_whatif), median(cpu_gui_whatif));

  // Repaints: the whole trace, then zooms towards the peak, then pans (from the overview and,
  // once it arrived, the finer window built in the background).
  auto *tl = window.timeline();
  std::vector<double> paint_ms, wall_ms;
  auto repaint = [&] {
    QElapsedTimer c;
    c.start();
    tl->repaint();
    wall_ms.push_back(double(c.nsecsElapsed()) * 1e-6);
    paint_ms.push_back(tl->lastPaintMs());
  };
  double peak = window.report()->peak_time;
  for (int round = 0; round < 3; ++round) {
    tl->resetView();
    repaint();
    for (int z = 0; z < 12; ++z) {
      tl->zoomAt(0.6, peak);
      repaint();
    }
    for (int p = 0; p < 20; ++p) {
      tl->pan(p < 10 ? 0.05 : -0.05);
      repaint();
    }
    window.loader().waitForIdle();  // let the detail window arrive, then redraw from it
    QApplication::processEvents();
    for (int p = 0; p < 10; ++p) {
      tl->pan(0.01);
      repaint();
    }
  }
  std::sort(wall_ms.begin(), wall_ms.end());
  std::sort(paint_ms.begin(), paint_ms.end());
  std::printf(
      "repaint after zoom/pan (%zu repaints, %dx%d): median %.2f ms, p95 %.2f ms, max "
      "%.2f ms (paintEvent alone: median %.2f ms, p95 %.2f ms, max %.2f ms)\n",
      wall_ms.size(), tl->width(), tl->height(), median(wall_ms),
      wall_ms[wall_ms.size() * 95 / 100], wall_ms.back(), median(paint_ms),
      paint_ms[paint_ms.size() * 95 / 100], paint_ms.back());
  std::printf("samples drawn in the last repaint: %zu\n", tl->samplesDrawn());
  return 0;
}
