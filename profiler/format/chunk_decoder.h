// The reader's half of the trace format (trace_format.h, chunk_columns.h, heap_coder.h), beside
// the writer's: a chunk header read and checked, a chunk's payload checked (CRC-32) and inflated
// (zstd), its columns opened, and its events decoded, format versions 1 to 8. The one chunk
// decoder: the trace reader (analysis/read/thread_merge.cpp) merges the threads' decoders by time,
// the column bench (bench/profiler/trace_columns.cpp) reads the chunks' parts through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chunk_columns.h"
#include "chunk_header.h"
#include "heap_coder.h"
#include "trace_event.h"
#include "trace_format.h"

namespace adprof::format {

// The footer chunk's body (trace_format.h, "The footer chunk"). False: malformed (the fields
// before the damage are read, the rest 0).
struct Footer {
  uint64_t events = 0, chunks = 0, dropped = 0, reason = 0, signal = 0;
  bool has_untraced_fork_children = false;  // false in a footer written before the field
  uint64_t untraced_fork_children = 0;
};
bool read_footer(const uint8_t *body, size_t size, Footer &out);

// Inflates stored payloads with one zstd context for every chunk.
class PayloadInflater {
 public:
  PayloadInflater();
  ~PayloadInflater();
  PayloadInflater(const PayloadInflater &) = delete;
  PayloadInflater &operator=(const PayloadInflater &) = delete;
  // `raw` holds the chunk's c.raw bytes: the zstd frames inflated, or the stored bytes copied.
  // False: the frames are damaged or inflate to another size.
  bool inflate(const ChunkHeader &c, const uint8_t *stored, std::vector<uint8_t> &raw);

 private:
  void *dctx_;  // ZSTD_DCtx
};

// The parts of a raw chunk of version 2 on: its tags, then its bodies; in a columnar chunk the
// bodies are a directory of columns_in(version) lengths and the columns (chunk_columns.h).
// False: the parts do not add up to the chunk.
struct ChunkParts {
  Cursor tags{nullptr, nullptr};
  Cursor bodies{nullptr, nullptr};      // a plain chunk's; a columnar one's directory and columns
  Cursor columns[kColumnCount];         // a columnar chunk's (the others: empty)
  const uint8_t *columns_at = nullptr;  // a columnar chunk's first column, after the directory
};
bool split_chunk(const uint8_t *raw, size_t size, const ChunkHeader &c, uint32_t version,
                 ChunkParts &out);

// What the chunk decoders of one trace share: the format version and flags from its header,
// the bytes of every allocation decoded so far (kMaxTotalBytes bounds them, trace_event.h), and
// the heap coders of the threads that have no chunk open (memory follows the chunks open at
// the read position, not the threads of the trace).
struct TraceDecoding {
  uint32_t version = kVersion;
  bool stacks = false;  // allocations end with a stack id (kFileFlagStacks, version 4 on)
  uint64_t allocated_total = 0;
  std::vector<std::unique_ptr<HeapCoder>> spare_coders;       // version 3 on
  std::vector<std::unique_ptr<HeapCoderV2>> spare_coders_v2;  // versions 1 and 2
};

// One thread's chunk being decoded: its bytes, its cursors and the state the writer kept for
// the chunk (heap coder, addresses, version 6's live order, version 7's last stack ids).
// Events come out in the thread's order: compact heap events in runs (decode_heap_run), every
// other kind one at a time (decode).
class ChunkDecoder {
 public:
  explicit ChunkDecoder(TraceDecoding &trace, uint32_t thread = 0)
      : trace_(&trace), thread_(thread) {}
  // The thread number the events carry.
  uint32_t thread() const { return thread_; }
  void set_thread(uint32_t thread) { thread_ = thread; }

