// analyze(): one replay behind a report: totals by phase, op and step, temporaries, peaks, and
// the live sets at the host peak and at the device peak (live_at_peak.h: one observer per
// memory, neither copied at every new peak).
// Memory is bounded by live blocks and distinct ops, never by the number of events.
#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <map>
#include <span>
#include <tuple>
#include <unordered_map>

#include "adprof/findings.h"
#include "adprof/replay_driver.h"
#include "adprof/report.h"
#include "adprof/snapshot.h"
#include "analyze_with.h"
#include "live_at_peak.h"
#include "step_summaries.h"
#include "whatif/pass.h"

namespace adprof {

namespace {

struct OpTotals {
  uint64_t calls = 0, allocations = 0, bytes = 0, temporaries = 0, temporary_bytes = 0;
  bool seen = false;
};

// Totals by op name id. Ids are dense and small (names are interned from 1 up), so they index a
// vector; an id past kDense (a very large or a damaged trace) goes to a map.
class OpTable {
 public:
  [[gnu::always_inline]] OpTotals &operator[](uint32_t id) {
    if (id < dense_.size()) [[likely]] {
      dense_[id].seen = true;
      return dense_[id];
    }
    return grow(id);
  }
  template <typename F>
  void for_each(F f) const {
    for (size_t id = 0; id < dense_.size(); ++id)
      if (dense_[id].seen) f(static_cast<uint32_t>(id), dense_[id]);
    for (const auto &[id, t] : sparse_) f(id, t);
  }

 private:
  OpTotals &grow(uint32_t id) {
    OpTotals *t;
    if (id < kDense) {
      dense_.resize(std::max<size_t>(id + 1, 2 * dense_.size()));
      t = &dense_[id];
    } else {
      t = &sparse_[id];
    }
    t->seen = true;
    return *t;
  }

  static constexpr uint32_t kDense = 1u << 16;
  std::vector<OpTotals> dense_;
  std::unordered_map<uint32_t, OpTotals> sparse_;
};

// Bytes by thread index, summed by the threads' names (an index past `names`, which a damaged
// trace may hold, is named by its number), most first.
std::vector<ThreadNameBytes> by_thread_name(const absl::flat_hash_map<uint32_t, uint64_t> &bytes,
                                            const std::vector<std::string> &names) {
  std::map<std::string, ThreadNameBytes> by_name;
  for (const auto &[thread, n] : bytes) {
    const std::string name =
        thread < names.size() ? names[thread] : "thread " + std::to_string(thread);
    ThreadNameBytes &t = by_name[name];
    t.name = name;
    ++t.threads;
    t.bytes += n;
  }
  std::vector<ThreadNameBytes> out;
  for (auto &[name, t] : by_name) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const ThreadNameBytes &a, const ThreadNameBytes &b) {
    return a.bytes > b.bytes;
  });
  return out;
}

}  // namespace

Report analyze(const std::string &trace_path, const AnalyzeOptions &options) {
  TraceReader reader(trace_path);
  return analyze(reader, trace_path, options);
}

