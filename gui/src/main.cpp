// adprof-gui [TRACE [BASE_TRACE]] | [--job] JOB... | --screenshot DIR (TRACE [BASE_TRACE] | --job
// JOB...)
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>

#include "job_window.h"
#include "main_window.h"
#include "screenshots.h"

int main(int argc, char **argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("adprof");
  QApplication::setApplicationName("adprof-gui");
  QApplication::setApplicationVersion(ADPROF_VERSION);
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "adprof-gui: the memory timeline of an adprof trace, what is live at any instant, the "
      "findings, the ops, and a second trace to compare with.");
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption screenshot(
      "screenshot", "Render the main views of TRACE as PNG files into DIR, then exit.", "DIR");
  parser.addOption(screenshot);
  QCommandLineOption job("job",
                         "Open the job TRACE belongs to (every trace of its run): a lane per "
                         "rank on one time axis. A FOLDER is a job's without --job; a job "
                         "recorded on several machines: one FOLDER (or TRACE) per machine, or "
                         "the folder holding theirs.");
  parser.addOption(job);
  parser.addPositionalArgument("trace", "The trace to open (or a job's FOLDER).", "[TRACE]");
  parser.addPositionalArgument("base", "A base trace to compare it with.", "[BASE_TRACE]");
  parser.process(app);
  const QStringList args = parser.positionalArguments();
  if (parser.isSet(job) || (!args.isEmpty() && QFileInfo(args[0]).isDir())) {
    if (args.isEmpty()) {
      fprintf(stderr, "adprof-gui: --job needs a TRACE or a FOLDER\n");
      return 2;
    }
    if (parser.isSet(screenshot))
      return adprof::gui::take_job_screenshot(parser.value(screenshot), args);
    adprof::gui::JobWindow window;
    window.show();
    window.openJob(args);
    return app.exec();
  }
  if (args.size() > 2) parser.showHelp(2);
  if (parser.isSet(screenshot)) {
    if (args.isEmpty()) {
      fprintf(stderr, "adprof-gui: --screenshot needs a TRACE\n");
      return 2;
    }
    return adprof::gui::take_screenshots(parser.value(screenshot), args[0],
                                         args.size() > 1 ? args[1] : QString());
  }
  adprof::gui::MainWindow window;
  window.restoreState();
  window.show();
  window.openFiles(args);
  return app.exec();
}
