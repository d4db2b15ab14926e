// adprof whatif: for each memory policy, record a sample with the policy off, predict the peak
// with it on, record the sample with it on, and require the prediction within 5% of the
// measured peak (analyze().peak of the second trace).
#include "adprof/whatif.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "../support/temp_dir.h"
#include "adprof/replay.h"
#include "adprof/report.h"

namespace fs = std::filesystem;

namespace {

using Result = adprof_test::ProcessResult;

using adprof_test::read_file;

class WhatIf : public ::testing::Test {
 protected:
  void SetUp() override {
    ADPROF_SKIP_IF_SANITIZED();  // records the (sanitized) samples under the interposer
  }

  Result sh(const std::string &command) { return adprof_test::run_shell(command, dir_); }
  Result adprof(const std::string &args) { return sh(std::string(ADPROF_CLI) + " " + args); }

  std::string record(const std::string &name, const std::string &program) {
    std::string trace = (dir_ / (name + ".adtrace")).string();
    Result r = adprof("run --no-report -o " + trace + " -- " + program + " --quiet");
    EXPECT_EQ(r.code, 0) << r.err;
    return trace;
  }

  // Records `program off_args`, predicts `policy`, records `program on_args`, compares.
  // Returns the prediction (from the off recording).
  adprof::PolicyPrediction check(const std::string &policy, const std::string &program,
                                 const std::string &off_args, const std::string &on_args,
                                 bool off_is_off = true) {
    adprof::PolicyPrediction result;
    check_into(result, policy, program, off_args, on_args, off_is_off);
    return result;
  }
  void check_into(adprof::PolicyPrediction &result, const std::string &policy,
                  const std::string &program, const std::string &off_args,
                  const std::string &on_args, bool off_is_off) {
    const std::string off = record("off", program + " " + off_args);
    const std::string on = record("on", program + " " + on_args);
    const adprof::WhatIf w = adprof::predict_policies(off);
    ASSERT_TRUE(w.ad_tape);
    // The model replays the recording itself exactly.
    EXPECT_EQ(w.replayed_peak, w.measured_peak);
    EXPECT_EQ(w.measured_peak, adprof::analyze(off).peak);
    const adprof::PolicyPrediction *p = adprof::find_policy(w, policy);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p->applicable) << p->reason;
    result = *p;
    if (policy != "all") {
      EXPECT_EQ(p->recorded_on, !off_is_off);
    }
    const double predicted = static_cast<double>(p->predicted_peak);
    const double measured = static_cast<double>(adprof::analyze(on).peak);
    const double recorded = static_cast<double>(w.measured_peak);
    std::printf(
        "[whatif] %-22s %-40s recorded %.3f MiB predicted %.3f MiB measured %.3f MiB "
        "error %+.2f%%\n",
        policy.c_str(), (fs::path(program).filename().string() + " " + off_args).c_str(),
        recorded / 1048576.0, predicted / 1048576.0, measured / 1048576.0,
        100.0 * (predicted - measured) / measured);
    EXPECT_LE(std::fabs(predicted - measured), 0.05 * measured)
        << policy << ": predicted " << predicted << " measured " << measured;
    // And the policy is on in the second recording.
    const adprof::WhatIf w2 = adprof::predict_policies(on);
    const adprof::PolicyPrediction *p2 = adprof::find_policy(w2, policy);
    ASSERT_NE(p2, nullptr);
    if (policy != "all") {
      EXPECT_TRUE(p2->recorded_on);
    }
    EXPECT_FALSE(p2->applicable);
  }

  adprof_test::TempDir tmp_;  // removed with everything in it when the test ends
  const fs::path dir_{tmp_.path()};
};

const std::string kSamples = SAMPLES_DIR;

TEST_F(WhatIf, InPlaceAccumulationDensenet) {
  check("inplace_accumulation", kSamples + "/densenet", "--size 262144 --no-inplace-accumulation",
        "--size 262144");
}

TEST_F(WhatIf, ActivityAnalysisQuadform) {
  check("activity_analysis", kSamples + "/quadform", "--calls 2 --no-activity-analysis",
        "--calls 2");
}

TEST_F(WhatIf, ActivityAnalysisQuadformActiveA) {
  check("activity_analysis", kSamples + "/quadform", "--calls 2 --active-A --no-activity-analysis",
        "--calls 2 --active-A");
}

TEST_F(WhatIf, NativeI32IndicesGather) {
  check("no_index_widening", kSamples + "/gather", "--rows 262144 --widen-indices",
        "--rows 262144");
}

