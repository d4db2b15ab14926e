// adprof diff BASE NEW [--fail-if GATE]... [--markdown|--json]
// adprof diff --base PATH... --new PATH... : two jobs of several machines' folders, rank by rank
// adprof check [--job] TRACE|REPORT|FOLDER... [--max-peak SIZE] [--max-allocs-per-step N]
//              [--max-role ROLE=SIZE]... [--max-device-peak SIZE]
//              [--max-device-role ROLE=SIZE]... [--fail-if GATE]...
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/compare.h"
#include "cli_common.h"
#include "job_cli.h"

namespace adprof::cli {

namespace {

// A job's paths in a message: "'a'" or "'a', 'b'".
std::string quoted(const std::vector<std::string> &paths) {
  std::string out;
  for (const std::string &p : paths) out += (out.empty() ? "'" : ", '") + p + "'";
  return out;
}

// A run (trace or report JSON) for a gate. A gate must never pass on data that could not be
// read: a cut, damaged or incomplete run is an input error (exit 2), unless the user allowed
// it (--allow-incomplete), which turns it into a warning on stderr.
Report load(const std::string &path, bool allow_incomplete) {
  const AnalyzeOptions options = analyze_options_with_progress();
  Report r = load_report(path, options);
  end_progress();
  if (!r.complete && !allow_incomplete)
    throw UsageError("'" + path + "' is incomplete, so no gate is checked (" + r.end_reason +
                     "); --allow-incomplete checks what was read");
  warn_if_incomplete(path, r.complete, r.end_reason);
  return r;
}

constexpr const char *kAllowIncompleteHelp =
    "check a cut, damaged or incomplete run on what was read, with a warning (by default such "
    "a run is an input error, exit 2: a gate never passes on data that could not be read)";

std::vector<Gate> gates_from(const po::variables_map &vm) {
  std::vector<Gate> gates;
  if (vm.count("fail-if"))
    for (const auto &text : vm["fail-if"].as<std::vector<std::string>>()) {
      try {
        gates.push_back(parse_gate(text));
      } catch (const std::invalid_argument &e) {
        throw UsageError(e.what());
      }
    }
  return gates;
}

// The runs' names in a message: each a trace's (or report's) path, a job's rank with it.
struct RunNames {
  std::string base, current;
};

// Each gate on the runs' metrics. A gate the input cannot answer is an input error (exit 2):
// an unknown metric, and a device gate on a run that recorded no device memory, named.
std::vector<GateResult> run_gates(const std::vector<Gate> &gates, const Metrics *base,
                                  const Metrics &current, const RunNames &names) {
  std::vector<GateResult> results;
  for (const Gate &g : gates) {
    try {
      results.push_back(evaluate(g, base, current));
    } catch (const UnrecordedMetric &e) {
      throw UsageError("gate '" + g.text + "' weighs device memory, and " +
                       (e.in_base ? names.base : names.current) +
                       " recorded none (no device block, allocation or reserve: a run on the "
                       "host, or on a device adprof does not see, docs/CUDA.md)");
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
  }
  return results;
}

// Where a value was read (MetricSource): {"step": N or null, "summarized": bool}.
nlohmann::json source_json(const MetricSource &s) {
  return {{"step", s.step >= 0 ? nlohmann::json(s.step) : nlohmann::json(nullptr)},
          {"summarized", s.summarized}};
}

// Each gate: its text, metric, result, values and explanation; for a metric read at a peak,
// where its value was read ("at", and "base_at" in a diff).
nlohmann::json gates_json(const std::vector<GateResult> &results, bool with_base) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto &g : results) {
    nlohmann::json gate = {{"gate", g.gate.text}, {"metric", g.gate.metric},
                           {"failed", g.failed},  {"base", g.base},
                           {"value", g.current},  {"explanation", g.explanation}};
    if (g.sourced) {
      gate["at"] = source_json(g.current_source);
      if (with_base) gate["base_at"] = source_json(g.base_source);
    }
    j.push_back(gate);
  }
  return j;
}

// A diff's rows: metric, base, new; "base_at" and "new_at" for a metric read at a peak.
nlohmann::json rows_json(const ReportDiff &d) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto &r : d.rows) {
    nlohmann::json row = {{"metric", r.metric}, {"base", r.base}, {"new", r.current}};
    if (r.sourced) {
      row["base_at"] = source_json(r.base_source);
      row["new_at"] = source_json(r.current_source);
    }
    rows.push_back(row);
  }
  return rows;
}

