// What the commands share about jobs of several processes (adprof/job.h): the Python bootstrap
// `adprof run --torch` puts on PYTHONPATH, and the job report of `report`, `run` and `check`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "adprof/job.h"
#include "cli_common.h"

namespace adprof::cli {

// `file` starts with "#!" naming a Python interpreter (directly, or through env): a console
// script such as torchrun.
bool is_python_script(const std::string &file);

// The bootstrap directory (adprof/_bootstrap, holding sitecustomize.py) under the directory
// of the Python package.
std::string python_bootstrap_dir(const std::string &package_dir);

// A run (or a folder) read as a job, with progress on stderr; a usage error for bad input.
// Several paths: one run per machine of one job.
job::Job load_job(const std::vector<std::string> &paths);
inline job::Job load_job(const std::string &path) { return load_job(std::vector{path}); }

// Prints the job's report (--json: its JSON; --rank N: that rank's full report, --top,
// --full, --details as `report` takes them). Returns the exit status.
int print_job_report(const job::Job &job, const po::variables_map &vm);

// After `adprof run --torch`: the run read as a job when the traces of the program's children
// hold ranks (`traces`: every trace of the run, the program's among them); nullopt when they
// hold none (then the program's trace was not read: its report reads it once).
std::optional<job::Job> run_as_job(const std::vector<std::string> &traces,
                                   const std::string &program_trace);

// What the process of `trace` is in `job`, for the run's list of its images: "rank 1",
// "launcher", "worker of rank 0", "" for any other process.
std::string role_in_job(const job::Job &job, const std::string &trace);

// Says that the job's report follows (and how to ask for it, or one rank's, again) and prints it.
// Returns the exit status.
int report_run_as_job(const job::Job &job, const std::string &program_trace,
                      const po::variables_map &vm);

}  // namespace adprof::cli
