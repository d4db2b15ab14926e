// adprof-gui as a newcomer first sees it (QT_QPA_PLATFORM=offscreen, settings in a temporary
// folder): the window fits the screen, the lower panel is not the empty Diff tab, a dropped trace
// opens through the same path as File > Open, and the recent files survive a restart.
#include <QAbstractItemModelTester>
#include <QDir>
#include <QDockWidget>
#include <QDropEvent>
#include <QMenu>
#include <QMimeData>
#include <QProcess>
#include <QScreen>
#include <QSettings>
#include <QSignalSpy>
#include <QTabBar>
#include <QTemporaryDir>
#include <QTest>

#include "main_window.h"

using namespace adprof::gui;

namespace {

QString record(const QString &dir, const QString &name) {
  QString trace = QDir(dir).filePath(name);
  QProcess p;
  p.start(ADPROF_CLI, QStringList{"run", "-o", trace, "--no-report", "--", GUI_TEST_WORKLOAD});
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("recording failed: %s", p.readAllStandardError().constData());
  return trace;
}

// The title of the dock shown in the lower area: the current tab of the docks' tab bar.
QString lowerTab(const MainWindow &w) {
  for (QTabBar *bar : w.findChildren<QTabBar *>()) {
    if (!bar->isVisible() || bar->count() < 2) continue;
    for (int i = 0; i < bar->count(); ++i)
      if (bar->tabText(i) == w.dock("diff")->windowTitle())
        return bar->tabText(bar->currentIndex());
  }
  return {};
}

// A drop of `files` onto the window, as the window system delivers it.
void drop(MainWindow &w, const QStringList &files) {
  QMimeData mime;
  QList<QUrl> urls;
  for (const QString &f : files) urls << QUrl::fromLocalFile(f);
  mime.setUrls(urls);
  const QPoint at = w.rect().center();
  QDragEnterEvent enter(at, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(&w, &enter);
  QVERIFY(enter.isAccepted());
  QDropEvent event(QPointF(at), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QCoreApplication::sendEvent(&w, &event);
  QVERIFY(event.isAccepted());
}

}  // namespace

class FirstRunTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void windowFitsTheScreen();
  void savedGeometryLargerThanTheScreenShrinks();
  void lowerPanelIsNotTheEmptyDiff();
  void droppedTraceOpensAndIsRemembered();
  void missingRecentFileLeavesTheList();

 private:
  QTemporaryDir dir_;
  QString trace_;
};

void FirstRunTest::initTestCase() {
  QVERIFY(dir_.isValid());
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir_.filePath("settings"));
  QCoreApplication::setOrganizationName("adprof-first-run-test");
  QCoreApplication::setApplicationName("adprof-gui");
  QVERIFY(QSettings().allKeys().isEmpty());  // a newcomer: nothing saved
  trace_ = record(dir_.path(), "first.adtrace");
}

void FirstRunTest::windowFitsTheScreen() {
  MainWindow w;
  w.restoreState();  // as main() does; nothing is saved yet
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  const QRect available = w.screen()->availableGeometry();
  QVERIFY2(available.contains(w.frameGeometry()),
           qPrintable(QString("%1x%2 window on a %3x%4 screen")
                          .arg(w.width())
                          .arg(w.height())
                          .arg(available.width())
                          .arg(available.height())));
  // Most of the screen, not Qt's size-hint default (about 790x540 whatever the screen).
  QVERIFY(w.width() >= available.width() * 7 / 10);
  QVERIFY(w.height() >= available.height() * 7 / 10);
}

void FirstRunTest::savedGeometryLargerThanTheScreenShrinks() {
  const QRect available = QGuiApplication::primaryScreen()->availableGeometry();
  {
    MainWindow big;
    big.resize(available.width() * 2, available.height() * 2);  // saved on a larger monitor
    QSettings().setValue("window/geometry", big.saveGeometry());
  }
  MainWindow w;
  w.restoreState();
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  QVERIFY(w.width() <= available.width() && w.height() <= available.height());
  QSettings().remove("window/geometry");
}

void FirstRunTest::lowerPanelIsNotTheEmptyDiff() {
  MainWindow w;
  w.restoreState();
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  // Before any trace: the live buffers' tab (it says "No trace."), not the empty Diff.
  QTRY_COMPARE(lowerTab(w), w.dock("instant")->windowTitle());
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openFiles({trace_});
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  // With a trace: its findings (the test workload has some).
  QVERIFY(w.findingsModel()->rowCount() > 0);
  QCOMPARE(lowerTab(w), w.dock("findings")->windowTitle());
  QAbstractItemModelTester findings(w.findingsModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
  QAbstractItemModelTester live(w.liveModel(),
                                QAbstractItemModelTester::FailureReportingMode::QtTest);
  w.loader().waitForIdle();
}

void FirstRunTest::droppedTraceOpensAndIsRemembered() {
  QSettings().remove("recentFiles");
  {
    MainWindow w;
    w.restoreState();
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy loaded(&w, &MainWindow::traceLoaded);
    drop(w, {trace_});
    QVERIFY(loaded.wait(60000));
    QCOMPARE(loaded.first().first().toBool(), true);
    QVERIFY(w.report());
    QCOMPARE(w.recentFiles(), QStringList{QFileInfo(trace_).absoluteFilePath()});
    w.loader().waitForIdle();
    w.close();  // saves the layout, as quitting does
  }
  // A new session (a new window reading the same settings file) lists it under Open recent.
  QSettings().sync();
  MainWindow again;
  again.restoreState();
  QCOMPARE(again.recentFiles(), QStringList{QFileInfo(trace_).absoluteFilePath()});
  QMenu *recent = nullptr;
  for (QMenu *m : again.findChildren<QMenu *>())
    if (m->title().remove('&') == "Open recent") recent = m;
  QVERIFY(recent);
  QVERIFY(recent->isEnabled());
  QCOMPARE(recent->actions().size(), 1);
  QVERIFY(recent->actions().first()->text().endsWith(QFileInfo(trace_).absoluteFilePath()));
  // Choosing it opens the trace through the same path.
  QSignalSpy loaded(&again, &MainWindow::traceLoaded);
  recent->actions().first()->trigger();
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  again.loader().waitForIdle();
}

void FirstRunTest::missingRecentFileLeavesTheList() {
  QString gone = dir_.filePath("gone.adtrace");
  QVERIFY(QFile::copy(trace_, gone));
  MainWindow w;
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openFiles({gone});
  QVERIFY(loaded.wait(60000));
  QVERIFY(w.recentFiles().contains(QFileInfo(gone).absoluteFilePath()));
  w.loader().waitForIdle();
  QVERIFY(QFile::remove(gone));
  loaded.clear();
  w.openFiles({gone});
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), false);
  QVERIFY(!w.recentFiles().contains(QFileInfo(gone).absoluteFilePath()));
  QVERIFY(w.recentFiles().contains(QFileInfo(trace_).absoluteFilePath()));
  w.loader().waitForIdle();
}

QTEST_MAIN(FirstRunTest)
#include "first_run_test.moc"
