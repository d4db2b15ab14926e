// The threads' streams merged by time (a k-way merge over a min-heap of the waiting threads),
// each thread's chunks loaded and decoded one at a time; a chunk that fails its checks, or its
// decoding, is counted as damaged and the merge goes on past it. Run by the read-ahead thread
// (read_ahead.cpp).
#include <algorithm>

#include "trace_reader_impl.h"

namespace adprof {

namespace fmt = format;

void TraceReader::Impl::reset() {
  waiting.clear();
  current = -1;
  chunks_consumed = 0;
  decoding.allocated_total = 0;
  for (uint32_t i = 0; i < threads.size(); ++i) {
    Thread &t = threads[i];
    t.next_chunk = 0;
    release(t);
    t.have_pending = false;
    if (!t.chunks.empty()) waiting.push_back({t.chunks.front().header.base_ts, i});
  }
  std::make_heap(waiting.begin(), waiting.end(), std::greater<>());
}

void TraceReader::Impl::replace_earliest(Entry e) {
  const size_t n = waiting.size();
  size_t i = 0;
  for (size_t child = 1; child < n; child = 2 * i + 1) {
    if (child + 1 < n && waiting[child + 1] < waiting[child]) ++child;
    if (!(waiting[child] < e)) break;
    waiting[i] = waiting[child];
    i = child;
  }
  waiting[i] = e;
}

bool TraceReader::Impl::load_chunk(Thread &t) {
  while (t.next_chunk < t.chunks.size()) {
    const ChunkRef &c = t.chunks[t.next_chunk++];
    ++chunks_consumed;
    uint8_t header[fmt::kChunkHeaderSize];
    stored_buf.resize(c.header.stored);
    if (!read_at(c.offset, header, sizeof header) ||
        !read_at(c.offset + sizeof header, stored_buf.data(), c.header.stored) ||
        !t.decoder.load(header, c.header, stored_buf.data(), inflater)) {
      ++live.corrupt_chunks;
      continue;
    }
    ++live.chunks;
    return true;
  }
  return false;
}

void TraceReader::Impl::skip_chunk_rest(Thread &t) {
  ++live.corrupt_chunks;
  t.decoder.skip_rest();
}

// Writes at most `max` events to `out`; 0 at the end. The thread served last goes on while its
// next event is not later than every other thread's (most traces are dominated by one thread
// at a time, and two threads running side by side still write runs of events between their
// switches): its events are decoded straight into `out`, and only the one that ends a run
// waits, copied, in its thread's `pending`.
//
// Events of two threads at the same time: a free waits for the other thread's events of that
// time. The clock cannot order a block handed to another thread and freed there within one
// tick, and a free before its allocation would leave the block live for good (an unmatched
// free and a false leak); the other way round, a block freed and allocated again by another
// thread within one tick, is rare (the allocator gives a freed block back to its own thread
// first), and the replay sees it as an allocation over a live block. A free by slot waits too:
// the thread's heap coder still holds a block of its own that another thread freed, and takes
// a block that thread allocated again at that address for it (a block sent back and forth).
//
// An event's text and values lie in its thread's buffers until the thread decodes again: a run
// ends after an event that has them, so that the caller copies them first.
size_t TraceReader::Impl::merge_run(Event *out, size_t max) {
  size_t n = 0;
  while (n < max) {
    if (current < 0) {
      if (waiting.empty()) break;
      std::pop_heap(waiting.begin(), waiting.end(), std::greater<>());
      current = static_cast<int64_t>(waiting.back().second);
      waiting.pop_back();
    }
    Thread &t = threads[static_cast<size_t>(current)];
    const uint64_t limit = waiting.empty() ? UINT64_MAX : waiting.front().first;
    if (t.have_pending) {
      if (t.pending.ticks <= limit) {
        out[n] = t.pending;
        t.have_pending = false;
        if (out[n++].has_payload()) break;
        continue;
      }
    } else if (!t.decoder.more()) {
      if (!load_chunk(t)) {  // exhausted
        release(t);
        current = -1;
      }
      continue;
    } else {
      if (t.decoder.tags_apart()) {  // version 2 on: compact heap events, decoded in runs
        size_t written;
        bool ok =
            t.decoder.decode_heap_run(out + n, max - n, limit, written, t.pending, t.have_pending);
        n += written;
        if (!ok) {
          skip_chunk_rest(t);
          continue;
        }
        if (written > 0 && !t.have_pending) continue;
      }
      if (!t.have_pending) {  // an event of another kind: one at a time
        if (!t.decoder.more()) continue;
        Event &e = out[n];
        if (!t.decoder.decode(e)) {
          skip_chunk_rest(t);
          continue;
        }
        if (e.ticks < limit || (e.ticks == limit && e.type != fmt::EventType::kFree)) {
          if (out[n++].has_payload()) break;
          continue;
        }
        t.pending = e;
        t.have_pending = true;
      }
    }
    // The thread's next event is later than another thread's: the earliest waiting thread is
    // served next, and this one takes its place in the heap, holding no more than it needs.
    if (!t.decoder.more()) park(t);
    const uint32_t next = waiting.front().second;
    replace_earliest({t.pending.ticks, static_cast<uint32_t>(current)});
    current = next;
  }
  live.events += n;
  return n;
}

}  // namespace adprof
