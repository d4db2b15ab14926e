// adprof-gui under QT_QPA_PLATFORM=offscreen: the models show what the analysis library
// computed (equal to `adprof report --json` of the same trace), the timeline draws something,
// its peak marker sits at the peak's time, and clicking there lists the peak's buffers.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QImage>
#include <QMenuBar>
#include <QPainter>
#include <QPicture>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QTreeView>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/sanitized_build.h"
#include "adprof/report.h"
#include "adprof/snapshot.h"
#include "adprof/timeline.h"
#include "adprof/whatif.h"
#include "main_window.h"
#include "palette.h"

using namespace adprof;
using namespace adprof::gui;

namespace {

constexpr uint64_t kMiB = 1 << 20;

QString record(const QString &dir, const QString &name, const QStringList &args,
               const QString &program = GUI_TEST_WORKLOAD) {
  QString trace = QDir(dir).filePath(name);
  QProcess p;
  p.start(ADPROF_CLI, QStringList{"run", "-o", trace, "--no-report", "--", program} + args);
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("recording failed: %s", p.readAllStandardError().constData());
  return trace;
}

Report cli_report(const QString &trace) {
  QProcess p;
  p.start(ADPROF_CLI, {"report", "--json", "--full", trace});  // every buffer, as the GUI has
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("adprof report failed: %s", p.readAllStandardError().constData());
  return report_from_json(nlohmann::json::parse(p.readAllStandardOutput().toStdString()));
}

// Pixels that are not background white nor the light grid grey.
int inked_pixels(const QImage &image, const QRect &area) {
  int n = 0;
  for (int y = area.top(); y <= area.bottom(); ++y)
    for (int x = area.left(); x <= area.right(); ++x) {
      QRgb c = image.pixel(x, y);
      if (qRed(c) < 0xD0 || qGreen(c) < 0xD0 || qBlue(c) < 0xD0) ++n;
    }
  return n;
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void modelsEqualCliReport();
  void timelineIsDrawnAndPeakMarkerAtPeakTime();
  void clickAtPeakListsPeakBuffers();
  void clickElsewhereListsThatInstant();
  void findingsLeadToTheirBuffers();
  void opsHighlightOnTimeline();
  void groupingsAndZoomRedraw();
  void rangeSelectionTotals();
  void diffAgainstBase();
  void exportPngAndSvg();
  void exportsEqualTheCli();
  void torchSnapshotExportFromTheMenu();
  void screenAndVectorChartsAgree();
  void badFilesGiveAMessage();
  void cancelLoading();
  void everyModelPassesTheTester();
  void labelsShownWhereOpsAre();
  void whatIfPanel();
  void screenshotMode();
  void devicePeakByRoleInTheStatus();
  void foreignSplitInTheStatus();
  void pytorchSnapshotOpensAsATrace();
  void timelineEndsAtTheTracesEnd();

 private:
  QTemporaryDir dir_;
  QString trace_, base_;
  Report cli_, cli_base_;
  std::unique_ptr<MainWindow> window_;
};

void GuiTest::initTestCase() {
  QVERIFY(dir_.isValid());
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir_.filePath("settings"));
  trace_ = record(dir_.path(), "naive.adtrace", {});
  base_ = record(dir_.path(), "inplace.adtrace", {"--inplace"});
  cli_ = cli_report(trace_);
  cli_base_ = cli_report(base_);
  // The workload's known numbers (its comments): the peak is in the backward pass of the second
  // step, with 8 MiB of held gradient contributions and a 2 MiB i64 duplicate of the indices.
  QCOMPARE(cli_.peak_by_role[ADPROF_ROLE_ACCUMULATION], 8 * kMiB);
  QCOMPARE(cli_.peak_by_role[ADPROF_ROLE_DUPLICATE], 2 * kMiB);
  QCOMPARE(cli_.peak_by_role[ADPROF_ROLE_OPTIMIZER_STATE], 6 * kMiB);
  QCOMPARE(cli_.peak_phase, std::string("backward"));
  QCOMPARE(cli_base_.peak_by_role[ADPROF_ROLE_ACCUMULATION], uint64_t(0));

  window_ = std::make_unique<MainWindow>();
  window_->resize(1300, 850);
  window_->show();
  QSignalSpy loaded(window_.get(), &MainWindow::traceLoaded);
  QSignalSpy ops(window_.get(), &MainWindow::opTimelineShown);
  window_->openTrace(trace_);
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  QVERIFY(ops.count() || ops.wait(60000));
  window_->loader().waitForIdle();
}

