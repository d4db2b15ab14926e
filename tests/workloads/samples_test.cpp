// Short runs of the training workloads (samples/cnn, samples/charlm) under `adprof run`: the loss
// falls, and the report's peak holds what a training step holds (parameters, activations or
// forward caches, adjoints, optimizer state); early release, checkpointing, the fused optimizer
// and the i32 label policy change what they should.
//
// The role checks run with --no-reuse-tape: with the tape's arena every buffer of a step stays
// allocated between steps (idle buffers are `workspace`), so live memory is flat and the instant
// of the peak says little; without it the peak is the step's real high-water mark, in backward.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "../support/temp_dir.h"
#include "adprof/report.h"

namespace fs = std::filesystem;

namespace {

using adprof_test::run_shell;
using adprof_test::shell_quote;

// All values of `label <number>` in the program's output, in order.
std::vector<double> numbers_after(const std::string &out, const std::string &label) {
  std::vector<double> v;
  const std::regex re(label + " ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1].str()));
  return v;
}

struct Profiled {
  std::string out;
  adprof::Report rep;
};

class Workloads : public ::testing::Test {
 protected:
  void SetUp() override {
    // OpenBLAS starts its worker threads (each may map a 128 MiB buffer) before adcore limits it
    // to one thread; with one from the start, peaks are the same from run to run.
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
  }

  // Records `program` under adprof and analyses its trace in process.
  Profiled profile(const std::string &name, const std::string &program) {
    const fs::path trace = dir_ / (name + ".adtrace");
    const std::string cmd = std::string(ADPROF_CLI) + " run --no-report -o " +
                            shell_quote(trace.string()) + " -- " + program;
    const adprof_test::ProcessResult run = run_shell(cmd);
    Profiled r;
    r.out = run.out;
    EXPECT_TRUE(run.ok()) << cmd << "\n" << run.out << run.err;
    r.rep = adprof::analyze(trace.string());
    EXPECT_TRUE(r.rep.complete);
    return r;
  }
  static uint64_t role(const adprof::Report &r, adprof_role k) { return r.peak_by_role[k]; }

  adprof_test::TempDir tmp_;  // removed with everything in it when the test ends
  const fs::path dir_{tmp_.path()};
};

const bool have_fashion =
    fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
#define NEED_FASHION()                                                                     \
  if (!have_fashion)                                                                       \
  GTEST_SKIP() << "/usr/share/datasets/fashion-mnist missing: install the Debian package " \
                  "dataset-fashion-mnist (scripts/setup.sh does)"

constexpr const char *kCnnShort =
    " --steps 30 --batch 32 --train-images 2000 --test-images 200 --log-every 10 --no-reuse-tape";

TEST_F(Workloads, CnnLearnsAndItsPeakHoldsATrainingStep) {
  ADPROF_SKIP_IF_SANITIZED();
  NEED_FASHION();
  const Profiled r = profile("cnn", CNN + std::string(kCnnShort));
  const std::vector<double> first = numbers_after(r.out, "first loss"),
                            last = numbers_after(r.out, "final loss"),
                            logged = numbers_after(r.out, "loss");
  ASSERT_EQ(first.size(), 1u) << r.out;
  ASSERT_EQ(last.size(), 1u) << r.out;
  EXPECT_LT(last[0], 0.75 * first[0]) << r.out;
  ASSERT_GE(logged.size(), 3u) << r.out;  // step 10, 20, 30
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  const std::vector<double> acc = numbers_after(r.out, "test accuracy");
  ASSERT_EQ(acc.size(), 1u) << r.out;
  EXPECT_GT(acc[0], 30.0) << r.out;  // chance is 10%

  const adprof::Report &rep = r.rep;
  EXPECT_EQ(rep.steps.size(), 30u);
  EXPECT_GT(role(rep, ADPROF_ROLE_PARAMETER), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_INPUT), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_ACTIVATION) + role(rep, ADPROF_ROLE_FORWARD_CACHE), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_ADJOINT), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_OPTIMIZER_STATE), 0u);
  // Adam: two moments per parameter, all live from the first step on.
  EXPECT_EQ(role(rep, ADPROF_ROLE_OPTIMIZER_STATE), 2 * role(rep, ADPROF_ROLE_PARAMETER));
  EXPECT_EQ(role(rep, ADPROF_ROLE_DUPLICATE), 0u);
  EXPECT_EQ(role(rep, ADPROF_ROLE_ACCUMULATION), 0u);
  // The peak is a training step's (backward), not the evaluation afterwards.
  EXPECT_EQ(rep.peak_phase, "backward");
}

