// Pass 2 of the what-if analysis (simulation.h).
#include "simulation.h"

#include <algorithm>

#include "adprof/replay.h"
#include "adprof/replay_driver.h"

namespace adprof::whatif {

namespace {

bool changes_nothing(const Plan &p) {
  return p.suppress.empty() && p.extra_holds.empty() && p.on_death.empty() && p.at.empty() &&
         p.pooled.empty();
}

}  // namespace

void simulate(TraceReader &reader, std::vector<Scenario> &all,
              const std::unordered_set<uint64_t> &gave, uint64_t start, Replay &replay2,
              const std::function<void(double)> &progress) {
  // Scenarios whose plans change nothing replay the recording alike: the first of them runs,
  // the others take its peak (on an engine with layers most policies have nothing to plan, and each
  // scenario costs a hash probe per event).
  std::vector<Scenario> sc;
  std::vector<size_t> ran;    // all[ran[i]] is sc[i]
  std::vector<size_t> alike;  // scenarios that take the peak of all[same_as_recording]
  size_t same_as_recording = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    if (changes_nothing(all[i].plan)) {
      if (same_as_recording != all.size()) {
        alike.push_back(i);
        continue;
      }
      same_as_recording = i;
    }
    ran.push_back(i);
    sc.push_back(std::move(all[i]));
  }
  struct Restore {  // the scenarios go back to the caller however this returns
    std::vector<Scenario> &all, &sc;
    const std::vector<size_t> &ran, &alike;
    size_t same;
    ~Restore() {
      for (size_t i = 0; i < ran.size(); ++i) all[ran[i]] = std::move(sc[i]);
      for (size_t i : alike) all[i].peak = all[same].peak;
    }
  } restore{all, sc, ran, alike, same_as_recording};
  for (Scenario &s : sc) s.follow_the_plan();
  reader.rewind();
  Tracker tracker2;
  ReplayDriver driver(reader, replay2);
  auto step = [&](const Event &e) {
    const uint64_t index = driver.index();
    if (!start || index < start) {  // nothing followed yet: every scenario is the recording
      for (Scenario &s : sc) s.peak = std::max(s.peak, replay2.host_live());
      return;
    }
    auto acquire = [&](Scenario &s, uint64_t storage, uint64_t size, bool arena, bool gave_back) {
      s.acquire(storage, size, arena, gave_back || s.plan.pooled.count(storage) > 0);
    };
    if (index == start) {  // take over the live blocks as pass 1 did
      tracker2.seed(replay2);
      tracker2.for_each([&](uint64_t storage, uint64_t size) {
        const bool gave_back = gave.count(storage) > 0;
        for (Scenario &s : sc) acquire(s, storage, size, false, gave_back);
      });
    }
    const Change c = tracker2.apply(e, index);
    const bool gave_back = c.type == Change::kAcquire && gave.count(c.storage) > 0;
    for (Scenario &s : sc) {
      if (c.type == Change::kAcquire) {
        acquire(s, c.storage, c.size, c.arena, gave_back);
      } else if (c.type == Change::kRelease) {
        s.trigger(c.storage);
        s.release(c.storage, c.size);
      } else if (c.type == Change::kIdleFree) {
        auto it = s.idle.find(c.size);
        if (it != s.idle.end() && it->second > 0) {
          --it->second;
          s.phys -= static_cast<int64_t>(c.size);
        }
      }
      // The plan's actions after this event (the events come in index order: a cursor, not a
      // search per event).
      while (s.next_action != s.plan.at.end() && s.next_action->first < index) ++s.next_action;
      const bool acts = s.next_action != s.plan.at.end() && s.next_action->first == index;
      auto total_now = [&] {
        return static_cast<int64_t>(replay2.host_live()) - static_cast<int64_t>(tracker2.phys()) +
               s.phys;
      };
      if (acts) {
        for (const Action &act : s.next_action->second) {
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
        s.next_action = s.plan.at.erase(s.next_action);
      }
      const int64_t total = total_now();
      if (total > 0) s.peak = std::max(s.peak, static_cast<uint64_t>(total));
    }
  };
  auto pass2 = observe([&](const Event &e, const Replay::HeapChange &) { step(e); },
                       [&](const Event &e, bool) { step(e); });
  DriveOptions drive;
  drive.progress = progress;
  driver.run(pass2, drive);
}

}  // namespace adprof::whatif
