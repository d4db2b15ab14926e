// The job view's chart: one lane per rank, each its memory over time stacked by role, all on
// the job's clock (wall clock from the traces' headers) and on one scale, so that lanes compare
// by eye. The outlier's lane is named; a click selects a lane, a double click (or Enter) asks
// for its rank's full view.
#pragma once

#include <QWidget>
#include <memory>

#include "adprof/job_lanes.h"

namespace adprof::gui {

class JobLanesWidget : public QWidget {
  Q_OBJECT

 public:
  explicit JobLanesWidget(QWidget *parent = nullptr);
  void setJob(std::shared_ptr<const job::JobLanes> job);
  int selectedLane() const { return selected_; }
  void selectLane(int lane);
  // Geometry, for tests and screenshots: a lane's band (label and plot), the plot area, and the
  // x of a time on the job's clock.
  QRect laneRect(int lane) const;
  QRect labelRect(int lane) const;  // where laneLabel() is drawn, left of the plot
  QRect plotRect() const;
  double xOfTime(double seconds) const;
  // The text left of a lane: its name, its (host) peak, and for the outlier what it is the
  // highest of; the device outlier's with its device peak (the lanes draw host memory). Drawn
  // whole in labelFont(): the column is as wide as the widest label, every lane at least as
  // high as the tallest.
  QString laneLabel(int lane) const;
  QFont labelFont(int lane) const;  // the widget's font, bold for the outlier
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 signals:
  void laneSelected(int lane);
  void laneActivated(int lane);  // a double click or Enter: open the rank's full view

 protected:
  void paintEvent(QPaintEvent *event) override;
  void mousePressEvent(QMouseEvent *event) override;
  void mouseDoubleClickEvent(QMouseEvent *event) override;
  void keyPressEvent(QKeyEvent *event) override;
  bool event(QEvent *event) override;        // tool tips: the lane, the time, the bytes then
  void changeEvent(QEvent *event) override;  // a new font: the labels measured again

 private:
  int laneAt(const QPoint &pos) const;
  void measureLabels();
  void paintLane(QPainter &p, int lane);
  void paintAxis(QPainter &p);

  std::shared_ptr<const job::JobLanes> job_;
  int selected_ = -1;
  // The labels' column (kLabelWidth, or the widest label's) and the least height of a lane
  // (kMinLaneHeight, or the tallest label's).
  int label_width_;
  int min_lane_height_;
};

}  // namespace adprof::gui
