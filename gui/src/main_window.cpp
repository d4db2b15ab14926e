#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStackedWidget>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTableView>
#include <QToolBar>
#include <QTreeView>
#include <QVBoxLayout>
#include <algorithm>

#include "adprof/ad_analysis.h"
#include "job_window.h"
#include "load_status.h"
#include "palette.h"

namespace adprof::gui {

namespace {

constexpr int kMaxRecent = 10;
constexpr size_t kTrackedOps = 8;

QTableView *make_table(QAbstractItemModel *model, QWidget *parent) {
  auto *view = new QTableView(parent);
  view->setModel(model);
  view->setSortingEnabled(true);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->setAlternatingRowColors(true);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setStretchLastSection(true);
  view->setWordWrap(false);
  return view;
}

QSortFilterProxyModel *make_proxy(QAbstractItemModel *model, QObject *parent) {
  auto *proxy = new QSortFilterProxyModel(parent);
  proxy->setSourceModel(model);
  proxy->setSortRole(ModelBase::SortRole);
  proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
  proxy->setFilterKeyColumn(-1);
  return proxy;
}

// The status line of a loaded trace: its peak, the foreign bytes in it by when they were made
// (start-up or after, when the trace has ops or steps; after it, the most that threads of one
// name other than the process's first made: a library's pool), and its device peak by role
// where it used a device (a GPU run's budget is the device's, not the host's).
QString loaded_text(const QString &path, const Report &r) {
  QString text = QObject::tr("%1: peak %2 at %3, %4 events")
                     .arg(path, format_bytes_q(r.peak), format_seconds(r.peak_time))
                     .arg(r.events);
  if (r.start_up_end >= 0 && r.peak_by_role[ADPROF_ROLE_FOREIGN]) {
    QString pool;
    if (!r.peak_foreign_after_start_up_by_other_threads.empty()) {
      const ThreadNameBytes &t = r.peak_foreign_after_start_up_by_other_threads.front();
      pool = QObject::tr(", %1 of it on %2")
                 .arg(format_bytes_q(t.bytes), QString::fromStdString(t.name));
    }
    text += QObject::tr("; foreign %1 (%2 from start-up, %3 made after it%4)")
                .arg(format_bytes_q(r.peak_by_role[ADPROF_ROLE_FOREIGN]),
                     format_bytes_q(r.peak_foreign_start_up),
                     format_bytes_q(r.peak_foreign_after_start_up), pool);
  }
  if (!r.device_peak) return text;
  QStringList roles;
  for (int k : roles_most_first(r.device_peak_by_role))
    roles << QStringLiteral("%1 %2").arg(role_name(k), format_bytes_q(r.device_peak_by_role[k]));
  text += QObject::tr("; device peak %1 at %2")
              .arg(format_bytes_q(r.device_peak), format_seconds(r.device_peak_time));
  if (!roles.isEmpty()) text += QStringLiteral(" (%1)").arg(roles.join(QStringLiteral(", ")));
  return text;
}

}  // namespace

MainWindow::MainWindow(QWidget *parent) : QMainWindow(parent) {
  setWindowTitle("adprof-gui");
  setAcceptDrops(true);
  buildUi();
  buildActions();
  fitToScreen(false);
}

MainWindow::~MainWindow() = default;

QDockWidget *MainWindow::dock(const QString &name) const { return findChild<QDockWidget *>(name); }

void MainWindow::buildUi() {
  // ---- centre: grouping, the chart, the selection's totals ----
  auto *centre = new QWidget(this);
  auto *layout = new QVBoxLayout(centre);
  layout->setContentsMargins(4, 4, 4, 4);
  auto *bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Stack by:"), centre));
  grouping_box_ = new QComboBox(centre);
  grouping_box_->addItems({tr("role"), tr("op"), tr("phase"), tr("device")});
  bar->addWidget(grouping_box_);
  bar->addSpacing(12);
  auto *hint = new QLabel(tr("wheel: zoom · drag: pan · shift-drag or right-drag: select a "
                             "range · click: live buffers at that instant · double-click: "
                             "whole trace"),
                          centre);
  hint->setStyleSheet("color: #666");
  bar->addWidget(hint, 1);
  layout->addLayout(bar);
  timeline_ = new TimelineWidget(centre);
  layout->addWidget(timeline_, 1);
  selection_label_ = new QLabel(centre);
  selection_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  selection_label_->setText(tr("No range selected."));
  layout->addWidget(selection_label_);
  setCentralWidget(centre);
  connect(grouping_box_, &QComboBox::currentIndexChanged, this,
          [this](int i) { setGrouping(TimelineWidget::Grouping(i)); });
  connect(timeline_, &TimelineWidget::instantClicked, this, &MainWindow::showInstant);
  connect(timeline_, &TimelineWidget::selectionChanged, this, [this](double a, double b) {
    selection_label_->setText(b > a ? timeline_->selectionSummary() : tr("No range selected."));
  });
  connect(timeline_, &TimelineWidget::detailWanted, this, [this](double from, double to) {
    if (path_.isEmpty()) return;
    TimelineOptions o;
    o.from = from;
    o.to = to;
    o.max_samples = 4096;
    o.tracked_ops = timeline_->trackedOps();
    o.tracked_sites = timeline_->trackedSites();
    QString path = path_;
    loader_.timeline("detail", path, o, [this, path, from, to](Outcome<Timeline> r) {
      if (r.value && path == path_) timeline_->setDetail(r.value, from, to);
    });
  });

  // ---- at an instant ----
  auto *instant = new QWidget(this);
  auto *il = new QVBoxLayout(instant);
  il->setContentsMargins(4, 4, 4, 4);
  instant_label_ = new QLabel(tr("No trace."), instant);
  il->addWidget(instant_label_);
  filter_ = new QLineEdit(instant);
  filter_->setPlaceholderText(tr("Filter buffers (name, op, label, dtype, role...)  Ctrl+F"));
  filter_->setClearButtonEnabled(true);
  il->addWidget(filter_);
  live_model_ = new LiveBuffersModel(this);
  live_proxy_ = make_proxy(live_model_, this);
  live_proxy_->setRecursiveFilteringEnabled(true);
  live_proxy_->setAutoAcceptChildRows(true);
  live_view_ = new QTreeView(instant);
  live_view_->setModel(live_proxy_);
  live_view_->setSortingEnabled(true);
  live_view_->sortByColumn(LiveBuffersModel::Size, Qt::DescendingOrder);
  live_view_->setAlternatingRowColors(true);
  live_view_->setUniformRowHeights(true);
  live_view_->header()->setStretchLastSection(false);
  live_view_->setColumnWidth(LiveBuffersModel::Name, 220);
  il->addWidget(live_view_, 1);
  connect(filter_, &QLineEdit::textChanged, this, [this](const QString &text) {
    live_proxy_->setFilterFixedString(text);
    if (!text.isEmpty()) live_view_->expandAll();
  });
  connect(live_view_, &QTreeView::clicked, this, [this](const QModelIndex &index) {
    QVariant link = live_proxy_->data(index, ModelBase::LinkRole);
    if (!link.isValid()) return;
    QModelIndex source = live_model_->indexOfAddress(link.toULongLong());
    if (!source.isValid()) {
      statusBar()->showMessage(tr("The source buffer is not live at this instant."), 4000);
      return;
    }
    filter_->clear();
    QModelIndex at = live_proxy_->mapFromSource(source);
    live_view_->scrollTo(at);
    live_view_->setCurrentIndex(at);
  });
  auto *instant_dock = new QDockWidget(tr("At an instant"), this);
  instant_dock->setObjectName("instant");
  instant_dock->setWidget(instant);
  addDockWidget(Qt::BottomDockWidgetArea, instant_dock);

  // ---- findings ----
  findings_model_ = new FindingsModel(this);
  findings_view_ = make_table(findings_model_, this);
  findings_view_->setSortingEnabled(false);
  findings_view_->setWordWrap(true);
  findings_view_->setColumnWidth(FindingsModel::Bytes, 80);
  findings_view_->setColumnWidth(FindingsModel::Kind, 170);
  findings_view_->setColumnWidth(FindingsModel::Message, 380);
  findings_view_->setColumnWidth(FindingsModel::Evidence, 240);
  // The fix is the last column and stretches to the view's edge; rows grow to show it whole.
  findings_view_->horizontalHeader()->setSectionResizeMode(FindingsModel::Fix,
                                                           QHeaderView::Stretch);
  findings_view_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  connect(findings_view_, &QTableView::clicked, this,
          [this](const QModelIndex &i) { showFinding(i.row()); });
  auto *findings_dock = new QDockWidget(tr("Findings"), this);
  findings_dock->setObjectName("findings");
  findings_dock->setWidget(findings_view_);
  addDockWidget(Qt::BottomDockWidgetArea, findings_dock);

  // ---- ops ----
  ops_model_ = new OpsModel(this);
  ops_proxy_ = make_proxy(ops_model_, this);
  ops_view_ = make_table(ops_proxy_, this);
  ops_view_->sortByColumn(OpsModel::Bytes, Qt::DescendingOrder);
  ops_view_->setColumnWidth(OpsModel::Name, 160);
  connect(ops_view_, &QTableView::clicked, this,
          [this](const QModelIndex &i) { highlightOp(ops_proxy_->mapToSource(i).row()); });
  auto *ops_dock = new QDockWidget(tr("Ops"), this);
  ops_dock->setObjectName("ops");
  ops_dock->setWidget(ops_view_);
  addDockWidget(Qt::BottomDockWidgetArea, ops_dock);

  // ---- allocation sites (traces recorded with --stacks) ----
  sites_model_ = new SitesModel(this);
  auto *sites_proxy = make_proxy(sites_model_, this);
  auto *sites_view = new QTreeView(this);
  sites_view->setModel(sites_proxy);
  sites_view->setSortingEnabled(true);
  sites_view->sortByColumn(SitesModel::Bytes, Qt::DescendingOrder);
  sites_view->setColumnWidth(SitesModel::Frame, 420);
  connect(sites_view, &QTreeView::clicked, this, [this, sites_proxy](const QModelIndex &i) {
    highlightSite(sites_model_->siteOf(sites_proxy->mapToSource(i)));
  });
  auto *sites_direction = new QComboBox(this);
  sites_direction->addItems(
      {tr("Bottom-up: sites, then their callers"), tr("Top-down: callers, then the sites")});
  connect(sites_direction, &QComboBox::currentIndexChanged, this, [this](int i) {
    sites_model_->setDirection(i == 0 ? SitesModel::Direction::BottomUp
                                      : SitesModel::Direction::TopDown);
  });
  auto *sites_panel = new QWidget(this);
  auto *sites_layout = new QVBoxLayout(sites_panel);
  sites_layout->setContentsMargins(0, 0, 0, 0);
  sites_layout->addWidget(sites_direction);
  sites_layout->addWidget(sites_view, 1);
  auto *sites_dock = new QDockWidget(tr("Sites"), this);
  sites_dock->setObjectName("sites");
  sites_dock->setWidget(sites_panel);
  addDockWidget(Qt::BottomDockWidgetArea, sites_dock);

  // ---- what-if ----
  whatif_model_ = new WhatIfModel(this);
  whatif_stack_ = new QStackedWidget(this);
  auto *none = new QLabel(tr("no what-if data in this trace"), whatif_stack_);
  none->setAlignment(Qt::AlignCenter);
  none->setStyleSheet("color: #666");
  whatif_stack_->addWidget(none);
  auto *whatif_view = make_table(make_proxy(whatif_model_, this), whatif_stack_);
  whatif_view->setColumnWidth(WhatIfModel::Policy, 200);
  whatif_view->setColumnWidth(WhatIfModel::Predicted, 110);
  whatif_view->setColumnWidth(WhatIfModel::Measured, 110);
  whatif_stack_->addWidget(whatif_view);
  auto *whatif_dock = new QDockWidget(tr("What-if"), this);
  whatif_dock->setObjectName("whatif");
  whatif_dock->setWidget(whatif_stack_);
  addDockWidget(Qt::BottomDockWidgetArea, whatif_dock);

  // ---- diff ----
  auto *diff = new QWidget(this);
  auto *dl = new QVBoxLayout(diff);
  dl->setContentsMargins(4, 4, 4, 4);
  diff_label_ = new QLabel(tr("Open a base trace (Ctrl+Shift+O) to compare with."), diff);
  diff_label_->setWordWrap(true);
  dl->addWidget(diff_label_);
  diff_model_ = new DiffModel(this);
  auto *diff_view = make_table(make_proxy(diff_model_, this), diff);
  dl->addWidget(diff_view, 1);
  auto *diff_dock = new QDockWidget(tr("Diff"), this);
  diff_dock->setObjectName("diff");
  diff_dock->setWidget(diff);
  addDockWidget(Qt::BottomDockWidgetArea, diff_dock);

  tabifyDockWidget(instant_dock, findings_dock);
  tabifyDockWidget(findings_dock, ops_dock);
  tabifyDockWidget(ops_dock, sites_dock);
  tabifyDockWidget(sites_dock, whatif_dock);
  tabifyDockWidget(whatif_dock, diff_dock);
  instant_dock->raise();

  // ---- status bar: progress and cancel ----
  const LoadStatus loading = addLoadStatus(this, loader_);
  status_ = loading.message;
  progress_ = loading.progress;
  cancel_ = loading.cancel;
  connect(cancel_, &QPushButton::clicked, this, [this] {
    loader_.cancelLoad(0);
    loader_.cancelLoad(1);
  });
}

void MainWindow::buildActions() {
  QMenu *file = menuBar()->addMenu(tr("&File"));
  QAction *open = file->addAction(tr("&Open trace..."), this, [this] {
    QString path = QFileDialog::getOpenFileName(
        this, tr("Open a trace"), QFileInfo(path_).path(),
        tr("adprof traces (*.adtrace*);;PyTorch memory snapshots (*.pickle *.pkl);;All files (*)"));
    if (!path.isEmpty()) openFiles({path});
  });
  open->setShortcut(QKeySequence::Open);
  QAction *base = file->addAction(tr("Open &base trace to compare..."), this, [this] {
    QString path = QFileDialog::getOpenFileName(
        this, tr("Open a base trace"), QFileInfo(path_).path(),
        tr("adprof traces (*.adtrace*);;PyTorch memory snapshots (*.pickle *.pkl);;All files (*)"));
    if (!path.isEmpty()) openFiles({path}, true);
  });
  base->setShortcut(QKeySequence("Ctrl+Shift+O"));
  file->addAction(tr("Open &job..."), this,
                  [this] {
                    const QString dir = QFileDialog::getExistingDirectory(
                        this, tr("Open a job's folder (or the folder of its machines' folders)"),
                        QFileInfo(path_).path());
                    if (!dir.isEmpty()) openJob({dir});
                  })
      ->setShortcut(QKeySequence("Ctrl+J"));
  recent_menu_ = file->addMenu(tr("Open &recent"));
  rebuildRecentMenu();
  file->addSeparator();
  QAction *png = file->addAction(tr("Export chart as &PNG..."), this, [this] {
    QString path = QFileDialog::getSaveFileName(this, tr("Export PNG"), "timeline.png",
                                                tr("PNG images (*.png)"));
    if (!path.isEmpty() && !exportPng(path)) fail(path, "cannot write the image");
  });
  png->setShortcut(QKeySequence("Ctrl+E"));
  QAction *svg = file->addAction(tr("Export chart as &SVG..."), this, [this] {
    QString path = QFileDialog::getSaveFileName(this, tr("Export SVG"), "timeline.svg",
                                                tr("SVG images (*.svg)"));
    if (!path.isEmpty() && !exportSvg(path)) fail(path, "cannot write the image");
  });
  svg->setShortcut(QKeySequence("Ctrl+Shift+E"));
  // The trace's exports, as `adprof export` and `adprof timeline` write them (adprof/exports.h).
  QMenu *exports = file->addMenu(tr("E&xport"));
  struct ExportItem {
    const char *label, *caption, *file, *filter;
    TraceLoader::Export what;
  };
  const ExportItem items[] = {
      {"&Perfetto JSON...", "Export Perfetto JSON", "trace.json",
       "Chrome trace event JSON (*.json)", TraceLoader::Export::kPerfetto},
      {"&Folded stacks...", "Export folded stacks", "peak.folded", "Folded stacks (*.folded *.txt)",
       TraceLoader::Export::kFolded},
      {"Timeline &CSV...", "Export the timeline as CSV", "timeline.csv", "CSV files (*.csv)",
       TraceLoader::Export::kTimelineCsv},
      {"Timeline &SVG...", "Export the timeline as SVG", "timeline.svg", "SVG images (*.svg)",
       TraceLoader::Export::kTimelineSvg},
      {"PyTorch memory &snapshot...", "Export a PyTorch memory snapshot", "snapshot.pickle",
       "PyTorch memory snapshots (*.pickle *.pkl)", TraceLoader::Export::kTorchSnapshot},
  };
  for (const ExportItem &item : items) {
    QAction *a = exports->addAction(tr(item.label), this, [this, item] {
      if (path_.isEmpty()) return;
      QString out = QFileDialog::getSaveFileName(this, tr(item.caption),
                                                 QDir(QFileInfo(path_).path()).filePath(item.file),
                                                 tr(item.filter));
      if (!out.isEmpty()) exportTrace(item.what, out);
    });
    a->setEnabled(false);
    connect(this, &MainWindow::traceLoaded, a, [this, a] { a->setEnabled(!path_.isEmpty()); });
  }
  file->addSeparator();
  file->addAction(tr("&Quit"), this, &QWidget::close)->setShortcut(QKeySequence::Quit);

  QMenu *view = menuBar()->addMenu(tr("&View"));
  const char *names[] = {"Stack by &role", "Stack by &op", "Stack by &phase", "Stack by &device"};
  for (int i = 0; i < 4; ++i) {
    QAction *a =
        view->addAction(tr(names[i]), this, [this, i] { grouping_box_->setCurrentIndex(i); });
    a->setShortcut(QKeySequence(QString("Ctrl+%1").arg(i + 1)));
  }
  view->addSeparator();
  QAction *in = view->addAction(tr("Zoom &in"), this, [this] { timeline_->zoom(0.5); });
  in->setShortcuts({QKeySequence::ZoomIn, QKeySequence("Ctrl+="), QKeySequence("+")});
  QAction *out = view->addAction(tr("Zoom &out"), this, [this] { timeline_->zoom(2); });
  out->setShortcuts({QKeySequence::ZoomOut, QKeySequence("-")});
  view->addAction(tr("&Whole trace"), this, [this] { timeline_->resetView(); })
      ->setShortcuts({QKeySequence("Ctrl+0"), QKeySequence("Home")});
  view->addAction(tr("Pan &left"), this, [this] { timeline_->pan(-0.2); })
      ->setShortcut(QKeySequence("Alt+Left"));
  view->addAction(tr("Pan r&ight"), this, [this] { timeline_->pan(0.2); })
      ->setShortcut(QKeySequence("Alt+Right"));
  view->addAction(tr("Go to the &peak"), this, &MainWindow::goToPeak)
      ->setShortcut(QKeySequence("Ctrl+P"));
  view->addAction(tr("Clear the &selection"), this,
                  [this] {
                    timeline_->clearSelection();
                    timeline_->setHighlightOp({});
                  })
      ->setShortcut(QKeySequence("Escape"));
  view->addAction(tr("&Filter buffers"), this,
                  [this] {
                    if (auto *d = dock("instant")) d->raise();
                    filter_->setFocus();
                    filter_->selectAll();
                  })
      ->setShortcut(QKeySequence::Find);
  view->addSeparator();
  for (QDockWidget *d : findChildren<QDockWidget *>()) view->addAction(d->toggleViewAction());
}

void MainWindow::restoreState() {
  QSettings s;
  fitToScreen(restoreGeometry(s.value("window/geometry").toByteArray()));
  QMainWindow::restoreState(s.value("window/state").toByteArray());
  grouping_box_->setCurrentIndex(std::clamp(s.value("view/grouping", 0).toInt(), 0, 3));
}

void MainWindow::fitToScreen(bool keep_saved_size) {
  QScreen *screen = this->screen() ? this->screen() : QGuiApplication::primaryScreen();
  if (!screen) return;
  const QRect available = screen->availableGeometry();
  // A first run gets 80% of the screen (Qt's default, from the docks' size hints, is a cramped
  // 790x540 whatever the screen); a saved geometry is kept unless the screen is now smaller.
  QSize size = keep_saved_size ? this->size() : (QSizeF(available.size()) * 0.8).toSize();
  const QSize frame = frameGeometry().size() - geometry().size();  // title bar and borders
  size = size.boundedTo(available.size() - frame);
  if (keep_saved_size && size == this->size() && available.contains(frameGeometry())) return;
  resize(size);
  move(available.center() -
       QPoint(size.width() + frame.width(), size.height() + frame.height()) / 2);
}

void MainWindow::showEvent(QShowEvent *event) {
  QMainWindow::showEvent(event);
  // buildUi() raises a dock before the window exists, which a window system need not keep
  // (newcomers saw the last tab added, the Diff, empty until a base is opened): raise the
  // useful one again once shown.
  if (!lower_panel_chosen_)
    QMetaObject::invokeMethod(
        this, [this] { raiseLowerPanel(); }, Qt::QueuedConnection);
}

void MainWindow::raiseLowerPanel() {
  // The findings of a trace first, else what is live at the peak (or "No trace." until one is
  // opened): never an empty tab.
  bool findings = report_ && !report_->findings.empty();
  if (QDockWidget *d = dock(findings ? "findings" : "instant")) d->raise();
}

void MainWindow::closeEvent(QCloseEvent *event) {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState());
  s.setValue("view/grouping", grouping_box_->currentIndex());
  loader_.cancelLoad(0);
  loader_.cancelLoad(1);
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent *event) {
  for (const QUrl &url : event->mimeData()->urls())
    if (url.isLocalFile()) return event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent *event) {
  QStringList files;
  for (const QUrl &url : event->mimeData()->urls())
    if (url.isLocalFile()) files << url.toLocalFile();
  if (files.isEmpty()) return;
  openFiles(files, files.size() == 1 && (event->modifiers() & Qt::ShiftModifier));
  event->acceptProposedAction();
}

