// The report's JSON form. Schema documented in docs/REPORT_SCHEMA.md; version 1. Readers ignore
// keys they do not know and default the ones that are missing, so later versions only add.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "adprof/report.h"
#include "named_json.h"
#include "sites_render.h"

namespace adprof {

using nlohmann::json;

namespace {

const json &at(const json &j, const char *key) {
  static const json null_value;
  auto it = j.find(key);
  return it != j.end() ? *it : null_value;
}

}  // namespace

json to_json(const Report &r, const JsonOptions &options) {
  json j;
  j["schema"] = "adprof.report";
  j["schema_version"] = r.schema_version;
  j["trace"] = {{"path", r.trace},
                {"pid", r.pid},
                {"memory", r.memory},
                {"duration_s", r.duration},
                {"events", r.events},
                {"threads", r.threads},
                {"thread_names", r.thread_names},
                {"complete", r.complete},
                {"end", r.end_reason},
                {"corrupt_chunks", r.corrupt_chunks},
                {"missing_chunks", r.missing_chunks},
                {"ad_events", r.ad_events}};
  j["totals"] = {{"allocations", r.allocations},         {"frees", r.frees},
                 {"bytes_allocated", r.bytes_allocated}, {"unmatched_frees", r.unmatched_frees},
                 {"live_at_end", r.live_at_end},         {"temporaries", r.temporaries},
                 {"temporary_bytes", r.temporary_bytes}};
  json by_op = json::array();
  for (const auto &o : r.peak_by_op) by_op.push_back({{"name", o.name}, {"bytes", o.bytes}});
  json by_label = json::array();
  for (const auto &l : r.peak_by_label)
    by_label.push_back(
        {{"label", l.label}, {"role", l.role}, {"bytes", l.bytes}, {"buffers", l.buffers}});
  json by_role_op = json::array();
  for (const auto &g : r.peak_by_role_op) {
    json labels = json::array();
    for (const auto &l : g.labels) labels.push_back({{"name", l.name}, {"bytes", l.bytes}});
    by_role_op.push_back({{"role", g.role},
                          {"op", g.op},
                          {"bytes", g.bytes},
                          {"buffers", g.buffers},
                          {"labels", labels}});
  }
  j["peak"] = {{"bytes", r.peak},
               {"time_s", r.peak_time},
               {"event", r.peak_event},
               {"phase", r.peak_phase},
               {"by_role", named_array(r.peak_by_role, role_name)},
               {"by_phase", named_array(r.peak_by_phase, phase_name)},
               {"by_op", by_op},
               {"by_label", by_label},
               {"by_role_op", by_role_op},
               {"slack_bytes", r.peak_slack}};
  if (r.start_up_end >= 0)
    j["peak"]["foreign_split"] = {{"start_up_end_s", r.start_up_end},
                                  {"start_up", r.peak_foreign_start_up},
                                  {"after_start_up", r.peak_foreign_after_start_up}};
  j["allocator"] = {{"available", r.have_allocator_stats},
                    {"jemalloc_allocated_at_peak", r.jemalloc_allocated_at_peak},
                    {"jemalloc_active_at_peak", r.jemalloc_active_at_peak},
                    {"jemalloc_resident_at_peak", r.jemalloc_resident_at_peak},
                    {"jemalloc_retained_at_peak", r.jemalloc_retained_at_peak},
                    {"rss_at_peak", r.rss_at_peak},
                    {"max_rss", r.max_rss}};
  json mappings = json::array();
  for (const auto &b : r.largest_mappings)
    mappings.push_back({{"addr", b.addr},
                        {"size", b.size},
                        {"role", b.role},
                        {"op", b.op},
                        {"phase", b.phase},
                        {"label", b.label}});
  j["mappings"] = {{"peak", r.mapped_peak}, {"at_peak", r.mapped_at_peak}, {"largest", mappings}};
  j["device"] = {{"peak", r.device_peak},
                 {"time_s", r.device_peak_time},
                 {"reserved_peak", r.device_reserved_peak},
                 {"by_role", named_array(r.device_peak_by_role, role_name)},
                 {"ooms", r.device_ooms},
                 {"oom",
                  {{"requested", r.oom_requested},
                   {"reserved", r.oom_reserved},
                   {"allocated", r.oom_allocated},
                   {"limit", r.oom_limit},
                   {"device", r.oom_device},
                   {"time_s", r.oom_time},
                   {"by_role", named_array(r.oom_by_role, role_name)}}}};
  json phases = json::array();
  for (const auto &p : r.phases)
    phases.push_back({{"name", p.name},
                      {"allocations", p.allocations},
                      {"frees", p.frees},
                      {"bytes", p.bytes},
                      {"peak", p.peak},
                      {"peak_time_s", p.peak_time}});
  j["phases"] = phases;
  json ops = json::array();
  for (const auto &o : r.ops) {
    json labels = json::array();
    for (const auto &l : o.labels_at_peak)
      labels.push_back({{"label", l.name}, {"bytes", l.bytes}});
    ops.push_back({{"name", o.name},
                   {"calls", o.calls},
                   {"allocations", o.allocations},
                   {"bytes", o.bytes},
                   {"temporaries", o.temporaries},
                   {"temporary_bytes", o.temporary_bytes},
                   {"live_at_peak", o.live_at_peak},
                   {"labels_at_peak", labels}});
  }
  j["ops"] = ops;
  json steps = json::array();
  for (const auto &s : r.steps)
    steps.push_back({{"step", s.step},
                     {"start_s", s.start},
                     {"end_s", s.end},
                     {"allocations", s.allocations},
                     {"bytes", s.bytes},
                     {"peak", s.peak}});
  j["steps"] = steps;
  j["steady_allocations_per_step"] =
      r.steady_allocations_per_step < 0 ? json(nullptr) : json(r.steady_allocations_per_step);
  json live = json::array();
  // Compact by default: the largest buffers only (every buffer live at the peak made a Python
  // run's report 38 MiB); peak.by_label and peak.by_role_op keep every buffer's bytes.
  const size_t kept =
      options.full ? r.live_at_peak.size() : std::min(r.live_at_peak.size(), options.top);
  for (size_t i = 0; i < kept; ++i) {
    const LiveBuffer &b = r.live_at_peak[i];
    live.push_back({{"addr", b.addr},
                    {"size", b.size},
                    {"slack", b.slack},
                    {"role", b.role},
                    {"phase", b.phase},
                    {"space", b.space},
                    {"device", b.device},
                    {"thread", b.thread},
                    {"op", b.op},
                    {"alloc_time_s", b.alloc_time},
                    {"label", b.label},
                    {"dtype", b.dtype},
                    {"shape", b.shape},
                    {"source", b.source},
                    {"source_label", b.source_label},
                    {"content_hash", b.content_hash}});
  }
  if (const uint64_t omitted = r.live_at_peak_omitted + (r.live_at_peak.size() - kept))
    j["live_at_peak_omitted"] = omitted;  // --full keeps them
  if (r.stacks) {  // traces with call stacks: each buffer's site, and the sites
    for (size_t i = 0; i < kept; ++i)
      if (!r.live_at_peak[i].site.empty()) live[i]["site"] = r.live_at_peak[i].site;
    j["sites"] = sites_to_json(r);
  }
  j["live_at_peak"] = live;
  json savings = json::array();
  for (const auto &p : r.policy_savings)
    savings.push_back({{"name", p.name},
                       {"title", p.title},
                       {"fix", p.fix},
                       {"predicted_peak", p.predicted_peak},
                       {"saving", p.saving},
                       {"explanation", p.explanation}});
  j["policy_savings"] = savings;
  if (r.engine.described()) {
    json policies = json::array();
    for (const ad::PolicyName &n : ad::policy_names()) {
      const ad::EnginePolicy &p = r.engine.policy(n.id);
      if (p.described)
        policies.push_back({{"name", n.name},
                            {"on", p.on},
                            {"switch_on", p.switch_on},
                            {"switch_off", p.switch_off}});
    }
    j["engine"] = {{"name", r.engine.name},
                   {"version", r.engine.version},
                   {"protocol", r.engine.protocol},
                   {"policies", policies}};
  }
  json findings = json::array();
  for (const auto &f : r.findings) {
    findings.push_back({{"kind", f.kind},
                        {"message", f.message},
                        {"evidence", f.evidence},
                        {"fix", f.fix},
                        {"bytes", f.bytes}});
    if (f.detail) findings.back()["detail"] = true;
  }
  j["findings"] = findings;
  return j;
}

Report report_from_json(const json &j) {
  if (!j.is_object() || j.value("schema", std::string()) != "adprof.report")
    throw std::runtime_error("not an adprof report (no \"schema\": \"adprof.report\")");
  int version = j.value("schema_version", 0);
  if (version < 1 || version > kReportSchemaVersion)
    throw std::runtime_error("unsupported report schema version " + std::to_string(version));
  Report r;
  try {
    const json &t = at(j, "trace");
    if (t.is_object()) {
      r.trace = t.value("path", std::string());
      r.pid = t.value("pid", uint64_t{0});
      r.memory = t.value("memory", std::string("host memory"));
      r.duration = t.value("duration_s", 0.0);
      r.events = t.value("events", uint64_t{0});
      r.threads = t.value("threads", 0u);
      r.thread_names = t.value("thread_names", std::vector<std::string>{});
      r.complete = t.value("complete", false);
      r.end_reason = t.value("end", std::string());
      r.corrupt_chunks = t.value("corrupt_chunks", uint64_t{0});
      r.missing_chunks = t.value("missing_chunks", uint64_t{0});
      r.ad_events_known = t.contains("ad_events");
      r.ad_events = t.value("ad_events", uint64_t{0});
    }
    const json &tot = at(j, "totals");
    if (tot.is_object()) {
      r.allocations = tot.value("allocations", uint64_t{0});
      r.frees = tot.value("frees", uint64_t{0});
      r.bytes_allocated = tot.value("bytes_allocated", uint64_t{0});
      r.unmatched_frees = tot.value("unmatched_frees", uint64_t{0});
      r.live_at_end = tot.value("live_at_end", uint64_t{0});
      r.temporaries = tot.value("temporaries", uint64_t{0});
      r.temporary_bytes = tot.value("temporary_bytes", uint64_t{0});
    }
    const json &p = at(j, "peak");
    if (p.is_object()) {
      r.peak = p.value("bytes", uint64_t{0});
      r.peak_time = p.value("time_s", 0.0);
      r.peak_event = p.value("event", uint64_t{0});
      r.peak_phase = p.value("phase", std::string());
      read_named_array(at(p, "by_role"), r.peak_by_role, role_name);
      read_named_array(at(p, "by_phase"), r.peak_by_phase, phase_name);
      for (const auto &o : at(p, "by_op"))
        r.peak_by_op.push_back({o.value("name", std::string()), o.value("bytes", uint64_t{0})});
      for (const auto &l : at(p, "by_label"))
        r.peak_by_label.push_back({l.value("label", std::string()), l.value("role", std::string()),
                                   l.value("bytes", uint64_t{0}), l.value("buffers", uint64_t{0})});
      for (const auto &g : at(p, "by_role_op")) {
        RoleOpBytes &group = r.peak_by_role_op.emplace_back();
        group.role = g.value("role", std::string());
        group.op = g.value("op", std::string());
        group.bytes = g.value("bytes", uint64_t{0});
        group.buffers = g.value("buffers", uint64_t{0});
        for (const auto &l : at(g, "labels"))
          group.labels.push_back({l.value("name", std::string()), l.value("bytes", uint64_t{0})});
      }
      r.peak_slack = p.value("slack_bytes", uint64_t{0});
      if (const json &split = at(p, "foreign_split"); split.is_object()) {
        r.start_up_end = split.value("start_up_end_s", 0.0);
        r.peak_foreign_start_up = split.value("start_up", uint64_t{0});
        r.peak_foreign_after_start_up = split.value("after_start_up", uint64_t{0});
      }
    }
    const json &a = at(j, "allocator");
    if (a.is_object()) {
      r.have_allocator_stats = a.value("available", false);
      r.jemalloc_allocated_at_peak = a.value("jemalloc_allocated_at_peak", uint64_t{0});
      r.jemalloc_active_at_peak = a.value("jemalloc_active_at_peak", uint64_t{0});
      r.jemalloc_resident_at_peak = a.value("jemalloc_resident_at_peak", uint64_t{0});
      r.jemalloc_retained_at_peak = a.value("jemalloc_retained_at_peak", uint64_t{0});
      r.rss_at_peak = a.value("rss_at_peak", uint64_t{0});
      r.max_rss = a.value("max_rss", uint64_t{0});
    }
    const json &mp = at(j, "mappings");
    if (mp.is_object()) {
      r.mapped_peak = mp.value("peak", uint64_t{0});
      r.mapped_at_peak = mp.value("at_peak", uint64_t{0});
      for (const auto &b : at(mp, "largest")) {
        LiveBuffer lb;
        lb.addr = b.value("addr", uint64_t{0});
        lb.size = b.value("size", uint64_t{0});
        lb.role = b.value("role", std::string());
        lb.op = b.value("op", std::string());
        lb.phase = b.value("phase", std::string());
        lb.label = b.value("label", std::string());
        lb.space = "mmap";
        r.largest_mappings.push_back(std::move(lb));
      }
    }
    const json &d = at(j, "device");
    if (d.is_object()) {
      r.device_peak = d.value("peak", uint64_t{0});
      r.device_peak_time = d.value("time_s", 0.0);
      r.device_reserved_peak = d.value("reserved_peak", uint64_t{0});
      read_named_array(at(d, "by_role"), r.device_peak_by_role, role_name);
      r.device_ooms = d.value("ooms", uint64_t{0});
      const json &oom = at(d, "oom");
      if (oom.is_object()) {
        r.oom_requested = oom.value("requested", uint64_t{0});
        r.oom_reserved = oom.value("reserved", uint64_t{0});
        r.oom_allocated = oom.value("allocated", uint64_t{0});
        r.oom_limit = oom.value("limit", uint64_t{0});
        r.oom_device = oom.value("device", 0u);
        r.oom_time = oom.value("time_s", 0.0);
        read_named_array(at(oom, "by_role"), r.oom_by_role, role_name);
      }
    }
    const json &phases = at(j, "phases");
    for (size_t i = 0; i < phases.size() && i < r.phases.size(); ++i) {
      const json &ph = phases[i];
      PhaseSummary &s = r.phases[i];
      s.name = ph.value("name", std::string(phase_name(static_cast<int>(i))));
      s.allocations = ph.value("allocations", uint64_t{0});
      s.frees = ph.value("frees", uint64_t{0});
      s.bytes = ph.value("bytes", uint64_t{0});
      s.peak = ph.value("peak", uint64_t{0});
      s.peak_time = ph.value("peak_time_s", 0.0);
    }
    for (const auto &o : at(j, "ops")) {
      OpSummary s;
      s.name = o.value("name", std::string());
      s.calls = o.value("calls", uint64_t{0});
      s.allocations = o.value("allocations", uint64_t{0});
      s.bytes = o.value("bytes", uint64_t{0});
      s.temporaries = o.value("temporaries", uint64_t{0});
      s.temporary_bytes = o.value("temporary_bytes", uint64_t{0});
      s.live_at_peak = o.value("live_at_peak", uint64_t{0});
      for (const auto &l : at(o, "labels_at_peak"))
        s.labels_at_peak.push_back(
            {l.value("label", std::string()), l.value("bytes", uint64_t{0})});
      r.ops.push_back(std::move(s));
    }
    for (const auto &s : at(j, "steps"))
      r.steps.push_back({s.value("step", uint64_t{0}), s.value("start_s", 0.0),
                         s.value("end_s", 0.0), s.value("allocations", uint64_t{0}),
                         s.value("bytes", uint64_t{0}), s.value("peak", uint64_t{0})});
    const json &steady = at(j, "steady_allocations_per_step");
    r.steady_allocations_per_step = steady.is_number() ? steady.get<double>() : -1;
    r.live_at_peak_omitted = j.value("live_at_peak_omitted", uint64_t{0});
    for (const auto &b : at(j, "live_at_peak")) {
      LiveBuffer lb;
      lb.addr = b.value("addr", uint64_t{0});
      lb.size = b.value("size", uint64_t{0});
      lb.slack = b.value("slack", uint64_t{0});
      lb.role = b.value("role", std::string());
      lb.phase = b.value("phase", std::string());
      lb.space = b.value("space", std::string());
      lb.device = b.value("device", 0u);
      lb.thread = b.value("thread", 0u);
      lb.op = b.value("op", std::string());
      lb.alloc_time = b.value("alloc_time_s", 0.0);
      lb.label = b.value("label", std::string());
      lb.dtype = b.value("dtype", std::string());
      lb.shape = b.value("shape", std::vector<int64_t>{});
      lb.source = b.value("source", uint64_t{0});
      lb.source_label = b.value("source_label", std::string());
      lb.content_hash = b.value("content_hash", uint64_t{0});
      lb.site = b.value("site", std::string());
      r.live_at_peak.push_back(std::move(lb));
    }
    for (const auto &p : at(j, "policy_savings"))
      r.policy_savings.push_back(
          {p.value("name", std::string()), p.value("title", std::string()),
           p.value("fix", p.value("flag", std::string())), p.value("predicted_peak", uint64_t{0}),
           p.value("saving", int64_t{0}), p.value("explanation", std::string())});
    if (j.contains("engine") && j["engine"].is_object()) {
      const json &e = j["engine"];
      r.engine.name = e.value("name", std::string());
      r.engine.version = e.value("version", std::string());
      r.engine.protocol = e.value("protocol", 0u);
      if (e.contains("policies") && e["policies"].is_array())
        for (const auto &p : e["policies"]) {
          const int id = ad::policy_id(p.value("name", std::string()));
          if (id < 0) continue;
          ad::EnginePolicy &ep = r.engine.policies[static_cast<size_t>(id)];
          ep.described = true;
          ep.on = p.value("on", false);
          ep.switch_on = p.value("switch_on", std::string());
          ep.switch_off = p.value("switch_off", std::string());
        }
    }
    for (const auto &f : at(j, "findings"))
      r.findings.push_back({f.value("kind", std::string()), f.value("message", std::string()),
                            f.value("evidence", std::string()), f.value("fix", std::string()),
                            f.value("bytes", uint64_t{0}), f.value("detail", false)});
    sites_from_json(j, r);
  } catch (const json::exception &e) {
    throw std::runtime_error(std::string("malformed adprof report: ") + e.what());
  }
  return r;
}

}  // namespace adprof
