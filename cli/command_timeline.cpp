// adprof timeline TRACE [--width W] [--height H] [--csv FILE] [--svg FILE] [--no-color]
// A terminal chart of live host bytes stacked by role, phase bands under it, the peak marked; the
// timeline and its renderings are the analysis library's (adprof/timeline_render.h).
#include <unistd.h>

#include <iostream>

#include "adprof/timeline.h"
#include "adprof/timeline_render.h"
#include "cli_common.h"

namespace adprof::cli {

int command_timeline(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof timeline TRACE [--width W] [--height H] [--csv FILE] [--svg FILE]\n\n"
      "Live host bytes over time, stacked by role, with forward/backward/optimizer bands, step\n"
      "marks and the peak. --csv and --svg write the same series to files.\n\nOptions");
  options.add_options()("help,h", "show this help")(
      "width", po::value<std::string>()->default_value("100"), "chart columns (20 to 1000)")(
      "height", po::value<std::string>()->default_value("20"), "chart rows (4 to 200)")(
      "csv", po::value<std::string>(), "write the series as CSV")("svg", po::value<std::string>(),
                                                                  "write the chart as SVG")(
      "from", po::value<std::string>()->default_value("0"), "window start (s)")(
      "to", po::value<std::string>(), "window end (s; default: the end)")(
      "no-color", "plain characters even on a terminal")("trace", po::value<std::string>(),
                                                         "trace");
  auto parsed = parse_command("timeline", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  const int width = static_cast<int>(whole_number_option(vm, "width", 20, 1000));
  const int height = static_cast<int>(whole_number_option(vm, "height", 4, 200));
  TimelineOptions topt;
  topt.from = number_option(vm, "from", 0, 1e12);
  topt.to = vm.count("to") ? number_option(vm, "to", 0, 1e12) : 1e300;
  if (topt.to <= topt.from) throw UsageError("--to must be later than --from");
  const std::string trace = vm["trace"].as<std::string>();
  TraceReader reader(trace);
  topt.max_samples = kTimelineExportSamples;
  topt.progress = [](double f) { show_progress("reading", f); };
  Timeline t = build_timeline(reader, topt);
  end_progress();
  if (vm.count("csv")) write_file(vm["csv"].as<std::string>(), timeline_csv(t));
  if (vm.count("svg")) write_file(vm["svg"].as<std::string>(), timeline_svg(t));
  bool colour = !vm.count("no-color") && isatty(1);
  std::cout << timeline_text_chart(t, width, height, colour);
  if (!reader.end().complete) std::cout << "WARNING: " << reader.end().reason << '\n';
  warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  return kExitOk;
}

}  // namespace adprof::cli
