#include "timeline_widget.h"

#include <QImage>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <array>
#include <cmath>

#include "adprof/role_style.h"
#include "palette.h"

namespace adprof::gui {

namespace {

constexpr double kLeft = 78, kRight = 14, kTop = 34, kBottom = 44;

// Stacking order, bottom to top: the analysis library's (role_style.h), as in the SVG.
const std::array<int, kRoleCount> &kRoleOrder = role_stack_order();
constexpr int kPhaseOrder[] = {ADPROF_PHASE_FORWARD, ADPROF_PHASE_BACKWARD, ADPROF_PHASE_OPTIMIZER,
                               ADPROF_PHASE_OTHER};

double nice_step(double range, int target) {
  double raw = range / std::max(1, target);
  if (raw <= 0) return 1;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// Byte ticks on binary units: 1, 2, 5 x 2^10k scaled.
double nice_bytes_step(double range, int target) {
  double unit = 1;
  while (unit * 1024 <= range / std::max(1, target)) unit *= 1024;
  return nice_step(range / unit, target) * unit;
}

// An axis label: the unit and the decimals that the tick step needs, no more.
QString format_tick(double v, double step) {
  double unit = step >= 1 ? 1 : step >= 1e-3 ? 1e-3 : 1e-6;
  const char *name = step >= 1 ? " s" : step >= 1e-3 ? " ms" : " \u00b5s";
  int decimals = std::max(0, int(std::ceil(-std::log10(step / unit) - 1e-9)));
  if (std::fabs(v) < step * 1e-6) v = 0;
  return QString::number(v / unit, 'f', decimals) + QString::fromUtf8(name);
}

// Premultiplied `src` over premultiplied `dst` (QPainter's SourceOver), for the pixels the
// timeline writes itself.
QRgb source_over(QRgb src, QRgb dst) {
  const uint keep = 255 - qAlpha(src);
  auto channel = [&](int shift) {
    const uint d = (dst >> shift) & 0xFF, sc = (src >> shift) & 0xFF;
    return std::min(255u, sc + (d * keep + 127) / 255) << shift;
  };
  return channel(24) | channel(16) | channel(8) | channel(0);
}

}  // namespace

TimelineWidget::TimelineWidget(QWidget *parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(400, 220);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent);
  detail_timer_.setSingleShot(true);
  detail_timer_.setInterval(120);
  connect(&detail_timer_, &QTimer::timeout, this, [this] {
    if (!overview_) return;
    double span = to_ - from_, full = overview_->end - overview_->start;
    if (span >= full * 0.5) return;  // the overview has enough resolution
    bool covered = detail_ && detail_from_ <= from_ && detail_to_ >= to_ &&
                   span * 8 >= detail_to_ - detail_from_;
    if (covered) return;
    emit detailWanted(std::max(overview_->start, from_ - span * 0.5),
                      std::min(overview_->end, to_ + span * 0.5));
  });
}

void TimelineWidget::setTimeline(std::shared_ptr<const Timeline> timeline) {
  overview_ = std::move(timeline);
  ops_.reset();
  detail_.reset();
  instant_ = -1;
  peak_time_ = overview_ ? overview_->peak_time : -1;
  peak_bytes_ = overview_ ? overview_->peak : 0;
  highlight_op_.clear();
  highlight_site_.clear();
  clearSelection();
  resetView();
}

void TimelineWidget::setOpTimeline(std::shared_ptr<const Timeline> timeline) {
  ops_ = std::move(timeline);
  detail_.reset();  // its op series may be different ones
  viewWasChanged();
  update();
}

void TimelineWidget::setDetail(std::shared_ptr<const Timeline> timeline, double from, double to) {
  detail_ = std::move(timeline);
  detail_from_ = from;
  detail_to_ = to;
  update();
}

void TimelineWidget::setBase(std::shared_ptr<const Timeline> timeline) {
  base_ = std::move(timeline);
  update();
}

void TimelineWidget::setPeak(double time, uint64_t bytes) {
  peak_time_ = time;
  peak_bytes_ = bytes;
  update();
}

void TimelineWidget::setInstant(double time) {
  instant_ = time;
  update();
}

void TimelineWidget::setOpLabels(QHash<QString, QString> labels) { op_labels_ = std::move(labels); }

void TimelineWidget::setHighlightOp(const QString &op) {
  highlight_op_ = op;
  update();
}

void TimelineWidget::setHighlightSite(const QString &site) {
  highlight_site_ = site;
  update();
}

std::vector<std::string> TimelineWidget::trackedSites() const {
  return ops_ ? ops_->site_names : std::vector<std::string>();
}

void TimelineWidget::setGrouping(Grouping grouping) {
  grouping_ = grouping;
  update();
}

std::vector<std::string> TimelineWidget::trackedOps() const {
  if (!ops_) return {};
  std::vector<std::string> names(ops_->op_names.begin(), ops_->op_names.end() - 1);
  return names;
}

void TimelineWidget::setView(double from, double to) {
  if (!overview_) return;
  double lo = overview_->start, hi = std::max(overview_->end, lo + 1e-9);
  double min_span = std::max((hi - lo) * 1e-9, 1e-9);
  double span = std::clamp(to - from, min_span, hi - lo);
  from = std::clamp(from, lo, hi - span);
  from_ = from;
  to_ = from + span;
  viewWasChanged();
  update();
}

void TimelineWidget::viewWasChanged() {
  emit viewChanged(from_, to_);
  detail_timer_.start();
}

void TimelineWidget::zoomAt(double factor, double time) {
  double f = (time - from_) / std::max(to_ - from_, 1e-300);
  double span = (to_ - from_) * factor;
  setView(time - f * span, time - f * span + span);
}

void TimelineWidget::zoom(double factor) { zoomAt(factor, (from_ + to_) / 2); }

void TimelineWidget::pan(double fraction) {
  double d = (to_ - from_) * fraction;
  setView(from_ + d, to_ + d);
}

void TimelineWidget::resetView() {
  if (!overview_) {
    from_ = 0, to_ = 1;
    update();
    return;
  }
  setView(overview_->start, std::max(overview_->end, overview_->start + 1e-9));
}

void TimelineWidget::setSelection(double from, double to) {
  sel_from_ = std::min(from, to);
  sel_to_ = std::max(from, to);
  emit selectionChanged(sel_from_, sel_to_);
  update();
}

void TimelineWidget::clearSelection() {
  sel_from_ = sel_to_ = 0;
  emit selectionChanged(0, 0);
  update();
}

QRectF TimelineWidget::plotRect() const {
  return QRectF(kLeft, kTop, std::max(10.0, width() - kLeft - kRight),
                std::max(10.0, height() - kTop - kBottom));
}

double TimelineWidget::timeToX(double time) const {
  QRectF r = plotRect();
  return r.left() + (time - from_) / std::max(to_ - from_, 1e-300) * r.width();
}

double TimelineWidget::xToTime(double x) const {
  QRectF r = plotRect();
  return from_ + (x - r.left()) / r.width() * (to_ - from_);
}

std::vector<TimelineWidget::Series> TimelineWidget::series(const Timeline &t) const {
  std::vector<Series> out;
  switch (grouping_) {
    case Grouping::Role:
      for (int r : kRoleOrder) out.push_back({role_name(r), role_color(r), r});
      break;
    case Grouping::Phase:
      for (int p : kPhaseOrder) out.push_back({phase_name(p), phase_color(p), p});
      break;
    case Grouping::Op:
      for (size_t i = 0; i < t.op_names.size(); ++i)
        out.push_back({QString::fromStdString(t.op_names[i]),
                       i + 1 == t.op_names.size() ? other_color() : series_color(int(i)), int(i)});
      break;
    case Grouping::Device:
      out.push_back({"host", QColor(0x00, 0x72, 0xB2), 0});
      out.push_back({"device", QColor(0xCC, 0x79, 0xA7), 1});
      break;
  }
  return out;
}

uint64_t TimelineWidget::value(const TimelineSample &s, const Series &series) const {
  switch (grouping_) {
    case Grouping::Role:
      return s.by_role[series.index];
    case Grouping::Phase:
      return s.by_phase[series.index];
    case Grouping::Op:
      return size_t(series.index) < s.by_op.size() ? s.by_op[series.index] : 0;
    case Grouping::Device:
      return series.index == 0 ? s.host : s.device;
  }
  return 0;
}

const Timeline &TimelineWidget::source() const {
  const Timeline &whole =
      (grouping_ == Grouping::Op || !highlight_op_.isEmpty() || !highlight_site_.isEmpty()) && ops_
          ? *ops_
          : *overview_;
  if (detail_ && detail_from_ <= from_ + 1e-12 && detail_to_ >= to_ - 1e-12 &&
      detail_->op_names == whole.op_names && detail_->site_names == whole.site_names)
    return *detail_;
  return whole;
}

const TimelineSample *TimelineWidget::sampleAt(const Timeline &t, double time) const {
  auto it = std::upper_bound(t.samples.begin(), t.samples.end(), time,
                             [](double v, const TimelineSample &s) { return v < s.time; });
  if (it == t.samples.begin()) return nullptr;
  return &*(it - 1);
}

QString TimelineWidget::valuesAt(double time) const {
  if (!overview_) return {};
  const Timeline &t = source();
  const TimelineSample *s = sampleAt(t, time);
  if (!s && &t != overview_.get()) s = sampleAt(*overview_, time);
  QString text = QStringLiteral("<b>%1</b>").arg(format_seconds(time));
  if (!s) return text + "<br>nothing live yet";
  text += QStringLiteral("<br>live host: <b>%1</b> (%2 bytes)")
              .arg(format_bytes_q(s->host))
              .arg(s->host);
  for (const Series &ser : series(t)) {
    uint64_t v = value(*s, ser);
    if (v == 0 || grouping_ == Grouping::Device) continue;
    QString name = ser.name.toHtmlEscaped();
    if (grouping_ == Grouping::Op)
      if (auto it = op_labels_.find(ser.name); it != op_labels_.end() && !it->isEmpty())
        name += QStringLiteral(" <i>in %1</i>").arg(it->toHtmlEscaped());
    text += QStringLiteral("<br><span style='color:%1'>&#9632;</span> %2: %3 (%4)")
                .arg(ser.color.name(), name, format_bytes_q(v))
                .arg(v);
  }
  if (s->device || s->device_reserved)
    text += QStringLiteral("<br>device: %1, reserved %2")
                .arg(format_bytes_q(s->device), format_bytes_q(s->device_reserved));
  for (const PhaseBand &b : overview_->phases)
    if (b.start <= time && time < b.end) text += "<br>phase: " + QString(phase_name(b.phase));
  if (base_)
    if (const TimelineSample *b = sampleAt(*base_, time))
      text += QStringLiteral("<br>base trace: %1").arg(format_bytes_q(b->host));
  return text;
}

QString TimelineWidget::selectionSummary() const {
  if (!overview_ || !hasSelection()) return {};
  const Timeline &t = source();
  const TimelineSample *start = sampleAt(t, sel_from_), *end = sampleAt(t, sel_to_);
  const TimelineSample *top = start;
  const TimelineSample *low = start;
  auto lo = std::lower_bound(t.samples.begin(), t.samples.end(), sel_from_,
                             [](const TimelineSample &s, double v) { return s.time < v; });
  for (auto it = lo; it != t.samples.end() && it->time <= sel_to_; ++it) {
    if (!top || it->host > top->host) top = &*it;
    if (!low || it->host < low->host) low = &*it;
  }
  auto host = [](const TimelineSample *s) { return s ? s->host : 0; };
  int64_t change = int64_t(host(end)) - int64_t(host(start));
  QString text = QStringLiteral("%1 .. %2 (%3)")
                     .arg(format_seconds(sel_from_), format_seconds(sel_to_),
                          format_seconds(sel_to_ - sel_from_));
  text +=
      QStringLiteral("   highest %1 at %2   lowest %3   start %4   end %5   change %6%7")
          .arg(format_bytes_q(host(top)), format_seconds(top ? top->time : sel_from_),
               format_bytes_q(host(low)), format_bytes_q(host(start)), format_bytes_q(host(end)),
               change < 0 ? "-" : "+", format_bytes_q(uint64_t(std::llabs(change))));
  if (top) {
    QStringList parts;
    for (const Series &ser : series(t))
      if (uint64_t v = value(*top, ser)) parts << ser.name + " " + format_bytes_q(v);
    if (!parts.isEmpty()) text += "\nat the highest: " + parts.join(", ");
  }
  return text;
}

void TimelineWidget::paintEvent(QPaintEvent *) {
  QElapsedTimer clock;
  clock.start();
  QPainter p(this);
  paintTo(p);
  last_paint_ms_ = static_cast<double>(clock.nsecsElapsed()) * 1e-6;
}

void TimelineWidget::paintTo(QPainter &p) const {
  p.fillRect(QRectF(0, 0, width(), height()), Qt::white);
  QRectF plot = plotRect();
  if (!overview_) {
    p.setPen(Qt::darkGray);
    p.drawText(rect(), Qt::AlignCenter,
               tr("Open a trace (Ctrl+O) or drop one here to see its memory timeline."));
    return;
  }
  paintChart(p, plot, source());
}

// What one paint of the chart works from: the view's samples reduced to one a pixel column,
// the vertical scale, and the image the on-screen path writes its pixels into.
struct TimelineWidget::Chart {
  Chart(const Timeline &timeline, const QRectF &plot_rect, std::vector<Series> series)
      : t(timeline), plot(plot_rect), ser(std::move(series)) {}

