#include "screenshots.h"

#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QEventLoop>
#include <QImage>
#include <QTableView>
#include <QTimer>
#include <QTreeView>
#include <cstdio>

#include "job_window.h"
#include "main_window.h"

namespace adprof::gui {

namespace {

// Runs the event loop until `signal` of `window` fires (or `seconds` pass).
template <class Window, class Signal>
bool wait_for(Window &window, Signal signal, double seconds) {
  QEventLoop loop;
  bool fired = false;
  auto c = QObject::connect(&window, signal, &loop, [&] {
    fired = true;
    loop.quit();
  });
  QTimer::singleShot(int(seconds * 1000), &loop, &QEventLoop::quit);
  loop.exec();
  QObject::disconnect(c);
  return fired;
}

bool save(const QImage &image, const QString &path) {
  // Indexed colour keeps the UI screenshots small (they are flat colours) without visible loss.
  QImage small = image.convertToFormat(QImage::Format_Indexed8, Qt::ThresholdDither);
  bool ok = small.save(path, "PNG", 9);
  std::printf("%s %s (%dx%d)\n", ok ? "wrote" : "FAILED", qPrintable(path), image.width(),
              image.height());
  return ok;
}

void settle() {
  for (int i = 0; i < 5; ++i) QApplication::processEvents(QEventLoop::AllEvents, 20);
}

}  // namespace

int take_screenshots(const QString &dir, const QString &trace, const QString &base) {
  QDir().mkpath(dir);
  MainWindow window;
  window.resize(1400, 900);
  window.show();
  bool ok = true;
  window.openTrace(trace);
  if (!wait_for(window, &MainWindow::traceLoaded, 120) || !window.report()) {
    std::fprintf(stderr, "adprof-gui: cannot load %s: %s\n", qPrintable(trace),
                 qPrintable(window.lastError()));
    return 2;
  }
  wait_for(window, &MainWindow::opTimelineShown, 60);
  window.loader().waitForIdle();  // the what-if predictions
  if (!base.isEmpty()) {
    window.openBase(base);
    if (!wait_for(window, &MainWindow::baseLoaded, 120)) {
      std::fprintf(stderr, "adprof-gui: cannot load %s: %s\n", qPrintable(base),
                   qPrintable(window.lastError()));
      return 2;
    }
  }
  window.loader().waitForIdle();
  settle();
  auto path = [&](const char *name) { return QDir(dir).filePath(name); };

  window.dock("instant")->raise();
  settle();
  ok &= save(window.grab().toImage(), path("gui-main.png"));
  ok &= save(window.timeline()->grab().toImage(), path("gui-timeline-role.png"));
  window.timeline()->setGrouping(TimelineWidget::Grouping::Phase);
  ok &= save(window.timeline()->grab().toImage(), path("gui-timeline-phase.png"));
  window.timeline()->setGrouping(TimelineWidget::Grouping::Op);
  ok &= save(window.timeline()->grab().toImage(), path("gui-timeline-op.png"));
  window.timeline()->setGrouping(TimelineWidget::Grouping::Role);
  ok &= save(window.dock("instant")->grab().toImage(), path("gui-instant.png"));
  window.dock("findings")->raise();
  settle();
  ok &= save(window.dock("findings")->grab().toImage(), path("gui-findings.png"));
  // An op highlighted on the chart, from a click in the ops table.
  window.dock("ops")->raise();
  if (window.opsModel()->rowCount() > 0) {
    int row = 0;
    const auto &ops = window.opsModel()->ops();
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].name != "(no op)" && ops[i].live_at_peak > ops[size_t(row)].live_at_peak)
        row = int(i);
    window.highlightOp(row);
    window.loader().waitForIdle();
  }
  settle();
  ok &= save(window.grab().toImage(), path("gui-ops.png"));
  window.timeline()->setHighlightOp({});
  window.dock("whatif")->raise();
  settle();
  ok &= save(window.dock("whatif")->grab().toImage(), path("gui-whatif.png"));
  if (!base.isEmpty()) {
    window.dock("diff")->raise();
    settle();
    ok &= save(window.grab().toImage(), path("gui-diff.png"));
  }
  window.close();
  return ok ? 0 : 1;
}

int take_job_screenshot(const QString &dir, const QStringList &paths) {
  QDir().mkpath(dir);
  JobWindow window;
  window.resize(1400, 900);
  window.show();
  window.openJob(paths);
  if (!wait_for(window, &JobWindow::jobLoaded, 300) || !window.job()) {
    std::fprintf(stderr, "adprof-gui: cannot load the job %s: %s\n", qPrintable(paths.join(" ")),
                 qPrintable(window.lastError()));
    return 2;
  }
  window.lanes()->selectLane(window.job()->outlier_lane);
  settle();
  return save(window.grab().toImage(), QDir(dir).filePath("gui-job.png")) ? 0 : 1;
}

}  // namespace adprof::gui
