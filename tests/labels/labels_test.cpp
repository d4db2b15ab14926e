// The report by label: buffers an engine labelled with the module that made them (modules.cpp,
// a hand-written training step) are grouped at the peak per (label, role), in the analysis
// (Report::peak_by_label, OpSummary::labels_at_peak), the text report, the JSON and the
// findings. The bytes of each pair are known exactly from the program.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "../support/temp_dir.h"
#include "adprof/report.h"

namespace fs = std::filesystem;

namespace {

constexpr uint64_t KiB = 1024;

class Labels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new adprof_test::TempDir;
    trace_ = new std::string(*dir_ / "modules.adtrace");
    const std::string command = ADPROF_CLI " run --no-report -o " + *trace_ + " -- " MODULES;
    run_status_ = std::system(command.c_str());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete trace_;
  }
  void SetUp() override {
    ADPROF_SKIP_IF_SANITIZED();
    ASSERT_TRUE(WIFEXITED(run_status_) && WEXITSTATUS(run_status_) == 0);
  }
  // The report command's output (stdout).
  static std::string cli(const std::string &args) {
    const std::string out = *dir_ / "stdout";
    const int status =
        std::system((ADPROF_CLI " " + args + " " + *trace_ + " >'" + out + "'").c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args;
    return adprof_test::read_file(out);
  }

  static inline adprof_test::TempDir *dir_ = nullptr;
  static inline std::string *trace_ = nullptr;
  static inline int run_status_ = -1;
};

const adprof::LabelBytes *find(const std::vector<adprof::LabelBytes> &rows,
                               const std::string &label, const std::string &role) {
  for (const auto &r : rows)
    if (r.label == label && r.role == role) return &r;
  return nullptr;
}

struct Expected {
  const char *label, *role;
  uint64_t bytes, buffers;
};
// Every labelled buffer of modules.cpp, all live at its peak.
const Expected kExpected[] = {
    {"model.fc1.weight", "parameter", 64 * KiB, 1}, {"model.fc1.bias", "parameter", 1 * KiB, 1},
    {"model.fc2.weight", "parameter", 32 * KiB, 1}, {"model.embed", "duplicate", 8 * KiB, 1},
    {"model.fc1", "forward_cache", 256 * KiB, 1},   {"model.act", "forward_cache", 256 * KiB, 1},
    {"model.fc2", "forward_cache", 32 * KiB, 2},    {"model.fc2", "activation", 128 * KiB, 1},
    {"model.fc2", "adjoint", 128 * KiB, 1},         {"model.act", "adjoint", 256 * KiB, 1},
    {"model.fc1.weight", "adjoint", 64 * KiB, 1},   {"model.fc1.bias", "adjoint", 1 * KiB, 1},
    {"model.fc2.weight", "adjoint", 32 * KiB, 1},
};

TEST_F(Labels, PeakBytesByLabelAndRole) {
  const adprof::Report r = adprof::analyze(*trace_);
  EXPECT_EQ(r.peak_phase, "backward");
  size_t labelled = 0;
  for (const adprof::LabelBytes &l : r.peak_by_label) labelled += !l.label.empty();
  EXPECT_EQ(labelled, std::size(kExpected));  // no other label, no pair split in two
  for (const Expected &e : kExpected) {
    const adprof::LabelBytes *got = find(r.peak_by_label, e.label, e.role);
    ASSERT_NE(got, nullptr) << e.label << " " << e.role;
    EXPECT_EQ(got->bytes, e.bytes) << e.label << " " << e.role;
    EXPECT_EQ(got->buffers, e.buffers) << e.label << " " << e.role;
  }
  // The unlabelled rest of a role is its own row: the input and the backward workspace.
  const adprof::LabelBytes *input = find(r.peak_by_label, "", "input");
  ASSERT_NE(input, nullptr);
  EXPECT_GE(input->bytes, 128 * KiB);
  const adprof::LabelBytes *cache = find(r.peak_by_label, "", "forward_cache");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->bytes, 4 * KiB);
  // Each role's rows add up to the role's bytes at the peak, and rows come most bytes first.
  for (int role = 0; role < adprof::kRoleCount; ++role) {
    uint64_t sum = 0;
    for (const adprof::LabelBytes &l : r.peak_by_label)
      if (l.role == adprof::role_name(role)) sum += l.bytes;
    EXPECT_EQ(sum, r.peak_by_role[role]) << adprof::role_name(role);
  }
  for (size_t i = 1; i < r.peak_by_label.size(); ++i)
    EXPECT_GE(r.peak_by_label[i - 1].bytes, r.peak_by_label[i].bytes);
}

