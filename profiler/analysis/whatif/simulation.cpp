// Pass 2 of the what-if analysis (simulation.h).
#include "simulation.h"

#include <algorithm>
#include <stdexcept>

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
  // Each scenario's marks of a storage in the tracker's word of marks: kMarkBits apiece.
  if (sc.size() * Scenario::kMarkBits > 64)
    throw std::logic_error("what-if simulation: more scenarios than a storage's marks hold");
  IdsInOrder gave_back;
  {
    std::vector<IdsInOrder::Entry> ids;
    ids.reserve(gave.size());
    for (uint64_t id : gave) ids.push_back({id, 1});
    gave_back.assign(std::move(ids));
  }
  reader.rewind();
  Tracker tracker2(replay2);
  ReplayDriver driver(reader, replay2);
  // A storage acquired: every scenario's acquire, whose marks the tracker keeps until its
  // release.
  auto acquire = [&](uint64_t addr, uint64_t storage, uint64_t size, bool arena) {
    const bool given_back = !gave_back.empty() && gave_back.find(storage);
    uint64_t marks = 0;
    for (size_t i = 0; i < sc.size(); ++i)
      marks |= uint64_t{sc[i].acquire(storage, size, arena, given_back)}
               << (Scenario::kMarkBits * i);
    if (marks) tracker2.mark(addr, marks);
  };
  auto step = [&](const Change &c) {
    const uint64_t index = driver.index();
    if (c.type == Change::kAcquire) acquire(c.addr, c.storage, c.size, c.arena);
    for (size_t i = 0; i < sc.size(); ++i) {
      Scenario &s = sc[i];
      if (c.type == Change::kRelease) {
        s.release(c.storage, c.size, static_cast<unsigned>(c.marks >> (Scenario::kMarkBits * i)));
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
  // Nothing followed before `start`: every scenario is the recording.
  auto before_start = [&] {
    for (Scenario &s : sc) s.peak = std::max(s.peak, replay2.host_live());
  };
  // At `start` (pass 1's first followed event), the live blocks are taken over as pass 1 did.
  // They are acquired in the order of their ids, which the scenarios' lookups walk in step (in
  // any order each would be a search: a long run may hold a hundred thousand blocks by then).
  auto take_over = [&](uint64_t index) {
    tracker2.seed(index);
    struct Seed {
      uint64_t storage, addr, size;
    };
    std::vector<Seed> seeds;
    tracker2.for_each([&](uint64_t addr, uint64_t storage, uint64_t size) {
      seeds.push_back({storage, addr, size});
    });
    std::sort(seeds.begin(), seeds.end(),
              [](const Seed &a, const Seed &b) { return a.storage < b.storage; });
    for (const Seed &b : seeds) acquire(b.addr, b.storage, b.size, false);
  };
  auto on_heap = [&](const Event &e, const Replay::HeapChange &c) {
    const uint64_t index = driver.index();
    if (!start || index < start) return before_start();
    if (index == start) [[unlikely]]
      take_over(index);
    step(tracker2.apply_heap(e, c, index));
  };
  auto on_event = [&](const Event &e, bool) {
    const uint64_t index = driver.index();
    if (!start || index < start) return before_start();
    if (index == start) take_over(index);
    step(tracker2.apply(e, index));
  };
  auto pass2 = observe(on_heap, on_event);
  DriveOptions drive;
  drive.progress = progress;
  driver.run(pass2, drive);
}

}  // namespace adprof::whatif
