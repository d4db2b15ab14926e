// adprof export TRACE --perfetto FILE | --folded FILE | --torch-snapshot FILE
//   --perfetto: Chrome trace event JSON (opens in ui.perfetto.dev and chrome://tracing): a counter
//               track of live bytes per role, op slices per thread, phase slices; for a trace
//               recorded with --stacks, the largest buffers live at the peak as instant events
//               at their allocation, with site and call stack.
//   --folded:   folded stacks of live bytes at the peak, "phase;op;role bytes" per line, the
//               input of flamegraph.pl, inferno and speedscope; for a trace recorded with
//               --stacks, the allocations' real frames, "main;f;g bytes".
//   --torch-snapshot: a PyTorch memory snapshot (pickle, protocol 4) for pytorch.org/memory_viz
//               and `python -m torch.cuda._memory_viz`, categories = adprof's roles
//               (analysis/torch_snapshot/torch_snapshot_write.cpp).
// All three are the analysis library's (adprof/exports.h), made in one pass over the trace.
#include <cstdio>
#include <optional>

#include "adprof/exports.h"
#include "cli_common.h"

namespace adprof::cli {

namespace {

// Every export asked for in one pass of the analysis library (adprof/exports.h).
void export_in_one_pass(const std::string &trace, const std::optional<std::string> &perfetto_path,
                        const std::optional<std::string> &folded_path,
                        const std::optional<std::string> &snapshot_path) {
  TraceReader reader(trace);  // first: an unreadable trace leaves the outputs untouched
  std::optional<OutputFile> perfetto, folded, snapshot;
  ExportStreams streams;
  if (perfetto_path) streams.perfetto = &perfetto.emplace(*perfetto_path).stream();
  if (folded_path) streams.folded = &folded.emplace(*folded_path).stream();
  if (snapshot_path) streams.torch_snapshot = &snapshot.emplace(*snapshot_path).stream();
  const AnalyzeOptions progress = analyze_options_with_progress();
  ExportOptions options;
  options.progress = progress.progress;
  options.stage_progress = progress.stage_progress;
  const ExportSummary summary = write_exports(reader, trace, streams, options);
  end_progress();
  warn_if_incomplete(trace, summary.complete, summary.end_reason);
  if (perfetto) perfetto->commit();
  if (folded) folded->commit();
  if (snapshot) {
    snapshot->commit();
    const SnapshotExportStats &stats = summary.torch_snapshot;
    fprintf(stderr, "adprof: wrote %s: %llu allocations, %llu trace entries, %u device trace%s\n",
            snapshot_path->c_str(), static_cast<unsigned long long>(stats.allocations),
            static_cast<unsigned long long>(stats.entries), stats.devices,
            stats.devices == 1 ? "" : "s");
  }
}

}  // namespace

int command_export(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof export TRACE [--perfetto FILE] [--folded FILE] [--torch-snapshot FILE]\n\n"
      "--perfetto writes Chrome trace event JSON (ui.perfetto.dev, chrome://tracing): live bytes\n"
      "by role as counters, op and phase slices per thread, step marks.\n"
      "--folded writes the live bytes at the peak as folded stacks (phase;op;role[;label] BYTES)\n"
      "for flamegraph.pl, inferno or speedscope; for a trace recorded with `run --stacks`, the\n"
      "allocations' call stacks (outermost;...;innermost BYTES).\n"
      "--torch-snapshot writes a PyTorch memory snapshot (pickle, protocol 4) for\n"
      "pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`: every allocation and free,\n"
      "category = the buffer's adprof role, frames = its label (module path), op and call stack;\n"
      "device 0 is the GPU when the trace has device memory (the host heap follows the GPUs),\n"
      "the host heap otherwise (docs/PYTORCH.md, \"Snapshots\").\n"
      "TRACE may be an adprof trace or a PyTorch snapshot.\n\nOptions");
  options.add_options()("help,h", "show this help")("perfetto", po::value<std::string>(),
                                                    "Chrome/Perfetto trace JSON output")(
      "folded", po::value<std::string>(), "folded stacks output")(
      "torch-snapshot", po::value<std::string>(), "PyTorch memory snapshot output (.pickle)")(
      "trace", po::value<std::string>(), "trace");
  auto parsed = parse_command("export", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  if (!vm.count("perfetto") && !vm.count("folded") && !vm.count("torch-snapshot"))
    throw UsageError("export needs --perfetto FILE, --folded FILE or --torch-snapshot FILE");
  std::string trace = vm["trace"].as<std::string>();
  std::optional<std::string> perfetto, folded, snapshot;
  if (vm.count("perfetto")) perfetto = vm["perfetto"].as<std::string>();
  if (vm.count("folded")) folded = vm["folded"].as<std::string>();
  if (vm.count("torch-snapshot")) snapshot = vm["torch-snapshot"].as<std::string>();
  export_in_one_pass(trace, perfetto, folded, snapshot);
  return kExitOk;
}

}  // namespace adprof::cli
