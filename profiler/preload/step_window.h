// A window of steps (`adprof run --steps A:B`, ADPROF_STEPS=A:B): full events for steps A to
// B-1, a summary per step outside it (trace_format.h, "Step windows"). The recording threads
// record as always (the allocation hooks know nothing of it); adprof_step() publishes each
// step's mark, and the writer thread, off the hot path, folds the buffers outside the window.
#pragma once

#include <atomic>
#include <cstdint>

namespace adprof::preload {

struct Buffer;
struct Compressor;

// ADPROF_STEPS was given (read once, before recording starts; never changed after).
extern bool g_step_window;

// Reads ADPROF_STEPS ("A:B", 0 <= A < B) and reserves the marks' ring. False: malformed (said
// on stderr; the recording goes on without a window).
bool configure_step_window();

// A fork child (fork_child.cpp): the parent writer's window state abandoned; the child's writer
// configures a window of its own over the child's own steps (start_writer).
void reset_step_window_in_fork_child();

// adprof_step(): the step `step` starts at `ticks` (any thread; a lock-free ring the writer
// reads). Not the allocation hook: a few atomic operations and stores. True when the mark is the
// process's first, or opens or closes the window: then every thread hands its buffer over at its
// next event (the flush epoch), so that the chunks written whole before the first mark end
// there, and the window's chunks begin at its edges.
// `thread`: the calling thread's index, UINT32_MAX when it has none yet.
bool publish_step_mark(uint64_t step, uint64_t ticks, uint32_t thread);

// The writer's side, on the writer thread (or the thread that ends the recording once the
// writer has stopped): writes `b` whole, or folded (above). Chunks of the summaries and of the
// live set go out through `k` too.
void write_windowed_buffer(Buffer *b, Compressor &k);
// Before the writer takes the queue: the time before which every thread's events are in it or
// read already (oldest_unread_ticks), up to which the steps' figures may be merged.
void note_unread_events();
// The steps over for long enough that no thread's events of theirs can still be on their way
// (every thread hands its buffer over at each flush tick) get their summaries written.
void write_settled_steps(Compressor &k);
// At the end of the recording: every step's summary written.
void write_remaining_steps(Compressor &k);

// One step mark: adprof_step(step) at `ticks` (`ns`: the monotonic clock then) on `thread` (its
// index; UINT32_MAX: it had none yet).
struct StepMark {
  uint64_t step, ticks, ns;
  uint32_t thread;
};

// The marks' ring: any thread publishes (adprof_step), the writer thread reads them all in
// order, before each buffer it handles and at least every ADPROF_SAMPLE_MS. A mark overwritten
// before it was read (the writer kCapacity marks behind) merges its step into the one before.
// Lock-free on both sides: no lock, no syscall, no allocation; a publisher waits neither for
// another (short of kCapacity of them all held up mid-mark at once) nor for the reader.
//
// Each entry's `seq` says which mark it holds (mark i: the i-th claimed, from 0):
//   0       never written
//   2i + 1  mark i being written, by the one publisher that claimed it
//   2i + 2  mark i published whole
// A publisher claims mark i (`next_`) in entry i % kCapacity by a CAS of its `seq` from an even
// value below 2i + 1 (a whole mark of an earlier lap, or none) to 2i + 1, so one publisher at a
// time writes an entry's fields, and an entry's seq only grows. One that finds the entry still
// being written by an earlier lap's publisher (held up, mid-mark, while kCapacity marks were
// claimed) leaves mark i unwritten (skipped) and claims i + 1: it never waits for a thread that
// may not run (unless all kCapacity entries are held so at once), and never writes beside it. The
// reader copies an entry's fields between two loads of its seq and keeps the copy only when both
// read 2i + 2 (a seqlock per entry: Boehm, "Can Seqlocks Get Along with Programming Language Memory
// Models?", MSPC 2012, its variant without fences: the fields stored with release after the claim
// and loaded with acquire before the re-check, so that a field read from a later publisher shows
// its claim in the re-check; plain moves on x86, and TSan follows them). `next_` moves past i only
// once entry i % kCapacity shows mark i or a later one, or mark i was skipped: a reader that finds
// an entry below mark i while next_ is past i knows i was skipped. A mark still being written when
// a lap more has been claimed is passed over, as overwritten.
template <uint64_t kCapacity>
class StepMarkRing {
 public:
  void publish(const StepMark &mark) {
    for (;;) {
      uint64_t i = next_.load(std::memory_order_acquire);
      Entry &e = entries_[i % kCapacity];
      uint64_t seq = e.seq.load(std::memory_order_acquire);
      if (seq >= 2 * i + 1 || seq % 2 == 1) {
        // Mark i is claimed already (next_ is on its way past it), or its entry is held by an
        // earlier lap's publisher (mark i skipped): next_ moved on, and a fresh look.
        next_.compare_exchange_strong(i, i + 1, std::memory_order_acq_rel,
                                      std::memory_order_relaxed);
        continue;
      }
      if (!e.seq.compare_exchange_strong(seq, 2 * i + 1, std::memory_order_acq_rel,
                                         std::memory_order_relaxed))
        continue;  // another publisher claimed it first
      // A copy for the CAS: a failed one writes next_'s value into it, and `i` names the mark.
      uint64_t expected = i;
      next_.compare_exchange_strong(expected, i + 1, std::memory_order_acq_rel,
                                    std::memory_order_relaxed);
      e.step.store(mark.step, std::memory_order_release);
      e.ticks.store(mark.ticks, std::memory_order_release);
      e.ns.store(mark.ns, std::memory_order_release);
      e.thread.store(mark.thread, std::memory_order_release);
      e.seq.store(2 * i + 2, std::memory_order_release);
      return;
    }
  }

