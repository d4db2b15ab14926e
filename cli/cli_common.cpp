#include "cli_common.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>

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

std::optional<po::variables_map> parse_command(const std::string &command,
                                               const std::vector<std::string> &args,
                                               const po::options_description &options,
                                               const std::vector<std::string> &positionals,
                                               size_t required) {
  po::positional_options_description positional;
  for (const std::string &name : positionals) positional.add(name.c_str(), 1);
  po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    std::cout << options;
    return std::nullopt;
  }
  for (size_t i = 0; i < required && i < positionals.size(); ++i) {
    if (vm.count(positionals[i])) continue;
    std::string names;
    for (size_t k = 0; k < required; ++k) {
      std::string upper = positionals[k];
      for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      names += (k ? " and " : "") + upper;
    }
    throw UsageError(command + " needs " + names + " (see adprof " + command + " --help)");
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

void warn_if_incomplete(const std::string &trace, bool complete, const std::string &reason) {
  if (complete) return;
  end_progress();
  fprintf(stderr, "adprof: warning: '%s' is incomplete: %s\n", trace.c_str(), reason.c_str());
}

}  // namespace adprof::cli
