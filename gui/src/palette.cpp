#include "palette.h"

#include <cmath>

#include "adprof/context.h"
#include "adprof/report.h"
#include "adprof/role_style.h"

namespace adprof::gui {

namespace {
// Paul Tol, "muted" (https://personal.sron.nl/~pault/): distinct for the common forms of
// colour blindness, and on paper.
const QColor kTolMuted[] = {
    QColor(0x33, 0x22, 0x88), QColor(0x88, 0xCC, 0xEE), QColor(0x44, 0xAA, 0x99),
    QColor(0x11, 0x77, 0x33), QColor(0x99, 0x99, 0x33), QColor(0xDD, 0xCC, 0x77),
    QColor(0xCC, 0x66, 0x77), QColor(0x88, 0x22, 0x55), QColor(0xAA, 0x44, 0x99)};
}  // namespace

// The analysis library's table (role_style.h): the same colour in the SVG, the text timeline
// and the Perfetto export.
QColor role_color(int role) {
  if (role < 0 || role >= kRoleCount) return other_color();
  const uint32_t rgb = role_rgb(role);
  return QColor((rgb >> 16) & 0xFF, (rgb >> 8) & 0xFF, rgb & 0xFF);
}

// Okabe-Ito: blue, vermillion, bluish green; grey for "other".
QColor phase_color(int phase) {
  switch (phase) {
    case ADPROF_PHASE_FORWARD:
      return QColor(0x00, 0x72, 0xB2);
    case ADPROF_PHASE_BACKWARD:
      return QColor(0xD5, 0x5E, 0x00);
    case ADPROF_PHASE_OPTIMIZER:
      return QColor(0x00, 0x9E, 0x73);
    default:
      return QColor(0xBB, 0xBB, 0xBB);
  }
}

QColor series_color(int index) { return kTolMuted[index % 9]; }
QColor other_color() { return QColor(0xDD, 0xDD, 0xDD); }
QColor peak_color() { return QColor(0x00, 0x00, 0x00); }
QColor base_color() { return QColor(0xE6, 0x9F, 0x00); }  // Okabe-Ito orange

QString format_bytes_q(uint64_t bytes) { return QString::fromStdString(format_bytes(bytes)); }

QString format_seconds(double s) {
  double a = std::fabs(s);
  if (a >= 1 || a == 0) return QString::number(s, 'f', a >= 100 ? 1 : 3) + " s";
  if (a >= 1e-3) return QString::number(s * 1e3, 'f', 3) + " ms";
  return QString::number(s * 1e6, 'f', 1) + QString::fromUtf8(" \u00b5s");
}

}  // namespace adprof::gui
