#include "adprof/timeline.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <unordered_map>

#include "adprof/replay_driver.h"

namespace adprof {

namespace {

// Keeps the higher of each adjacent pair: halves the series, keeps every peak's height.
void thin(std::vector<TimelineSample> &s) {
  size_t out = 0;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    s[out++] = s[i].host >= s[i + 1].host ? s[i] : s[i + 1];
  if (s.size() % 2) s[out++] = s.back();
  s.resize(out);
}

}  // namespace

// build_timeline()'s pass: the state that was its locals, the observer calls that were its
// lambdas (replay_driver.h). Defined here, so build_timeline()'s own pass inlines it.
class TimelineBuilder::Impl {
 public:
  Impl(TraceReader &reader, const Replay &replay, const TimelineOptions &options)
      : reader_(reader), replay_(replay), options_(options) {
    t.memory = reader.header().memory;
    t.start = options.from;
    t.op_names = options.tracked_ops;
    t.op_names.push_back("other ops");
    op_live.assign(t.op_names.size(), 0);
    t.site_names = options.tracked_sites;
    site_live.assign(t.site_names.size(), 0);
    max_samples = std::max<size_t>(options.max_samples, 16);
    // Samples go into time buckets (the window over max_samples, from the chunk index); each
    // bucket keeps its highest moment, and a new bucket is only pushed when time leaves the
    // last, so there is no allocation per change. Thinning stays as a bound for what lies past
    // the hint.
    double window_end = std::min(options.to, std::max(reader.duration_hint(), options.from));
    bucket_width = std::max((window_end - options.from) / static_cast<double>(max_samples), 1e-9);
  }

  // It stops before the first event past the window, or when the caller cancels.
  bool stop_before(const Event &e) {
    ++index;
    if ((index & 0xFFFF) == 0) {
      if (options_.progress) options_.progress(reader_.progress());
      if (options_.cancelled && options_.cancelled()) return true;
    }
    now = reader_.seconds(e.ticks);
    return now > options_.to;  // the window is complete
  }

  void on_heap(const Event &e, const Replay::HeapChange &c) {
    if (!c.block) return;
    uint64_t &live = op_live[series_of(c.block->op_name)];
    if (e.type == format::EventType::kAlloc)
      live += c.block->size;
    else
      live -= std::min(live, c.block->size);
    count_site(*c.block, e.type == format::EventType::kAlloc);
    track(now);
  }

  void on_event(const Event &e, bool changed) {
    // The bands follow the process's phase (Replay::thread_phase): a chunk's restated "other"
    // of a thread that names no phase does not end the band.
    if (e.type == format::EventType::kPhase) {
      const int phase = replay_.process_phase();
      if (phase == band_phase) return;
      if (!t.phases.empty()) t.phases.back().end = now;
      if (phase != ADPROF_PHASE_OTHER || !t.phases.empty()) t.phases.push_back({now, now, phase});
      band_phase = phase;
      return;
    }
    if (e.type == format::EventType::kStep) {
      t.steps.push_back({now, e.a});
      return;
    }
    if (!site_live.empty() && stacks.on_event(e)) return;
    if (!changed) return;
    const Replay::LastChange &c = replay_.last();
    if (is_host_space(c.block->space)) {
      uint64_t &live = op_live[series_of(c.block->op_name)];
      if (c.alloc) live += c.block->size;
      if (c.free) live -= std::min(live, c.block->size);
      if (c.alloc || c.free) count_site(*c.block, c.alloc);
    }
    track(now);
  }

  Timeline finish() {
    flush();
    // The bucket kept its highest moment; what came after it in the bucket (the frees at a
    // program's exit, in the last bucket) would be lost, and the series would end above the
    // trace's end. The state after the last change ends it, unless a change past the window was
    // applied since (a pass that reads on for another observer): the replay is past the window.
    if (below_kept && !past_window) {
      TimelineSample end;
      fill(end, below_time);
      t.samples.push_back(std::move(end));
    }
    t.events = index;
    t.end = std::min(options_.to, now);
    if (!t.phases.empty()) t.phases.back().end = now;
    // Drop the "other" bands: what is not forward, backward or optimizer is outside AD.
    std::erase_if(t.phases, [](const PhaseBand &b) { return b.phase == ADPROF_PHASE_OTHER; });
    if (options_.progress) options_.progress(1.0);
    return std::move(t);
  }

