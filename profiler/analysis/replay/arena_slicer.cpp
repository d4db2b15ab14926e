#include "adprof/arena_slicer.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string_view>
#include <utility>

#include "adprof/ad_protocol.h"
#include "adprof/context.h"

namespace adprof {

namespace fmt = format;

namespace {

constexpr std::string_view kKindNames[] = {ADPROF_AD_ARENA_LAYOUT, ADPROF_AD_ARENA_SLICE,
                                           ADPROF_AD_ARENA_CALL, ADPROF_AD_ARENA_CALL_END};
// A layout may not ask for more slices than this (a damaged trace cannot make the slicer hold
// more than a bounded table per layout).
constexpr size_t kMaxSlices = size_t{1} << 20;

uint64_t at(std::span<const uint64_t> v, size_t i) { return i < v.size() ? v[i] : ADPROF_AD_NONE; }

// The memory an arena can be in: a heap block (a runtime on the host mallocs it), or device
// memory the program holds, taken from the driver (a runtime whose allocator takes each buffer
// from the driver: DEVICE_RAW) or handed out by an allocator that declares its blocks. Never an
// allocator's reserve (DEVICE_SEGMENT): its bytes are not a program's buffer.
bool can_hold_arena(uint8_t space) {
  return space == ADPROF_SPACE_HEAP || space == ADPROF_SPACE_DEVICE_RAW ||
         space == ADPROF_SPACE_DEVICE_BLOCK;
}

}  // namespace

ArenaSlicer::Slice ArenaSlicer::free_bytes_slice(uint64_t offset, uint64_t bytes,
                                                 uint64_t unused_label) {
  return Slice{.offset = offset,
               .bytes = bytes,
               .role = ADPROF_ROLE_WORKSPACE,
               .phase = ADPROF_AD_NONE,
               .op = 0,
               .label = unused_label,
               .from = 0,
               .to = 0,
               .source_argument = ADPROF_AD_NONE,
               .source_offset = ADPROF_AD_NONE,
               .dtype = 0,
               .dims = {}};
}

std::span<const Event> ArenaSlicer::rewrite(std::span<const Event> run) {
  out_.clear();  // the last call's events, and their payloads, are the caller's no more
  payloads_.clear();
  texts_.clear();
  rewriting_ = !timelines_.empty();  // events are held back since an earlier run
  for (size_t i = 0; i < run.size(); ++i) {
    const Event &e = run[i];
    const bool replaced = (watching_ || e.type == fmt::EventType::kName) && interesting(e);
    if (replaced) {
      if (!rewriting_) {  // the first change in this run: copy what came before, then change
        out_.assign(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(i));
        rewriting_ = true;
        interesting(e);
      }
      continue;  // interesting() appended what replaces it
    }
    if (rewriting_) keep(e);
  }
  return rewriting_ ? std::span<const Event>(out_) : run;
}

std::span<const Event> ArenaSlicer::flush() {
  out_.clear();
  payloads_.clear();
  texts_.clear();
  if (!timelines_.empty()) {
    uint64_t end = 0;
    for (const Timeline &t : timelines_) end = std::max(end, t.arena.ticks);
    for (const Event &h : held_) end = std::max(end, h.ticks);
    end_timelines([](const Timeline &) { return true; }, end);
  }
  return out_;
}

void ArenaSlicer::keep(const Event &e) {
  if (timelines_.empty()) {
    out_.push_back(e);
    return;
  }
  // Held past the reader's next call: the payload is copied.
  Event c = e;
  if (const std::string_view t = e.text(); !t.empty()) {
    const std::vector<char> &copy = held_texts_.emplace_back(t.begin(), t.end());
    c.set_text(std::string_view(copy.data(), copy.size()));
  } else if (const std::span<const uint64_t> v = e.values(); !v.empty()) {
    c.set_values(held_payloads_.emplace_back(v.begin(), v.end()));
  }
  held_.push_back(c);
  if (held_.size() >= kMaxHeld)  // a call that never ends: ends here
    end_timelines([](const Timeline &) { return true; }, e.ticks);
}

template <class Done>
void ArenaSlicer::end_timelines(Done done, uint64_t end) {
  std::vector<Event> steps;  // the positions' events, in time order
  for (auto it = timelines_.begin(); it != timelines_.end();) {
    if (!done(*it)) {
      ++it;
      continue;
    }
    const Timeline &t = *it;
    auto layout = layouts_.find(t.layout);
    auto arena = arenas_.find(t.addr);
    if (layout != layouts_.end() && arena != arenas_.end()) {
      const std::vector<Slice> &slices = layout->second.slices;
      const uint64_t t0 = t.arena.ticks, span = end > t0 ? end - t0 : 0;
      std::vector<uint64_t> &parts = arena->second.parts;
      uint64_t held = t.held;
      auto resize_free_bytes = [&](const Event &like, uint64_t new_held) {
        const uint64_t before = held < t.arena.a ? t.arena.a - held : 0;
        const uint64_t after = new_held < t.arena.a ? t.arena.a - new_held : 0;
        held = new_held;
        if (before == after) return;
        const uint64_t addr = t.addr + t.free_offset;
        if (before) {
          Event fr = made(like, fmt::EventType::kFree);
          fr.operand = t.arena.operand;
          fr.addr = addr;
          steps.push_back(fr);
          std::erase(parts, addr);
        }
        if (after) {
          const Slice s = free_bytes_slice(t.free_offset, after, layout->second.unused_label);
          make_slice(like, t.call, t.addr, layout->second.bytes, s, t.phase_before, t.role_before,
                     false, steps);
          parts.push_back(addr);
        }
      };
      for (const Step &st : t.steps) {
        Event like = t.arena;
        like.ticks = t0 + static_cast<uint64_t>(static_cast<unsigned __int128>(span) * st.position /
                                                std::max<uint64_t>(t.schedule, 1));
        uint64_t now = held;
        for (uint32_t i : st.frees) {
          if (i >= slices.size()) continue;
          Event fr = made(like, fmt::EventType::kFree);
          fr.operand = t.arena.operand;
          fr.addr = t.addr + slices[i].offset;
          steps.push_back(fr);
          std::erase(parts, fr.addr);
          now -= std::min(now, slices[i].bytes);
        }
        uint64_t after = now;
        for (uint32_t i : st.allocs)
          if (i < slices.size()) after += slices[i].bytes;
        // The free bytes shrink before the new buffers are made, grow after: the arena's
        // total never passes its size.
        if (after > held) resize_free_bytes(like, after);
        for (uint32_t i : st.allocs) {
          if (i >= slices.size()) continue;
          make_slice(like, t.call, t.addr, layout->second.bytes, slices[i], t.phase_before,
                     t.role_before, false, steps);
          parts.push_back(t.addr + slices[i].offset);
        }
        if (after <= held) resize_free_bytes(like, after);
      }
    }
    it = timelines_.erase(it);
  }
  // Among the held events by time (after those of the same time).
  std::vector<Event> merged;
  merged.reserve(held_.size() + steps.size());
  size_t j = 0;
  for (const Event &h : held_) {
    while (j < steps.size() && steps[j].ticks < h.ticks) merged.push_back(steps[j++]);
    merged.push_back(h);
  }
  while (j < steps.size()) merged.push_back(steps[j++]);
  held_ = std::move(merged);
  if (!timelines_.empty()) return;
  // Handed on: onto this run's output, the payloads with them (moving a vector keeps its data).
  out_.insert(out_.end(), held_.begin(), held_.end());
  held_.clear();
  for (std::vector<uint64_t> &v : held_payloads_) payloads_.push_back(std::move(v));
  for (std::vector<char> &t : held_texts_) texts_.push_back(std::move(t));
  held_payloads_.clear();
  held_texts_.clear();
}

bool ArenaSlicer::interesting(const Event &e) {
  switch (e.type) {
    case fmt::EventType::kName:
      on_name(e);
      return false;
    case fmt::EventType::kAnnotate:
      on_annotation(e);
      return false;
    case fmt::EventType::kPhase:
      if (e.thread >= thread_phase_.size()) thread_phase_.resize(e.thread + 1, ADPROF_PHASE_OTHER);
      thread_phase_[e.thread] = e.operand;
      return false;
    case fmt::EventType::kRole:
      if (e.thread >= thread_role_.size()) thread_role_.resize(e.thread + 1, ADPROF_ROLE_FOREIGN);
      thread_role_[e.thread] = e.operand;
      return false;
    case fmt::EventType::kAlloc: {
      if (open_calls_.empty() || !can_hold_arena(e.operand)) return false;
      for (auto it = open_calls_.begin(); it != open_calls_.end(); ++it) {
        auto layout = layouts_.find(it->layout);
        if (layout == layouts_.end() || layout->second.bytes != e.a) continue;
        if (!rewriting_) return true;  // rewrite() copies the run first, then asks again
        const Call call = std::move(*it);
        open_calls_.erase(it);
        expand_alloc(e, call, layout->second);
        return true;
      }
      return false;
    }
    case fmt::EventType::kFree: {
      if (arenas_.empty()) return false;
      auto arena = arenas_.find(e.addr);
      if (arena == arenas_.end() || arena->second.space != e.operand) return false;
      if (!rewriting_) return true;
      // Freed before its call ended: its positions end here.
      end_timelines([&](const Timeline &t) { return t.addr == e.addr; }, e.ticks);
      arena = arenas_.find(e.addr);
      if (arena != arenas_.end()) {
        expand_free(e, arena->second);
        arenas_.erase(arena);
      }
      return true;
    }
    default:
      return false;
  }
}

void ArenaSlicer::on_name(const Event &e) {
  const std::string_view text = e.text();
  for (int k = 0; k < kKindCount; ++k) {
    if (text == kKindNames[k]) {
      kinds_[k] = e.a;
      watching_ = true;
    }
  }
}

void ArenaSlicer::on_annotation(const Event &e) {
  const std::span<const uint64_t> v = e.values();
  if (e.a == 0 || v.empty()) return;
  if (e.a == kinds_[kLayout]) {
    // {layout, bytes, slices, fullest position, schedule length, name, unused label}
    Layout &l = layouts_[v[0]];
    l = Layout{.bytes = at(v, 1),
               .fullest = at(v, 3),
               .schedule = at(v, 4),
               .unused_label = at(v, 6),
               .slices = {}};
    l.slices.reserve(std::min<uint64_t>(at(v, 2), 4096));
  } else if (e.a == kinds_[kSlice]) {
    // {layout, offset, bytes, role, phase, op, label, live from, live to, source argument,
    //  source offset, dtype, dims...}
    auto l = layouts_.find(v[0]);
    if (l == layouts_.end() || l->second.slices.size() >= kMaxSlices || v.size() < 9) return;
    Slice s{.offset = at(v, 1),
            .bytes = at(v, 2),
            .role = at(v, 3),
            .phase = at(v, 4),
            .op = at(v, 5),
            .label = at(v, 6),
            .from = at(v, 7),
            .to = at(v, 8),
            .source_argument = at(v, 9),
            .source_offset = at(v, 10),
            .dtype = v.size() > 11 ? v[11] : 0,
            .dims = v.size() > 12 ? std::vector<uint64_t>(v.begin() + 12, v.end())
                                  : std::vector<uint64_t>{}};
    // A slice outside its arena is damage: it gets no block.
    if (s.bytes == 0 || s.offset >= l->second.bytes || s.bytes > l->second.bytes - s.offset) return;
    l->second.slices.push_back(std::move(s));
  } else if (e.a == kinds_[kCall]) {
    // {layout, call, source argument addresses...}
    if (layouts_.find(v[0]) == layouts_.end()) return;
    ++calls_announced_;
    Call c{.layout = v[0], .instance = at(v, 1), .sources = {}};
    if (v.size() > 2) c.sources.assign(v.begin() + 2, v.end());
    open_calls_.push_back(std::move(c));
    if (open_calls_.size() > 64) open_calls_.erase(open_calls_.begin());  // ends lost: bound
  } else if (e.a == kinds_[kCallEnd]) {
    std::erase_if(open_calls_, [&](const Call &c) { return c.layout == v[0]; });
    if (!timelines_.empty())  // (rewriting: timelines are made only then)
      end_timelines([&](const Timeline &t) { return t.layout == v[0]; }, e.ticks);
  }
}

Event ArenaSlicer::made(const Event &like, fmt::EventType type) const {
  Event e;
  e.type = type;
  e.thread = like.thread;
  e.ticks = like.ticks;
  e.device = like.device;
  return e;
}

void ArenaSlicer::make_slice(const Event &like, const Call &call, uint64_t arena_addr,
                             uint64_t layout_bytes, const Slice &s, uint8_t phase_before,
                             uint8_t role_before, bool first, std::vector<Event> &to) {
  const uint64_t addr = arena_addr + s.offset;
  const bool phased = s.phase < ADPROF_PHASE_COUNT && s.phase != phase_before;
  if (phased) {
    Event ph = made(like, fmt::EventType::kPhase);
    ph.operand = static_cast<uint8_t>(s.phase);
    to.push_back(ph);
  }
  const bool scoped = s.op != 0 && s.op != ADPROF_AD_NONE;
  if (scoped) {
    Event op = made(like, fmt::EventType::kOpBegin);
    op.a = s.op;
    op.b = call.instance;
    to.push_back(op);
  }
  // A workspace block is made with that role, not retagged to it: a retag to workspace is how an
  // engine gives a buffer back to its own arena (ad.arena.idle), which the what-if follows.
  const bool workspace = s.role == ADPROF_ROLE_WORKSPACE;
  if (workspace) {
    Event ro = made(like, fmt::EventType::kRole);
    ro.operand = ADPROF_ROLE_WORKSPACE;
    to.push_back(ro);
  }
  Event al = made(like, fmt::EventType::kAlloc);
  al.operand = like.operand;  // the arena's space (`like` is its allocation, or made like it)
  al.addr = addr;
  al.a = s.bytes;
  al.b = first ? like.b : 0;  // the arena's slack, once
  al.stack = like.stack;
  to.push_back(al);
  if (scoped) to.push_back(made(like, fmt::EventType::kOpEnd));
  if (workspace) {
    Event ro = made(like, fmt::EventType::kRole);
    ro.operand = role_before;
    to.push_back(ro);
  } else if (s.role < ADPROF_ROLE_COUNT) {
    Event rt = made(like, fmt::EventType::kRetag);
    rt.addr = addr;
    rt.operand = static_cast<uint8_t>(s.role);
    if (s.source_argument < call.sources.size() &&
        call.sources[s.source_argument] != ADPROF_AD_NONE)
      rt.b = call.sources[s.source_argument];
    else if (s.source_offset < layout_bytes)
      rt.b = arena_addr + s.source_offset;
    to.push_back(rt);
  }
  if (s.label != 0 && s.label != ADPROF_AD_NONE) {
    Event lb = made(like, fmt::EventType::kLabel);
    lb.addr = addr;
    lb.a = s.label;
    to.push_back(lb);
  }
  if (s.dtype != 0 && s.dtype <= ADPROF_DTYPE_BOOL) {
    Event ds = made(like, fmt::EventType::kDescribe);
    ds.addr = addr;
    ds.a = s.dtype;
    ds.set_values((timelines_.empty() ? payloads_ : held_payloads_).emplace_back(s.dims));
    to.push_back(ds);
  }
  if (phased) {
    Event ph = made(like, fmt::EventType::kPhase);
    ph.operand = phase_before;
    to.push_back(ph);
  }
}

void ArenaSlicer::expand_alloc(const Event &arena, const Call &call, const Layout &layout) {
  ++arenas_found_;
  const std::vector<Slice> &slices = layout.slices;
  Arena &a = arenas_[arena.addr];
  a.parts.clear();
  a.space = arena.operand;
  const uint8_t phase_before = arena.thread < thread_phase_.size() ? thread_phase_[arena.thread]
                                                                   : uint8_t{ADPROF_PHASE_OTHER};
  const uint8_t role_before = arena.thread < thread_role_.size() ? thread_role_[arena.thread]
                                                                 : uint8_t{ADPROF_ROLE_FOREIGN};
  std::vector<Event> &to = sink();
  // The free bytes' block, at an address inside the arena that no slice starts at.
  uint64_t free_offset = arena.a - 1;
  while (free_offset > 0 && std::any_of(slices.begin(), slices.end(),
                                        [&](const Slice &s) { return s.offset == free_offset; }))
    --free_offset;
  auto free_bytes = [&](uint64_t bytes) {
    return free_bytes_slice(free_offset, bytes, layout.unused_label);
  };
  bool first = true;
  auto make = [&](const Slice &s) {
    make_slice(arena, call, arena.addr, layout.bytes, s, phase_before, role_before, first, to);
    a.parts.push_back(arena.addr + s.offset);
    first = false;
  };

  if (!positions_) {
    // The logical buffers at the fullest position; of two that share bytes there (an in-place
    // op's operand and result meet at one position), the one that began last.
    std::vector<const Slice *> live;
    for (const Slice &s : slices)
      if (s.from <= layout.fullest && layout.fullest <= s.to) live.push_back(&s);
    std::sort(live.begin(), live.end(), [](const Slice *x, const Slice *y) {
      return x->from != y->from ? x->from > y->from : x->offset < y->offset;
    });
    std::vector<const Slice *> kept;
    for (const Slice *s : live) {
      const bool overlaps = std::any_of(kept.begin(), kept.end(), [&](const Slice *k) {
        return s->offset < k->offset + k->bytes && k->offset < s->offset + s->bytes;
      });
      if (!overlaps) kept.push_back(s);
    }
    std::sort(kept.begin(), kept.end(),
              [](const Slice *x, const Slice *y) { return x->offset < y->offset; });
    uint64_t used = 0;
    for (const Slice *s : kept) {
      make(*s);
      used += s->bytes;
    }
    if (used < arena.a) make(free_bytes(arena.a - used));
    return;
  }

  // The schedule walked position by position: at each, the buffers whose live range ended are
  // freed, then those that begin are made; one that takes bytes a live one holds (an in-place
  // op's result) ends that one. Position 0's are made now, the others' later (a timeline).
  const uint64_t schedule = layout.schedule == ADPROF_AD_NONE ? 0 : layout.schedule;
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < slices.size(); ++i)
    if (slices[i].from <= slices[i].to && (schedule == 0 || slices[i].from < schedule))
      order.push_back(i);
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return slices[x].from != slices[y].from ? slices[x].from < slices[y].from
                                            : slices[x].offset < slices[y].offset;
  });
  std::map<uint64_t, uint32_t> live;         // offset -> slice
  std::multimap<uint64_t, uint32_t> deaths;  // the position after its last -> slice
  std::vector<Step> steps;
  constexpr uint64_t kNever = ~uint64_t{0};
  for (size_t k = 0; k < order.size() || !deaths.empty();) {
    const uint64_t birth = k < order.size() ? slices[order[k]].from : kNever;
    const uint64_t death = deaths.empty() ? kNever : deaths.begin()->first;
    const uint64_t p = std::min(birth, death);
    if (p == kNever || (schedule && p >= schedule)) break;  // the last position's stay
    Step st{.position = p, .frees = {}, .allocs = {}};
    while (!deaths.empty() && deaths.begin()->first == p) {
      const uint32_t i = deaths.begin()->second;
      deaths.erase(deaths.begin());
      auto l = live.find(slices[i].offset);
      if (l == live.end() || l->second != i) continue;  // ended by an in-place successor
      live.erase(l);
      st.frees.push_back(i);
    }
    for (; k < order.size() && slices[order[k]].from == p; ++k) {
      const uint32_t i = order[k];
      const Slice &s = slices[i];
      auto l = live.lower_bound(s.offset);
      if (l != live.begin()) {
        auto before = std::prev(l);
        if (before->first + slices[before->second].bytes > s.offset) l = before;
      }
      while (l != live.end() && l->first < s.offset + s.bytes) {
        st.frees.push_back(l->second);
        l = live.erase(l);
      }
      live.emplace(s.offset, i);
      if (s.to != kNever) deaths.emplace(s.to + 1, i);
      st.allocs.push_back(i);
    }
    steps.push_back(std::move(st));
  }
  uint64_t held = 0;
  size_t next = 0;
  if (!steps.empty() && steps[0].position == 0) {
    for (uint32_t i : steps[0].allocs) {
      make(slices[i]);
      held += slices[i].bytes;
    }
    next = 1;
  }
  // The bytes no buffer holds at this point: the arena's bytes are all there at every point.
  if (held < arena.a) make(free_bytes(arena.a - held));
  if (next < steps.size()) {
    Timeline t{.layout = call.layout,
               .addr = arena.addr,
               .schedule = schedule ? schedule : steps.back().position + 1,
               .arena = arena,
               .call = call,
               .phase_before = phase_before,
               .role_before = role_before,
               .free_offset = free_offset,
               .held = held,
               .steps = {}};
    t.steps.assign(std::make_move_iterator(steps.begin() + static_cast<std::ptrdiff_t>(next)),
                   std::make_move_iterator(steps.end()));
    timelines_.push_back(std::move(t));
  }
}

void ArenaSlicer::expand_free(const Event &e, const Arena &arena) {
  std::vector<Event> &to = sink();
  for (uint64_t addr : arena.parts) {
    Event fr = made(e, fmt::EventType::kFree);
    fr.operand = arena.space;
    fr.addr = addr;
    to.push_back(fr);
  }
}

}  // namespace adprof
