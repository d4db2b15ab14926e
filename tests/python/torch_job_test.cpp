// Training jobs (docs/PYTORCH.md, "Training jobs"): every Python process of a job started
// under `adprof run --torch` is instrumented (torchrun's ranks, torch.multiprocessing.spawn's,
// a plain launcher's, a DataLoader's spawned workers), says what it is (job_facts.h), and
// `adprof report` / `adprof check` read the run as one job.
//
// The job (scripts/job_ddp.py): two ranks on CPU with gloo, rank r on batches of 2048 * (r + 1)
// rows. At each rank's peak, parameter and optimizer_state bytes equal PyTorch's own account
// (the unique storages of model.parameters() and optimizer.state, written by the rank), forward
// caches scale with the batch, and the job's report names rank 1 and its forward caches.
// Runs on Debian's 1.13 (label torch: spawn and a plain launcher; its torchrun fails on Python
// 3.11 without adprof too) and on the test venv's 2.x (label torch2: torchrun as well).
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "python_packages.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");
const std::string kScripts = env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS);

const std::string &torch_version() {
  static const std::string version = said_versions("torch", kPython, {"torch"}, "torch");
  return version;
}

#define SKIP_WITHOUT_TORCH()                                                                \
  do {                                                                                      \
    ADPROF_SKIP_IF_SANITIZED();                                                             \
    if (torch_version().empty())                                                            \
      GTEST_SKIP() << "no torch for " << kPython << " (scripts/setup.sh installs Debian's " \
                   << "python3-torch, scripts/setup-test-venv.sh the venv's PyTorch 2.x)";  \
  } while (0)

// A port per test process: the torch and torch2 suites run side by side under ctest -j.
std::string free_port(int offset) {
  return std::to_string(20000 + (getpid() * 7 + offset) % 20000);
}

// `adprof run --torch --no-report -o DIR/job.adtrace -- PROGRAM...` in DIR.
Result run_job(const TempDir &dir, std::vector<std::string> program) {
  SpawnOptions o;
  o.argv = {cli_path(), "run", "--torch", "--no-report", "-o", dir / "job.adtrace", "--"};
  o.argv.insert(o.argv.end(), program.begin(), program.end());
  o.env = {{"PYTHONDONTWRITEBYTECODE", "1"}, {"OMP_NUM_THREADS", "1"}};
  // torchrun finds its interpreter by its shebang; the venv's bin/ first for its children.
  const std::string bin = fs::path(kPython).parent_path().string();
  o.env.emplace_back("PATH", bin + ":" + env_or("PATH", "/usr/bin:/bin"));
  o.timeout_s = 600;
  return run(o);
}

