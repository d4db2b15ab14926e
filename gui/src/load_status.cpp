#include "load_status.h"

#include <QLabel>
#include <QMainWindow>
#include <QProgressBar>
#include <QPushButton>
#include <QStatusBar>

#include "trace_loader.h"

namespace adprof::gui {

LoadStatus addLoadStatus(QMainWindow *window, TraceLoader &loader) {
  LoadStatus s;
  s.message = new QLabel(window);
  window->statusBar()->addWidget(s.message, 1);
  s.progress = new QProgressBar(window);
  s.progress->setRange(0, 1000);
  s.progress->setMaximumWidth(220);
  s.progress->setFormat(QMainWindow::tr("loading %p%"));
  s.progress->hide();
  window->statusBar()->addPermanentWidget(s.progress);
  s.cancel = new QPushButton(QMainWindow::tr("Cancel"), window);
  s.cancel->hide();
  window->statusBar()->addPermanentWidget(s.cancel);
  QProgressBar *progress = s.progress;
  QPushButton *cancel = s.cancel;
  QObject::connect(&loader, &TraceLoader::progress, progress,
                   [progress](double f) { progress->setValue(int(f * 1000)); });
  QObject::connect(&loader, &TraceLoader::busyChanged, progress, [progress, cancel](bool busy) {
    progress->setVisible(busy);
    cancel->setVisible(busy);
    if (!busy) progress->setValue(0);
  });
  return s;
}

}  // namespace adprof::gui