void GuiTest::modelsEqualCliReport() {
  const Report &r = *window_->report();
  QCOMPARE(r.peak, cli_.peak);
  QCOMPARE(r.peak_time, cli_.peak_time);
  QCOMPARE(r.events, cli_.events);
  // Ops table: every row equals the CLI's op summary.
  OpsModel *ops = window_->opsModel();
  QCOMPARE(ops->rowCount(), int(cli_.ops.size()));
  for (int row = 0; row < ops->rowCount(); ++row) {
    const OpSummary &o = cli_.ops[size_t(row)];
    auto v = [&](int col) { return ops->index(row, col).data(ModelBase::SortRole); };
    QCOMPARE(v(OpsModel::Name).toString().toStdString(), o.name);
    QCOMPARE(v(OpsModel::Calls).toULongLong(), o.calls);
    QCOMPARE(v(OpsModel::Allocations).toULongLong(), o.allocations);
    QCOMPARE(v(OpsModel::Bytes).toULongLong(), o.bytes);
    QCOMPARE(v(OpsModel::LiveAtPeak).toULongLong(), o.live_at_peak);
    QCOMPARE(v(OpsModel::Temporaries).toULongLong(), o.temporaries);
    QCOMPARE(v(OpsModel::TemporaryBytes).toULongLong(), o.temporary_bytes);
  }
  // Findings: same kinds, messages and bytes in the same order.
  FindingsModel *f = window_->findingsModel();
  QCOMPARE(f->rowCount(), int(cli_.findings.size()));
  QVERIFY(f->rowCount() >= 2);
  for (int row = 0; row < f->rowCount(); ++row) {
    const Finding &c = cli_.findings[size_t(row)];
    QCOMPARE(f->index(row, FindingsModel::Kind).data().toString().toStdString(),
             finding_title(c.kind));  // a plain title, not the stable kind
    QCOMPARE(f->index(row, FindingsModel::Kind).data(Qt::ToolTipRole).toString().toStdString(),
             c.kind);
    QVERIFY(f->index(row, FindingsModel::Kind).data().toString().indexOf('_') < 0);
    QCOMPARE(f->index(row, FindingsModel::Message).data().toString().toStdString(), c.message);
    QCOMPARE(f->index(row, FindingsModel::Evidence).data().toString().toStdString(), c.evidence);
    QCOMPARE(f->index(row, FindingsModel::Bytes).data(ModelBase::SortRole).toULongLong(), c.bytes);
  }
  // At the peak (the default instant): the buffers and the bytes per role of the report.
  LiveBuffersModel *live = window_->liveModel();
  QCOMPARE(live->instant().at_peak, true);
  QCOMPARE(live->totalBytes(), cli_.peak);
  QCOMPARE(live->instant().buffers.size(), cli_.live_at_peak.size());
  QCOMPARE(live->instant().buffer_count, uint64_t(cli_.live_at_peak.size()));
  QVERIFY2(window_->instantCaption().contains(
               QString(" live in %1 buffers at ").arg(cli_.live_at_peak.size())),
           qPrintable(window_->instantCaption()));
  // With the list cut to its largest buffers, the count is still every buffer's (before, the
  // caption said "in 100000 buffers" of a Python run's 517,725).
  AnalyzeOptions capped;
  capped.max_live_buffers = 3;
  const InstantData cut = instant_at_peak(analyze(trace_.toStdString(), capped));
  QCOMPARE(cut.buffers.size(), size_t(3));
  QCOMPARE(cut.buffer_count, uint64_t(cli_.live_at_peak.size()));
  // The tree's groups count every buffer, listed or not: the role and op rows of the cut list
  // are the whole list's (before, they summed the 3 listed buffers).
  LiveBuffersModel cut_model;
  QAbstractItemModelTester tester(&cut_model,
                                  QAbstractItemModelTester::FailureReportingMode::QtTest);
  cut_model.setInstant(cut);
  QCOMPARE(cut_model.totalBytes(), cli_.peak);
  QCOMPARE(cut_model.rowCount(), live->rowCount());
  int listed = 0;
  for (const LiveBuffersModel *m : {live, &cut_model})
    for (int r = 0; r < m->rowCount(); ++r) {
      QModelIndex role = m->index(r, 0);
      QString name = role.data(ModelBase::RowKeyRole).toString();
      int id = role_from_name(name.toStdString());
      QVERIFY(id >= 0);
      QCOMPARE(m->index(r, LiveBuffersModel::Size).data(ModelBase::SortRole).toULongLong(),
               cli_.peak_by_role[size_t(id)]);
      const QModelIndex same_role = live->index(r, 0);
      QCOMPARE(same_role.data(ModelBase::RowKeyRole).toString(), name);
      QCOMPARE(m->rowCount(role), live->rowCount(same_role));
      int role_count = 0, role_listed = 0;
      for (int o = 0; o < m->rowCount(role); ++o) {
        QCOMPARE(m->index(o, LiveBuffersModel::Size, role).data(ModelBase::SortRole),
                 live->index(o, LiveBuffersModel::Size, same_role).data(ModelBase::SortRole));
        QCOMPARE(m->index(o, LiveBuffersModel::Label, role).data(),
                 live->index(o, LiveBuffersModel::Label, same_role).data());
        role_count += live->rowCount(live->index(o, 0, same_role));
        role_listed += m->rowCount(m->index(o, 0, role));
      }
      // "adjoint (12)"; cut: "adjoint (12; 1 listed)".
      const QString shown =
          role_listed < role_count
              ? QString("%1 (%2; %3 listed)").arg(name).arg(role_count).arg(role_listed)
              : QString("%1 (%2)").arg(name).arg(role_count);
      QCOMPARE(role.data().toString(), shown);
      if (m == &cut_model) listed += role_listed;
    }
  QCOMPARE(listed, 3);
  // A buffer row shows its dtype and shape; the duplicate links to its source.
  QModelIndex dup = live->indexOfRole("duplicate");
  QVERIFY(dup.isValid());
  QModelIndex dup_buf = live->index(0, 0, live->index(0, 0, dup));
  const LiveBuffer *b = live->buffer(dup_buf);
  QVERIFY(b);
  QCOMPARE(b->dtype, std::string("i64"));
  QCOMPARE(live->index(dup_buf.row(), LiveBuffersModel::Shape, dup_buf.parent()).data().toString(),
           QString("[262144]"));
  QVariant link = live->index(dup_buf.row(), LiveBuffersModel::Source, dup_buf.parent())
                      .data(ModelBase::LinkRole);
  QVERIFY(link.isValid());
  QModelIndex source = live->indexOfAddress(link.toULongLong());
  QVERIFY(source.isValid());
  QCOMPARE(live->buffer(source)->label, std::string("idx"));
  // The timeline's peak is the report's.
  QCOMPARE(window_->timeline()->peakX(), window_->timeline()->timeToX(cli_.peak_time));
}

