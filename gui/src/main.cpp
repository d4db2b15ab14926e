// adprof-gui [TRACE [BASE_TRACE]] | --screenshot DIR TRACE [BASE_TRACE]
#include <QApplication>
#include <QCommandLineParser>

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
  parser.addPositionalArgument("trace", "The trace to open.", "[TRACE]");
  parser.addPositionalArgument("base", "A base trace to compare it with.", "[BASE_TRACE]");
  parser.process(app);
  const QStringList args = parser.positionalArguments();
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
