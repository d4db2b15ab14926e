// The job view (JobWindow) under QT_QPA_PLATFORM=offscreen, on a job of two machines recorded
// here without PyTorch (tests/cli/job_workload.cpp: two `adprof run`s, one per node, two ranks
// each; rank R holds (R + 1) MiB of forward caches at its peak): a lane per rank, the lanes on
// one clock (node 1 ran after node 0, so its lanes start after node 0's end), the outlier
// named, the table equal to `adprof report --job --json`, a rank's full view one double click
// (or one click on the outlier's name) away; and a job whose ranks hold device memory (its
// device column, the device's outlier).
#include <QAbstractItemModelTester>
#include <QDir>
#include <QFont>
#include <QFontMetrics>
#include <QImage>
#include <QLabel>
#include <QProcess>
#include <QProcessEnvironment>
#include <QSettings>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <nlohmann/json.hpp>

#include "job_window.h"
#include "main_window.h"

using namespace adprof;
using namespace adprof::gui;

namespace {

constexpr uint64_t kMiB = 1 << 20;

// One node's run of two ranks (NNODES nodes in the job); device_mib > 0: each rank declares
// device blocks too (job_workload.cpp's JOB_WORKLOAD_DEVICE: rank R's device peak is
// (R + 3) * device_mib MiB, its host forward caches none, but for `spike`:
// JOB_WORKLOAD_SPIKE=RANK:STEP:MIB).
void record_node(const QString &folder, int node, int nnodes = 2, int device_mib = 0,
                 const QString &spike = {}) {
  QDir().mkpath(folder);
  QProcess p;
  if (device_mib) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("JOB_WORKLOAD_DEVICE", QString::number(device_mib));
    if (!spike.isEmpty()) env.insert("JOB_WORKLOAD_SPIKE", spike);
    p.setProcessEnvironment(env);
  }
  p.start(ADPROF_CLI,
          {"run", "-o", QDir(folder).filePath("job.adtrace"), "--no-report", "--", JOB_WORKLOAD,
           "launch", QString::number(node), "2", QString::number(nnodes), device_mib ? "0" : "1"});
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("recording failed: %s", p.readAllStandardError().constData());
}

nlohmann::json cli_job(const QString &path) {
  QProcess p;
  p.start(ADPROF_CLI, {"report", "--json", path});
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("adprof report failed: %s", p.readAllStandardError().constData());
  return nlohmann::json::parse(p.readAllStandardOutput().toStdString());
}

// Pixels that are not background white nor the light grey of a lane's base line.
int inked_pixels(const QImage &image, const QRect &area) {
  int n = 0;
  for (int y = area.top(); y <= area.bottom(); ++y)
    for (int x = area.left(); x <= area.right(); ++x) {
      const QRgb c = image.pixel(x, y);
      if (qRed(c) < 0xD0 || qGreen(c) < 0xD0 || qBlue(c) < 0xD0) ++n;
    }
  return n;
}

bool load(JobWindow &w, const QStringList &paths) {
  QSignalSpy loaded(&w, &JobWindow::jobLoaded);
  w.openJob(paths);
  if (!loaded.wait(60000)) return false;
  w.loader().waitForIdle();
  return loaded.first().first().toBool();
}

}  // namespace

class JobTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void aLanePerRankOnOneClock();
  void theOutlierIsNamed();
  void lanesAreDrawnAtTheirTimes();
  void aRanksFullViewIsOneClickAway();
  void foldersOpenAsAJob();
  void badInputGivesAMessage();
  void aJobOnTheDevice();
  void aPeakInAFoldedStep();

 private:
  QTemporaryDir dir_;
  QString job_;
  nlohmann::json cli_;
  std::unique_ptr<JobWindow> window_;
};

void JobTest::initTestCase() {
  QVERIFY(dir_.isValid());
  // The rank windows' settings and recent files in the test's folder, not the user's.
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, dir_.filePath("settings"));
  job_ = dir_.filePath("job");
  record_node(job_ + "/node0", 0);
  record_node(job_ + "/node1", 1);
  cli_ = cli_job(job_);
  QCOMPARE(cli_["ranks"].size(), size_t(4));
  window_ = std::make_unique<JobWindow>();
  window_->resize(1200, 800);
  window_->show();
  // Every reset of the table's model is checked as it happens.
  new QAbstractItemModelTester(
      window_->ranksModel(), QAbstractItemModelTester::FailureReportingMode::QtTest, window_.get());
  new QAbstractItemModelTester(window_->ranksView()->model(),
                               QAbstractItemModelTester::FailureReportingMode::QtTest,
                               window_.get());
  QVERIFY(load(*window_, {job_}));
}

