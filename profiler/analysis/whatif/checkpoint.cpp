// Checkpointing: the longest chain in sqrt(n) segments, each recomputed in backward
// (docs/WHATIF.md).
#include <algorithm>
#include <cmath>

#include "plan.h"

namespace adprof::whatif {

bool Planner::find_run(Run &r) const {
  const size_t n = g.nodes.size();
  std::vector<uint32_t> consumers(n, 0), len(n, 0);
  std::vector<int64_t> pred(n, -1);
  for (const NodeInfo &nd : g.nodes)
    for (int64_t in : nd.in)
      if (in >= 0 && static_cast<size_t>(in) < n) ++consumers[static_cast<size_t>(in)];
  size_t end = 0;
  uint32_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    const NodeInfo &nd = g.nodes[i];
    if (nd.leaf || nd.checkpoint || !nd.at) continue;
    int64_t prev = -1;
    bool ok = true;
    for (int64_t in : nd.in) {
      if (in < 0) continue;
      if (static_cast<size_t>(in) >= i) {
        ok = false;
        break;
      }
      if (g.nodes[static_cast<size_t>(in)].leaf) continue;
      if (prev >= 0 && prev != in) {
        ok = false;
        break;
      }
      prev = in;
    }
    if (!ok) continue;
    len[i] = 1;
    if (prev >= 0 && len[static_cast<size_t>(prev)] && consumers[static_cast<size_t>(prev)] == 1) {
      pred[i] = prev;
      len[i] = len[static_cast<size_t>(prev)] + 1;
    }
    if (len[i] > best) {
      best = len[i];
      end = i;
    }
  }
  if (best < 2) return false;
  std::vector<size_t> c(best);
  {
    int64_t i = static_cast<int64_t>(end);
    for (size_t k = best; k-- > 0; i = pred[static_cast<size_t>(i)]) c[k] = static_cast<size_t>(i);
  }
  const size_t m = c.size();
  auto op = [&](size_t k) { return g.nodes[c[k]].op; };
  size_t bp = 1, bstart = 0, bcount = 0, bcov = 0;
  for (size_t p = 1; p <= std::min(m / 2, kMaxLayerOps); ++p) {
    size_t i = 0;
    while (i + p < m) {
      if (op(i) != op(i + p)) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j + p < m && op(j) == op(j + p)) ++j;
      const size_t count = (j - i + p) / p;
      if (count >= 2 && count * p > bcov) {
        bcov = count * p;
        bp = p;
        bstart = i;
        bcount = count;
      }
      i = j;
    }
  }
  r.periodic = bcount >= 2;
  if (bcount < 2) {  // no repeated layer: every node is a layer
    bp = 1;
    bstart = 0;
    bcount = m;
  }
  r.period = bp;
  r.layers = bcount;
  r.nodes.assign(c.begin() + static_cast<std::ptrdiff_t>(bstart),
                 c.begin() + static_cast<std::ptrdiff_t>(bstart + bp * bcount));
  // The segment input: the chain's previous node, else (all inputs leaves) a requested one,
  // else the first active one; other inputs are captured by the segment.
  r.input = pred[r.nodes[0]];
  for (int64_t in : g.nodes[r.nodes[0]].in)
    if (in >= 0 && (r.input < 0 || (g.nodes[static_cast<size_t>(in)].requested &&
                                    !g.nodes[static_cast<size_t>(r.input)].requested)))
      r.input = in;
  return r.layers >= 2;
}