TEST_F(Workloads, CnnEarlyReleaseAndLabelPolicies) {
  ADPROF_SKIP_IF_SANITIZED();
  NEED_FASHION();
  const std::string small =
      " --steps 4 --batch 32 --train-images 200 --test-images 0 -q --no-reuse-tape";
  const adprof::Report on = profile("on", CNN + small).rep;
  const adprof::Report late = profile("late", CNN + small + " --no-early-release").rep;
  const adprof::Report widen = profile("widen", CNN + small + " --widen-indices").rep;
  // Without early release the conv blocks' saved inputs stay cached through the backward pass:
  // at least one more (32, 8, 26, 26) f32 buffer of forward cache at the peak.
  const uint64_t conv1 = 32ull * 8 * 26 * 26 * 4;
  EXPECT_GE(role(late, ADPROF_ROLE_FORWARD_CACHE), role(on, ADPROF_ROLE_FORWARD_CACHE) + conv1);
  EXPECT_GT(late.peak, on.peak);
  // Widened labels: cross_entropy's gather casts the (32) i32 labels to i64 every step.
  auto cast_bytes = [](const adprof::Report &r) {
    for (const adprof::OpSummary &o : r.ops)
      if (o.name == "cast") return o.bytes;
    return uint64_t{0};
  };
  EXPECT_EQ(cast_bytes(on), 0u);
  EXPECT_GE(cast_bytes(widen), 4u * 32 * 8);
}

TEST_F(Workloads, CharlmLossFallsAndItsPeakHoldsATrainingStep) {
  ADPROF_SKIP_IF_SANITIZED();
  const Profiled r =
      profile("charlm", CHARLM + std::string(" --steps 40 --seq 16 --width 32 --layers 1"
                                             " --heads 2 --batch 8 --log-every 10 --generate 20"
                                             " --lr 1e-2 --no-reuse-tape"));
  const std::vector<double> logged = numbers_after(r.out, "loss");
  // "step N loss" lines (4), then "first loss", "final loss".
  const std::vector<double> first = numbers_after(r.out, "first loss"),
                            valid = numbers_after(r.out, "final loss");
  ASSERT_EQ(first.size(), 1u) << r.out;
  ASSERT_EQ(valid.size(), 1u) << r.out;
  ASSERT_GE(logged.size(), 4u) << r.out;
  EXPECT_LT(logged[3], logged[0]) << r.out;      // mean of steps 31-40 < mean of steps 1-10
  EXPECT_LT(valid[0], first[0] - 0.5) << r.out;  // held-out loss after training
  EXPECT_NE(r.out.find("sample: The "), std::string::npos) << r.out;

  const adprof::Report &rep = r.rep;
  EXPECT_EQ(rep.steps.size(), 40u);
  EXPECT_GT(role(rep, ADPROF_ROLE_PARAMETER), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_ACTIVATION) + role(rep, ADPROF_ROLE_FORWARD_CACHE), 0u);
  EXPECT_GT(role(rep, ADPROF_ROLE_ADJOINT), 0u);
  EXPECT_EQ(role(rep, ADPROF_ROLE_OPTIMIZER_STATE), 2 * role(rep, ADPROF_ROLE_PARAMETER));
  EXPECT_EQ(role(rep, ADPROF_ROLE_ACCUMULATION), 0u);
}

