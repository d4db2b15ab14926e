#include "load_status.h"

#include <QLabel>
#include <QMainWindow>
#include <QProgressBar>
#include <QPushButton>
#include <QStatusBar>

LoadStatus addLoadStatus(QMainWindow *window) {
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
  return s;
}
