// What-ifs an engine of compiled programs predicts for itself (program_plans.h).
#include "program_plans.h"

#include <algorithm>

namespace adprof::whatif {

namespace {
uint64_t at(std::span<const uint64_t> v, size_t i) { return i < v.size() ? v[i] : kNone; }
}  // namespace

void ProgramPlans::on_layout(std::span<const uint64_t> v) {
  // {layout, bytes, slices, fullest position, schedule length, name, label of the free bytes}
  if (v.size() < 2) return;
  Layout &l = layouts_[v[0]];
  l = Layout{.bytes = v[1], .whatif = {}, .open = {}};
  if (at(v, 6) != kNone && at(v, 6) != 0) label_layout_[v[6]] = v[0];
}

void ProgramPlans::on_slice(std::span<const uint64_t> v) {
  // {layout, offset, bytes, role, phase, op, label, ...}
  if (v.size() < 7 || !layouts_.count(v[0]) || v[6] == 0 || v[6] == kNone) return;
  label_layout_[v[6]] = v[0];
}

void ProgramPlans::on_whatif(std::span<const uint64_t> v) {
  // {layout, policy, bytes}
  if (v.size() < 3 || v[1] >= ADPROF_AD_POLICY_COUNT) return;
  auto l = layouts_.find(v[0]);
  if (l != layouts_.end()) l->second.whatif[v[1]] = v[2];
}

void ProgramPlans::on_call(std::span<const uint64_t> v) {
  // Every call's arena is followed (a what-if may be sent after the first call, when the engine
  // has seen what the program returns), up to a bound on the blocks remembered.
  auto l = v.empty() ? layouts_.end() : layouts_.find(v[0]);
  if (l == layouts_.end() || parts_ >= kMaxParts) return;
  l->second.open.push_back(arenas_.size());
  arenas_.push_back(Arena{.layout = v[0], .parts = {}});
}

void ProgramPlans::on_call_end(std::span<const uint64_t> v) {
  auto l = v.empty() ? layouts_.end() : layouts_.find(v[0]);
  if (l != layouts_.end()) l->second.open.clear();
}

void ProgramPlans::on_label(uint64_t storage, uint64_t label) {
  if (!storage || label_layout_.empty()) return;
  auto ll = label_layout_.find(label);
  if (ll == label_layout_.end()) return;
  auto l = layouts_.find(ll->second);
  if (l == layouts_.end() || l->second.open.empty()) return;
  std::vector<uint64_t> &parts = arenas_[l->second.open.back()].parts;
  if (std::find(parts.begin(), parts.end(), storage) == parts.end()) {
    parts.push_back(storage);
    ++parts_;
  }
}

void ProgramPlans::on_result_in_argument(uint64_t policy, uint64_t result, uint64_t result_bytes,
                                         uint64_t argument) {
  if (!result || !argument || result == argument || policy >= ADPROF_AD_POLICY_COUNT) return;
  // The argument may itself be an earlier result written into an argument: the buffer is that
  // one's (step after step, the one buffer the first argument had).
  auto b = buffer_of_.find(argument);
  const uint64_t buffer = b != buffer_of_.end() ? b->second : argument;
  if (!buffer_of_.emplace(result, buffer).second) return;  // said twice
  aliases_.push_back({policy, result, result_bytes, buffer});
}

bool ProgramPlans::any() const {
  if (!aliases_.empty()) return true;
  for (const auto &[id, l] : layouts_)
    if (!l.whatif.empty()) return true;
  return false;
}

bool ProgramPlans::predicts(int policy) const {
  for (const Alias &a : aliases_)
    if (a.policy == static_cast<uint64_t>(policy)) return true;
  for (const Arena &a : arenas_) {
    auto l = layouts_.find(a.layout);
    if (!a.parts.empty() && l != layouts_.end() && l->second.whatif.count(policy)) return true;
  }
  return false;
}

ProgramPlans::Applied ProgramPlans::apply(int policy, Plan &p, VirtualIds &ids) const {
  Applied out;
  for (const Arena &a : arenas_) {
    auto l = layouts_.find(a.layout);
    if (a.parts.empty() || l == layouts_.end()) continue;
    auto w = l->second.whatif.find(static_cast<uint64_t>(policy));
    if (w == l->second.whatif.end()) continue;
    for (uint64_t s : a.parts)
      if (p.suppress.insert(s).second) ++p.suppressed_count;
    // One block of the predicted size from the arena's first block's birth until its last
    // block dies (the slicer frees blocks as the schedule goes on, the last at the arena's
    // free): a hold per block.
    const uint64_t first = *std::min_element(a.parts.begin(), a.parts.end());
    const uint64_t v = ids.take();
    p.at[first].push_back({Action::kBirth, v, w->second});
    p.extra_holds[v] = static_cast<int>(a.parts.size());
    for (uint64_t s : a.parts) p.on_death.emplace(s, v);
    ++p.virtual_count;
    p.virtual_bytes += w->second;
    ++out.arenas;
    out.recorded_bytes += l->second.bytes;
    out.predicted_bytes += w->second;
  }
  for (const Alias &a : aliases_) {
    if (a.policy != static_cast<uint64_t>(policy)) continue;
    if (p.suppress.insert(a.result).second) {
      ++p.suppressed_count;
      p.suppressed_bytes += a.bytes;
    }
    ++p.extra_holds[a.buffer];
    p.on_death.emplace(a.result, a.buffer);
    ++out.results;
    out.result_bytes += a.bytes;
  }
  return out;
}

}  // namespace adprof::whatif
