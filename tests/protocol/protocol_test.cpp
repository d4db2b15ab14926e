// The AD protocol end to end: minitape (a second engine, not adcore) records its tape through
// adprof/ad_protocol.h; `adprof report` and `adprof whatif` speak its words, and each policy's
// prediction is checked against a recording with the policy really on (within 5%, the what-if
// bar of docs/WHATIF.md). Traces written before the protocol (adcore's own names) still predict.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "../support/temp_dir.h"
#include "adprof/ad_analysis.h"
#include "adprof/report.h"
#include "adprof/whatif.h"

namespace fs = std::filesystem;

namespace {

using adprof_test::read_file;

class Protocol : public ::testing::Test {
 protected:
  // Runs a shell command in the test's folder; returns its exit code, stdout in `out`.
  int sh(const std::string &command, std::string &out) {
    const fs::path o = dir_ / "stdout";
    const int status =
        std::system(("cd '" + dir_.path() + "' && " + command + " >'" + o.string() + "'").c_str());
    out = read_file(o);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // Records minitape (K branches of S doubles) with its policies set through its environment.
  std::string record(const std::string &name, bool early, bool inplace) {
    const std::string trace = dir_ / (name + ".adtrace");
    std::string out;
    const std::string env = std::string("MINITAPE_EARLY_RELEASE=") + (early ? "1" : "0") +
                            " MINITAPE_ACCUMULATE=" + (inplace ? "inplace" : "deferred");
    EXPECT_EQ(
        sh(env + " " ADPROF_CLI " run --no-report -o " + trace + " -- " MINITAPE " 4 262144", out),
        0);
    return trace;
  }
  // Predicts `policy` from `off`, and checks it against the peak of `on`.
  adprof::PolicyPrediction check(const std::string &policy, const std::string &off,
                                 const std::string &on) {
    const adprof::WhatIf w = adprof::predict_policies(off);
    EXPECT_TRUE(w.ad_tape);
    EXPECT_EQ(w.engine.name, "minitape");
    EXPECT_EQ(w.replayed_peak, w.measured_peak);
    const adprof::PolicyPrediction *p = adprof::find_policy(w, policy);
    EXPECT_NE(p, nullptr);
    if (!p) return {};
    EXPECT_TRUE(p->applicable) << p->reason;
    const double predicted = static_cast<double>(p->predicted_peak);
    const double measured = static_cast<double>(adprof::analyze(on).peak);
    std::printf(
        "[protocol] minitape %-22s recorded %.3f MiB predicted %.3f MiB measured %.3f MiB "
        "error %+.2f%%\n",
        policy.c_str(), static_cast<double>(w.measured_peak) / 1048576.0, predicted / 1048576.0,
        measured / 1048576.0, 100.0 * (predicted - measured) / measured);
    EXPECT_LE(std::fabs(predicted - measured), 0.05 * measured) << policy;
    EXPECT_LT(measured, static_cast<double>(w.measured_peak)) << "the policy saves nothing here";
    const adprof::WhatIf with_policy = adprof::predict_policies(on);
    const adprof::PolicyPrediction *again = adprof::find_policy(with_policy, policy);
    EXPECT_TRUE(again && again->recorded_on && !again->applicable);
    return *p;
  }

  adprof_test::TempDir dir_;  // the test's own, removed after it
};

// The GUI's halves of analyze_all: the report (with pass 1 riding on it) at once, then pass 2.
// They give what the CLI's one call and predict_policies' own two passes give.
TEST_F(Protocol, ReportThenPredictionInTwoHalves) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string deferred = record("deferred", true, false);
  adprof::FirstPass first = adprof::analyze_first(deferred);
  const adprof::Analysis all = adprof::analyze_all(deferred);
  EXPECT_EQ(first.report.peak, all.report.peak);
  EXPECT_EQ(first.report.events, all.report.events);
  EXPECT_TRUE(first.report.policy_savings.empty());  // the prediction is not in yet
  ASSERT_NE(first.prediction, nullptr);
  ASSERT_TRUE(all.whatif.has_value());
  adprof::WhatIf halves;  // on another thread, as the GUI's pool runs it
  std::thread([&] { halves = first.prediction->finish(); }).join();
  const adprof::WhatIf alone = adprof::predict_policies(deferred);
  EXPECT_EQ(halves.trace, deferred);
  EXPECT_EQ(halves.measured_peak, alone.measured_peak);
  EXPECT_EQ(halves.replayed_peak, alone.replayed_peak);
  ASSERT_EQ(halves.policies.size(), alone.policies.size());
  for (size_t i = 0; i < alone.policies.size(); ++i) {
    SCOPED_TRACE(alone.policies[i].name);
    EXPECT_EQ(halves.policies[i].applicable, alone.policies[i].applicable);
    EXPECT_EQ(halves.policies[i].predicted_peak, alone.policies[i].predicted_peak);
    EXPECT_EQ(halves.policies[i].predicted_peak, all.whatif->policies[i].predicted_peak);
  }
  adprof::Report with_savings = first.report;
  adprof::add_predictions(with_savings, halves);
  EXPECT_EQ(with_savings.policy_savings.size(), all.report.policy_savings.size());
  EXPECT_EQ(with_savings.findings.size(), all.report.findings.size());
  EXPECT_THROW(first.prediction->finish(), std::logic_error);

