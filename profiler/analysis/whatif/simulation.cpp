// Pass 2 of the what-if analysis (simulation.h).
#include "simulation.h"

#include <algorithm>

#include "adprof/replay.h"
#include "adprof/replay_driver.h"

namespace adprof::whatif {

void simulate(TraceReader &reader, std::vector<Scenario> &sc,
              const std::unordered_set<uint64_t> &gave) {
  reader.rewind();
  Replay replay2;
  Tracker tracker2;
  ReplayDriver driver(reader, replay2);
  auto step = [&](const Event &e) {
    const uint64_t index = driver.index();
    const Change c = tracker2.apply(e, index);
    for (Scenario &s : sc) {
      if (c.type == Change::kAcquire) {
        if (!s.plan.suppress.count(c.storage)) {
          auto x = s.plan.extra_holds.find(c.storage);
          const int holds = 1 + (x != s.plan.extra_holds.end() ? x->second : 0);
          const bool to_pool = gave.count(c.storage) > 0 || s.plan.pooled.count(c.storage) > 0;
          s.alloc(c.storage, c.size, c.arena || to_pool, to_pool, holds);
        }
      } else if (c.type == Change::kRelease) {
        s.trigger(c.storage);
        s.release_hold(c.storage);
      } else if (c.type == Change::kIdleFree) {
        auto it = s.idle.find(c.size);
        if (it != s.idle.end() && it->second > 0) {
          --it->second;
          s.phys -= static_cast<int64_t>(c.size);
        }
      }
      auto a = s.plan.at.find(index);
      auto total_now = [&] {
        return static_cast<int64_t>(replay2.host_live()) - static_cast<int64_t>(tracker2.phys()) +
               s.phys;
      };
      if (a != s.plan.at.end()) {
        for (const Action &act : a->second) {
          if (act.type == Action::kKill) {
            s.kill(act.id);
          } else if (act.type == Action::kReleaseHold) {
            s.release_hold(act.id);
          } else {
            auto x = s.plan.extra_holds.find(act.id);
            s.alloc(act.id, act.size, act.arena, act.arena,
                    x != s.plan.extra_holds.end() ? x->second : 1);
          }
          if (act.probe && total_now() > 0)
            s.peak = std::max(s.peak, static_cast<uint64_t>(total_now()));
        }
        s.plan.at.erase(a);
      }
      const int64_t total = total_now();
      if (total > 0) s.peak = std::max(s.peak, static_cast<uint64_t>(total));
    }
  };
  auto pass2 = observe([&](const Event &e, const Replay::HeapChange &) { step(e); },
                       [&](const Event &e, bool) { step(e); });
  driver.run(pass2);
}

}  // namespace adprof::whatif