// The lanes and the table: the ranks of both machines in rank order, each equal to the CLI's
// job report; node 1's lanes after node 0's on the job's clock.
void JobTest::aLanePerRankOnOneClock() {
  const auto job = window_->job();
  QVERIFY(job);
  QCOMPARE(job->lanes.size(), size_t(4));
  QCOMPARE(job->job.run_ids.size(), size_t(2));
  JobRanksModel *model = window_->ranksModel();
  QCOMPARE(model->rowCount(), 4);
  for (int rank = 0; rank < 4; ++rank) {
    const nlohmann::json &c = cli_["ranks"][size_t(rank)];
    const job::Process *p = model->process(rank);
    QVERIFY(p);
    QCOMPARE(p->rank, int64_t(rank));
    QCOMPARE(p->trace, c["trace"].get<std::string>());
    QCOMPARE(model->index(rank, JobRanksModel::Rank).data().toString(),
             QString("rank %1").arg(rank));
    QCOMPARE(model->index(rank, JobRanksModel::Node).data().toString(), QString::number(rank / 2));
    QCOMPARE(model->index(rank, JobRanksModel::Peak).data(ModelBase::SortRole).toULongLong(),
             c["peak"].get<uint64_t>());
    QCOMPARE(p->report.peak_by_role[ADPROF_ROLE_FORWARD_CACHE], (rank + 1) * kMiB);
    // No device memory in this job: its device peak column says so, as the report's 0.
    QCOMPARE(model->index(rank, JobRanksModel::DevicePeak).data().toString(), QString("-"));
    QCOMPARE(model->index(rank, JobRanksModel::DevicePeak).data(ModelBase::SortRole).toULongLong(),
             c["device_peak"].get<uint64_t>());
    // The lane's timeline is the rank's memory: its peak is the report's.
    const job::Lane &lane = job->lanes[size_t(rank)];
    QCOMPARE(lane.timeline.peak, p->report.peak);
    QVERIFY(lane.offset >= 0);
    QVERIFY(lane.offset + lane.timeline.end <= job->end + 1e-9);
    // The peak's time on the job's clock, in the table.
    QCOMPARE(model->index(rank, JobRanksModel::PeakAt).data(ModelBase::SortRole).toDouble(),
             lane.offset + p->report.peak_time);
  }
  // One clock: node 1 was recorded after node 0 had ended, and its lanes say so.
  for (int early : {0, 1})
    for (int late : {2, 3})
      QVERIFY2(job->lanes[size_t(late)].offset >=
                   job->lanes[size_t(early)].offset + job->lanes[size_t(early)].timeline.end,
               qPrintable(QString("rank %1 at %2 s, rank %3 ends at %4 s")
                              .arg(late)
                              .arg(job->lanes[size_t(late)].offset)
                              .arg(early)
                              .arg(job->lanes[size_t(early)].offset +
                                   job->lanes[size_t(early)].timeline.end)));
  QCOMPARE(job->peak, cli_["ranks"][3]["peak"].get<uint64_t>());
}

void JobTest::theOutlierIsNamed() {
  const auto job = window_->job();
  QCOMPARE(job->outlier_lane, 3);
  QVERIFY(!job->outlier_on_device);  // no device memory: the host's outlier
  QCOMPARE(cli_["outlier"]["rank"], 3);
  QCOMPARE(cli_["outlier"]["memory"], "host");
  const QString caption = window_->captionText();
  QVERIFY2(caption.contains("Job of 4 ranks, 2 runs (one per machine)"), qPrintable(caption));
  QVERIFY2(caption.contains("Highest peak: <a href=\"lane:3\">rank 3</a>"), qPrintable(caption));
  QVERIFY2(caption.contains("rank 3: forward caches"), qPrintable(caption));
  QVERIFY(window_->ranksModel()->index(3, 0).data(Qt::FontRole).value<QFont>().bold());
  QVERIFY(!window_->ranksModel()->index(0, 0).data(Qt::FontRole).value<QFont>().bold());
}

