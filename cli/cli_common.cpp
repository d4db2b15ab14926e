#include "cli_common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace adprof::cli {

po::variables_map parse(const std::vector<std::string> &args,
                        const po::options_description &options,
                        const po::positional_options_description &positional) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error &e) {
    throw UsageError(e.what());
  }
  return vm;
}

void write_file(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.flush();
  if (!out) throw UsageError("cannot write '" + path + "'");
}

namespace {
bool g_progress_shown = false;
}

void show_progress(const char *what, double fraction) {
  if (!isatty(2)) return;
  fprintf(stderr, "\r  %s %3.0f%%", what, fraction * 100.0);
  fflush(stderr);
  g_progress_shown = true;
}

void end_progress() {
  if (g_progress_shown) fprintf(stderr, "\r%40s\r", "");
  g_progress_shown = false;
}

}  // namespace adprof::cli