bool any_failed(const std::vector<GateResult> &results) {
  for (const auto &g : results)
    if (g.failed) return true;
  return false;
}

constexpr const char *kMetricsHelp =
    "Metrics: peak, allocations, bytes_allocated, temporaries, allocations_per_step,\n"
    "role.ROLE (bytes at the peak: role.duplicate, role.forward_cache, role.adjoint,\n"
    "role.accumulation, ...), phase.PHASE (peak while in forward/backward/optimizer),\n"
    "op.OP (bytes at the peak), op_allocations.OP; device.peak, device.reserved_peak,\n"
    "device.ooms, device.role.ROLE (bytes at the device peak).\n"
    "A gate reads METRIC OP VALUE with OP one of > >= < <= ==; a signed VALUE (+5%, +1MiB,\n"
    "-10) is the change from BASE, an unsigned one (0, 64MiB) the new value itself.\n"
    "A peak in a step outside a step window (adprof run --steps) is named with its step\n"
    "(\"peak: 10.0 MiB in step 7, summarized\"). A device gate on a run that recorded no\n"
    "device memory is an input error (exit 2), not a pass.\n";

// check over a job: every rank holds every gate; a failure names its rank. A rank that was
// not read whole fails the input as one trace does (exit 2), unless --allow-incomplete.
// `paths`: one trace or folder per machine's run (as `report` merges them).
int check_job(const std::vector<Gate> &gates, const std::vector<std::string> &paths,
              const po::variables_map &vm) {
  const job::Job job = load_job(paths);
  const std::vector<size_t> ranks = job.ranks();
  if (ranks.empty())
    throw UsageError(quoted(paths) + " is no job: no process of its run said it is a rank");
  const bool allow_incomplete = vm.count("allow-incomplete") != 0;
  nlohmann::json by_rank = nlohmann::json::array();
  bool failed = false;
  std::string text;
  for (size_t i : ranks) {
    const job::Process &p = job.processes[i];
    const std::string name = "rank " + std::to_string(p.rank);
    if (!p.report.complete && !allow_incomplete)
      throw UsageError(name + "'s trace '" + p.trace + "' is incomplete, so no gate is checked (" +
                       p.report.end_reason + "); --allow-incomplete checks what was read");
    warn_if_incomplete(p.trace, p.report.complete, p.report.end_reason);
    std::vector<GateResult> results = run_gates(gates, nullptr, report_metrics(p.report),
                                                {"", name + "'s trace '" + p.trace + "'"});
    failed |= any_failed(results);
    by_rank.push_back({{"rank", p.rank},
                       {"trace", p.trace},
                       {"gates", gates_json(results, false)},
                       {"failed", any_failed(results)}});
    for (const auto &g : results)
      text += std::string(g.failed ? "FAIL " : "ok   ") + name + ": " + g.explanation + '\n';
  }
  if (vm.count("json"))
    std::cout << json_text(nlohmann::json{{"schema", "adprof.check"},
                                          {"schema_version", 1},
                                          {"ranks", by_rank},
                                          {"failed", failed}})
              << '\n';
  else
    std::cout << text;
  return failed ? kExitCheckFailed : kExitOk;
}