// Each lane holds ink; the outlier's area (5 MiB at its peak) outweighs rank 0's (2 MiB); a
// lane of node 1 is blank before its start on the job's clock.
void JobTest::lanesAreDrawnAtTheirTimes() {
  JobLanesWidget *lanes = window_->lanes();
  const QImage image = lanes->grab().toImage();
  const QRect plot = lanes->plotRect();
  int ink[4] = {};
  for (int i = 0; i < 4; ++i) {
    const QRect band = lanes->laneRect(i);
    ink[i] = inked_pixels(image, QRect(plot.left(), band.top(), plot.width(), band.height()));
    QVERIFY2(ink[i] > 0, qPrintable(QString("lane %1 is empty").arg(i)));
  }
  QVERIFY2(ink[3] > ink[0], qPrintable(QString("%1 %2").arg(ink[3]).arg(ink[0])));
  const auto job = window_->job();
  const int start = static_cast<int>(lanes->xOfTime(job->lanes[2].offset));
  const QRect band = lanes->laneRect(2);
  QVERIFY(start - plot.left() > 10);
  QCOMPARE(inked_pixels(image, QRect(plot.left(), band.top() + 2, start - plot.left() - 2,
                                     band.height() - 6)),
           0);
}

// A double click on rank 1's lane opens its trace in the full view (a MainWindow: its report
// equal to the rank's); one click on the outlier's name in the caption opens rank 3's; a click
// selects a lane and its row.
void JobTest::aRanksFullViewIsOneClickAway() {
  JobLanesWidget *lanes = window_->lanes();
  QTest::mouseClick(lanes, Qt::LeftButton, {}, lanes->laneRect(2).center());
  QCOMPARE(lanes->selectedLane(), 2);
  QCOMPARE(window_->ranksView()->currentIndex().row(), 2);
  QSignalSpy opened(window_.get(), &JobWindow::laneOpened);
  QTest::mouseDClick(lanes, Qt::LeftButton, {}, lanes->laneRect(1).center());
  QCOMPARE(opened.count(), 1);
  auto *rank1 = opened.first().first().value<MainWindow *>();
  QVERIFY(rank1);
  QSignalSpy loaded(rank1, &MainWindow::traceLoaded);
  QVERIFY(loaded.wait(60000));
  QCOMPARE(loaded.first().first().toBool(), true);
  rank1->loader().waitForIdle();
  QCOMPARE(rank1->report()->peak, window_->ranksModel()->process(1)->report.peak);
  QCOMPARE(rank1->report()->trace, window_->ranksModel()->process(1)->trace);
  QVERIFY2(rank1->windowTitle().contains("rank 1 of the job"), qPrintable(rank1->windowTitle()));
  // The same rank again: the window that is open.
  QCOMPARE(window_->openLane(1), rank1);
  QCOMPARE(opened.count(), 2);
  // The outlier's name is a link to its full view.
  QLabel *caption = nullptr;
  for (QLabel *l : window_->findChildren<QLabel *>())
    if (l->text().contains("lane:3")) caption = l;
  QVERIFY(caption);
  emit caption->linkActivated("lane:3");
  QCOMPARE(opened.count(), 3);
  auto *rank3 = opened.last().first().value<MainWindow *>();
  QVERIFY(rank3 && rank3 != rank1);
  QSignalSpy loaded3(rank3, &MainWindow::traceLoaded);
  QVERIFY(loaded3.wait(60000));
  rank3->loader().waitForIdle();
  QCOMPARE(rank3->report()->peak, cli_["ranks"][3]["peak"].get<uint64_t>());
  rank1->close();
  rank3->close();
}

// A folder given to the main window (the command line, File > Open job, a drop) opens the job:
// the parent folder of the machines' folders, or each machine's folder.
void JobTest::foldersOpenAsAJob() {
  MainWindow main;
  main.openFiles({job_ + "/node0", job_ + "/node1"});
  auto *job = main.findChild<JobWindow *>();
  QVERIFY(job);
  QSignalSpy loaded(job, &JobWindow::jobLoaded);
  QVERIFY(loaded.count() || loaded.wait(60000));
  job->loader().waitForIdle();
  QVERIFY(job->job());
  QCOMPARE(job->job()->lanes.size(), size_t(4));
  QCOMPARE(job->job()->outlier_lane, 3);
  // One machine's folder: its ranks only.
  JobWindow half;
  QVERIFY(load(half, {job_ + "/node1"}));
  QCOMPARE(half.ranksModel()->rowCount(), 2);
  QCOMPARE(half.ranksModel()->process(0)->rank, int64_t(2));
}

void JobTest::badInputGivesAMessage() {
  QTemporaryDir empty;
  JobWindow w;
  QVERIFY(!load(w, {empty.path()}));
  QVERIFY2(w.lastError().contains("holds no trace of an adprof run"), qPrintable(w.lastError()));
  QVERIFY(!w.job());
  QCOMPARE(w.ranksModel()->rowCount(), 0);
  // The same run named twice, as `adprof report` refuses it.
  QVERIFY(!load(w, {job_ + "/node0", job_ + "/node0"}));
  QVERIFY2(w.lastError().contains("a run named twice"), qPrintable(w.lastError()));
}

