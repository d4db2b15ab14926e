// Models that were not written here, trained as their users train them (issue: PyTorch as its
// users run it today). scripts/model_zoo.py builds Hugging Face transformers models from small
// configs (a decoder, GPT-2; an encoder, BERT; an image transformer, ViT) and torchvision's
// ResNet-18, and trains each with one feature users switch on: transformers' own
// gradient_checkpointing_enable(), torch.utils.checkpoint (non-reentrant and reentrant),
// torch.compile, bf16 autocast, fused and foreach AdamW, gradient accumulation.
//
// For each model and feature, on the test venv's newest PyTorch 2.x (label torch_models):
// - the program is unchanged: its output (every loss bit for bit, a checksum of the trained
//   parameters) and exit status are the same with and without adprof;
// - parameter and optimizer_state bytes at the peak equal PyTorch's own (the unique storages of
//   model.parameters() and optimizer.state), and forward_cache equals the saved tensors autograd
//   holds there (scripts/roles_oracle.py; less the Python numbers autograd saves without the
//   saved-tensor hooks, which no hook can see: 8 bytes each, allowed and bounded).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "python_packages.h"
#include "torch_support.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

const std::string kPython = env_or("ADPROF_TEST_PYTHON", ADPROF_TEST_VENV_PYTHON);
const std::string kScripts = env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS);

// The venv's PyTorch and transformers, said once ("" if the venv lacks them).
const std::string &stack_version() {
  static const std::string version =
      said_versions("models", kPython, {"torch", "torchvision", "transformers"},
                    "torch torchvision transformers");
  return version;
}

struct Case {
  std::string model, feature;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.model << " " << c.feature; }

// "gpt2_compile": the case's test name, and its name in the default tier's list.
std::string name_of(const Case &c) { return c.model + "_" + c.feature; }

std::string case_name(const testing::TestParamInfo<Case> &info) { return name_of(info.param); }

class Models : public testing::TestWithParam<Case> {};

TEST_P(Models, ProgramUnchangedAndRolesAsPyTorchHoldsThem) {
  ADPROF_SKIP_IF_SANITIZED();
  if (stack_version().empty())
    GTEST_SKIP() << "no torch, torchvision and transformers for " << kPython
                 << " (scripts/setup-test-venv.sh makes the test venv from PyPI)";
  const Case &c = GetParam();
  const std::string zoo = kScripts + "/model_zoo.py";
  const std::vector<std::pair<std::string, std::string>> env = {
      {"PYTHONDONTWRITEBYTECODE", "1"}, {"TOKENIZERS_PARALLELISM", "false"}};

  SpawnOptions plain;
  plain.argv = {kPython, zoo, c.model, c.feature};
  plain.env = env;
  plain.timeout_s = 900;
  Result alone = run(plain);
  ASSERT_TRUE(alone.exited) << alone.err;
  ASSERT_EQ(alone.exit_code, 0) << alone.err;

  TempDir tmp;
  const std::string trace = tmp / "run.adtrace", side = tmp / "oracle.json",
                    figures = tmp / "figures.json";
  SpawnOptions o;
  o.argv = {cli_path(), "run",   "--torch", "--no-report", "-o", trace,       "--",   kPython,
            zoo,        c.model, c.feature, "--oracle",    side, "--figures", figures};
  o.env = env;
  o.timeout_s = 900;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_code, alone.exit_code) << r.err;
  EXPECT_EQ(r.out, alone.out) << "adprof changed the program's output\n" << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << r.err;
  if (r.exit_code != 0) return;

  const json report = report_of(trace);
  const json views = json::parse(read_file(side), nullptr, false);
  const json fig = json::parse(read_file(figures), nullptr, false);
  ASSERT_FALSE(report.is_discarded() || views.is_discarded() || fig.is_discarded());
  const json &by_role = report["peak"]["by_role"];
  EXPECT_EQ(by_role["parameter"].get<uint64_t>(), fig["parameter"].get<uint64_t>())
      << "every parameter is live at the peak";
  // The zoo's indices are int64 from the start: no finding tells it to stop widening them (a
  // causal LM's clone of its labels was told to "pass the int32 index as it is").
  for (const json &f : report["findings"])
    EXPECT_EQ(f.value("fix", "").find("int32 index"), std::string::npos) << f.dump();

  const PeakPlace place = op_open_at(trace, report["peak"]["event"].get<uint64_t>());
  const char *which = place.open ? "views" : "after";
  const uint64_t op = place.open ? place.open : place.ended_last;
  auto it = views[which].find(std::to_string(op));
  if (it == views[which].end()) {
    // The oracle looks in backward and in the step. A compiled model peaks in inductor's own
    // compilation, the first time it runs; under autocast a forward can top the backward
    // (the low-precision copies of the weights autocast keeps for the forward): there the
    // optimizer's state is all there is or none yet (the first step's forward).
    const std::string phase = report["peak"]["phase"].get<std::string>();
    EXPECT_TRUE(c.feature == "compile" || phase == "forward")
        << "the oracle has no account (" << which << ") for op #" << op << " (the peak is in "
        << phase << "): " << place.line;
    const uint64_t state = by_role["optimizer_state"].get<uint64_t>();
    EXPECT_TRUE(state == 0 || state == fig["optimizer_state"].get<uint64_t>())
        << "optimizer_state at the peak: adprof " << state << ", PyTorch's optimizer holds "
        << fig["optimizer_state"];
    return;
  }
  const json &torch = *it;
  for (const char *role : {"parameter", "optimizer_state"})
    EXPECT_EQ(by_role[role].get<uint64_t>(), torch[role].get<uint64_t>())
        << role << " at the peak (op #" << op << ", " << report["peak"]["phase"] << ")";
  // Checkpointing keeps what its recomputation saves in its own frames, not on the graph's
  // nodes, where the oracle reads: there the what-if check holds the forward caches.
  if (c.feature.find("checkpoint") != std::string::npos) return;
  const uint64_t cache = by_role["forward_cache"].get<uint64_t>();
  const uint64_t held = torch["forward_cache"].get<uint64_t>();
  const uint64_t scalars = torch["forward_cache_scalars"].get<uint64_t>();
  EXPECT_LE(cache, held) << "forward_cache at the peak: adprof " << cache << ", PyTorch " << held;
  EXPECT_GE(cache, held - scalars) << "forward_cache at the peak: adprof " << cache << ", PyTorch "
                                   << held << " (of which " << scalars << " saved Python numbers)";
}

