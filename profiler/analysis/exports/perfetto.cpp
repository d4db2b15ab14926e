#include "perfetto.h"

#include <cstdio>
#include <map>

#include "adprof/role_style.h"
#include "json_escape.h"

namespace adprof {

PerfettoWriter::PerfettoWriter(std::ostream &out, const TraceReader &reader, const Replay &replay)
    : out_(out), reader_(reader), replay_(replay) {
  out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
}

void PerfettoWriter::emit(const std::string &event) {
  out_ << (first_ ? "" : ",\n") << event;
  first_ = false;
}

void PerfettoWriter::on_event(const Event &e) {
  last_ticks_ = e.ticks;
  if (e.type != format::EventType::kOpBegin && e.type != format::EventType::kOpEnd &&
      e.type != format::EventType::kPhase && e.type != format::EventType::kStep)
    return;
  char buf[512];
  const double us = reader_.seconds(e.ticks) * 1e6;
  if (e.type == format::EventType::kOpBegin) {
    // Names are appended, not formatted into buf: a label may be up to kMaxNameBytes long.
    snprintf(buf, sizeof buf, "{\"ph\":\"B\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"name\":\"",
             e.thread, us);
    emit(std::string(buf) + json_escape(replay_.op_label(static_cast<uint32_t>(e.a), e.b)) +
         "\",\"args\":{\"instance\":" + std::to_string(e.b) + "}}");
  } else if (e.type == format::EventType::kOpEnd) {
    snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":1,\"tid\":%u,\"ts\":%.3f}", e.thread, us);
    emit(buf);
  } else if (e.type == format::EventType::kPhase) {
    if (e.thread >= phase_open_.size()) phase_open_.resize(e.thread + 1, 0);
    if (phase_open_[e.thread]) {
      snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":2,\"tid\":%u,\"ts\":%.3f}", e.thread, us);
      emit(buf);
      phase_open_[e.thread] = 0;
    }
    if (e.operand != ADPROF_PHASE_OTHER) {
      snprintf(buf, sizeof buf, "{\"ph\":\"B\",\"pid\":2,\"tid\":%u,\"ts\":%.3f,\"name\":\"%s\"}",
               e.thread, us, phase_name(e.operand));
      emit(buf);
      phase_open_[e.thread] = 1;
    }
  } else {  // a step
    snprintf(buf, sizeof buf,
             "{\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":0,\"ts\":%.3f,\"name\":\"step %llu\"}",
             us, static_cast<unsigned long long>(e.a));
    emit(buf);
  }
}

void PerfettoWriter::finish(const Timeline &counter, const Report *report) {
  char buf[512];
  // Close what is still open at the end of the trace (a cut trace).
  const double end_us = reader_.seconds(last_ticks_) * 1e6;
  for (uint32_t t = 0; t < phase_open_.size(); ++t)
    if (phase_open_[t]) {
      snprintf(buf, sizeof buf, "{\"ph\":\"E\",\"pid\":2,\"tid\":%u,\"ts\":%.3f}", t, end_us);
      emit(buf);
    }
  // Counter track: live bytes by role (thinned, peaks kept).
  for (const TimelineSample &s : counter.samples) {
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
  if (report) {
    std::map<std::string, const SiteSummary *> sites;
    for (const SiteSummary &s : report->sites) sites[s.site] = &s;
    for (size_t i = 0; i < report->live_at_peak.size() && i < kMaxBuffers; ++i) {
      const LiveBuffer &b = report->live_at_peak[i];
      std::string stack;
      if (auto it = sites.find(b.site); it != sites.end())
        for (const std::string &frame : it->second->stack)
          stack += (stack.empty() ? "" : "\n") + frame;
      snprintf(buf, sizeof buf,
               "{\"ph\":\"i\",\"s\":\"t\",\"pid\":3,\"tid\":%u,\"ts\":%.3f,\"name\":\"%s\","
               "\"args\":{\"bytes\":%llu,\"role\":\"",
               b.thread, b.alloc_time * 1e6, format_bytes(b.size).c_str(),
               static_cast<unsigned long long>(b.size));
      emit(std::string(buf) + json_escape(b.role) + "\",\"op\":\"" + json_escape(b.op) +
           "\",\"site\":\"" + json_escape(b.site) + "\",\"stack\":\"" + json_escape(stack) +
           "\"}}");
    }
    emit(
        "{\"ph\":\"M\",\"pid\":3,\"name\":\"process_name\",\"args\":{\"name\":\"live at the "
        "peak (allocations, with stacks)\"}}");
  }
  emit("{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"ops\"}}");
  emit("{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"phases\"}}");
  for (uint32_t t = 0; t < replay_.thread_names().size(); ++t) {
    snprintf(buf, sizeof buf,
             "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"",
             t);
    emit(std::string(buf) + json_escape(replay_.thread_names()[t]) + "\"}}");
  }
  out_ << "\n]}\n";
}

}  // namespace adprof
