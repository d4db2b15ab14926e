// adprof-gui --screenshot DIR TRACE [BASE]: renders the main views to PNG files (offscreen
// platform), for the README and docs/GUI.md. Returns the process exit status.
#pragma once

#include <QString>

namespace adprof::gui {

int take_screenshots(const QString &dir, const QString &trace, const QString &base);

}  // namespace adprof::gui
