#include "job_lanes_widget.h"

#include <QDateTime>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QTimeZone>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "adprof/role_style.h"
#include "job_model.h"
#include "palette.h"

namespace adprof::gui {

namespace {

constexpr int kLabelWidth = 150;  // the least width of the lanes' names and peaks, left of the plot
constexpr int kAxisHeight = 34;   // the time axis below the lanes
constexpr int kMinLaneHeight = 44;
constexpr int kGap = 4;          // between lanes
constexpr int kLabelMargin = 2;  // above and below a lane's label
constexpr int kLabelInset = 6;   // left and right of it

// A tick step of 1, 2 or 5 times a power of ten giving about `count` ticks over `span`.
double tick_step(double span, int count) {
  if (span <= 0) return 1;
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

}  // namespace

JobLanesWidget::JobLanesWidget(QWidget *parent)
    : QWidget(parent), label_width_(kLabelWidth), min_lane_height_(kMinLaneHeight) {
  setFocusPolicy(Qt::StrongFocus);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
  setMouseTracking(false);
}

void JobLanesWidget::setJob(std::shared_ptr<const job::JobLanes> job) {
  job_ = std::move(job);
  selected_ = -1;
  measureLabels();
  updateGeometry();
  update();
}

// A label is up to five lines (name, peak, a summarized step, the outlier's words and its
// device peak), each drawn whole: at kMinLaneHeight and kLabelWidth, the device outlier's
// third and fourth lines (its device peak) were cut off, and its bold "highest device peak:"
// was wider than the column. Every lane gets the height of the tallest label, so that the lanes
// stay alike (one scale; a job of many ranks scrolls), and the column the widest line.
void JobLanesWidget::measureLabels() {
  label_width_ = kLabelWidth;
  min_lane_height_ = kMinLaneHeight;
  if (!job_) return;
  for (int i = 0; i < static_cast<int>(job_->lanes.size()); ++i) {
    const QRect text = QFontMetrics(labelFont(i))
                           .boundingRect(QRect(0, 0, 1 << 20, 1 << 20),
                                         Qt::AlignLeft | Qt::AlignTop, laneLabel(i));
    label_width_ = std::max(label_width_, text.width() + 2 * kLabelInset);
    min_lane_height_ = std::max(min_lane_height_, text.height() + 2 * kLabelMargin);
  }
}

void JobLanesWidget::changeEvent(QEvent *event) {
  if (event->type() == QEvent::FontChange) {
    measureLabels();
    updateGeometry();
    update();
  }
  QWidget::changeEvent(event);
}

QFont JobLanesWidget::labelFont(int lane) const {
  QFont f = font();
  f.setBold(job_ && lane == job_->outlier_lane);
  return f;
}

void JobLanesWidget::selectLane(int lane) {
  if (!job_ || lane < 0 || lane >= static_cast<int>(job_->lanes.size()) || lane == selected_)
    return;
  selected_ = lane;
  update();
  emit laneSelected(lane);
}

QSize JobLanesWidget::sizeHint() const {
  const int lanes = job_ ? static_cast<int>(job_->lanes.size()) : 2;
  return {900, kAxisHeight + lanes * (std::max(2 * kMinLaneHeight, min_lane_height_) + kGap)};
}

QSize JobLanesWidget::minimumSizeHint() const {
  // Every lane at its least height: a job of many ranks scrolls (the job window's scroll area).
  const int lanes = job_ ? static_cast<int>(job_->lanes.size()) : 2;
  return {label_width_ + 200, kAxisHeight + lanes * (min_lane_height_ + kGap)};
}

QRect JobLanesWidget::laneRect(int lane) const {
  if (!job_ || job_->lanes.empty()) return {};
  const int n = static_cast<int>(job_->lanes.size());
  const int h = std::max(min_lane_height_, (height() - kAxisHeight) / n - kGap);
  return QRect(0, lane * (h + kGap), width(), h);
}

QRect JobLanesWidget::labelRect(int lane) const {
  const QRect band = laneRect(lane);
  if (band.isNull()) return {};
  return QRect(kLabelInset, band.top() + kLabelMargin, label_width_ - 2 * kLabelInset,
               band.height() - 2 * kLabelMargin);
}

QRect JobLanesWidget::plotRect() const {
  return QRect(label_width_, 0, std::max(1, width() - label_width_ - 12),
               std::max(1, height() - kAxisHeight));
}

double JobLanesWidget::xOfTime(double seconds) const {
  const QRect plot = plotRect();
  const double end = job_ && job_->end > 0 ? job_->end : 1;
  return plot.left() + seconds / end * plot.width();
}

int JobLanesWidget::laneAt(const QPoint &pos) const {
  if (!job_) return -1;
  for (int i = 0; i < static_cast<int>(job_->lanes.size()); ++i)
    if (laneRect(i).contains(pos)) return i;
  return -1;
}

void JobLanesWidget::paintEvent(QPaintEvent *) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  if (!job_ || job_->lanes.empty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter,
               job_ ? tr("The job has no process to show.") : tr("No job."));
    return;
  }
  for (int i = 0; i < static_cast<int>(job_->lanes.size()); ++i) paintLane(p, i);
  paintAxis(p);
}

