// adprof report TRACE [--json] [--top N]
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/ad_analysis.h"
#include "cli_common.h"

namespace adprof::cli {

int command_report(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof report TRACE [--json] [--top N]\n\n"
      "The memory report of a trace: peak live memory and what it is made of (forward caches,\n"
      "adjoint buffers, duplicated intermediates and the other roles), findings with the\n"
      "switch that fixes each, allocations by phase, op and step, allocator overhead.\n\n"
      "Options");
  options.add_options()("help,h", "show this help")(
      "json", "print the report as JSON (schema: docs/REPORT_SCHEMA.md)");
  add_report_options(options);
  options.add_options()("trace", po::value<std::string>(), "the trace file");
  auto parsed = parse_command("report", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  const uint64_t top = whole_number_option(vm, "top", 1, 100000);
  AnalyzeOptions analyze_options = analyze_options_with_progress();
  analyze_options.site_stacks = vm.count("json") > 0;  // the text shows no site's stack
  const std::string trace = vm["trace"].as<std::string>();
  // The memory report, and the AD layer when the trace has a tape (ad_analysis.h).
  Report report = analyze_all(trace, analyze_options).report;
  end_progress();
  warn_if_incomplete(trace, report.complete, report.end_reason);
  if (vm.count("json"))
    std::cout << to_json(report, json_options(vm)).dump(2) << '\n';
  else
    std::cout << render_text(report, static_cast<size_t>(top), vm.count("details") > 0);
  return kExitOk;
}

}  // namespace adprof::cli
