// Colours that stay apart for colour-blind readers: Paul Tol's "muted" scheme for roles and
// ops, Okabe-Ito for phases and the host/device series.
#pragma once

#include <QColor>
#include <QString>

namespace adprof::gui {

QColor role_color(int role);
QColor phase_color(int phase);
QColor series_color(int index);  // ops and other categorical series
QColor other_color();            // "other ops", "foreign"
QColor peak_color();
QColor base_color();  // the diff's base trace
QString format_bytes_q(uint64_t bytes);
QString format_seconds(double seconds);

}  // namespace adprof::gui