TEST_F(Workloads, CharlmCheckpointAndFusedOptimizer) {
  ADPROF_SKIP_IF_SANITIZED();
  const std::string small =
      CHARLM + std::string(
                   " --steps 3 --seq 32 --width 32 --layers 2 --heads 2 --batch 8"
                   " --generate 0 -q --no-reuse-tape");
  const adprof::Report on = profile("on", small).rep;
  const adprof::Report nockpt = profile("nockpt", small + " --no-checkpoint").rep;
  const adprof::Report nofuse = profile("nofuse", small + " --no-fused-optimizer").rep;
  // Without checkpointing, both blocks' attention maps (8, 32, 32) f32 per head and their MLP
  // activations are cached: at least 2 layers x 2 heads x 32 KiB more forward cache.
  EXPECT_GE(role(nockpt, ADPROF_ROLE_FORWARD_CACHE),
            role(on, ADPROF_ROLE_FORWARD_CACHE) + 2 * 2 * 8 * 32 * 32 * 4);
  EXPECT_GT(nockpt.peak, on.peak);
  // Unfused, the parameters' gradients wait for the step after backward: more adjoint at the peak.
  EXPECT_GT(role(nofuse, ADPROF_ROLE_ADJOINT), role(on, ADPROF_ROLE_ADJOINT));
}

// The element count of a 1-D .npy file's shape, "(N,)"; 0 when it is not one.
uint64_t npy_length(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  std::smatch m;
  if (head.rfind("\x93NUMPY", 0) != 0 ||
      !std::regex_search(head, m, std::regex("'shape': \\(([0-9]+),\\)")))
    return 0;
  return std::stoull(m[1].str());
}

// --dump-grad on the training samples writes the gradient at the initial point with respect
// to every parameter (charlm says how many it has), and training is the same with it.
TEST_F(Workloads, TrainingSamplesDumpTheirGradient) {
  ADPROF_SKIP_IF_SANITIZED();
  NEED_FASHION();
  const std::string charlm = std::string(CHARLM) +
                             " --steps 2 --seq 16 --width 32 --layers 1 --heads 2 --batch 8"
                             " --generate 0";
  const std::string cnn =
      std::string(CNN) + " --steps 2 --batch 16 --train-images 100 --test-images 0";
  for (const std::string &program : {charlm, cnn}) {
    const fs::path npy = dir_ / "grad.npy";
    fs::remove(npy);
    const adprof_test::ProcessResult plain = run_shell(program);
    const adprof_test::ProcessResult dumped =
        run_shell(program + " --dump-grad " + shell_quote(npy.string()));
    ASSERT_TRUE(plain.ok() && dumped.ok()) << program << "\n" << dumped.out << dumped.err;
    EXPECT_NE(dumped.out.find("gradient written to"), std::string::npos) << dumped.out;
    const uint64_t n = npy_length(npy);
    EXPECT_GT(n, 0u) << program << ": no 1-D .npy at " << npy;
    // charlm prints its parameter count: the gradient has one value per parameter.
    const std::vector<double> params = numbers_after(dumped.out, "parameters:");
    EXPECT_EQ(params.empty(), program == cnn) << dumped.out;
    if (!params.empty()) {
      EXPECT_EQ(n, static_cast<uint64_t>(params[0])) << dumped.out;
    }
    EXPECT_EQ(numbers_after(plain.out, "final loss"), numbers_after(dumped.out, "final loss"))
        << plain.out << dumped.out;
  }
}

TEST_F(Workloads, CharlmMissingTextIsOneLine) {
  const adprof_test::ProcessResult r =
      run_shell(std::string(CHARLM) + " --text " + shell_quote((dir_ / "none.txt").string()));
  EXPECT_EQ(r.code, 1);
  const std::string &e = r.err;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  EXPECT_NE(e.find("none.txt"), std::string::npos) << e;
}

}  // namespace