TEST_F(Labels, OpsNameTheLabelsOfTheirBuffers) {
  const adprof::Report r = adprof::analyze(*trace_);
  const adprof::OpSummary *linear = nullptr;
  for (const adprof::OpSummary &o : r.ops)
    if (o.name == "linear") linear = &o;
  ASSERT_NE(linear, nullptr);
  ASSERT_EQ(linear->labels_at_peak.size(), 2u);
  EXPECT_EQ(linear->labels_at_peak[0].name, "model.fc1");  // 256 KiB
  EXPECT_EQ(linear->labels_at_peak[0].bytes, 256 * KiB);
  EXPECT_EQ(linear->labels_at_peak[1].name, "model.fc2");  // 128 + 2 x 16 KiB
  EXPECT_EQ(linear->labels_at_peak[1].bytes, 160 * KiB);
}

TEST_F(Labels, TextReportListsEachRoleByLabel) {
  const std::string text = cli("report");
  // Under "forward caches": its three labels, most bytes first, with their buffer counts.
  const size_t caches = text.find("    forward caches");
  ASSERT_NE(caches, std::string::npos) << text;
  const size_t fc1 = text.find("      model.fc1 ", caches);
  const size_t act = text.find("      model.act ", caches);
  const size_t fc2 = text.find("      model.fc2 ", caches);
  const size_t adjoints = text.find("    adjoint buffers", caches);
  ASSERT_NE(fc2, std::string::npos) << text;
  EXPECT_LT(fc1, fc2);
  EXPECT_LT(act, fc2);
  EXPECT_LT(fc2, adjoints);
  EXPECT_NE(text.find("32.0 KiB", fc2), std::string::npos);
  EXPECT_LT(text.find("2 buffers", fc2), adjoints);
  // Adjoints by parameter path and by module; the duplicate by the module that made it.
  EXPECT_LT(text.find("      model.fc1.weight ", adjoints), text.find("duplicated", adjoints));
  EXPECT_NE(text.find("      model.embed "), std::string::npos);
  // The unlabelled rest of a role that has labels is a row of its own; a role with no label
  // at all (input, workspace, foreign) gets no rows under it.
  const size_t unlabelled = text.find("      (unlabelled)");
  EXPECT_LT(fc2, unlabelled);
  EXPECT_LT(unlabelled, adjoints);
  EXPECT_NE(text.find("4.0 KiB", unlabelled), std::string::npos);
  EXPECT_EQ(text.find("(unlabelled)", unlabelled + sizeof "      (unlabelled)"), std::string::npos)
      << text;
  // The ops table says which labels an op's buffers at the peak carry.
  EXPECT_NE(text.find("model.fc1 (+1)"), std::string::npos) << text;
}

