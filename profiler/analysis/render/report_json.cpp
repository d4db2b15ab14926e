// The report's JSON form. Schema documented in docs/REPORT_SCHEMA.md; version 1. Readers ignore
// keys they do not know and default the ones that are missing, so later versions only add.
//
// The schema is described once (describe_report below): each key is named in one place, next to
// the member it holds, and the same description is walked by a writer (to_json) and a reader
// (report_from_json). A reader starts from a default-constructed Report, so a missing key
// leaves the member's default.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <type_traits>

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

// Walks a description writing an object: each field becomes j[key].
class JsonWriter {
 public:
  static constexpr bool kReads = false;
  explicit JsonWriter(json &j) : j_(j) {}

  template <class T>
  void field(const char *key, const T &value) {
    j_[key] = value;
  }
  // Written only when `write` (a reader reads it whenever it is there).
  template <class T>
  void optional(const char *key, const T &value, bool write) {
    if (write) j_[key] = value;
  }
  // The key and, in reports written before it was renamed, its old name (read only).
  template <class T>
  void renamed(const char *key, const char * /*old_key*/, const T &value) {
    j_[key] = value;
  }
  // A number, or null for a negative one (not known).
  void number_or_null(const char *key, double value) {
    j_[key] = value < 0 ? json(nullptr) : json(value);
  }
  // Counts indexed by a vocabulary, keyed by their names (named_json.h).
  template <size_t N>
  void named(const char *key, const std::array<uint64_t, N> &values, const char *(*name)(int)) {
    j_[key] = named_array(values, name);
  }
  // A nested object, written when `write`.
  template <class F>
  void object(const char *key, F &&describe, bool write = true) {
    if (!write) return;
    json o = json::object();
    JsonWriter w(o);
    describe(w);
    j_[key] = std::move(o);
  }
  // An array of objects, each described by describe(visitor, element); the first `count`.
  template <class T, class F>
  void array(const char *key, const std::vector<T> &items, F &&describe, size_t count = SIZE_MAX) {
    json a = json::array();
    for (size_t i = 0; i < items.size() && i < count; ++i) {
      json o = json::object();
      JsonWriter w(o);
      describe(w, items[i]);
      a.push_back(std::move(o));
    }
    j_[key] = std::move(a);
  }
  // An array of N objects, by index: describe(visitor, element, index).
  template <class T, size_t N, class F>
  void indexed(const char *key, const std::array<T, N> &items, F &&describe) {
    json a = json::array();
    for (size_t i = 0; i < N; ++i) {
      json o = json::object();
      JsonWriter w(o);
      describe(w, items[i], i);
      a.push_back(std::move(o));
    }
    j_[key] = std::move(a);
  }

 private:
  json &j_;
};

// Walks the same description reading an object: each field from j.value(key, its default).
class JsonReader {
 public:
  static constexpr bool kReads = true;
  explicit JsonReader(const json &j) : j_(j) {}

  bool has(const char *key) const { return j_.contains(key); }
  template <class T>
  void field(const char *key, T &value) {
    value = j_.value(key, T(value));
  }
  template <class T>
  void optional(const char *key, T &value, bool /*write*/) {
    field(key, value);
  }
  template <class T>
  void renamed(const char *key, const char *old_key, T &value) {
    value = j_.value(key, j_.value(old_key, T(value)));
  }
  void number_or_null(const char *key, double &value) {
    const json &v = at(j_, key);
    value = v.is_number() ? v.get<double>() : -1;
  }
  template <size_t N>
  void named(const char *key, std::array<uint64_t, N> &values, const char *(*name)(int)) {
    read_named_array(at(j_, key), values, name);
  }
  // Read when the key holds an object (whatever `write` said).
  template <class F>
  void object(const char *key, F &&describe, bool /*write*/ = true) {
    if (const json &o = at(j_, key); o.is_object()) {
      JsonReader r(o);
      describe(r);
    }
  }
  template <class T, class F>
  void array(const char *key, std::vector<T> &items, F &&describe, size_t /*count*/ = SIZE_MAX) {
    for (const auto &e : at(j_, key)) {
      T item{};
      JsonReader r(e);
      describe(r, item);
      items.push_back(std::move(item));
    }
  }
  // The first N entries, each into its place; the others keep theirs.
  template <class T, size_t N, class F>
  void indexed(const char *key, std::array<T, N> &items, F &&describe) {
    const json &a = at(j_, key);
    for (size_t i = 0; i < a.size() && i < N; ++i) {
      JsonReader r(a[i]);
      describe(r, items[i], i);
    }
  }
  // Read only when the key holds an array (a reader of an older schema skips what it is not).
  template <class T, class F>
  void array_if_array(const char *key, std::vector<T> &items, F &&describe) {
    if (at(j_, key).is_array()) array(key, items, describe);
  }