void GuiTest::timelineIsDrawnAndPeakMarkerAtPeakTime() {
  TimelineWidget *t = window_->timeline();
  QImage image(t->size(), QImage::Format_RGB32);
  QPainter p(&image);
  t->paintTo(p);
  p.end();
  QRect plot = t->plotRect().toRect().adjusted(2, 2, -2, -2);
  // Not blank: most of the plot area under the peak is painted.
  QVERIFY2(inked_pixels(image, plot) > plot.width() * plot.height() / 20, "the chart is blank");
  // The marker: a black dashed vertical line at timeToX(peak time), in the plot.
  const int x = int(std::lround(t->timeToX(cli_.peak_time)));
  QCOMPARE(int(std::lround(t->peakX())), x);
  auto black_in_column = [&](int cx) {
    int n = 0;
    for (int y = plot.top(); y <= plot.bottom(); ++y) n += image.pixel(cx, y) == qRgb(0, 0, 0);
    return n;
  };
  int at = std::max({black_in_column(x - 1), black_in_column(x), black_in_column(x + 1)});
  QVERIFY2(at > plot.height() / 4,
           qPrintable(QString("only %1 marker pixels at x=%2").arg(at).arg(x)));
  // ... and not just anywhere: a column well away from the peak has no such line.
  int away = x > plot.center().x() ? plot.left() + 20 : plot.right() - 20;
  QVERIFY(black_in_column(away) < plot.height() / 8);
  image.save(dir_.filePath("timeline.png"));
}

void GuiTest::clickAtPeakListsPeakBuffers() {
  TimelineWidget *t = window_->timeline();
  // First somewhere else, so that the click at the peak really changes the instant.
  window_->showInstant(cli_.peak_time / 4, false);
  window_->loader().waitForIdle();
  QVERIFY(!window_->liveModel()->instant().at_peak);
  QSignalSpy shown(window_.get(), &MainWindow::instantShown);
  QTest::mouseClick(t, Qt::LeftButton, {},
                    QPoint(int(std::lround(t->peakX())), int(t->plotRect().center().y())));
  QVERIFY(shown.count() || shown.wait(10000));
  const InstantData &d = window_->liveModel()->instant();
  QVERIFY(d.at_peak);
  QCOMPARE(d.time, cli_.peak_time);
  std::multiset<std::pair<uint64_t, uint64_t>> listed, expected;
  for (const LiveBuffer &b : d.buffers) listed.insert({b.addr, b.size});
  for (const LiveBuffer &b : cli_.live_at_peak) expected.insert({b.addr, b.size});
  QVERIFY(listed == expected);
  QCOMPARE(window_->liveModel()->totalBytes(), cli_.peak);
}

void GuiTest::clickElsewhereListsThatInstant() {
  TimelineWidget *t = window_->timeline();
  // The start of the first backward pass: a replay up to the clicked time.
  double x = t->plotRect().left() + t->plotRect().width() * 0.3;
  if (std::fabs(x - t->peakX()) < 10) x += 40;
  double time = t->xToTime(x);
  QSignalSpy shown(window_.get(), &MainWindow::instantShown);
  QTest::mouseClick(t, Qt::LeftButton, {}, QPoint(int(x), int(t->plotRect().center().y())));
  QVERIFY(shown.wait(20000));
  const InstantData &d = window_->liveModel()->instant();
  QVERIFY(!d.at_peak);
  TraceReader reader(trace_.toStdString());
  Snapshot expect = snapshot_at(reader, d.time);
  QVERIFY(std::fabs(d.time - time) < (t->viewTo() - t->viewFrom()) / t->plotRect().width());
  QCOMPARE(d.host, expect.host);
  QCOMPARE(d.buffers.size(), expect.buffers.size());
  QCOMPARE(window_->liveModel()->totalBytes(), expect.host);
}

void GuiTest::findingsLeadToTheirBuffers() {
  FindingsModel *f = window_->findingsModel();
  int dup_row = -1, acc_row = -1;
  for (int r = 0; r < f->rowCount(); ++r) {
    QString kind = f->index(r, FindingsModel::Kind).data(Qt::ToolTipRole).toString();
    if (kind == "duplicate") dup_row = r;
    if (kind == "non_inplace_accumulation") acc_row = r;
  }
  QVERIFY(dup_row >= 0 && acc_row >= 0);
  window_->showFinding(dup_row);
  QTreeView *view = window_->liveView();
  auto current = [&] {
    auto *proxy = static_cast<QAbstractProxyModel *>(view->model());
    return window_->liveModel()->buffer(proxy->mapToSource(view->currentIndex()));
  };
  QVERIFY(window_->liveModel()->instant().at_peak);
  QVERIFY(current());
  QCOMPARE(current()->role, std::string("duplicate"));
  QCOMPARE(current()->dtype, std::string("i64"));
  window_->showFinding(acc_row);
  QModelIndex idx = view->currentIndex();
  QVERIFY(idx.isValid());
  QCOMPARE(idx.data(ModelBase::RowKeyRole).toString(), QString("accumulation"));
  QVERIFY(view->isExpanded(idx));
}