  const Timeline &t;
  QRectF plot;
  std::vector<Series> ser;
  int width_px = 1, height_px = 1;
  double span = 1;
  // Per pixel column, the sample drawn there: an index into t.samples, -1 the state before the
  // window (`seed`, a detail window's), -2 nothing (after the end of the recording).
  std::vector<int> column;
  const TimelineSample *seed = nullptr;
  double ytop = 1024;
  QFont small;
  QFontMetricsF fm{QFont()};
  QRectF strip;  // the phase strip under the time axis
  // On screen (and into a PNG) the phase tint and the stacked areas are pixels of one image.
  bool raster = false;
  QRgb *pixels = nullptr;
  qsizetype stride = 0;  // in pixels

  double y_of(double bytes) const { return plot.bottom() - bytes / ytop * plot.height(); }
  // The sample drawn at column c (null: none).
  const TimelineSample *sample(int c) const {
    return column[c] >= 0 ? &t.samples[column[c]] : column[c] == -1 ? seed : nullptr;
  }
};

void TimelineWidget::paintChart(QPainter &p, const QRectF &plot, const Timeline &t) const {
  Chart chart{t, plot, series(t)};
  pickColumns(chart);
  scaleChart(chart);
  prepareChartImage(p, chart);
  paintPhaseBands(p, chart);
  paintGrid(p, chart);
  paintStacks(p, chart);
  paintStepMarkers(p, chart);
  if (!highlight_op_.isEmpty())
    paintHighlight(p, chart, highlight_op_, t.op_names, &TimelineSample::by_op, 1);
  if (!highlight_site_.isEmpty())
    paintHighlight(p, chart, highlight_site_, t.site_names, &TimelineSample::by_site,
                   highlight_op_.isEmpty() ? 1 : 2);
  paintBaseTrace(p, chart);
  paintSelection(p, chart);
  paintPeak(p, chart);
  paintCursors(p, chart);
  paintFrameAndLegend(p, chart);
}

// Level of detail: one sample per pixel column, the highest live state in it.
void TimelineWidget::pickColumns(Chart &chart) const {
  const Timeline &t = chart.t;
  const QRectF &plot = chart.plot;
  chart.width_px = std::max(1, int(std::ceil(plot.width())));
  chart.span = std::max(to_ - from_, 1e-300);
  const int width_px = chart.width_px;
  const double span = chart.span;
  const auto &samples = t.samples;
  std::vector<int> &column = chart.column;
  column.assign(width_px, -1);
  auto first = std::upper_bound(samples.begin(), samples.end(), from_,
                                [](double v, const TimelineSample &s) { return v < s.time; });
  int carry = first == samples.begin() ? -1 : int(first - samples.begin()) - 1;
  // The state before a detail window's first sample.
  if (carry < 0 && &t != overview_.get()) chart.seed = sampleAt(*overview_, from_);
  size_t drawn = 0;
  auto i = first;
  for (int c = 0; c < width_px; ++c) {
    double col_end = from_ + (c + 1) * span / width_px;
    int best = carry;
    for (; i != samples.end() && i->time < col_end; ++i) {
      int k = int(i - samples.begin());
      if (best < 0 || samples[k].host > samples[best].host) best = k;
      carry = k;
      ++drawn;
    }
    column[c] = best;
    if (i == samples.end() && samples.size() && samples.back().time < col_end &&
        col_end > t.end + span / width_px)
      carry = -2;  // after the end of the recording: draw nothing more
  }
  last_samples_ = drawn;
}

// The top of the vertical axis: room above the highest column, the base trace and the peak.
void TimelineWidget::scaleChart(Chart &chart) const {
  const auto &samples = chart.t.samples;
  auto col_total = [&](int c) -> uint64_t {
    const int k = chart.column[c];
    if (k >= 0) return samples[k].host + (grouping_ == Grouping::Device ? samples[k].device : 0);
    if (k == -1 && chart.seed) return chart.seed->host;
    return 0;
  };
  uint64_t ymax = 0;
  for (int c = 0; c < chart.width_px; ++c) ymax = std::max(ymax, col_total(c));
  if (base_)
    for (const TimelineSample &s : base_->samples)
      if (s.time >= from_ && s.time <= to_) ymax = std::max(ymax, s.host);
  if (peak_time_ >= from_ && peak_time_ <= to_) ymax = std::max(ymax, peak_bytes_);
  chart.ytop = std::max<double>(1024, double(ymax) * 1.08);
  chart.small = font();
  chart.small.setPointSizeF(std::max(6.5, chart.small.pointSizeF() * 0.85));
  chart.fm = QFontMetricsF(chart.small);
  chart.strip = QRectF(chart.plot.left(), chart.plot.bottom() + 20, chart.plot.width(), 8);
}

// On screen (and into a PNG) the phase tint and the stacked areas are pixels of one image,
// drawn once: the raster engine hands every translucent fill taller than about 100 pixels to
// its thread pool and waits for it, which while the analysis jobs hold both cores cost up to
// 200 ms a repaint on a training run's thousands of bands. Vector output (SVG) keeps shapes.
void TimelineWidget::prepareChartImage(const QPainter &p, Chart &chart) const {
  const int device_type = p.device() ? p.device()->devType() : 0;
  chart.raster = device_type == QInternal::Widget || device_type == QInternal::Image ||
                 device_type == QInternal::Pixmap;
  chart.height_px = std::max(1, int(std::ceil(chart.plot.height())));
  QImage &image = chart_image_;  // kept between repaints: a new one each time faulted it in
  if (chart.raster) {
    if (image.width() != chart.width_px || image.height() != chart.height_px)
      image = QImage(chart.width_px, chart.height_px, QImage::Format_ARGB32_Premultiplied);
    chart.pixels = reinterpret_cast<QRgb *>(image.bits());
    chart.stride = image.bytesPerLine() / qsizetype(sizeof(QRgb));
  }
}

// Phase bands: a background tint and a strip under the axis. Each pixel column takes the phase
// that covers most of it; a run of columns of one phase is one rectangle (a training run has
// three bands a step).
void TimelineWidget::paintPhaseBands(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  const int width_px = chart.width_px;
  QRgb *pixels = chart.pixels;
  std::vector<std::array<double, kPhaseCount>> cover(width_px, std::array<double, kPhaseCount>{});
  for (const PhaseBand &b : overview_->phases) {
    if (b.end < from_ || b.start > to_ || b.phase < 0 || b.phase >= kPhaseCount) continue;
    double x0 = std::clamp((b.start - from_) / chart.span * width_px, 0.0, double(width_px));
    double x1 = std::clamp((b.end - from_) / chart.span * width_px, 0.0, double(width_px));
    x1 = std::max(x1, std::min(x0 + 0.5, double(width_px)));  // a short band still shows
    for (int c = int(x0); c < width_px && c < x1; ++c)
      cover[c][b.phase] += std::min(x1, c + 1.0) - std::max(x0, double(c));
  }
  p.setPen(Qt::NoPen);
  std::vector<int> column_phase(width_px);  // -1: no phase
  for (int c = 0; c < width_px; ++c) {
    const auto &k = cover[c];
    const auto most = std::max_element(k.begin(), k.end());
    column_phase[c] = *most > 0 ? int(most - k.begin()) : -1;
  }
  auto tint_of = [](int phase) {
    QColor tint = phase_color(phase);
    tint.setAlpha(22);
    return tint;
  };
  for (int c = 0; c < width_px;) {
    const int phase = column_phase[c];
    int e = c + 1;
    while (e < width_px && column_phase[e] == phase) ++e;
    const QRgb tint_pixel = phase >= 0 ? qPremultiply(tint_of(phase).rgba()) : 0;
    if (chart.raster) {
      std::fill(pixels + c, pixels + e, tint_pixel);  // the first row; copied to the others below
    }
    if (phase >= 0) {
      const double x0 = plot.left() + c, x1 = std::min(plot.left() + e, plot.right());
      if (!chart.raster) p.fillRect(QRectF(x0, plot.top(), x1 - x0, plot.height()), tint_of(phase));
      p.fillRect(QRectF(x0, chart.strip.top(), x1 - x0, chart.strip.height()), phase_color(phase));
    }
    c = e;
  }
  for (int r = 1; chart.raster && r < chart.height_px; ++r)
    std::copy(pixels, pixels + width_px, pixels + r * chart.stride);
}

// The grid and the axes' labels: bytes up the left, time along the bottom.
void TimelineWidget::paintGrid(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  p.setFont(chart.small);
  p.setPen(QPen(QColor(0xE4, 0xE4, 0xE4), 0));
  double ystep = nice_bytes_step(chart.ytop, 5);
  for (double v = 0; v <= chart.ytop; v += ystep) {
    double y = chart.y_of(v);
    p.setPen(QPen(QColor(0xE4, 0xE4, 0xE4), 0));
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    p.setPen(Qt::black);
    p.drawText(QRectF(0, y - 8, plot.left() - 6, 16), Qt::AlignRight | Qt::AlignVCenter,
               format_bytes_q(uint64_t(v)));
  }
  double xstep = nice_step(chart.span, std::max(2, int(plot.width() / 110)));
  for (double v = std::ceil(from_ / xstep) * xstep; v <= to_; v += xstep) {
    double x = timeToX(v);
    p.setPen(QPen(QColor(0xE4, 0xE4, 0xE4), 0));
    p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
    p.setPen(Qt::black);
    p.drawText(QRectF(x - 60, plot.bottom() + 3, 120, 16), Qt::AlignCenter, format_tick(v, xstep));
  }
}

// The stacked areas, one a series, flat across each column. On screen, pixel spans of the
// image: a polygon a series has four points a column where the live bytes change at every
// column (a training step's churn), and the raster engine's scan conversion of ten such
// polygons took up to 200 ms a repaint.
void TimelineWidget::paintStacks(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  const int width_px = chart.width_px;
  p.setRenderHint(QPainter::Antialiasing, false);
  std::vector<double> below(width_px, 0.0), above(width_px, 0.0);
  const bool faded = !highlight_op_.isEmpty() || !highlight_site_.isEmpty();
  // The image row of a value: row 0 at the plot's top, as y_of puts it.
  auto row_of = [&](double bytes) {
    return std::clamp(int(std::lround(chart.y_of(bytes) - plot.top())), 0, chart.height_px);
  };
  for (const Series &s : chart.ser) {
    bool any = false;
    for (int c = 0; c < width_px; ++c) {
      const TimelineSample *at = chart.sample(c);
      uint64_t v = at ? value(*at, s) : 0;
      above[c] = below[c] + double(v);
      any |= v != 0;
    }
    QColor fill = s.color;
    if (faded) fill.setAlpha(110);
    if (any && chart.raster) {
      const QRgb pixel = qPremultiply(fill.rgba());
      const bool opaque = qAlpha(pixel) == 255;
      for (int c = 0; c < width_px; ++c)
        for (int r = row_of(above[c]), end = row_of(below[c]); r < end; ++r) {
          QRgb &d = chart.pixels[r * chart.stride + c];
          d = opaque ? pixel : source_over(pixel, d);
        }
    } else if (any) {
      // Runs of equal columns become one flat segment.
      QPolygonF exact;
      exact.reserve(4 * width_px);
      for (int c = 0; c < width_px; ++c) {
        if (c > 0 && above[c] == above[c - 1]) continue;
        int e = c;
        while (e + 1 < width_px && above[e + 1] == above[c]) ++e;
        exact << QPointF(plot.left() + c, chart.y_of(above[c]))
              << QPointF(plot.left() + e + 1, chart.y_of(above[c]));
      }
      for (int c = width_px - 1; c >= 0; --c) {
        if (c < width_px - 1 && below[c] == below[c + 1]) continue;
        int b = c;
        while (b - 1 >= 0 && below[b - 1] == below[c]) --b;
        exact << QPointF(plot.left() + c + 1, chart.y_of(below[c]))
              << QPointF(plot.left() + b, chart.y_of(below[c]));
      }
      p.setBrush(fill);
      p.setPen(Qt::NoPen);
      p.drawPolygon(exact);
    }
    std::swap(below, above);
  }
  if (chart.raster)
    p.drawImage(QRectF(plot.left(), plot.top(), width_px, chart.height_px), chart_image_);
  p.setRenderHint(QPainter::Antialiasing, true);
}

// A dotted line at each step, labelled: "step N" on every marker when the closest two leave
// room for it, else the number alone; a label that would run into the previous one is left
// out. (A fixed 48 px between labels skipped the label of close steps: "step 2" was missing.)
void TimelineWidget::paintStepMarkers(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  QPen step_pen(QColor(0x55, 0x55, 0x55), 0, Qt::DotLine);
  double closest = 1e9, previous_x = -1e9;
  uint64_t last_step = 0;
  for (const StepMark &m : overview_->steps) {
    if (m.time < from_ || m.time > to_) continue;
    closest = std::min(closest, timeToX(m.time) - previous_x);
    previous_x = timeToX(m.time);
    last_step = std::max<uint64_t>(last_step, m.step);
  }
  const bool long_labels =
      closest >= chart.fm.horizontalAdvance(QStringLiteral("step %1").arg(last_step)) + 8;
  double last_label_end = -1e9;
  for (const StepMark &m : overview_->steps) {
    if (m.time < from_ || m.time > to_) continue;
    double x = timeToX(m.time);
    p.setPen(step_pen);
    p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
    const QString label =
        long_labels ? QStringLiteral("step %1").arg(m.step) : QString::number(m.step);
    if (x + 3 >= last_label_end + 4) {
      p.setPen(QColor(0x33, 0x33, 0x33));
      p.drawText(QPointF(x + 3, plot.top() + chart.fm.ascent() + 1), label);
      last_label_end = x + 3 + chart.fm.horizontalAdvance(label);
    }
  }
}

// An op's or an allocation site's live bytes as a line over the areas, named on text line
// `line_no` of the plot; while its series is still being computed, a note instead.
void TimelineWidget::paintHighlight(QPainter &p, const Chart &chart, const QString &what,
                                    const std::vector<std::string> &names,
                                    std::vector<uint64_t> TimelineSample::*series,
                                    int line_no) const {
  const QRectF &plot = chart.plot;
  auto at = std::find(names.begin(), names.end(), what.toStdString());
  const double text_y = plot.top() + (1 + line_no) * chart.fm.height() + 2;
  if (at == names.end()) {
    p.setPen(Qt::darkGray);
    p.drawText(QPointF(plot.left() + 6, text_y), tr("computing the series of %1...").arg(what));
    return;
  }
  const size_t k = size_t(at - names.begin());
  auto value = [&](int c) -> double {
    const TimelineSample *s = chart.sample(c);
    return s && k < (s->*series).size() ? double((s->*series)[k]) : 0.0;
  };
  QPolygonF line;
  for (int c = 0; c < chart.width_px; ++c) {
    double y = chart.y_of(value(c));
    line << QPointF(plot.left() + c, y) << QPointF(plot.left() + c + 1, y);
  }
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(Qt::white, 4));
  p.drawPolyline(line);
  p.setPen(QPen(QColor(0x00, 0x00, 0x00), 2));
  p.drawPolyline(line);
  p.drawText(QPointF(plot.left() + 6, text_y), tr("highlighted: %1 (its live bytes)").arg(what));
}