// GPT-2 with every feature; the others with the features that exercise something else in them
// (torch.compile is a minute of inductor on two cores: the decoder and the ResNet).
const std::vector<Case> &matrix() {
  static const std::vector<Case> cases = [] {
    const std::vector<std::pair<std::string, std::vector<std::string>>> features = {
        {"gpt2",
         {"plain", "hf_checkpointing", "checkpoint", "checkpoint_reentrant", "compile",
          "autocast_bf16", "fused_adamw", "foreach_adamw", "accumulation"}},
        {"bert", {"plain", "hf_checkpointing", "checkpoint", "autocast_bf16", "accumulation"}},
        {"vit", {"plain", "checkpoint_reentrant", "autocast_bf16"}},
        {"resnet",
         {"plain", "checkpoint", "checkpoint_reentrant", "compile", "autocast_bf16", "fused_adamw",
          "foreach_adamw", "accumulation"}},
    };
    std::vector<Case> out;
    for (const auto &[model, model_features] : features)
      for (const std::string &feature : model_features) out.push_back({model, feature});
    return out;
  }();
  return cases;
}

// The default tier (suite Zoo) covers every feature once and every model at least twice; the
// rest of the matrix is suite ZooMore, label `torch_models_extended` (a minute of two cores per
// three cases: run with ADPROF_ALL_TESTS=1 scripts/test.sh, docs/PYTORCH.md).
bool in_default_tier(const Case &c) {
  static const std::vector<std::string> names = {
      "gpt2_hf_checkpointing", "gpt2_compile",
      "gpt2_foreach_adamw",    "bert_plain",
      "bert_accumulation",     "vit_checkpoint_reentrant",
      "vit_autocast_bf16",     "resnet_checkpoint",
      "resnet_fused_adamw"};
  return std::find(names.begin(), names.end(), name_of(c)) != names.end();
}

std::vector<Case> tier(bool default_tier) {
  std::vector<Case> out;
  for (const Case &c : matrix())
    if (in_default_tier(c) == default_tier) out.push_back(c);
  return out;
}

