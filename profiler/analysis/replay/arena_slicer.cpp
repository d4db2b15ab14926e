#include "adprof/arena_slicer.h"

#include <algorithm>
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

}  // namespace

std::span<const Event> ArenaSlicer::rewrite(std::span<const Event> run) {
  rewriting_ = false;
  payloads_.clear();
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
    if (rewriting_) out_.push_back(e);
  }
  return rewriting_ ? std::span<const Event>(out_) : run;
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
    case fmt::EventType::kAlloc: {
      if (open_calls_.empty() || e.operand != ADPROF_SPACE_HEAP) return false;
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
      if (arenas_.empty() || e.operand != ADPROF_SPACE_HEAP) return false;
      auto arena = arenas_.find(e.addr);
      if (arena == arenas_.end()) return false;
      if (!rewriting_) return true;
      expand_free(e, arena->second);
      arenas_.erase(arena);
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
    l = Layout{.bytes = at(v, 1), .fullest = at(v, 3), .unused_label = at(v, 6), .slices = {}};
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

void ArenaSlicer::expand_alloc(const Event &arena, const Call &call, const Layout &layout) {
  ++arenas_found_;
  // The logical buffers at the fullest position; of two that share bytes there (an in-place
  // op's operand and result meet at one position), the one that began last.
  std::vector<const Slice *> live;
  for (const Slice &s : layout.slices)
    if (s.from <= layout.fullest && layout.fullest <= s.to) live.push_back(&s);
  std::sort(live.begin(), live.end(), [](const Slice *a, const Slice *b) {
    return a->from != b->from ? a->from > b->from : a->offset < b->offset;
  });
  std::vector<const Slice *> kept;
  for (const Slice *s : live) {
    const bool overlaps = std::any_of(kept.begin(), kept.end(), [&](const Slice *k) {
      return s->offset < k->offset + k->bytes && k->offset < s->offset + s->bytes;
    });
    if (!overlaps) kept.push_back(s);
  }
  std::sort(kept.begin(), kept.end(),
            [](const Slice *a, const Slice *b) { return a->offset < b->offset; });

  Arena &a = arenas_[arena.addr];
  a.parts.clear();
  const uint8_t phase_before = arena.thread < thread_phase_.size() ? thread_phase_[arena.thread]
                                                                   : uint8_t{ADPROF_PHASE_OTHER};
  uint64_t used = 0;
  bool first = true;
  auto alloc = [&](uint64_t addr, uint64_t bytes) {
    Event al = made(arena, fmt::EventType::kAlloc);
    al.operand = ADPROF_SPACE_HEAP;
    al.addr = addr;
    al.a = bytes;
    al.b = first ? arena.b : 0;  // the arena's slack, once
    al.stack = arena.stack;
    first = false;
    out_.push_back(al);
    a.parts.push_back(addr);
  };
  auto describe = [&](uint64_t addr, const Slice &s) {
    if (s.dtype == 0 || s.dtype > ADPROF_DTYPE_BOOL) return;
    Event ds = made(arena, fmt::EventType::kDescribe);
    ds.addr = addr;
    ds.a = s.dtype;
    ds.set_values(payloads_.emplace_back(s.dims));
    out_.push_back(ds);
  };
  auto retag_and_label = [&](uint64_t addr, uint64_t role, uint64_t source, uint64_t label) {
    if (role < ADPROF_ROLE_COUNT) {
      Event rt = made(arena, fmt::EventType::kRetag);
      rt.addr = addr;
      rt.operand = static_cast<uint8_t>(role);
      rt.b = source;
      out_.push_back(rt);
    }
    if (label != 0 && label != ADPROF_AD_NONE) {
      Event lb = made(arena, fmt::EventType::kLabel);
      lb.addr = addr;
      lb.a = label;
      out_.push_back(lb);
    }
  };
  uint8_t phase = phase_before;
  for (const Slice *s : kept) {
    const uint64_t addr = arena.addr + s->offset;
    if (s->phase < ADPROF_PHASE_COUNT && s->phase != phase) {
      Event ph = made(arena, fmt::EventType::kPhase);
      ph.operand = phase = static_cast<uint8_t>(s->phase);
      out_.push_back(ph);
    }
    const bool scoped = s->op != 0 && s->op != ADPROF_AD_NONE;
    if (scoped) {
      Event op = made(arena, fmt::EventType::kOpBegin);
      op.a = s->op;
      op.b = call.instance;
      out_.push_back(op);
    }
    alloc(addr, s->bytes);
    if (scoped) out_.push_back(made(arena, fmt::EventType::kOpEnd));
    uint64_t source = 0;
    if (s->source_argument < call.sources.size() &&
        call.sources[s->source_argument] != ADPROF_AD_NONE)
      source = call.sources[s->source_argument];
    else if (s->source_offset < layout.bytes)
      source = arena.addr + s->source_offset;
    retag_and_label(addr, s->role, source, s->label);
    describe(addr, *s);
    used += s->bytes;
  }
  if (phase != phase_before) {
    Event ph = made(arena, fmt::EventType::kPhase);
    ph.operand = phase_before;
    out_.push_back(ph);
  }
  if (used < arena.a) {
    // The free bytes' block, at an address inside the arena that no slice starts at.
    uint64_t offset = arena.a - 1;
    while (
        std::any_of(kept.begin(), kept.end(), [&](const Slice *s) { return s->offset == offset; }))
      --offset;
    alloc(arena.addr + offset, arena.a - used);
    retag_and_label(arena.addr + offset, ADPROF_ROLE_WORKSPACE, 0, layout.unused_label);
  }
}

void ArenaSlicer::expand_free(const Event &e, const Arena &arena) {
  for (uint64_t addr : arena.parts) {
    Event fr = made(e, fmt::EventType::kFree);
    fr.operand = ADPROF_SPACE_HEAP;
    fr.addr = addr;
    out_.push_back(fr);
  }
}

}  // namespace adprof
