// Jobs of several processes in the commands (job_cli.h).
#include "job_cli.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/ad_analysis.h"

namespace adprof::cli {

namespace fs = std::filesystem;

bool is_python_script(const std::string &file) {
  if (file.empty()) return false;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line) || line.rfind("#!", 0) != 0) return false;
  // "#!/venv/bin/python3", "#!/usr/bin/env python3", "#!/usr/bin/env -S python3 -u"
  size_t at = 2;
  for (int word = 0; word < 3; ++word) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    size_t end = line.find_first_of(" \t\r", at);
    if (end == std::string::npos) end = line.size();
    const std::string name = fs::path(line.substr(at, end - at)).filename().string();
    if (name.rfind("python", 0) == 0) return true;
    if (name != "env" && name != "-S") return false;
    at = end;
  }
  return false;
}

std::string python_bootstrap_dir(const std::string &package_dir) {
  return (fs::path(package_dir) / "adprof" / "_bootstrap").string();
}

job::Job load_job(const std::vector<std::string> &paths) {
  try {
    const std::vector<std::string> traces = job::job_traces(paths);
    AnalyzeOptions options = analyze_options_with_progress();
    options.site_stacks = false;
    job::Job job = job::analyze_job(traces, options);
    end_progress();
    return job;
  } catch (const TraceError &e) {
    end_progress();
    throw UsageError(e.what());
  }
}

int print_job_report(const job::Job &job, const po::variables_map &vm) {
  if (vm.count("rank")) {
    const uint64_t rank = whole_number_option(vm, "rank", 0, 1u << 30);
    const job::Process *p = job.rank(static_cast<int64_t>(rank));
    if (!p) {
      std::string known;
      for (size_t i : job.ranks()) known += " " + std::to_string(job.processes[i].rank);
      throw UsageError(
          "the job has no rank " + std::to_string(rank) +
          (known.empty() ? " (no process said it is a rank)" : " (ranks:" + known + ")"));
    }
    // The rank's full report: both layers, as `adprof report` of its trace.
    AnalyzeOptions options = analyze_options_with_progress();
    options.site_stacks = vm.count("json") > 0;
    Report report = analyze_all(p->trace, options).report;
    end_progress();
    warn_if_incomplete(p->trace, report.complete, report.end_reason);
    if (vm.count("json"))
      std::cout << json_text(to_json(report, json_options(vm))) << '\n';
    else
      std::cout << render_text(report,
                               static_cast<size_t>(whole_number_option(vm, "top", 1, 100000)),
                               vm.count("details") > 0);
    return kExitOk;
  }
  for (const job::Process &p : job.processes)
    if (p.kind == job::Kind::kRank)
      warn_if_incomplete(p.trace, p.report.complete, p.report.end_reason);
  if (vm.count("json"))
    std::cout << json_text(job::to_json(job, json_options(vm))) << '\n';
  else
    std::cout << job::render_text(job);
  return kExitOk;
}

std::optional<job::Job> run_as_job(const std::vector<std::string> &traces,
                                   const std::string &program_trace) {
  // The program's children first: a run with no rank among them is reported as one process
  // (its trace read once, by the report), not read twice.
  AnalyzeOptions options = analyze_options_with_progress();
  options.site_stacks = false;
  std::vector<job::Process> processes;
  bool ranks = false;
  for (const std::string &trace : traces)
    if (trace != program_trace) {
      processes.push_back(job::analyze_process(trace, options));
      ranks |= processes.back().rank >= 0;
    }
  if (ranks) processes.push_back(job::analyze_process(program_trace, options));
  end_progress();
  if (!ranks) return std::nullopt;
  return job::assemble_job(std::move(processes));
}

std::string role_in_job(const job::Job &job, const std::string &trace) {
  for (const job::Process &p : job.processes) {
    if (p.trace != trace) continue;
    switch (p.kind) {
      case job::Kind::kRank:
        return "rank " + std::to_string(p.rank);
      case job::Kind::kWorker:
        return "worker of rank " + std::to_string(p.worker_of);
      case job::Kind::kLauncher:
        return "launcher";
      case job::Kind::kOther:
        break;
    }
  }
  return "";
}

int report_run_as_job(const job::Job &job, const std::string &program_trace,
                      const po::variables_map &vm) {
  const size_t ranks = job.ranks().size();
  std::cerr << "adprof: the run is a job of " << ranks << (ranks == 1 ? " rank" : " ranks")
            << ": the job's report follows, not the program's alone (again: adprof report --job "
            << program_trace << "; one rank's: adprof report --rank N " << program_trace << ")\n";
  return print_job_report(job, vm);
}

}  // namespace adprof::cli
