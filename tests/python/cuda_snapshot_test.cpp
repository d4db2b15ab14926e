// Issue 32, item 4: real PyTorch memory snapshots read by adprof. On CUDA,
// scripts/make_torch_snapshot.py makes two (the sample's CNN trained a few steps under
// torch.cuda.memory._record_memory_history(); the second ends with an out-of-memory error
// caught), into $ADPROF_SNAPSHOT_OUT when set (scripts/gpu-check.sh: its $OUT, so that they come
// back as the snapshot tests' data), and writes PyTorch's figures beside them. On the CPU, where
// PyTorch records no history, the same reading is checked on the hand-made snapshots of
// tests/torch_snapshot/data (basic.pickle, oom.pickle).
//
// For each snapshot, `adprof report --json SNAPSHOT` against PyTorch's own tools
// (tests/torch_snapshot/viewer_check.py: the viewer's Active Memory Timeline's peak, the
// `trace` printout's allocations): the same peak, to the byte; its OOMs are the file's `oom`
// entries (the OOM's requested bytes PyTorch's); on CUDA, the peak against
// torch.cuda.max_memory_allocated() of the run (the ring holds every entry of these runs).
#include "cuda_checks.h"

namespace {

using namespace adprof_test;
using namespace adprof_test::cuda_checks;

class CudaSnapshot : public testing::TestWithParam<std::string> {};

// The file's `oom` entries (any device), counted by Python's pickle.
int64_t oom_entries(const std::string &snapshot) {
  SpawnOptions o;
  o.argv = {python(), "-c",
            "import pickle, sys\n"
            "s = pickle.load(open(sys.argv[1], 'rb'))\n"
            "print(sum(e.get('action') == 'oom' for t in s['device_traces'] for e in t))\n",
            snapshot};
  Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? std::stoll(r.out) : -1;
}

TEST_P(CudaSnapshot, ReadAsPyTorchsOwnToolsReadIt) {
  const std::string device = GetParam();
  SKIP_UNLESS_DEVICE("torch", device);
  const bool cuda = device == "cuda";
  TempDir tmp;
  const std::string out = env_or("ADPROF_SNAPSHOT_OUT", tmp.path().c_str());
  struct Snapshot {
    std::string path;
    json figures;  // make_torch_snapshot.py's (CUDA)
    bool oom;
  };
  std::vector<Snapshot> snapshots;
  if (cuda) {
    for (const bool oom : {false, true}) {
      const std::string name = oom ? "snapshot_oom" : "snapshot_train";
      Snapshot s{out + "/" + name + ".pickle", json(), oom};
      SpawnOptions o;
      o.argv = {python(),
                source_root() + "/scripts/make_torch_snapshot.py",
                s.path,
                "--steps",
                oom ? "2" : "3",
                "--figures",
                tmp / (name + ".json")};
      if (oom) o.argv.push_back("--oom");
      o.timeout_s = 300;
      Result r = run(o);
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      say("snapshot: %s", r.out.substr(0, r.out.find('\n')).c_str());
      s.figures = json_file(tmp / (name + ".json"));
      snapshots.push_back(s);
    }
  } else {
    const std::string data = source_root() + "/tests/torch_snapshot/data/";
    snapshots = {{data + "basic.pickle", json(), false}, {data + "oom.pickle", json(), true}};
  }
  for (const Snapshot &s : snapshots) {
    SCOPED_TRACE(s.path);
    const json report = report_json(s.path);
    SpawnOptions o;
    o.argv = {python(), source_root() + "/tests/torch_snapshot/viewer_check.py", s.path};
    o.timeout_s = 300;
    Result v = run(o);
    ASSERT_EQ(v.exit_code, 0) << v.err;
    const json viewer = json::parse(v.out, nullptr, false);
    ASSERT_FALSE(report.is_discarded() || viewer.is_discarded()) << v.out;
    uint64_t viewer_peak = 0;  // of the devices' sum: each device's peak, one device here
    for (const json &d : viewer["devices"]) viewer_peak += d["peak"].get<uint64_t>();
    const uint64_t peak = report["peak"]["bytes"];
    const int64_t ooms = oom_entries(s.path);
    say("snapshot %s: adprof peak %llu B, the viewer's %llu B; reserved peak %llu B; OOMs %llu "
        "(entries %lld), requested %llu B; PyTorch max allocated %lld B, max reserved %lld B",
        fs::path(s.path).filename().c_str(), static_cast<unsigned long long>(peak),
        static_cast<unsigned long long>(viewer_peak),
        static_cast<unsigned long long>(report["device"]["reserved_peak"].get<uint64_t>()),
        static_cast<unsigned long long>(report["device"]["ooms"].get<uint64_t>()),
        static_cast<long long>(ooms),
        static_cast<unsigned long long>(report["device"]["oom"]["requested"].get<uint64_t>()),
        s.figures.is_object() ? s.figures["max_memory_allocated"].get<long long>() : -1LL,
        s.figures.is_object() ? s.figures["max_memory_reserved"].get<long long>() : -1LL);
    EXPECT_GT(peak, 0u);
    EXPECT_EQ(peak, viewer_peak) << "the viewer's timeline peaks elsewhere";
    EXPECT_EQ(report["device"]["ooms"].get<int64_t>(), ooms);
    EXPECT_EQ(ooms > 0, s.oom);
    if (s.figures.is_object()) {
      EXPECT_EQ(s.figures["oom_entries"].get<int64_t>(), ooms);
      if (s.oom) {
        // The entry's size is the request as the caching allocator rounds it (512 B steps).
        EXPECT_NEAR(report["device"]["oom"]["requested"].get<double>(),
                    s.figures["oom_requested"].get<double>(), 512);
      }
      const double allocated = s.figures["max_memory_allocated"].get<double>();
      EXPECT_NEAR(static_cast<double>(peak), allocated, 0.01 * allocated)
          << "the snapshot's peak against PyTorch's max allocated";
      EXPECT_LE(report["device"]["reserved_peak"].get<double>(),
                s.figures["max_memory_reserved"].get<double>() * 1.01);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaSnapshot, testing::Values("cpu", "cuda"), device_name);

}  // namespace
