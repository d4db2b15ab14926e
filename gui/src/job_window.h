// The job view (docs/GUI.md, "Jobs"): a training job's ranks, one lane each on the job's clock
// (JobLanesWidget), the outlier named above them, the ranks' table below; a rank's full view
// (a MainWindow on its trace) one double click away, or one click on the outlier's name. The
// analysis is the library's (adprof/job_lanes.h, off the UI thread through TraceLoader).
#pragma once

#include <QMainWindow>
#include <QMap>
#include <QPointer>
#include <memory>

#include "job_lanes_widget.h"
#include "job_model.h"
#include "main_window.h"
#include "trace_loader.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace adprof::gui {

class JobWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit JobWindow(QWidget *parent = nullptr);
  ~JobWindow() override;

  // `paths` as `adprof report --job` takes them: a job's folder (or the folder of its machines'
  // folders), a trace of the run, or one folder or trace per machine.
  void openJob(const QStringList &paths);
  // The full view of a lane's rank: its trace in a MainWindow (one per trace; an open one is
  // raised). Null when there is no such lane.
  MainWindow *openLane(int lane);

  // For tests and screenshots.
  std::shared_ptr<const job::JobLanes> job() const { return job_; }
  JobRanksModel *ranksModel() const { return model_; }
  JobLanesWidget *lanes() const { return lanes_; }
  QTableView *ranksView() const { return table_; }
  QString captionText() const;  // the line above the lanes: the job, the outlier in words
  QString statusText() const;
  QString lastError() const { return last_error_; }
  TraceLoader &loader() { return loader_; }

 signals:
  void jobLoaded(bool ok);
  void laneOpened(MainWindow *window);

 protected:
  void closeEvent(QCloseEvent *event) override;

 private:
  void buildUi();
  void buildActions();
  void showJob(std::shared_ptr<const job::JobLanes> job);
  void fail(const QString &what, const std::string &error);
  int laneOfRow(const QModelIndex &proxy_index) const;

  TraceLoader loader_;
  JobLanesWidget *lanes_ = nullptr;
  JobRanksModel *model_ = nullptr;
  QSortFilterProxyModel *proxy_ = nullptr;
  QTableView *table_ = nullptr;
  QLabel *caption_ = nullptr;
  QPushButton *open_rank_ = nullptr;
  QLabel *status_ = nullptr;
  QProgressBar *progress_ = nullptr;
  QPushButton *cancel_ = nullptr;
  QStringList paths_;
  std::shared_ptr<const job::JobLanes> job_;
  QMap<QString, QPointer<MainWindow>> rank_windows_;  // by trace
  QString last_error_;
};

}  // namespace adprof::gui
