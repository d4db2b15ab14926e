// TraceReader's public calls (adprof/trace_reader.h), and the order in which a reader is
// made: the file opened and its header checked (file_header.cpp), the chunks indexed
// (chunk_index.cpp), the verdict so far (trace_end.cpp); reading then merges the threads'
// streams (thread_merge.cpp) on a read-ahead thread (read_ahead.cpp). A memory snapshot is
// read whole, as the events it makes (torch_snapshot.h).
#include "adprof/trace_reader.h"

#include <unistd.h>

#include <algorithm>

#include "adprof/torch_snapshot.h"
#include "trace_reader_impl.h"

namespace adprof {

TraceReader::TraceReader(const std::string &path) : impl_(std::make_unique<Impl>()) {
  Impl &m = *impl_;
  m.open(path);
  stats_.bytes = m.file_size;
  if (m.file_size == 0) throw TraceError("'" + path + "' is empty: not an adprof trace");
  if (is_pickle_file(path)) {  // a memory snapshot (torch_snapshot.h): read whole, as events
    snapshot_ = std::make_unique<SnapshotEvents>(read_torch_snapshot(path));
    header_ = snapshot_->header;
    end_.complete = true;
    end_.cut = false;
    end_.reason = "complete";
    stats_.events = 0;
    return;
  }
  header_ = m.read_header(path);
  m.index_chunks(header_.version, end_, stats_);
  m.indexed = stats_;
  m.live = stats_;
  m.end_reason = end_.reason;
  m.reset();
  judge(false);
}

TraceReader::Impl::~Impl() {
  halt();
  if (fd >= 0) close(fd);
}

TraceReader::~TraceReader() = default;

uint32_t TraceReader::thread_count() const {
  if (snapshot_) return snapshot_->threads;
  return static_cast<uint32_t>(impl_->threads.size());
}

void TraceReader::rewind() {
  if (snapshot_) {
    snapshot_pos_ = 0;
    stats_.events = 0;
    return;
  }
  Impl &m = *impl_;
  m.halt();
  m.reset();
  m.live = m.indexed;
  stats_ = m.indexed;  // end_ keeps the verdict of a whole read, if there was one
}

bool TraceReader::next(Event &event) {
  if (snapshot_) {
    if (snapshot_pos_ == snapshot_->events.size()) return false;
    event = snapshot_->events[snapshot_pos_++];
    ++stats_.events;
    return true;
  }
  Impl &m = *impl_;
  while (!m.batch || m.batch_pos == m.batch->count) {
    if (!m.next_batch(stats_)) return false;
    if (m.batch->end) judge(true);
  }
  event = m.batch->events[m.batch_pos++];
  return true;
}

std::span<const Event> TraceReader::next_events() {
  if (snapshot_) {  // runs of at most a batch, as from a trace
    const size_t n = std::min<size_t>(snapshot_->events.size() - snapshot_pos_, size_t{1} << 14);
    std::span<const Event> run(snapshot_->events.data() + snapshot_pos_, n);
    snapshot_pos_ += n;
    stats_.events += n;
    return run;
  }
  Impl &m = *impl_;
  while (!m.batch || m.batch_pos == m.batch->count) {
    if (!m.next_batch(stats_)) return {};
    if (m.batch->end) judge(true);
  }
  std::span<const Event> run(m.batch->events.data() + m.batch_pos, m.batch->count - m.batch_pos);
  m.batch_pos = m.batch->count;
  return run;
}

double TraceReader::seconds(uint64_t ticks) const {
  if (ticks < header_.start_ticks) return 0.0;
  return static_cast<double>(ticks - header_.start_ticks) /
         static_cast<double>(header_.ticks_per_second);
}

double TraceReader::duration_hint() const {
  if (snapshot_) return snapshot_->events.empty() ? 0.0 : seconds(snapshot_->events.back().ticks);
  uint64_t last = header_.start_ticks;
  for (const auto &t : impl_->threads)
    if (!t.chunks.empty()) last = std::max(last, t.chunks.back().header.base_ts);
  return seconds(last);
}

double TraceReader::progress() const {
  if (snapshot_)
    return snapshot_->events.empty()
               ? 1.0
               : static_cast<double>(snapshot_pos_) / static_cast<double>(snapshot_->events.size());
  const Impl &m = *impl_;
  uint64_t consumed = m.batch ? m.batch->chunks_consumed : 0;
  return m.chunks_total ? static_cast<double>(consumed) / static_cast<double>(m.chunks_total) : 1.0;
}

}  // namespace adprof