json job_report(const std::string &path) {
  Result r = run_cli({"report", "--job", "--json", path}, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "no JSON: " << r.out << r.err;
  return j;
}

json rank_account(const TempDir &dir, int rank) {
  json j = json::parse(read_file(dir / ("rank" + std::to_string(rank) + ".json")), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "rank " << rank << " wrote no account";
  return j;
}

void expect_near(uint64_t adprof, uint64_t pytorch, const std::string &what) {
  EXPECT_NEAR(static_cast<double>(adprof), static_cast<double>(pytorch), 0.01 * pytorch)
      << what << ": adprof " << adprof << ", PyTorch " << pytorch;
}

// The two ranks: each exact against PyTorch's own account, rank 1's forward caches twice rank
// 0's (its batches are), rank 1 the outlier for its forward caches; each a child of the
// launcher, which the report finds.
void expect_two_exact_ranks(const TempDir &dir, const json &job, size_t launchers = 1) {
  ASSERT_EQ(job["schema"], "adprof.job");
  ASSERT_EQ(job["ranks"].size(), 2u) << job["processes"].dump();
  uint64_t caches[2] = {};
  for (int rank = 0; rank < 2; ++rank) {
    const json &r = job["ranks"][rank];
    const json account = rank_account(dir, rank);
    if (account.is_discarded()) return;
    EXPECT_EQ(r["rank"], rank);
    EXPECT_EQ(r["world_size"], 2);
    EXPECT_EQ(r["pid"], account["pid"]) << "rank " << rank << "'s trace is another process's";
    EXPECT_EQ(r["steps"], account["batches"]) << "rank " << rank;
    expect_near(r["peak_by_role"]["parameter"], account["parameter"],
                "rank " + std::to_string(rank) + " parameter");
    expect_near(r["peak_by_role"]["optimizer_state"], account["optimizer_state"],
                "rank " + std::to_string(rank) + " optimizer_state");
    caches[rank] = r["peak_by_role"]["forward_cache"];
  }
  ASSERT_GT(caches[0], 0u);
  const double ratio = static_cast<double>(caches[1]) / static_cast<double>(caches[0]);
  EXPECT_GT(ratio, 1.8) << "forward caches do not scale with the batch: " << caches[0] << ", "
                        << caches[1];
  EXPECT_LT(ratio, 2.2) << caches[0] << ", " << caches[1];
  EXPECT_EQ(job["outlier"]["rank"], 1) << job["outlier"].dump();
  EXPECT_EQ(job["outlier"]["role"], "forward_cache") << job["outlier"].dump();
  // The launchers: the ranks' parents, processes of the run (one per machine).
  std::set<uint64_t> parents, found;
  for (const json &r : job["ranks"]) parents.insert(r["parent"].get<uint64_t>());
  for (const json &p : job["processes"])
    if (p["kind"] == "launcher") found.insert(p["pid"].get<uint64_t>());
  EXPECT_EQ(found, parents) << job["processes"].dump();
  EXPECT_EQ(found.size(), launchers) << job["processes"].dump();
}

// The workers job_ddp.py's ranks started, each of which wrote OUTDIR/worker<r>-<pid> (the test's
// own count): the job's report has exactly those as the rank's workers (`per_rank` each), each
// in its own trace TRACE.<pid>, said to be its rank's, with a peak of its own.
void expect_workers_as_counted(const TempDir &dir, const json &job, size_t per_rank) {
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::set<uint64_t> written, reported;
    const std::string prefix = "worker" + std::to_string(rank) + "-";
    for (const std::string &name : files_in(dir.path()))
      if (name.rfind(prefix, 0) == 0) written.insert(std::stoull(name.substr(prefix.size())));
    EXPECT_EQ(written.size(), per_rank);
    const json &r = job["ranks"][rank];
    for (const json &w : r["workers"]) {
      reported.insert(w["pid"].get<uint64_t>());
      EXPECT_EQ(w["kind"], "worker");
      EXPECT_EQ(w["parent"], r["pid"]);
      EXPECT_GT(w["peak"].get<uint64_t>(), 0u);
      EXPECT_EQ(w["complete"], true);
      EXPECT_EQ(w["trace"], (dir / "job.adtrace") + "." + std::to_string(w["pid"].get<uint64_t>()));
    }
    EXPECT_EQ(reported, written) << job["processes"].dump();
    EXPECT_GT(r["workers_peak"].get<uint64_t>(), 0u);
  }
}

// torchrun, as the PyTorch docs start a job (PyTorch 2.x: Debian's 1.13 torchrun fails on
// Python 3.11 with or without adprof). Its report, in words, names the outlier; a gate over the
// job fails on rank 1 only, and says so.
TEST(TorchJob, TorchrunRanksSideBySide) {
  SKIP_WITHOUT_TORCH();
  const std::string torchrun = (fs::path(kPython).parent_path() / "torchrun").string();
  if (torch_version().rfind("1.", 0) == 0 || access(torchrun.c_str(), X_OK) != 0)
    GTEST_SKIP() << "torchrun of PyTorch 2.x needed (" << torchrun << ")";
  TempDir dir;
  Result r = run_job(dir, {"torchrun", "--nproc_per_node", "2", "--master_port", free_port(1),
                           kScripts + "/job_ddp.py", dir.path()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json job = job_report(dir / "job.adtrace");
  expect_two_exact_ranks(dir, job);
  // The text: the ranks side by side and the difference in words.
  Result text = run_cli({"report", "--job", dir / "job.adtrace"}, 600);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Highest peak: rank 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rank 1: forward caches 2.0x rank 0's"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("launcher"), std::string::npos) << text.out;
  // --rank N: that rank's own full report; a rank the job lacks is a usage error.
  Result one = run_cli({"report", "--rank", "1", "--json", dir / "job.adtrace"}, 600);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  json rank1 = json::parse(one.out, nullptr, false);
  ASSERT_FALSE(rank1.is_discarded());
  EXPECT_EQ(rank1["peak"]["bytes"], job["ranks"][1]["peak"]);
  EXPECT_EQ(rank1["trace"]["pid"], job["ranks"][1]["pid"]);
  Result none = run_cli({"report", "--rank", "5", dir / "job.adtrace"}, 600);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no rank 5 (ranks: 0 1)"), std::string::npos) << none.err;
  // A gate between the two ranks' forward caches: rank 1 fails, rank 0 holds; the folder is
  // the job too.
  const uint64_t between = (job["ranks"][0]["peak_by_role"]["forward_cache"].get<uint64_t>() +
                            job["ranks"][1]["peak_by_role"]["forward_cache"].get<uint64_t>()) /
                           2;
  Result check = run_cli(
      {"check", dir.path(), "--max-role", "forward_cache=" + std::to_string(between) + "B"}, 600);
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  EXPECT_NE(check.out.find("ok   rank 0:"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("FAIL rank 1:"), std::string::npos) << check.out;
  Result pass = run_cli({"check", "--job", dir / "job.adtrace", "--max-role",
                         "forward_cache=" + std::to_string(2 * between) + "B"},
                        600);
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  // diff over two jobs, rank by rank (here the job against itself): a gate on every rank.
  Result same = run_cli({"diff", dir.path(), dir.path(), "--fail-if", "peak > +5%"}, 600);
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("== rank 1"), std::string::npos) << same.out;
}

// Two machines (two torchrun nodes on this one, each under its own adprof run): each run holds
// its node's rank and launcher; the report of the two folders is one job, merged by rank.
TEST(TorchJob, TwoNodesMergedIntoOneJob) {
  SKIP_WITHOUT_TORCH();
  const std::string torchrun = (fs::path(kPython).parent_path() / "torchrun").string();
  if (torch_version().rfind("1.", 0) == 0 || access(torchrun.c_str(), X_OK) != 0)
    GTEST_SKIP() << "torchrun of PyTorch 2.x needed (" << torchrun << ")";
  TempDir dir;
  // (A rank that died of "terminate called without an active exception" here was adprof's
  // doing, not gloo's: TorchJob.CollectiveWorkHoldsNoneOfAdprofsObjects.)
  std::vector<Result> results;
  {
    const std::string port = free_port(4);
    std::vector<std::unique_ptr<Child>> nodes;
    for (const char *node : {"0", "1"}) {
      fs::remove_all(dir / ("node" + std::string(node)));
      fs::create_directory(dir / ("node" + std::string(node)));
      SpawnOptions o;
      o.argv = {cli_path(),
                "run",
                "--torch",
                "--no-report",
                "-o",
                dir / ("node" + std::string(node) + "/job.adtrace"),
                "--",
                "torchrun",
                "--nnodes",
                "2",
                "--node_rank",
                node,
                "--nproc_per_node",
                "1",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                port,
                kScripts + "/job_ddp.py",
                dir.path()};
      o.env = {{"PYTHONDONTWRITEBYTECODE", "1"},
               {"OMP_NUM_THREADS", "1"},
               {"PATH",
                fs::path(kPython).parent_path().string() + ":" + env_or("PATH", "/usr/bin:/bin")}};
      o.timeout_s = 600;
      nodes.push_back(std::make_unique<Child>(o));
    }
    for (auto &node : nodes) results.push_back(node->wait());
  }
  for (const Result &r : results) ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  Result merged = run_cli({"report", "--json", dir / "node0", dir / "node1"}, 600);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  const json job = json::parse(merged.out, nullptr, false);
  ASSERT_FALSE(job.is_discarded()) << merged.out;
  EXPECT_EQ(job["run_ids"].size(), 2u);
  expect_two_exact_ranks(dir, job, /*launchers=*/2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(job["ranks"][rank]["node"], rank) << job["ranks"][rank].dump();
    EXPECT_NE(job["ranks"][rank]["job"], "");
    EXPECT_NE(job["ranks"][rank]["trace"].get<std::string>().find("node" + std::to_string(rank)),
              std::string::npos);
  }
  EXPECT_EQ(job["ranks"][0]["job"], job["ranks"][1]["job"]);
  // One node's folder alone: its rank only.
  const json half = job_report(dir / "node1");
  ASSERT_EQ(half["ranks"].size(), 1u);
  EXPECT_EQ(half["ranks"][0]["rank"], 1);
}

// torch.multiprocessing.spawn: the ranks are told their rank by the program (the environment
// names none), said when they join the process group. Their DataLoaders fork their workers:
// each is traced as its own process, the worker of its rank, and the ranks are still exact.
TEST(TorchJob, SpawnedRanksWithForkedWorkers) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  Result r =
      run_job(dir, {kPython, kScripts + "/job_ddp.py", dir.path(), "--spawn", "2", "--workers", "2",
                    "--context", "fork", "--steps", "2", "--port", free_port(2)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("trace of its own"), std::string::npos) << r.err;
  const json job = job_report(dir / "job.adtrace");
  expect_two_exact_ranks(dir, job);
  expect_workers_as_counted(dir, job, 2);
  EXPECT_EQ(job["ranks"][0]["local_rank"], nullptr);  // the environment named none
  // The launcher's own trace is the program's: adprof's TRACE.
  for (const json &p : job["processes"])
    if (p["kind"] == "launcher") {
      EXPECT_EQ(p["trace"], dir / "job.adtrace");
    }
}

// A plain launcher (job_ddp.py --launch 2) setting RANK, WORLD_SIZE, LOCAL_RANK and
// LOCAL_WORLD_SIZE for its two ranks, each with a DataLoader of two workers started in
// `context` (spawn, fork, or default: the DataLoader's own, fork on Linux); `job` is the run's
// job report. What holds in every context: the ranks exact and as the launcher set them, each
// worker traced as its own process and counted as the workers counted themselves, each saying
// its parent and none saying it is a rank (a spawned worker inherits its rank's RANK).
void run_launched(const TempDir &dir, const std::string &context, int port_offset, json &job) {
  Result r =
      run_job(dir, {kPython, kScripts + "/job_ddp.py", dir.path(), "--launch", "2", "--workers",
                    "2", "--context", context, "--steps", "2", "--port", free_port(port_offset)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("trace of its own"), std::string::npos) << r.err;
  job = job_report(dir / "job.adtrace");
  ASSERT_NO_FATAL_FAILURE(expect_two_exact_ranks(dir, job));
  EXPECT_EQ(job["ranks"][0]["local_rank"], 0);
  EXPECT_EQ(job["ranks"][1]["local_world_size"], 2);
  expect_workers_as_counted(dir, job, 2);
  for (int rank = 0; rank < 2; ++rank)
    for (const json &w : job["ranks"][rank]["workers"]) {
      Result dump = run_cli({"dump", w["trace"]}, 300);
      EXPECT_NE(dump.out.find("annotate  job.process"), std::string::npos) << w["trace"];
      EXPECT_EQ(dump.out.find("annotate  job.rank"), std::string::npos)
          << w["trace"] << ": a worker said it is a rank";
    }
}

// A plain launcher's ranks whose DataLoaders spawn their workers: each worker is traced, the
// worker of its rank; it inherited its rank's RANK but does not say it is a rank.
TEST(TorchJob, LaunchedRanksAndTheirSpawnedWorkers) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  json job;
  run_launched(dir, "spawn", 3, job);
}

// A collective's work outlives the collective on the backend's thread with a copy of the
// caller's thread state (PyTorch 2.x). adprof's saved-tensor hooks in that copy made a rank
// abort at exit ("terminate called without an active exception": the backend thread released
// them after finalization had begun) in about one torchrun job in five. Kept works show the
// copies: they add no reference to adprof's mode or pack hook (before: one per work). Among
// them, collectives an optimizer's step makes (a sharded optimizer's): a step on the CPU runs
// without the mode, and so without that care, unless the process is in a torch.distributed job
// (before that exception, on 2.15: one pack hook reference per collective of the step).
TEST(TorchJob, CollectiveWorkHoldsNoneOfAdprofsObjects) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  Result r = run_job(dir, {kPython, kScripts + "/collective_work.py"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json held = json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
  ASSERT_TRUE(held.is_object()) << r.out;
  ASSERT_TRUE(held.contains("mode") && held.contains("pack_hook")) << r.out << r.err;
  EXPECT_EQ(held["mode"], 0) << r.out;
  EXPECT_EQ(held["pack_hook"], 0) << r.out;
}

// DDP's own tensors (its Reducer's buckets and their views, which a gloo work holds and its
// thread may release last) get no Python object from adprof: PyTorch keeps one made for a C++
// tensor as long as the tensor lives, and a backend thread releasing one after finalization
// began aborts the rank (python/adprof/torch/_ddp.py). scripts/ddp_internals.py counts, in
// each of two spawned ranks, the tensor and storage Python objects released when a trained DDP
// is deleted (DDP's own; the model and optimizer stay alive), with DDP's defaults and with
// gradient_as_bucket_view: under adprof as many as without (before, on 2.15: 13 tensors and 1
// storage with the defaults, 6 tensors with bucket views, against none), and no more storages
// alive (before: 31 against none, from adprof's untyped_storage() calls), and as many tensors
// alive (before, on 1.13, adprof kept each parameter's AccumulateGrad node, and so the
// parameter, alive for ever: 12 more after the first DDP's model was deleted).
TEST(TorchJob, DdpInternalsGetNoPythonObjects) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  SpawnOptions o;
  o.argv = {kPython,     kScripts + "/ddp_internals.py", dir.path(), "--label", "plain", "--port",
            free_port(6)};
  o.env = {{"PYTHONDONTWRITEBYTECODE", "1"}, {"OMP_NUM_THREADS", "1"}};
  o.timeout_s = 600;
  Result plain = run(o);
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  Result traced = run_job(dir, {kPython, kScripts + "/ddp_internals.py", dir.path(), "--label",
                                "adprof", "--port", free_port(7)});
  ASSERT_EQ(traced.exit_code, 0) << traced.out << traced.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string suffix = ".rank" + std::to_string(rank) + ".json";
    const json without = json::parse(read_file(dir / ("plain" + suffix)), nullptr, false);
    const json with = json::parse(read_file(dir / ("adprof" + suffix)), nullptr, false);
    ASSERT_TRUE(without.is_object() && with.is_object()) << "rank " << rank << " wrote no counts";
    for (const char *config : {"default", "bucket_view"}) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(rank) + ", " + config);
      const json &a = with["runs"][config], &p = without["runs"][config];
      std::printf(
          "[ counts   ] rank %d, %s: released at DDP's deletion %d tensors, %d storages "
          "(without adprof %d, %d); alive %d tensors, %d storages (without adprof %d, "
          "%d)\n",
          rank, config, a["released_tensors"].get<int>(), a["released_storages"].get<int>(),
          p["released_tensors"].get<int>(), p["released_storages"].get<int>(),
          a["tensors"].get<int>(), a["storages"].get<int>(), p["tensors"].get<int>(),
          p["storages"].get<int>());
      EXPECT_EQ(a["released_tensors"], p["released_tensors"]);
      EXPECT_EQ(a["released_storages"], p["released_storages"]);
      EXPECT_EQ(a["storages"], p["storages"]);
      EXPECT_EQ(a["tensors"], p["tensors"]);
    }
  }
}