TEST_F(Labels, JsonCarriesTheGroupsAndRoundTrips) {
  const nlohmann::json j = nlohmann::json::parse(cli("report --json"));
  bool found = false;
  for (const auto &row : j["peak"]["by_label"])
    if (row["label"] == "model.act" && row["role"] == "forward_cache") {
      EXPECT_EQ(row["bytes"], 256 * KiB);
      EXPECT_EQ(row["buffers"], 1);
      found = true;
    }
  EXPECT_TRUE(found) << j["peak"].dump();
  const adprof::Report back = adprof::report_from_json(j);
  const adprof::Report direct = adprof::analyze(*trace_);
  ASSERT_EQ(back.peak_by_label.size(), direct.peak_by_label.size());
  for (size_t i = 0; i < back.peak_by_label.size(); ++i) {
    EXPECT_EQ(back.peak_by_label[i].label, direct.peak_by_label[i].label);
    EXPECT_EQ(back.peak_by_label[i].role, direct.peak_by_label[i].role);
    EXPECT_EQ(back.peak_by_label[i].bytes, direct.peak_by_label[i].bytes);
    EXPECT_EQ(back.peak_by_label[i].buffers, direct.peak_by_label[i].buffers);
  }
  bool linear = false;
  for (const adprof::OpSummary &o : back.ops)
    if (o.name == "linear") {
      linear = true;
      ASSERT_EQ(o.labels_at_peak.size(), 2u);
      EXPECT_EQ(o.labels_at_peak[1].name, "model.fc2");
    }
  EXPECT_TRUE(linear);
}

TEST_F(Labels, FindingsNameTheModules) {
  const adprof::Report r = adprof::analyze(*trace_);
  bool caches = false, duplicate = false;
  for (const adprof::Finding &f : r.findings) {
    if (f.kind == "forward_caches") {
      caches = true;
      EXPECT_NE(f.evidence.find("most by label: model.act 256.0 KiB, model.fc1 256.0 KiB, "
                                "model.fc2 32.0 KiB"),
                std::string::npos)
          << f.evidence;
    }
    if (f.kind == "duplicate") {
      duplicate = true;
      EXPECT_NE(f.message.find("made by cast#1 in model.embed"), std::string::npos) << f.message;
    }
  }
  EXPECT_TRUE(caches);
  EXPECT_TRUE(duplicate);
}

// The PyTorch sample end to end (samples/torch/fashion_mnist.py under `adprof run --torch`):
// each parameter's bytes at the peak under its own path, exactly numel x 4, and the forward
// caches under the conv blocks' module paths. Skips where /usr/bin/python3 has no torch or the
// Fashion-MNIST package is absent.
TEST(LabelsTorchSample, ModulePathsOfTheSample) {
  ADPROF_SKIP_IF_SANITIZED();
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no torch (Debian: apt install python3-torch)";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST (Debian: apt install dataset-fashion-mnist)";
  const fs::path dir =
      fs::temp_directory_path() / ("adprof-labels-torch-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string trace = (dir / "fm.adtrace").string();
  const std::string command = ADPROF_CLI " run --torch --no-report -o " + trace +
                              " -- /usr/bin/python3 " TORCH_SAMPLE
                              " --steps 3 --test-images 0 -q >/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const adprof::Report r = adprof::analyze(trace);
  fs::remove_all(dir);
  // classifier.1 is Linear(32*7*7, 128), classifier.3 Linear(128, 10), features.0.0 the
  // Conv2d(1, 16, 3): f32 parameters.
  const struct {
    const char *label;
    uint64_t bytes;
  } params[] = {{"fashioncnn.classifier.1.weight", 128 * 1568 * 4},
                {"fashioncnn.classifier.1.bias", 128 * 4},
                {"fashioncnn.classifier.3.weight", 10 * 128 * 4},
                {"fashioncnn.features.0.0.weight", 16 * 1 * 3 * 3 * 4}};
  for (const auto &p : params) {
    const adprof::LabelBytes *got = find(r.peak_by_label, p.label, "parameter");
    ASSERT_NE(got, nullptr) << p.label;
    EXPECT_EQ(got->bytes, p.bytes) << p.label;
    EXPECT_EQ(got->buffers, 1u) << p.label;
  }
  uint64_t caches_in_blocks = 0;
  for (const adprof::LabelBytes &l : r.peak_by_label)
    if (l.role == "forward_cache" && l.label.rfind("fashioncnn.features.", 0) == 0)
      caches_in_blocks += l.bytes;
  EXPECT_GT(caches_in_blocks, 0u);
  EXPECT_EQ(caches_in_blocks, r.peak_by_role[ADPROF_ROLE_FORWARD_CACHE])
      << "every forward cache of this net is made inside a conv block";
}

}  // namespace