// diff over two jobs: rank by rank (the ranks of both), each rank's diff and gates, a
// failure naming its rank. A rank in one job only is an input error: the jobs differ in shape.
// Each job: one trace or folder per machine's run.
int diff_jobs(const std::vector<Gate> &gates, const std::vector<std::string> &base_paths,
              const std::vector<std::string> &new_paths, const po::variables_map &vm) {
  const job::Job base = load_job(base_paths), current = load_job(new_paths);
  const bool allow_incomplete = vm.count("allow-incomplete") != 0;
  auto rank_list = [](const job::Job &j) {
    std::vector<int64_t> out;
    for (size_t i : j.ranks()) out.push_back(j.processes[i].rank);
    return out;
  };
  if (rank_list(base).empty())
    throw UsageError(quoted(base_paths) + " is no job: no process of its run said it is a rank");
  if (rank_list(base) != rank_list(current)) {
    auto names = [](const std::vector<int64_t> &ranks) {
      std::string out;
      for (int64_t r : ranks) out += (out.empty() ? "" : " ") + std::to_string(r);
      return out.empty() ? std::string("none") : out;
    };
    throw UsageError("the two jobs have different ranks (" + names(rank_list(base)) + "; " +
                     names(rank_list(current)) + ")");
  }
  nlohmann::json by_rank = nlohmann::json::array();
  bool failed = false;
  for (int64_t rank : rank_list(base)) {
    const job::Process &b = *base.rank(rank), &c = *current.rank(rank);
    for (const job::Process *p : {&b, &c}) {
      if (!p->report.complete && !allow_incomplete)
        throw UsageError("rank " + std::to_string(rank) + "'s trace '" + p->trace +
                         "' is incomplete, so no gate is checked (" + p->report.end_reason +
                         "); --allow-incomplete checks what was read");
      warn_if_incomplete(p->trace, p->report.complete, p->report.end_reason);
    }
    const Metrics mb = report_metrics(b.report), mc = report_metrics(c.report);
    const std::string name = "rank " + std::to_string(rank) + "'s trace '";
    std::vector<GateResult> results =
        run_gates(gates, &mb, mc, {name + b.trace + "' (base)", name + c.trace + "' (new)"});
    failed |= any_failed(results);
    ReportDiff d = diff_reports(b.report, c.report);
    if (vm.count("json")) {
      by_rank.push_back({{"rank", rank},
                         {"metrics", rows_json(d)},
                         {"appeared", d.appeared},
                         {"vanished", d.vanished},
                         {"gates", gates_json(results, true)},
                         {"failed", any_failed(results)}});
    } else if (vm.count("markdown")) {
      std::cout << "### rank " << rank << "\n\n" << render_diff_markdown(d, results) << "\n";
    } else {
      std::cout << "== rank " << rank << " (" << b.trace << " -> " << c.trace << ")\n"
                << render_diff_text(d, results) << "\n";
    }
  }
  if (vm.count("json"))
    std::cout << json_text(nlohmann::json{{"schema", "adprof.diff"},
                                          {"schema_version", 1},
                                          {"ranks", by_rank},
                                          {"failed", failed}})
              << '\n';
  return failed ? kExitCheckFailed : kExitOk;
}

}  // namespace

