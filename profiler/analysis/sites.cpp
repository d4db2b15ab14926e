#include "adprof/sites.h"

#include <algorithm>
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
                                               const std::vector<const Block *> &at_end) {
  std::vector<SiteSummary> sites;
  if (stacks_.empty()) return sites;
  std::unordered_map<std::string, size_t> by_name;
  std::unordered_map<uint32_t, size_t> by_stack;  // stack id -> index in sites
  auto site_of = [&](uint32_t id) -> SiteSummary & {
    if (auto it = by_stack.find(id); it != by_stack.end()) return sites[it->second];
    const std::string name = stacks_.site(id);
    auto [it, inserted] = by_name.try_emplace(name, sites.size());
    if (inserted) {
      SiteSummary s;
      s.site = name;
      for (const SourceFrame &f : stacks_.frames(id)) s.stack.push_back(f.text());
      sites.push_back(std::move(s));
    }
    by_stack.emplace(id, it->second);
    return sites[it->second];
  };
  for (size_t id = 1; id < totals_.size(); ++id) {
    const Totals &t = totals_[id];
    if (t.allocations == 0) continue;
    SiteSummary &s = site_of(static_cast<uint32_t>(id));
    s.allocations += t.allocations;
    s.bytes += t.bytes;
    s.temporaries += t.temporaries;
    s.temporary_bytes += t.temporary_bytes;
  }
  for (const Block *b : at_peak) {
    if (!is_host_space(b->space)) continue;
    SiteSummary &s = site_of(b->stack);
    s.peak_bytes += b->size;
    ++s.peak_blocks;
    s.peak_by_role[b->role] += b->size;
  }
  for (const Block *b : at_end) {
    if (!is_host_space(b->space)) continue;
    SiteSummary &s = site_of(b->stack);
    s.exit_bytes += b->size;
    ++s.exit_blocks;
  }
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
  std::unordered_map<std::string, uint64_t> by_text;
  for (const auto &[id, bytes] : by_stack) {
    const std::span<const uint32_t> frames = stacks_.frame_indices(id);
    std::string text;
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
      std::string name = stacks_.frame(*f).name();
      std::replace(name.begin(), name.end(), ';', ':');  // the folded format's separator
      text += (text.empty() ? "" : ";") + name;
    }
    by_text[text.empty() ? "(unknown stack)" : text] += bytes;
  }
  std::vector<std::pair<std::string, uint64_t>> out(by_text.begin(), by_text.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace adprof