// A job whose ranks hold device memory (two ranks; rank 1 holds 1 MiB more forward caches on
// the device, rank 0 2 MiB more on the host in step 0): the table's device column equals
// `adprof report --json`'s device peaks (sorting by it puts rank 1 first), its tooltip the
// reserved peak; the job's outlier is the device's, rank 1, its name a link in the caption's
// device line (before, the first "rank 1" of the text was: the host line's "rank 1's, the
// lowest") and on its lane with its device peak (before, the lane said "highest device peak"
// under the host peak, as if that were it; its row's tooltip, the outlier's words, hid its device
// cell's reserved peak). The model passes QAbstractItemModelTester on the load.
void JobTest::aJobOnTheDevice() {
  const QString folder = dir_.filePath("device");
  record_node(folder, 0, 1, 1, "0:0:2");
  const nlohmann::json cli = cli_job(folder);
  QCOMPARE(cli["ranks"].size(), size_t(2));
  QCOMPARE(cli["outlier"]["memory"], "device");
  JobWindow w;
  w.resize(1200, 800);
  w.show();
  new QAbstractItemModelTester(w.ranksModel(),
                               QAbstractItemModelTester::FailureReportingMode::QtTest, &w);
  new QAbstractItemModelTester(w.ranksView()->model(),
                               QAbstractItemModelTester::FailureReportingMode::QtTest, &w);
  QVERIFY(load(w, {folder}));
  JobRanksModel *model = w.ranksModel();
  QCOMPARE(model->rowCount(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json &c = cli["ranks"][size_t(rank)];
    const QModelIndex device = model->index(rank, JobRanksModel::DevicePeak);
    QCOMPARE(device.data(ModelBase::SortRole).toULongLong(), c["device_peak"].get<uint64_t>());
    QCOMPARE(device.data(ModelBase::SortRole).toULongLong(), (rank + 3) * kMiB);
    QCOMPARE(device.data().toString(), QString("%1.0 MiB").arg(rank + 3));
    const QString tip = device.data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains(QString("reserved peak %1.0 MiB").arg(4 * (rank + 3))), qPrintable(tip));
    // The outlier's row adds the job report's words under it (they used to replace it).
    QCOMPARE(tip.contains("Highest device peak: rank 1"), rank == 1);
    // The host peak beside it is the host's, as the CLI's.
    QCOMPARE(model->index(rank, JobRanksModel::Peak).data(ModelBase::SortRole).toULongLong(),
             c["peak"].get<uint64_t>());
  }
  // Sorted by the device peak, highest first: rank 1.
  w.ranksView()->sortByColumn(JobRanksModel::DevicePeak, Qt::DescendingOrder);
  QCOMPARE(w.ranksView()->model()->index(0, JobRanksModel::Rank).data().toString(),
           QString("rank 1"));
  const auto job = w.job();
  QVERIFY(job);
  QVERIFY(job->outlier_on_device);
  QCOMPARE(job->outlier_lane, 1);
  QVERIFY(model->index(1, 0).data(Qt::FontRole).value<QFont>().bold());
  const QString caption = w.captionText();
  QVERIFY2(caption.contains("Highest device peak: "), qPrintable(caption));
  // The link is on the device line's rank, not on the host line's mention of it.
  QVERIFY2(caption.contains("Highest peak: rank 0, 3.0 MiB (3.0x rank 1's, the lowest)"),
           qPrintable(caption));
  QVERIFY2(caption.contains("Highest device peak: <a href=\"lane:1\">rank 1</a>, 4.0 MiB (1.3x "
                            "rank 0's, the lowest)"),
           qPrintable(caption));
  QCOMPARE(caption.count("href="), 1);
  QVERIFY2(caption.contains("forward caches on the device 1.5x"), qPrintable(caption));
  const QString label = w.lanes()->laneLabel(1);
  QVERIFY2(label.endsWith("highest device peak:\n4.0 MiB"), qPrintable(label));
  QVERIFY2(!w.lanes()->laneLabel(0).contains("highest"), qPrintable(w.lanes()->laneLabel(0)));

  // That label is four lines: at the lanes' least height (a job of many ranks, whose lanes
  // scroll) each lane's label fits whole in its band, by its font's metrics (before, lanes were
  // 44 px whatever their labels: the device peak, the outlier's last two lines, was cut off).
  JobLanesWidget lanes;
  lanes.setJob(job);
  lanes.resize(lanes.minimumSizeHint());
  QCOMPARE(label.count('\n'), 3);
  for (int i = 0; i < 2; ++i) {
    const QString text = lanes.laneLabel(i);
    const QFontMetrics metrics(lanes.labelFont(i));
    QCOMPARE(lanes.labelFont(i).bold(), i == job->outlier_lane);
    const QRect room = lanes.labelRect(i);
    QVERIFY(lanes.laneRect(i).contains(room));
    const int lines = static_cast<int>(text.count('\n')) + 1;
    QVERIFY2(room.height() >= lines * metrics.height(),
             qPrintable(QString("lane %1: %2 lines of %3 px in %4 px")
                            .arg(i)
                            .arg(lines)
                            .arg(metrics.height())
                            .arg(room.height())));
    const QRect need = metrics.boundingRect(room, Qt::AlignLeft | Qt::AlignVCenter, text);
    QVERIFY2(room.contains(need), qPrintable(QString("lane %1: %2x%3 in %4x%5")
                                                 .arg(i)
                                                 .arg(need.width())
                                                 .arg(need.height())
                                                 .arg(room.width())
                                                 .arg(room.height())));
  }
  // The lanes do not overlap, and the widget holds them all.
  QVERIFY(lanes.laneRect(0).bottom() < lanes.laneRect(1).top());
  QVERIFY(lanes.laneRect(1).bottom() <= lanes.plotRect().bottom());
}

