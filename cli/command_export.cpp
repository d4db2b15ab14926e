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
//               (analysis/torch_snapshot_write.cpp).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "adprof/report.h"
#include "adprof/role_style.h"
#include "adprof/timeline.h"
#include "adprof/torch_snapshot.h"
#include "cli_common.h"

namespace adprof::cli {

namespace {

std::string json_escape(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o;
}

void export_perfetto(const std::string &trace, const std::string &path) {
  TraceReader reader(trace);  // first: an unreadable trace leaves the output untouched
  OutputFile file(path);
  std::ostream &out = file.stream();
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string &event) {
    out << (first ? "" : ",\n") << event;
    first = false;
  };
  char buf[512];
  // Op and phase slices, per thread, in one pass.
  Replay replay;
  Event e;
  std::vector<int> phase_open;
  while (reader.next(e)) {
    replay.apply(e);
    double us = reader.seconds(e.ticks) * 1e6;
    if (e.type == format::EventType::kOpBegin) {
      snprintf(buf, sizeof buf,
               "{\"ph\":\"B\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"name\":\"%s\",\"args\":{"
               "\"instance\":%llu}}",
               e.thread, us, json_escape(replay.op_label(static_cast<uint32_t>(e.a), e.b)).c_str(),
               static_cast<unsigned long long>(e.b));
      emit(buf);
    } else if (e.type == format::EventType::kOpEnd) {
      snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":1,\"tid\":%u,\"ts\":%.3f}", e.thread, us);
      emit(buf);
    } else if (e.type == format::EventType::kPhase) {
      if (e.thread >= phase_open.size()) phase_open.resize(e.thread + 1, 0);
      if (phase_open[e.thread]) {
        snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":2,\"tid\":%u,\"ts\":%.3f}", e.thread, us);
        emit(buf);
        phase_open[e.thread] = 0;
      }
      if (e.operand != ADPROF_PHASE_OTHER) {
        snprintf(buf, sizeof buf, "{\"ph\":\"B\",\"pid\":2,\"tid\":%u,\"ts\":%.3f,\"name\":\"%s\"}",
                 e.thread, us, phase_name(e.operand));
        emit(buf);
        phase_open[e.thread] = 1;
      }
    } else if (e.type == format::EventType::kStep) {
      snprintf(buf, sizeof buf,
               "{\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":0,\"ts\":%.3f,\"name\":\"step %llu\"}",
               us, static_cast<unsigned long long>(e.a));
      emit(buf);
    }
  }
  // Close what is still open at the end of the trace (a cut trace).
  double end_us = reader.seconds(e.ticks) * 1e6;
  for (uint32_t t = 0; t < phase_open.size(); ++t)
    if (phase_open[t]) {
      snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":2,\"tid\":%u,\"ts\":%.3f}", t, end_us);
      emit(buf);
    }
  // Counter track: live bytes by role (thinned, peaks kept).
  reader.rewind();
  TimelineOptions topt;
  topt.max_samples = 20000;
  Timeline tl = build_timeline(reader, topt);
  for (const TimelineSample &s : tl.samples) {
    // Stacked in the order of the GUI and the SVG (role_style.h); the JSON trace format has no
    // field for a colour of one's own (only cname's fixed names), so the viewer picks those.
    std::string args;
    for (int r : role_stack_order())
      args += std::string(args.empty() ? "" : ",") + "\"" + role_name(r) +
              "\":" + std::to_string(s.by_role[r]);
    snprintf(buf, sizeof buf,
             "{\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,\"name\":\"live bytes by role\",\"args\":{",
             s.time * 1e6);
    emit(std::string(buf) + args + "}}");
  }
  // Recorded with call stacks: the largest buffers live at the peak, each an instant event at
  // its allocation on a track of its own, with its site and call stack in its arguments.
  if (reader.header().stacks()) {
    const Report r = analyze(trace, analyze_options_with_progress());
    end_progress();
    std::map<std::string, const SiteSummary *> sites;
    for (const SiteSummary &s : r.sites) sites[s.site] = &s;
    constexpr size_t kMaxBuffers = 1000;
    for (size_t i = 0; i < r.live_at_peak.size() && i < kMaxBuffers; ++i) {
      const LiveBuffer &b = r.live_at_peak[i];
      std::string stack;
      if (auto it = sites.find(b.site); it != sites.end())
        for (const std::string &frame : it->second->stack)
          stack += (stack.empty() ? "" : "\n") + frame;
      snprintf(buf, sizeof buf,
               "{\"ph\":\"i\",\"s\":\"t\",\"pid\":3,\"tid\":%u,\"ts\":%.3f,\"name\":\"%s\","
               "\"args\":{\"bytes\":%llu,\"role\":\"%s\",\"op\":\"%s\",",
               b.thread, b.alloc_time * 1e6, format_bytes(b.size).c_str(),
               static_cast<unsigned long long>(b.size), json_escape(b.role).c_str(),
               json_escape(b.op).c_str());
      emit(std::string(buf) + "\"site\":\"" + json_escape(b.site) + "\",\"stack\":\"" +
           json_escape(stack) + "\"}}");
    }
    emit(
        "{\"ph\":\"M\",\"pid\":3,\"name\":\"process_name\",\"args\":{\"name\":\"live at the "
        "peak (allocations, with stacks)\"}}");
  }
  emit("{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"ops\"}}");
  emit("{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"phases\"}}");
  for (uint32_t t = 0; t < replay.thread_names().size(); ++t) {
    snprintf(
        buf, sizeof buf,
        "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}",
        t, json_escape(replay.thread_names()[t]).c_str());
    emit(buf);
  }
  out << "\n]}\n";
  warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  file.commit();
}

