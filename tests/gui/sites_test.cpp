// The allocation sites' tree (traces recorded with `adprof run --stacks`): SitesModel bottom-up
// and top-down on sites of known stacks, through QAbstractItemModelTester; and the window's
// Sites panel on a real recording with stacks.
#include <QAbstractItemModelTester>
#include <QDir>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "main_window.h"
#include "sites_model.h"

using namespace adprof::gui;

namespace {

adprof::SiteSummary site(const std::string &name, std::vector<std::string> stack,
                         uint64_t allocations, uint64_t bytes) {
  adprof::SiteSummary s;
  s.site = name;
  s.stack = std::move(stack);
  s.allocations = allocations;
  s.bytes = bytes;
  s.peak_bytes = bytes / 2;
  return s;
}

QString text(const QAbstractItemModel &m, const QModelIndex &i, int column = 0) {
  return m.data(m.index(i.row(), column, i.parent())).toString();
}

}  // namespace

class SitesTest : public QObject {
  Q_OBJECT

 private slots:
  void bottomUpAndTopDown();
  void windowShowsTheSitesOfARecordingWithStacks();
};

void SitesTest::bottomUpAndTopDown() {
  SitesModel m;
  QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::QtTest);
  m.setSites({site("a (x.cpp:1)", {"a (x.cpp:1)", "f (x.cpp:5)", "main (x.cpp:9)"}, 10, 100),
              site("b (y.cpp:2)", {"b (y.cpp:2)", "f (x.cpp:6)", "main (x.cpp:9)"}, 5, 50),
              site("(unknown stack)", {}, 1, 8)});
  // Bottom-up: the three sites, each with its callers below it.
  QCOMPARE(m.rowCount(), 3);
  const QModelIndex a = m.index(0, 0);
  QCOMPARE(m.data(a).toString(), QString("a (x.cpp:1)"));
  QCOMPARE(m.siteOf(a), QString("a (x.cpp:1)"));
  QCOMPARE(m.rowCount(a), 1);
  const QModelIndex f = m.index(0, 0, a);
  QCOMPARE(m.data(f).toString(), QString("f (x.cpp:5)"));
  QVERIFY(m.siteOf(f).isEmpty());
  QCOMPARE(m.data(m.index(0, 0, f)).toString(), QString("main (x.cpp:9)"));
  QCOMPARE(m.parent(f), a);
  // Top-down: main first, holding both sites' figures; the sites are the leaves.
  m.setDirection(SitesModel::Direction::TopDown);
  QCOMPARE(m.rowCount(), 2);
  const QModelIndex main_row = m.index(0, 0);
  QCOMPARE(m.data(main_row).toString(), QString("main (x.cpp:9)"));
  QCOMPARE(m.data(m.index(0, SitesModel::Allocations)).toULongLong(), 15ull);
  QCOMPARE(m.data(m.index(0, SitesModel::Bytes), ModelBase::SortRole).toULongLong(), 150ull);
  QCOMPARE(m.data(m.index(0, SitesModel::AtPeak), ModelBase::SortRole).toULongLong(), 75ull);
  QCOMPARE(m.rowCount(main_row), 2);  // f at line 5 and f at line 6: two call sites
  const QModelIndex f6 = m.index(1, 0, main_row);
  QCOMPARE(text(m, f6), QString("f (x.cpp:6)"));
  const QModelIndex b = m.index(0, 0, f6);
  QCOMPARE(m.siteOf(b), QString("b (y.cpp:2)"));
  QCOMPARE(m.rowCount(b), 0);
  QCOMPARE(m.data(m.index(1, 0)).toString(), QString("(unknown stack)"));
  m.setSites({});
  QCOMPARE(m.rowCount(), 0);
}

void SitesTest::windowShowsTheSitesOfARecordingWithStacks() {
  QTemporaryDir dir;
  const QString trace = QDir(dir.path()).filePath("stacks.adtrace");
  QProcess p;
  p.start(ADPROF_CLI,
          QStringList{"run", "--stacks", "-o", trace, "--no-report", "--", GUI_TEST_WORKLOAD});
  QVERIFY(p.waitForFinished(60000));
  QCOMPARE(p.exitCode(), 0);
  MainWindow w;
  QAbstractItemModelTester tester(w.sitesModel(),
                                  QAbstractItemModelTester::FailureReportingMode::QtTest);
  QSignalSpy loaded(&w, &MainWindow::traceLoaded);
  w.openFiles({trace});
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  QVERIFY(w.sitesModel()->rowCount() > 0);
  QVERIFY(!w.sitesModel()->siteOf(w.sitesModel()->index(0, 0)).isEmpty());
  w.sitesModel()->setDirection(SitesModel::Direction::TopDown);
  QVERIFY(w.sitesModel()->rowCount() > 0);
  w.loader().waitForIdle();
  // Selecting a site highlights its bytes: the chart gets the site's series, whose highest
  // point is at least what the site held at the peak.
  const adprof::SiteSummary *biggest = nullptr;
  for (const adprof::SiteSummary &s : w.sitesModel()->sites())
    if (!biggest || s.peak_bytes > biggest->peak_bytes) biggest = &s;
  QVERIFY(biggest && biggest->peak_bytes > 0);
  QSignalSpy shown(&w, &MainWindow::opTimelineShown);
  w.highlightSite(QString::fromStdString(biggest->site));
  QVERIFY(shown.wait(60000));
  auto timeline = w.timeline()->opTimeline();
  QVERIFY(timeline);
  QCOMPARE(timeline->site_names, std::vector<std::string>{biggest->site});
  uint64_t highest = 0;
  for (const adprof::TimelineSample &s : timeline->samples) {
    QCOMPARE(s.by_site.size(), size_t{1});
    highest = std::max(highest, s.by_site[0]);
  }
  QVERIFY2(highest >= biggest->peak_bytes,
           qPrintable(QString("%1 < %2").arg(highest).arg(biggest->peak_bytes)));
  QVERIFY(highest <= w.timeline()->opTimeline()->peak);
  w.loader().waitForIdle();
}

QTEST_MAIN(SitesTest)
#include "sites_test.moc"
