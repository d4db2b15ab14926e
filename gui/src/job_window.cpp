#include "job_window.h"

#include <QAction>
#include <QCloseEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStatusBar>
#include <QTableView>
#include <QVBoxLayout>

#include "load_status.h"
#include "palette.h"

namespace adprof::gui {

JobWindow::JobWindow(QWidget *parent) : QMainWindow(parent) {
  setWindowTitle(tr("adprof-gui — job"));
  buildUi();
  buildActions();
  resize(1200, 800);
}

JobWindow::~JobWindow() = default;

void JobWindow::buildUi() {
  auto *splitter = new QSplitter(Qt::Vertical, this);
  auto *top = new QWidget(splitter);
  auto *layout = new QVBoxLayout(top);
  layout->setContentsMargins(6, 6, 6, 2);
  auto *head = new QHBoxLayout;
  caption_ = new QLabel(tr("No job. File > Open job folder..."), top);
  caption_->setTextFormat(Qt::RichText);
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextBrowserInteraction);
  // The outlier's name is a link to its full view: one click.
  connect(caption_, &QLabel::linkActivated, this, [this](const QString &link) {
    if (link.startsWith("lane:")) openLane(link.mid(5).toInt());
  });
  head->addWidget(caption_, 1);
  open_rank_ = new QPushButton(tr("Open the rank's full view"), top);
  open_rank_->setEnabled(false);
  connect(open_rank_, &QPushButton::clicked, this, [this] { openLane(lanes_->selectedLane()); });
  head->addWidget(open_rank_, 0, Qt::AlignTop);
  layout->addLayout(head);
  lanes_ = new JobLanesWidget;
  auto *scroll = new QScrollArea(top);  // a job of many ranks: its lanes scroll
  scroll->setWidget(lanes_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  layout->addWidget(scroll, 1);
  model_ = new JobRanksModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(ModelBase::SortRole);
  table_ = new QTableView(splitter);
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(JobRanksModel::Rank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setAlternatingRowColors(true);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setWordWrap(false);
  splitter->addWidget(top);
  splitter->addWidget(table_);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);
  // The lanes and the table select together; a double click on either opens the rank.
  connect(lanes_, &JobLanesWidget::laneSelected, this, [this](int lane) {
    open_rank_->setEnabled(lane >= 0);
    open_rank_->setText(
        lane >= 0 && job_
            ? tr("Open %1's full view").arg(lane_name(*job_, static_cast<size_t>(lane)))
            : tr("Open the rank's full view"));
    const QModelIndex row = proxy_->mapFromSource(model_->index(lane, 0));
    if (table_->currentIndex().row() != row.row())
      table_->selectionModel()->setCurrentIndex(
          row, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  });
  connect(lanes_, &JobLanesWidget::laneActivated, this, [this](int lane) { openLane(lane); });
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex &current) {
            const int lane = laneOfRow(current);
            if (lane >= 0) lanes_->selectLane(lane);
          });
  connect(table_, &QTableView::doubleClicked, this,
          [this](const QModelIndex &index) { openLane(laneOfRow(index)); });

  const LoadStatus loading = addLoadStatus(this, loader_);
  status_ = loading.message;
  progress_ = loading.progress;
  cancel_ = loading.cancel;
  connect(cancel_, &QPushButton::clicked, this,
          [this] { loader_.cancelLoad(TraceLoader::kJobSlot); });
}

void JobWindow::buildActions() {
  QMenu *file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("Open job &folder..."), this,
                  [this] {
                    const QString dir = QFileDialog::getExistingDirectory(
                        this, tr("Open a job's folder (or the folder of its machines' folders)"),
                        paths_.isEmpty() ? QString() : QFileInfo(paths_[0]).path());
                    if (!dir.isEmpty()) openJob({dir});
                  })
      ->setShortcut(QKeySequence("Ctrl+J"));
  file->addAction(tr("Open the job of a &trace..."), this,
                  [this] {
                    const QString trace = QFileDialog::getOpenFileName(
                        this, tr("Open the job a trace belongs to"),
                        paths_.isEmpty() ? QString() : QFileInfo(paths_[0]).path(),
                        tr("adprof traces (*.adtrace*);;All files (*)"));
                    if (!trace.isEmpty()) openJob({trace});
                  })
      ->setShortcut(QKeySequence::Open);
  file->addSeparator();
  file->addAction(tr("&Close"), this, &QWidget::close)->setShortcut(QKeySequence::Close);
  QMenu *view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("Open the selected rank's &full view"), this,
                  [this] { openLane(lanes_->selectedLane()); })
      ->setShortcut(QKeySequence("Ctrl+Return"));
}