void GuiTest::opsHighlightOnTimeline() {
  OpsModel *ops = window_->opsModel();
  int row = -1;
  for (int r = 0; r < ops->rowCount(); ++r)
    if (ops->ops()[size_t(r)].name == "matmul_backward") row = r;
  QVERIFY(row >= 0);
  window_->highlightOp(row);
  window_->loader().waitForIdle();
  auto tracked = window_->timeline()->trackedOps();
  QVERIFY(std::find(tracked.begin(), tracked.end(), "matmul_backward") != tracked.end());
  QImage image(window_->timeline()->size(), QImage::Format_RGB32);
  QPainter p(&image);
  window_->timeline()->paintTo(p);
  p.end();
  QVERIFY(inked_pixels(image, window_->timeline()->plotRect().toRect()) > 0);
  window_->timeline()->setHighlightOp({});
}

void GuiTest::groupingsAndZoomRedraw() {
  TimelineWidget *t = window_->timeline();
  using G = TimelineWidget::Grouping;
  for (G g : {G::Role, G::Op, G::Phase, G::Device}) {
    t->setGrouping(g);
    QImage image(t->size(), QImage::Format_RGB32);
    QPainter p(&image);
    t->paintTo(p);
    p.end();
    QRect plot = t->plotRect().toRect().adjusted(2, 2, -2, -2);
    QVERIFY2(inked_pixels(image, plot) > plot.width() * plot.height() / 20,
             qPrintable(QString("grouping %1 blank").arg(int(g))));
  }
  t->setGrouping(G::Role);
  // Zoom around the peak and pan: the peak marker follows the time->x mapping.
  double from = t->viewFrom(), to = t->viewTo();
  t->zoomAt(0.1, cli_.peak_time);
  QVERIFY(t->viewTo() - t->viewFrom() < (to - from) * 0.2);
  QVERIFY(std::fabs(t->peakX() - t->timeToX(cli_.peak_time)) < 1e-9);
  t->repaint();
  QVERIFY(t->lastPaintMs() < 100);
  window_->loader().waitForIdle();  // the finer window arrives
  t->repaint();
  t->pan(0.1);
  t->resetView();
  QCOMPARE(t->viewFrom(), from);
}

void GuiTest::rangeSelectionTotals() {
  TimelineWidget *t = window_->timeline();
  QRectF plot = t->plotRect();
  int y = int(plot.center().y());
  QTest::mousePress(t, Qt::LeftButton, Qt::ShiftModifier, QPoint(int(plot.left() + 5), y));
  QTest::mouseMove(t, QPoint(int(plot.center().x()), y));
  QTest::mouseMove(t, QPoint(int(plot.right() - 5), y));
  QTest::mouseRelease(t, Qt::LeftButton, Qt::ShiftModifier, QPoint(int(plot.right() - 5), y));
  QVERIFY(t->hasSelection());
  QString text = window_->selectionText();
  QVERIFY2(text.contains("highest " + format_bytes_q(cli_.peak)), qPrintable(text));
  t->clearSelection();
}

void GuiTest::diffAgainstBase() {
  QSignalSpy loaded(window_.get(), &MainWindow::baseLoaded);
  window_->openBase(base_);
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  DiffModel *d = window_->diffModel();
  QVERIFY(d->rowCount() > 2);
  bool saw_total = false, saw_acc = false;
  for (const DiffRow &r : d->diffRows()) {
    if (r.kind == "total") {
      saw_total = true;
      QCOMPARE(r.base, cli_base_.peak);
      QCOMPARE(r.current, cli_.peak);
    }
    if (r.kind == "role" && r.name == "accumulation") {
      saw_acc = true;
      QCOMPARE(r.base, uint64_t(0));
      QCOMPARE(r.current, 8 * kMiB);
    }
  }
  QVERIFY(saw_total && saw_acc);
  QImage image(window_->timeline()->size(), QImage::Format_RGB32);
  QPainter p(&image);
  window_->timeline()->paintTo(p);
  p.end();
  int orange = 0;
  for (int yy = 0; yy < image.height(); ++yy)
    for (int xx = 0; xx < image.width(); ++xx) orange += image.pixel(xx, yy) == base_color().rgb();
  QVERIFY2(orange > 50, "the base trace is not overlaid");
}

void GuiTest::exportPngAndSvg() {
  QString png = dir_.filePath("chart.png"), svg = dir_.filePath("chart.svg");
  QVERIFY(window_->exportPng(png));
  QVERIFY(window_->exportSvg(svg));
  QImage image(png);
  QCOMPARE(image.size(), window_->timeline()->size());
  QFile f(svg);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QByteArray text = f.readAll();
  QVERIFY(text.contains("<svg"));
  QVERIFY(text.size() > 2000);
}

// File > Export writes, off the UI thread, the same bytes as the CLI: Perfetto JSON and folded
// stacks as `adprof export`, the timeline's CSV and SVG as `adprof timeline`.
void GuiTest::exportsEqualTheCli() {
  QProcess cli;
  cli.start(ADPROF_CLI, {"export", trace_, "--perfetto", dir_.filePath("cli.json"), "--folded",
                         dir_.filePath("cli.folded")});
  QVERIFY(cli.waitForFinished(60000) && cli.exitCode() == 0);
  cli.start(ADPROF_CLI, {"timeline", trace_, "--csv", dir_.filePath("cli.csv"), "--svg",
                         dir_.filePath("cli.svg")});
  QVERIFY(cli.waitForFinished(60000) && cli.exitCode() == 0);
  const std::pair<TraceLoader::Export, QString> exports[] = {
      {TraceLoader::Export::kPerfetto, "json"},
      {TraceLoader::Export::kFolded, "folded"},
      {TraceLoader::Export::kTimelineCsv, "csv"},
      {TraceLoader::Export::kTimelineSvg, "svg"}};
  auto bytes = [](const QString &path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
  };
  for (const auto &[what, ext] : exports) {
    const QString out = dir_.filePath("gui." + ext);
    QSignalSpy exported(window_.get(), &MainWindow::exported);
    window_->exportTrace(what, out);
    QVERIFY(exported.count() || exported.wait(60000));
    QCOMPARE(exported.first().first().toBool(), true);
    const QByteArray want = bytes(dir_.filePath("cli." + ext));
    QVERIFY2(want.size() > 100, qPrintable(ext));
    QVERIFY2(bytes(out) == want, qPrintable(out + " differs from the CLI's"));
    QVERIFY(window_->statusText().startsWith("Exported"));
  }
  // A file that cannot be written: a message, and the status says so.
  QSignalSpy failed(window_.get(), &MainWindow::exported);
  window_->exportTrace(TraceLoader::Export::kFolded, dir_.filePath("no/such/dir/x.folded"));
  QVERIFY(failed.count() || failed.wait(60000));
  QCOMPARE(failed.first().first().toBool(), false);
  QVERIFY2(window_->statusText().startsWith("Cannot export"), qPrintable(window_->statusText()));
}