// A rank whose peak lies in a step outside the step window (`adprof run --steps 1:2`; rank 0
// holds 8 MiB more forward caches in step 3, JOB_WORKLOAD_SPIKE): its peak, and the roles the
// table shows for it, come from the writer's summary of that step. The table says so where it
// shows them: the peak's tooltip and the largest role's (before, the role's cell said nothing,
// as if its bytes had been read from the step's buffers, labels and ops); the lane names the
// step and its label, four lines, fits its lane.
void JobTest::aPeakInAFoldedStep() {
  const QString folder = dir_.filePath("folded");
  QDir().mkpath(folder);
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("JOB_WORKLOAD_SPIKE", "0:3:8");
  p.setProcessEnvironment(env);
  p.start(ADPROF_CLI, {"run", "-o", QDir(folder).filePath("job.adtrace"), "--no-report", "--steps",
                       "1:2", "--", JOB_WORKLOAD, "launch", "0", "2", "1", "1"});
  QVERIFY(p.waitForFinished(60000));
  QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
  const nlohmann::json cli = cli_job(folder);
  QCOMPARE(cli["ranks"][0]["peak_summarized"], true);
  QCOMPARE(cli["ranks"][1]["peak_summarized"], false);
  JobWindow w;
  w.resize(1200, 800);
  w.show();
  QVERIFY(load(w, {folder}));
  JobRanksModel *model = w.ranksModel();
  QCOMPARE(model->rowCount(), 2);
  const QString peak_tip = model->index(0, JobRanksModel::Peak).data(Qt::ToolTipRole).toString();
  QVERIFY2(peak_tip.startsWith("In step 3, outside the step window (--steps): that step's "
                               "summary, without its buffers, labels or ops"),
           qPrintable(peak_tip));
  const QModelIndex largest = model->index(0, JobRanksModel::LargestRole);
  QCOMPARE(largest.data().toString(), QString("forward_cache 9.0 MiB"));
  const QString role_tip = largest.data(Qt::ToolTipRole).toString();
  QVERIFY2(role_tip.startsWith("Bytes by role at step 3's peak, from that step's summary"),
           qPrintable(role_tip));
  // Rank 1's peak was recorded in full: no such words.
  QVERIFY(!model->index(1, JobRanksModel::LargestRole)
               .data(Qt::ToolTipRole)
               .toString()
               .contains("summary"));
  const auto job = w.job();
  QCOMPARE(job->outlier_lane, 0);
  JobLanesWidget lanes;
  lanes.setJob(job);
  lanes.resize(lanes.minimumSizeHint());
  const QString label = lanes.laneLabel(0);
  QVERIFY2(label.contains("\nin step 3, summarized\n"), qPrintable(label));
  const QRect need = QFontMetrics(lanes.labelFont(0))
                         .boundingRect(lanes.labelRect(0), Qt::AlignLeft | Qt::AlignVCenter, label);
  QVERIFY(lanes.labelRect(0).contains(need));
}

QTEST_MAIN(JobTest)
#include "job_test.moc"
