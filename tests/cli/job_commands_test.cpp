// `adprof check` and `adprof diff` over a job recorded on several machines (each machine's
// `adprof run` writing its own folder): the folders merged into one job by run and rank, as
// `adprof report` merges them; a gate holds on every rank and a failure names the rank; two
// multi-node jobs compared rank by rank; a rank's peak in a step outside a step window. The job
// is job_workload.cpp's (no PyTorch): rank R holds (R + 1) * SCALE MiB of forward caches at its
// peak.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

// Two nodes of two ranks each under their own `adprof run`: DIR/node0 (ranks 0, 1) and
// DIR/node1 (ranks 2, 3).
void record_two_nodes(const std::string &dir, int scale) {
  fs::create_directories(dir);
  for (int node = 0; node < 2; ++node) {
    const std::string folder = dir + "/node" + std::to_string(node);
    fs::create_directory(folder);
    Result r = run_cli({"run", "--no-report", "-o", folder + "/job.adtrace", "--", JOB_WORKLOAD,
                        "launch", std::to_string(node), "2", "2", std::to_string(scale)});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
}

class JobCommands : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
#ifdef ADPROF_SANITIZED_BUILD
    return;  // each test skips: the workload runs under the interposer
#endif
    record_two_nodes(*dir_ / "a", 1);
    record_two_nodes(*dir_ / "b", 2);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string a(const std::string &node) { return *dir_ / ("a/" + node); }
  static std::string b(const std::string &node) { return *dir_ / ("b/" + node); }
  static TempDir *dir_;
};
TempDir *JobCommands::dir_ = nullptr;

