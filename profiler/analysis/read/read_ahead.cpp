// The read-ahead: a producer thread runs the merge (thread_merge.cpp) into batches of events
// while the caller consumes the previous batch (TraceReader::next, next_events), so that
// reading overlaps with what the caller does with the events. A batch holds its events' texts
// and values in arenas of its own, so that it crosses threads as a plain value.
#include "trace_reader_impl.h"

namespace adprof {

void TraceReader::Impl::produce() {
  for (;;) {
    Batch *b;
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return stop || !spare.empty(); });
      if (stop) return;
      b = spare.front();
      spare.pop_front();
    }
    b->count = 0;
    b->end = false;
    b->text.clear();
    b->values.clear();
    b->refs.clear();
    while (b->count < kBatchEvents) {
      size_t got = merge_run(b->events.data() + b->count, kBatchEvents - b->count);
      if (got == 0) {
        b->end = true;
        break;
      }
      // Only a run's last event can have a text or values (see merge_run).
      const size_t last = b->count + got - 1;
      const Event &e = b->events[last];
      if (e.has_payload()) {
        const bool text = !e.text().empty();
        b->refs.push_back({static_cast<uint32_t>(last), text,
                           static_cast<uint32_t>(text ? b->text.size() : b->values.size()),
                           static_cast<uint32_t>(text ? e.text().size() : e.values().size())});
        if (text)
          b->text.append(e.text());
        else
          b->values.insert(b->values.end(), e.values().begin(), e.values().end());
      }
      b->count += got;
    }
    for (const Batch::Ref &r : b->refs) {  // the arenas no longer move
      Event &e = b->events[r.event];
      if (r.text)
        e.set_text(std::string_view(b->text).substr(r.at, r.size));
      else
        e.set_values(std::span<const uint64_t>(b->values).subspan(r.at, r.size));
    }
    b->stats = live;
    b->chunks_consumed = chunks_consumed;
    {
      std::lock_guard lock(mutex);
      full.push_back(b);
    }
    changed.notify_all();
    if (b->end) return;
  }
}

bool TraceReader::Impl::next_batch(ReadStats &out_stats) {
  if (batch && batch->end) return false;
  if (!producer.joinable()) {
    stop = false;
    // Made here, not with the reader: a snapshot, or a file refused at open, never needs
    // them (3 x 16384 events made at each open took most of a sanitizer build's time
    // on the byte-flip tests, which open thousands of small files).
    for (Batch &b : batches) b.events.resize(kBatchEvents);
    for (Batch &b : batches) spare.push_back(&b);
    producer = std::thread([this] { produce(); });
  }
  std::unique_lock lock(mutex);
  if (batch) {
    spare.push_back(batch);
    changed.notify_all();
  }
  changed.wait(lock, [&] { return !full.empty(); });
  batch = full.front();
  full.pop_front();
  batch_pos = 0;
  out_stats = batch->stats;
  return true;
}

void TraceReader::Impl::halt() {
  if (producer.joinable()) {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    producer.join();
  }
  full.clear();
  spare.clear();
  batch = nullptr;
  batch_pos = 0;
}

}  // namespace adprof
