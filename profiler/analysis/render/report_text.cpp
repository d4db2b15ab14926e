// The report as the terminal shows it: what AD added at the peak first, then the findings,
// then the breakdowns.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "adprof/report.h"
#include "adprof/snapshot.h"
#include "sites_render.h"

namespace adprof {

namespace {

void add(std::string &out, const char *format, ...) __attribute__((format(printf, 2, 3)));
void add(std::string &out, const char *format, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, format);
  vsnprintf(line, sizeof line, format, ap);
  va_end(ap);
  out += line;
}

double pct(uint64_t part, uint64_t whole) { return whole ? 100.0 * part / whole : 0.0; }

std::string count(uint64_t n) {  // 1234567 -> "1,234,567"
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string shape_text(const std::vector<int64_t> &shape) {
  std::string s = "[";
  // Appends only: GCC 12's -O3 warns (-Wrestrict, a false positive) on "x" + std::string.
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

// Rows of (label, bytes, share of `total`, buffers), the first kShown and the rest summed in
// one row; `with_role` puts each row's role after its label.
void add_label_rows(std::string &o, const std::vector<const LabelBytes *> &rows, uint64_t total,
                    bool with_role) {
  constexpr size_t kShown = 5;
  size_t width = 24;
  for (size_t i = 0; i < rows.size() && i < kShown; ++i)
    width = std::max(width, rows[i]->label.size());
  for (size_t i = 0; i < rows.size() && i < kShown; ++i) {
    const LabelBytes &l = *rows[i];
    add(o, "      %-*s ", static_cast<int>(width),
        l.label.empty() ? "(unlabelled)" : l.label.c_str());
    if (with_role) add(o, "%-15s ", l.role.c_str());
    add(o, "%12s  %5.1f%%  %s buffer%s\n", format_bytes(l.bytes).c_str(), pct(l.bytes, total),
        count(l.buffers).c_str(), l.buffers == 1 ? "" : "s");
  }
  if (rows.size() > kShown) {
    uint64_t bytes = 0, buffers = 0;
    for (size_t i = kShown; i < rows.size(); ++i) {
      bytes += rows[i]->bytes;
      buffers += rows[i]->buffers;
    }
    const std::string more = std::to_string(rows.size() - kShown) + " more labels";
    add(o, "      %-*s ", static_cast<int>(width), more.c_str());
    if (with_role) add(o, "%-15s ", "");
    add(o, "%12s  %5.1f%%  %s buffer%s\n", format_bytes(bytes).c_str(), pct(bytes, total),
        count(buffers).c_str(), buffers == 1 ? "" : "s");
  }
}

// Under a role's line: the labels its buffers carry, most bytes first. Nothing when none of
// them is labelled (the role's line says it all).
void add_labels_of_role(std::string &o, const Report &r, const char *role) {
  std::vector<const LabelBytes *> rows;
  bool any_label = false;
  for (const LabelBytes &l : r.peak_by_label)
    if (l.role == role) {
      rows.push_back(&l);  // peak_by_label is sorted: most bytes first
      any_label |= !l.label.empty();
    }
  if (any_label) add_label_rows(o, rows, r.peak, false);
}

// Under the foreign bytes made after start-up: the part threads other than the process's first
// made, by their name (a library's worker pool allocating outside every op).
void add_foreign_threads(std::string &o, const Report &r) {
  const std::vector<ThreadNameBytes> &t = r.peak_foreign_after_start_up_by_other_threads;
  constexpr size_t kShown = 3;
  uint64_t rest = 0, rest_threads = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (i >= kShown && t.size() > kShown + 1) {
      rest += t[i].bytes;
      rest_threads += t[i].threads;
      continue;
    }
    const std::string name = "on " + (t[i].name.empty() ? std::string("(unnamed)") : t[i].name);
    add(o, "        %-22.22s %12s  %5.1f%%  %u thread%s\n", name.c_str(),
        format_bytes(t[i].bytes).c_str(), pct(t[i].bytes, r.peak), t[i].threads,
        t[i].threads == 1 ? "" : "s");
  }
  if (rest_threads)
    add(o, "        %-22s %12s  %5.1f%%  %llu threads\n", "on other names",
        format_bytes(rest).c_str(), pct(rest, r.peak),
        static_cast<unsigned long long>(rest_threads));
}

// Under the device peak's line: its bytes by (label, role), most first. Nothing when no device
// block live at the peak is labelled.
void add_device_labels(std::string &o, const Report &r) {
  std::vector<const LabelBytes *> rows;
  bool any_label = false;
  for (const LabelBytes &l : r.device_peak_by_label) {
    rows.push_back(&l);
    any_label |= !l.label.empty();
  }
  if (!any_label) return;
  add(o, "    by label at the device peak:\n");
  add_label_rows(o, rows, r.device_peak, true);
}

}  // namespace

std::vector<int> roles_most_first(const std::array<uint64_t, kRoleCount> &bytes) {
  std::vector<int> roles;
  for (int k = 0; k < kRoleCount; ++k)
    if (bytes[k]) roles.push_back(k);
  std::stable_sort(roles.begin(), roles.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
  return roles;
}

std::string format_bytes(uint64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char text[32];
  if (u == 0)
    snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  else
    snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return text;
}

// The step whose span holds the peak (its number), or -1 when none does (the peak before the
// first step, between two, or a run with no steps).
static int64_t step_at(const Report &r, double time) {
  for (const StepSummary &s : r.steps)
    if (time >= s.start && time <= s.end) return static_cast<int64_t>(s.step);
  return -1;
}

// A trace recorded with a step window: which steps were recorded in full, and every step's
// peak as a sparkline (each character the highest peak of its share of the steps) with the
// highest step named.
static void render_step_window(std::string &o, const Report &r) {
  size_t summarized = 0;
  const StepSummary *first_full = nullptr, *last_full = nullptr, *highest = &r.steps[0];
  uint64_t lowest = UINT64_MAX;
  for (const StepSummary &s : r.steps) {
    summarized += s.summarized;
    if (!s.summarized) {
      if (!first_full) first_full = &s;
      last_full = &s;
    }
    if (s.peak > highest->peak) highest = &s;
    lowest = std::min(lowest, s.peak);
  }
  add(o, "Step window: ");
  if (first_full)
    add(o, "steps %llu to %llu recorded in full (the peak above is theirs), ",
        static_cast<unsigned long long>(first_full->step),
        static_cast<unsigned long long>(last_full->step));
  else
    add(o, "no step recorded in full, ");
  add(o, "%zu summarized\n", summarized);
  add(o, "Step peaks: %s to %s, highest at step %llu (%s at %.3f s%s)\n",
      format_bytes(lowest).c_str(), format_bytes(highest->peak).c_str(),
      static_cast<unsigned long long>(highest->step), format_bytes(highest->peak).c_str(),
      highest->peak_time, highest->summarized ? ", summarized" : "");
  static const char *const kBars[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                      "\u2585", "\u2586", "\u2587", "\u2588"};
  constexpr size_t kWidth = 64;
  const size_t columns = std::min(kWidth, r.steps.size());
  add(o, "  steps %llu..%llu: ", static_cast<unsigned long long>(r.steps.front().step),
      static_cast<unsigned long long>(r.steps.back().step));
  for (size_t c = 0; c < columns; ++c) {
    const size_t from = c * r.steps.size() / columns, to = (c + 1) * r.steps.size() / columns;
    uint64_t peak = 0;
    for (size_t i = from; i < to; ++i) peak = std::max(peak, r.steps[i].peak);
    const uint64_t span = highest->peak - lowest;
    const size_t level = span ? static_cast<size_t>((peak - lowest) * 7 / span) : 0;
    o += kBars[level];
  }
  o += "\n";
}

std::string render_text(const Report &r, size_t top, bool details) {
  std::string o;
  add(o, "adprof report: %s\n", r.trace.c_str());
  add(o, "  pid %llu, %.3f s, %s events, %u thread%s\n", static_cast<unsigned long long>(r.pid),
      r.duration, count(r.events).c_str(), r.threads, r.threads == 1 ? "" : "s");
  if (!r.complete) add(o, "  WARNING: %s\n", r.end_reason.c_str());
  if (r.corrupt_chunks)
    add(o, "  WARNING: %llu damaged chunk(s) failed their checksum and were skipped\n",
        static_cast<unsigned long long>(r.corrupt_chunks));
  if (r.missing_chunks)
    add(o, "  WARNING: %llu chunk(s) missing from thread streams\n",
        static_cast<unsigned long long>(r.missing_chunks));

  add(o, "\nPeak: %s of %s live at %.3f s (%s phase", format_bytes(r.peak).c_str(),
      r.memory.c_str(), r.peak_time, r.peak_phase.c_str());
  if (int64_t step = step_at(r, r.peak_time); step >= 0)
    add(o, " of step %lld; %zu step%s recorded", static_cast<long long>(step), r.steps.size(),
        r.steps.size() == 1 ? "" : "s");
  add(o, ")\n");
  const int ad_roles[] = {ADPROF_ROLE_FORWARD_CACHE, ADPROF_ROLE_ADJOINT, ADPROF_ROLE_DUPLICATE,
                          ADPROF_ROLE_ACCUMULATION};
  const char *ad_titles[] = {"forward caches", "adjoint buffers", "duplicated intermediates",
                             "pending gradient sums"};
  bool ad_bytes = false;
  for (int role : ad_roles) ad_bytes |= r.peak_by_role[role] != 0;
  if (r.ad_events_known && r.ad_events == 0 && !ad_bytes) {
    // A program nobody described (no context API, no AD engine): no table of zeros.
    add(o,
        "  No AD events in this trace (no op, step, role or label): nothing to attribute to AD.\n");
    add(o, "  By role at the peak:\n");
  } else {
    add(o, "  What AD added at the peak:\n");
    for (int i = 0; i < 4; ++i) {
      uint64_t b = r.peak_by_role[ad_roles[i]];
      add(o, "    %-26s %12s  %5.1f%%\n", ad_titles[i], format_bytes(b).c_str(), pct(b, r.peak));
      add_labels_of_role(o, r, role_name(ad_roles[i]));
    }
    add(o, "  Other roles at the peak:\n");
  }
  for (int role : roles_most_first(r.peak_by_role))
    if (std::find(std::begin(ad_roles), std::end(ad_roles), role) == std::end(ad_roles)) {
      add(o, "    %-26s %12s  %5.1f%%\n", role_name(role),
          format_bytes(r.peak_by_role[role]).c_str(), pct(r.peak_by_role[role], r.peak));
      if (role == ADPROF_ROLE_FOREIGN && r.start_up_end >= 0) {
        // Foreign memory explained by when it was made: start-up, or the steps.
        char start_up[64];
        snprintf(start_up, sizeof start_up, "start-up (< %.3f s)", r.start_up_end);
        add(o, "      %-24s %12s  %5.1f%%  before the first op or step\n", start_up,
            format_bytes(r.peak_foreign_start_up).c_str(), pct(r.peak_foreign_start_up, r.peak));
        add(o, "      %-24s %12s  %5.1f%%  made after it\n", "after start-up",
            format_bytes(r.peak_foreign_after_start_up).c_str(),
            pct(r.peak_foreign_after_start_up, r.peak));
        add_foreign_threads(o, r);
      }
      add_labels_of_role(o, r, role_name(role));
    }
  if (details) {
    add(o, "  Allocator overhead: size-class rounding %s", format_bytes(r.peak_slack).c_str());
  }
  if (details && r.have_allocator_stats) {
    uint64_t over = r.jemalloc_resident_at_peak > r.jemalloc_allocated_at_peak
                        ? r.jemalloc_resident_at_peak - r.jemalloc_allocated_at_peak
                        : 0;
    add(o, "; jemalloc resident %s, allocated %s (resident - allocated %s), retained %s",
        format_bytes(r.jemalloc_resident_at_peak).c_str(),
        format_bytes(r.jemalloc_allocated_at_peak).c_str(), format_bytes(over).c_str(),
        format_bytes(r.jemalloc_retained_at_peak).c_str());
  }
  if (details) add(o, "\n");
  if (r.rss_at_peak || r.max_rss) {
    add(o, "  RSS at the peak %s, highest RSS %s", format_bytes(r.rss_at_peak).c_str(),
        format_bytes(r.max_rss).c_str());
    // The gap in words: RSS counts what the peak does not (a user read "Peak: 213.8 MiB" beside
    // "RSS 446.3 MiB" with no word on the difference).
    if (r.rss_at_peak > r.peak) {
      add(o, ": %s more than the peak, memory the process holds that is not a live heap block",
          format_bytes(r.rss_at_peak - r.peak).c_str());
      if (r.have_allocator_stats && r.jemalloc_resident_at_peak > r.jemalloc_allocated_at_peak)
        add(o,
            " (%s of it freed memory the allocator keeps for reuse; the rest is code, "
            "libraries, stacks and mappings)",
            format_bytes(r.jemalloc_resident_at_peak - r.jemalloc_allocated_at_peak).c_str());
      else
        add(o, " (freed memory the allocator keeps, code, libraries, stacks and mappings)");
    }
    add(o, "\n");
  }
  if (details && r.mapped_peak) {
    add(o,
        "  Anonymous mappings (not in the peak: mostly reserved address space): %s mapped at the "
        "peak, at most %s",
        format_bytes(r.mapped_at_peak).c_str(), format_bytes(r.mapped_peak).c_str());
    if (!r.largest_mappings.empty()) {
      const LiveBuffer &m = r.largest_mappings[0];
      add(o, "; largest %s (%s, %s)", format_bytes(m.size).c_str(), m.op.c_str(), m.role.c_str());
    }
    add(o, "\n");
  }
  if (r.device_peak || r.device_reserved_peak) {
    add(o, "  Device: peak %s at %.3f s, reserved peak %s\n", format_bytes(r.device_peak).c_str(),
        r.device_peak_time, format_bytes(r.device_reserved_peak).c_str());
    const std::vector<int> roles = roles_most_first(r.device_peak_by_role);
    const char *sep = "    at the device peak: ";
    for (int k : roles) {
      add(o, "%s%s %s (%.1f%%)", sep, role_name(k), format_bytes(r.device_peak_by_role[k]).c_str(),
          pct(r.device_peak_by_role[k], r.device_peak));
      sep = ", ";
    }
    if (!roles.empty()) add(o, "\n");
    add_device_labels(o, r);
  }

  if (!r.findings.empty()) {
    add(o, "\nFindings:\n");
    int i = 0;
    size_t folded = 0;
    // Past `top` findings of one kind (a model with a copy in each of its blocks has dozens of
    // duplicates, the largest first), the rest are counted: every one is in the JSON.
    struct Beyond {
      size_t shown = 0, count = 0;
      uint64_t bytes = 0;
    };
    std::vector<std::pair<std::string, Beyond>> kinds;
    for (const Finding &f : r.findings) {
      if (f.detail && !details) {
        ++folded;
        continue;
      }
      auto kind = std::find_if(kinds.begin(), kinds.end(),
                               [&](const auto &k) { return k.first == f.kind; });
      if (kind == kinds.end()) kind = kinds.insert(kinds.end(), {f.kind, Beyond{}});
      if (!details && kind->second.shown == top) {
        ++kind->second.count;
        kind->second.bytes += f.bytes;
        continue;
      }
      ++kind->second.shown;
      add(o, "  %d. %s\n", ++i, f.message.c_str());
      if (!f.evidence.empty()) add(o, "     evidence: %s\n", f.evidence.c_str());
      if (!f.fix.empty()) add(o, "     fix: %s\n", f.fix.c_str());
    }
    if (i == 0) add(o, "  none to act on\n");
    for (const auto &[kind, beyond] : kinds)
      if (beyond.count)
        add(o, "  (%zu more %s findings, %s in all: --top, --details or --json)\n", beyond.count,
            kind.c_str(), format_bytes(beyond.bytes).c_str());
    if (folded) add(o, "  (%zu more about the allocator or the engine: --details)\n", folded);
  } else {
    add(o, "\nFindings: none\n");
  }

  add(o, "\nLive at the peak by phase of allocation:");
  bool any_phase = false;
  for (int p = 0; p < kPhaseCount; ++p)
    if (r.peak_by_phase[p]) {
      add(o, "  %s %s", phase_name(p), format_bytes(r.peak_by_phase[p]).c_str());
      any_phase = true;
    }
  if (!any_phase) add(o, " none");
  if (r.peak_by_op.empty())
    add(o, "\nLive at the peak by op: none\n");
  else
    add(o, "\nLive at the peak by op (top %zu):\n", top);
  for (size_t i = 0; i < r.peak_by_op.size() && i < top; ++i)
    add(o, "    %-28s %12s  %5.1f%%\n", r.peak_by_op[i].name.c_str(),
        format_bytes(r.peak_by_op[i].bytes).c_str(), pct(r.peak_by_op[i].bytes, r.peak));
  render_sites_text(o, r, top);
  if (r.live_at_peak.empty()) {
    add(o, "Largest buffers live at the peak: none\n");
  } else {
    if (details)
      add(o, "Largest buffers live at the peak (top %zu of %s):\n", top,
          count(buffer_count(r.peak_by_label, r.live_at_peak.size())).c_str());
    else
      add(o, "Largest buffers live at the peak (top %zu):\n", top);
    add(o, "    %12s  %-15s %-24s %-20s %s\n", "size", "role", "op", "label", "type");
  }
  for (size_t i = 0; i < r.live_at_peak.size() && i < top; ++i) {
    const LiveBuffer &b = r.live_at_peak[i];
    std::string type = b.dtype.empty() ? "" : b.dtype + shape_text(b.shape);
    if (b.space != "heap") {
      if (!type.empty()) type += ' ';
      type += b.space;
    }
    add(o, "    %12s  %-15s %-24s %-20s %s\n", format_bytes(b.size).c_str(), b.role.c_str(),
        b.op.c_str(), b.label.c_str(), type.c_str());
    if (!b.site.empty()) add(o, "    %12s  allocated at %s\n", "", b.site.c_str());
  }

  add(o, "\nBy phase:        %14s %14s %12s %12s\n", "allocations", "frees", "bytes", "peak");
  for (const PhaseSummary &p : r.phases)
    if (p.allocations || p.frees || p.peak)
      add(o, "    %-12s %14s %14s %12s %12s\n", p.name.c_str(), count(p.allocations).c_str(),
          count(p.frees).c_str(), format_bytes(p.bytes).c_str(), format_bytes(p.peak).c_str());
  if (r.ops.empty()) {
    add(o, "\nOps that allocate most: none\n");
  } else {
    add(o, "\nOps that allocate most (top %zu):\n", top);
    add(o, "    %-24s %10s %12s %12s %12s %12s  %s\n", "op", "calls", "allocations", "bytes",
        "temporaries", "at peak", "labels at peak");
  }
  for (size_t i = 0; i < r.ops.size() && i < top; ++i) {
    const OpSummary &s = r.ops[i];
    std::string labels;  // the label with most bytes at the peak, and how many others
    size_t named = 0;
    for (const NamedBytes &l : s.labels_at_peak)
      if (!l.name.empty() && named++ == 0) labels = l.name;
    if (named > 1) labels += " (+" + std::to_string(named - 1) + ")";
    add(o, "    %-24s %10s %12s %12s %12s %12s  %s\n", s.name.c_str(), count(s.calls).c_str(),
        count(s.allocations).c_str(), format_bytes(s.bytes).c_str(), count(s.temporaries).c_str(),
        format_bytes(s.live_at_peak).c_str(), labels.c_str());
  }
  add(o, "\nTotals: %s allocations (%s), %s frees, %s temporaries (%s), %s live at exit",
      count(r.allocations).c_str(), format_bytes(r.bytes_allocated).c_str(), count(r.frees).c_str(),
      count(r.temporaries).c_str(), format_bytes(r.temporary_bytes).c_str(),
      format_bytes(r.live_at_end).c_str());
  if (r.unmatched_frees)
    add(o, ", %s frees of blocks allocated before recording", count(r.unmatched_frees).c_str());
  add(o, "\n");
  if (!r.steps.empty()) {
    add(o, "Steps: %zu", r.steps.size());
    if (r.steady_allocations_per_step >= 0)
      add(o, ", %s allocations per step after the first (median)",
          count(static_cast<uint64_t>(r.steady_allocations_per_step)).c_str());
    add(o, "\n");
    if (r.step_window) render_step_window(o, r);
  }
  return o;
}

}  // namespace adprof