// The diff's base trace: its live bytes as a dashed step line.
void TimelineWidget::paintBaseTrace(QPainter &p, const Chart &chart) const {
  if (!base_ || base_->samples.empty()) return;
  const QRectF &plot = chart.plot;
  QPolygonF line;
  double prev_y = chart.y_of(0);
  line << QPointF(plot.left(), prev_y);
  for (const TimelineSample &s : base_->samples) {
    if (s.time > to_) break;
    double x = std::max(plot.left(), timeToX(s.time)), y = chart.y_of(double(s.host));
    line << QPointF(x, prev_y) << QPointF(x, y);
    prev_y = y;
  }
  line << QPointF(std::min(plot.right(), timeToX(base_->end)), prev_y);
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(base_color(), 2, Qt::DashLine));
  p.setClipRect(plot);
  p.drawPolyline(line);
  p.setClipping(false);
}

void TimelineWidget::paintSelection(QPainter &p, const Chart &chart) const {
  if (!hasSelection()) return;
  const QRectF &plot = chart.plot;
  double x0 = std::clamp(timeToX(sel_from_), plot.left(), plot.right());
  double x1 = std::clamp(timeToX(sel_to_), plot.left(), plot.right());
  p.fillRect(QRectF(x0, plot.top(), x1 - x0, plot.height()), QColor(0x00, 0x72, 0xB2, 50));
  p.setPen(QPen(QColor(0x00, 0x72, 0xB2), 1));
  p.drawLine(QPointF(x0, plot.top()), QPointF(x0, plot.bottom()));
  p.drawLine(QPointF(x1, plot.top()), QPointF(x1, plot.bottom()));
}