  // One reader (the writer thread): take(mark) for each mark from `next` on that is readable
  // now, in order; `next` is left at the first one not published yet.
  template <class Take>
  void read(uint64_t &next, Take &&take) const {
    for (;;) {
      const Entry &e = entries_[next % kCapacity];
      const uint64_t seq = e.seq.load(std::memory_order_acquire);
      if (seq == 2 * next + 2) {
        const StepMark m{
            e.step.load(std::memory_order_acquire), e.ticks.load(std::memory_order_acquire),
            e.ns.load(std::memory_order_acquire), e.thread.load(std::memory_order_acquire)};
        if (e.seq.load(std::memory_order_relaxed) != seq) continue;  // rewritten meanwhile
        take(m);
        ++next;
      } else if (seq > 2 * next + 2) {
        next = (seq - 1) / 2;  // overwritten before it was read: on from the mark in its place
      } else if (seq == 2 * next + 1) {
        // Being written: looked at again next time, unless its publisher is held up a lap
        // behind (then it is as good as overwritten).
        if (next_.load(std::memory_order_acquire) <= next + kCapacity) return;
        ++next;
      } else if (next_.load(std::memory_order_acquire) > next &&
                 e.seq.load(std::memory_order_acquire) < 2 * next + 1) {
        ++next;  // skipped (its entry held by a publisher a lap behind)
      } else {
        return;  // not claimed yet (or claimed just now: looked at again next time)
      }
    }
  }

  // The next mark to be claimed: where a reader that starts now begins.
  uint64_t claimed() const { return next_.load(std::memory_order_acquire); }

  // A fork child: the ring as new (an entry a parent's thread was writing stays unwritten).
  void reset() {
    for (Entry &e : entries_) e.seq.store(0, std::memory_order_relaxed);
    next_.store(0, std::memory_order_relaxed);
  }

 private:
  struct Entry {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> step{0}, ticks{0}, ns{0};
    std::atomic<uint32_t> thread{0};
  };
  Entry entries_[kCapacity];
  std::atomic<uint64_t> next_{0};
};

}  // namespace adprof::preload