QString JobLanesWidget::laneLabel(int index) const {
  if (!job_ || index < 0 || index >= static_cast<int>(job_->lanes.size())) return {};
  const job::Process &process =
      job_->job.processes[job_->lanes[static_cast<size_t>(index)].process];
  // The trace's peak (a step window's summaries too: trace_peak), as the job report's.
  const TracePeak peak = trace_peak(process.report);
  QString text = lane_name(*job_, static_cast<size_t>(index)) + "\n" + format_bytes_q(peak.bytes);
  if (peak.summarized) text += "\n" + tr("in step %1, summarized").arg(peak.step);
  if (index != job_->outlier_lane) return text;
  // The device outlier's figure is its device peak, not the host peak drawn beside it.
  if (job_->outlier_on_device)
    return text + "\n" +
           tr("highest device peak:\n%1")
               .arg(format_bytes_q(trace_device_peak(process.report).bytes));
  return text + "\n" + tr("highest peak");
}

void JobLanesWidget::paintLane(QPainter &p, int index) {
  const job::Lane &lane = job_->lanes[static_cast<size_t>(index)];
  const QRect band = laneRect(index);
  const QRect plot(plotRect().left(), band.top() + 2, plotRect().width(), band.height() - 4);
  const bool outlier = index == job_->outlier_lane;
  if (index == selected_) p.fillRect(band, palette().color(QPalette::Highlight).lighter(185));
  p.setPen(QColor(0xDD, 0xDD, 0xDD));
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  // The lane's name and peak.
  p.setFont(labelFont(index));
  p.setPen(outlier ? peak_color() : palette().color(QPalette::Text));
  p.drawText(labelRect(index), Qt::AlignLeft | Qt::AlignVCenter, laneLabel(index));
  p.setFont(font());
  // Memory stacked by role on the job's scale, step-wise (a sample holds until the next).
  const Timeline &t = lane.timeline;
  if (t.samples.empty() || job_->peak == 0) return;
  const double scale = static_cast<double>(plot.height()) / static_cast<double>(job_->peak);
  std::vector<double> xs(t.samples.size());
  for (size_t s = 0; s < t.samples.size(); ++s) xs[s] = xOfTime(lane.offset + t.samples[s].time);
  const double x_end = xOfTime(lane.offset + t.end);
  std::vector<uint64_t> below(t.samples.size(), 0);
  const auto &order = role_stack_order();
  // Bottom up: each role's band between the roles below it and itself.
  for (int role : order) {
    bool any = false;
    for (const TimelineSample &s : t.samples) any |= s.by_role[static_cast<size_t>(role)] > 0;
    if (!any) continue;
    QPainterPath path;
    auto y = [&](uint64_t bytes) { return plot.bottom() - static_cast<double>(bytes) * scale; };
    std::vector<QPointF> top, bottom;
    for (size_t s = 0; s < t.samples.size(); ++s) {
      const double next = s + 1 < t.samples.size() ? xs[s + 1] : x_end;
      const uint64_t low = below[s], high = low + t.samples[s].by_role[static_cast<size_t>(role)];
      top.emplace_back(xs[s], y(high));
      top.emplace_back(next, y(high));
      bottom.emplace_back(xs[s], y(low));
      bottom.emplace_back(next, y(low));
      below[s] = high;
    }
    QPolygonF polygon;
    for (const QPointF &q : top) polygon << q;
    for (auto it = bottom.rbegin(); it != bottom.rend(); ++it) polygon << *it;
    path.addPolygon(polygon);
    p.fillPath(path, QColor::fromRgb(role_rgb(role)));
  }
  // The lane's peak: a mark at its time.
  const TracePeak peak = trace_peak(job_->job.processes[lane.process].report);
  const double peak_x = xOfTime(lane.offset + peak.time);
  p.setPen(QPen(peak_color(), outlier ? 2 : 1));
  p.drawLine(QPointF(peak_x, plot.top()), QPointF(peak_x, plot.bottom()));
}

