// The job report (job.h) as text and as JSON.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adprof/job.h"

namespace adprof::job {

namespace {

void add(std::string &o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void add(std::string &o, const char *fmt, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  o += buffer;
}

std::string number_or_dash(int64_t v) { return v < 0 ? "-" : std::to_string(v); }

// The roles of a ranks' table: those holding 1% of some rank's peak (PEAK_OF: its host or its
// device peak) or more, most bytes (summed over the ranks) first; the others are summed in one
// column ("rest").
std::vector<int> roles_of(const Job &job, TracePeak (*peak_of)(const Report &), bool *rest) {
  std::array<uint64_t, kRoleCount> sum{};
  std::array<bool, kRoleCount> shown{};
  for (size_t i : job.ranks()) {
    const TracePeak peak = peak_of(job.processes[i].report);
    for (int role = 0; role < kRoleCount; ++role) {
      sum[role] += peak.by_role[role];
      shown[role] =
          shown[role] || (peak.by_role[role] > 0 && peak.by_role[role] * 100 >= peak.bytes);
    }
  }
  std::vector<int> roles;
  *rest = false;
  for (int role : roles_most_first(sum)) {
    if (shown[role])
      roles.push_back(role);
    else
      *rest = true;
  }
  return roles;
}

// A ranks' table's role columns' heads (at least 10 wide) and the "rest" column's.
std::string role_heads(const std::vector<int> &roles, bool rest) {
  std::string head;
  for (int role : roles) {
    char cell[40];
    snprintf(cell, sizeof cell, "  %*s",
             std::max<int>(10, static_cast<int>(strlen(role_name(role)))), role_name(role));
    head += cell;
  }
  if (rest) head += "        rest";
  return head;
}

// The ranks' device peaks: one row each, the roles holding 1% of some rank's device peak or
// more (most bytes first), the rest summed. A step window's summaries carry no device figures:
// the device peak is that of the events recorded in full.
void add_device_table(std::string &o, const Job &job, const std::vector<size_t> &ranks) {
  bool rest = false;
  const std::vector<int> roles = roles_of(job, trace_device_peak, &rest);
  add(o, "\nEach rank at its own device peak (device memory; bytes by role):\n");
  std::string head = "  rank  device peak  at       step    reserved" + role_heads(roles, rest);
  o += head + "\n";
  for (size_t i : ranks) {
    const Process &p = job.processes[i];
    const TracePeak peak = trace_device_peak(p.report);
    add(o, "  %-4lld  %11s  %7.3f s  %4s  %10s", static_cast<long long>(p.rank),
        format_bytes(peak.bytes).c_str(), peak.time, number_or_dash(peak.step).c_str(),
        format_bytes(p.report.device_reserved_peak).c_str());
    for (int role : roles)
      add(o, "  %*s", std::max<int>(10, static_cast<int>(strlen(role_name(role)))),
          format_bytes(peak.by_role[role]).c_str());
    if (rest) {
      uint64_t other = peak.bytes;
      for (int role : roles) other -= std::min(other, peak.by_role[role]);
      add(o, "  %10s", format_bytes(other).c_str());
    }
    o += "\n";
  }
  for (size_t i : ranks)
    if (job.processes[i].report.step_window) {
      add(o,
          "  Under a step window (--steps) the device peak is that of the events recorded in "
          "full: a folded step's summary has host figures only.\n");
      break;
    }
}

std::string ratio(uint64_t high, uint64_t low) {
  char text[32];
  snprintf(text, sizeof text, "%.1fx", static_cast<double>(high) / static_cast<double>(low));
  return text;
}

// Where a process's peak is, when its trace holds it in a summarized step only: "step 7,
// summarized" (after `before`); "" otherwise.
std::string summarized_at(const TracePeak &peak, const char *before) {
  return peak.summarized ? before + ("step " + std::to_string(peak.step)) + ", summarized" : "";
}

uint64_t workers_peak(const Job &job, int64_t rank) {
  uint64_t sum = 0;
  for (size_t i : job.workers_of(rank)) sum += trace_peak(job.processes[i].report).bytes;
  return sum;
}

}  // namespace

namespace {

// One memory's outlier in words: "Highest peak: rank 1, ..." (host) or "Highest device peak:
// rank 1, ..." and the role's line under it.
void add_outlier(std::string &o, const Job &job, const Outlier &out) {
  const bool device = out.memory == Memory::kDevice;
  const Process &high = job.processes[out.high], &low = job.processes[out.low];
  const TracePeak high_peak = device ? trace_device_peak(high.report) : trace_peak(high.report);
  const TracePeak low_peak = device ? trace_device_peak(low.report) : trace_peak(low.report);
  if (high_peak.bytes == low_peak.bytes) {
    add(o, "The ranks%s peak alike: %s each.\n", device ? "' device memory" : "",
        format_bytes(high_peak.bytes).c_str());
    return;
  }
  if (low_peak.bytes == 0)  // a rank with no device memory: no ratio to say
    add(o, "Highest %speak: rank %lld, %s (rank %lld none).\n", device ? "device " : "",
        static_cast<long long>(high.rank), format_bytes(high_peak.bytes).c_str(),
        static_cast<long long>(low.rank));
  else
    add(o, "Highest %speak: rank %lld, %s%s (%s rank %lld's, the lowest%s).\n",
        device ? "device " : "", static_cast<long long>(high.rank),
        format_bytes(high_peak.bytes).c_str(), summarized_at(high_peak, " in ").c_str(),
        ratio(high_peak.bytes, low_peak.bytes).c_str(), static_cast<long long>(low.rank),
        summarized_at(low_peak, ", in ").c_str());
  const char *where = device ? " on the device" : "";
  if (out.role >= 0 && out.low_bytes > 0)
    add(o, "  rank %lld: %s%s %s rank %lld's (%s against %s)\n", static_cast<long long>(high.rank),
        role_words(out.role), where, ratio(out.high_bytes, out.low_bytes).c_str(),
        static_cast<long long>(low.rank), format_bytes(out.high_bytes).c_str(),
        format_bytes(out.low_bytes).c_str());
  else if (out.role >= 0)
    add(o, "  rank %lld: %s%s %s, rank %lld none\n", static_cast<long long>(high.rank),
        role_words(out.role), where, format_bytes(out.high_bytes).c_str(),
        static_cast<long long>(low.rank));
}

}  // namespace

std::string outlier_text(const Job &job) {
  std::string o;
  for (Memory memory : {Memory::kHost, Memory::kDevice})
    if (const auto out = job.outlier(memory)) add_outlier(o, job, *out);
  return o;
}

std::string render_text(const Job &job) {
  std::string o;
  const std::vector<size_t> ranks = job.ranks();
  size_t counts[4] = {};
  for (const Process &p : job.processes) ++counts[static_cast<int>(p.kind)];
  if (job.run_ids.size() > 1) {
    add(o, "adprof job: %zu runs (", job.run_ids.size());
    for (size_t i = 0; i < job.run_ids.size(); ++i) add(o, "%s%08x", i ? ", " : "", job.run_ids[i]);
    add(o, "), %zu rank%s", ranks.size(), ranks.size() == 1 ? "" : "s");
  } else {
    add(o, "adprof job: run %08x, %zu rank%s", job.run_id, ranks.size(),
        ranks.size() == 1 ? "" : "s");
  }
  if (!ranks.empty() && job.processes[ranks[0]].world_size >= 0)
    add(o, " (world size %lld)", static_cast<long long>(job.processes[ranks[0]].world_size));
  add(o, ", %zu launcher%s, %zu worker%s, %zu other process%s\n", counts[1],
      counts[1] == 1 ? "" : "s", counts[2], counts[2] == 1 ? "" : "s", counts[3],
      counts[3] == 1 ? "" : "es");
  if (ranks.empty()) {
    add(o,
        "  No process of this run said it is a rank (the \"job.rank\" fact, "
        "adprof/job_facts.h).\n");
  } else {
    bool rest = false;
    const std::vector<int> roles = roles_of(job, trace_peak, &rest);
    add(o, "\nEach rank at its own peak (host memory; bytes by role):\n");
    std::string head =
        "  rank  node  pid       peak        at       step" + role_heads(roles, rest);
    head += "  steps  workers (peaks)\n";
    o += head;
    bool any_summarized = false;
    for (size_t i : ranks) {
      const Process &p = job.processes[i];
      const Report &r = p.report;
      const TracePeak peak = trace_peak(r);
      any_summarized = any_summarized || peak.summarized;
      // A peak in a summarized step: its number starred (the note under the table).
      const std::string step = number_or_dash(peak.step) + (peak.summarized ? "*" : "");
      add(o, "  %-4lld  %-4s  %-8llu  %10s  %7.3f s  %4s", static_cast<long long>(p.rank),
          number_or_dash(p.node).c_str(), static_cast<unsigned long long>(p.pid),
          format_bytes(peak.bytes).c_str(), peak.time, step.c_str());
      for (int role : roles)
        add(o, "  %*s", std::max<int>(10, static_cast<int>(strlen(role_name(role)))),
            format_bytes(peak.by_role[role]).c_str());
      if (rest) {
        uint64_t other = peak.bytes;
        for (int role : roles) other -= std::min(other, peak.by_role[role]);
        add(o, "  %10s", format_bytes(other).c_str());
      }
      const size_t workers = job.workers_of(p.rank).size();
      add(o, "  %5zu  %zu", r.steps.size(), workers);
      if (workers) add(o, " (%s)", format_bytes(workers_peak(job, p.rank)).c_str());
      o += "\n";
      if (!r.complete) add(o, "        WARNING: %s\n", r.end_reason.c_str());
    }
    if (any_summarized)
      add(o,
          "  *: the peak is in a step outside the step window (--steps): the writer's summary "
          "of that step (its bytes by role; no buffers, labels or ops)\n");
    if (job.ranks_hold_device_memory()) add_device_table(o, job, ranks);
    if (const std::string words = outlier_text(job); !words.empty()) o += "\n" + words;
    // A rank whose memory grows from step to step (its report's growth finding: a leak).
    for (size_t i : ranks)
      for (const Finding &f : job.processes[i].report.findings)
        if (f.kind == "growth")
          add(o, "Rank %lld grows: %s\n", static_cast<long long>(job.processes[i].rank),
              f.message.c_str());
  }
  bool titled = false;
  for (const Process &p : job.processes) {
    if (p.kind == Kind::kRank) continue;
    if (!titled) {
      add(o, "\nThe other processes of the run%s (their memory is their own, in no rank's):\n",
          job.run_ids.size() > 1 ? "s" : "");
      titled = true;
    }
    std::string what = kind_name(p.kind);
    if (p.kind == Kind::kWorker) what += " of rank " + std::to_string(p.worker_of);
    const TracePeak peak = trace_peak(p.report);
    add(o, "  %-18s pid %-8llu peak %10s  %s%s\n", what.c_str(),
        static_cast<unsigned long long>(p.pid), format_bytes(peak.bytes).c_str(), p.trace.c_str(),
        (peak.summarized ? " (in " + summarized_at(peak, "") + ")" : "").c_str());
  }
  if (!ranks.empty()) {
    add(o, "\nTraces by rank:\n");
    for (size_t i : ranks)
      add(o, "  rank %lld  %s\n", static_cast<long long>(job.processes[i].rank),
          job.processes[i].trace.c_str());
    if (job.run_ids.size() == 1)
      add(o, "One rank's full report: adprof report --rank N %s\n",
          job.processes[ranks[0]].trace.c_str());
    else
      add(o, "One rank's full report: adprof report --rank N with the runs' paths, or its file\n");
  }
  return o;
}

nlohmann::json to_json(const Job &job, const JsonOptions &options) {
  using nlohmann::json;
  auto optional_number = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  auto by_role = [](const TracePeak &peak) {
    json j = json::object();
    for (int role = 0; role < kRoleCount; ++role) j[role_name(role)] = peak.by_role[role];
    return j;
  };
  auto brief = [&](const Process &p) {
    const TracePeak peak = trace_peak(p.report);
    json j = {{"kind", kind_name(p.kind)},
              {"pid", p.pid},
              {"parent", p.said_process ? json(p.parent) : json(nullptr)},
              {"trace", p.trace},
              {"peak", peak.bytes},
              {"peak_time", peak.time},
              {"peak_step", optional_number(peak.step)},
              {"peak_summarized", peak.summarized},
              {"device_peak", p.report.device_peak},
              {"complete", p.report.complete}};
    if (p.kind == Kind::kWorker) j["worker_of"] = p.worker_of;
    if (p.kind == Kind::kRank) j["rank"] = p.rank;
    return j;
  };
  json ranks = json::array();
  for (size_t i : job.ranks()) {
    const Process &p = job.processes[i];
    const TracePeak peak = trace_peak(p.report), device = trace_device_peak(p.report);
    json workers = json::array();
    for (size_t w : job.workers_of(p.rank)) workers.push_back(brief(job.processes[w]));
    ranks.push_back({{"rank", p.rank},
                     {"world_size", optional_number(p.world_size)},
                     {"local_rank", optional_number(p.local_rank)},
                     {"local_world_size", optional_number(p.local_world_size)},
                     {"node", optional_number(p.node)},
                     {"host", p.host},
                     {"job", p.job},
                     {"run_id", p.run_id},
                     {"pid", p.pid},
                     {"parent", p.said_process ? json(p.parent) : json(nullptr)},
                     {"trace", p.trace},
                     {"peak", peak.bytes},
                     {"peak_time", peak.time},
                     {"peak_step", optional_number(peak.step)},
                     {"peak_summarized", peak.summarized},
                     {"peak_by_role", by_role(peak)},
                     {"device_peak", device.bytes},
                     {"device_peak_time", device.time},
                     {"device_peak_step", optional_number(device.step)},
                     {"device_reserved_peak", p.report.device_reserved_peak},
                     {"device_peak_by_role", by_role(device)},
                     {"steps", p.report.steps.size()},
                     {"workers", workers},
                     {"workers_peak", workers_peak(job, p.rank)},
                     {"report", to_json(p.report, options)}});
  }
  auto outlier_json = [&](const std::optional<Outlier> &out) {
    if (!out) return json(nullptr);
    return json{{"memory", memory_name(out->memory)},
                {"rank", job.processes[out->high].rank},
                {"lowest_rank", job.processes[out->low].rank},
                {"peak", out->high_peak},
                {"lowest_peak", out->low_peak},
                {"role", out->role >= 0 ? json(role_name(out->role)) : json(nullptr)},
                {"role_bytes", out->high_bytes},
                {"lowest_role_bytes", out->low_bytes}};
  };
  json processes = json::array();
  for (const Process &p : job.processes) processes.push_back(brief(p));
  return {{"schema", "adprof.job"},
          {"schema_version", 1},
          {"run_id", job.run_id},
          {"run_ids", job.run_ids},
          {"ranks", ranks},
          {"outlier", outlier_json(job.outlier())},
          {"host_outlier", outlier_json(job.outlier(Memory::kHost))},
          {"device_outlier", outlier_json(job.outlier(Memory::kDevice))},
          {"processes", processes}};
}

}  // namespace adprof::job