// A DataLoader(num_workers=2) in its default context (fork, on Linux) in each of two ranks a
// plain launcher starts: each worker is traced from the fork on, as its own process, and the
// job's report counts each rank's workers as the workers themselves did (issue 29); the ranks
// are still exact (a worker's memory is never its rank's).
TEST(TorchJob, DataLoadersForkedWorkersAreTheirRanks) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  json job;
  ASSERT_NO_FATAL_FAILURE(run_launched(dir, "default", 5, job));
  Result text = run_cli({"report", "--job", dir / "job.adtrace"}, 600);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("worker of rank 1"), std::string::npos) << text.out;
}

// The bootstrap on PYTHONPATH chains to the sitecustomize the environment had (Debian's, or
// one of the user's on PYTHONPATH), leaves sys.path as it was, and imports nothing into a
// Python process that never imports torch.
TEST(TorchJob, BootstrapKeepsTheEnvironmentsSitecustomize) {
  ADPROF_SKIP_IF_SANITIZED();
  TempDir dir;
  write_file(dir / "sitecustomize.py", "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n");
  write_file(dir / "probe.py",
             "import os, subprocess, sys\n"
             "print('user', os.environ.get('USER_SITECUSTOMIZE'))\n"
             "print('bootstrap on path', any('_bootstrap' in p for p in sys.path))\n"
             "child = subprocess.run([sys.executable, '-c', 'import sys; "
             "print(\"torch\" in sys.modules, \"adprof\" in sys.modules, "
             "sys.modules[\"sitecustomize\"].__file__)'], capture_output=True, text=True)\n"
             "print('child', child.stdout.strip())\n");
  SpawnOptions o;
  o.argv = {cli_path(),        "run", "--torch", "--no-report",   "-o",
            dir / "t.adtrace", "--",  kPython,   dir / "probe.py"};
  o.env = {{"PYTHONPATH", dir.path()}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  Result r = run(o);
  if (r.err.find("PyTorch is not installed") != std::string::npos)
    GTEST_SKIP() << "no torch for " << kPython;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("user ran"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bootstrap on path False"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("child False False " + dir.path() + "/sitecustomize.py"), std::string::npos)
      << r.out;
}

// torchrun and other Python console scripts are programs --torch takes; other programs are
// still refused with one line.
TEST(TorchJob, PythonConsoleScriptsAreAccepted) {
  ADPROF_SKIP_IF_SANITIZED();
  TempDir dir;
  write_file(dir / "tool", "#!/usr/bin/env python3\nimport sys\nsys.exit(3)\n");
  fs::permissions(dir / "tool", fs::perms::owner_all);
  write_file(dir / "tool.sh", "#!/bin/sh\nexit 0\n");
  fs::permissions(dir / "tool.sh", fs::perms::owner_all);
  Result ok =
      run_cli({"run", "--torch", "--no-report", "-o", dir / "a.adtrace", "--", dir / "tool"});
  EXPECT_EQ(ok.exit_code, 3) << ok.err;  // the program's own status: it ran
  Result refused =
      run_cli({"run", "--torch", "--no-report", "-o", dir / "b.adtrace", "--", dir / "tool.sh"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--torch needs a Python interpreter or a Python program"),
            std::string::npos)
      << refused.err;
}

}  // namespace

namespace {

// Bad input for the job commands: one line, exit 2; a run without ranks is reported as such,
// and no gate passes on it.
TEST(JobInput, FoldersAndRunsWithoutRanks) {
  ADPROF_SKIP_IF_SANITIZED();
  TempDir dir;
  fs::create_directory(dir / "empty");
  Result empty = run_cli({"report", dir / "empty"});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("holds no trace of an adprof run"), std::string::npos) << empty.err;
  write_file(dir / "empty/notes.txt", "not a trace\n");
  Result text = run_cli({"report", "--job", dir / "empty/notes.txt"});
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("is not a trace of an adprof run"), std::string::npos) << text.err;
  fs::create_directory(dir / "runs");
  for (const char *name : {"a.adtrace", "b.adtrace"}) {
    Result r = run_cli(
        {"run", "--no-report", "-o", dir / ("runs/" + std::string(name)), "--", "/bin/true"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  Result two = run_cli({"report", dir / "runs"});
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.err.find("holds the traces of 2 runs"), std::string::npos) << two.err;
  Result plain = run_cli({"report", "--job", dir / "runs/a.adtrace"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("0 ranks"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("No process of this run said it is a rank"), std::string::npos);
  Result check = run_cli({"check", "--job", dir / "runs/a.adtrace", "--max-peak", "1GiB"});
  EXPECT_EQ(check.exit_code, 2) << check.out;
  EXPECT_NE(check.err.find("is no job"), std::string::npos) << check.err;
  Result rank = run_cli({"report", "--rank", "0", dir / "runs/a.adtrace"});
  EXPECT_EQ(rank.exit_code, 2);
  EXPECT_NE(rank.err.find("no process said it is a rank"), std::string::npos) << rank.err;
}

}  // namespace

namespace {

// After a job's run, `adprof run` lists the run's process images saying what each one is, and
// the report it prints is the job's: no image is marked "<- reported" (the launcher's was,
// above the job's report), and it says how to ask for the job's report again. The job is
// tests/cli/job_workload.cpp's launcher and two ranks, started by a Python program as --torch
// takes one.
TEST(JobRunEnding, TheListSaysWhatEachImageIs) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  write_file(dir / "start_job.py",
             "import subprocess, sys\n"
             "sys.exit(subprocess.run([sys.argv[1], 'launch', '0', '2', '1', '1']).returncode)\n");
  SpawnOptions o;
  o.argv = {cli_path(),           "run",       "--torch", "-o", dir / "job.adtrace", "--", kPython,
            dir / "start_job.py", JOB_WORKLOAD};
  o.env = {{"PYTHONDONTWRITEBYTECODE", "1"}};
  o.timeout_s = 300;
  Result r = run(o);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("traced 4 process images of this run"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("<- reported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  rank 0\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  rank 1\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  launcher\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the job's report follows"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("adprof report --job " + dir / "job.adtrace"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("adprof job: run "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Highest peak: rank 1"), std::string::npos) << r.out;
}

}  // namespace
