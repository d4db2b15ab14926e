// Pass 1 of the what-if analysis (tape_collector.h).
#include "tape_collector.h"

#include <algorithm>

namespace adprof::whatif {

using ad::Kind;

void container_item(std::string_view label, uint64_t &container, uint64_t &item) {
  container = item = 0;
  const size_t dot = label.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == label.size() ||
      label.size() - dot > 10)
    return;
  uint64_t n = 0;
  for (size_t i = dot + 1; i < label.size(); ++i) {
    if (label[i] < '0' || label[i] > '9') return;
    n = n * 10 + static_cast<uint64_t>(label[i] - '0');
  }
  item = n;
  container = std::hash<std::string_view>{}(label.substr(0, dot)) | 1;  // never 0
}

void TapeCollector::activate(uint64_t index) {
  active_ = true;
  activated_at_ = index;
  tracker_.seed(index);
}

void TapeCollector::follow(const Event &e, const Change &c, uint64_t index) {
  ThreadState &ts = thread(e.thread);
  if (c.type == Change::kAcquire) {
    ts.pending_release_addr = 0;
    if (in_step_) step_births_.push_back({c.storage, c.size, index});
    if (!ts.tapes.empty()) {
      Gen &g = *ts.tapes.back();
      if (!g.layers.empty() && !g.backward) {
        g.births.push_back({c.storage, c.size, index});
        g.born.emplace(c.storage, 0);
      }
    }
    if (!ts.scopes.empty()) ts.scopes.back().add(c.storage, c.size);
    if (!ts.rules.empty()) {
      ThreadState::Rule &r = ts.rules.back();
      r.gen->fact(c.storage, c.size).rule = static_cast<int64_t>(r.node);
      r.gen->node(r.node).rule_allocs.push_back(c.storage);
    } else if (ts.deliver_gen) {
      ts.deliver_gen->fact(c.storage, c.size);
      ts.deliver_gen->node(ts.deliver_node).deliver_allocs.push_back(c.storage);
    }
  } else if (c.type == Change::kRelease) {
    if (c.arena) gave.insert(c.storage);
    if (!ts.scopes.empty())
      if (FwdAlloc *a = ts.scopes.back().find(c.storage)) a->transient = true;
    const bool killed = ts.pending_release_addr == c.addr;
    for (auto &g : open_) {
      if (!g->born.empty()) {
        auto b = g->born.find(c.storage);
        if (b != g->born.end()) b->second = index;
      }
      auto f = g->facts.find(c.storage);
      if (f == g->facts.end()) continue;
      f->second.death = index;
      f->second.tape_killed = killed;
    }
    if (in_step_) step_deaths_.emplace(c.storage, index);
    if (!watched_.empty() && watched_.erase(c.storage) && grads_)
      grads_({Kind::kNone, 0, c.storage, c.size, index}, available_policies(decoder_.engine()));
  }
  using T = format::EventType;
  if (e.type == T::kOpBegin) {
    ts.scopes.emplace_back();
    return;
  }
  if (e.type == T::kOpEnd) {
    if (!ts.scopes.empty()) ts.scopes.pop_back();
    const size_t depth = replay_.op_stack(e.thread).size();
    while (!ts.rules.empty() && ts.rules.back().depth > depth) {
      ts.rules.back().gen->node(ts.rules.back().node).rule_end = index;
      ts.rules.pop_back();
    }
    return;
  }
  if (e.type == T::kPhase) {
    const bool fwd = e.operand == ADPROF_PHASE_FORWARD;
    if (fwd && !ts.forward) ts.since_forward.clear();
    ts.forward = fwd;
    if (e.operand == ADPROF_PHASE_OTHER) ts.since_forward.clear();
    return;
  }
  if (e.type == T::kDescribe) {
    const uint64_t s = tracker_.storage_at(e.addr).first;
    if (s) {
      if (!ts.scopes.empty())
        if (FwdAlloc *a = ts.scopes.back().find(s)) a->tensor = true;
      for (auto &gp : open_) {
        auto f = gp->facts.find(s);
        if (f != gp->facts.end()) f->second.tensor = true;
      }
      if (!ts.tapes.empty()) {
        Gen &g = *ts.tapes.back();
        (g.backward ? g.window_backward : g.window_forward).push_back(s);
      } else if (ts.forward) {
        ts.since_forward.push_back(s);
      }
    }
    return;
  }
  if (e.type == T::kLabel) {
    if (watching_arenas_) programs.on_label(tracker_.storage_at(e.addr).first, e.a);
    if (decoder_.label(e) == Kind::kLabelIndexWidened) {
      auto [s, size] = tracker_.storage_at(e.addr);
      if (s) {
        widened.push_back(s);
        widened_bytes += size;
      }
    }
    return;
  }
  if (e.type != T::kAnnotate) return;
  const ad::Decoder::Annotation an = decoder_.annotation(e);
  const Kind k = an.kind;
  if (k == Kind::kNone) return;
  const auto v = an.values;
  auto val = [&](size_t i) { return i < v.size() ? v[i] : kNone; };
  ts.deliver_gen = nullptr;
  ts.pending_release_addr = 0;
  if (k == Kind::kTapeBegin) {
    auto g = std::make_unique<Gen>();
    g->tape = val(0);
    g->gen = val(1);
    g->bits = val(2) == kNone ? 0 : val(2);
    g->thread = e.thread;
    ad_tape = true;
    ++tapes;
    if (first_bits_) {
      bits_and = g->bits;
      first_bits_ = false;
    }
    bits_and &= g->bits;
    bits_or |= g->bits;
    g->window_forward = std::move(ts.since_forward);
    ts.since_forward.clear();
    ts.tapes.push_back(g.get());
    open_.push_back(std::move(g));
    return;
  }
  switch (k) {  // version 4 and 6: compiled programs' arenas and the engine's own what-ifs
    case Kind::kArenaLayout:
      watching_arenas_ = true;
      programs.on_layout(v);
      return;
    case Kind::kArenaSlice:
      programs.on_slice(v);
      return;
    case Kind::kArenaWhatIf:
      programs.on_whatif(v);
      return;
    case Kind::kArenaCall:
      programs.on_call(v);
      return;
    case Kind::kArenaCallEnd:
      programs.on_call_end(v);
      return;
    case Kind::kResultInArgument: {
      if (v.size() < 3) return;
      const auto [result, bytes] = tracker_.storage_at(v[1]);
      programs.on_result_in_argument(v[0], result, bytes, tracker_.storage_at(v[2]).first);
      return;
    }
    default:
      break;
  }
  switch (k) {  // version 2: parameters' gradients, whether a generation is open or not
    case Kind::kGradArrived:
    case Kind::kGradReady:
    case Kind::kGradZeroed:
    case Kind::kOptimizerBegin:
    case Kind::kOptimizerEnd: {
      if (v.empty()) return;
      GradEvent ge{k, v[0], 0, val(2) == kNone ? 0 : val(2), index};
      if (k != Kind::kOptimizerBegin && k != Kind::kOptimizerEnd) {
        if (v.size() < 2) return;
        ge.storage = tracker_.storage_at(v[1]).first;
        if (!ge.storage) return;
      }
      if (k == Kind::kGradZeroed) {
        ++grad_zeroed;
        watched_.insert(ge.storage);
      } else if (k == Kind::kGradReady) {
        ++grad_ready;
      } else if (k == Kind::kOptimizerBegin) {
        in_step_ = true;
        step_births_.clear();
        step_deaths_.clear();
      } else if (k == Kind::kOptimizerEnd) {
        ++optimizer_steps;
        ge.size = step_transient_peak();
        in_step_ = false;
        step_births_.clear();
        step_deaths_.clear();
      }
      if (grads_) grads_(ge, available_policies(decoder_.engine()));
      return;
    }
    default:
      break;
  }
  if (ts.tapes.empty()) return;
  Gen &g = *ts.tapes.back();
  switch (k) {
    case Kind::kLayerBegin: {
      if (v.size() < 3) break;
      Layer &l = g.layer(v[0]);
      l.label = static_cast<uint32_t>(v[1]);
      l.parent = v[2];
      container_item(replay_.name(l.label), l.container, l.item);
      l.begin = index;
      l.in = val(3) == kNone ? 0 : tracker_.storage_at(v[3]).first;
      break;
    }
    case Kind::kLayerEnd: {
      if (v.empty() || v[0] >= g.layers.size()) break;
      Layer &l = g.layers[v[0]];
      l.end = index;
      l.out = val(1) == kNone ? 0 : tracker_.storage_at(v[1]).first;
      break;
    }
    case Kind::kLayerBackward:
      if (!v.empty() && v[0] < g.layers.size() && !g.layers[v[0]].backward)
        g.layers[v[0]].backward = index;
      break;
    case Kind::kLeaf: {
      if (v.size() < 3) break;
      NodeInfo &nd = g.node(v[0]);
      auto [s, size] = tracker_.storage_at(v[1]);
      nd.out = s;
      nd.bytes = v[2];
      nd.at = index;
      if (s) g.fact(s, size);
      nd.leaf = true;
      nd.requires_grad = val(3) == 1;
      break;
    }
    case Kind::kNode: {
      if (v.size() < 5) break;
      NodeInfo &nd = g.node(v[0]);
      auto [s, size] = tracker_.storage_at(v[2]);
      nd.out = s;
      nd.bytes = v[3];
      nd.op = static_cast<uint32_t>(v[1]);
      nd.at = index;
      if (s) g.fact(s, size);
      {
        nd.in.clear();
        for (size_t i = 5; i < v.size() && i < 5 + v[4]; ++i)
          nd.in.push_back(v[i] == kNone ? -1 : static_cast<int64_t>(v[i]));
        if (!ts.scopes.empty()) {  // what its forward allocated (its op scope is open_)
          nd.fwd = ts.scopes.back().take();
          for (const FwdAlloc &a : nd.fwd)
            if (!a.transient) g.fact(a.storage, a.size);
        }
      }
      break;
    }
    case Kind::kSaveStorage: {
      const uint64_t s = v.empty() ? 0 : tracker_.storage_at(v[0]).first;
      if (s) g.loose_saves.emplace(s, 0);
      break;
    }
    case Kind::kReleaseStorage: {
      const uint64_t s = v.empty() ? 0 : tracker_.storage_at(v[0]).first;
      auto it = s ? g.loose_saves.find(s) : g.loose_saves.end();
      if (it != g.loose_saves.end()) it->second = index;
      if (!v.empty()) ts.pending_release_addr = v[0];
      break;
    }
    case Kind::kSave: {
      if (v.size() < 4) break;
      auto [s, size] = tracker_.storage_at(v[1]);
      if (s) g.fact(s, size);
      g.node(v[0]).saves.push_back({s, v[3], val(4), 0});
      break;
    }
    case Kind::kRelease: {
      if (v.size() < 2) break;
      auto [s, size] = tracker_.storage_at(v[1]);
      for (Save &sv : g.node(v[0]).saves)
        if (sv.storage == s && !sv.release) {
          sv.release = index;
          break;
        }
      ts.pending_release_addr = v[1];
      break;
    }
    case Kind::kCheckpoint:
      if (!v.empty()) g.node(v[0]).checkpoint = true;
      checkpoint_nodes = true;
      break;
    case Kind::kBackwardBegin:
      g.backward = true;
      g.backward_index = index;
      g.root = v.empty() ? -1 : static_cast<int64_t>(v[0]);
      g.backward_bits = val(2) == kNone ? g.bits : val(2);
      if (v.size() >= 4) {
        g.have_flags = true;
        g.flags = v[3];
      }
      break;
    case Kind::kRequested:
      for (uint64_t id : v) g.node(id).requested = true;
      break;
    case Kind::kBackwardNode:
      if (!v.empty()) {
        g.node(v[0]).rule_begin = index;
        ts.rules.push_back({&g, v[0], replay_.op_stack(e.thread).size()});
      }
      break;
    case Kind::kContribution: {
      if (v.size() < 5) break;
      auto [b, bsize] = tracker_.storage_at(v[2]);
      uint64_t src = 0;
      if (v.size() >= 6) {
        auto [s, ssize] = tracker_.storage_at(v[5]);
        src = s;
        if (s) g.fact(s, ssize);
      }
      if (b) g.fact(b, bsize);
      g.node(v[0]).contributions.push_back({static_cast<int64_t>(v[1]), b, src, v[3], v[4], index});
      break;
    }
    case Kind::kAdjointComplete: {
      if (v.size() < 2) break;
      auto [s, size] = tracker_.storage_at(v[1]);
      NodeInfo &nd = g.node(v[0]);
      nd.complete = s;
      nd.complete_index = index;
      if (s) g.fact(s, size);
      ts.deliver_gen = &g;
      ts.deliver_node = v[0];
      break;
    }
    case Kind::kAdjointSum: {
      if (v.size() < 2) break;
      auto [s, size] = tracker_.storage_at(v[1]);
      NodeInfo &nd = g.node(v[0]);
      nd.sum = s;
      nd.sum_index = index;
      if (s) g.fact(s, size);
      break;
    }
    case Kind::kTapeEnd: {
      // The generation is complete: plan it for every scenario, then forget it.
      Gen *gp = nullptr;
      for (size_t i = ts.tapes.size(); i-- > 0;)
        if (ts.tapes[i]->tape == val(0)) {
          gp = ts.tapes[i];
          ts.tapes.erase(ts.tapes.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      if (!gp) break;
      gp->end_index = index;
      for (auto it = ts.rules.begin(); it != ts.rules.end();)
        it = it->gen == gp ? ts.rules.erase(it) : it + 1;
      gp->checkpoint_schedule = decoder_.engine().policy(ADPROF_AD_POLICY_CHECKPOINTING).schedule;
      plan_(*gp, available_policies(decoder_.engine()));
      for (auto it = open_.begin(); it != open_.end(); ++it)
        if (it->get() == gp) {
          open_.erase(it);
          break;
        }
      break;
    }
    default:
      break;
  }
}

// The most the step held at once in storages it made and freed itself (its transients).
uint64_t TapeCollector::step_transient_peak() const {
  std::vector<std::pair<uint64_t, int64_t>> changes;
  for (const Birth &b : step_births_) {
    auto d = step_deaths_.find(b.storage);
    if (d == step_deaths_.end()) continue;  // kept (optimizer state)
    changes.push_back({b.index, static_cast<int64_t>(b.size)});
    changes.push_back({d->second, -static_cast<int64_t>(b.size)});
  }
  std::sort(changes.begin(), changes.end());
  int64_t live = 0, peak = 0;
  for (const auto &[i, delta] : changes) peak = std::max(peak, live += delta);
  return static_cast<uint64_t>(peak);
}

void TapeCollector::finish(uint64_t index) {
  const uint64_t available = available_policies(decoder_.engine());
  for (auto &g : open_) {
    g->end_index = index;
    g->checkpoint_schedule = decoder_.engine().policy(ADPROF_AD_POLICY_CHECKPOINTING).schedule;
    plan_(*g, available);
  }
  open_.clear();
}

}  // namespace adprof::whatif