void JobWindow::openJob(const QStringList &paths) {
  paths_ = paths;
  QStringList names;
  for (const QString &p : paths) names << QFileInfo(p).fileName();
  setWindowTitle(tr("adprof-gui — job %1").arg(names.join(", ")));
  status_->setText(tr("Reading the job %1...").arg(paths.join(", ")));
  loader_.loadJob(paths, [this, paths](Outcome<job::JobLanes> r) {
    if (paths != paths_) return;
    if (!r.value) {
      if (r.cancelled)
        status_->setText(tr("Loading cancelled."));
      else
        fail(paths.join(", "), r.error);
      emit jobLoaded(false);
      return;
    }
    showJob(r.value);
    emit jobLoaded(true);
  });
}

void JobWindow::showJob(std::shared_ptr<const job::JobLanes> job) {
  job_ = std::move(job);
  lanes_->setJob(job_);
  model_->setJob(job_);
  open_rank_->setEnabled(false);
  const job::Job &j = job_->job;
  const size_t ranks = j.ranks().size();
  size_t kinds[4] = {};
  for (const job::Process &p : j.processes) ++kinds[static_cast<int>(p.kind)];
  auto count = [](size_t n, const char *one, const char *many) {
    return QString("%1 %2").arg(n).arg(n == 1 ? one : many);
  };
  QString summary = ranks ? tr("Job of %1").arg(count(ranks, "rank", "ranks"))
                          : tr("No process of this run said it is a rank: %1")
                                .arg(count(j.processes.size(), "process", "processes"));
  if (j.run_ids.size() > 1)
    summary += tr(", %1 (one per machine)").arg(count(j.run_ids.size(), "run", "runs"));
  if (ranks)
    summary += ", " + count(kinds[1], "launcher", "launchers") + ", " +
               count(kinds[2], "worker", "workers");
  // The outlier in the report's words, its rank a link to its full view.
  QString words = QString::fromStdString(job::outlier_text(j)).trimmed().toHtmlEscaped();
  words.replace("\n", "<br>");
  if (job_->outlier_lane >= 0) {
    // The name in the job's outlier's own line (the device's when the ranks hold device
    // memory), not the first "rank N" of the text: the host's line may name that rank as its
    // lowest ("rank 1's, the lowest"), and "rank 1" is the start of "rank 10".
    const QString name = lane_name(*job_, static_cast<size_t>(job_->outlier_lane));
    const QString head = job_->outlier_on_device ? "Highest device peak: " : "Highest peak: ";
    const int at = words.indexOf(head + name + ",");
    if (at >= 0)
      words.replace(at + head.size(), name.size(),
                    QString("<a href=\"lane:%1\">%2</a>").arg(job_->outlier_lane).arg(name));
  }
  caption_->setText(QString("<b>%1</b><br>%2%3")
                        .arg(summary.toHtmlEscaped(), words, words.isEmpty() ? "" : "<br>") +
                    tr("<i>Double-click a lane or a row: the rank's full view.</i>"));
  status_->setText(tr("%1: %2; %3 on the job's clock")
                       .arg(paths_.join(", "), summary, format_seconds(job_->end)));
  table_->resizeColumnsToContents();
}

int JobWindow::laneOfRow(const QModelIndex &proxy_index) const {
  if (!proxy_index.isValid()) return -1;
  return proxy_->mapToSource(proxy_index).row();
}

MainWindow *JobWindow::openLane(int lane) {
  const job::Process *p = model_->process(lane);
  if (!p) return nullptr;
  const QString trace = QString::fromStdString(p->trace);
  QPointer<MainWindow> &window = rank_windows_[trace];
  if (!window) {
    // A window of its own (a QMainWindow child is one), closed with the job's.
    window = new MainWindow(this);
    window->setAttribute(Qt::WA_DeleteOnClose);
    window->setTitleNote(tr("%1 of the job").arg(lane_name(*job_, static_cast<size_t>(lane))));
    window->restoreState();
    window->openTrace(trace);
  }
  window->show();
  window->raise();
  window->activateWindow();
  emit laneOpened(window);
  return window;
}

QString JobWindow::captionText() const { return caption_->text(); }
QString JobWindow::statusText() const { return status_->text(); }

void JobWindow::fail(const QString &what, const std::string &error) {
  last_error_ = QString("%1: %2").arg(what, QString::fromStdString(error));
  status_->setText(tr("Cannot open %1").arg(last_error_));
  // Not modal: a bad job never blocks the window (nor a test).
  auto *box = new QMessageBox(
      QMessageBox::Critical, tr("Cannot open the job"),
      tr("%1 cannot be read as a job:\n\n%2").arg(what, QString::fromStdString(error)),
      QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setModal(false);
  if (!qEnvironmentVariable("QT_QPA_PLATFORM").startsWith("offscreen")) box->show();
}

void JobWindow::closeEvent(QCloseEvent *event) {
  loader_.cancelLoad(TraceLoader::kJobSlot);
  event->accept();
}

}  // namespace adprof::gui
