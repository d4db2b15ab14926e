// The what-if for engines with layers (ad_protocol.h version 2) without Python: layertape
// emits the events the PyTorch listener emits; each technique's prediction from the recording
// of the plain loop is checked against a recording with the technique really applied (5%, the
// what-if's bar), and the checkpointing fix names the chain in the engine's own labels.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "../support/temp_dir.h"
#include "adprof/report.h"
#include "adprof/whatif.h"

namespace fs = std::filesystem;

namespace {

class LayerTape : public ::testing::Test {
 protected:
  std::string record(const std::string &name, const std::string &args) {
    const std::string trace = dir_ / (name + ".adtrace");
    const int status = std::system(
        (ADPROF_CLI " run --no-report -o '" + trace + "' -- " LAYERTAPE " " + args + " >/dev/null")
            .c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args;
    return trace;
  }
  // The prediction of `policy` from the plain run, against the run with `technique`.
  adprof::PolicyPrediction check(const std::string &policy, const std::string &technique,
                                 const std::string &shape = "9 1048576 1048576 3") {
    const adprof::WhatIf w = adprof::predict_policies(record("plain", shape));
    EXPECT_EQ(w.engine.name, "layertape");
    EXPECT_EQ(w.replayed_peak, w.measured_peak);
    const adprof::PolicyPrediction *p = adprof::find_policy(w, policy);
    EXPECT_NE(p, nullptr);
    if (!p) return {};
    EXPECT_TRUE(p->applicable) << p->reason;
    const double predicted = static_cast<double>(p->predicted_peak);
    const double measured = static_cast<double>(
        adprof::analyze(record(technique, shape + " --technique " + technique)).peak);
    std::printf(
        "[layertape] %-16s recorded %.3f MiB predicted %.3f MiB measured %.3f MiB error "
        "%+.2f%%\n  %s\n",
        policy.c_str(), static_cast<double>(w.measured_peak) / 1048576.0, predicted / 1048576.0,
        measured / 1048576.0, 100.0 * (predicted - measured) / measured, p->explanation.c_str());
    EXPECT_LE(std::fabs(predicted - measured), 0.05 * measured) << policy;
    // The technique changes the real peak (by more than the bar), so the check means something.
    EXPECT_GT(std::fabs(static_cast<double>(w.measured_peak) - measured), 0.05 * measured)
        << policy;
    return *p;
  }
  adprof_test::TempDir dir_;  // the test's own, removed after it
};

TEST_F(LayerTape, CheckpointingTheLongestChainOfLayers) {
  const adprof::PolicyPrediction p = check("checkpointing", "checkpoint");
  EXPECT_TRUE(p.chain.layered);
  EXPECT_EQ(p.chain.layers, 9u);
  EXPECT_EQ(p.chain.segments, 3u);
  EXPECT_EQ(p.chain.checkpointed_layers, 6u);
  EXPECT_EQ(p.chain.first, "net.blocks.0");
  EXPECT_EQ(p.chain.last, "net.blocks.8");
  EXPECT_EQ(p.chain.parent, "net.blocks");
  EXPECT_EQ(p.switch_on, "checkpoint net.blocks (net.blocks.0 .. net.blocks.8) in 3 segments");
}

TEST_F(LayerTape, CheckpointingSixteenLayers) {
  const adprof::PolicyPrediction p = check("checkpointing", "checkpoint", "16 1048576 262144 2");
  EXPECT_EQ(p.chain.segments, 4u);
  EXPECT_EQ(p.chain.checkpointed_layers, 12u);
}

TEST_F(LayerTape, OptimizerStepFusedIntoBackward) {
  check("fused_optimizer", "fused", "9 262144 2097152 3");
}

TEST_F(LayerTape, GradientsFreedInsteadOfZeroed) {
  const adprof::PolicyPrediction p = check("free_gradients", "set_to_none", "9 262144 2097152 3");
  EXPECT_EQ(p.switch_on, "--technique set_to_none");
}

// A trace whose program never zeroes a gradient in place: nothing to predict, and it says why.
TEST_F(LayerTape, NothingToFreeWhenGradientsAreNotZeroed) {
  const adprof::WhatIf w =
      adprof::predict_policies(record("fused", "9 262144 262144 2 --technique fused"));
  const adprof::PolicyPrediction *p = adprof::find_policy(w, "free_gradients");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->applicable);
  EXPECT_NE(p->reason.find("never zeroes"), std::string::npos) << p->reason;
}

}  // namespace
