#include "adprof/sites.h"

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace adprof {

namespace {
constexpr uint32_t kMaxStackIds = 1u << 26;  // a recording defines far fewer
}

SiteTotals::Totals &SiteTotals::grow(uint32_t id) {
  if (id >= kMaxStackIds) return beyond_;
  totals_.resize(std::max<size_t>(id + 1, 2 * totals_.size()));
  return totals_[id];
}

std::vector<SiteSummary> SiteTotals::summarize(const std::vector<const Block *> &at_peak,
                                               const std::vector<const Block *> &at_end,
                                               const std::function<void(double)> &progress,
                                               bool with_stacks) {
  std::vector<SiteSummary> sites;
  if (stacks_.empty()) return sites;
  // A stack's site is its innermost frame's text: only that frame is symbolised per stack, each
  // distinct frame once, and its text made once (a Python program defines hundreds of
  // thousands of stacks over a few thousand sites). A site's stack (all frames) is its first's.
  constexpr uint32_t kNone = UINT32_MAX;
  std::unordered_map<std::string, uint32_t> by_name;
  absl::flat_hash_map<uint32_t, uint32_t> by_frame;  // innermost frame -> index in sites
  std::vector<uint32_t> by_stack(totals_.size(), kNone);
  auto site_of_stack = [&](uint32_t id) -> uint32_t {
    const uint32_t frame = stacks_.site_frame(id);
    auto [it, inserted] = by_frame.try_emplace(frame, 0);
    if (!inserted) return it->second;
    std::string name =
        frame == CallStacks::kNoFrame ? "(unknown stack)" : stacks_.frame(frame).text();
    auto [named, new_name] = by_name.try_emplace(std::move(name), uint32_t(sites.size()));
    if (new_name) {
      SiteSummary s;
      s.site = named->first;
      if (with_stacks)
        for (const SourceFrame &f : stacks_.frames(id)) s.stack.push_back(f.text());
      sites.push_back(std::move(s));
    }
    return it->second = named->second;
  };
  auto site_of = [&](uint32_t id) -> SiteSummary & {
    if (id >= by_stack.size()) return sites[site_of_stack(id)];
    if (by_stack[id] == kNone) by_stack[id] = site_of_stack(id);
    return sites[by_stack[id]];
  };
  const size_t work = totals_.size() + at_peak.size() + at_end.size();
  auto report = [&](size_t done) {
    if (progress && (done & 0xFFFF) == 0) progress(static_cast<double>(done) / work);
  };
  for (size_t id = 1; id < totals_.size(); ++id) {
    report(id);
    const Totals &t = totals_[id];
    if (t.allocations == 0) continue;
    SiteSummary &s = site_of(static_cast<uint32_t>(id));
    s.allocations += t.allocations;
    s.bytes += t.bytes;
    s.temporaries += t.temporaries;
    s.temporary_bytes += t.temporary_bytes;
  }
  size_t done = totals_.size();
  for (const Block *b : at_peak) {
    report(++done);
    if (!is_host_space(b->space)) continue;
    SiteSummary &s = site_of(b->stack);
    s.peak_bytes += b->size;
    ++s.peak_blocks;
    s.peak_by_role[b->role] += b->size;
  }
  for (const Block *b : at_end) {
    report(++done);
    if (!is_host_space(b->space)) continue;
    SiteSummary &s = site_of(b->stack);
    s.exit_bytes += b->size;
    ++s.exit_blocks;
  }
  if (progress) progress(1.0);
  std::sort(sites.begin(), sites.end(), [](const SiteSummary &a, const SiteSummary &b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  return sites;
}

std::vector<std::pair<std::string, uint64_t>> SiteTotals::folded(
    const std::vector<const Block *> &blocks) {
  std::unordered_map<uint32_t, uint64_t> by_stack;
  for (const Block *b : blocks)
    if (is_host_space(b->space)) by_stack[b->stack] += b->size;
  // Stacks are grouped by their frames' names (two return addresses in one function are one
  // frame here): each frame's name is made once, and a line's text once per distinct line.
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t> name_ids;
  std::unordered_map<uint32_t, uint32_t> name_of_frame;
  std::map<std::vector<uint32_t>, uint64_t> by_names;  // outermost first
  std::vector<uint32_t> key;
  for (const auto &[id, bytes] : by_stack) {
    const std::span<const uint32_t> frames = stacks_.frame_indices(id);
    key.clear();
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
      auto [it, inserted] = name_of_frame.try_emplace(*f, 0);
      if (inserted) {
        std::string name = stacks_.frame(*f).name();
        std::replace(name.begin(), name.end(), ';', ':');  // the folded format's separator
        auto [named, new_name] = name_ids.try_emplace(std::move(name), uint32_t(names.size()));
        if (new_name) names.push_back(named->first);
        it->second = named->second;
      }
      key.push_back(it->second);
    }
    by_names[key] += bytes;
  }
  std::unordered_map<std::string, uint64_t> by_text;
  for (const auto &[ids, bytes] : by_names) {
    std::string text;
    for (uint32_t n : ids) {
      if (!text.empty()) text += ';';
      text += names[n];
    }
    by_text[text.empty() ? "(unknown stack)" : text] += bytes;
  }
  std::vector<std::pair<std::string, uint64_t>> out(by_text.begin(), by_text.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace adprof