// With the policy off but no index array widened (a DenseNet gathers nothing), the row is not a
// prediction of "0 widened copies not made" that reads as if the program widened some, and "all"
// does not count it among the policies it switches on.
TEST_F(WhatIf, NoIndexWideningWithNothingWidenedIsNotApplicable) {
  const std::string naive = record("naive", kSamples + "/densenet --size 4096 --naive");
  const adprof::WhatIf w = adprof::predict_policies(naive);
  const adprof::PolicyPrediction *p = adprof::find_policy(w, "no_index_widening");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->recorded_on);
  EXPECT_FALSE(p->applicable) << p->explanation;
  EXPECT_NE(p->reason.find("no index array widened in the recording"), std::string::npos)
      << p->reason;
  ASSERT_TRUE(w.all.applicable) << w.all.reason;
  EXPECT_EQ(w.all.explanation.find("no index widening"), std::string::npos) << w.all.explanation;
}

TEST_F(WhatIf, FusedOptimizerMlp) {
  check("fused_optimizer", kSamples + "/mlp", "--steps 2 --batch 20000 --no-fused-optimizer",
        "--steps 2 --batch 20000");
}

TEST_F(WhatIf, EarlyReleaseBranches) {
  check("early_release", WORKLOAD, "--branches 8 --size 100000 --no-early-release",
        "--branches 8 --size 100000");
}

// Every policy at once, from a fully naive recording (the reusable tape's arena included).
TEST_F(WhatIf, AllPoliciesFromNaiveDensenet) {
  check("all", kSamples + "/densenet", "--size 262144 --naive", "--size 262144");
}

TEST_F(WhatIf, AllPoliciesFromNaiveQuadform) {
  check("all", kSamples + "/quadform", "--calls 2 --naive", "--calls 2");
}

TEST_F(WhatIf, AllPoliciesFromNaiveGather) {
  check("all", kSamples + "/gather", "--rows 262144 --naive", "--rows 262144");
}

TEST_F(WhatIf, AllPoliciesFromNaiveBranches) {
  check("all", WORKLOAD, "--branches 8 --size 100000 --naive", "--branches 8 --size 100000");
}

// Checkpointing: the recording runs a stack of plain layers; the prediction checkpoints its
// longest chain with checkpoint_sequential's sqrt(n) schedule; the second recording runs the
// same stack through checkpoint_sequential.
TEST_F(WhatIf, CheckpointingChain) {
  const adprof::PolicyPrediction p =
      check("checkpointing", WORKLOAD, "--chain 16 --size 100000 --no-checkpoint",
            "--chain 16 --size 100000 --checkpoint");
  EXPECT_EQ(p.chain.layers, 16u);
  EXPECT_EQ(p.chain.ops_per_layer, 2u);
  EXPECT_EQ(p.chain.nodes, 32u);
  EXPECT_EQ(p.chain.segments, 4u);
  EXPECT_EQ(p.chain.layer, (std::vector<std::string>{"affine", "tanh"}));
  EXPECT_GT(p.saving, 0);
  EXPECT_NE(p.explanation.find("16 layers of 2 ops (affine, tanh)"), std::string::npos)
      << p.explanation;
}

TEST_F(WhatIf, CheckpointingChainNoEarlyRelease) {
  const adprof::PolicyPrediction p = check(
      "checkpointing", WORKLOAD, "--chain 25 --size 100000 --no-checkpoint --no-early-release",
      "--chain 25 --size 100000 --checkpoint --no-early-release");
  EXPECT_EQ(p.chain.segments, 5u);
}

// A program that marks no segment: the policy is on but unused, and the prediction is the same.
TEST_F(WhatIf, CheckpointingChainPolicyOnNoSegments) {
  const adprof::PolicyPrediction p =
      check("checkpointing", WORKLOAD, "--chain 36 --size 50000",
            "--chain 36 --size 50000 --checkpoint", /*off_is_off=*/false);
  EXPECT_EQ(p.chain.segments, 6u);
  const nlohmann::json j = adprof::to_json(adprof::predict_policies(
      record("again", WORKLOAD + std::string(" --chain 36 --size 50000"))));
  bool found = false;
  for (const auto &q : j["policies"])
    if (q["name"] == "checkpointing") {
      found = true;
      EXPECT_EQ(q["recorded"], "on");
      EXPECT_TRUE(q["applicable"].get<bool>());
      EXPECT_GT(q["saving"].get<int64_t>(), 0);
      EXPECT_EQ(q["chain"]["layers"].get<uint64_t>(), 36u);
      EXPECT_EQ(q["chain"]["segments"].get<uint64_t>(), 6u);
      EXPECT_EQ(q["chain"]["layer"], nlohmann::json({"affine", "tanh"}));
    }
  EXPECT_TRUE(found);
}

