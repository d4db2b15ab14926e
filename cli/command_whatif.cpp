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
      "Replays an adcore run's recorded tape with each memory policy switched on (activity\n"
      "analysis, early release, in-place accumulation, fused optimizer, native i32 indices) and\n"
      "with all of them, and predicts each host peak and the saving. A policy that was already\n"
      "on, or that this trace cannot predict, says why. Model and accuracy: docs/WHATIF.md.\n\n"
      "Options");
  options.add_options()("help,h", "show this help")("json", "print the predictions as JSON")(
      "trace", po::value<std::string>(), "the trace file");
  auto parsed = parse_command("whatif", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  const std::string trace = vm["trace"].as<std::string>();
  TraceReader reader(trace);
  WhatIf w = predict_policies(reader);
  w.trace = trace;
  warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  if (vm.count("json"))
    std::cout << to_json(w).dump(2) << '\n';
  else
    std::cout << render_text(w);
  return kExitOk;
}

}  // namespace adprof::cli