namespace {

// The CUDA device is a plugin loaded on demand: a CPU run of a sample loads no CUDA library
// (the dynamic loader's own log of every library it loads, dlopen included, and ldd), and
// `--device cuda` says in one line why it cannot run (no GPU, or no plugin).
const char *const kCudaLibs[] = {"libcuda.so", "libcudart", "libcublas"};

TEST(SamplesDevices, CpuRunLoadsNoCudaLibrary) {
  for (const char *sample : {EAM, CNN}) {
    SCOPED_TRACE(sample);
    const adprof_test::ProcessResult ldd = run_shell("ldd " + shell_quote(sample));
    ASSERT_EQ(ldd.code, 0) << ldd.err;
    for (const char *lib : kCudaLibs) EXPECT_EQ(ldd.out.find(lib), std::string::npos) << ldd.out;
  }
  // LD_DEBUG=libs logs each library the loader opens, at start-up and through dlopen.
  const adprof_test::ProcessResult cpu =
      run_shell("LD_DEBUG=libs " + shell_quote(EAM) + " --calls 1 --no-hand -q");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_NE(cpu.err.find("calling init: "), std::string::npos) << "no loader log";
  for (const char *lib : kCudaLibs) EXPECT_EQ(cpu.err.find(lib), std::string::npos) << lib;
  EXPECT_NE(cpu.out.find("grad norm = "), std::string::npos) << cpu.out;
#ifdef SAMPLES_TEST_HAVE_CUDA_PLUGIN
  // The same log sees the plugin and the CUDA runtime when the CUDA device is asked for.
  const adprof_test::ProcessResult gpu =
      run_shell("LD_DEBUG=libs " + shell_quote(EAM) + " --calls 1 --no-hand -q --device cuda");
  EXPECT_NE(gpu.err.find("libadcore_cuda.so"), std::string::npos);
  EXPECT_NE(gpu.err.find("libcudart"), std::string::npos);
#endif
}

TEST(SamplesDevices, CudaWithoutGpuOrPluginIsOneLine) {
  // No plugin where the program is told to look.
  const adprof_test::ProcessResult none = run_shell(
      "ADCORE_PLUGIN_DIR=/nonexistent/adcore-plugins " + shell_quote(EAM) + " --device cuda");
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(std::count(none.err.begin(), none.err.end(), '\n'), 1) << none.err;
  EXPECT_EQ(
      none.err.rfind("eam: device 'cuda': the cuda plugin libadcore_cuda.so is not installed", 0),
      0u)
      << none.err;
  EXPECT_NE(none.err.find("/nonexistent/adcore-plugins/libadcore_cuda.so"), std::string::npos)
      << none.err;
  // A file that is not a loadable library: the loader's reason.
  const fs::path bogus_dir =
      fs::temp_directory_path() / ("adcore-plugins-" + std::to_string(getpid()));
  fs::create_directories(bogus_dir);
  { std::ofstream(bogus_dir / "libadcore_cuda.so") << "not an ELF file"; }
  const adprof_test::ProcessResult bogus =
      run_shell("ADCORE_PLUGIN_DIR=" + shell_quote(bogus_dir.string()) + " " + shell_quote(EAM) +
                " --device cuda");
  fs::remove_all(bogus_dir);
  EXPECT_EQ(bogus.code, 2);
  EXPECT_EQ(std::count(bogus.err.begin(), bogus.err.end(), '\n'), 1) << bogus.err;
  EXPECT_EQ(bogus.err.rfind("eam: device 'cuda': cannot load the cuda plugin " +
                                (bogus_dir / "libadcore_cuda.so").string() + ": ",
                            0),
            0u)
      << bogus.err;
  // An unknown device.
  const adprof_test::ProcessResult bad = run_shell(shell_quote(EAM) + " --device 'no such'");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "eam: unknown device 'no such'\n");
#ifdef SAMPLES_TEST_HAVE_CUDA_PLUGIN
  // The plugin is there: without a GPU the error says so (with one, eam stops at its host-side
  // hand-written check, docs/CUDA.md; --no-hand runs it).
  const adprof_test::ProcessResult gpu =
      run_shell(shell_quote(EAM) + " --calls 2 --no-hand -q --device cuda");
  if (gpu.code != 0) {
    EXPECT_EQ(gpu.code, 2);
    EXPECT_EQ(gpu.err.rfind("eam: device 'cuda': no CUDA device: ", 0), 0u) << gpu.err;
    EXPECT_EQ(std::count(gpu.err.begin(), gpu.err.end(), '\n'), 1) << gpu.err;
  }
#endif
}

}  // namespace