// Each rank's forward caches at its peak, from the merged report.
TEST_F(JobCommands, TheTwoFoldersAreOneJobOfFourRanks) {
  ADPROF_SKIP_IF_SANITIZED();
  Result r = run_cli({"report", "--json", a("node0"), a("node1")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(job.is_discarded()) << r.out;
  ASSERT_EQ(job["ranks"].size(), 4u) << job["processes"].dump();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(job["ranks"][rank]["rank"], rank);
    EXPECT_EQ(job["ranks"][rank]["node"], rank / 2);
    EXPECT_EQ(job["ranks"][rank]["peak_by_role"]["forward_cache"], (rank + 1) * kMiB);
  }
  EXPECT_EQ(job["outlier"]["rank"], 3);
  // The parent folder of the machines' folders is the same job.
  Result parent = run_cli({"report", "--json", *dir_ / "a"});
  ASSERT_EQ(parent.exit_code, 0) << parent.err;
  EXPECT_EQ(json::parse(parent.out, nullptr, false)["ranks"].size(), 4u);
}

// check over the two machines' folders: every rank against every budget, a failure naming its
// rank; the parent folder alike; JSON with every rank.
TEST_F(JobCommands, CheckHoldsOnEveryRankOfEveryMachine) {
  ADPROF_SKIP_IF_SANITIZED();
  Result failed = run_cli({"check", a("node0"), a("node1"), "--max-role", "forward_cache=2.5MiB"});
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  EXPECT_NE(failed.out.find("ok   rank 0:"), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("ok   rank 1:"), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("FAIL rank 2:"), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("FAIL rank 3:"), std::string::npos) << failed.out;
  Result parent = run_cli({"check", *dir_ / "a", "--max-role", "forward_cache=2.5MiB"});
  EXPECT_EQ(parent.exit_code, 1);
  EXPECT_EQ(parent.out, failed.out);
  Result held =
      run_cli({"check", a("node0"), a("node1"), "--max-role", "forward_cache=4MiB", "--json"});
  EXPECT_EQ(held.exit_code, 0) << held.out << held.err;
  const json j = json::parse(held.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << held.out;
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(j["ranks"][rank]["rank"], rank);
    EXPECT_EQ(j["ranks"][rank]["failed"], false);
  }
  // One machine's folder alone: its ranks only (2 and 3 fail).
  Result half = run_cli({"check", a("node1"), "--max-role", "forward_cache=2.5MiB"});
  EXPECT_EQ(half.exit_code, 1);
  EXPECT_EQ(half.out.find("rank 0:"), std::string::npos) << half.out;
  // The same run named twice is refused, as report refuses it.
  Result twice = run_cli({"check", a("node0"), a("node0"), "--max-peak", "1GiB"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("a run named twice"), std::string::npos) << twice.err;
}

// diff of two multi-node jobs rank by rank: B's forward caches are twice A's, so rank R's peak
// grew by (R + 1) MiB; a gate at +2.5 MiB fails on ranks 2 and 3 and names them.
TEST_F(JobCommands, DiffOfTwoMultiNodeJobsRankByRank) {
  ADPROF_SKIP_IF_SANITIZED();
  Result named = run_cli({"diff", "--base", a("node0"), "--base", a("node1"), "--new", b("node0"),
                          "--new", b("node1"), "--fail-if", "role.forward_cache > +2.5MiB"});
  EXPECT_EQ(named.exit_code, 1) << named.out << named.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(named.out.find("== rank " + std::to_string(rank)), std::string::npos) << named.out;
  Result j = run_cli(
      {"diff", *dir_ / "a", *dir_ / "b", "--fail-if", "role.forward_cache > +2.5MiB", "--json"});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  const json diff = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(diff.is_discarded()) << j.out;
  ASSERT_EQ(diff["ranks"].size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(diff["ranks"][rank]["rank"], rank);
    EXPECT_EQ(diff["ranks"][rank]["failed"], rank >= 2) << diff["ranks"][rank].dump();
  }
  // A job against one of its machines' folders: the ranks differ, an input error naming them.
  Result shape = run_cli({"diff", "--base", a("node0"), "--base", a("node1"), "--new", b("node1")});
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_NE(shape.err.find("different ranks (0 1 2 3; 2 3)"), std::string::npos) << shape.err;
}

// A rank whose highest step lies outside the step window (`adprof run --steps 1:2`): rank 0
// holds 8 MiB more forward caches in step 3 of 5 (JOB_WORKLOAD_SPIKE), which the window folds
// into its summary. The job's report takes each rank's peak over all its trace holds: rank 0's is
// step 3's, as in the whole recording, said to be a summarized step, and rank 0 is the outlier,
// as the whole recording says (before, its row showed the window's peak, 8 MiB less, and named
// rank 1). Text and JSON alike, and `adprof check`'s budgets.
TEST(JobWindow, ARanksPeakInAFoldedStepIsItsPeak) {
  ADPROF_SKIP_IF_SANITIZED();
  TempDir tmp;
  json jobs[2];
  std::string text;
  for (int windowed = 0; windowed < 2; ++windowed) {
    const std::string dir = tmp / (windowed ? "windowed" : "whole");
    fs::create_directory(dir);
    SpawnOptions o;
    o.argv = {cli_path(), "run", "--no-report", "-o", dir + "/job.adtrace"};
    if (windowed) o.argv.insert(o.argv.end(), {"--steps", "1:2"});
    o.argv.insert(o.argv.end(), {"--", JOB_WORKLOAD, "launch", "0", "2", "1", "1"});
    o.env = {{"JOB_WORKLOAD_SPIKE", "0:3:8"}};
    const Result r = run(o);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const Result report = run_cli({"report", "--json", dir});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    jobs[windowed] = json::parse(report.out, nullptr, false);
    ASSERT_TRUE(jobs[windowed].is_object()) << report.out;
    ASSERT_EQ(jobs[windowed]["ranks"].size(), 2u) << report.out;
    if (windowed) {
      const Result t = run_cli({"report", dir});
      ASSERT_EQ(t.exit_code, 0) << t.err;
      text = t.out;
    }
  }
  const json &whole = jobs[0], &windowed = jobs[1];
  ASSERT_EQ(windowed["ranks"][0]["report"]["step_window"], true);
  // Rank 0: 1 MiB of parameters and 1 + 8 MiB of forward caches in step 3; the window's step 1
  // holds 8 MiB less.
  const json &rank0 = windowed["ranks"][0];
  EXPECT_EQ(rank0["peak_step"], 3);
  EXPECT_TRUE(rank0.value("peak_summarized", false));
  EXPECT_EQ(rank0["peak_by_role"]["forward_cache"], 9 * kMiB);
  EXPECT_EQ(rank0["peak_by_role"]["parameter"], kMiB);
  EXPECT_EQ(whole["ranks"][0]["peak_step"], 3);
  EXPECT_FALSE(whole["ranks"][0].value("peak_summarized", true));
  EXPECT_EQ(rank0["peak"], whole["ranks"][0]["peak"]) << "the folded step's peak is the rank's";
  EXPECT_NEAR(rank0["peak"].get<double>() - rank0["report"]["peak"]["bytes"].get<double>(),
              8.0 * kMiB, 64 << 10)
      << "the window's own peak is a step without the spike";
  // Rank 1's steps all hold as much: its peak is recorded in full (the start-up's buffer holds
  // step 0, the first to reach it).
  EXPECT_FALSE(windowed["ranks"][1].value("peak_summarized", true));
  EXPECT_EQ(windowed["ranks"][1]["peak_by_role"]["forward_cache"], 2 * kMiB);
  EXPECT_EQ(whole["outlier"]["rank"], 0);
  EXPECT_EQ(windowed["outlier"]["rank"], 0);
  EXPECT_EQ(windowed["outlier"]["role"], "forward_cache");
  EXPECT_EQ(windowed["outlier"]["role_bytes"], 9 * kMiB);
  EXPECT_EQ(windowed["outlier"]["peak"], rank0["peak"]);
  // The text says so: the outlier, its step, summarized.
  EXPECT_NE(text.find("Highest peak: rank 0, 10.0 MiB in step 3, summarized ("), std::string::npos)
      << text;
  EXPECT_NE(text.find("*: the peak is in a step outside the step window"), std::string::npos)
      << text;
  // A budget holds on every step, summarized ones too: rank 0's 10 MiB breaks a 5 MiB budget
  // under the window as recorded whole (before, `adprof check` passed the window's 2 MiB).
  // The line says where: under the window, in step 3, summarized (a CI user looks for it in
  // that step's summary, not in the window; before, the bytes alone); recorded whole, the peak
  // is in the trace as any.
  for (const std::string run : {"whole", "windowed"}) {
    SCOPED_TRACE(run);
    const Result check = run_cli({"check", tmp / run, "--max-peak", "5MiB"});
    EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
    EXPECT_NE(check.out.find(run == "windowed"
                                 ? "FAIL rank 0: peak: 10.0 MiB in step 3, summarized, LIMIT BROKEN"
                                 : "FAIL rank 0: peak: 10.0 MiB, LIMIT BROKEN"),
              std::string::npos)
        << check.out;
    EXPECT_NE(check.out.find("ok   rank 1: peak: 3.0 MiB, limit held"), std::string::npos)
        << check.out;
    const Result j = run_cli({"check", tmp / run, "--max-peak", "5MiB", "--json"});
    EXPECT_EQ(j.exit_code, 1) << j.err;
    const json gates = json::parse(j.out, nullptr, false);
    ASSERT_TRUE(gates.is_object()) << j.out;
    const json &rank0_gate = gates["ranks"][0]["gates"][0];
    EXPECT_EQ(rank0_gate["at"]["step"], 3) << rank0_gate.dump();
    EXPECT_EQ(rank0_gate["at"]["summarized"], run == "windowed") << rank0_gate.dump();
    EXPECT_EQ(gates["ranks"][1]["gates"][0]["at"]["summarized"], false);
  }
  const Result one =
      run_cli({"check", rank0["trace"].get<std::string>(), "--max-role", "forward_cache=4MiB"});
  EXPECT_EQ(one.exit_code, 1) << "one trace's check, its role at its peak: " << one.out << one.err;
  EXPECT_NE(one.out.find("FAIL role.forward_cache: 9.0 MiB in step 3, summarized, LIMIT BROKEN"),
            std::string::npos)
      << one.out;
  // diff of the whole recording against the windowed one: equal peaks, the new one's read in
  // step 3's summary, said in the gate's line, starred in the table with the step under it, and
  // in the JSON.
  const Result diff =
      run_cli({"diff", tmp / "whole", tmp / "windowed", "--fail-if", "peak > +1MiB"});
  EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;
  EXPECT_NE(
      diff.out.find("peak: 10.0 MiB -> 10.0 MiB in step 3, summarized (+0 B (+0.0%)), limit held"),
      std::string::npos)
      << diff.out;
  EXPECT_NE(diff.out.find("*: read in a step outside the step window, from its summary (new: "
                          "step 3)"),
            std::string::npos)
      << diff.out;
  const Result diff_json =
      run_cli({"diff", tmp / "whole", tmp / "windowed", "--fail-if", "peak > +1MiB", "--json"});
  const json d = json::parse(diff_json.out, nullptr, false);
  ASSERT_TRUE(d.is_object()) << diff_json.out << diff_json.err;
  const json &gate = d["ranks"][0]["gates"][0];
  EXPECT_EQ(gate["base_at"]["summarized"], false) << gate.dump();
  EXPECT_EQ(gate["at"]["summarized"], true) << gate.dump();
  EXPECT_EQ(gate["at"]["step"], 3) << gate.dump();
  EXPECT_EQ(d["ranks"][0]["metrics"][0]["metric"], "peak");
  EXPECT_EQ(d["ranks"][0]["metrics"][0]["new_at"]["step"], 3);
  EXPECT_EQ(d["ranks"][0]["metrics"][0]["new_at"]["summarized"], true);
}

// A job whose ranks hold equal host memory and unequal device memory (JOB_WORKLOAD_DEVICE: device
// blocks declared through the context API, no device needed): rank R holds (R + 3) MiB on the
// device at its peak, of which (R + 2) MiB forward caches. The job report shows each rank's
// device peak and names rank 1 the device's outlier, for its forward caches (before, the job's
// report weighed host peaks alone and showed no device figure); one rank's report breaks its
// device peak down by label, as it does its host peak.
class JobDevice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
#ifdef ADPROF_SANITIZED_BUILD
    return;  // each test skips: the workload runs under the interposer
#endif
    SpawnOptions o;
    o.argv = {cli_path(), "run",        "--no-report", "-o", *dir_ / "job.adtrace",
              "--",       JOB_WORKLOAD, "launch",      "0",  "2",
              "1",        "0"};
    o.env = {{"JOB_WORKLOAD_DEVICE", "1"}};
    const Result r = run(o);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    // The same job with twice the device memory: rank R's device peak (R + 3) * 2 MiB.
    doubled_ = new TempDir;
    o.argv[4] = *doubled_ / "job.adtrace";
    o.env = {{"JOB_WORKLOAD_DEVICE", "2"}};
    const Result d = run(o);
    ASSERT_EQ(d.exit_code, 0) << d.out << d.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete doubled_;
  }
  static TempDir *dir_;
  static TempDir *doubled_;
};
TempDir *JobDevice::dir_ = nullptr;
TempDir *JobDevice::doubled_ = nullptr;

