// The report's JSON read back (report_from_json) and written again (to_json) is the JSON the
// CLI wrote, for every golden report (expected/*.report-json): the reader knows every key the
// writer writes, and reads each into the member it came from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "adprof/report.h"

namespace {

TEST(GoldenReportJson, ReadBackAndWrittenAgainIsTheSame) {
  int checked = 0;
  for (const auto &entry : std::filesystem::directory_iterator(GOLDEN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".report-json")) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    // The golden file: the command's stdout, then its stderr and exit status (golden.sh).
    if (all.find("\n--- exit 0 ---") == std::string::npos) continue;  // a refused input
    const std::string out = all.substr(0, all.find("--- stderr ---\n"));
    const nlohmann::json j = nlohmann::json::parse(out);
    EXPECT_EQ(adprof::to_json(adprof::report_from_json(j)), j) << name;
    ++checked;
  }
  EXPECT_GT(checked, 40);  // the corpus's readable traces, the AD traces, the snapshots
}

}  // namespace
