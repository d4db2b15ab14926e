// Issue 32, item 1: what a PyTorch op allocates is declared under the op's workspace role on
// CUDA as on the CPU (commit bc3b527: Adam's foreach scratch was 192 MiB "foreign" at the
// device peak of bench/torch/bench_cuda_step.py's CUDA step on an H200, workspace on the CPU).
// The step of that benchmark (its --child: 4 Linear layers, Adam, 7 steps) under
// `adprof run --torch`; the memory of the device it ran on, at that memory's peak (the
// device's: CUDA storages as device blocks; the CPU's: the host heap), rebuilt block by block
// from the trace: no storage an op made is foreign, the parameters are PyTorch's own, and on CUDA
// the report's foreign share of the device peak is printed and is at most 1%.
#include "cuda_checks.h"

namespace {

using namespace adprof_test;
using namespace adprof_test::cuda_checks;

class CudaStep : public testing::TestWithParam<std::string> {};

// The first number after `key` in `text` (-1 if none).
double number_after(const std::string &text, const std::string &key) {
  const auto at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

TEST_P(CudaStep, WhatAnOpAllocatesIsNeverForeign) {
  const std::string device = GetParam();
  SKIP_UNLESS_DEVICE("torch", device);
  const bool cuda = device == "cuda";
  TempDir tmp;
  const std::string trace = tmp / "step.adtrace";
  // The H200's run (the benchmark's defaults) on CUDA; a step the CPU takes in seconds here.
  Result r = run_python_under_adprof(
      "torch", trace,
      {source_root() + "/bench/torch/bench_cuda_step.py", "--child", "--device", device, "--steps",
       "7", "--width", cuda ? "4096" : "1536", "--batch", cuda ? "1024" : "256"},
      {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << r.err;
  const double parameter = number_after(r.out, "torch bytes: parameter ");
  const double state = number_after(r.out, " optimizer_state ");
  ASSERT_GT(parameter, 0) << r.out;
  const json report = report_json(trace);
  ASSERT_FALSE(report.is_discarded());
  const uint64_t peak =
      cuda ? report["device"]["peak"].get<uint64_t>() : report["peak"]["bytes"].get<uint64_t>();
  const LiveAtPeak live = live_at_peak(trace, cuda, peak);
  ASSERT_TRUE(live.found) << "the trace never reaches the report's peak " << peak;
  EXPECT_EQ(live.bytes, peak) << "the live set rebuilt at the peak is not the report's peak";
  // Foreign bytes an op made: its storages (described: dtype and shape), and what else the
  // op's scope held (on the CPU, Python objects made after the op's role was given back).
  std::map<std::string, uint64_t> by_role, foreign_storages_by_op;
  uint64_t foreign_storages = 0, foreign_other_in_ops = 0;
  for (const LiveBlock &b : live.blocks) {
    by_role[adprof::role_name(b.role)] += b.size;
    if (b.role != ADPROF_ROLE_FOREIGN || b.op == "(no op)") continue;
    if (b.described) {
      foreign_storages_by_op[b.op] += b.size;
      foreign_storages += b.size;
    } else {
      foreign_other_in_ops += b.size;
    }
  }
  std::string ops;
  for (const auto &[op, bytes] : foreign_storages_by_op)
    ops += " " + op + ": " + std::to_string(bytes);
  say("step (%s): peak %.1f MiB; storages an op made, foreign %.1f MiB (other foreign blocks "
      "in op scopes %llu B); parameter %.1f MiB (PyTorch %.1f), optimizer_state %.1f MiB "
      "(PyTorch %.1f), workspace %.1f MiB, foreign in all %.1f MiB",
      device.c_str(), mib(peak), mib(foreign_storages),
      static_cast<unsigned long long>(foreign_other_in_ops), mib(by_role["parameter"]),
      parameter / (1 << 20), mib(by_role["optimizer_state"]), state / (1 << 20),
      mib(by_role["workspace"]), mib(by_role["foreign"]));
  EXPECT_EQ(foreign_storages, 0u) << "live at the peak, a storage an op made, foreign:" << ops;
  if (cuda) {
    EXPECT_EQ(foreign_other_in_ops, 0u) << "every device block is a declared storage";
  }
  EXPECT_EQ(by_role["parameter"], static_cast<uint64_t>(parameter));
  if (cuda) {
    // The report's own figures: the device's peak by role, against PyTorch's.
    const json &d = report["device"];
    const uint64_t foreign = d["by_role"]["foreign"].get<uint64_t>();
    const double allocated = number_after(r.out, "torch peaks: allocated ");
    say("step (cuda): report's device peak %.1f MiB, foreign %.1f MiB (%.2f%% of it), reserved "
        "peak %.1f MiB; PyTorch's max allocated %.1f MiB",
        mib(peak), mib(foreign), 100.0 * static_cast<double>(foreign) / static_cast<double>(peak),
        mib(d["reserved_peak"].get<uint64_t>()), allocated / (1 << 20));
    EXPECT_LE(foreign * 100, peak) << "foreign is over 1% of the device peak";
    EXPECT_LE(static_cast<double>(peak), allocated) << "declared storages above PyTorch's max";
    EXPECT_EQ(d["by_role"]["parameter"].get<uint64_t>(), static_cast<uint64_t>(parameter));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaStep, testing::Values("cpu", "cuda"), device_name);

}  // namespace