TEST_F(JobDevice, TheRankWithMoreDeviceMemoryIsTheOutlier) {
  ADPROF_SKIP_IF_SANITIZED();
  const Result r = run_cli({"report", "--json", dir_->path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << r.out;
  ASSERT_EQ(job["ranks"].size(), 2u) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const json &row = job["ranks"][rank];
    EXPECT_EQ(row["device_peak"], (rank + 3) * kMiB);
    EXPECT_EQ(row["device_peak_by_role"]["forward_cache"], (rank + 2) * kMiB);
    EXPECT_EQ(row["device_peak_by_role"]["parameter"], kMiB);
    EXPECT_EQ(row["device_reserved_peak"], 4 * (rank + 3) * kMiB);
    EXPECT_EQ(row["device_peak"], row["report"]["device"]["peak"]);
    EXPECT_EQ(row["peak_by_role"]["parameter"], kMiB) << "host memory alike";
    EXPECT_EQ(row["peak_by_role"]["forward_cache"], 0u) << "host memory alike";
  }
  for (const char *key : {"outlier", "device_outlier"}) {
    SCOPED_TRACE(key);
    const json &out = job[key];
    ASSERT_TRUE(out.is_object()) << job.dump();
    EXPECT_EQ(out["memory"], "device");
    EXPECT_EQ(out["rank"], 1);
    EXPECT_EQ(out["lowest_rank"], 0);
    EXPECT_EQ(out["peak"], 4 * kMiB);
    EXPECT_EQ(out["lowest_peak"], 3 * kMiB);
    EXPECT_EQ(out["role"], "forward_cache");
    EXPECT_EQ(out["role_bytes"], 3 * kMiB);
    EXPECT_EQ(out["lowest_role_bytes"], 2 * kMiB);
  }
  EXPECT_EQ(job["host_outlier"]["memory"], "host");
  const Result text = run_cli({"report", dir_->path()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Each rank at its own device peak (device memory; bytes by role):"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Highest device peak: rank 1, 4.0 MiB (1.3x rank 0's, the lowest)."),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  rank 1: forward caches on the device 1.5x rank 0's (3.0 MiB against "
                          "2.0 MiB)"),
            std::string::npos)
      << text.out;
}

