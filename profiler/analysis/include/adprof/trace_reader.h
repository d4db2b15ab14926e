// Reads an adprof trace (format: profiler/format/trace_format.h) as one stream of events
// merged across threads by time.
//
// Memory is bounded by the chunks of the threads active at the read position, never by the
// file's size; every length and count read from the file is checked before it is used.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "adprof/context.h"
#include "trace_event.h"
#include "trace_format.h"

namespace adprof {

// A file that is not a trace, or whose header is damaged: the caller prints what() and exits 2.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SnapshotEvents;

struct TraceHeader {
  uint32_t version = 0;
  uint64_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t start_wall_ns = 0;
  uint64_t ticks_per_second = 0;
  uint32_t page_size = 0;
  uint32_t flags = 0;
  uint32_t run_id = 0;  // the `adprof run` that wrote it (0: none), trace_format.h
  // What the heap events are, in the report's words: the program's host memory, or, for a
  // memory snapshot read as a trace (torch_snapshot.h), its allocated device memory.
  std::string memory = "host memory";
  // The heap events are a device's memory (each event's `device` says which): a
  // snapshot read as a trace.
  bool heap_is_device = false;
  // Call stacks were recorded (version 4 on, kFileFlagStacks): allocations carry stack ids,
  // and the trace has kStack and kMapping events.
  bool stacks() const { return version >= 4 && (flags & format::kFileFlagStacks); }
};

// How the recording ended, from the footer (or its absence), and whether what was read is
// all of it. Known from the chunk index when the reader is made (a missing footer, a cut or
// damaged chunk header, gaps in a thread's chunk sequence, chunks the footer counts but the
// file lacks) and final once the last event was read (chunks that fail their checksum or
// decoding, an event count that differs from the footer's).
struct TraceEnd {
  bool complete = false;  // footer present, normal exit (or exec), and nothing found missing
  bool cut = true;        // no footer, or footer says signal / write error
  bool damaged = false;   // chunks or events missing or undecodable (the trace may not be cut)
  bool exec = false;      // the process exec'd: TRACE.1 (or .N+1) holds the new image
  // One line in plain words: "complete", or what is missing and where reading stopped: "cut:
  // the trace has no end record ...", "damaged: 2 chunk(s) missing (the first: thread 0's
  // chunk 0), ...".
  std::string reason;
  uint64_t footer_events = 0;
  uint64_t footer_chunks = 0;
  uint64_t footer_dropped = 0;
  // Children the process forked that had no trace of their own when it ended (a fork child is
  // traced only once it execs); 0 also in a footer that does not count them (written before).
  uint64_t untraced_fork_children = 0;
  uint64_t cut_at_offset = 0;  // where reading stopped, for a cut or damaged file
};

struct ReadStats {
  uint64_t chunks = 0;
  uint64_t events = 0;
  uint64_t corrupt_chunks = 0;  // failed checksum/decompression/decoding: skipped
  uint64_t missing_chunks = 0;  // gaps in a thread's chunk sequence (from 0), or fewer chunks
                                // than the footer counts
  uint64_t bytes = 0;           // file size
};

class TraceReader {
 public:
  // Throws TraceError for a missing, empty, foreign or damaged-header file. A memory
  // snapshot (a pickle: its first byte is 0x80) is read as the events it makes
  // (torch_snapshot.h).
  explicit TraceReader(const std::string &path);
  ~TraceReader();
  TraceReader(const TraceReader &) = delete;
  TraceReader &operator=(const TraceReader &) = delete;

  const TraceHeader &header() const { return header_; }
  // Final once next() returned false or next_events() an empty run.
  const TraceEnd &end() const { return end_; }
  const ReadStats &stats() const { return stats_; }
  uint32_t thread_count() const;

  // Next event in time order; false at the end.
  bool next(Event &event);
  // The next events in time order, as many as are decoded already (a run of at most a batch,
  // 16 Ki events); empty at the end. Valid, texts and values included, until the next call of
  // next() or next_events(). The way to read a whole trace without copying every event.
  std::span<const Event> next_events();
  // Back to the first event (for a second pass).
  void rewind();

  double seconds(uint64_t ticks) const;  // since the start of the recording
  // A lower bound of the recording's length, from the chunk index (the last chunk's start),
  // known before any event is read.
  double duration_hint() const;
  // Fraction of the file's chunks consumed so far (progress display).
  double progress() const;

 private:
  struct Impl;
  // Sets end_ from the footer and the damage found so far; `at_end`: every event was read.
  void judge(bool at_end);

  std::unique_ptr<Impl> impl_;
  std::unique_ptr<SnapshotEvents> snapshot_;  // a memory snapshot's events, when it is one
  size_t snapshot_pos_ = 0;
  TraceHeader header_;
  TraceEnd end_;
  ReadStats stats_;
};

}  // namespace adprof