// The peak: a dashed line, a triangle at its height and a boxed label beside it.
void TimelineWidget::paintPeak(QPainter &p, const Chart &chart) const {
  if (peak_time_ < from_ || peak_time_ > to_) return;
  const QRectF &plot = chart.plot;
  double x = timeToX(peak_time_);
  double y = chart.y_of(double(peak_bytes_));
  QPen marker(peak_color(), 2, Qt::CustomDashLine);
  marker.setDashPattern({4, 2});
  p.setRenderHint(QPainter::Antialiasing, false);
  p.setPen(marker);
  p.drawLine(QPointF(std::round(x), plot.top()), QPointF(std::round(x), plot.bottom()));
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(Qt::NoPen);
  p.setBrush(peak_color());
  p.drawPolygon(QPolygonF({QPointF(x - 6, y - 10), QPointF(x + 6, y - 10), QPointF(x, y)}));
  QString label = tr("peak %1 at %2").arg(format_bytes_q(peak_bytes_), format_seconds(peak_time_));
  double w = chart.fm.horizontalAdvance(label) + 8;
  double lx = x + w + 6 > plot.right() ? x - w - 6 : x + 6;
  QRectF box(lx, std::max(plot.top() + 2, y - 28), w, chart.fm.height() + 2);
  p.setBrush(QColor(255, 255, 255, 225));
  p.setPen(QPen(peak_color(), 1));
  p.drawRect(box);
  p.drawText(box, Qt::AlignCenter, label);
}