// File > Export > PyTorch memory snapshot, through the menu and its file dialog: the pickle of
// `adprof export --torch-snapshot` byte for byte, which reads back as the trace (the same peak
// and roles at the peak, as TorchSnapshotExport.ARunReadsBackAsItself checks for the CLI), and
// the status says what it holds as the CLI does. A file that cannot be written: a message.
void GuiTest::torchSnapshotExportFromTheMenu() {
  const QString cli_out = dir_.filePath("cli.pickle"), out = dir_.filePath("gui.pickle");
  QProcess cli;
  cli.start(ADPROF_CLI, {"export", trace_, "--torch-snapshot", cli_out});
  QVERIFY(cli.waitForFinished(60000) && cli.exitCode() == 0);
  const QString cli_says =
      QString::fromUtf8(cli.readAllStandardError()).trimmed().split('\n').last();

  QAction *action = nullptr;
  for (QAction *a : window_->menuBar()->findChildren<QAction *>())
    if (a->text() == "PyTorch memory &snapshot...") action = a;
  QVERIFY2(action, "File > Export has no PyTorch memory snapshot");
  QVERIFY(action->isEnabled());
  // The dialog is modal: answer it from the event loop it runs (offscreen: Qt's own dialog).
  QString suggested, filters;
  bool answered = false;
  int tries = 0;
  std::function<void()> answer = [&] {
    auto *dialog = qobject_cast<QFileDialog *>(QApplication::activeModalWidget());
    if (!dialog && ++tries < 250) return QTimer::singleShot(20, answer);
    if (!dialog) return;
    suggested = dialog->selectedFiles().value(0);
    filters = dialog->nameFilters().join(";;");
    dialog->selectFile(out);
    static_cast<QDialog *>(dialog)->accept();  // QFileDialog::accept, public in QDialog
    answered = true;
  };
  QTimer::singleShot(0, answer);
  QSignalSpy exported(window_.get(), &MainWindow::exported);
  action->trigger();
  QTRY_VERIFY_WITH_TIMEOUT(answered || tries >= 250, 10000);  // no timer left behind
  QVERIFY2(answered, "no file dialog");
  QCOMPARE(QFileInfo(suggested).fileName(), QString("snapshot.pickle"));
  QVERIFY2(filters.contains("*.pickle"), qPrintable(filters));
  QVERIFY(exported.count() || exported.wait(60000));
  QCOMPARE(exported.first().first().toBool(), true);

  auto bytes = [](const QString &path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
  };
  const QByteArray want = bytes(cli_out), got = bytes(out);
  QVERIFY(want.startsWith("\x80\x04"));  // pickle protocol 4
  QVERIFY2(got == want, "the GUI's snapshot differs from the CLI's");
  QVERIFY(!QFile::exists(out + ".adprof-export"));
  // "Exported OUT: N allocations, M trace entries, D device trace(s)", the counts of the CLI's
  // "adprof: wrote FILE: ..." line.
  const QString status = window_->statusText();
  QVERIFY2(status.startsWith("Exported " + out + ": "), qPrintable(status));
  QCOMPARE(status.section(": ", 1), cli_says.section(": ", 2));
  QVERIFY2(status.contains(" allocations, "), qPrintable(status));

  const Report back = analyze(out.toStdString());
  QCOMPARE(back.peak, cli_.peak);
  for (size_t role = 0; role < kRoleCount; ++role)
    QCOMPARE(back.peak_by_role[role], cli_.peak_by_role[role]);
  QCOMPARE(back.allocations, cli_.allocations);

  QSignalSpy failed(window_.get(), &MainWindow::exported);
  window_->exportTrace(TraceLoader::Export::kTorchSnapshot, dir_.filePath("no/such/x.pickle"));
  QVERIFY(failed.count() || failed.wait(60000));
  QCOMPARE(failed.first().first().toBool(), false);
  QVERIFY2(window_->statusText().startsWith("Cannot export x.pickle: cannot write"),
           qPrintable(window_->statusText()));
}