void JobLanesWidget::paintAxis(QPainter &p) {
  const QRect plot = plotRect();
  const int y = plot.bottom() + 4;
  p.setPen(palette().color(QPalette::Text));
  p.drawLine(plot.left(), y, plot.right(), y);
  const double end = job_->end > 0 ? job_->end : 1;
  const double step = tick_step(end, std::max(2, plot.width() / 110));
  for (double s = 0; s <= end + step * 1e-9; s += step) {
    const int x = static_cast<int>(std::lround(xOfTime(s)));
    p.drawLine(x, y, x, y + 4);
    // Centred on its tick; the first starts at it (left of the plot is the lanes' names).
    const QRect box = s == 0 ? QRect(x, y + 5, 100, 14) : QRect(x - 50, y + 5, 100, 14);
    p.drawText(box, (s == 0 ? Qt::AlignLeft : Qt::AlignHCenter) | Qt::AlignTop, format_seconds(s));
  }
  // What 0 is: the earliest start among the lanes, by the wall clock of its machine.
  const QDateTime start = QDateTime::fromMSecsSinceEpoch(
      static_cast<qint64>(job_->start_wall_ns / 1000000), QTimeZone::utc());
  p.drawText(QRect(4, y, label_width_ - 8, kAxisHeight - 4), Qt::AlignLeft | Qt::AlignVCenter,
             tr("0 = %1 UTC").arg(start.toString("HH:mm:ss.zzz")));
}

void JobLanesWidget::mousePressEvent(QMouseEvent *event) {
  const int lane = laneAt(event->position().toPoint());
  if (lane >= 0) selectLane(lane);
  QWidget::mousePressEvent(event);
}

void JobLanesWidget::mouseDoubleClickEvent(QMouseEvent *event) {
  const int lane = laneAt(event->position().toPoint());
  if (lane >= 0) {
    selectLane(lane);
    emit laneActivated(lane);
  }
}

void JobLanesWidget::keyPressEvent(QKeyEvent *event) {
  if (!job_ || job_->lanes.empty()) return QWidget::keyPressEvent(event);
  const int n = static_cast<int>(job_->lanes.size());
  switch (event->key()) {
    case Qt::Key_Up:
      selectLane(std::max(0, selected_ - 1));
      return;
    case Qt::Key_Down:
      selectLane(std::min(n - 1, selected_ + 1));
      return;
    case Qt::Key_Return:
    case Qt::Key_Enter:
      if (selected_ >= 0) emit laneActivated(selected_);
      return;
    default:
      QWidget::keyPressEvent(event);
  }
}

bool JobLanesWidget::event(QEvent *event) {
  if (event->type() != QEvent::ToolTip || !job_) return QWidget::event(event);
  auto *help = static_cast<QHelpEvent *>(event);
  const int index = laneAt(help->pos());
  const QRect plot = plotRect();
  if (index < 0 || help->pos().x() < plot.left()) {
    QToolTip::hideText();
    event->ignore();
    return true;
  }
  const job::Lane &lane = job_->lanes[static_cast<size_t>(index)];
  const double end = job_->end > 0 ? job_->end : 1;
  const double at = (help->pos().x() - plot.left()) / static_cast<double>(plot.width()) * end;
  // The sample in force at `at` on the lane's own clock.
  const double local = at - lane.offset;
  const auto &samples = lane.timeline.samples;
  auto it = std::upper_bound(samples.begin(), samples.end(), local,
                             [](double v, const TimelineSample &s) { return v < s.time; });
  QString text =
      lane_name(*job_, static_cast<size_t>(index)) + tr(" at %1").arg(format_seconds(at));
  if (it != samples.begin() && local <= lane.timeline.end)
    text += ": " + format_bytes_q(std::prev(it)->host);
  else
    text += tr(": not running");
  text += "\n" + tr("Double-click: the rank's full view");
  QToolTip::showText(help->globalPos(), text, this);
  return true;
}

}  // namespace adprof::gui
