#include "adprof/trace_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "adprof/torch_snapshot.h"
#include "chunk_decoder.h"

namespace adprof {

namespace fmt = format;

namespace {

struct ChunkRef {
  uint64_t offset;  // of the chunk header
  fmt::ChunkHeader header;
};

std::string signal_name(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

struct TraceReader::Impl {
  // A thread of the file: its chunks, in sequence order, the one being decoded, and its next
  // event while it waits in the merge.
  struct Thread {
    Thread(fmt::TraceDecoding &trace, uint32_t index) : index(index), decoder(trace) {}
    uint32_t index;  // in the file (the events carry the thread's rank among the indices)
    std::vector<ChunkRef> chunks;
    size_t next_chunk = 0;
    fmt::ChunkDecoder decoder;
    bool have_pending = false;
    Event pending;
  };

  int fd = -1;
  uint64_t file_size = 0;
  std::vector<Thread> threads;
  uint64_t chunks_total = 0;
  uint64_t chunks_consumed = 0;
  // The threads not being served: a min-heap (std::push_heap, std::greater) of (key ticks,
  // thread index). A thread not yet started is keyed by its next chunk's base timestamp, which
  // no event of that chunk precedes.
  using Entry = std::pair<uint64_t, uint32_t>;
  std::vector<Entry> waiting;
  int64_t current = -1;  // thread being served, outside the heap; -1: none
  std::vector<uint8_t> stored_buf;
  ReadStats live;     // what the merge has read so far (the producer's)
  ReadStats indexed;  // the figures known after indexing (file size, damage found)
  // The format version and flags, the bytes of every allocation yielded so far (see
  // kMaxTotalBytes) and the heap coders of threads that have no chunk loaded: the producer's.
  fmt::TraceDecoding decoding;
  // What the index found, for judge(): the footer's verdict before any damage, the chunks
  // and events in the file (every chunk but the footer's, snapshots included, as the writer
  // counts them), and the events of chunks replaced by a longer one (snapshots).
  std::string end_reason;
  uint64_t file_chunks = 0, file_events = 0, superseded_events = 0;
  std::string first_gap;  // where the first chunk is missing: "thread 0's chunk 0"
  bool judged_at_end = false;

  fmt::PayloadInflater inflater;  // one decompression context for every chunk

  // ---- read-ahead: a producer thread decompresses, decodes and merges the threads' streams
  // into batches of events while the caller consumes the previous batch, so that reading
  // overlaps with what the caller does with the events (replay, analysis). Batches cross
  // threads as plain values; at most kBatches exist, so memory stays bounded.
  static constexpr size_t kBatchEvents = 16384;
  static constexpr int kBatches = 3;
  struct Batch {
    std::vector<Event> events;  // kBatchEvents of them, made when the producer first starts
    size_t count = 0;
    bool end = false;  // the last batch
    std::string text;  // the events' texts and values, which their views point into
    std::vector<uint64_t> values;
    struct Ref {  // an event's text or values in the arenas
      uint32_t event;
      bool text;
      uint32_t at, size;
    };
    std::vector<Ref> refs;
    ReadStats stats;  // the reader's figures after this batch
    uint64_t chunks_consumed = 0;
  };
  Batch batches[kBatches];
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Batch *> full, spare;
  bool stop = false;
  std::thread producer;
  Batch *batch = nullptr;  // the batch the caller reads; null before the first
  size_t batch_pos = 0;

  ~Impl() {
    halt();
    if (fd >= 0) close(fd);
  }

  void produce() {
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

  // The caller's next batch; false when the last one has been read.
  bool next_batch(ReadStats &out_stats) {
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

  // Stops the producer and forgets every batch.
  void halt() {
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

  size_t merge_run(Event *out, size_t max);

  // Replaces the heap's top (the earliest waiting thread) by `e` and sifts it down: one pass
  // where a push and a pop would take two.
  void replace_earliest(Entry e) {
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

  bool read_at(uint64_t offset, void *dst, size_t n) const {
    auto *p = static_cast<uint8_t *>(dst);
    while (n > 0) {
      ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return true;
  }

  // A thread whose chunks are all read gives back its buffers and its heap coder.
  static void release(Thread &t) { t.decoder.release(); }

  // A thread whose chunk is decoded to its end (its last event may still wait, pending, with
  // its text or values) gives back what decoding needed (ChunkDecoder::park): so a thread
  // waiting in the merge holds its next event only.
  static void park(Thread &t) { t.decoder.park(); }

  void reset() {
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

  // Loads the thread's next chunk that passes its checks; false when none is left.
  bool load_chunk(Thread &t) {
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

  // A thread's undecodable bytes (its checksum passed: a writer bug): the rest of its chunk
  // is skipped.
  void skip_chunk_rest(Thread &t) {
    ++live.corrupt_chunks;
    t.decoder.skip_rest();
  }
};

TraceReader::TraceReader(const std::string &path) : impl_(std::make_unique<Impl>()) {
  Impl &m = *impl_;
  // O_NONBLOCK: a FIFO with no writer is refused below, not waited for (no effect on a file).
  m.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (m.fd < 0) throw TraceError("cannot open '" + path + "': " + strerror(errno));
  struct stat st;
  if (fstat(m.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw TraceError("'" + path + "' is not a regular file");
  m.file_size = static_cast<uint64_t>(st.st_size);
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
  uint8_t h[fmt::kFileHeaderSize];
  if (m.file_size < sizeof h || !m.read_at(0, h, sizeof h) ||
      memcmp(h, fmt::kFileMagic, sizeof fmt::kFileMagic) != 0)
    throw TraceError("'" + path + "' is not an adprof trace");
  header_.version = fmt::get_u32(h + 8);
  if (header_.version < fmt::kOldestVersion || header_.version > fmt::kVersion)
    throw TraceError("'" + path + "' is an adprof trace of version " +
                     std::to_string(header_.version) + "; this adprof reads versions " +
                     std::to_string(fmt::kOldestVersion) + " to " + std::to_string(fmt::kVersion));
  m.decoding.version = header_.version;
  if (fmt::get_u32(h + 60) != static_cast<uint32_t>(crc32(0L, h, 60)))
    throw TraceError("'" + path + "': the trace header is damaged (checksum mismatch)");
  header_.pid = fmt::get_u64(h + 16);
  header_.start_ticks = fmt::get_u64(h + 24);
  header_.start_wall_ns = fmt::get_u64(h + 32);
  header_.ticks_per_second = fmt::get_u64(h + 40);
  header_.page_size = fmt::get_u32(h + 48);
  header_.flags = fmt::get_u32(h + 52);
  header_.run_id = fmt::get_u32(h + 56);
  m.decoding.stacks = header_.stacks();
  if (header_.ticks_per_second == 0)
    throw TraceError("'" + path + "': the trace header has no clock rate");

  // Index the chunks (headers only). A header that fails its checks ends the readable part.
  std::unordered_map<uint32_t, uint32_t> thread_index;
  uint64_t offset = fmt::kFileHeaderSize;
  bool footer = false;
  std::string damage;
  while (offset < m.file_size) {
    uint8_t c[fmt::kChunkHeaderSize];
    if (m.file_size - offset < sizeof c || !m.read_at(offset, c, sizeof c)) {
      damage = "a partial chunk header";
      break;
    }
    const fmt::ChunkHeader ref = fmt::read_chunk_header(c);
    if (!fmt::chunk_header_valid(c)) {
      damage = "a damaged chunk header";
      break;
    }
    if (m.file_size - offset - sizeof c < ref.stored) {
      damage = "a partial chunk";
      break;
    }
    if (ref.thread == fmt::kFooterThread) {
      std::vector<uint8_t> body(ref.stored);
      fmt::Footer f;
      bool whole = false;
      if (m.read_at(offset + sizeof c, body.data(), body.size()) &&
          fmt::chunk_checksum_ok(c, body.data(), body.size())) {
        whole = fmt::read_footer(body.data(), body.size(), f);
        end_.footer_events = f.events;
        end_.footer_chunks = f.chunks;
        end_.footer_dropped = f.dropped;
        if (f.has_untraced_fork_children) end_.untraced_fork_children = f.untraced_fork_children;
      }
      if (whole) {
        footer = true;
        if (f.reason == static_cast<uint64_t>(fmt::EndReason::kExit)) {
          end_.complete = true;
          end_.cut = false;
          end_.reason = "complete";
        } else if (f.reason == static_cast<uint64_t>(fmt::EndReason::kSignal)) {
          end_.reason = "the program was ended by " + signal_name(static_cast<int>(f.signal)) +
                        "; events of other threads since their last chunk are missing";
        } else if (f.reason == static_cast<uint64_t>(fmt::EndReason::kExec)) {
          end_.complete = true;
          end_.cut = false;
          end_.exec = true;
          end_.reason = "the process replaced itself with exec; its new image has its own trace";
        } else {
          end_.reason = "recording stopped early (trace write error)";
        }
      }
    } else {
      auto [it, inserted] =
          thread_index.try_emplace(ref.thread, static_cast<uint32_t>(m.threads.size()));
      if (inserted) m.threads.emplace_back(m.decoding, ref.thread);
      m.threads[it->second].chunks.push_back({offset, ref});
      ++m.chunks_total;
      ++m.file_chunks;
      m.file_events += ref.events;
    }
    offset += sizeof c + ref.stored;
  }
  if (!damage.empty()) {
    end_.cut = true;
    end_.complete = false;
    end_.cut_at_offset = offset;
    end_.reason = "cut: " + damage + " at byte " + std::to_string(offset) +
                  "; read up to the last complete chunk";
  } else if (!footer) {
    end_.cut = true;
    end_.cut_at_offset = offset;
    end_.reason =
        "cut: the trace has no end record (the program was killed, or is still running); read "
        "up to the last complete chunk";
  }
  // A thread's chunks in sequence order. The writer may have written a snapshot of a buffer
  // (an idle thread's complete events) before the buffer itself: keep the longest per seq.
  const bool v1 = header_.version < 2;
  auto is_snapshot = [v1](const ChunkRef &c) {
    return v1 ? c.header.events == 0 : (c.header.flags & fmt::kChunkFlagSnapshot) != 0;
  };
  for (auto &t : m.threads) {
    std::stable_sort(t.chunks.begin(), t.chunks.end(), [&](const ChunkRef &a, const ChunkRef &b) {
      if (a.header.seq != b.header.seq) return a.header.seq < b.header.seq;
      if (a.header.raw != b.header.raw) return a.header.raw > b.header.raw;
      return !is_snapshot(a) && is_snapshot(b);  // the full chunk before a snapshot of its length
    });
    // Two full chunks with one seq mean damage.
    auto last = std::unique(t.chunks.begin(), t.chunks.end(),
                            [&](const ChunkRef &kept, const ChunkRef &dropped) {
                              if (kept.header.seq != dropped.header.seq) return false;
                              if (!is_snapshot(kept) && !is_snapshot(dropped))
                                ++stats_.corrupt_chunks;
                              m.superseded_events += dropped.header.events;
                              return true;
                            });
    m.chunks_total -= static_cast<uint64_t>(t.chunks.end() - last);
    t.chunks.erase(last, t.chunks.end());
    // Sequence numbers start at 0 and have no gaps: what is not there is missing.
    uint64_t expected = 0;
    for (const ChunkRef &c : t.chunks) {
      if (c.header.seq != expected && m.first_gap.empty())
        m.first_gap = "thread " + std::to_string(t.index) + "'s chunk " + std::to_string(expected);
      stats_.missing_chunks += c.header.seq - expected;
      expected = uint64_t{c.header.seq} + 1;
    }
  }
  // Whole chunks the footer counts that the file lacks (a thread's last ones leave no gap).
  if (end_.complete && end_.footer_chunks > m.file_chunks &&
      end_.footer_chunks - m.file_chunks > stats_.missing_chunks)
    stats_.missing_chunks = end_.footer_chunks - m.file_chunks;
  // Events carry a thread's rank among the thread indices in the file, not the index itself:
  // the same number in a whole trace (indices are handed out from 0), and never more than the
  // number of threads, whatever index a damaged or crafted chunk names, so that whoever keeps
  // something per thread (the replay, the timeline) can keep it in a vector.
  {
    std::vector<uint32_t> order;
    order.reserve(thread_index.size());
    for (const auto &entry : thread_index) order.push_back(entry.first);
    std::sort(order.begin(), order.end());
    for (uint32_t rank = 0; rank < order.size(); ++rank)
      m.threads[thread_index[order[rank]]].decoder.set_thread(rank);
  }
  m.indexed = stats_;
  m.live = stats_;
  m.end_reason = end_.reason;
  m.reset();
  judge(false);
}

void TraceReader::judge(bool at_end) {
  Impl &m = *impl_;
  if (at_end) m.judged_at_end = true;
  std::string damage;
  auto add = [&](const std::string &what) { damage += (damage.empty() ? "" : "; ") + what; };
  const ReadStats &s = stats_;
  if (s.missing_chunks)
    add(std::to_string(s.missing_chunks) + " chunk(s) missing" +
        (m.first_gap.empty() ? "" : " (the first: " + m.first_gap + ")"));
  if (s.corrupt_chunks)
    add(std::to_string(s.corrupt_chunks) +
        " chunk(s) damaged (failed their checksum or decoding; skipped from there)");
  const bool footer_ok = !end_.cut;  // a footer of a normal exit or an exec
  if (footer_ok && end_.footer_chunks < m.file_chunks)
    add("the file holds " + std::to_string(m.file_chunks) + " chunks, its end record counts " +
        std::to_string(end_.footer_chunks));
  if (footer_ok && m.judged_at_end && s.events + m.superseded_events != end_.footer_events)
    add("the end record counts " + std::to_string(end_.footer_events) + " events, " +
        std::to_string(s.events + m.superseded_events) + " were read");
  if (end_.footer_dropped)
    add("the recorder dropped " + std::to_string(end_.footer_dropped) + " events");
  end_.damaged = !damage.empty();
  if (!end_.damaged) {
    end_.reason = m.end_reason;
    return;
  }
  end_.complete = false;
  end_.reason = (end_.cut ? m.end_reason + "; also damaged: " : "damaged: ") + damage +
                "; read what was left";
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

// The merge of the threads' streams by time (run by the read-ahead thread): writes at most
// `max` events to `out`; 0 at the end. The thread served last goes on while its next event is
// not later than every other thread's (most traces are dominated by one thread at a time, and
// two threads running side by side still write runs of events between their switches): its
// events are decoded straight into `out`, and only the one that ends a run waits, copied, in
// its thread's `pending`.
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