  // A program without an AD tape: a report, nothing pending.
  std::string out;
  ASSERT_EQ(sh(ADPROF_CLI " run --no-report -o plain.adtrace -- /bin/true", out), 0);
  const adprof::FirstPass plain = adprof::analyze_first(dir_ / "plain.adtrace");
  EXPECT_EQ(plain.prediction, nullptr);
  EXPECT_EQ(plain.report.peak, adprof::analyze(dir_ / "plain.adtrace").peak);
}

TEST_F(Protocol, SecondEngineReportAndWhatIfInItsWords) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string keep = record("keep", false, true);          // early release off
  const std::string deferred = record("deferred", true, false);  // in-place accumulation off
  const std::string on = record("on", true, true);

  // What-if: each of its two policies, checked against the recording with it on.
  const adprof::PolicyPrediction early = check("early_release", keep, on);
  EXPECT_EQ(early.switch_on, "export MINITAPE_EARLY_RELEASE=1");
  EXPECT_EQ(early.switch_off, "MINITAPE_EARLY_RELEASE=0");
  const adprof::PolicyPrediction acc = check("inplace_accumulation", deferred, on);
  // x receives 6 contributions: the second is added out of place (the first was shared), the
  // others in place. (A virtual adjoint lost its identity before: 5 out-of-place adds.)
  EXPECT_NE(acc.explanation.find("; 1 out-of-place adds"), std::string::npos) << acc.explanation;

  // Policies minitape does not have are never suggested.
  const adprof::WhatIf w = adprof::predict_policies(keep);
  for (const char *absent : {"activity_analysis", "fused_optimizer", "checkpointing",
                             "reusable_tape", "no_index_widening"}) {
    const adprof::PolicyPrediction *p = adprof::find_policy(w, absent);
    ASSERT_NE(p, nullptr) << absent;
    EXPECT_FALSE(p->applicable) << absent;
    EXPECT_NE(p->reason.find("minitape"), std::string::npos) << p->reason;
  }

  // adprof report: roles, and findings whose fixes are minitape's words.
  std::string out;
  ASSERT_EQ(sh(ADPROF_CLI " report --json " + deferred, out), 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["engine"]["name"], "minitape");
  const adprof::Report r = adprof::analyze_all(deferred).report;
  EXPECT_GT(r.peak_by_role[ADPROF_ROLE_ACCUMULATION], 0u);
  EXPECT_GT(r.peak_by_role[ADPROF_ROLE_ADJOINT], 0u);
  EXPECT_GT(r.peak_by_role[ADPROF_ROLE_FORWARD_CACHE], 0u);
  EXPECT_GT(r.peak_by_role[ADPROF_ROLE_PARAMETER], 0u);
  bool accumulation = false, saving = false;
  for (const adprof::Finding &f : r.findings) {
    if (f.kind == "non_inplace_accumulation") {
      accumulation = true;
      EXPECT_NE(f.fix.find("minitape: export MINITAPE_ACCUMULATE=inplace"), std::string::npos)
          << f.fix;
    }
    if (f.kind == "policy.inplace_accumulation") {
      saving = true;
      EXPECT_EQ(f.fix, "minitape: export MINITAPE_ACCUMULATE=inplace");
    }
    EXPECT_EQ(f.fix.find("--no-"), std::string::npos) << f.fix;
  }
  EXPECT_TRUE(accumulation);
  EXPECT_TRUE(saving);
  ASSERT_EQ(sh(ADPROF_CLI " report " + keep, out), 0);
  EXPECT_NE(out.find("export MINITAPE_EARLY_RELEASE=1"), std::string::npos) << out;
  ASSERT_EQ(sh(ADPROF_CLI " whatif " + keep, out), 0);
  EXPECT_NE(out.find("Engine: minitape 0.1"), std::string::npos) << out;
  EXPECT_NE(out.find("MINITAPE_EARLY_RELEASE=0"), std::string::npos) << out;
}

// A trace recorded before the protocol (adcore's own names, format 3: densenet --size 65536
// --naive): read through the legacy table, it still predicts, in adcore's words of then.
TEST_F(Protocol, LegacyTraceStillPredicts) {
  const adprof::WhatIf w = adprof::predict_policies(LEGACY_TRACE);
  ASSERT_TRUE(w.ad_tape) << w.reason;
  EXPECT_EQ(w.engine.name, "adcore");
  EXPECT_EQ(w.engine.protocol, 0u);
  EXPECT_EQ(w.replayed_peak, w.measured_peak);
  const adprof::PolicyPrediction *p = adprof::find_policy(w, "inplace_accumulation");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->applicable) << p->reason;
  EXPECT_GT(p->saving, 0);
  EXPECT_EQ(p->switch_off, "--no-inplace-accumulation");
  EXPECT_TRUE(w.all.applicable);
  const adprof::Report r = adprof::analyze_all(LEGACY_TRACE).report;
  EXPECT_EQ(r.engine.name, "adcore");
  bool saving = false;
  for (const adprof::Finding &f : r.findings)
    if (f.kind == "policy.inplace_accumulation") {
      saving = true;
      EXPECT_EQ(f.fix, "adcore: drop --no-inplace-accumulation");
    }
  EXPECT_TRUE(saving);
}

}  // namespace
