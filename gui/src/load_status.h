// The status bar of a window that reads traces in the background: a message, the reading's
// progress and its Cancel button, both hidden until a reading runs. Shared by the trace's window
// and the job's.
#pragma once

class QLabel;
class QMainWindow;
class QProgressBar;
class QPushButton;

namespace adprof::gui {

class TraceLoader;

struct LoadStatus {
  QLabel *message = nullptr;
  QProgressBar *progress = nullptr;
  QPushButton *cancel = nullptr;
};

// Adds them to `window`'s status bar (the window owns them), following `loader`: its progress,
// and the bar and Cancel shown while it is busy.
LoadStatus addLoadStatus(QMainWindow *window, TraceLoader &loader);

}  // namespace adprof::gui