namespace {

// analyze() alone: no AD observer, nothing left of it in the loop.
struct NoAdPass {
  void on_heap(const Event &, const Replay::HeapChange &, uint64_t) {}
  void on_event(const Event &, uint64_t) {}
};
// No rider (analyze_with.h's PassRider): nothing left of it in the loop either.
struct NoRider {
  void on_heap(const Event &, const Replay::HeapChange &) {}
  void on_event(const Event &, bool) {}
};

// The report's one pass, with an optional observer riding along (a template, so that the
// plain report's loop carries no trace of it).
template <class AdPass, class Rider>
Report analyze_impl(TraceReader &reader, const std::string &trace_path,
                    const AnalyzeOptions &options, Replay &replay, AdPass *ad_pass, Rider *rider) {
  Report r;
  r.trace = trace_path;
  r.pid = reader.header().pid;
  r.memory = reader.header().memory;
  for (int p = 0; p < kPhaseCount; ++p) r.phases[p].name = phase_name(p);

  ad::Decoder ad_events(replay);  // the AD protocol's events (ad_protocol.h)
  bool have_ad_tape = false;
  LiveAtPeak<PeakMemory::kHost> host_at_peak(replay);      // r.peak's live set
  LiveAtPeak<PeakMemory::kDevice> device_at_peak(replay);  // r.device_peak's
  OpTable ops;
  SiteTotals sites;  // traces with call stacks (sites.h)
  uint64_t index = 0;
  uint64_t last_ticks = reader.header().start_ticks;
  std::array<uint64_t, format::kCounterKindCount> counters_at_peak{};
  std::array<bool, format::kCounterKindCount> have_at_peak{};
  bool in_step = false;
  StepSummary step;
  std::vector<StepSummary> summaries;  // a step window's (step_summaries.h)
  auto close_step = [&](uint64_t ticks) {
    if (!in_step) return;
    step.end = reader.seconds(ticks);
    r.steps.push_back(step);
  };
  auto count_allocation = [&](const Block &b) __attribute__((always_inline)) {
    ++r.allocations;
    r.bytes_allocated += b.size;
    PhaseSummary &ph = r.phases[b.phase];
    ++ph.allocations;
    ph.bytes += b.size;
    OpTotals &op = ops[b.op_name];
    ++op.allocations;
    op.bytes += b.size;
    sites.on_alloc(b);
    if (in_step) {
      ++step.allocations;
      step.bytes += b.size;
    }
  };
  auto count_temporary = [&](const Block &b) __attribute__((always_inline)) {
    ++r.temporaries;
    r.temporary_bytes += b.size;
    OpTotals &op = ops[b.op_name];
    ++op.temporaries;
    op.temporary_bytes += b.size;
    sites.on_temporary(b);
  };
  auto track_host_peak = [&](const Event &e, int thread_phase) __attribute__((always_inline)) {
    const uint64_t live = replay.host_live();
    if (live > r.peak) {
      r.peak = live;
      host_at_peak.at_new_peak();
      r.peak_event = index;
      r.mapped_at_peak = replay.mapped_live();
      r.peak_time = reader.seconds(e.ticks);
      r.peak_phase = phase_name(thread_phase);
      counters_at_peak = replay.counters();
      have_at_peak = replay.have_counters();
    }
    PhaseSummary &ph = r.phases[thread_phase];
    if (live > ph.peak) {
      ph.peak = live;
      ph.peak_time = reader.seconds(e.ticks);
    }
    if (in_step && live > step.peak) {
      step.peak = live;
      step.peak_time = reader.seconds(e.ticks);
      step.peak_by_role = replay.host_by_role();
    }
  };
  // One pass through the replay driver (replay_driver.h): heap events on its fast path.
  ReplayDriver driver(reader, replay);
  auto on_heap = [&](const Event &e, const Replay::HeapChange &c) __attribute__((always_inline)) {
    index = driver.index();
    ad_pass->on_heap(e, c, index);  // the AD layer's observer, when one rides along
    rider->on_heap(e, c);
    last_ticks = e.ticks;
    if (c.removed) host_at_peak.on_heap_removed(e.addr, *c.removed);
    if (!c.block) return;
    const Block &b = *c.block;
    const int thread_phase = replay.thread_phase(e.thread);
    if (e.type == format::EventType::kAlloc) {
      count_allocation(b);
    } else {
      ++r.frees;
      ++r.phases[thread_phase].frees;
      step.frees += in_step;
      if (c.temporary) count_temporary(b);
    }
    track_host_peak(e, thread_phase);
  };
  uint64_t start_up_serial = UINT64_MAX;  // blocks of a serial at most this: start-up
  auto on_event = [&](const Event &e, bool changed) {
    index = driver.index();
    ad_pass->on_event(e, index);
    rider->on_event(e, changed);
    last_ticks = e.ticks;
    sites.on_event(e);
    switch (e.type) {
      case format::EventType::kOpBegin:
      case format::EventType::kStep:
        if (r.start_up_end < 0) {
          r.start_up_end = reader.seconds(e.ticks);
          start_up_serial = replay.serial();
        }
        [[fallthrough]];
      case format::EventType::kAnnotate:
      case format::EventType::kLabel:
      case format::EventType::kDescribe:
      case format::EventType::kRetag:
      case format::EventType::kContentHash:
        ++r.ad_events;
        break;
      case format::EventType::kRole:  // a thread's buffer restates its role and phase
        r.ad_events += e.operand != ADPROF_ROLE_FOREIGN;
        break;
      case format::EventType::kPhase:
        r.ad_events += e.operand != ADPROF_PHASE_OTHER;
        break;
      default:
        break;
    }
    if (e.type == format::EventType::kOpBegin) {
      ++ops[static_cast<uint32_t>(e.a)].calls;
    } else if (e.type == format::EventType::kStep) {
      close_step(e.ticks);
      in_step = true;
      step = StepSummary{};
      step.step = e.a;
      step.start = reader.seconds(e.ticks);
      step.peak = replay.host_live();
      step.peak_time = step.start;
      step.live_by_role = step.peak_by_role = replay.host_by_role();
    } else if (e.type == format::EventType::kStepSummary) {
      StepSummary summary;
      if (step_from_summary(e, reader, replay, summary)) {
        // A step window's first steps are summaries (their marks folded): the start-up ends at
        // the first one's mark, unless an op began before it.
        if (r.start_up_end < 0) {
          r.start_up_end = summary.start;
          start_up_serial = replay.serial();
        }
        summaries.push_back(std::move(summary));
      }
    } else if (e.type == format::EventType::kAnnotate) {
      if (options.on_annotation) options.on_annotation(e, replay);
      const ad::Decoder::Annotation a = ad_events.annotation(e);
      if (a.kind == ad::Kind::kTapeBegin) {
        have_ad_tape = true;
      } else if (a.kind == ad::Kind::kDeviceOom && a.values.size() >= 5 + kRoleCount &&
                 r.device_ooms++ == 0) {
        // {requested, reserved, allocated, limit, device, live bytes by role...}
        const auto v = a.values;
        r.oom_requested = v[0];
        r.oom_reserved = v[1];
        r.oom_allocated = v[2];
        r.oom_limit = v[3];
        r.oom_device = static_cast<uint32_t>(v[4]);
        r.oom_time = reader.seconds(e.ticks);
        for (int i = 0; i < kRoleCount; ++i) r.oom_by_role[i] = v[5 + i];
      }
    } else if (e.type == format::EventType::kLabel) {
      ad_events.label(e);  // a legacy trace is known by its labels too
    } else if (e.type == format::EventType::kCounter && e.operand == 1) {
      r.max_rss = std::max(r.max_rss, e.a);
    }
    if (!changed) return;
    const Replay::LastChange &c = replay.last();
    host_at_peak.on_change(c);
    device_at_peak.on_change(c);
    const Block &b = *c.block;
    bool host = is_host_space(b.space);
    const int thread_phase = replay.thread_phase(e.thread);
    if (c.alloc && host) {
      count_allocation(b);
    } else if (c.free && host && e.type == format::EventType::kFree) {
      ++r.frees;
      ++r.phases[thread_phase].frees;
      step.frees += in_step;
      if (c.temporary) count_temporary(b);
    }
    track_host_peak(e, thread_phase);
    if (replay.device_live() > r.device_peak) {
      r.device_peak = replay.device_live();
      device_at_peak.at_new_peak();
      r.device_peak_time = reader.seconds(e.ticks);
      r.device_peak_by_role = replay.device_by_role();
    }
    r.device_reserved_peak = std::max(r.device_reserved_peak, replay.device_reserved());
    r.mapped_peak = std::max(r.mapped_peak, replay.mapped_live());
  };
  auto report = observe(on_heap, on_event);
  DriveOptions drive;
  drive.progress = options.progress;
  driver.run(report, drive);
  close_step(last_ticks);
  r.step_window = !summaries.empty();
  merge_step_summaries(r.steps, std::move(summaries));
  r.events = reader.stats().events;
  r.duration = reader.seconds(last_ticks);
  r.threads = reader.thread_count();
  r.thread_names = replay.thread_names();
  r.complete = reader.end().complete;
  r.end_reason = reader.end().reason;
  r.corrupt_chunks = reader.stats().corrupt_chunks;
  r.missing_chunks = reader.stats().missing_chunks;
  r.unmatched_frees = replay.unmatched_frees();
  r.live_at_end = replay.host_live();
  r.rss_at_peak = have_at_peak[1] ? counters_at_peak[1] : 0;
  r.have_allocator_stats = have_at_peak[2];
  r.jemalloc_allocated_at_peak = counters_at_peak[2];
  r.jemalloc_active_at_peak = counters_at_peak[3];
  r.jemalloc_resident_at_peak = counters_at_peak[4];
  r.jemalloc_retained_at_peak = counters_at_peak[5];
  if (r.steps.size() >= 2) {
    std::vector<uint64_t> counts;
    for (size_t i = 1; i < r.steps.size(); ++i) counts.push_back(r.steps[i].allocations);
    std::nth_element(counts.begin(), counts.begin() + counts.size() / 2, counts.end());
    r.steady_allocations_per_step = static_cast<double>(counts[counts.size() / 2]);
  }

  // ---- the device peak by (label, role) ----
  {
    struct Count {
      uint64_t bytes = 0, buffers = 0;
    };
    absl::flat_hash_map<std::pair<uint32_t, uint8_t>, Count> label_role;
    auto count = [&](uint32_t label, uint8_t role, uint64_t size) {
      Count &c = label_role[{label, role}];
      c.bytes += size;
      ++c.buffers;
    };
    for (const auto &[addr, blk] : device_at_peak.blocks()) count(blk->label, blk->role, blk->size);
    for (const auto &[key, c] : label_role)
      r.device_peak_by_label.push_back({key.first ? replay.name(key.first) : std::string(),
                                        role_name(key.second), c.bytes, c.buffers});
    std::sort(r.device_peak_by_label.begin(), r.device_peak_by_label.end(),
              [](const LabelBytes &a, const LabelBytes &b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes
                                          : std::tie(a.label, a.role) < std::tie(b.label, b.role);
              });
  }

  // ---- the live set at the peak ----
  std::vector<std::pair<uint64_t, const Block *>> at_peak = host_at_peak.blocks();
  if (!sites.empty()) {
    std::vector<const Block *> peak_blocks, end_blocks;
    for (const auto &p : at_peak) peak_blocks.push_back(p.second);
    for (const auto &[key, blk] : replay.blocks()) end_blocks.push_back(&blk);
    r.stacks = true;
    std::function<void(double)> symbolising;
    if (options.stage_progress)
      symbolising = [&](double f) { options.stage_progress("symbolising stacks", f); };
    r.sites = sites.summarize(peak_blocks, end_blocks, symbolising, options.site_stacks);
    if (options.folded_stacks) r.peak_stacks = sites.folded(peak_blocks);
  }
  if (r.start_up_end >= 0) {
    absl::flat_hash_map<uint32_t, uint64_t> after_by_thread;  // threads but the first (0)
    for (const auto &[addr, b] : at_peak) {
      if (!is_host_space(b->space) || b->role != ADPROF_ROLE_FOREIGN) continue;
      if (b->serial <= start_up_serial) {
        r.peak_foreign_start_up += b->size;
      } else {
        r.peak_foreign_after_start_up += b->size;
        if (b->thread != 0) after_by_thread[b->thread] += b->size;
      }
    }
    r.peak_foreign_after_start_up_by_other_threads =
        by_thread_name(after_by_thread, r.thread_names);
  }
  std::vector<std::pair<uint64_t, const Block *>> mappings;
  for (const auto &p : at_peak)
    if (p.second->space == ADPROF_SPACE_MMAP) mappings.push_back(p);
  std::sort(mappings.begin(), mappings.end(),
            [](const auto &a, const auto &b) { return a.second->size > b.second->size; });
  if (mappings.size() > 5) mappings.resize(5);
  for (auto &p : mappings) {  // described like host buffers
    Block as_host = *p.second;
    as_host.space = ADPROF_SPACE_HEAP;
    Snapshot one = describe_blocks({{p.first, &as_host}}, replay, reader, 1);
    if (!one.buffers.empty()) {
      one.buffers[0].space = "mmap";
      r.largest_mappings.push_back(std::move(one.buffers[0]));
    }
  }
  Snapshot snap = describe_blocks(std::move(at_peak), replay, reader, options.max_live_buffers);
  // Freed blocks' shapes were recycled by the replay: use the copies taken at the peak.
  if (!host_at_peak.logged_shapes().empty()) {
    absl::flat_hash_map<uint64_t, const std::vector<int64_t> *> shapes;
    for (const auto &[addr, shape] : host_at_peak.logged_shapes()) shapes[addr] = &shape;
    for (LiveBuffer &lb : snap.buffers)
      if (auto it = shapes.find(lb.addr); it != shapes.end()) lb.shape = *it->second;
  }
  r.peak_by_role = snap.by_role;
  r.peak_by_phase = snap.by_phase;
  r.peak_slack = snap.slack;
  r.live_at_peak = std::move(snap.buffers);
  if (r.stacks)  // the context still wins (op, role); the stack is one field away
    for (LiveBuffer &lb : r.live_at_peak)
      if (lb.stack) lb.site = sites.stacks().site(lb.stack);
  r.peak_by_op = snap.by_op;
  r.peak_by_label = std::move(snap.by_label);
  r.peak_by_role_op = std::move(snap.by_role_op);
  std::unordered_map<std::string, uint64_t> op_bytes_at_peak;
  for (const NamedBytes &o : r.peak_by_op) op_bytes_at_peak[o.name] = o.bytes;
  std::unordered_map<std::string, std::vector<NamedBytes>> op_labels_at_peak;
  for (auto &[kind, labels] : snap.op_labels) op_labels_at_peak[kind] = std::move(labels);

  ops.for_each([&](uint32_t id, const OpTotals &t) {
    OpSummary s;
    s.name = replay.op_kind(id);
    s.calls = t.calls;
    s.allocations = t.allocations;
    s.bytes = t.bytes;
    s.temporaries = t.temporaries;
    s.temporary_bytes = t.temporary_bytes;
    auto it = op_bytes_at_peak.find(s.name);
    s.live_at_peak = it != op_bytes_at_peak.end() ? it->second : 0;
    if (auto labels = op_labels_at_peak.find(s.name); labels != op_labels_at_peak.end())
      s.labels_at_peak = labels->second;
    r.ops.push_back(std::move(s));
  });
  std::sort(r.ops.begin(), r.ops.end(), [](const OpSummary &a, const OpSummary &b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  // The AD layer (ad_analysis.h) predicts the policies' savings when the trace has a tape.
  r.engine = ad_events.engine();
  r.ad_tape = have_ad_tape;
  r.findings = find_findings(r);
  if (options.progress) options.progress(1.0);
  return r;
}

}  // namespace

Report analyze(TraceReader &reader, const std::string &trace_path, const AnalyzeOptions &options) {
  Replay replay;
  NoAdPass none;
  NoRider no_rider;
  return analyze_impl(reader, trace_path, options, replay, &none, &no_rider);
}

Report analyze_with(TraceReader &reader, const std::string &trace_path,
                    const AnalyzeOptions &options, Replay &replay, whatif::Pass *ad_pass) {
  if (!ad_pass) return analyze(reader, trace_path, options);
  NoRider no_rider;
  return analyze_impl(reader, trace_path, options, replay, ad_pass, &no_rider);
}

Report analyze_with_rider(TraceReader &reader, const std::string &trace_path,
                          const AnalyzeOptions &options, Replay &replay, PassRider &rider) {
  NoAdPass none;
  return analyze_impl(reader, trace_path, options, replay, &none, &rider);
}

}  // namespace adprof
