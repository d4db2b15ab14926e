#include "adprof/compare.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "adprof/trace_peak.h"

namespace adprof {

namespace {

bool is_bytes_metric(const std::string &m) {
  return m == "peak" || m == "bytes_allocated" || m.rfind("role.", 0) == 0 ||
         m.rfind("phase.", 0) == 0 || m.rfind("op.", 0) == 0 || m.rfind("device.", 0) == 0 ||
         m.rfind("site.", 0) == 0 || m.rfind("site_bytes.", 0) == 0;
}

// Digits in groups of three, as a person writes a count: 200,000.
std::string group_digits(const std::string &digits) {
  std::string out;
  size_t first = digits.size() % 3 == 0 ? 3 : digits.size() % 3;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i >= first && (i - first) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string show(double v, bool bytes) {
  if (bytes) return format_bytes(static_cast<uint64_t>(std::max(0.0, v)));
  if (!std::isfinite(v)) return v > 0 ? "infinite" : "-infinite";
  char text[48];
  bool whole = v == std::floor(v) && std::fabs(v) < 1e15;
  snprintf(text, sizeof text, whole ? "%.0f" : "%.2f", std::fabs(v));
  std::string s = text;
  size_t dot = s.find('.');
  return (v < 0 ? "-" : "") + group_digits(s.substr(0, dot)) +
         (dot == std::string::npos ? "" : s.substr(dot));
}

// The limit of a gate as a person states it: the gate fails when METRIC OP VALUE holds.
std::string show_limit(const Gate &g, bool bytes) {
  std::string value;
  if (g.relative)
    value = show(g.value, false) + "%";
  else
    value = show(std::fabs(g.value), bytes);
  if (g.change) value = (g.value < 0 ? "-" : "+") + value;
  static const std::map<std::string, std::string> words = {
      {">", "over "}, {">=", "at or over "}, {"<", "under "}, {"<=", "at or under "}, {"==", ""}};
  return words.at(g.op) + value;
}

std::string show_change(double base, double current, bool bytes) {
  double d = current - base;
  std::string s = (d >= 0 ? "+" : "-") + show(std::fabs(d), bytes);
  if (base != 0) {
    char pct[32];
    snprintf(pct, sizeof pct, " (%+.1f%%)", 100.0 * d / base);
    s += pct;
  } else if (current != 0) {
    s += " (new)";
  }
  return s;
}

bool compare(double lhs, const std::string &op, double rhs) {
  if (op == ">") return lhs > rhs;
  if (op == ">=") return lhs >= rhs;
  if (op == "<") return lhs < rhs;
  if (op == "<=") return lhs <= rhs;
  return lhs == rhs;
}

std::string trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Number with optional unit; sets *percent when the unit is %.
double parse_quantity(const std::string &text, bool *percent) {
  std::string t = trim(text);
  size_t used = 0;
  double v;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception &) {
    throw std::invalid_argument("'" + text + "' is not a number");
  }
  std::string unit = trim(t.substr(used));
  *percent = unit == "%";
  if (unit.empty() || unit == "%") return v;
  static const std::map<std::string, double> units = {
      {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"KB", 1000.0},
      {"MB", 1e6}, {"GB", 1e9},     {"K", 1024.0},      {"M", 1048576.0},      {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end())
    throw std::invalid_argument("unknown unit '" + unit + "' in '" + text + "'");
  return v * it->second;
}

}  // namespace

uint64_t parse_bytes(const std::string &text) {
  bool percent = false;
  double v = parse_quantity(text, &percent);
  if (percent || v < 0) throw std::invalid_argument("'" + text + "' is not a size in bytes");
  return static_cast<uint64_t>(std::llround(v));
}

bool records_device_memory(const Report &r) {
  return r.device_peak > 0 || r.device_reserved_peak > 0 || r.device_ooms > 0;
}

Metrics report_metrics(const Report &r) {
  Metrics metrics;
  std::map<std::string, double> &m = metrics.values;
  // The trace's peak (a step window's summarized steps too): a budget holds on every step of
  // a windowed run, not only on those recorded in full.
  const TracePeak peak = trace_peak(r), device = trace_device_peak(r);
  const MetricSource at_peak{peak.step, peak.summarized};
  const MetricSource at_device_peak{device.step, device.summarized};
  m["peak"] = static_cast<double>(peak.bytes);
  metrics.sources["peak"] = at_peak;
  m["allocations"] = static_cast<double>(r.allocations);
  m["bytes_allocated"] = static_cast<double>(r.bytes_allocated);
  m["temporaries"] = static_cast<double>(r.temporaries);
  m["allocations_per_step"] =
      r.steady_allocations_per_step >= 0 ? r.steady_allocations_per_step : 0.0;
  m["device.peak"] = static_cast<double>(device.bytes);
  metrics.sources["device.peak"] = at_device_peak;
  m["device.reserved_peak"] = static_cast<double>(r.device_reserved_peak);
  m["device.ooms"] = static_cast<double>(r.device_ooms);
  for (int i = 0; i < kRoleCount; ++i) {
    const std::string role = std::string("role.") + role_name(i);
    m[role] = static_cast<double>(peak.by_role[i]);
    metrics.sources[role] = at_peak;
    m["device." + role] = static_cast<double>(device.by_role[i]);
    metrics.sources["device." + role] = at_device_peak;
  }
  for (const PhaseSummary &p : r.phases) m["phase." + p.name] = static_cast<double>(p.peak);
  for (const NamedBytes &o : r.peak_by_op) m["op." + o.name] = static_cast<double>(o.bytes);
  for (const OpSummary &o : r.ops)
    m["op_allocations." + o.name] = static_cast<double>(o.allocations);
  // Traces with call stacks: by allocation site (sites.h).
  for (const SiteSummary &s : r.sites) {
    if (s.peak_bytes) m["site." + s.site] = static_cast<double>(s.peak_bytes);
    m["site_allocations." + s.site] = static_cast<double>(s.allocations);
    m["site_bytes." + s.site] = static_cast<double>(s.bytes);
  }
  metrics.device_recorded = records_device_memory(r);
  return metrics;
}

Gate parse_gate(const std::string &text) {
  Gate g;
  g.text = text;
  static const char *ops[] = {">=", "<=", "==", ">", "<"};
  // The last comparison in the text is the gate's: a metric may hold '<' and '>' (a site's
  // C++ name: site.std::vector<int>::push_back(...)), a value never does.
  size_t at = std::string::npos;
  for (const char *op : ops) {
    size_t p = text.rfind(op);
    if (p != std::string::npos && (at == std::string::npos || p > at)) {
      at = p;
      g.op = op;
    }
  }
  if (at == std::string::npos)
    throw std::invalid_argument("gate '" + text + "' needs a comparison: METRIC > VALUE");
  // ">=" found at the same place as ">" must win
  if (text.compare(at, 2, ">=") == 0) g.op = ">=";
  if (text.compare(at, 2, "<=") == 0) g.op = "<=";
  g.metric = trim(text.substr(0, at));
  std::string value = trim(text.substr(at + g.op.size()));
  if (g.metric.empty() || value.empty())
    throw std::invalid_argument("gate '" + text + "' must read METRIC OP VALUE, e.g. 'peak > +5%'");
  g.change = value[0] == '+' || value[0] == '-';
  g.value = parse_quantity(value, &g.relative);
  if (g.relative && !g.change)
    throw std::invalid_argument("gate '" + text + "': a percentage is a change: write +5% or -5%");
  return g;
}

GateResult evaluate(const Gate &gate, const Metrics *base, const Metrics &current) {
  GateResult r;
  r.gate = gate;
  auto value_of = [&](const Metrics &m) {
    auto it = m.values.find(gate.metric);
    return it != m.values.end() ? it->second : 0.0;  // an op or role absent is zero bytes
  };
  bool known = current.values.count(gate.metric) || (base && base->values.count(gate.metric)) ||
               gate.metric.rfind("op.", 0) == 0 || gate.metric.rfind("op_allocations.", 0) == 0 ||
               gate.metric.rfind("site.", 0) == 0 ||
               gate.metric.rfind("site_allocations.", 0) == 0 ||
               gate.metric.rfind("site_bytes.", 0) == 0;
  if (!known)
    throw std::invalid_argument("unknown metric '" + gate.metric + "' in '" + gate.text + "'");
  if (gate.change && !base)
    throw std::invalid_argument("gate '" + gate.text + "' compares with a base: use adprof diff");
  // A device figure of a run that recorded no device memory is a zero nobody measured: the
  // gate would pass on nothing (a model that fell back to the CPU passes a GPU budget).
  if (gate.metric.rfind("device.", 0) == 0)
    for (const Metrics *run : {base, &current})
      if (run && !run->device_recorded) {
        const bool in_base = run == base;
        throw UnrecordedMetric("gate '" + gate.text + "' weighs device memory, and the " +
                                   (in_base ? "base" : "new") +
                                   " run recorded none (no device block, allocation or reserve)",
                               in_base);
      }
  r.current = value_of(current);
  if (auto at = current.sources.find(gate.metric); at != current.sources.end()) {
    r.sourced = true;
    r.current_source = at->second;
    if (base)
      if (auto b = base->sources.find(gate.metric); b != base->sources.end())
        r.base_source = b->second;
  }
  bool bytes = is_bytes_metric(gate.metric);
  // A value read in a step outside a step window says so: the CI user looks for it there.
  auto where = [](const MetricSource &s) {
    return s.summarized ? " in step " + std::to_string(s.step) + ", summarized" : std::string();
  };
  if (gate.change) {
    r.base = value_of(*base);
    double lhs = gate.relative ? (r.base != 0 ? 100.0 * (r.current - r.base) / r.base
                                              : (r.current != 0 ? INFINITY : 0.0))
                               : r.current - r.base;
    r.failed = compare(lhs, gate.op, gate.value);
    r.explanation = gate.metric + ": " + show(r.base, bytes) + where(r.base_source) + " -> " +
                    show(r.current, bytes) + where(r.current_source) + " (" +
                    show_change(r.base, r.current, bytes) + ")";
  } else {
    r.failed = compare(r.current, gate.op, gate.value);
    r.explanation = gate.metric + ": " + show(r.current, bytes) + where(r.current_source);
  }
  // What was checked, whether the limit held, and the limit in words: "peak: 213.8 MiB, limit
  // held (fails when over 230.0 MiB)" (it read "passes 'peak > 230MiB'", like a breach).
  r.explanation += std::string(r.failed ? ", LIMIT BROKEN" : ", limit held") + " (fails when " +
                   (gate.change ? "the change is " : "") + show_limit(gate, bytes) + ")";
  return r;
}

ReportDiff diff_reports(const Report &base, const Report &current) {
  ReportDiff d;
  const Metrics metrics_base = report_metrics(base), metrics_current = report_metrics(current);
  const auto &mb = metrics_base.values, &mc = metrics_current.values;
  std::set<std::string> names;
  for (const auto &[k, v] : mb) names.insert(k);
  for (const auto &[k, v] : mc) names.insert(k);
  // Headline metrics first, then the rest alphabetically.
  std::vector<std::string> order = {"peak",        "allocations",          "bytes_allocated",
                                    "temporaries", "allocations_per_step", "device.peak"};
  for (const auto &n : names)
    if (std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
  for (const auto &n : order) {
    const double b = mb.count(n) ? mb.at(n) : 0, c = mc.count(n) ? mc.at(n) : 0;
    if (b == 0 && c == 0 && n != "peak" && n != "allocations") continue;
    DiffRow row;
    row.metric = n;
    row.base = b;
    row.current = c;
    row.bytes = is_bytes_metric(n);
    auto sb = metrics_base.sources.find(n), sc = metrics_current.sources.find(n);
    if (sb != metrics_base.sources.end() && sc != metrics_current.sources.end()) {
      row.sourced = true;
      row.base_source = sb->second;
      row.current_source = sc->second;
    }
    d.rows.push_back(row);
  }
  auto sites = [](const Report &r) {
    std::set<std::string> s;
    for (const NamedBytes &o : r.peak_by_op) s.insert("op " + o.name);
    // By label over every buffer live at the peak (peak_by_label), not the buffers a report
    // kept: a compact report JSON keeps the largest only (report.h, JsonOptions).
    for (const LabelBytes &l : r.peak_by_label)
      if (!l.label.empty()) s.insert(l.role + " " + l.label);
    if (r.peak_by_label.empty())  // a report JSON from before peak.by_label
      for (const LiveBuffer &b : r.live_at_peak)
        if (!b.label.empty()) s.insert(b.role + " " + b.label);
    for (const SiteSummary &site : r.sites)
      if (site.peak_bytes) s.insert("site " + site.site);
    return s;
  };
  auto sb = sites(base), sc = sites(current);
  for (const auto &s : sc)
    if (!sb.count(s)) d.appeared.push_back(s);
  for (const auto &s : sb)
    if (!sc.count(s)) d.vanished.push_back(s);
  return d;
}

namespace {

// A diff's cell: the value, starred when read in a summarized step (summarized_note says which).
std::string cell(double value, bool bytes, bool sourced, const MetricSource &source) {
  return show(value, bytes) + (sourced && source.summarized ? "*" : "");
}

// The note under a diff's table when a value is starred: which run's peak lies in which step
// outside the step window ("" when none does).
std::string summarized_note(const ReportDiff &d) {
  std::set<std::pair<int, int64_t>> steps;  // (0 base, 1 new; step)
  for (const DiffRow &r : d.rows) {
    if (!r.sourced) continue;
    if (r.base_source.summarized) steps.insert({0, r.base_source.step});
    if (r.current_source.summarized) steps.insert({1, r.current_source.step});
  }
  if (steps.empty()) return "";
  std::string note = "*: read in a step outside the step window, from its summary (";
  bool first = true;
  for (const auto &[run, step] : steps) {
    note +=
        std::string(first ? "" : ", ") + (run ? "new" : "base") + ": step " + std::to_string(step);
    first = false;
  }
  return note + ")\n";
}

}  // namespace

std::string render_diff_text(const ReportDiff &d, const std::vector<GateResult> &gates) {
  std::string o;
  char line[512];
  snprintf(line, sizeof line, "%-36s %14s %14s  %s\n", "metric", "base", "new", "change");
  o += line;
  for (const DiffRow &r : d.rows) {
    snprintf(line, sizeof line, "%-36s %14s %14s  %s\n", r.metric.c_str(),
             cell(r.base, r.bytes, r.sourced, r.base_source).c_str(),
             cell(r.current, r.bytes, r.sourced, r.current_source).c_str(),
             r.base == r.current ? "=" : show_change(r.base, r.current, r.bytes).c_str());
    o += line;
  }
  o += summarized_note(d);
  if (!d.appeared.empty()) {
    o += "\nAt the new peak only:\n";
    for (const auto &s : d.appeared) o += "  + " + s + "\n";
  }
  if (!d.vanished.empty()) {
    o += "\nAt the base peak only:\n";
    for (const auto &s : d.vanished) o += "  - " + s + "\n";
  }
  if (!gates.empty()) {
    o += "\nGates:\n";
    for (const auto &g : gates)
      o += std::string(g.failed ? "  FAIL " : "  ok   ") + g.explanation + "\n";
  }
  return o;
}

std::string render_diff_markdown(const ReportDiff &d, const std::vector<GateResult> &gates) {
  std::string o = "### adprof memory diff\n\n";
  bool failed = std::any_of(gates.begin(), gates.end(), [](const auto &g) { return g.failed; });
  if (!gates.empty()) o += failed ? "**Memory gate failed.**\n\n" : "All memory gates pass.\n\n";
  o += "| metric | base | new | change |\n|---|---:|---:|---:|\n";
  for (const DiffRow &r : d.rows)
    o += "| `" + r.metric + "` | " + cell(r.base, r.bytes, r.sourced, r.base_source) + " | " +
         cell(r.current, r.bytes, r.sourced, r.current_source) + " | " +
         (r.base == r.current ? "=" : show_change(r.base, r.current, r.bytes)) + " |\n";
  if (const std::string note = summarized_note(d); !note.empty()) o += "\n\\" + note;
  if (!d.appeared.empty()) {
    o += "\n**At the new peak only:** ";
    for (size_t i = 0; i < d.appeared.size(); ++i) o += (i ? ", `" : "`") + d.appeared[i] + "`";
    o += "\n";
  }
  if (!d.vanished.empty()) {
    o += "\n**At the base peak only:** ";
    for (size_t i = 0; i < d.vanished.size(); ++i) o += (i ? ", `" : "`") + d.vanished[i] + "`";
    o += "\n";
  }
  if (!gates.empty()) {
    o += "\n| gate | result |\n|---|---|\n";
    for (const auto &g : gates)
      o += "| `" + g.gate.text + "` | " + (g.failed ? "**FAIL** " : "ok ") + g.explanation + " |\n";
  }
  return o;
}

Report load_report(const std::string &path, const AnalyzeOptions &options) {
  constexpr unsigned char pickle_proto = 0x80;  // pickle's PROTO opcode (torch_snapshot.h)
  // A FIFO, device or directory is refused before it is opened: opening a FIFO with no writer
  // would wait forever.
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    throw TraceError("cannot open '" + path + "': " + strerror(errno));
  if (!S_ISREG(st.st_mode)) throw TraceError("'" + path + "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError("cannot open '" + path + "'");
  char first[8] = {};
  in.read(first, sizeof first);
  if ((in.gcount() == 8 && std::equal(first, first + 8, format::kFileMagic)) ||
      (in.gcount() >= 1 && static_cast<unsigned char>(first[0]) == pickle_proto))
    return analyze(path, options);  // a trace, or a memory snapshot (a pickle, torch_snapshot.h)
  in.clear();
  in.seekg(0);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception &) {
    throw TraceError("'" + path +
                     "' is neither an adprof trace, a memory snapshot (pickle) nor an adprof "
                     "report JSON");
  }
  try {
    return report_from_json(j);
  } catch (const std::runtime_error &e) {
    throw TraceError("'" + path + "': " + e.what());
  }
}

}  // namespace adprof
