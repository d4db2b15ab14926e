// adprof whatif TRACE [--json]
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/whatif.h"
#include "cli_common.h"

namespace adprof::cli {

int command_whatif(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof whatif TRACE [--json]\n\n"
      "Replays the tape an AD engine recorded (the AD protocol) with each memory policy it\n"
      "described switched on (activity analysis, early release, in-place accumulation, fused\n"
      "optimizer, checkpointing, no index widening) and with all of them, and predicts each\n"
      "host peak and the saving. A policy that was already on, or that this trace cannot\n"
      "predict, says why. Model and accuracy: docs/WHATIF.md.\n\n"
      "Options");
  options.add_options()("help,h", "show this help")("json", "print the predictions as JSON")(
      "trace", po::value<std::string>(), "the trace file");
  auto parsed = parse_command("whatif", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  const std::string trace = vm["trace"].as<std::string>();
  TraceReader reader(trace);
  WhatIf w = predict_policies(reader, analyze_options_with_progress().stage_progress);
  end_progress();
  w.trace = trace;
  warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  if (vm.count("json"))
    std::cout << json_text(to_json(w)) << '\n';
  else
    std::cout << render_text(w);
  return kExitOk;
}

}  // namespace adprof::cli