TEST_F(WhatIf, CliTableJsonAndErrors) {
  const std::string trace = record("naive", kSamples + "/densenet --size 65536 --naive");
  Result r = adprof("whatif " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Measured peak"), std::string::npos);
  EXPECT_NE(r.out.find("in-place accumulation"), std::string::npos);
  EXPECT_NE(r.out.find("--no-inplace-accumulation"), std::string::npos);
  EXPECT_NE(r.out.find("not predictable from this trace"), std::string::npos);
  r = adprof("whatif --json " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ad_tape"].get<bool>());
  EXPECT_EQ(j["policies"].size(), 7u);
  EXPECT_EQ(j["measured_peak"].get<uint64_t>(), j["replayed_peak"].get<uint64_t>());
  bool inplace = false;
  for (const auto &p : j["policies"])
    if (p["name"] == "inplace_accumulation") {
      inplace = true;
      EXPECT_EQ(p["recorded"], "off");
      EXPECT_TRUE(p["applicable"].get<bool>());
      EXPECT_GT(p["saving"].get<int64_t>(), 0);
    }
  EXPECT_TRUE(inplace);
  EXPECT_TRUE(j["all"]["applicable"].get<bool>());

  r = adprof("whatif --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("usage: adprof whatif TRACE"), std::string::npos);
  r = adprof("whatif");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = adprof("whatif " + (dir_ / "missing.adtrace").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::ofstream(dir_ / "junk.adtrace") << "not a trace";
  r = adprof("whatif " + (dir_ / "junk.adtrace").string());
  EXPECT_EQ(r.code, 2);
  r = adprof("whatif --bogus " + trace);
  EXPECT_EQ(r.code, 2);
}

TEST_F(WhatIf, NoTapeIsNotApplicable) {
  std::string trace = (dir_ / "true.adtrace").string();
  Result r = adprof("run --no-report -o " + trace + " -- /bin/true");
  ASSERT_EQ(r.code, 0) << r.err;
  const adprof::WhatIf w = adprof::predict_policies(trace);
  EXPECT_FALSE(w.ad_tape);
  for (const auto &p : w.policies) {
    EXPECT_FALSE(p.applicable);
    EXPECT_FALSE(p.reason.empty());
  }
  EXPECT_FALSE(w.all.applicable);
  r = adprof("whatif " + trace);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("No prediction"), std::string::npos);
}

}  // namespace

// The table's columns are as wide as their widest cell: an engine's long switch (PyTorch's
// wording) pushed the rest of its row out of line.
TEST(WhatIfTable, ColumnsFitTheirWidestCell) {
  adprof::WhatIf w;
  w.trace = "t.adtrace";
  w.ad_tape = true;
  w.measured_peak = 100 << 20;
  adprof::PolicyPrediction shortp, longp;
  shortp.title = "activity";
  shortp.switch_off = "--x";
  shortp.id = 0;
  shortp.applicable = true;
  shortp.predicted_peak = 90 << 20;
  shortp.saving = 10 << 20;
  longp.title = "a policy whose title is longer than twenty-four characters";
  longp.switch_off = "model.gradient_checkpointing_disable() and some more words";
  longp.id = 1;
  longp.applicable = true;
  longp.predicted_peak = 5 << 20;
  longp.saving = 95 << 20;
  w.policies = {shortp, longp};
  w.all = shortp;
  w.all.title = "all policies on";
  w.all.id = -1;
  std::istringstream text(adprof::render_text(w));
  std::string line;
  std::vector<size_t> ends;
  while (std::getline(text, line))
    if (line.find("MiB (") != std::string::npos || line.find("saving") != std::string::npos)
      ends.push_back(line.size());
  ASSERT_EQ(ends.size(), 4u);  // the header and three rows
  for (size_t end : ends) EXPECT_EQ(end, ends[0]) << adprof::render_text(w);
}

// "All policies" lists what it switches on: checkpointing is a row of its own (it read
// "switched on together: ..., checkpointing, ...; checkpointing not included").
TEST_F(WhatIf, AllPoliciesRowDoesNotListCheckpointing) {
  const std::string trace =
      record("chain", std::string(WORKLOAD) + " --chain 16 --size 100000 --no-checkpoint --naive");
  const adprof::WhatIf w = adprof::predict_policies(trace);
  ASSERT_TRUE(w.all.applicable) << w.all.reason;
  const std::string &e = w.all.explanation;
  EXPECT_EQ(e.find("checkpointing"), e.find("checkpointing not included")) << e;
}
