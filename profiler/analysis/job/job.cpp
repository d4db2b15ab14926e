// A job read as one (job.h): its trace files, each process's facts (job_facts.h) and report,
// what each process is, each one's peak, the outlier among the ranks.
#include "adprof/job.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "adprof/job_facts.h"
#include "trace_format.h"

namespace adprof::job {

namespace fs = std::filesystem;

const char *kind_name(Kind kind) {
  switch (kind) {
    case Kind::kRank:
      return "rank";
    case Kind::kLauncher:
      return "launcher";
    case Kind::kWorker:
      return "worker";
    case Kind::kOther:
      break;
  }
  return "process";
}

const char *role_words(int role) {
  switch (role) {
    case ADPROF_ROLE_FOREIGN:
      return "foreign memory";
    case ADPROF_ROLE_PARAMETER:
      return "parameters";
    case ADPROF_ROLE_INPUT:
      return "inputs";
    case ADPROF_ROLE_ACTIVATION:
      return "activations";
    case ADPROF_ROLE_FORWARD_CACHE:
      return "forward caches";
    case ADPROF_ROLE_ADJOINT:
      return "adjoint buffers";
    case ADPROF_ROLE_ACCUMULATION:
      return "pending gradient sums";
    case ADPROF_ROLE_DUPLICATE:
      return "duplicated intermediates";
    case ADPROF_ROLE_OPTIMIZER_STATE:
      return "optimizer state";
    case ADPROF_ROLE_WORKSPACE:
      return "workspace";
    default:
      return "other memory";
  }
}

namespace {

// The run id of a trace file from its header alone (0: not a trace of `adprof run`, a claim, or
// not a trace): a folder's other files are not read further.
uint32_t run_id_of(const fs::path &file) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint8_t header[format::kFileHeaderSize];
  const bool read_whole =
      pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
  close(fd);
  if (!read_whole || std::memcmp(header, format::kFileMagic, sizeof format::kFileMagic) != 0)
    return 0;
  if (format::get_u32(header + 8) == 0) return 0;  // a claim: no process took it
  return format::get_u32(header + 56);
}

// The traces of `dir` by run id.
std::map<uint32_t, std::vector<std::string>> traces_by_run(const fs::path &dir) {
  std::map<uint32_t, std::vector<std::string>> runs;
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (const uint32_t id = run_id_of(entry.path())) runs[id].push_back(entry.path().string());
  }
  if (ec) throw TraceError("cannot read the folder '" + dir.string() + "': " + ec.message());
  for (auto &[id, files] : runs) std::sort(files.begin(), files.end());
  return runs;
}

int64_t signed_value(uint64_t v) {
  return v == ADPROF_JOB_UNKNOWN || v > INT64_MAX ? -1 : static_cast<int64_t>(v);
}

}  // namespace

std::vector<std::string> job_traces(const std::string &path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto runs = traces_by_run(path);
    if (runs.empty()) {
      // A job's folder of its machines' folders (node0/, node1/): each one machine's run.
      std::vector<std::string> machines;
      for (const auto &entry : fs::directory_iterator(path, ec))
        if (entry.is_directory(ec) && !traces_by_run(entry.path()).empty())
          machines.push_back(entry.path().string());
      std::sort(machines.begin(), machines.end());
      if (!machines.empty()) return job_traces(machines);
      throw TraceError("'" + path + "' holds no trace of an adprof run");
    }
    if (runs.size() > 1)
      throw TraceError("'" + path + "' holds the traces of " + std::to_string(runs.size()) +
                       " runs; name one trace of the run to report (adprof report --job TRACE)");
    return runs.begin()->second;
  }
  if (!fs::exists(path, ec)) throw TraceError("cannot open '" + path + "': no such file");
  const uint32_t id = run_id_of(path);
  if (id == 0)
    throw TraceError("'" + path + "' is not a trace of an adprof run (no run id in its header)");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  auto runs = traces_by_run(dir);
  return runs[id];
}

std::vector<std::string> job_traces(const std::vector<std::string> &paths) {
  std::vector<std::string> all;
  std::set<uint32_t> runs;
  for (const std::string &path : paths) {
    std::vector<std::string> traces = job_traces(path);
    if (!runs.insert(run_id_of(traces.front())).second)
      throw TraceError("'" + path + "' is a run named twice");
    all.insert(all.end(), traces.begin(), traces.end());
  }
  return all;
}