// On screen the phase tint and the stacked areas are pixels the widget writes (a training run's
// thousands of bands and churning columns made the raster engine's shapes take up to 200 ms a
// repaint); vector output keeps the shapes. Both must draw the same chart: a timeline of
// alternating forward and backward bands under two roles' areas, painted into an image directly
// and through a QPicture (the vector path), agrees pixel for pixel but for rounding at edges.
void GuiTest::screenAndVectorChartsAgree() {
  auto t = std::make_shared<Timeline>();
  t->start = 0;
  t->end = 1;
  t->op_names = {"other ops"};
  for (int i = 0; i < 400; ++i) {  // churn: the live bytes change at every sample
    TimelineSample s;
    s.time = i / 400.0;
    s.by_role[ADPROF_ROLE_PARAMETER] = 4000 + 1000 * uint64_t(i % 3);
    s.by_role[ADPROF_ROLE_ACTIVATION] = 6000 + 2500 * uint64_t(i % 7);
    s.host = s.by_role[ADPROF_ROLE_PARAMETER] + s.by_role[ADPROF_ROLE_ACTIVATION];
    s.by_op = {s.host};
    t->peak = std::max(t->peak, s.host);
    t->samples.push_back(s);
  }
  for (int b = 0; b < 300; ++b)  // thinner than a pixel column at the end, wide at the start
    t->phases.push_back({b < 10 ? b * 0.05 : 0.5 + (b - 10) / 600.0,
                         b < 10 ? (b + 1) * 0.05 : 0.5 + (b - 9) / 600.0,
                         b % 2 ? ADPROF_PHASE_BACKWARD : ADPROF_PHASE_FORWARD});
  TimelineWidget w;
  w.resize(900, 400);
  w.setTimeline(t);
  for (bool faded : {false, true}) {
    w.setHighlightOp(faded ? QString("op that is not there") : QString());
    QImage direct(w.size(), QImage::Format_RGB32);
    QPainter p(&direct);
    w.paintTo(p);
    p.end();
    QPicture shapes;
    QPainter recorder(&shapes);
    w.paintTo(recorder);
    recorder.end();
    QImage via_shapes(w.size(), QImage::Format_RGB32);
    QPainter player(&via_shapes);
    player.drawPicture(0, 0, shapes);
    player.end();
    const QRect plot = w.plotRect().toRect().adjusted(1, 1, -1, -1);
    int differ = 0, tinted = 0;
    for (int y = plot.top(); y <= plot.bottom(); ++y)
      for (int x = plot.left(); x <= plot.right(); ++x) {
        const QRgb a = direct.pixel(x, y), b = via_shapes.pixel(x, y);
        const int d = std::max({std::abs(qRed(a) - qRed(b)), std::abs(qGreen(a) - qGreen(b)),
                                std::abs(qBlue(a) - qBlue(b))});
        differ += d > 8;
        tinted += a != qRgb(255, 255, 255);
      }
    const int area = plot.width() * plot.height();
    QVERIFY2(
        differ < area / 50,
        qPrintable(QString("%1 of %2 pixels differ (faded: %3)").arg(differ).arg(area).arg(faded)));
    QVERIFY2(tinted > area / 2, "the bands' tint is missing");
  }
}

void GuiTest::badFilesGiveAMessage() {
  MainWindow w;
  QString junk = dir_.filePath("junk.adtrace");
  {
    QFile f(junk);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(4096, 'x'));
  }
  for (const QString &path : {junk, dir_.filePath("missing.adtrace"), dir_.path()}) {
    QSignalSpy loaded(&w, &MainWindow::traceLoaded);
    w.openTrace(path);
    QVERIFY(loaded.wait(20000));
    QCOMPARE(loaded.first().first().toBool(), false);
    QVERIFY2(!w.lastError().isEmpty(), qPrintable(path));
    QVERIFY(!w.report());
  }
  // A truncated trace reads up to its last complete chunk, or is refused cleanly.
  QString cut = dir_.filePath("cut.adtrace");
  QFile::copy(trace_, cut);
  QFile f(cut);
  QVERIFY(f.resize(f.size() / 2));
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openTrace(cut);
  QVERIFY(loaded.wait(20000));
  w.loader().waitForIdle();
}

void GuiTest::cancelLoading() {
  MainWindow w;
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openTrace(trace_);
  w.loader().cancelLoad(0);
  QVERIFY(loaded.count() || loaded.wait(20000));
  w.loader().waitForIdle();
  QVERIFY(!w.loader().loading());
  // Loading again after a cancel works.
  loaded.clear();
  w.openTrace(trace_);
  QVERIFY(loaded.wait(20000));
  QCOMPARE(loaded.last().first().toBool(), true);
}

void GuiTest::everyModelPassesTheTester() {
  using M = QAbstractItemModelTester::FailureReportingMode;
  LiveBuffersModel live;
  FindingsModel findings;
  OpsModel ops;
  WhatIfModel whatif;
  DiffModel diff;
  QAbstractItemModelTester t1(&live, M::QtTest), t2(&findings, M::QtTest), t3(&ops, M::QtTest),
      t4(&whatif, M::QtTest), t5(&diff, M::QtTest);
  live.setInstant(instant_at_peak(cli_));
  live.setInstant({});
  live.setInstant(instant_at_peak(cli_));
  findings.setFindings(cli_.findings);
  ops.setOps(cli_.ops);
  WhatIfData w;
  w.measured_peak = cli_.peak;
  w.rows = {{"early release", cli_.peak / 2, "made up for the model test only"}};
  whatif.setData(w);
  diff.setRows(diff_rows(cli_base_, cli_));
  // The models inside the window, too (they were filled while loading).
  QAbstractItemModelTester t6(window_->liveModel(), M::QtTest);
  QAbstractItemModelTester t7(window_->opsModel(), M::QtTest);
  QAbstractItemModelTester t8(window_->findingsModel(), M::QtTest);
  QAbstractItemModelTester t9(window_->diffModel(), M::QtTest);
  window_->showInstant(cli_.peak_time, true);
  QVERIFY(window_->whatIfModel()->empty());  // no what-if data: no invented rows
}

