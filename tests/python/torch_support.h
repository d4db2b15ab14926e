// What the PyTorch suites share (torch_test.cpp, models_test.cpp): the report of a trace and
// where its peak lies among the op scopes, to hold adprof's roles against PyTorch's own account
// (scripts/roles_oracle.py).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../support/process.h"

namespace adprof_test {

using nlohmann::json;

inline json report_of(const std::string &trace) {
  Result r = run_cli({"report", "--json", trace}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "adprof report printed no JSON: " << r.err;
  return j;
}

// Where the peak event (report.peak.event, 1-based, the analysis' event count) lies among the
// op scopes of its thread.
struct PeakPlace {
  uint64_t open = 0;        // the instance of the op scope open there; 0 if none
  uint64_t ended_last = 0;  // the instance of the op scope that ended last before it
  // the buffers retagged optimizer_state inside the open scope before it (an optimizer step
  // run as one scope stores its state there)
  uint64_t state_stores = 0;
  std::string line;  // the event's dump line
};

inline PeakPlace op_open_at(const std::string &trace, uint64_t peak_event) {
  const std::string at = std::to_string(peak_event);
  // The peak event's own line, then the op scopes and retags up to it: the events in between
  // (millions of allocations in a model's run) are neither printed nor read here.
  Result peak = run_cli({"dump", "--numbered", "--from", at, "--limit", at, trace}, 300);
  EXPECT_EQ(peak.exit_code, 0) << peak.err;
  Result ops = run_cli(
      {"dump", "--numbered", "--types", "op_begin,op_end,retag", "--limit", at, trace}, 300);
  EXPECT_EQ(ops.exit_code, 0) << ops.err;
  std::string number, time, peak_thread;
  std::istringstream(peak.out) >> number >> time >> peak_thread;
  if (number != at) {
    ADD_FAILURE() << "the dump has no event " << at << " (the peak): " << peak.out;
    return {};
  }
  struct OpenOp {
    uint64_t instance = 0;
    uint64_t state_stores = 0;  // optimizer_state retags inside it so far
  };
  std::map<std::string, std::vector<OpenOp>> stacks;  // thread -> open op scopes
  std::map<std::string, uint64_t> ended;              // thread -> the op that ended last
  std::istringstream lines(ops.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string thread, type, label;
    fields >> number >> time >> thread >> type;
    if (type == "op_begin") {
      fields >> label;
      auto hash = label.rfind('#');
      stacks[thread].push_back(
          {hash == std::string::npos ? 0 : std::stoull(label.substr(hash + 1)), 0});
    } else if (type == "op_end") {
      if (!stacks[thread].empty()) {
        ended[thread] = stacks[thread].back().instance;
        stacks[thread].pop_back();
      }
    } else if (type == "retag" && line.find("-> optimizer_state") != std::string::npos &&
               !stacks[thread].empty()) {
      ++stacks[thread].back().state_stores;
    }
  }
  PeakPlace p;
  p.line = peak.out.substr(0, peak.out.find('\n'));
  if (!stacks[peak_thread].empty()) {
    p.open = stacks[peak_thread].back().instance;
    p.state_stores = stacks[peak_thread].back().state_stores;
  }
  p.ended_last = ended[peak_thread];
  return p;
}

}  // namespace adprof_test
