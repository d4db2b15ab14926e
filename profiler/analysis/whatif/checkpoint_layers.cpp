// Checkpointing for a generation made of layers (version 2, docs/WHATIF.md, "Engines with
// layers"), in the schedule the engine's wording performs (ad_protocol.h, "Schedule"):
// - 0: the longest chain of sibling layers, each taking the previous one's output, run in
//   lround(sqrt(n)) segments of n / segments layers, every segment but the last checkpointed;
// - 1 (blocks): the items of one container called in a row ("model.h.0", "model.h.1", ...),
//   each its own segment, every one checkpointed; of several such runs the one whose
//   checkpointing drops the most forward-cache bytes (where the forward caches are).
// A checkpointed segment's forward keeps nothing for the backward (its values die where the
// code drops them); when the gradient of its last layer's output arrives, its recorded forward
// is made again (the same allocations, in order), and what it saved dies where the recording's
// backward released it.
#include <algorithm>
#include <cmath>

#include "plan.h"

namespace adprof::whatif {

namespace {

struct Chain {
  std::vector<size_t> layers;
};

// Each layer's next sibling (the next layer begun with the same parent; -1: none).
std::vector<int64_t> next_siblings(const Gen &g) {
  const size_t n = g.layers.size();
  std::vector<int64_t> next_sibling(n, -1);
  std::unordered_map<uint64_t, size_t> last_child;
  for (size_t i = 0; i < n; ++i) {
    if (!g.layers[i].begin) continue;
    auto [it, fresh] = last_child.try_emplace(g.layers[i].parent, i);
    if (!fresh) {
      next_sibling[it->second] = static_cast<int64_t>(i);
      it->second = i;
    }
  }
  return next_sibling;
}

// The longest run of consecutive sibling layers (same parent, in call order) each taking the
// previous one's output as its input.
Chain longest_chain(const Gen &g, const std::vector<int64_t> &next_sibling) {
  const size_t n = g.layers.size();
  std::vector<uint32_t> len(n, 0);
  size_t best = 0, start = 0;
  for (size_t i = n; i-- > 0;) {
    const Layer &l = g.layers[i];
    if (!l.begin || !l.end) continue;
    len[i] = 1;
    const int64_t nx = next_sibling[i];
    if (nx >= 0 && l.out && g.layers[static_cast<size_t>(nx)].in == l.out &&
        g.layers[static_cast<size_t>(nx)].end && len[static_cast<size_t>(nx)])
      len[i] = 1 + len[static_cast<size_t>(nx)];
    if (len[i] >= best) {  // ties: the first one
      best = len[i];
      start = i;
    }
  }
  Chain c;
  for (int64_t i = static_cast<int64_t>(start); c.layers.size() < best && i >= 0;
       i = next_sibling[static_cast<size_t>(i)])
    c.layers.push_back(static_cast<size_t>(i));
  return c;
}

// Runs of at least two sibling layers called in a row that are consecutive items of one
// container; the one for which `held(first, last)` (the forward-cache bytes born inside the
// run) is largest (ties: the first).
template <class Held>
Chain best_block_run(const Gen &g, const std::vector<int64_t> &next_sibling, Held held) {
  const size_t n = g.layers.size();
  std::vector<char> inside(n, 0);  // already counted as a later item of some run
  Chain best;
  uint64_t best_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const Layer &l = g.layers[i];
    if (inside[i] || !l.container || !l.begin || !l.end) continue;
    Chain run{{i}};
    for (int64_t nx = next_sibling[i]; nx >= 0; nx = next_sibling[static_cast<size_t>(nx)]) {
      const Layer &a = g.layers[run.layers.back()], &b = g.layers[static_cast<size_t>(nx)];
      if (b.container != a.container || b.item != a.item + 1 || !b.end) break;
      run.layers.push_back(static_cast<size_t>(nx));
      inside[static_cast<size_t>(nx)] = 1;
    }
    if (run.layers.size() < 2) continue;
    const uint64_t bytes =
        held(g.layers[run.layers.front()].begin, g.layers[run.layers.back()].end);
    if (best.layers.empty() || bytes > best_bytes) {
      best = std::move(run);
      best_bytes = bytes;
    }
  }
  return best;
}

}  // namespace

