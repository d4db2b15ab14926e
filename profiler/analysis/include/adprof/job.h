// A job of several processes (a training job: its ranks, their launcher, their workers) read as
// one: the trace files of one `adprof run` (the run id in each header), each process known by
// the facts it said about itself (adprof/job_facts.h) and its report, the ranks side by side.
// The facts and the report are documented with the integrations that say them (docs/).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "adprof/report.h"
#include "adprof/trace_peak.h"

namespace adprof::job {

// What a process is in its job, from its own facts and its relatives'.
enum class Kind {
  kRank,      // said "job.rank"
  kLauncher,  // the parent of a rank
  kWorker,    // a child of a rank (a DataLoader's worker, a pool's process), or a child of one
  kOther,     // any other process of the run (a shell, a compiler, a process that said nothing)
};
const char *kind_name(Kind kind);  // "rank", "launcher", "worker", "process"

struct Process {
  std::string trace;
  uint32_t run_id = 0;
  uint64_t pid = 0;
  uint64_t start_wall_ns = 0;
  // "job.process"
  bool said_process = false;
  uint64_t parent = 0;
  // "job.rank" (the last one said); -1: not said or unknown
  int64_t rank = -1, world_size = -1, local_rank = -1, local_world_size = -1, node = -1;
  std::string host;
  std::string job;  // what the ranks of one job share ("" not said)
  Kind kind = Kind::kOther;
  int64_t worker_of = -1;  // kWorker: the rank it works for
  Report report;
};

// Which memory a peak counts: host (heap and pinned host blocks) or device (trace_peak.h).
enum class Memory { kHost, kDevice };
const char *memory_name(Memory memory);  // "host", "device"

// The rank with the highest peak against the rank with the lowest, in one memory, and the role
// whose bytes at the two peaks differ most ("rank 1: forward caches 2.0x rank 0's"). A process's
// host peak in a job is its trace's (trace_peak: under a step window, a summarized step's when
// higher); its device peak is its report's (trace_device_peak: step summaries carry no device
// figures).
struct Outlier {
  Memory memory = Memory::kHost;
  size_t high = 0, low = 0;  // indices into Job::processes
  uint64_t high_peak = 0, low_peak = 0;
  int role = -1;  // -1: the two peaks hold the same bytes of every role
  uint64_t high_bytes = 0, low_bytes = 0;
};

struct Job {
  uint32_t run_id = 0;            // the first run's
  std::vector<uint32_t> run_ids;  // one per machine's `adprof run`, in the order given
  // Ranks by rank, then the launchers, the workers by the rank they work for, the others; each
  // by start time within its kind.
  std::vector<Process> processes;
  std::vector<size_t> ranks() const;                   // indices of the ranks, by rank
  std::vector<size_t> workers_of(int64_t rank) const;  // indices of that rank's workers
  const Process *rank(int64_t rank) const;             // nullptr: no such rank
  // Whether a rank holds device memory (a device peak above 0).
  bool ranks_hold_device_memory() const;
  // The outlier in one memory: with two ranks or more (device: when they hold device memory).
  std::optional<Outlier> outlier(Memory memory) const;
  // The job's outlier: the device's when the ranks hold device memory (their work is on the
  // device; their host memory then differs mostly by chance), the host's otherwise.
  std::optional<Outlier> outlier() const;
};

// The trace files of a job named by `path`: a directory (every trace in it, which must all be of
// one run; or, holding no trace itself, its folders that hold traces: one machine's run each,
// as the vector form takes them), or a trace file (it and the traces of the same run in its
// directory). Sorted by name. Throws TraceError for a path that is neither, or a folder of
// several runs.
std::vector<std::string> job_traces(const std::string &path);

// The traces of a job recorded on several machines: each path as job_traces() takes it, one
// run per path.
std::vector<std::string> job_traces(const std::vector<std::string> &paths);

// Each trace's report (one pass each) and facts. `progress`, when given, is called with the
// fraction of the job read. Throws TraceError for an unreadable trace.
Job analyze_job(const std::vector<std::string> &traces, const AnalyzeOptions &options = {});

// One trace: its report (one pass) and its process's facts.
Process analyze_process(const std::string &trace, const AnalyzeOptions &options = {});
// What each process is (from the facts of all), in the job's order. Processes are told apart
// by run and pid (two machines' pids may be equal). Throws TraceError when the runs are not one
// job (a rank said in two runs, ranks of different jobs).
Job assemble_job(std::vector<Process> processes);

// One process's facts, read from the annotations of a report's pass (AnalyzeOptions::
// on_annotation): analyze_job's way, for a caller that makes its own pass.
void read_fact(const Event &e, const Replay &replay, Process &process);

// The words of a role in a sentence: "forward caches", "optimizer state".
const char *role_words(int role);

// The job report: the ranks side by side (peak, when, step, bytes by role at each rank's
// peak, steps, workers), their device peaks likewise when they hold device memory, the
// outliers in words, the launcher and the other processes. Every process's peak is its
// trace's (trace_peak), its step marked when it is a summarized one.
std::string render_text(const Job &job);
// The outliers in words, as render_text() says them, host then device: "Highest peak: rank 1,
// 2.0 MiB (2.0x rank 0's, the lowest)." and "rank 1: forward caches 2.0x rank 0's (...)" on a
// second line; "The ranks peak alike: ..."; the device's "Highest device peak: ..." likewise
// when the ranks hold device memory; "" with fewer than two ranks.
std::string outlier_text(const Job &job);
// {"schema": "adprof.job", "run_id", "ranks": [{rank, ..., peak, peak_time, peak_step,
//  peak_summarized, peak_by_role, device_peak, device_peak_time, device_peak_step,
//  device_reserved_peak, device_peak_by_role, "report": <report JSON>}], "outlier" (the job's:
//  Job::outlier()), "host_outlier", "device_outlier", "processes": [{kind, pid, parent, trace,
//  peak, peak_time, peak_step, peak_summarized, device_peak}]}: the peaks are the traces'
//  (trace_peak, trace_device_peak); "report" is the rank's own report (its peak that of the
//  events recorded in full).
nlohmann::json to_json(const Job &job, const JsonOptions &options = {});

}  // namespace adprof::job