// Models a sequential checkpoint over the run (the engine's checkpoint segments, as the
// ad.tape.checkpoint event describes them): the forward keeps only each segment's input; in
// backward, just before a segment's rules, the segment is recomputed on a nested tape (its forward
// allocations again, in the outer tape's arena), those caches die as the rules release them
// (the segment's output and the incoming gradient live until the segment's backward is
// over), the input's gradient is delivered as a copy, then the segment's input is released.
void Planner::checkpoint_chain() {
  Run r;
  if (!find_run(r)) return;
  const size_t n = g.nodes.size(), per = r.period, L = r.layers;
  size_t S = static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(L))));
  S = std::max<size_t>(1, std::min(S, L));
  const bool arena = ((g.backward_bits | g.bits) & kReuse) != 0;
  const bool early = ((g.backward ? g.backward_bits : g.bits) & kEarlyRelease) != 0;
  // The nested tape returns the input's gradient as a requested one, through owned(): a copy,
  // unless the recording shows a requested leaf's gradient delivered without one.
  bool deliver_copy = true;
  for (const NodeInfo &nd : g.nodes)
    if (nd.leaf && nd.requested && nd.complete && nd.deliver_allocs.empty()) deliver_copy = false;
  std::vector<char> in_run(n, 0);
  for (size_t j : r.nodes) in_run[j] = 1;
  std::vector<int64_t> last_consumer(n, -1);
  for (size_t i = 0; i < n; ++i)
    for (int64_t in : g.nodes[i].in)
      if (in >= 0 && static_cast<size_t>(in) < n)
        last_consumer[static_cast<size_t>(in)] =
            std::max(last_consumer[static_cast<size_t>(in)], static_cast<int64_t>(i));
  auto fact_of = [&](uint64_t s) -> const Fact * {
    auto f = s ? g.facts.find(s) : g.facts.end();
    return f != g.facts.end() ? &f->second : nullptr;
  };
  // The latest release of a save of s by a node outside the run.
  auto outside_release = [&](uint64_t s) {
    uint64_t d = 0;
    for (size_t i = 0; i < n; ++i) {
      if (in_run[i]) continue;
      for (const Save &sv : g.nodes[i].saves)
        if (sv.storage == s) d = std::max(d, sv.release ? sv.release : g.end_index);
    }
    return d;
  };
  auto at_of = [&](size_t q) { return g.nodes[r.nodes[q]].at; };
  ChainStats st;
  st.nodes = r.nodes.size();
  st.layers = L;
  st.ops_per_layer = per;
  st.segments = S;
  st.generations = 1;
  st.periodic = r.periodic;
  for (size_t k = 0; k < (r.periodic ? per : std::min<size_t>(r.nodes.size(), 8)); ++k)
    st.layer_ops.push_back(g.nodes[r.nodes[k]].op);
  auto kill_early = [&](uint64_t s, uint64_t idx, std::vector<Action> *list) {
    const Fact *f = fact_of(s);
    if (!f || !f->tape_killed || !idx || (f->death && idx >= f->death)) return false;
    if (list)
      list->push_back({Action::kKill, s});
    else
      p.at[idx].push_back({Action::kKill, s});
    return true;
  };

  // Segments, as positions in r.nodes: [b, e).
  struct Seg {
    size_t b, e;
    uint64_t done = 0, grad_bytes = 0;  // its backward is over; its input's gradient
  };
  std::vector<Seg> segs;
  for (size_t k = 0; k < S; ++k)
    segs.push_back({k * L / S * per, (k + 1 < S ? (k + 1) * L / S : L) * per});
  for (Seg &sg : segs) {
    const size_t b = r.nodes[sg.b];
    const int64_t in = sg.b ? static_cast<int64_t>(r.nodes[sg.b - 1]) : r.input;
    if (in >= 0)
      for (const Contribution &c : g.nodes[static_cast<size_t>(in)].contributions)
        if (c.from == static_cast<int64_t>(b)) {
          sg.done = c.index;
          sg.grad_bytes = c.bytes;
        }
    if (!sg.done) sg.done = g.nodes[b].rule_end;
  }

  // Forward: nothing inside a segment is kept. An output the tape held dies where the layer
  // code drops it: a layer's input at the end of that layer, any other value after its last
  // consumer. Segment outputs: the next segment's input (released after that segment's
  // backward, below), or the run's output (dropped after its consumers, or kept by their saves).
  std::unordered_map<uint64_t, uint64_t> drop;  // storage -> predicted death
  std::unordered_set<uint64_t> boundary;
  for (size_t k = 0; k + 1 < segs.size(); ++k) boundary.insert(g.nodes[r.nodes[segs[k].e - 1]].out);
  for (size_t k = 0; k < segs.size(); ++k)
    for (size_t q = segs[k].b; q < segs[k].e; ++q) {
      const size_t j = r.nodes[q];
      const uint64_t s = g.nodes[j].out;
      if (!s || boundary.count(s)) continue;
      uint64_t idx;
      if (q + 1 == r.nodes.size()) {
        idx = last_consumer[j] >= 0 ? g.nodes[static_cast<size_t>(last_consumer[j])].at
                                    : g.nodes[j].at;
        idx = std::max(idx, outside_release(s));
      } else if ((q + 1) % per == 0) {
        idx = at_of(q + per);  // a layer's input: dropped when the layer has run
      } else {
        idx = last_consumer[j] >= 0 ? g.nodes[static_cast<size_t>(last_consumer[j])].at : 0;
      }
      uint64_t &d = drop[s];
      d = std::max(d, idx);
    }
  for (const auto &[s, idx] : drop)
    if (kill_early(s, idx, nullptr)) {
      ++st.dropped;
      st.dropped_bytes += g.facts[s].size;
    }
  // The plain tape's bookkeeping for the run's nodes (node objects, saved tensor headers, what
  // a reusable tape keeps of them), allocated by their forward or kept from their rules: the
  // checkpointed tape records one node per segment instead, and the nested tapes' own
  // bookkeeping dies with them.
  for (size_t j : r.nodes) {
    const NodeInfo &nd = g.nodes[j];
    for (const FwdAlloc &a : nd.fwd)
      if (!a.tensor && !a.transient) suppress(a.storage);
    for (uint64_t s : nd.rule_allocs) {
      const Fact *f = fact_of(s);
      if (f && !f->tensor && (!f->death || f->death > nd.rule_end)) suppress(s);
    }
  }

  // Backward: per segment, recompute, then release at `done`.
  for (size_t k = 0; k < segs.size(); ++k) {
    const Seg &sg = segs[k];
    const NodeInfo &last = g.nodes[r.nodes[sg.e - 1]];
    const NodeInfo &first = g.nodes[r.nodes[sg.b]];
    if (!last.rule_begin || !first.rule_end || !sg.done) continue;
    std::vector<Action> &rec = p.at[last.rule_begin];
    std::vector<Action> at_done;
    std::vector<std::vector<uint64_t>> after(sg.e - sg.b);
    for (size_t q = sg.b; q < sg.e; ++q) {
      const NodeInfo &nd = g.nodes[r.nodes[q]];
      std::vector<uint64_t> transient;
      for (const FwdAlloc &a : nd.fwd) {
        if (!a.tensor && !a.transient) continue;  // bookkeeping of the plain tape (below)
        const uint64_t v = ids.take();
        rec.push_back({Action::kBirth, v, a.size, arena, true});
        st.recomputed_bytes += a.size;
        if (a.transient) {
          transient.push_back(v);
          continue;
        }
        if (q + 1 == sg.e && a.storage == nd.out) {  // the segment's output: until the end
          at_done.push_back({Action::kKill, v});
          continue;
        }
        const Fact *f = fact_of(a.storage);
        if (f && f->tape_killed) {  // a cache: released by its rule (or at the end)
          if (f->death && f->death < sg.done)
            p.at[f->death].push_back({Action::kKill, v});
          else
            at_done.push_back({Action::kKill, v});
          continue;
        }
        // Not kept: dies where it died in the recorded forward (after the same node).
        const uint64_t d = f ? f->death : 0;
        if (!d) {
          at_done.push_back({Action::kKill, v});
          continue;
        }
        size_t k2 = q;
        while (k2 + 1 < sg.e && at_of(k2 + 1) <= d) ++k2;
        after[k2 - sg.b].push_back(v);
      }
      for (uint64_t v : transient) rec.push_back({Action::kKill, v});
      for (uint64_t v : after[q - sg.b]) rec.push_back({Action::kKill, v});
    }
    std::vector<Action> &end = p.at[sg.done];
    if (deliver_copy && sg.grad_bytes) {  // the nested tape delivers the input's gradient
      const uint64_t v = ids.take();
      end.push_back({Action::kBirth, v, sg.grad_bytes, arena, true});
      end.push_back({Action::kKill, v});
    }
    end.insert(end.end(), at_done.begin(), at_done.end());
    // The gradient the segment was seeded with lives until its backward is over.
    uint64_t seed = last.sum;
    if (!seed)
      for (const Contribution &c : last.contributions)
        if (c.index < last.rule_begin) seed = c.buffer;
    const Fact *sf = fact_of(seed);
    if (sf && sf->death && sf->death < sg.done) {
      ++p.extra_holds[seed];
      end.push_back({Action::kReleaseHold, seed});
    }
    // The segment's input, kept by the checkpoint node, is released after its backward.
    if (!early) continue;
    if (k > 0) {
      kill_early(g.nodes[r.nodes[sg.b - 1]].out, sg.done, &end);
    } else if (r.input >= 0 && !g.nodes[static_cast<size_t>(r.input)].leaf) {
      const uint64_t s = g.nodes[static_cast<size_t>(r.input)].out;
      const uint64_t d = std::max(sg.done, outside_release(s));
      kill_early(s, d, d == sg.done ? &end : nullptr);
    }
  }
  ChainStats &pc = p.chain;
  const uint64_t gens = pc.generations + 1;
  if (st.nodes > pc.nodes) pc = st;
  pc.generations = gens;
}

}  // namespace adprof::whatif