void read_fact(const Event &e, const Replay &replay, Process &p) {
  const std::string &kind = replay.name(static_cast<uint32_t>(e.a));
  const auto v = e.values();
  if (kind == ADPROF_JOB_PROCESS && v.size() >= 2) {
    p.said_process = true;
    p.parent = v[1];
  } else if (kind == ADPROF_JOB_RANK && v.size() >= 2) {
    p.rank = signed_value(v[0]);
    p.world_size = signed_value(v[1]);
    p.local_rank = v.size() > 2 ? signed_value(v[2]) : -1;
    p.local_world_size = v.size() > 3 ? signed_value(v[3]) : -1;
    p.node = v.size() > 4 ? signed_value(v[4]) : -1;
    p.host = v.size() > 5 && v[5] <= UINT32_MAX ? replay.name(static_cast<uint32_t>(v[5])) : "";
    p.job = v.size() > 6 && v[6] <= UINT32_MAX ? replay.name(static_cast<uint32_t>(v[6])) : "";
  }
}

Process analyze_process(const std::string &trace, const AnalyzeOptions &options) {
  Process p;
  p.trace = trace;
  AnalyzeOptions o = options;
  o.on_annotation = [&p](const Event &e, const Replay &replay) { read_fact(e, replay, p); };
  TraceReader reader(p.trace);
  p.run_id = reader.header().run_id;
  p.pid = reader.header().pid;
  p.start_wall_ns = reader.header().start_wall_ns;
  p.report = analyze(reader, p.trace, o);
  return p;
}

Job analyze_job(const std::vector<std::string> &traces, const AnalyzeOptions &options) {
  std::vector<Process> all;
  for (size_t i = 0; i < traces.size(); ++i) {
    AnalyzeOptions o = options;
    if (options.progress)
      o.progress = [&](double f) {
        options.progress((static_cast<double>(i) + f) / static_cast<double>(traces.size()));
      };
    all.push_back(analyze_process(traces[i], o));
  }
  return assemble_job(std::move(all));
}

Job assemble_job(std::vector<Process> all) {
  Job job;
  for (const Process &p : all)
    if (std::find(job.run_ids.begin(), job.run_ids.end(), p.run_id) == job.run_ids.end())
      job.run_ids.push_back(p.run_id);
  if (!job.run_ids.empty()) job.run_id = job.run_ids.front();
  // A process is its run and its pid: two machines' pids may be equal.
  using Key = std::pair<uint32_t, uint64_t>;
  auto parent_of = [](const Process &p) { return Key{p.run_id, p.parent}; };
  // A process whose parent said a rank too is that rank's worker (it inherited its
  // environment), not a rank.
  std::set<Key> claimants;
  for (const Process &p : all)
    if (p.rank >= 0) claimants.insert({p.run_id, p.pid});
  // A rank said twice in one run (an image before and after an exec, a restarted rank): the
  // last started. In two runs: the runs are not one job.
  std::map<int64_t, size_t> rank_at;
  std::string job_name;
  for (size_t i = 0; i < all.size(); ++i) {
    const Process &p = all[i];
    if (p.rank < 0 || (p.said_process && claimants.count(parent_of(p)))) continue;
    if (!p.job.empty() && job_name.empty()) job_name = p.job;
    if (!p.job.empty() && p.job != job_name)
      throw TraceError("the traces hold ranks of two jobs ('" + job_name + "' and '" + p.job +
                       "', " + p.trace + ")");
    auto [it, fresh] = rank_at.emplace(p.rank, i);
    if (fresh) continue;
    if (all[it->second].run_id != p.run_id)
      throw TraceError("rank " + std::to_string(p.rank) + " is in two runs (" +
                       all[it->second].trace + ", " + p.trace + "): they are not one job");
    if (p.start_wall_ns > all[it->second].start_wall_ns) it->second = i;
  }
  std::map<Key, int64_t> rank_of;
  std::set<Key> launchers;
  for (const auto &[rank, i] : rank_at) {
    all[i].kind = Kind::kRank;
    rank_of[{all[i].run_id, all[i].pid}] = rank;
    if (all[i].said_process) launchers.insert(parent_of(all[i]));
  }
  for (Process &p : all) {
    if (p.kind == Kind::kRank) continue;
    const Key self{p.run_id, p.pid};
    if (launchers.count(self) && !rank_of.count(self)) p.kind = Kind::kLauncher;
  }
  // A rank's workers: its children, and theirs (a forkserver's forked workers, a worker's own
  // fork children), whatever started them; a launcher's other children are not.
  std::map<Key, size_t> process_at;
  for (size_t i = 0; i < all.size(); ++i) process_at.emplace(Key{all[i].run_id, all[i].pid}, i);
  auto worker_of = [&](const Process &p) -> int64_t {
    const Process *at = &p;
    for (size_t hops = 0; at->said_process && hops < all.size(); ++hops) {
      if (auto rank = rank_of.find(parent_of(*at)); rank != rank_of.end()) return rank->second;
      auto parent = process_at.find(parent_of(*at));
      if (parent == process_at.end() || all[parent->second].kind != Kind::kOther) break;
      at = &all[parent->second];
    }
    return -1;
  };
  std::vector<int64_t> worker_ranks(all.size(), -1);
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].kind == Kind::kOther) worker_ranks[i] = worker_of(all[i]);
  for (size_t i = 0; i < all.size(); ++i)
    if (worker_ranks[i] >= 0) {
      all[i].kind = Kind::kWorker;
      all[i].worker_of = worker_ranks[i];
    }
  auto order = [](const Process &p) {
    switch (p.kind) {
      case Kind::kRank:
        return std::make_tuple(0, p.rank, p.start_wall_ns);
      case Kind::kLauncher:
        return std::make_tuple(1, int64_t{0}, p.start_wall_ns);
      case Kind::kWorker:
        return std::make_tuple(2, p.worker_of, p.start_wall_ns);
      case Kind::kOther:
        break;
    }
    return std::make_tuple(3, int64_t{0}, p.start_wall_ns);
  };
  std::stable_sort(all.begin(), all.end(),
                   [&](const Process &a, const Process &b) { return order(a) < order(b); });
  job.processes = std::move(all);
  return job;
}