// The instant cursor (not over the peak's line) and the hover guide.
void TimelineWidget::paintCursors(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  if (instant_ >= from_ && instant_ <= to_ && std::fabs(instant_ - peak_time_) > 1e-12) {
    double x = timeToX(instant_);
    p.setPen(QPen(QColor(0x00, 0x72, 0xB2), 2));
    p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
  }
  if (hover_x_ >= plot.left() && hover_x_ <= plot.right()) {
    p.setPen(QPen(QColor(0, 0, 0, 90), 1));
    p.drawLine(QPointF(hover_x_, plot.top()), QPointF(hover_x_, plot.bottom()));
  }
}

// The plot's frame, the legend of the series drawn (and the base trace) above it, and the
// phases' legend under the strip.
void TimelineWidget::paintFrameAndLegend(QPainter &p, const Chart &chart) const {
  const QRectF &plot = chart.plot;
  const QFontMetricsF &fm = chart.fm;
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(QColor(0x88, 0x88, 0x88), 1));
  p.drawRect(plot);
  double lx = plot.left();
  double ly = 8;
  auto legend = [&](const QColor &c, const QString &name, bool line) {
    double w = fm.horizontalAdvance(name) + 22;
    if (lx + w > plot.right()) lx = plot.left(), ly += fm.height() + 2;
    if (line) {
      p.setPen(QPen(c, 2, Qt::DashLine));
      p.drawLine(QPointF(lx, ly + 6), QPointF(lx + 12, ly + 6));
    } else {
      p.fillRect(QRectF(lx, ly + 1, 12, 10), c);
    }
    p.setPen(Qt::black);
    p.drawText(QPointF(lx + 16, ly + fm.ascent() - 1), name);
    lx += w;
  };
  if (grouping_ == Grouping::Op && !ops_) {
    p.setPen(Qt::darkGray);
    p.drawText(QPointF(lx, ly + fm.ascent()), tr("computing op series..."));
  } else {
    for (const Series &s : chart.ser) {
      bool any = false;
      for (const TimelineSample &x : chart.t.samples)
        if (value(x, s)) {
          any = true;
          break;
        }
      if (any) legend(s.color, s.name, false);
    }
  }
  if (base_) legend(base_color(), tr("base trace"), true);
  p.setPen(Qt::black);
  p.drawText(QRectF(plot.left(), chart.strip.bottom() + 1, plot.width(), 14), Qt::AlignLeft,
             tr("phases: "));
  double px = plot.left() + fm.horizontalAdvance(tr("phases: "));
  for (int ph : {ADPROF_PHASE_FORWARD, ADPROF_PHASE_BACKWARD, ADPROF_PHASE_OPTIMIZER}) {
    p.fillRect(QRectF(px, chart.strip.bottom() + 4, 10, 8), phase_color(ph));
    p.drawText(QPointF(px + 13, chart.strip.bottom() + 2 + fm.ascent()), phase_name(ph));
    px += fm.horizontalAdvance(phase_name(ph)) + 24;
  }
}

