// The memory timeline: live bytes over time as a stacked area chart (by role, op, phase or
// device), phase bands and step markers along the time axis, the peak marked, an instant
// cursor, a selected range with its totals, an op's live bytes highlighted, and a diff's base
// trace overlaid. Drawn with QPainter at a level of detail: the samples in view are reduced to
// one per pixel column (the highest live state in the column, so no peak is lost), so a repaint
// costs O(samples in view + width) whatever the trace's size. On zoom it asks (detailWanted)
// for a finer timeline of the window and draws from what it has meanwhile.
#pragma once

#include <QElapsedTimer>
#include <QHash>
#include <QImage>
#include <QTimer>
#include <QWidget>
#include <memory>
#include <vector>

#include "adprof/timeline.h"

namespace adprof::gui {

class TimelineWidget : public QWidget {
  Q_OBJECT

 public:
  enum class Grouping { Role, Op, Phase, Device };

  explicit TimelineWidget(QWidget *parent = nullptr);

  // The whole trace (resets the view and everything derived from the previous trace).
  void setTimeline(std::shared_ptr<const Timeline> timeline);
  // The whole trace again, with its ops' series (TimelineOptions::tracked_ops).
  void setOpTimeline(std::shared_ptr<const Timeline> timeline);
  // A finer timeline of the window [from, to] it was asked for (detailWanted).
  void setDetail(std::shared_ptr<const Timeline> timeline, double from, double to);
  // A diff's base trace: its live bytes overlaid as a line (null: none).
  void setBase(std::shared_ptr<const Timeline> timeline);
  void setPeak(double time, uint64_t bytes);
  void setInstant(double time);            // the "at an instant" cursor; < 0: none
  void setHighlightOp(const QString &op);  // empty: none
  // An allocation site's live bytes (traces with stacks; the op timeline's by_site series).
  void setHighlightSite(const QString &site);     // empty: none
  std::vector<std::string> trackedSites() const;  // the site series the op timeline has
  std::shared_ptr<const Timeline> opTimeline() const { return ops_; }
  // Per op kind, the labels of its buffers at the peak ("model.fc1, model.fc2"): the op
  // series' hover text names them.
  void setOpLabels(QHash<QString, QString> labels);
  void setGrouping(Grouping grouping);
  Grouping grouping() const { return grouping_; }
  std::vector<std::string> trackedOps() const;  // the op series the current op timeline has
  bool hasTimeline() const { return overview_ != nullptr; }

  // The visible window, in seconds since the start of the recording.
  void setView(double from, double to);
  double viewFrom() const { return from_; }
  double viewTo() const { return to_; }
  void zoomAt(double factor, double time);  // factor < 1 zooms in
  void zoom(double factor);                 // around the centre
  void pan(double fraction);                // by a fraction of the visible span
  void resetView();
  void setSelection(double from, double to);  // from >= to clears it
  void clearSelection();
  bool hasSelection() const { return sel_to_ > sel_from_; }
  QString selectionSummary() const;

  // Where things are drawn (widget coordinates).
  QRectF plotRect() const;
  double timeToX(double time) const;
  double xToTime(double x) const;
  double peakX() const { return timeToX(peak_time_); }

  // Text of the hover tooltip at `time`: exact values of the sample live there.
  QString valuesAt(double time) const;
  // Paints the chart as the widget shows it, onto any device (PNG, SVG export).
  void paintTo(QPainter &painter) const;
  double lastPaintMs() const { return last_paint_ms_; }
  size_t samplesDrawn() const { return last_samples_; }

 signals:
  void instantClicked(double time, bool atPeak);
  void viewChanged(double from, double to);
  void selectionChanged(double from, double to);  // from >= to: cleared
  void detailWanted(double from, double to);

 protected:
  void paintEvent(QPaintEvent *event) override;
  void mousePressEvent(QMouseEvent *event) override;
  void mouseMoveEvent(QMouseEvent *event) override;
  void mouseReleaseEvent(QMouseEvent *event) override;
  void mouseDoubleClickEvent(QMouseEvent *event) override;
  void wheelEvent(QWheelEvent *event) override;
  void leaveEvent(QEvent *event) override;

 private:
  struct Series {
    QString name;
    QColor color;
    int index;  // into by_role, by_phase or by_op; or 0: host, 1: device
  };
  std::vector<Series> series(const Timeline &t) const;
  uint64_t value(const TimelineSample &s, const Series &series) const;
  // The timeline to draw the current view from (the detail when it covers the view).
  const Timeline &source() const;
  const TimelineSample *sampleAt(const Timeline &t, double time) const;
  void viewWasChanged();
  // The chart in named steps, in the order they paint (timeline_widget.cpp, Chart).
  struct Chart;
  void paintChart(QPainter &p, const QRectF &plot, const Timeline &t) const;
  void pickColumns(Chart &chart) const;
  void scaleChart(Chart &chart) const;
  void prepareChartImage(const QPainter &p, Chart &chart) const;
  void paintPhaseBands(QPainter &p, const Chart &chart) const;
  void paintGrid(QPainter &p, const Chart &chart) const;
  void paintStacks(QPainter &p, const Chart &chart) const;
  void paintStepMarkers(QPainter &p, const Chart &chart) const;
  void paintHighlight(QPainter &p, const Chart &chart, const QString &what,
                      const std::vector<std::string> &names,
                      std::vector<uint64_t> TimelineSample::*series, int line_no) const;
  void paintBaseTrace(QPainter &p, const Chart &chart) const;
  void paintSelection(QPainter &p, const Chart &chart) const;
  void paintPeak(QPainter &p, const Chart &chart) const;
  void paintCursors(QPainter &p, const Chart &chart) const;
  void paintFrameAndLegend(QPainter &p, const Chart &chart) const;

  std::shared_ptr<const Timeline> overview_, ops_, detail_, base_;
  double detail_from_ = 0, detail_to_ = 0;
  Grouping grouping_ = Grouping::Role;
  double from_ = 0, to_ = 1;
  double peak_time_ = -1;
  uint64_t peak_bytes_ = 0;
  double instant_ = -1;
  double sel_from_ = 0, sel_to_ = 0;
  QString highlight_op_;
  QString highlight_site_;
  QHash<QString, QString> op_labels_;
  // mouse
  QPointF press_pos_;
  double press_from_ = 0, press_to_ = 0;
  bool pressed_ = false, dragging_ = false, selecting_ = false;
  double hover_x_ = -1;
  QTimer detail_timer_;
  mutable double last_paint_ms_ = 0;
  mutable size_t last_samples_ = 0;
  mutable QImage chart_image_;  // the phase tint and stacked areas, on screen (paintChart)
};

}  // namespace adprof::gui
