// Allocation sites, for traces recorded with call stacks (`adprof run --stacks`): what each
// site allocated, the temporaries it made, what of it was live at the host peak (by role) and
// at the end. A site is an allocation's innermost frame after symbolisation (call_stacks.h):
// "function (file:line)", an inlined function by its own name and line. SiteTotals rides on the
// report's pass (memory/analyze.cpp, an observer of the one replay loop): counts by stack id during
// the pass, symbols and the grouping by site once at the end.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "adprof/call_stacks.h"
#include "adprof/replay.h"

namespace adprof {

struct SiteSummary {
  std::string site;                // the innermost frame: "function (file:line)"
  std::vector<std::string> stack;  // one of its stacks' frames, innermost first
  uint64_t allocations = 0;
  uint64_t bytes = 0;
  uint64_t temporaries = 0;  // blocks freed inside the op call that made them
  uint64_t temporary_bytes = 0;
  uint64_t peak_bytes = 0;  // host bytes of its blocks live at the host peak
  uint64_t peak_blocks = 0;
  std::array<uint64_t, kRoleCount> peak_by_role{};
  uint64_t exit_bytes = 0;  // host bytes of its blocks live at the end
  uint64_t exit_blocks = 0;
};

class SiteTotals {
 public:
  // An allocation or a temporary's free of the replay (host blocks): counted by stack id.
  [[gnu::always_inline]] void on_alloc(const Block &b) {
    if (b.stack == 0) return;  // a trace without stacks: one test
    Totals &t = at(b.stack);
    ++t.allocations;
    t.bytes += b.size;
  }
  [[gnu::always_inline]] void on_temporary(const Block &b) {
    if (b.stack == 0) return;
    Totals &t = at(b.stack);
    ++t.temporaries;
    t.temporary_bytes += b.size;
  }
  // Stack and mapping events (any other is ignored).
  void on_event(const Event &e) { stacks_.on_event(e); }

  bool empty() const { return stacks_.empty(); }
  CallStacks &stacks() { return stacks_; }

  // The sites, by bytes allocated (descending), from the totals, the blocks live at the peak
  // and those live at the end; empty when the trace has no stacks.
  // `progress` (optional) is told the fraction done now and then; `with_stacks` false leaves
  // each site's `stack` empty (only the innermost frames are symbolised).
  std::vector<SiteSummary> summarize(const std::vector<const Block *> &at_peak,
                                     const std::vector<const Block *> &at_end,
                                     const std::function<void(double)> &progress = {},
                                     bool with_stacks = true);
  // Folded stacks ("outermost;...;innermost", function names) of `blocks`' host bytes, by
  // stack: the input of flame graphs (adprof export --folded).
  std::vector<std::pair<std::string, uint64_t>> folded(const std::vector<const Block *> &blocks);

 private:
  struct Totals {
    uint64_t allocations = 0, bytes = 0, temporaries = 0, temporary_bytes = 0;
  };
  Totals &at(uint32_t id) {
    if (id >= totals_.size()) [[unlikely]]
      return grow(id);
    return totals_[id];
  }
  Totals &grow(uint32_t id);
  std::vector<Totals> totals_;  // by stack id (ids are dense, from 1)
  Totals beyond_;               // ids past kMaxStackIds (a damaged trace): not reported
  CallStacks stacks_;
};

}  // namespace adprof