// Buffers labelled with the module that made them (tests/labels/modules.cpp): the live-buffer
// tree, the ops table and the op timeline's hover text name the labels beside the ops; both
// models stay under the model tester while they change.
void GuiTest::labelsShownWhereOpsAre() {
  const Report r = cli_report(record(dir_.path(), "modules.adtrace", {}, GUI_TEST_LABELS_WORKLOAD));
  using M = QAbstractItemModelTester::FailureReportingMode;
  LiveBuffersModel live;
  OpsModel ops;
  QAbstractItemModelTester t1(&live, M::QtTest), t2(&ops, M::QtTest);
  live.setInstant(instant_at_peak(r));
  ops.setOps(r.ops);
  QCOMPARE(live.headerData(LiveBuffersModel::Label, Qt::Horizontal).toString(), QString("Label"));
  // forward_cache -> linear: its buffers come from model.fc1 (256 KiB) and model.fc2 (32 KiB).
  QModelIndex caches = live.indexOfRole("forward_cache");
  QVERIFY(caches.isValid());
  QModelIndex linear;
  for (int row = 0; row < live.rowCount(caches); ++row)
    if (live.index(row, 0, caches).data(ModelBase::RowKeyRole).toString() == "linear")
      linear = live.index(row, 0, caches);
  QVERIFY(linear.isValid());
  const QModelIndex group_label = live.index(linear.row(), LiveBuffersModel::Label, caches);
  QCOMPARE(group_label.data().toString(), QString("model.fc1, model.fc2"));
  QVERIFY(group_label.data(Qt::ToolTipRole).toString().contains("model.fc1: 256.0 KiB"));
  QVERIFY(linear.data(Qt::ToolTipRole).toString().contains("linear in model.fc1, model.fc2"));
  // Each buffer row: the Label column is its label; the op's tooltip says where it ran.
  QCOMPARE(live.rowCount(linear), 3);
  for (int row = 0; row < live.rowCount(linear); ++row) {
    const LiveBuffer *b = live.buffer(live.index(row, 0, linear));
    QVERIFY(b);
    QVERIFY(b->label == "model.fc1" || b->label == "model.fc2");
    QCOMPARE(live.index(row, LiveBuffersModel::Label, linear).data().toString().toStdString(),
             b->label);
    QCOMPARE(live.index(row, LiveBuffersModel::Op, linear).data(Qt::ToolTipRole).toString(),
             QString::fromStdString(b->op + " in " + b->label));
  }
  // The ops table: the labels of each op's buffers at the peak, as the report has them.
  int linear_row = -1;
  for (int row = 0; row < ops.rowCount(); ++row)
    if (ops.ops()[size_t(row)].name == "linear") linear_row = row;
  QVERIFY(linear_row >= 0);
  QCOMPARE(ops.index(linear_row, OpsModel::Labels).data().toString(),
           QString("model.fc1, model.fc2"));
  QVERIFY(ops.index(linear_row, OpsModel::Labels)
              .data(Qt::ToolTipRole)
              .toString()
              .contains("model.fc2: 160.0 KiB"));
  // Changes under the testers: another instant, none, and back.
  live.setInstant(instant_at_peak(cli_));
  live.setInstant({});
  live.setInstant(instant_at_peak(r));
  ops.setOps({});
  ops.setOps(r.ops);
  // The main window's op timeline: hovering at the peak names the labels of each op series
  // (whichever ops the op timeline tracks now; the GUI workload's buffers carry labels).
  window_->loader().waitForIdle();
  TimelineWidget *t = window_->timeline();
  t->setGrouping(TimelineWidget::Grouping::Op);
  t->resetView();
  const QString hover = t->valuesAt(cli_.peak_time);
  int named = 0;
  for (const std::string &op : t->trackedOps())
    for (const OpSummary &o : cli_.ops) {
      const std::string labels = labels_text(o.labels_at_peak);
      if (o.name != op || labels.empty() || o.live_at_peak == 0) continue;
      QVERIFY2(hover.contains(QString::fromStdString(op + " <i>in " + labels + "</i>")),
               qPrintable(hover));
      ++named;
    }
  QVERIFY2(named > 0, qPrintable(hover));
  t->setGrouping(TimelineWidget::Grouping::Role);
}

void GuiTest::whatIfPanel() {
#ifdef ADPROF_SANITIZED_BUILD
  QSKIP("records a sanitized sample under the interposer, which ASan/TSan forbid");
#endif
  // The test workload has no adcore tape: no rows, and the panel says so.
  QVERIFY(window_->whatIfModel()->empty());
#ifdef GUI_TEST_DENSENET
  QString trace = QDir(dir_.path()).filePath("densenet.adtrace");
  QProcess p;
  p.start(ADPROF_CLI, {"run", "-o", trace, "--no-report", "--", GUI_TEST_DENSENET, "--naive"});
  QVERIFY(p.waitForFinished(120000) && p.exitCode() == 0);
  MainWindow w;
  QSignalSpy shown(&w, &MainWindow::whatIfShown);
  w.openTrace(trace);
  QVERIFY(shown.wait(120000));
  WhatIf expect = predict_policies(trace.toStdString());
  QVERIFY(expect.ad_tape);
  WhatIfModel *m = w.whatIfModel();
  QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(m->rowCount(), int(expect.policies.size() + (expect.all.applicable ? 1 : 0)));
  for (size_t i = 0; i < expect.policies.size(); ++i) {
    const PolicyPrediction &pp = expect.policies[i];
    QModelIndex predicted = m->index(int(i), WhatIfModel::Predicted);
    if (pp.applicable)
      QCOMPARE(predicted.data(ModelBase::SortRole).toULongLong(), pp.predicted_peak);
    else
      QVERIFY(!predicted.data(ModelBase::SortRole).isValid());  // no number when not predicted
    QCOMPARE(m->index(int(i), WhatIfModel::Measured).data(ModelBase::SortRole).toULongLong(),
             expect.measured_peak);
  }
  w.loader().waitForIdle();
#else
  QSKIP("no adcore sample (densenet) in this build");
#endif
}

