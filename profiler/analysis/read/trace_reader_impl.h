// TraceReader's own state (adprof/trace_reader.h), private to the reader's files:
//   trace_reader.cpp  the public calls, and the order in which a reader is made
//   file_header.cpp   the file opened, its header read and checked, bytes read at an offset
//   chunk_index.cpp   the chunk headers indexed, nothing decompressed: each thread's chunks in
//                     sequence order, snapshots replaced by longer chunks, gaps, the footer
//   trace_end.cpp     how the recording ended (TraceEnd): the footer's word, a file cut short,
//                     and the verdict on the damage found while reading (judge)
//   thread_merge.cpp  the threads' streams merged by time, chunk by chunk
//   read_ahead.cpp    the merge run on a producer thread, handed to the caller in batches
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "adprof/trace_reader.h"
#include "chunk_decoder.h"

namespace adprof {

struct TraceReader::Impl {
  struct ChunkRef {
    uint64_t offset;  // of the chunk header
    format::ChunkHeader header;
  };

  // A thread of the file: its chunks, in sequence order, the one being decoded, and its next
  // event while it waits in the merge.
  struct Thread {
    Thread(format::TraceDecoding &trace, uint32_t index) : index(index), decoder(trace) {}
    uint32_t index;  // in the file (the events carry the thread's rank among the indices)
    std::vector<ChunkRef> chunks;
    size_t next_chunk = 0;
    format::ChunkDecoder decoder;
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
  format::TraceDecoding decoding;
  // What the index found, for judge(): the footer's verdict before any damage, the chunks
  // and events in the file (every chunk but the footer's, snapshots included, as the writer
  // counts them), and the events of chunks replaced by a longer one (snapshots).
  std::string end_reason;
  uint64_t file_chunks = 0, file_events = 0, superseded_events = 0;
  std::string first_gap;  // where the first chunk is missing: "thread 0's chunk 0"
  bool judged_at_end = false;

  format::PayloadInflater inflater;  // one decompression context for every chunk

  // ---- read-ahead (read_ahead.cpp): a producer thread decompresses, decodes and merges the
  // threads' streams into batches of events while the caller consumes the previous batch, so
  // that reading overlaps with what the caller does with the events (replay, analysis).
  // Batches cross threads as plain values; at most kBatches exist, so memory stays bounded.
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

  ~Impl();

  // ---- file_header.cpp
  // Opens `path` (a regular file, not empty) into fd and file_size; throws TraceError.
  void open(const std::string &path);
  // The file header, checked (magic, version, checksum, clock rate); throws TraceError.
  TraceHeader read_header(const std::string &path);
  bool read_at(uint64_t offset, void *dst, size_t n) const;

  // ---- chunk_index.cpp
  // Indexes the chunk headers after the file header into `threads`; what it finds of the end
  // of the recording goes to `end` (trace_end.cpp), missing and duplicated chunks to `stats`.
  void index_chunks(uint32_t version, TraceEnd &end, ReadStats &stats);

  // ---- trace_end.cpp: what the file says of the recording's end, before any damage is judged
  // (TraceReader::judge).
  // The footer's end reason (exit, exec, a signal, a write error).
  static void end_from_footer(const format::Footer &footer, TraceEnd &end);
  // A file with no footer, or cut short at `offset` by `damage` (a partial or damaged chunk
  // header, a partial chunk; empty: none).
  static void end_from_file(bool footer, const std::string &damage, uint64_t offset, TraceEnd &end);

  // ---- read_ahead.cpp
  void produce();
  // The caller's next batch; false when the last one has been read.
  bool next_batch(ReadStats &out_stats);
  // Stops the producer and forgets every batch.
  void halt();

  // ---- thread_merge.cpp
  // Back to every thread's first chunk, the threads keyed by it.
  void reset();
  size_t merge_run(Event *out, size_t max);
  // Replaces the heap's top (the earliest waiting thread) by `e` and sifts it down: one pass
  // where a push and a pop would take two.
  void replace_earliest(Entry e);
  // Loads the thread's next chunk that passes its checks; false when none is left.
  bool load_chunk(Thread &t);
  // A thread's undecodable bytes (its checksum passed: a writer bug): the rest of its chunk
  // is skipped.
  void skip_chunk_rest(Thread &t);
  // A thread whose chunks are all read gives back its buffers and its heap coder.
  static void release(Thread &t) { t.decoder.release(); }
  // A thread whose chunk is decoded to its end (its last event may still wait, pending, with
  // its text or values) gives back what decoding needed (ChunkDecoder::park): so a thread
  // waiting in the merge holds its next event only.
  static void park(Thread &t) { t.decoder.park(); }
};

}  // namespace adprof
