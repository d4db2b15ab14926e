// adprof report TRACE [--json] [--top N]
// adprof report --job TRACE | FOLDER [--rank N]: a job of several processes (job_cli.h)
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/ad_analysis.h"
#include "cli_common.h"
#include "job_cli.h"

namespace adprof::cli {

int command_report(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof report TRACE [--json] [--top N]\n"
      "       adprof report --job TRACE|FOLDER... [--rank N] [--json]\n\n"
      "The memory report of a trace: peak live memory and what it is made of (forward caches,\n"
      "adjoint buffers, duplicated intermediates and the other roles), findings with the\n"
      "switch that fixes each, allocations by phase, op and step, allocator overhead.\n"
      "A job (--job, or a FOLDER): every trace of TRACE's run (or the folder's), its ranks side\n"
      "by side (peak, when, bytes by role at each rank's peak, steps, workers), the rank with\n"
      "the highest peak and the role that makes the difference, the launcher and the workers\n"
      "(docs/PYTORCH.md, \"Training jobs\"); --rank N: that rank's full report. A job recorded\n"
      "on several machines: one TRACE or FOLDER per machine's run, merged by rank.\n\n"
      "Options");
  options.add_options()("help,h", "show this help")(
      "json", "print the report as JSON (schema: docs/REPORT_SCHEMA.md)")(
      "job", "report the whole run TRACE belongs to (every process of a training job)")(
      "rank", po::value<std::string>(), "with a job: the full report of rank N");
  add_report_options(options);
  // One trace; a job's: one path per machine's run (a job recorded on several machines).
  options.add_options()("trace", po::value<std::vector<std::string>>(), "the trace file");
  po::positional_options_description positional;
  positional.add("trace", -1);
  const po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    std::cout << options;
    return kExitOk;
  }
  if (!vm.count("trace")) throw UsageError("report needs TRACE (see adprof report --help)");
  const std::vector<std::string> paths = vm["trace"].as<std::vector<std::string>>();
  const uint64_t top = whole_number_option(vm, "top", 1, 100000);
  {
    std::error_code ec;
    if (vm.count("job") || vm.count("rank") || paths.size() > 1 ||
        std::filesystem::is_directory(paths[0], ec))
      return print_job_report(load_job(paths), vm);
  }
  AnalyzeOptions analyze_options = analyze_options_with_progress();
  analyze_options.site_stacks = vm.count("json") > 0;  // the text shows no site's stack
  const std::string &trace = paths[0];
  // The memory report, and the AD layer when the trace has a tape (ad_analysis.h).
  Report report = analyze_all(trace, analyze_options).report;
  end_progress();
  warn_if_incomplete(trace, report.complete, report.end_reason);
  if (vm.count("json"))
    std::cout << json_text(to_json(report, json_options(vm))) << '\n';
  else
    std::cout << render_text(report, static_cast<size_t>(top), vm.count("details") > 0);
  return kExitOk;
}

}  // namespace adprof::cli