  // Checks and opens a chunk: `header` its 40 bytes (read as `c`), `stored` its payload as
  // the file holds it. False: it fails its checksum, does not inflate to its raw size, or its
  // parts do not add up (the chunk is damaged; the decoder holds no chunk).
  bool load(const uint8_t *header, const ChunkHeader &c, const uint8_t *stored,
            PayloadInflater &inflater);
  // Opens a raw chunk (tags, then bodies: c.raw bytes, not compressed, unchecked) as a
  // recording thread wrote it: the writer thread's step window (preload/step_window.cpp) reads
  // the buffers it folds through it. False: its parts do not add up.
  bool load_raw(const ChunkHeader &c, const uint8_t *raw);
  // Events are left in the open chunk.
  bool more() const { return tag_ ? tag_ < tag_end_ : cur_.p && !cur_.done(); }
  // The chunk's tags are apart from the bodies (version 2 on): its compact heap events are
  // decoded in runs (decode_heap_run) before each event of another kind (decode).
  bool tags_apart() const { return tag_ != nullptr; }
  // Decodes the next event, of a kind other than kHeap, into `e`. False on malformed bytes.
  bool decode(Event &e);
  // Compact heap events (trace_format.h, "Heap events"), yielded as kAlloc or kFree. Writes at
  // most `max` to `out` (`written`) and stops before any other kind of event, at the end of the
  // chunk's tags, or at an event later than `limit` (a free: at `limit`), which it writes to
  // `pending` and says so in `has_pending`. False on malformed bytes (the events before them are
  // written).
  bool decode_heap_run(Event *out, size_t max, uint64_t limit, size_t &written, Event &pending,
                       bool &has_pending);
  // Undecodable bytes (a writer bug: the checksum passed): the rest of the chunk is skipped.
  void skip_rest();
  // The chunk is decoded to its end: gives back what decoding needed (the chunk's bytes, the
  // heap coder to the trace's pool, version 6's live order). The last event's text or values
  // stay valid.
  void park();
  // No more chunks: park() and the text and values' buffers too.
  void release();

 private:
  template <class Coder>
  static std::unique_ptr<Coder> take_spare(std::vector<std::unique_ptr<Coder>> &spare);
  uint64_t addr(int column = kColOther);
  bool bad() const;
  bool open(const ChunkHeader &c);
  bool decode_stack_event(Cursor &c, Event &e);
  bool decode_step_summary(Cursor &c, Event &e);
  bool stack_id(uint64_t v, uint32_t &id);
  bool against_previous(uint32_t &last, uint64_t &v) const;
  bool on_heap_alloc(uint64_t addr, uint32_t cls);
  bool take_ordinal(uint32_t slot);
  uint32_t free_ordinal(uint32_t ordinal);
  template <bool kPlain, bool kV5, bool kV6, class Coder>
  bool decode_heap_run(Coder &coder, Event *out, size_t max, uint64_t limit, size_t &written,
                       Event &pending, bool &has_pending);

  static constexpr uint16_t kNoOrdinalSlot = 0xFFFF;

  TraceDecoding *trace_;
  uint32_t thread_;
  std::vector<uint8_t> data_;
  Cursor cur_{nullptr, nullptr};  // the bodies (version 1: the whole events)
  const uint8_t *tag_ = nullptr;  // version 2: the next tag; null: tags are inline
  const uint8_t *tag_end_ = nullptr;
  // Where each kind of field is read from: a column of a columnar chunk, else `cur_`.
  Cursor columns_[kColumnCount];
  Cursor *in_[kColumnCount] = {};
  bool columnar_ = false;
  // Version 5's columnar coding (chunk_columns.h): the kHeap delta fields in columns of their
  // own (the index of the next field in kColHeapDelta and kColAllocDelta), and the address of
  // each class's last kHeap free by address.
  bool columns_v5_ = false;
  uint32_t delta_fields_[2] = {};
  uint64_t class_last_free_[kAddressedFreeClasses] = {};
  // Version 6: a free by slot names the block by its age (plain) or recency rank (columnar):
  // the chunk's heap allocations in order, which are live, and the slot each took.
  bool ordinals_ = false;
  LiveOrder order_;
  std::vector<uint64_t> order_words_;
  std::vector<uint16_t> order_counts_;
  std::vector<uint16_t> slot_at_;  // by ordinal; kNoOrdinalSlot: none
  uint64_t ticks_ = 0;
  uint64_t last_addr_ = 0;
  // The heap coder of the trace's version (heap_coder.h): taken with the chunk.
  std::unique_ptr<HeapCoder> coder_;       // version 3 on
  std::unique_ptr<HeapCoderV2> coder_v2_;  // versions 1 and 2
  std::string text_;
  std::vector<uint64_t> values_;
  std::vector<uint64_t> last_stack_;  // the chunk's last stack definition (version 6)
  // Version 7: the ids the chunk's next allocation and next definition are written against.
  uint32_t last_alloc_stack_ = 0, last_defined_id_ = 0;
};

}  // namespace adprof::format
