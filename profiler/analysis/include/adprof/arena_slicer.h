// Arenas cut into their logical buffers (ad_protocol.h, "Arenas", version 4): a block that an
// engine's runtime allocates whole for each call of a compiled program, and that the compiler
// has divided ahead of time (a compiled program's preallocated temp buffer), is shown to the replay
// as the logical buffers it holds, each a block of its own with its role, op, phase, label and
// source, instead of one block of one role. The arena is a heap block (a runtime on the host) or
// device memory the program holds (DEVICE_RAW: a runtime that takes each buffer from the driver;
// DEVICE_BLOCK: one an allocator declares); its buffers are made in its space, on its device.
// An allocator's reserve (DEVICE_SEGMENT) is never an arena.
//
// The slicer sits between the reader and the replay (ReplayDriver): it rewrites the events of a
// run, so every view built on the replay (report, timeline, snapshot, what-if, GUI) sees the
// same blocks. It changes nothing in a trace without arena events, and costs one test of each
// event's type there.
//
// What it makes of an arena (announced by ad.arena.call, allocated before ad.arena.call_end):
// blocks at the arena's address plus each logical buffer's offset, each in an op scope of its
// op and with its phase, retagged with its role (and source: a duplicate's source argument or
// slice) and labelled, and one workspace block (the layout's label for it) for the bytes no
// buffer holds, so the arena's bytes are all accounted for, once, at every point; its slack
// goes to the first block, and the arena's free frees what is left of it.
//   Positions off (the report, the what-if, the snapshot): the buffers live at the layout's
//   fullest schedule position (of two that share bytes there, the one that began last), for
//   the arena's whole life: the peak shows what the arena's size was made for.
//   Positions on (the timeline): the arena walks its schedule. At the allocation, the buffers
//   of position 0; then position by position those whose live range ended are freed and those
//   that begin are made (one that takes bytes a live one holds, an in-place op's result, ends
//   that one), the free bytes' block resized (shrunk before, grown after: the arena never
//   holds more than its size). The positions are spread evenly over the call's time, from the
//   arena's allocation to the call's end (ad.arena.call_end) or the arena's free, whichever
//   comes first: the runtime says when the call ran, not when each instruction did. To place
//   them, the events after the allocation are held back until the call ends (their payloads
//   copied), then handed on with the positions' events among them, by time; a call whose end
//   never comes ends at the trace's end (flush()), or after kMaxHeld events.
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
  // rewritten copy (valid until the next call). It may be empty while a call is held back.
  std::span<const Event> rewrite(std::span<const Event> run);
  // At the trace's end: the events still held back (calls never ended end here).
  std::span<const Event> flush();
  // Positions on: each arena walks its schedule (a timeline's view); off (the default): each
  // arena is shown as it is at its fullest point for its whole life (the report's and the
  // what-if's view: the peak shows what the arena's size was made for).
  void set_positions(bool on) { positions_ = on; }

  // Arenas announced and found so far (for tests and the report's notes).
  uint64_t arenas_found() const { return arenas_found_; }
  uint64_t calls_announced() const { return calls_announced_; }

  // Events held back at most (then the calls in flight end at the last one).
  static constexpr size_t kMaxHeld = size_t{1} << 20;

 private:
  struct Slice {
    uint64_t offset = 0, bytes = 0, role = 0, phase = 0, op = 0, label = 0, from = 0, to = 0;
    uint64_t source_argument = 0, source_offset = 0;  // ADPROF_AD_NONE: none
    uint64_t dtype = 0;                               // adprof_dtype; 0: unknown
    std::vector<uint64_t> dims;
  };
  // The block of an arena's bytes that no logical buffer holds: workspace, labelled as the
  // layout's unused bytes.
  static Slice free_bytes_slice(uint64_t offset, uint64_t bytes, uint64_t unused_label);
  struct Layout {
    uint64_t bytes = 0, fullest = 0, schedule = 0, unused_label = 0;
    std::vector<Slice> slices;
  };
  struct Call {
    uint64_t layout = 0, instance = 0;
    std::vector<uint64_t> sources;  // the source arguments' addresses
  };
  struct Arena {
    std::vector<uint64_t> parts;  // the addresses of its blocks live now
    uint8_t space = 0;            // its memory's (ADPROF_SPACE_*): its blocks are made in it
  };
  // What changes at one schedule position: slices (indices into `slices`) freed, then made.
  struct Step {
    uint64_t position = 0;
    std::vector<uint32_t> frees, allocs;
  };
  // An arena whose positions after the first are still to be placed in time.
  struct Timeline {
    uint64_t layout = 0, addr = 0, schedule = 0;
    Event arena;  // its allocation (time, thread)
    Call call;
    uint8_t phase_before = 0, role_before = 0;
    uint64_t free_offset = 0;  // the block of the bytes no buffer holds
    uint64_t held = 0;         // bytes the buffers hold at the position last made
    std::vector<Step> steps;
  };

  // Updates the state; true when `e` is replaced. Outside a rewrite it only says so for an
  // allocation or free (rewrite() copies the run so far and asks again).
  bool interesting(const Event &e);
  void on_name(const Event &e);
  void on_annotation(const Event &e);
  void expand_alloc(const Event &e, const Call &call, const Layout &layout);
  void expand_free(const Event &e, const Arena &arena);
  Event made(const Event &like, format::EventType type) const;
  // The events of one slice's block made at `addr`, at `like`'s time and thread.
  void make_slice(const Event &like, const Call &call, uint64_t arena_addr, uint64_t layout_bytes,
                  const Slice &s, uint8_t phase_before, uint8_t role_before, bool first,
                  std::vector<Event> &to);
  // Places the timelines that `done` selects between their arena and `end`, among the events
  // held back; hands the held events on when no timeline is left.
  template <class Done>
  void end_timelines(Done done, uint64_t end);
  std::vector<Event> &sink() { return timelines_.empty() ? out_ : held_; }
  void keep(const Event &e);  // onto the sink, its payload copied when held

  enum KindSlot { kLayout, kSlice, kCall, kCallEnd, kKindCount };
  uint64_t kinds_[kKindCount] = {};  // the name ids of the protocol's kinds (0: not named yet)
  bool watching_ = false;            // one of them was named: look at every event
  std::unordered_map<uint64_t, Layout> layouts_;
  std::vector<Call> open_calls_;
  // By address. (No absl container in this header: its layout may differ between the
  // library's and a user's compile options.)
  std::unordered_map<uint64_t, Arena> arenas_;
  std::vector<uint8_t> thread_phase_;  // by thread, from phase events
  std::vector<uint8_t> thread_role_;   // by thread, from role events
  std::vector<Event> out_;
  std::deque<std::vector<uint64_t>> payloads_;        // payloads of the events in out_, per run
  std::vector<Timeline> timelines_;                   // calls whose arenas' times are still open
  std::vector<Event> held_;                           // events after their allocation, held back
  std::deque<std::vector<uint64_t>> held_payloads_;   // held events' payloads (copies)
  std::deque<std::vector<char>> held_texts_, texts_;  // ... and texts
  bool rewriting_ = false;
  bool positions_ = false;
  uint64_t arenas_found_ = 0, calls_announced_ = 0;
};

}  // namespace adprof