int command_diff(const std::vector<std::string> &args) {
  po::options_description options(
      std::string("usage: adprof diff BASE NEW [--fail-if GATE]... [--markdown | --json]\n\n"
                  "Compares two runs (each a trace or an `adprof report --json` file): peak,\n"
                  "allocations, bytes at the peak by role, op and phase, and what appeared or\n"
                  "vanished at the peak. Exit 0 when every gate passes, 1 when one fails, 2 on\n"
                  "bad input, including a run that is cut, damaged or incomplete (unless\n"
                  "--allow-incomplete).\n"
                  "Two jobs (--job, each a trace of its run, or FOLDERs): rank by rank, each\n"
                  "gate on every rank, a failure naming its rank. A job recorded on several\n"
                  "machines: its machines' folders under one FOLDER, or each named:\n"
                  "  adprof diff --base A/node0 --base A/node1 --new B/node0 --new B/node1\n\n") +
      kMetricsHelp + "\nOptions");
  options.add_options()("help,h", "show this help")(
      "fail-if", po::value<std::vector<std::string>>()->composing(),
      "gate, e.g. 'peak > +5%' or 'role.duplicate > 0' (repeatable)")(
      "markdown", "print a Markdown table (for a pull-request comment)")(
      "json", "print the diff as JSON")("allow-incomplete", kAllowIncompleteHelp)(
      "job", "compare the jobs BASE and NEW belong to, rank by rank")(
      "base", po::value<std::vector<std::string>>()->composing(),
      "base run (repeatable: a job's machines' folders)")(
      "new", po::value<std::vector<std::string>>()->composing(),
      "new run (repeatable: a job's machines' folders)");
  auto parsed = parse_command("diff", args, options, {"base", "new"}, 2);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  std::vector<Gate> gates = gates_from(vm);
  const bool allow_incomplete = vm.count("allow-incomplete") != 0;
  const auto base_paths = vm["base"].as<std::vector<std::string>>();
  const auto new_paths = vm["new"].as<std::vector<std::string>>();
  {
    std::error_code ec;
    if (vm.count("job") || base_paths.size() > 1 || new_paths.size() > 1 ||
        (std::filesystem::is_directory(base_paths[0], ec) &&
         std::filesystem::is_directory(new_paths[0], ec)))
      return diff_jobs(gates, base_paths, new_paths, vm);
  }
  Report base = load(base_paths[0], allow_incomplete);
  Report current = load(new_paths[0], allow_incomplete);
  const Metrics mb = report_metrics(base), mc = report_metrics(current);
  std::vector<GateResult> results =
      run_gates(gates, &mb, mc,
                {"the base run '" + base_paths[0] + "'", "the new run '" + new_paths[0] + "'"});
  ReportDiff d = diff_reports(base, current);
  if (vm.count("json")) {
    std::cout << json_text(nlohmann::json{{"schema", "adprof.diff"},
                                          {"schema_version", 1},
                                          {"metrics", rows_json(d)},
                                          {"appeared", d.appeared},
                                          {"vanished", d.vanished},
                                          {"gates", gates_json(results, true)},
                                          {"failed", any_failed(results)}})
              << '\n';
  } else if (vm.count("markdown")) {
    std::cout << render_diff_markdown(d, results);
  } else {
    std::cout << render_diff_text(d, results);
  }
  return any_failed(results) ? kExitCheckFailed : kExitOk;
}