void Planner::checkpoint_layers() {
  const std::vector<int64_t> next_sibling = next_siblings(g);
  auto release_of = [&](uint64_t s) {
    auto it = g.loose_saves.find(s);
    return it != g.loose_saves.end() ? it->second : 0;
  };
  auto death_of = [&](uint64_t s) {
    auto it = g.born.find(s);
    return it != g.born.end() ? it->second : 0;
  };
  // Kept only for the backward: saved, released, and dead after its last release.
  auto tape_held = [&](uint64_t s) {
    const uint64_t r = release_of(s), d = death_of(s);
    return r && d && d >= r;
  };
  const bool blocks = g.checkpoint_schedule == 1;
  Chain chain;
  if (blocks) {
    // The forward-cache bytes born in [w0, w1] and alive past it.
    auto held = [&](uint64_t w0, uint64_t w1) {
      auto lo = std::lower_bound(g.births.begin(), g.births.end(), w0,
                                 [](const Birth &x, uint64_t i) { return x.index < i; });
      uint64_t bytes = 0;
      for (auto it = lo; it != g.births.end() && it->index <= w1; ++it)
        if (tape_held(it->storage) && death_of(it->storage) > w1) bytes += it->size;
      return bytes;
    };
    chain = best_block_run(g, next_sibling, held);
  } else {
    chain = longest_chain(g, next_sibling);
  }
  const size_t L = chain.layers.size();
  const size_t S = blocks ? L : static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(L))));
  if (L < 2 || S < 2) return;
  const size_t per = L / S;
  // Segments checkpointed: all but the last (0), every one (blocks).
  const size_t checkpointed_segments = blocks ? S : S - 1;
  auto layer = [&](size_t k) -> const Layer & { return g.layers[chain.layers[k]]; };
  // The outermost layer whose output a storage is (the first begun).
  std::unordered_map<uint64_t, size_t> output_of;
  for (size_t i = 0; i < g.layers.size(); ++i)
    if (g.layers[i].out && g.layers[i].begin) output_of.try_emplace(g.layers[i].out, i);

  ChainStats st;
  st.layered = true;
  st.blocks = blocks;
  st.nodes = L;
  st.layers = L;
  st.ops_per_layer = 1;
  st.segments = S;
  st.generations = 1;
  st.checkpointed = per * checkpointed_segments;
  st.first_label = layer(0).label;
  st.last_label = layer(L - 1).label;
  st.parent_label = layer(0).parent < g.layers.size() ? g.layers[layer(0).parent].label : 0;

  for (size_t k = 0; k < checkpointed_segments; ++k) {
    const size_t b = k * per, e = (k + 1) * per;  // chain positions [b, e)
    const uint64_t w0 = layer(b).begin, w1 = layer(e - 1).end;
    const uint64_t seg_out = layer(e - 1).out;
    auto lo = std::lower_bound(g.births.begin(), g.births.end(), w0,
                               [](const Birth &x, uint64_t i) { return x.index < i; });
    auto hi = std::upper_bound(g.births.begin(), g.births.end(), w1,
                               [](uint64_t i, const Birth &x) { return i < x.index; });
    // Where a value of the segment dies in a forward that keeps nothing for the backward: a
    // layer's output when the next layer of its parent (which takes it) has returned, or with
    // its parent; anything else when the innermost layer that made it returns.
    auto drop_point = [&](const Birth &x) -> uint64_t {
      auto o = output_of.find(x.storage);
      if (o != output_of.end() && g.layers[o->second].begin >= w0 &&
          g.layers[o->second].end <= w1) {
        size_t l = o->second;
        // In-place layers pass the same storage on: follow them.
        while (next_sibling[l] >= 0 &&
               g.layers[static_cast<size_t>(next_sibling[l])].out == x.storage)
          l = static_cast<size_t>(next_sibling[l]);
        if (x.storage == seg_out) return 0;  // the next segment's input: kept
        const int64_t nx = next_sibling[l];
        if (nx >= 0 && g.layers[static_cast<size_t>(nx)].in == x.storage &&
            g.layers[static_cast<size_t>(nx)].end <= w1)
          return g.layers[static_cast<size_t>(nx)].end;
        const uint64_t parent = g.layers[l].parent;
        if (parent < g.layers.size() && g.layers[parent].end <= w1) return g.layers[parent].end;
        return w1;
      }
      uint64_t best_begin = 0, end = w1;  // the innermost layer open at its birth
      for (size_t i = chain.layers[b]; i < g.layers.size(); ++i) {
        const Layer &l = g.layers[i];
        if (l.begin > x.index) break;
        if (l.begin >= w0 && l.end >= x.index && l.begin >= best_begin) {
          best_begin = l.begin;
          end = l.end;
        }
      }
      return end;
    };
    // Forward: values kept only for the backward die where the code drops them.
    for (auto it = lo; it != hi; ++it) {
      const uint64_t d = death_of(it->storage);
      if (!tape_held(it->storage) || d <= w1) continue;
      const uint64_t at = drop_point(*it);
      if (!at || at >= d) continue;
      kill_at(at, it->storage);
      ++st.dropped;
      st.dropped_bytes += it->size;
    }
    // Backward: when the gradient of the segment's output arrives, its forward runs again.
    const uint64_t t = layer(e - 1).backward;
    if (!t) continue;
    uint64_t done = t;  // the segment's backward is over: its last release, or its input's
    for (auto it = lo; it != hi; ++it) done = std::max(done, release_of(it->storage));
    if (b > 0) done = std::max(done, layer(b - 1).backward);
    struct Step {
      uint64_t index;
      bool birth;
      const Birth *x;
    };
    std::vector<Step> steps;
    for (auto it = lo; it != hi; ++it) {
      steps.push_back({it->index, true, &*it});
      const uint64_t d = death_of(it->storage);
      if (d && d <= w1) steps.push_back({d, false, &*it});
    }
    std::stable_sort(steps.begin(), steps.end(),
                     [](const Step &a, const Step &c) { return a.index < c.index; });
    std::unordered_map<uint64_t, uint64_t> twin;
    std::vector<Action> &rec = p.at[t];
    for (const Step &s : steps) {
      if (s.birth) {
        const uint64_t v = ids.take();
        twin[s.x->storage] = v;
        rec.push_back({Action::kBirth, v, s.x->size, false, true});
        st.recomputed_bytes += s.x->size;
      } else {
        rec.push_back({Action::kKill, twin[s.x->storage]});
      }
    }
    for (auto it = lo; it != hi; ++it) {
      const uint64_t d = death_of(it->storage);
      if (d && d <= w1) continue;
      const uint64_t v = twin[it->storage];
      // Saved again by the recomputation: released where the recording's backward released
      // it; anything else (the segment's output) lives until the segment's backward is over.
      if (tape_held(it->storage) && d > t && d <= done)
        p.at[d].push_back({Action::kKill, v});
      else
        p.at[done].push_back({Action::kKill, v});
    }
  }
  ChainStats &pc = p.chain;
  const uint64_t gens = pc.generations + 1;
  if (st.nodes > pc.nodes || !pc.layered) pc = st;
  pc.generations = gens;
}

}  // namespace adprof::whatif
