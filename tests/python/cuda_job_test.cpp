// Issue 32, item 2: a training job with its tensors on the device. Two torchrun ranks share the
// one device (scripts/cuda_job.py: DistributedDataParallel over gloo, which takes CUDA tensors;
// NCCL refuses two ranks on one GPU), rank 1 on batches twice rank 0's; --standalone: the
// rendezvous on a free port of its own choosing (a port of ours could be another job's). Under
// `adprof run --torch`, the job's report (`adprof report --job --json`) holds each rank's
// report; each rank's peak on its device (the device's on CUDA, the host's on the CPU) by role
// is held against what that rank's PyTorch says (rank<r>.json: its parameters' and optimizer
// state's bytes, on CUDA torch.cuda.max_memory_allocated() of its process), and the job's
// outlier is rank 1.
//
// The job's outlier is weighed on the ranks' host peaks (profiler/analysis/job/job.cpp,
// Job::outlier); with the tensors on the GPU, rank 1's extra memory is device memory: the CUDA
// instance says whether the job report names rank 1, and its forward caches, there too (with
// host peaks alone it names whichever rank's host peak is higher, and some host role).
#include "cuda_checks.h"

namespace {

using namespace adprof_test;
using namespace adprof_test::cuda_checks;

class CudaJob : public testing::TestWithParam<std::string> {};

TEST_P(CudaJob, TwoRanksSharingOneDeviceAgainstTheirOwnFigures) {
  const std::string device = GetParam();
  SKIP_UNLESS_DEVICE("torch", device);
  const bool cuda = device == "cuda";
  TempDir dir;
  SpawnOptions o;
  o.argv = {cli_path(),
            "run",
            "--torch",
            "--no-report",
            "-o",
            dir / "job.adtrace",
            "--",
            python(),
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            scripts() + "/cuda_job.py",
            dir.path(),
            "--device",
            device};
  o.env = {
      {"PYTHONDONTWRITEBYTECODE", "1"},
      {"OMP_NUM_THREADS", "1"},
      {"PATH", fs::path(python()).parent_path().string() + ":" + env_or("PATH", "/usr/bin:/bin")}};
  o.timeout_s = 600;
  Result r = run(o);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Result rep = run_cli({"report", "--job", "--json", dir / "job.adtrace"}, 600);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json job = json::parse(rep.out, nullptr, false);
  ASSERT_FALSE(job.is_discarded()) << rep.out;
  ASSERT_EQ(job["ranks"].size(), 2u) << job["processes"].dump();
  uint64_t peaks[2] = {};
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json &rj = job["ranks"][rank];
    const json account = json_file(dir / ("rank" + std::to_string(rank) + ".json"));
    ASSERT_FALSE(account.is_discarded());
    EXPECT_EQ(rj["rank"], rank);
    EXPECT_EQ(rj["pid"], account["pid"]) << "the rank's trace is another process's";
    ASSERT_TRUE(rj.contains("report")) << rj.dump();
    const json &report = rj["report"];
    const uint64_t parameter = account["parameter"], state = account["optimizer_state"];
    if (cuda) {
      const json &d = report["device"];
      const uint64_t peak = d["peak"], allocated = account["max_allocated"];
      peaks[rank] = peak;
      say("job (cuda, %s): rank %d device peak %.1f MiB (PyTorch max allocated %.1f MiB, max "
          "reserved %.1f MiB), reserved peak %.1f MiB; by role: parameter %.2f (PyTorch %.2f), "
          "optimizer_state %.2f (PyTorch %.2f), forward_cache %.2f, adjoint %.2f, workspace "
          "%.2f, foreign %.2f MiB; host peak %.1f MiB",
          account.value("backend", "").c_str(), rank, mib(peak), mib(allocated),
          mib(account["max_reserved"].get<uint64_t>()), mib(d["reserved_peak"].get<uint64_t>()),
          mib(d["by_role"]["parameter"]), mib(parameter), mib(d["by_role"]["optimizer_state"]),
          mib(state), mib(d["by_role"]["forward_cache"]), mib(d["by_role"]["adjoint"]),
          mib(d["by_role"]["workspace"]), mib(d["by_role"]["foreign"]),
          mib(rj["peak"].get<uint64_t>()));
      EXPECT_EQ(d["by_role"]["parameter"].get<uint64_t>(), parameter);
      EXPECT_EQ(d["by_role"]["optimizer_state"].get<uint64_t>(), state);
      EXPECT_GT(d["by_role"]["forward_cache"].get<uint64_t>(), 0u);
      EXPECT_LE(peak, allocated) << "declared storages above the rank's own max allocated";
      EXPECT_GE(peak, parameter + state);
    } else {
      const json &by_role = rj["peak_by_role"];
      peaks[rank] = by_role["forward_cache"];
      say("job (cpu): rank %d peak %.1f MiB; parameter %.2f (PyTorch %.2f), optimizer_state "
          "%.2f (PyTorch %.2f), forward_cache %.2f MiB",
          rank, mib(rj["peak"].get<uint64_t>()), mib(by_role["parameter"]), mib(parameter),
          mib(by_role["optimizer_state"]), mib(state), mib(by_role["forward_cache"]));
      EXPECT_NEAR(by_role["parameter"].get<double>(), static_cast<double>(parameter),
                  0.01 * static_cast<double>(parameter));
      EXPECT_NEAR(by_role["optimizer_state"].get<double>(), static_cast<double>(state),
                  0.01 * static_cast<double>(state));
    }
  }
  // Rank 1's batches are twice rank 0's: so is what its step holds beyond the model.
  EXPECT_GT(peaks[1], peaks[0]) << (cuda ? "device peaks" : "forward caches");
  Result text = run_cli({"report", "--job", dir / "job.adtrace"}, 600);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // The outlier in words: "Highest peak: ..." and the role's line under it.
  const auto highest = text.out.find("Highest peak:");
  std::string words = "(no outlier line)";
  if (highest != std::string::npos) {
    const auto second = text.out.find('\n', text.out.find('\n', highest) + 1);
    words = text.out.substr(highest, second - highest);
    for (char &c : words)
      if (c == '\n') c = ' ';
  }
  say("job (%s): the job report says: %s", device.c_str(), words.c_str());
  // Rank 1 and the role that makes it so: the forward caches (on CUDA, device memory; a rank's
  // host memory differs by chance between the two, and its forward caches are on the GPU).
  EXPECT_EQ(job["outlier"]["rank"], 1)
      << "the job's report does not name rank 1, whose " << (cuda ? "device " : "")
      << "memory is the larger: " << job["outlier"].dump();
  EXPECT_EQ(job["outlier"]["role"], "forward_cache") << job["outlier"].dump();
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaJob, testing::Values("cpu", "cuda"), device_name);

}  // namespace