void export_folded(const std::string &trace, const std::string &path) {
  AnalyzeOptions options = analyze_options_with_progress();
  options.folded_stacks = true;
  Report r = analyze(trace, options);
  end_progress();
  warn_if_incomplete(trace, r.complete, r.end_reason);
  if (r.stacks) {  // recorded with call stacks: the real frames, outermost first
    std::string text;
    for (const auto &[frames, bytes] : r.peak_stacks)
      text += frames + ' ' + std::to_string(bytes) + '\n';
    write_file(path, text);
    return;
  }
  std::map<std::string, uint64_t> stacks;
  for (const LiveBuffer &b : r.live_at_peak) {
    std::string op = b.op;
    if (auto hash = op.find('#'); hash != std::string::npos) op.resize(hash);
    std::string frame = b.phase + ";" + op + ";" + b.role;
    if (!b.label.empty()) frame += ";" + b.label;
    std::replace(frame.begin(), frame.end(), ' ', '_');
    stacks[frame] += b.size;
  }
  std::string text;
  for (const auto &[frame, bytes] : stacks) text += frame + ' ' + std::to_string(bytes) + '\n';
  write_file(path, text);
}

void export_torch_snapshot(const std::string &trace, const std::string &path) {
  {
    TraceReader reader(trace);  // first: an unreadable trace leaves the output untouched
    warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  }
  SnapshotExportStats stats;
  const std::string bytes = write_torch_snapshot(trace, &stats);
  write_file(path, bytes);
  fprintf(stderr, "adprof: wrote %s: %llu allocations, %llu trace entries, %u device trace%s\n",
          path.c_str(), static_cast<unsigned long long>(stats.allocations),
          static_cast<unsigned long long>(stats.entries), stats.devices,
          stats.devices == 1 ? "" : "s");
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
  if (vm.count("perfetto")) export_perfetto(trace, vm["perfetto"].as<std::string>());
  if (vm.count("folded")) export_folded(trace, vm["folded"].as<std::string>());
  if (vm.count("torch-snapshot"))
    export_torch_snapshot(trace, vm["torch-snapshot"].as<std::string>());
  return kExitOk;
}

}  // namespace adprof::cli