// One rank's report: its device peak by (label, role), in JSON and in text, summing to the
// device peak (before, the report gave the device peak by role only).
TEST_F(JobDevice, ARanksDevicePeakByLabel) {
  ADPROF_SKIP_IF_SANITIZED();
  const Result r = run_cli({"report", "--json", "--job", dir_->path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(job.is_object() && job["ranks"].size() == 2u) << r.out;
  const std::string trace = job["ranks"][1]["trace"];
  const Result one = run_cli({"report", "--json", trace});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const json report = json::parse(one.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << one.out;
  const json &by_label = report["device"]["by_label"];
  ASSERT_TRUE(by_label.is_array()) << report["device"].dump();
  std::map<std::string, json> rows;
  uint64_t sum = 0;
  for (const json &row : by_label) {
    rows[row["label"].get<std::string>() + "/" + row["role"].get<std::string>()] = row;
    sum += row["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(sum, report["device"]["peak"]) << by_label.dump();
  ASSERT_EQ(rows.size(), 3u) << by_label.dump();
  EXPECT_EQ(rows["decoder/forward_cache"]["bytes"], 2 * kMiB) << by_label.dump();
  EXPECT_EQ(rows["encoder/forward_cache"]["bytes"], kMiB) << by_label.dump();
  EXPECT_EQ(rows["model.weight/parameter"]["bytes"], kMiB) << by_label.dump();
  EXPECT_EQ(rows["decoder/forward_cache"]["buffers"], 1u);
  EXPECT_EQ(by_label[0]["label"], "decoder") << "most bytes first";
  // The encoder's block was retagged an adjoint buffer after the peak: at the peak it was a
  // forward cache. The rows by role are the device peak's by role.
  EXPECT_FALSE(rows.contains("encoder/adjoint")) << by_label.dump();
  std::map<std::string, uint64_t> by_role;
  for (const json &row : by_label)
    by_role[row["role"].get<std::string>()] += row["bytes"].get<uint64_t>();
  for (const auto &[role, bytes] : report["device"]["by_role"].items())
    EXPECT_EQ(by_role[role], bytes.get<uint64_t>()) << role;
  const Result text = run_cli({"report", trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const auto at = text.out.find("    by label at the device peak:\n");
  ASSERT_NE(at, std::string::npos) << text.out;
  EXPECT_NE(
      text.out.find("decoder                  forward_cache        2.0 MiB   50.0%  1 buffer", at),
      std::string::npos)
      << text.out;
}

// Device budgets on every rank, as the host's: the device peak (rank 0 holds 3 MiB, rank 1
// 4 MiB) and a role at it (--max-device-role, as --max-role: forward caches 2 and 3 MiB), each
// line naming its rank and where the peak was (the JSON's "at": the step). Before, there was
// no --max-device-role (exit 2).
TEST_F(JobDevice, DeviceBudgetsHoldOnEveryRank) {
  ADPROF_SKIP_IF_SANITIZED();
  const Result peak = run_cli({"check", dir_->path(), "--max-device-peak", "3.5MiB"});
  EXPECT_EQ(peak.exit_code, 1) << peak.out << peak.err;
  EXPECT_EQ(peak.out,
            "ok   rank 0: device.peak: 3.0 MiB, limit held (fails when over 3.5 MiB)\n"
            "FAIL rank 1: device.peak: 4.0 MiB, LIMIT BROKEN (fails when over 3.5 MiB)\n");
  const Result role = run_cli({"check", dir_->path(), "--max-device-role", "forward_cache=2.5MiB",
                               "--max-role", "forward_cache=0", "--json"});
  EXPECT_EQ(role.exit_code, 1) << role.out << role.err;
  const json j = json::parse(role.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << role.out;
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const json &gates = j["ranks"][rank]["gates"];
    ASSERT_EQ(gates.size(), 2u) << gates.dump();
    // --max-role first (the host has no forward caches here), then --max-device-role.
    EXPECT_EQ(gates[0]["metric"], "role.forward_cache");
    EXPECT_EQ(gates[0]["failed"], false);
    EXPECT_EQ(gates[1]["metric"], "device.role.forward_cache");
    EXPECT_EQ(gates[1]["value"], (rank + 2) * kMiB);
    EXPECT_EQ(gates[1]["failed"], rank == 1);
    EXPECT_EQ(gates[1]["at"]["step"], 0) << "each step peaks alike: the first reaches it";
    EXPECT_EQ(gates[1]["at"]["summarized"], false);
    EXPECT_EQ(j["ranks"][rank]["failed"], rank == 1);
  }
  const Result bad = run_cli({"check", dir_->path(), "--max-device-role", "nosuchrole=1MiB"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown role 'nosuchrole'"), std::string::npos) << bad.err;
  const Result form = run_cli({"check", dir_->path(), "--max-device-role", "adjoint"});
  EXPECT_EQ(form.exit_code, 2);
  EXPECT_NE(form.err.find("--max-device-role takes ROLE=SIZE"), std::string::npos) << form.err;
}

// diff of two jobs on the device, rank by rank: the doubled job's device peaks grew by 3 and
// 4 MiB, so a gate at +3.5 MiB fails on rank 1 alone, and its line says so; in the table the
// device peak's row (and its role's).
TEST_F(JobDevice, DiffGatesTheDevicePeakRankByRank) {
  ADPROF_SKIP_IF_SANITIZED();
  const Result text =
      run_cli({"diff", dir_->path(), doubled_->path(), "--fail-if", "device.peak > +3.5MiB",
               "--fail-if", "device.role.forward_cache > +50%"});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(
      text.out.find("  ok   device.peak: 3.0 MiB -> 6.0 MiB (+3.0 MiB (+100.0%)), limit held"),
      std::string::npos)
      << text.out;
  EXPECT_NE(
      text.out.find("  FAIL device.peak: 4.0 MiB -> 8.0 MiB (+4.0 MiB (+100.0%)), LIMIT BROKEN"),
      std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("  FAIL device.role.forward_cache: 2.0 MiB -> 4.0 MiB"),
            std::string::npos)
      << text.out;
  const Result j = run_cli(
      {"diff", dir_->path(), doubled_->path(), "--fail-if", "device.peak > +3.5MiB", "--json"});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  const json diff = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(diff.is_object()) << j.out;
  ASSERT_EQ(diff["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const json &r = diff["ranks"][rank];
    EXPECT_EQ(r["failed"], rank == 1) << r["gates"].dump();
    std::map<std::string, json> rows;
    for (const json &row : r["metrics"]) rows[row["metric"]] = row;
    EXPECT_EQ(rows["device.peak"]["base"], (rank + 3) * kMiB);
    EXPECT_EQ(rows["device.peak"]["new"], 2 * (rank + 3) * kMiB);
    EXPECT_EQ(rows["device.peak"]["new_at"]["step"], 0);
  }
}

// A device gate over a job that recorded no device memory (job_workload.cpp without
// JOB_WORKLOAD_DEVICE) has nothing to weigh: an input error (exit 2) naming the rank and its
// trace, never "ok"; a diff against such a job names its side. Before, every rank's device
// peak read 0 and the budget held (exit 0).
TEST_F(JobCommands, ADeviceGateOnAJobWithoutDeviceMemoryIsAnInputError) {
  ADPROF_SKIP_IF_SANITIZED();
  const Result check = run_cli({"check", a("node0"), "--max-device-peak", "1GiB"});
  EXPECT_EQ(check.exit_code, 2) << check.out << check.err;
  EXPECT_NE(check.err.find("gate 'device.peak > 1GiB' weighs device memory, and rank 0's trace '"),
            std::string::npos)
      << check.err;
  EXPECT_NE(check.err.find("' recorded none (no device block, allocation or reserve"),
            std::string::npos)
      << check.err;
  EXPECT_EQ(check.out, "") << "no rank is said to hold";
  const Result role = run_cli({"check", a("node0"), "--max-role", "forward_cache=1GiB",
                               "--max-device-role", "forward_cache=1GiB"});
  EXPECT_EQ(role.exit_code, 2) << role.out << role.err;
  const Result diff = run_cli({"diff", *dir_ / "a", *dir_ / "b", "--fail-if", "device.peak > +5%"});
  EXPECT_EQ(diff.exit_code, 2) << diff.out << diff.err;
  EXPECT_NE(diff.err.find("and rank 0's trace '"), std::string::npos) << diff.err;
  EXPECT_NE(diff.err.find("' (base) recorded none"), std::string::npos) << diff.err;
  // Host gates on the same job are unchanged.
  EXPECT_EQ(run_cli({"check", a("node0"), "--max-peak", "1GiB"}).exit_code, 0);
}

}  // namespace