std::vector<size_t> Job::ranks() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < processes.size(); ++i)
    if (processes[i].kind == Kind::kRank) out.push_back(i);
  return out;
}

std::vector<size_t> Job::workers_of(int64_t rank) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < processes.size(); ++i)
    if (processes[i].kind == Kind::kWorker && processes[i].worker_of == rank) out.push_back(i);
  return out;
}

const Process *Job::rank(int64_t rank) const {
  for (const Process &p : processes)
    if (p.kind == Kind::kRank && p.rank == rank) return &p;
  return nullptr;
}

const char *memory_name(Memory memory) { return memory == Memory::kDevice ? "device" : "host"; }

bool Job::ranks_hold_device_memory() const {
  for (size_t i : ranks())
    if (processes[i].report.device_peak > 0) return true;
  return false;
}

std::optional<Outlier> Job::outlier(Memory memory) const {
  const std::vector<size_t> r = ranks();
  if (r.size() < 2) return std::nullopt;
  if (memory == Memory::kDevice && !ranks_hold_device_memory()) return std::nullopt;
  // Each rank's peak over all its trace holds (a step window's summaries too, trace_peak).
  std::vector<TracePeak> peaks(processes.size());
  for (size_t i : r)
    peaks[i] = memory == Memory::kDevice ? trace_device_peak(processes[i].report)
                                         : trace_peak(processes[i].report);
  Outlier o;
  o.memory = memory;
  o.high = o.low = r[0];
  for (size_t i : r) {
    if (peaks[i].bytes > peaks[o.high].bytes) o.high = i;
    if (peaks[i].bytes < peaks[o.low].bytes) o.low = i;
  }
  // The role that makes the difference: the largest excess of the highest peak over the lowest.
  const TracePeak &high = peaks[o.high], &low = peaks[o.low];
  o.high_peak = high.bytes;
  o.low_peak = low.bytes;
  uint64_t most = 0;
  for (int role = 0; role < kRoleCount; ++role)
    if (high.by_role[role] > low.by_role[role] && high.by_role[role] - low.by_role[role] > most) {
      most = high.by_role[role] - low.by_role[role];
      o.role = role;
      o.high_bytes = high.by_role[role];
      o.low_bytes = low.by_role[role];
    }
  return o;
}

std::optional<Outlier> Job::outlier() const {
  return outlier(ranks_hold_device_memory() ? Memory::kDevice : Memory::kHost);
}

}  // namespace adprof::job