 private:
  const json &j_;
};

// A NamedBytes under the key its list calls its name by.
template <const char *kNameKey>
struct NamedBytesAs {
  template <class V, class N>
  void operator()(V &v, N &n) const {
    v.field(kNameKey, n.name);
    v.field("bytes", n.bytes);
  }
};
constexpr char kName[] = "name";
constexpr char kLabel[] = "label";

template <class V, class B>
void describe_live_buffer(V &v, B &b, bool stacks) {
  v.field("addr", b.addr);
  v.field("size", b.size);
  v.field("slack", b.slack);
  v.field("role", b.role);
  v.field("phase", b.phase);
  v.field("space", b.space);
  v.field("device", b.device);
  v.field("thread", b.thread);
  v.field("op", b.op);
  v.field("alloc_time_s", b.alloc_time);
  v.field("label", b.label);
  v.field("dtype", b.dtype);
  v.field("shape", b.shape);
  v.field("source", b.source);
  v.field("source_label", b.source_label);
  v.field("source_dtype", b.source_dtype);
  v.field("content_hash", b.content_hash);
  v.optional("site", b.site, stacks && !b.site.empty());  // traces with call stacks
}

// A mapping live at the peak: the fields a mapping has (its space is "mmap").
template <class V, class B>
void describe_mapping(V &v, B &b) {
  v.field("addr", b.addr);
  v.field("size", b.size);
  v.field("role", b.role);
  v.field("op", b.op);
  v.field("phase", b.phase);
  v.field("label", b.label);
  if constexpr (V::kReads) b.space = "mmap";
}

// The policies an engine described: the shared list's name and the engine's own words.
struct NamedPolicy {
  std::string name;  // ad::policy_names()
  ad::EnginePolicy policy;
};
template <class V, class P>
void describe_named_policy(V &v, P &p) {
  v.field("name", p.name);
  v.field("on", p.policy.on);
  v.field("switch_on", p.policy.switch_on);
  v.field("switch_off", p.policy.switch_off);
}
template <class V, class E>
void describe_engine_policies(V &v, E &engine) {
  std::vector<NamedPolicy> policies;
  if constexpr (V::kReads) {
    v.array_if_array("policies", policies,
                     [](V &p, NamedPolicy &n) { describe_named_policy(p, n); });
    for (NamedPolicy &n : policies) {
      const int id = ad::policy_id(n.name);
      if (id < 0) continue;  // a policy this reader does not know
      ad::EnginePolicy &ep = engine.policies[static_cast<size_t>(id)];
      ep.described = true;
      ep.on = n.policy.on;
      ep.switch_on = std::move(n.policy.switch_on);
      ep.switch_off = std::move(n.policy.switch_off);
    }
  } else {
    for (const ad::PolicyName &n : ad::policy_names())
      if (const ad::EnginePolicy &p = engine.policy(n.id); p.described)
        policies.push_back({n.name, p});
    v.array("policies", policies, [](V &p, const NamedPolicy &n) { describe_named_policy(p, n); });
  }
}