 private:
  int site_series_of(uint32_t stack) {
    if (stack == 0) return -1;
    auto [it, inserted] = site_series.try_emplace(stack, -1);
    if (inserted) {
      const std::string site = stacks.site(stack);
      for (size_t i = 0; i < t.site_names.size(); ++i)
        if (t.site_names[i] == site) it->second = static_cast<int>(i);
    }
    return it->second;
  }
  void count_site(const Block &b, bool alloc) {
    if (site_live.empty()) return;
    const int s = site_series_of(b.stack);
    if (s < 0) return;
    uint64_t &live = site_live[static_cast<size_t>(s)];
    live = alloc ? live + b.size : live - std::min(live, b.size);
  }
  void flush() {
    if (current_bucket < 0) return;
    t.samples.push_back(current);
    if (t.samples.size() >= 2 * max_samples) thin(t.samples);
  }
  void sample(double time) {
    auto bucket = static_cast<int64_t>((time - options_.from) / bucket_width);
    uint64_t host = replay_.host_live();
    if (bucket == current_bucket && host <= current.host &&
        current.device >= replay_.device_live()) {
      below_kept = true;  // the bucket keeps its highest moment, not this one
      below_time = time;
      return;
    }
    below_kept = false;
    if (bucket != current_bucket) {
      flush();
      current_bucket = bucket;
    }
    fill(current, time);
  }
  void fill(TimelineSample &s, double time) const {  // the replay's state now
    s.time = time;
    s.host = replay_.host_live();
    s.by_role = replay_.host_by_role();
    s.by_phase = replay_.host_by_phase();
    s.by_op.assign(op_live.begin(), op_live.end());
    s.by_site.assign(site_live.begin(), site_live.end());
    s.device = replay_.device_live();
    s.device_reserved = replay_.device_reserved();
  }
  size_t series_of(uint32_t name_id) {
    auto it = op_series.find(name_id);
    if (it != op_series.end()) return it->second;
    size_t index = t.op_names.size() - 1;  // "other ops"
    const std::string &n = replay_.name(name_id);
    for (size_t i = 0; i + 1 < t.op_names.size(); ++i)
      if (t.op_names[i] == n) index = i;
    op_series.emplace(name_id, index);
    return index;
  }
  void track(double time) {  // after a change of live memory
    if (replay_.host_live() > t.peak) {
      t.peak = replay_.host_live();
      t.peak_time = time;
    }
    t.device_peak = std::max(t.device_peak, replay_.device_live());
    if (time >= options_.from && time <= options_.to)
      sample(time);
    else if (time > options_.to)
      past_window = true;
  }

  TraceReader &reader_;
  const Replay &replay_;
  const TimelineOptions options_;
  Timeline t;
  std::unordered_map<uint32_t, size_t> op_series;  // name id -> series index
  std::vector<uint64_t> op_live;
  // Tracked sites: their blocks' live bytes, by the site of the block's stack id.
  std::vector<uint64_t> site_live;
  CallStacks stacks;
  std::unordered_map<uint32_t, int> site_series;  // stack id -> series, -1: none
  size_t max_samples = 0;
  uint64_t index = 0;
  double now = 0;
  int band_phase = -1;
  double bucket_width = 0;
  TimelineSample current;
  int64_t current_bucket = -1;
  bool below_kept = false;  // the last change in the window left less than `current` holds
  double below_time = 0;
  bool past_window = false;  // a change past the window was applied
};

TimelineBuilder::TimelineBuilder(TraceReader &reader, const Replay &replay,
                                 const TimelineOptions &options)
    : impl_(std::make_unique<Impl>(reader, replay, options)) {}
TimelineBuilder::~TimelineBuilder() = default;
bool TimelineBuilder::stop_before(const Event &e) { return impl_->stop_before(e); }
void TimelineBuilder::on_heap(const Event &e, const Replay::HeapChange &c) { impl_->on_heap(e, c); }
void TimelineBuilder::on_event(const Event &e, bool changed) { impl_->on_event(e, changed); }
Timeline TimelineBuilder::finish() { return impl_->finish(); }

Timeline build_timeline(TraceReader &reader, const TimelineOptions &options) {
  // One pass through the replay driver (replay_driver.h).
  Replay replay;
  TimelineBuilder::Impl timeline(reader, replay, options);
  ReplayDriver driver(reader, replay, /*arena_positions=*/true);  // what is in an arena when
  driver.run(timeline);
  return timeline.finish();
}

std::string timeline_csv(const Timeline &t) {
  // Appends only: GCC 12's -O3 warns (-Wrestrict, a false positive) on "," + std::string.
  std::string out = "time_s,host";
  for (int r = 0; r < kRoleCount; ++r) (out += ",role.") += role_name(r);
  for (int p = 0; p < kPhaseCount; ++p) (out += ",phase.") += phase_name(p);
  for (const auto &n : t.op_names) (out += ",op.") += n;
  out += ",device,device_reserved\n";
  char cell[48];
  const auto column = [&out](uint64_t v) { (out += ',') += std::to_string(v); };
  for (const TimelineSample &s : t.samples) {
    snprintf(cell, sizeof cell, "%.9f", s.time);
    out += cell;
    column(s.host);
    for (uint64_t v : s.by_role) column(v);
    for (uint64_t v : s.by_phase) column(v);
    for (uint64_t v : s.by_op) column(v);
    column(s.device);
    column(s.device_reserved);
    out += '\n';
  }
  return out;
}

}  // namespace adprof
