// adprof-gui --screenshot DIR TRACE [BASE]: renders the main views to PNG files (offscreen
// platform), for the README and docs/GUI.md. Returns the process exit status.
#pragma once

#include <QString>
#include <QStringList>

namespace adprof::gui {

int take_screenshots(const QString &dir, const QString &trace, const QString &base);
// adprof-gui --screenshot DIR --job PATH...: the job view (DIR/gui-job.png).
int take_job_screenshot(const QString &dir, const QStringList &paths);

}  // namespace adprof::gui