int command_check(const std::vector<std::string> &args) {
  po::options_description options(
      std::string("usage: adprof check RUN... [--max-peak SIZE] [--max-allocs-per-step N]\n"
                  "                    [--max-role ROLE=SIZE]... [--max-device-peak SIZE]\n"
                  "                    [--max-device-role ROLE=SIZE]... [--fail-if GATE]...\n"
                  "                    [--json]\n\n"
                  "Checks one run (a trace or a report JSON) against absolute budgets. Exit 0\n"
                  "when all hold, 1 when one is exceeded, 2 on bad input, including a run that\n"
                  "is cut, damaged or incomplete (unless --allow-incomplete).\n"
                  "A job (--job TRACE: every trace of TRACE's run; or a FOLDER): every rank must\n"
                  "hold every budget, and each line names its rank. A job recorded on several\n"
                  "machines: one TRACE or FOLDER per machine's run (or their parent FOLDER),\n"
                  "merged by rank as `adprof report` merges them.\n\n") +
      kMetricsHelp + "\nOptions");
  options.add_options()("help,h", "show this help")("max-peak", po::value<std::string>(),
                                                    "budget for peak host bytes, e.g. 64MiB")(
      "max-allocs-per-step", po::value<std::string>(),
      "budget for heap allocations per step after the first (median)")(
      "max-role", po::value<std::vector<std::string>>()->composing(),
      "budget for one role's bytes at the peak, e.g. duplicate=0 (repeatable)")(
      "max-device-peak", po::value<std::string>(), "budget for peak device bytes")(
      "max-device-role", po::value<std::vector<std::string>>()->composing(),
      "budget for one role's bytes at the device peak, e.g. adjoint=2GiB (repeatable)")(
      "fail-if", po::value<std::vector<std::string>>()->composing(),
      "any other gate with an unsigned value, e.g. 'op.cast > 1MiB'")(
      "json", "print the results as JSON")("allow-incomplete", kAllowIncompleteHelp)(
      "job", "check every rank of the job TRACE belongs to")(
      "run", po::value<std::vector<std::string>>(),
      "trace or report; a job's: one per machine's run");
  po::positional_options_description positional;
  positional.add("run", -1);
  const po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    std::cout << options;
    return kExitOk;
  }
  if (!vm.count("run")) throw UsageError("check needs RUN (see adprof check --help)");
  const auto paths = vm["run"].as<std::vector<std::string>>();
  std::vector<Gate> gates = gates_from(vm);
  auto budget = [&](const std::string &metric, const std::string &value) {
    try {
      gates.push_back(parse_gate(metric + " > " + value));
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
  };
  auto size_budget = [&](const std::string &metric, const std::string &value) {
    try {
      parse_bytes(value);  // validates: a size, not a percentage
      budget(metric, value);
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
  };
  if (vm.count("max-peak")) size_budget("peak", vm["max-peak"].as<std::string>());
  if (vm.count("max-device-peak"))
    size_budget("device.peak", vm["max-device-peak"].as<std::string>());
  if (vm.count("max-allocs-per-step")) {
    // The gate's text as a person writes it ("200000", not std::to_string's "200000.000000").
    char limit[32];
    snprintf(limit, sizeof limit, "%.15g", number_option(vm, "max-allocs-per-step", 0, 1e18));
    budget("allocations_per_step", limit);
  }
  // ROLE=SIZE budgets: a role's bytes at the peak (metric role.ROLE) or at the device peak
  // (device.role.ROLE).
  auto role_budgets = [&](const std::string &option, const std::string &metric_prefix) {
    if (!vm.count(option)) return;
    for (const auto &spec : vm[option].as<std::vector<std::string>>()) {
      size_t eq = spec.find('=');
      if (eq == std::string::npos)
        throw UsageError("--" + option + " takes ROLE=SIZE, e.g. duplicate=0 (got '" + spec + "')");
      std::string role = spec.substr(0, eq);
      if (role_from_name(role) < 0) throw UsageError("unknown role '" + role + "'");
      size_budget(metric_prefix + role, spec.substr(eq + 1));
    }
  };
  role_budgets("max-role", "role.");
  role_budgets("max-device-role", "device.role.");
  for (const Gate &g : gates)
    if (g.change) throw UsageError("'" + g.text + "' compares with a base run: use adprof diff");
  if (gates.empty()) throw UsageError("check needs at least one budget (see adprof check --help)");
  {
    std::error_code ec;
    if (vm.count("job") || paths.size() > 1 || std::filesystem::is_directory(paths[0], ec))
      return check_job(gates, paths, vm);
  }
  Report r = load(paths[0], vm.count("allow-incomplete") != 0);
  std::vector<GateResult> results =
      run_gates(gates, nullptr, report_metrics(r), {"", "'" + paths[0] + "'"});
  if (vm.count("json")) {
    std::cout << json_text(nlohmann::json{{"schema", "adprof.check"},
                                          {"schema_version", 1},
                                          {"gates", gates_json(results, false)},
                                          {"failed", any_failed(results)}})
              << '\n';
  } else {
    for (const auto &g : results)
      std::cout << (g.failed ? "FAIL " : "ok   ") << g.explanation << '\n';
  }
  return any_failed(results) ? kExitCheckFailed : kExitOk;
}

}  // namespace adprof::cli
