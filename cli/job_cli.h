// What the commands share about jobs of several processes (adprof/job.h): the Python bootstrap
// `adprof run --torch` puts on PYTHONPATH, and the job report of `report`, `run` and `check`.
#pragma once

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

// After `adprof run --torch`: when the traces of the program's children hold ranks, says so and
// prints the job's report (`traces`: every trace of the run, the program's among them); returns
// false (nothing printed) when they hold none.
bool report_run_as_job(const std::vector<std::string> &traces, const std::string &program_trace,
                       const po::variables_map &vm);

}  // namespace adprof::cli
