// Arenas cut into their logical buffers (ad_protocol.h, "Arenas", version 4): a block that an
// engine's runtime allocates whole for each call of a compiled program, and that the compiler
// has divided ahead of time (a compiled program's preallocated temp buffer), is shown to the replay
// as the logical buffers it holds, each a block of its own with its role, op, phase, label and
// source, instead of one block of one role.
//
// The slicer sits between the reader and the replay (ReplayDriver): it rewrites the events of a
// run, so every view built on the replay (report, timeline, snapshot, what-if, GUI) sees the
// same blocks. It changes nothing in a trace without arena events, and costs one test of each
// event's type there.
//
// What it makes of an arena (announced by ad.arena.call, allocated before ad.arena.call_end):
//   the allocation becomes one allocation per logical buffer live at the layout's fullest
//   schedule position (the moment the arena is fullest, the one its size was made for), each
//   at the arena's address plus its offset, in an op scope of its op and with its phase, then
//   retagged with its role (and source: a duplicate's source argument or slice) and labelled;
//   the bytes no buffer holds at that moment are one more block (role workspace, the layout's
//   label for them), so the arena's bytes are all accounted for, once. Its slack goes to the
//   first block. The arena's free frees them all.
// Buffers that are live only at other positions of the schedule are in the trace (ad.arena.slice
// with their live range) but have no block: the arena's memory is shown as it is at its fullest.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "adprof/trace_reader.h"

namespace adprof {

class ArenaSlicer {
 public:
  // The run as the replay should see it: `run` itself when nothing in it changes, else a
  // rewritten copy (valid until the next call).
  std::span<const Event> rewrite(std::span<const Event> run);

  // Arenas announced and found so far (for tests and the report's notes).
  uint64_t arenas_found() const { return arenas_found_; }
  uint64_t calls_announced() const { return calls_announced_; }

 private:
  struct Slice {
    uint64_t offset = 0, bytes = 0, role = 0, phase = 0, op = 0, label = 0, from = 0, to = 0;
    uint64_t source_argument = 0, source_offset = 0;  // ADPROF_AD_NONE: none
    uint64_t dtype = 0;                               // adprof_dtype; 0: unknown
    std::vector<uint64_t> dims;
  };
  struct Layout {
    uint64_t bytes = 0, fullest = 0, unused_label = 0;
    std::vector<Slice> slices;
  };
  struct Call {
    uint64_t layout = 0, instance = 0;
    std::vector<uint64_t> sources;  // the source arguments' addresses
  };
  struct Arena {
    std::vector<uint64_t> parts;  // the addresses of the blocks it became
  };

  // Updates the state; true when `e` is replaced. Outside a rewrite it only says so for an
  // allocation or free (rewrite() copies the run so far and asks again).
  bool interesting(const Event &e);
  void on_name(const Event &e);
  void on_annotation(const Event &e);
  void expand_alloc(const Event &e, const Call &call, const Layout &layout);
  void expand_free(const Event &e, const Arena &arena);
  Event made(const Event &like, format::EventType type) const;

  enum KindSlot { kLayout, kSlice, kCall, kCallEnd, kKindCount };
  uint64_t kinds_[kKindCount] = {};  // the name ids of the protocol's kinds (0: not named yet)
  bool watching_ = false;            // one of them was named: look at every event
  std::unordered_map<uint64_t, Layout> layouts_;
  std::vector<Call> open_calls_;
  // By address. (No absl container in this header: its layout may differ between the
  // library's and a user's compile options.)
  std::unordered_map<uint64_t, Arena> arenas_;
  std::vector<uint8_t> thread_phase_;  // by thread, from phase events
  std::vector<Event> out_;
  std::deque<std::vector<uint64_t>> payloads_;  // the made describe events' dimensions, per run
  bool rewriting_ = false;
  uint64_t arenas_found_ = 0, calls_announced_ = 0;
};

}  // namespace adprof