// The report's schema: every key once. `R` is Report (reading) or const Report (writing).
template <class V, class R>
void describe_report(V &v, R &r, const JsonOptions &options) {
  v.object("trace", [&](V &t) {
    t.field("path", r.trace);
    t.field("pid", r.pid);
    t.field("memory", r.memory);
    t.field("duration_s", r.duration);
    t.field("events", r.events);
    t.field("threads", r.threads);
    t.field("thread_names", r.thread_names);
    t.field("complete", r.complete);
    t.field("end", r.end_reason);
    t.field("corrupt_chunks", r.corrupt_chunks);
    t.field("missing_chunks", r.missing_chunks);
    // A report written before the count has none (Report::ad_events_known).
    if constexpr (V::kReads) r.ad_events_known = t.has("ad_events");
    t.field("ad_events", r.ad_events);
  });
  v.object("totals", [&](V &t) {
    t.field("allocations", r.allocations);
    t.field("frees", r.frees);
    t.field("bytes_allocated", r.bytes_allocated);
    t.field("unmatched_frees", r.unmatched_frees);
    t.field("live_at_end", r.live_at_end);
    t.field("temporaries", r.temporaries);
    t.field("temporary_bytes", r.temporary_bytes);
  });
  v.object("peak", [&](V &p) {
    p.field("bytes", r.peak);
    p.field("time_s", r.peak_time);
    p.field("event", r.peak_event);
    p.field("phase", r.peak_phase);
    p.named("by_role", r.peak_by_role, role_name);
    p.named("by_phase", r.peak_by_phase, phase_name);
    p.array("by_op", r.peak_by_op, NamedBytesAs<kName>());
    p.array("by_label", r.peak_by_label, [](V &l, auto &x) {
      l.field("label", x.label);
      l.field("role", x.role);
      l.field("bytes", x.bytes);
      l.field("buffers", x.buffers);
    });
    p.array("by_role_op", r.peak_by_role_op, [](V &g, auto &x) {
      g.field("role", x.role);
      g.field("op", x.op);
      g.field("bytes", x.bytes);
      g.field("buffers", x.buffers);
      g.array("labels", x.labels, NamedBytesAs<kName>());
    });
    p.field("slack_bytes", r.peak_slack);
    p.object(
        "foreign_split",
        [&](V &s) {
          if constexpr (V::kReads) r.start_up_end = 0;  // the split is known: 0 when unsaid
          s.field("start_up_end_s", r.start_up_end);
          s.field("start_up", r.peak_foreign_start_up);
          s.field("after_start_up", r.peak_foreign_after_start_up);
          s.array("after_start_up_by_other_threads", r.peak_foreign_after_start_up_by_other_threads,
                  [](V &t, auto &x) {
                    t.field("name", x.name);
                    t.field("threads", x.threads);
                    t.field("bytes", x.bytes);
                  });
        },
        r.start_up_end >= 0);
  });
  v.object("allocator", [&](V &a) {
    a.field("available", r.have_allocator_stats);
    a.field("jemalloc_allocated_at_peak", r.jemalloc_allocated_at_peak);
    a.field("jemalloc_active_at_peak", r.jemalloc_active_at_peak);
    a.field("jemalloc_resident_at_peak", r.jemalloc_resident_at_peak);
    a.field("jemalloc_retained_at_peak", r.jemalloc_retained_at_peak);
    a.field("rss_at_peak", r.rss_at_peak);
    a.field("max_rss", r.max_rss);
  });
  v.object("mappings", [&](V &m) {
    m.field("peak", r.mapped_peak);
    m.field("at_peak", r.mapped_at_peak);
    m.array("largest", r.largest_mappings, [](V &b, auto &x) { describe_mapping(b, x); });
  });
  v.object("device", [&](V &d) {
    d.field("peak", r.device_peak);
    d.field("time_s", r.device_peak_time);
    d.field("reserved_peak", r.device_reserved_peak);
    d.named("by_role", r.device_peak_by_role, role_name);
    d.array("by_label", r.device_peak_by_label, [](V &l, auto &x) {
      l.field("label", x.label);
      l.field("role", x.role);
      l.field("bytes", x.bytes);
      l.field("buffers", x.buffers);
    });
    d.field("ooms", r.device_ooms);
    d.object("oom", [&](V &o) {
      o.field("requested", r.oom_requested);
      o.field("reserved", r.oom_reserved);
      o.field("allocated", r.oom_allocated);
      o.field("limit", r.oom_limit);
      o.field("device", r.oom_device);
      o.field("time_s", r.oom_time);
      o.named("by_role", r.oom_by_role, role_name);
    });
  });
  v.indexed("phases", r.phases, [](V &p, auto &s, size_t i) {
    if constexpr (V::kReads) s.name = phase_name(static_cast<int>(i));  // when it has none
    p.field("name", s.name);
    p.field("allocations", s.allocations);
    p.field("frees", s.frees);
    p.field("bytes", s.bytes);
    p.field("peak", s.peak);
    p.field("peak_time_s", s.peak_time);
  });
  v.array("ops", r.ops, [](V &o, auto &s) {
    o.field("name", s.name);
    o.field("calls", s.calls);
    o.field("allocations", s.allocations);
    o.field("bytes", s.bytes);
    o.field("temporaries", s.temporaries);
    o.field("temporary_bytes", s.temporary_bytes);
    o.field("live_at_peak", s.live_at_peak);
    o.array("labels_at_peak", s.labels_at_peak, NamedBytesAs<kLabel>());
  });
  // A step window's (adprof run --steps A:B): the steps outside it are the writer's summaries
  // ("summarized": true), and every step says when it peaked and its bytes by role then.
  v.optional("step_window", r.step_window, r.step_window);
  v.array("steps", r.steps, [&r](V &t, auto &s) {
    t.field("step", s.step);
    t.field("start_s", s.start);
    t.field("end_s", s.end);
    t.field("allocations", s.allocations);
    t.field("bytes", s.bytes);
    t.field("peak", s.peak);
    if (r.step_window) {
      t.optional("summarized", s.summarized, s.summarized);
      t.field("frees", s.frees);
      t.field("peak_time_s", s.peak_time);
      t.named("peak_by_role", s.peak_by_role, role_name);
      t.named("live_at_start_by_role", s.live_by_role, role_name);
    }
  });
  v.number_or_null("steady_allocations_per_step", r.steady_allocations_per_step);
  // Compact by default: the largest buffers only (every buffer live at the peak made a Python
  // run's report 38 MiB); peak.by_label and peak.by_role_op keep every buffer's bytes. How
  // many were left out is said (--full keeps them).
  const size_t kept =
      options.full ? r.live_at_peak.size() : std::min(r.live_at_peak.size(), options.top);
  uint64_t omitted = r.live_at_peak_omitted + (r.live_at_peak.size() - kept);
  v.optional("live_at_peak_omitted", omitted, omitted != 0);
  if constexpr (V::kReads) r.live_at_peak_omitted = omitted;
  v.array(
      "live_at_peak", r.live_at_peak, [&](V &b, auto &x) { describe_live_buffer(b, x, r.stacks); },
      kept);
  v.array("policy_savings", r.policy_savings, [](V &p, auto &s) {
    p.field("name", s.name);
    p.field("title", s.title);
    p.renamed("fix", "flag", s.fix);
    p.field("predicted_peak", s.predicted_peak);
    p.field("saving", s.saving);
    p.field("explanation", s.explanation);
  });
  v.object(
      "engine",
      [&](V &e) {
        e.field("name", r.engine.name);
        e.field("version", r.engine.version);
        e.field("protocol", r.engine.protocol);
        describe_engine_policies(e, r.engine);
      },
      r.engine.described());
  v.array("findings", r.findings, [](V &f, auto &x) {
    f.field("kind", x.kind);
    f.field("message", x.message);
    f.field("evidence", x.evidence);
    f.field("fix", x.fix);
    f.field("bytes", x.bytes);
    f.optional("detail", x.detail, x.detail);
  });
}

}  // namespace

json to_json(const Report &r, const JsonOptions &options) {
  json j;
  j["schema"] = "adprof.report";
  j["schema_version"] = r.schema_version;
  JsonWriter w(j);
  describe_report(w, r, options);
  if (r.stacks) j["sites"] = sites_to_json(r);  // traces with call stacks
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
    JsonReader reader(j);
    describe_report(reader, r, JsonOptions{});
    sites_from_json(j, r);
  } catch (const json::exception &e) {
    throw std::runtime_error(std::string("malformed adprof report: ") + e.what());
  }
  return r;
}

}  // namespace adprof