void MainWindow::openFiles(const QStringList &files, bool as_base) {
  if (files.isEmpty()) return;
  if (QFileInfo(files[0]).isDir()) {
    openJob(files);
    return;
  }
  if (as_base && !path_.isEmpty()) return openBase(files[0]);
  openTrace(files[0]);
  if (files.size() > 1) openBase(files[1]);
}

JobWindow *MainWindow::openJob(const QStringList &paths) {
  auto *window = new JobWindow(this);  // a window of its own, closed with this one
  window->setAttribute(Qt::WA_DeleteOnClose);
  window->show();
  window->openJob(paths);
  return window;
}

QStringList MainWindow::recentFiles() const {
  return QSettings().value("recentFiles").toStringList();
}

void MainWindow::addRecent(const QString &path) {
  QSettings s;
  QStringList recent = s.value("recentFiles").toStringList();
  QString abs = QFileInfo(path).absoluteFilePath();
  recent.removeAll(abs);
  recent.prepend(abs);
  while (recent.size() > kMaxRecent) recent.removeLast();
  s.setValue("recentFiles", recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recent_menu_->clear();
  QStringList recent = recentFiles();
  for (int i = 0; i < recent.size(); ++i) {
    QString path = recent[i];
    QAction *a = recent_menu_->addAction(QString("&%1 %2").arg((i + 1) % 10).arg(path), this,
                                         [this, path] { openFiles({path}); });
    if (i == 0) a->setShortcut(QKeySequence("Ctrl+R"));
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::fail(const QString &path, const std::string &error) {
  if (!QFileInfo::exists(path) && recentFiles().contains(QFileInfo(path).absoluteFilePath())) {
    QStringList recent = recentFiles();  // a recent file that is gone leaves the menu
    recent.removeAll(QFileInfo(path).absoluteFilePath());
    QSettings().setValue("recentFiles", recent);
    rebuildRecentMenu();
  }
  last_error_ = QString("%1: %2").arg(QFileInfo(path).fileName(), QString::fromStdString(error));
  status_->setText(tr("Cannot open %1").arg(last_error_));
  if (error_box_) error_box_->close();
  // Not modal: a bad file never blocks the window (nor a test or a screenshot run).
  auto *box =
      new QMessageBox(QMessageBox::Critical, tr("Cannot open the trace"),
                      tr("%1 cannot be read:\n\n%2").arg(path, QString::fromStdString(error)),
                      QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setModal(false);
  if (!qEnvironmentVariable("QT_QPA_PLATFORM").startsWith("offscreen")) box->show();
  error_box_ = box;
}

void MainWindow::openTrace(const QString &path) {
  pending_path_ = path;
  pending_parts_ = 2;
  pending_ok_ = true;
  pending_first_ = true;
  status_->setText(tr("Loading %1...").arg(path));
  auto finish_part = [this, path](bool ok) {
    if (path != pending_path_) return;
    pending_ok_ &= ok;
    if (--pending_parts_ == 0) {
      if (pending_ok_) {
        status_->setText(loaded_text(path, *report_));
        addRecent(path);
        if (!lower_panel_chosen_) {
          raiseLowerPanel();
          lower_panel_chosen_ = true;
        }
      }
      emit traceLoaded(pending_ok_);
    }
  };
  loader_.load(
      0, path,
      [this, path, finish_part](Outcome<Timeline> r) {
        if (path != pending_path_) return;
        if (!r.value) {
          if (!r.cancelled)
            fail(path, r.error);
          else
            status_->setText(tr("Loading cancelled."));
          loader_.cancelLoad(0);
          return finish_part(false);
        }
        adopt(path);
        timeline_data_ = r.value;
        timeline_->setTimeline(r.value);
        if (report_) {
          timeline_->setPeak(report_->peak_time, report_->peak);
          timeline_->setInstant(live_model_->instant().time);
        }
        emit timelineShown();
        finish_part(true);
      },
      [this, path, finish_part](Outcome<Report> r, std::shared_ptr<PendingPrediction> pending) {
        if (path != pending_path_) return;
        if (!r.value) {
          if (!r.cancelled)
            fail(path, r.error);
          else
            status_->setText(tr("Loading cancelled."));
          loader_.cancelLoad(0);
          return finish_part(false);
        }
        adopt(path);
        report_ = r.value;
        timeline_->setPeak(report_->peak_time, report_->peak);
        findings_model_->setFindings(report_->findings);
        ops_model_->setOps(report_->ops);
        sites_model_->setSites(report_->sites);
        QHash<QString, QString> op_labels;
        for (const OpSummary &o : report_->ops)
          op_labels.insert(QString::fromStdString(o.name),
                           QString::fromStdString(labels_text(o.labels_at_peak)));
        timeline_->setOpLabels(std::move(op_labels));
        whatif_model_->setData({});
        whatif_stack_->setCurrentIndex(0);
        // The AD layer (ad_analysis.h), once, and only for a trace with an AD tape: the
        // prediction fills the what-if panel and adds each policy's saving to the findings.
        if (!pending) {
          emit whatIfShown();  // no data: the panel says so; never a made-up row
        } else {
          loader_.whatIf(std::move(pending), [this, path](Outcome<WhatIf> w) {
            if (path != path_) return;
            whatif_model_->setData(w.value ? whatif_data(*w.value) : WhatIfData{});
            whatif_stack_->setCurrentIndex(whatif_model_->empty() ? 0 : 1);
            if (w.value && report_) {
              auto with_savings = std::make_shared<Report>(*report_);
              add_predictions(*with_savings, *w.value);
              report_ = with_savings;
              findings_model_->setFindings(report_->findings);
            }
            emit whatIfShown();
          });
        }
        showInstant(report_->peak_time, true);
        // The op series: the ops with the most bytes at the peak, then the most bytes.
        std::vector<const OpSummary *> ops;
        for (const OpSummary &o : report_->ops)
          if (o.name != "(no op)") ops.push_back(&o);
        std::stable_sort(ops.begin(), ops.end(), [](auto *a, auto *b) {
          return a->live_at_peak != b->live_at_peak ? a->live_at_peak > b->live_at_peak
                                                    : a->bytes > b->bytes;
        });
        std::vector<std::string> tracked;
        for (size_t i = 0; i < ops.size() && i < kTrackedOps; ++i) tracked.push_back(ops[i]->name);
        requestOpTimeline(tracked);
        updateDiff();
        finish_part(true);
      });
}

void MainWindow::adopt(const QString &path) {
  if (!pending_first_) return;
  // The first result of a new trace: forget the previous one.
  pending_first_ = false;
  path_ = path;
  setWindowTitle(QString("adprof-gui — %1").arg(QFileInfo(path).fileName()) +
                 (title_note_.isEmpty() ? QString() : " — " + title_note_));
  report_.reset();
  live_model_->setInstant({});
  findings_model_->setFindings({});
  ops_model_->setOps({});
  sites_model_->setSites({});
  diff_model_->setRows({});
  instant_label_->setText(tr("Analysing..."));
}

void MainWindow::requestOpTimeline(std::vector<std::string> ops, std::vector<std::string> sites) {
  TimelineOptions o;
  o.max_samples = 8192;
  o.tracked_ops = std::move(ops);
  o.tracked_sites = sites.empty() ? timeline_->trackedSites() : std::move(sites);
  QString path = path_;
  loader_.timeline("ops", path, o, [this, path](Outcome<Timeline> r) {
    if (!r.value || path != path_) return;
    timeline_->setOpTimeline(r.value);
    emit opTimelineShown();
  });
}

void MainWindow::openBase(const QString &path) {
  base_path_ = path;
  base_parts_ = 2;
  base_ok_ = true;
  auto finish_part = [this, path](bool ok) {
    if (path != base_path_) return;
    base_ok_ &= ok;
    if (--base_parts_ == 0) emit baseLoaded(base_ok_);
  };
  loader_.load(
      1, path,
      [this, path, finish_part](Outcome<Timeline> r) {
        if (path != base_path_) return;
        if (!r.value) {
          if (!r.cancelled) fail(path, r.error);
          return finish_part(false);
        }
        base_timeline_ = r.value;
        timeline_->setBase(r.value);
        finish_part(true);
      },
      [this, path, finish_part](Outcome<Report> r, std::shared_ptr<PendingPrediction>) {
        if (path != base_path_) return;
        if (!r.value) {
          if (!r.cancelled) fail(path, r.error);
          return finish_part(false);
        }
        base_report_ = r.value;
        updateDiff();
        if (auto *d = dock("diff")) d->raise();
        finish_part(true);
      });
}

void MainWindow::updateDiff() {
  if (!report_ || !base_report_) return;
  diff_model_->setRows(diff_rows(*base_report_, *report_));
  int64_t delta = int64_t(report_->peak) - int64_t(base_report_->peak);
  diff_label_->setText(
      tr("Base %1: peak %2 at %3.  This trace: peak %4 at %5.  Change %6%7.  The base's live "
         "bytes are the dashed line on the timeline.")
          .arg(QFileInfo(base_path_).fileName(), format_bytes_q(base_report_->peak),
               format_seconds(base_report_->peak_time), format_bytes_q(report_->peak),
               format_seconds(report_->peak_time), delta < 0 ? "-" : "+",
               format_bytes_q(uint64_t(std::llabs(delta)))));
}

QString MainWindow::instantCaption() const { return instant_label_->text(); }

void MainWindow::showInstant(double time, bool at_peak) {
  if (!report_) return;
  timeline_->setInstant(time);
  uint64_t request = ++instant_request_;
  auto shown = [this](InstantData data) {
    live_model_->setInstant(std::move(data));
    const InstantData &d = live_model_->instant();
    QString caption = tr("%1 live in %2 buffers at %3%4")
                          .arg(format_bytes_q(d.host))
                          .arg(d.buffer_count)
                          .arg(format_seconds(d.time), d.at_peak ? tr(" (the peak)") : "");
    if (d.buffer_count > d.buffers.size())  // the list keeps the largest
      caption += tr("; the %1 largest listed").arg(d.buffers.size());
    instant_label_->setText(caption);
    for (int r = 0; r < live_proxy_->rowCount(); ++r) live_view_->expand(live_proxy_->index(r, 0));
    emit instantShown();
  };
  if (at_peak) return shown(instant_at_peak(*report_));
  instant_label_->setText(tr("Replaying up to %1...").arg(format_seconds(time)));
  QString path = path_;
  loader_.snapshot(path, time, [this, path, request, shown](Outcome<Snapshot> r) {
    if (request != instant_request_ || path != path_) return;
    if (!r.value) {
      if (!r.cancelled) instant_label_->setText(QString::fromStdString(r.error));
      return;
    }
    shown(instant_from_snapshot(*r.value));
  });
}

void MainWindow::goToPeak() {
  if (!report_) return;
  double span = timeline_->viewTo() - timeline_->viewFrom();
  timeline_->setView(report_->peak_time - span / 2, report_->peak_time + span / 2);
  showInstant(report_->peak_time, true);
}

void MainWindow::revealBuffers(const FindingTarget &t) {
  filter_->clear();
  live_view_->collapseAll();
  QModelIndex role = live_model_->indexOfRole(QString::fromStdString(t.role));
  if (!role.isValid()) return;
  QModelIndex proxy_role = live_proxy_->mapFromSource(role);
  live_view_->expand(proxy_role);
  QModelIndex pick = proxy_role;
  for (int o = 0; o < live_model_->rowCount(role); ++o) {
    QModelIndex op = live_model_->index(o, 0, role);
    live_view_->expand(live_proxy_->mapFromSource(op));
    for (int b = 0; b < live_model_->rowCount(op); ++b) {
      QModelIndex buf = live_model_->index(b, 0, op);
      if (!t.text.empty() && live_model_->buffer(buf)->op == t.text && pick == proxy_role)
        pick = live_proxy_->mapFromSource(buf);
    }
  }
  live_view_->setCurrentIndex(pick);
  live_view_->scrollTo(pick, QAbstractItemView::PositionAtTop);
}

void MainWindow::showFinding(int row) {
  const auto &findings = findings_model_->findings();
  if (!report_ || row < 0 || size_t(row) >= findings.size()) return;
  FindingTarget t = finding_target(*report_, findings[row]);
  if (t.range_to > t.range_from && t.range_from >= 0) {
    timeline_->setSelection(t.range_from, t.range_to);
    double pad = (t.range_to - t.range_from) * 0.05;
    timeline_->setView(t.range_from - pad, t.range_to + pad);
    return;
  }
  goToPeak();
  if (auto *d = dock("instant")) d->raise();
  revealBuffers(t);
}

void MainWindow::highlightOp(int row) {
  const auto &ops = ops_model_->ops();
  if (row < 0 || size_t(row) >= ops.size()) return;
  const std::string &name = ops[row].name;
  timeline_->setHighlightOp(QString::fromStdString(name));
  std::vector<std::string> tracked = timeline_->trackedOps();
  if (std::find(tracked.begin(), tracked.end(), name) == tracked.end() && name != "(no op)") {
    if (tracked.size() >= kTrackedOps + 1) tracked.pop_back();
    tracked.push_back(name);
    requestOpTimeline(tracked);
  }
}

void MainWindow::highlightSite(const QString &site) {
  if (site.isEmpty()) return;
  timeline_->setHighlightSite(site);
  std::vector<std::string> tracked = timeline_->trackedSites();
  const std::string name = site.toStdString();
  if (std::find(tracked.begin(), tracked.end(), name) != tracked.end()) return;
  constexpr size_t kTrackedSites = 8;
  if (tracked.size() >= kTrackedSites) tracked.erase(tracked.begin());
  tracked.push_back(name);
  requestOpTimeline(timeline_->trackedOps(), std::move(tracked));
}

void MainWindow::setGrouping(TimelineWidget::Grouping g) {
  timeline_->setGrouping(g);
  if (grouping_box_->currentIndex() != int(g)) grouping_box_->setCurrentIndex(int(g));
}

QString MainWindow::selectionText() const { return selection_label_->text(); }
QString MainWindow::statusText() const { return status_->text(); }

void MainWindow::exportTrace(TraceLoader::Export what, const QString &out) {
  if (path_.isEmpty()) return;
  status_->setText(tr("Exporting %1...").arg(out));
  loader_.exportTrace(path_, what, out, [this, what, out](Outcome<ExportSummary> r) {
    if (r.value) {
      QString done = tr("Exported %1").arg(out);
      if (what == TraceLoader::Export::kTorchSnapshot) {  // what it holds, as the CLI says
        const SnapshotExportStats &s = r.value->torch_snapshot;
        done += tr(": %1 allocations, %2 trace entries, %3 device trace%4")
                    .arg(s.allocations)
                    .arg(s.entries)
                    .arg(s.devices)
                    .arg(s.devices == 1 ? "" : "s");
      }
      if (!r.value->complete)
        done +=
            tr(" (the trace is incomplete: %1)").arg(QString::fromStdString(r.value->end_reason));
      status_->setText(done);
    } else if (r.cancelled) {
      status_->setText(tr("Export of %1 cancelled").arg(out));
    } else {
      last_error_ =
          QString("%1: %2").arg(QFileInfo(out).fileName(), QString::fromStdString(r.error));
      status_->setText(tr("Cannot export %1").arg(last_error_));
      auto *box = new QMessageBox(
          QMessageBox::Critical, tr("Cannot export"),
          tr("%1 cannot be written:\n\n%2").arg(out, QString::fromStdString(r.error)),
          QMessageBox::Ok, this);
      box->setAttribute(Qt::WA_DeleteOnClose);
      box->setModal(false);  // as fail(): never blocks the window, a test or a screenshot run
      if (!qEnvironmentVariable("QT_QPA_PLATFORM").startsWith("offscreen")) box->show();
    }
    emit exported(r.value != nullptr);
  });
}

bool MainWindow::exportPng(const QString &path) {
  QImage image(timeline_->size(), QImage::Format_RGB32);
  QPainter p(&image);
  timeline_->paintTo(p);
  p.end();
  return image.save(path, "PNG");
}

bool MainWindow::exportSvg(const QString &path) {
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(timeline_->size());
  svg.setViewBox(QRect(QPoint(0, 0), timeline_->size()));
  svg.setTitle("adprof memory timeline");
  svg.setDescription(path_);
  QPainter p;
  if (!p.begin(&svg)) return false;
  timeline_->paintTo(p);
  return p.end();
}

}  // namespace adprof::gui
