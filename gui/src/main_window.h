// The main window: the timeline in the centre, the views of one instant, the findings, the
// ops, the what-if and the diff in docks. It owns a TraceLoader and only moves the analysis
// library's results (gui_data.h) into the models and the timeline widget.
#pragma once

#include <QMainWindow>
#include <QPointer>
#include <memory>

#include "gui_data.h"
#include "models.h"
#include "sites_model.h"
#include "timeline_widget.h"
#include "trace_loader.h"

class QLabel;
class QLineEdit;
class QMenu;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QStackedWidget;
class QTableView;
class QTreeView;
class QComboBox;
class QDockWidget;

namespace adprof::gui {

class JobWindow;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget *parent = nullptr);
  ~MainWindow() override;

  void openTrace(const QString &path);
  void openBase(const QString &path);  // a second trace to diff against
  // What the command line, File > Open, Open recent and a drop share: the first file is the
  // trace and a second one its base; with `as_base` (a drop with Shift) onto a window that
  // shows a trace, the one file is the base. Folders are a job's (openJob).
  void openFiles(const QStringList &files, bool as_base = false);
  // A job (docs/GUI.md, "Jobs"): its ranks' lanes in a window of their own (JobWindow);
  // `paths` as `adprof report --job` takes them. openFiles() opens folders this way.
  JobWindow *openJob(const QStringList &paths);
  // Words after the file's name in the title ("rank 1 of the job").
  void setTitleNote(const QString &note) { title_note_ = note; }
  bool exportPng(const QString &path);
  bool exportSvg(const QString &path);
  // File > Export: the trace's export `what` to `out`, off the UI thread; exported() says when.
  void exportTrace(TraceLoader::Export what, const QString &out);
  // Window geometry, layout and grouping from QSettings; without saved ones (a first run) the
  // window takes 80% of the screen, and a saved geometry larger than the screen is shrunk.
  void restoreState();
  QStringList recentFiles() const;  // most recent first, persisted in QSettings

  // For tests, screenshots and benchmarks.
  TimelineWidget *timeline() const { return timeline_; }
  LiveBuffersModel *liveModel() const { return live_model_; }
  QString instantCaption() const;  // the "at an instant" panel's line
  FindingsModel *findingsModel() const { return findings_model_; }
  OpsModel *opsModel() const { return ops_model_; }
  // Allocation sites (traces recorded with --stacks): the tree beside the op view.
  SitesModel *sitesModel() const { return sites_model_; }
  WhatIfModel *whatIfModel() const { return whatif_model_; }
  DiffModel *diffModel() const { return diff_model_; }
  QTreeView *liveView() const { return live_view_; }
  QTableView *findingsView() const { return findings_view_; }
  QTableView *opsView() const { return ops_view_; }
  QDockWidget *dock(const QString &name) const;
  std::shared_ptr<const Report> report() const { return report_; }
  TraceLoader &loader() { return loader_; }
  QString lastError() const { return last_error_; }
  QString statusText() const;
  QString selectionText() const;

 public slots:
  void showInstant(double time, bool at_peak);
  void showFinding(int row);
  void highlightOp(int row);
  // An allocation site's live bytes on the timeline (the Sites panel; empty: nothing).
  void highlightSite(const QString &site);
  void goToPeak();

 signals:
  void timelineShown();
  void traceLoaded(bool ok);  // both the report and the timeline are in (or one failed)
  void baseLoaded(bool ok);
  void instantShown();
  void opTimelineShown();
  void whatIfShown();
  void exported(bool ok);  // an exportTrace() is written (or failed)

 protected:
  void closeEvent(QCloseEvent *event) override;
  void showEvent(QShowEvent *event) override;
  void dragEnterEvent(QDragEnterEvent *event) override;
  void dropEvent(QDropEvent *event) override;

 private:
  void buildUi();
  void fitToScreen(bool keep_saved_size);
  void raiseLowerPanel();
  void buildActions();
  void fail(const QString &path, const std::string &error);
  void addRecent(const QString &path);
  void rebuildRecentMenu();
  void adopt(const QString &path);
  // `sites`: the allocation sites to give series too (empty: those the chart has now).
  void requestOpTimeline(std::vector<std::string> ops, std::vector<std::string> sites = {});
  void updateDiff();
  void setGrouping(TimelineWidget::Grouping g);
  void revealBuffers(const FindingTarget &target);

  TraceLoader loader_;
  TimelineWidget *timeline_ = nullptr;
  QComboBox *grouping_box_ = nullptr;
  QLabel *selection_label_ = nullptr;
  LiveBuffersModel *live_model_ = nullptr;
  QSortFilterProxyModel *live_proxy_ = nullptr;
  QTreeView *live_view_ = nullptr;
  QLineEdit *filter_ = nullptr;
  QLabel *instant_label_ = nullptr;
  FindingsModel *findings_model_ = nullptr;
  QTableView *findings_view_ = nullptr;
  OpsModel *ops_model_ = nullptr;
  SitesModel *sites_model_ = nullptr;
  QSortFilterProxyModel *ops_proxy_ = nullptr;
  QTableView *ops_view_ = nullptr;
  WhatIfModel *whatif_model_ = nullptr;
  QStackedWidget *whatif_stack_ = nullptr;
  DiffModel *diff_model_ = nullptr;
  QLabel *diff_label_ = nullptr;
  QProgressBar *progress_ = nullptr;
  QPushButton *cancel_ = nullptr;
  QLabel *status_ = nullptr;
  QMenu *recent_menu_ = nullptr;
  QPointer<QWidget> error_box_;

  QString path_, pending_path_, base_path_;
  std::shared_ptr<const Report> report_, base_report_;
  std::shared_ptr<const Timeline> timeline_data_, base_timeline_;
  int pending_parts_ = 0;
  bool pending_ok_ = true;
  bool pending_first_ = false;
  int base_parts_ = 0;
  bool base_ok_ = true;
  QString last_error_;
  QString title_note_;
  uint64_t instant_request_ = 0;
  bool lower_panel_chosen_ = false;  // the first trace raised the findings (or live buffers)
};

}  // namespace adprof::gui
