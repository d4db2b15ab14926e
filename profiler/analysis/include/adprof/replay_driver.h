// The one reading loop over a trace (heaptrack's AccumulatedTraceData under heaptrack_print and
// heaptrack_gui is the model): reads the events in runs, prefetches the replay's index ahead,
// applies heap allocations and frees on the replay's fast path (Replay::apply_heap) and every
// other event through Replay::apply, and hands each event to an observer after the replay has
// applied it. The report, the timeline, the snapshot and the what-if's passes are observers.
//
// An observer is any object with
//   void on_heap(const Event &e, const Replay::HeapChange &c);  // a heap allocation or free
//   void on_event(const Event &e, bool changed);                // any other event
//   bool stop_before(const Event &e);  // true: stop here, `e` not applied (a time window's end)
// Dispatch is static (the driver is a template, observers are usually lambdas bundled by
// observe()): the heap fast path costs what a hand-written loop costs. Several observers
// ride on one pass with ObserverPair. Arenas an engine described are cut into their logical
// buffers on the way (arena_slicer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "adprof/arena_slicer.h"
#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace adprof {

struct DriveOptions {
  std::function<void(double)> progress;  // fraction read, every 2^20 events
};

// An observer made of two callables (and an optional stop test).
template <class OnHeap, class OnEvent, class Stop>
struct LambdaObserver {
  OnHeap heap;
  OnEvent event;
  Stop stop;
  __attribute__((always_inline)) void on_heap(const Event &e, const Replay::HeapChange &c) {
    heap(e, c);
  }
  __attribute__((always_inline)) void on_event(const Event &e, bool changed) { event(e, changed); }
  __attribute__((always_inline)) bool stop_before(const Event &e) { return stop(e); }
};
struct NeverStop {
  constexpr bool operator()(const Event &) const { return false; }
};
template <class OnHeap, class OnEvent, class Stop = NeverStop>
LambdaObserver<OnHeap, OnEvent, Stop> observe(OnHeap heap, OnEvent event, Stop stop = {}) {
  return {std::move(heap), std::move(event), std::move(stop)};
}

// Two observers on one pass; it stops when both would.
template <class A, class B>
struct ObserverPair {
  A &a;
  B &b;
  __attribute__((always_inline)) void on_heap(const Event &e, const Replay::HeapChange &c) {
    a.on_heap(e, c);
    b.on_heap(e, c);
  }
  __attribute__((always_inline)) void on_event(const Event &e, bool changed) {
    a.on_event(e, changed);
    b.on_event(e, changed);
  }
  __attribute__((always_inline)) bool stop_before(const Event &e) {
    return a.stop_before(e) && b.stop_before(e);
  }
};

class ReplayDriver {
 public:
  // arena_positions: arenas walk their schedule (a timeline's view, arena_slicer.h), instead
  // of being shown at their fullest point.
  ReplayDriver(TraceReader &reader, Replay &replay, bool arena_positions = false)
      : reader_(reader), replay_(replay) {
    slicer_.set_positions(arena_positions);
  }

  // Reads the trace from where the reader is to its end (or until the observer stops it).
  // Returns the number of events read.
  template <class Observer>
  uint64_t run(Observer &obs, const DriveOptions &options = {}) {
    // The replay prefetches the index entries of the events kAhead events ahead (a free's
    // block is anywhere among the live ones), and, with many live blocks (more than the caches
    // hold), the blocks themselves half-way; with fewer, looking the block up twice costs more
    // than it saves.
    constexpr size_t kAhead = 16;
    constexpr size_t kPrefetchBlocksAbove = size_t{1} << 16;  // live blocks
    for (bool more = true; more;) {
      // (The slicer may hold a run's events back, and hands them on at the end.)
      const std::span<const Event> raw = reader_.next_events();
      more = !raw.empty();
      const std::span<const Event> run = more ? slicer_.rewrite(raw) : slicer_.flush();
      const bool prefetch_blocks = replay_.live_blocks() > kPrefetchBlocksAbove;
      for (size_t i = 0; i < run.size(); ++i) {
        if (i + kAhead < run.size()) {
          replay_.prefetch(run[i + kAhead]);
          if (prefetch_blocks) replay_.prefetch_block(run[i + kAhead / 2]);
        }
        const Event &e = run[i];
        if (obs.stop_before(e)) return index_;
        ++index_;
        if ((index_ & 0xFFFFF) == 0 && options.progress) options.progress(reader_.progress());
        if (Replay::is_heap_event(e)) {  // the fast path, for most events
          obs.on_heap(e, replay_.apply_heap(e));
          continue;
        }
        obs.on_event(e, replay_.apply(e));
      }
    }
    return index_;
  }
  // Events read so far (the current event's number, from 1, inside a callback).
  uint64_t index() const { return index_; }

 private:
  TraceReader &reader_;
  Replay &replay_;
  ArenaSlicer slicer_;  // arenas shown as their logical buffers (ad_protocol.h, "Arenas")
  uint64_t index_ = 0;
};

}  // namespace adprof