// A name in the default tier that the matrix lacks would drop a case from both tiers in silence.
TEST(ZooTiers, EveryCaseIsInExactlyOneTier) {
  EXPECT_EQ(tier(true).size(), 9u) << "a default-tier name is not in the matrix";
  EXPECT_EQ(tier(true).size() + tier(false).size(), matrix().size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, Models, testing::ValuesIn(tier(true)), case_name);
INSTANTIATE_TEST_SUITE_P(ZooMore, Models, testing::ValuesIn(tier(false)), case_name);

// The checkpointing advice, pasted: the report of a plain run proposes code (for a transformers
// model its own switch, for any other the blocks of the container that holds the forward caches
// wrapped in torch.utils.checkpoint) and predicts the peak with it; the code, run in the script
// right after the model is built, works, and the peak it gives is the predicted one (5%). The
// models are the zoo's large ones, whose activations outweigh the process's start-up memory.
class CheckpointAdvice : public testing::TestWithParam<std::string> {};

TEST_P(CheckpointAdvice, PastedFixRunsAndGivesThePredictedPeak) {
  ADPROF_SKIP_IF_SANITIZED();
  if (stack_version().empty())
    GTEST_SKIP() << "no torch, torchvision and transformers for " << kPython
                 << " (scripts/setup-test-venv.sh makes the test venv from PyPI)";
  const std::string model = GetParam(), zoo = kScripts + "/model_zoo.py";
  TempDir tmp;
  auto record = [&](const std::string &trace, std::vector<std::string> extra) {
    SpawnOptions o;
    o.argv = {cli_path(), "run",   "--torch", "--no-report", "-o",    trace,
              "--",       kPython, zoo,       model,         "plain", "--large"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.env = {{"PYTHONDONTWRITEBYTECODE", "1"}};
    o.timeout_s = 900;
    return run(o);
  };
  Result plain = record(tmp / "plain.adtrace", {});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const json before = report_of(tmp / "plain.adtrace");
  ASSERT_FALSE(before.is_discarded());
  uint64_t predicted = 0;
  for (const json &p : before["policy_savings"])
    if (p["name"] == "checkpointing") predicted = p["predicted_peak"].get<uint64_t>();
  ASSERT_GT(predicted, 0u) << "no checkpointing prediction: " << before["policy_savings"];
  std::string fix;
  for (const json &f : before["findings"])
    if (f["kind"] == "policy.checkpointing") fix = f["fix"].get<std::string>();
  const std::string engine = "pytorch: ";
  ASSERT_EQ(fix.rfind(engine, 0), 0u) << "the fix is not in PyTorch's words: " << fix;
  const std::string code = fix.substr(engine.size());
  for (const json &f : before["findings"]) {
    if (f["kind"] == "forward_caches") {
      EXPECT_NE(f["fix"].get<std::string>().find(code), std::string::npos)
          << "the forward-cache finding gives other advice: " << f["fix"];
    }
  }
  if (model != "resnet") {
    EXPECT_NE(code.find("checkpointing_enable()"), std::string::npos)
        << "a transformers model has its own switch: " << code;
  }
  write_file(tmp / "fix.py", code + "\n");

  Result applied = record(tmp / "applied.adtrace", {"--apply", tmp / "fix.py"});
  ASSERT_EQ(applied.exit_code, 0) << "the printed fix does not run:\n"
                                  << code << "\n"
                                  << applied.err;
  const json after = report_of(tmp / "applied.adtrace");
  const uint64_t measured = after["peak"]["bytes"].get<uint64_t>();
  const double error = std::abs(static_cast<double>(measured) - static_cast<double>(predicted)) /
                       static_cast<double>(measured);
  std::printf("[ advice   ] %s: peak %llu, predicted with the fix %llu, measured %llu (%.2f%%)\n",
              model.c_str(),
              static_cast<unsigned long long>(before["peak"]["bytes"].get<uint64_t>()),
              static_cast<unsigned long long>(predicted), static_cast<unsigned long long>(measured),
              100 * error);
  EXPECT_LT(error, 0.05) << "predicted " << predicted << ", measured " << measured << " with:\n"
                         << code;
  EXPECT_LT(measured, before["peak"]["bytes"].get<uint64_t>()) << "the fix saved nothing";
}

// A transformers model's own switch and a torchvision model's wrapped blocks; BERT's (a second
// transformers switch) is in the extended tier.
INSTANTIATE_TEST_SUITE_P(Zoo, CheckpointAdvice, testing::Values("gpt2", "resnet"));
INSTANTIATE_TEST_SUITE_P(ZooMore, CheckpointAdvice, testing::Values("bert"));

}  // namespace
