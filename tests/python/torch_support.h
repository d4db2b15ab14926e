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
  std::string line;         // the event's dump line
};

inline PeakPlace op_open_at(const std::string &trace, uint64_t peak_event) {
  Result r = run_cli({"dump", "--limit", std::to_string(peak_event), trace}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::vector<uint64_t>> stacks;  // thread -> open op instances
  std::map<std::string, uint64_t> ended;                // thread -> the op that ended last
  uint64_t n = 0;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    ++n;
    std::istringstream fields(line);
    std::string time, thread, type, label;
    fields >> time >> thread >> type;
    if (type == "op_begin") {
      fields >> label;
      auto hash = label.rfind('#');
      stacks[thread].push_back(hash == std::string::npos ? 0 : std::stoull(label.substr(hash + 1)));
    } else if (type == "op_end") {
      if (!stacks[thread].empty()) {
        ended[thread] = stacks[thread].back();
        stacks[thread].pop_back();
      }
    }
    if (n == peak_event) {
      PeakPlace p;
      p.line = line;
      p.open = stacks[thread].empty() ? 0 : stacks[thread].back();
      p.ended_last = ended[thread];
      return p;
    }
  }
  ADD_FAILURE() << "the dump has " << n << " events, the peak is event " << peak_event;
  return {};
}

}  // namespace adprof_test