void GuiTest::screenshotMode() {
  QString out = dir_.filePath("shots");
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QT_QPA_PLATFORM", "offscreen");
  p.setProcessEnvironment(env);
  p.start(GUI_TEST_GUI, {"--screenshot", out, trace_, base_});
  QVERIFY(p.waitForFinished(120000));
  QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
  for (const char *name : {"gui-main.png", "gui-timeline-role.png", "gui-instant.png",
                           "gui-findings.png", "gui-ops.png", "gui-diff.png", "gui-whatif.png"}) {
    QImage image(QDir(out).filePath(name));
    QVERIFY2(!image.isNull(), name);
  }
}

// The status line splits the foreign bytes at the peak by when they were made, as the report
// does (start-up: before the first op or step; tests/profiler/workloads/start_up.cpp).
void GuiTest::foreignSplitInTheStatus() {
  const QString trace = record(dir_.path(), "start_up.adtrace", {}, GUI_TEST_START_UP_WORKLOAD);
  const Report cli = cli_report(trace);
  QVERIFY(cli.start_up_end >= 0);
  QCOMPARE(cli.peak_foreign_after_start_up, 256u << 10);
  MainWindow w;
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openTrace(trace);
  QVERIFY(loaded.wait(60000));
  w.loader().waitForIdle();
  const QString expected =
      QStringLiteral("; foreign %1 (%2 from start-up, %3 made after it)")
          .arg(QString::fromStdString(format_bytes(cli.peak_by_role[ADPROF_ROLE_FOREIGN])),
               QString::fromStdString(format_bytes(cli.peak_foreign_start_up)),
               QString::fromStdString(format_bytes(cli.peak_foreign_after_start_up)));
  QVERIFY2(w.statusText().contains(expected), qPrintable(w.statusText() + " / " + expected));

  // Threads other than the program's first made some (two named lib_pool, 96 KiB each): the
  // status names the most of them, as the report's lines by thread do.
  const QString pool =
      record(dir_.path(), "start_up_pool.adtrace", {"pool"}, GUI_TEST_START_UP_WORKLOAD);
  QSignalSpy reloaded(&w, &MainWindow::traceLoaded);
  w.openTrace(pool);
  QVERIFY(reloaded.wait(60000));
  w.loader().waitForIdle();
  QVERIFY2(w.statusText().contains(QStringLiteral("made after it, 192.0 KiB of it on lib_pool)")),
           qPrintable(w.statusText()));
}

// A run that used a device: the status line gives its device peak and the roles in it, as the
// text report does (the host's peak alone said nothing of a GPU's budget).
void GuiTest::devicePeakByRoleInTheStatus() {
  const QString trace = record(dir_.path(), "device.adtrace", {"--device"});
  const Report cli = cli_report(trace);
  QCOMPARE(cli.device_peak, 24 * kMiB);
  MainWindow w;
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openTrace(trace);
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  w.loader().waitForIdle();
  const QString status = w.statusText();
  const QRegularExpression expected(
      "device peak 24\\.0 MiB at [^(]+ \\(adjoint 16\\.0 MiB, forward_cache 8\\.0 MiB\\)$");
  QVERIFY2(expected.match(status).hasMatch(), qPrintable(status));
  // A trace without device memory says nothing of one.
  MainWindow host;
  QSignalSpy host_loaded(&host, &MainWindow::traceLoaded);
  host.openTrace(trace_);
  QVERIFY(host_loaded.wait(60000));
  host.loader().waitForIdle();
  QVERIFY2(host.statusText().contains("peak") && !host.statusText().contains("device"),
           qPrintable(host.statusText()));
}

// A PyTorch memory snapshot opens as a trace does (TraceReader reads it; docs/PYTORCH.md,
// "Snapshots"): the hand-made one's peak, 17.5 MiB, in the status line.
void GuiTest::pytorchSnapshotOpensAsATrace() {
  MainWindow w;
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openTrace(QStringLiteral(GUI_TEST_SNAPSHOT));
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  w.loader().waitForIdle();
  QVERIFY2(w.statusText().contains("peak 17.5 MiB"), qPrintable(w.statusText()));
}

// The chart and the diff's base line end where the trace ends: a timeline's last sample is the
// live bytes at the trace's end (the report's live_at_end), however coarse its time buckets.
// Before, each bucket kept only its highest moment, so what followed it in the last bucket (the
// frees at the program's exit) was lost: the base line ended in mid-air above the base's end.
void GuiTest::timelineEndsAtTheTracesEnd() {
  const std::pair<QString, const Report *> traces[] = {{trace_, &cli_}, {base_, &cli_base_}};
  for (const auto &[path, report] : traces)
    for (size_t max_samples : {size_t(16), TimelineOptions{}.max_samples}) {
      TraceReader reader(path.toStdString());
      TimelineOptions options;
      options.max_samples = max_samples;
      const Timeline t = build_timeline(reader, options);
      QVERIFY(!t.samples.empty());
      QVERIFY2(t.samples.back().host == report->live_at_end,
               qPrintable(QString("%1, %2 samples at most: the last sample holds %3 bytes, the "
                                  "trace ends with %4")
                              .arg(path)
                              .arg(max_samples)
                              .arg(t.samples.back().host)
                              .arg(report->live_at_end)));
      QVERIFY(t.samples.back().time <= t.end);
      QVERIFY(t.samples.size() <= 2 * max_samples + 1);
    }
}

QTEST_MAIN(GuiTest)
#include "gui_test.moc"