void TimelineWidget::mousePressEvent(QMouseEvent *event) {
  if (!overview_) return;
  press_pos_ = event->position();
  press_from_ = from_;
  press_to_ = to_;
  pressed_ = true;
  dragging_ = false;
  selecting_ = event->button() == Qt::RightButton || (event->modifiers() & Qt::ShiftModifier);
}

void TimelineWidget::mouseMoveEvent(QMouseEvent *event) {
  if (!overview_) return;
  QPointF pos = event->position();
  hover_x_ = pos.x();
  if (pressed_) {
    if (!dragging_ && std::fabs(pos.x() - press_pos_.x()) > 3) dragging_ = true;
    if (dragging_) {
      if (selecting_) {
        double a = press_from_ + (press_pos_.x() - plotRect().left()) / plotRect().width() *
                                     (press_to_ - press_from_);
        setSelection(a, xToTime(pos.x()));
      } else {
        double dt = (pos.x() - press_pos_.x()) / plotRect().width() * (press_to_ - press_from_);
        setView(press_from_ - dt, press_to_ - dt);
      }
    }
  } else if (plotRect().contains(pos)) {
    QToolTip::showText(event->globalPosition().toPoint(), valuesAt(xToTime(pos.x())), this);
  } else {
    QToolTip::hideText();
  }
  update();
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent *event) {
  if (!pressed_) return;
  pressed_ = false;
  if (dragging_) return;
  if (event->button() == Qt::LeftButton && plotRect().contains(event->position())) {
    double x = event->position().x();
    // A click within a few pixels of the peak marker is the peak itself.
    bool at_peak = peak_time_ >= 0 && std::fabs(x - peakX()) <= 4;
    double time = at_peak ? peak_time_ : xToTime(x);
    setInstant(time);
    emit instantClicked(time, at_peak);
  } else if (event->button() == Qt::RightButton) {
    clearSelection();
  }
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent *) { resetView(); }

void TimelineWidget::wheelEvent(QWheelEvent *event) {
  if (!overview_) return;
  double steps = event->angleDelta().y() / 120.0;
  if (steps == 0) return;
  if (event->modifiers() & Qt::ShiftModifier) {
    pan(-0.1 * steps);
  } else {
    zoomAt(std::pow(0.8, steps), xToTime(event->position().x()));
  }
  event->accept();
}

void TimelineWidget::leaveEvent(QEvent *) {
  hover_x_ = -1;
  update();
}

}  // namespace adprof::gui
