#include "adprof/trace_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "adprof/torch_snapshot.h"
#include "chunk_columns.h"
#include "heap_coder.h"

namespace adprof {

namespace fmt = format;

namespace {

struct ChunkRef {
  uint64_t offset;  // of the chunk header
  uint64_t base_ts;
  uint32_t flags;
  uint32_t stored;
  uint32_t raw;
  uint32_t events;
  uint32_t seq;
};

std::string signal_name(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

static_assert(fmt::kAddressedFreeClasses == fmt::HeapCoder::kLargeClass + 1);

struct TraceReader::Impl {
  struct Thread {
    uint32_t tid = 0;
    std::vector<ChunkRef> chunks;
    size_t next_chunk = 0;
    std::vector<uint8_t> data;
    fmt::Cursor cur{nullptr, nullptr};  // the bodies (version 1: the whole events)
    const uint8_t *tag = nullptr;       // version 2: the next tag; null: tags are inline
    const uint8_t *tag_end = nullptr;
    // Where each kind of field is read from: a column of a columnar chunk, else `cur`.
    fmt::Cursor columns[fmt::kColumnCount];
    fmt::Cursor *in[fmt::kColumnCount] = {};
    bool columnar = false;
    // Version 5's columnar coding (chunk_columns.h): the kHeap delta fields in columns of
    // their own (the index of the next field in kColHeapDelta and kColAllocDelta), and the
    // address of each class's last kHeap free by address.
    bool columns_v5 = false;
    uint32_t delta_fields[2] = {};
    uint64_t class_last_free[fmt::kAddressedFreeClasses] = {};
    // Version 6: a free by slot names the block by its age (plain) or recency rank (columnar):
    // the chunk's heap allocations in order, which are live, and the slot each took.
    bool ordinals = false;
    fmt::LiveOrder order;
    std::vector<uint64_t> order_words;
    std::vector<uint16_t> order_counts;
    std::vector<uint16_t> slot_at;  // by ordinal; kNoOrdinalSlot: none

    bool more() const { return tag ? tag < tag_end : cur.p && !cur.done(); }
    bool bad() const {
      bool b = false;
      for (const fmt::Cursor *c : in) b |= c->bad;
      return b;
    }
    uint64_t ticks = 0;
    uint64_t last_addr = 0;
    // The heap coder of the trace's version (heap_coder.h): made with the first chunk.
    std::unique_ptr<fmt::HeapCoder> coder;       // version 3
    std::unique_ptr<fmt::HeapCoderV2> coder_v2;  // versions 1 and 2
    bool have_pending = false;
    Event pending;
    std::string text;
    std::vector<uint64_t> values;
    std::vector<uint64_t> last_stack;  // the chunk's last stack definition (version 6)
    // Version 7: the ids the chunk's next allocation and next definition are written against.
    uint32_t last_alloc_stack = 0, last_defined_id = 0;
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
  uint32_t version = fmt::kVersion;
  bool stacks = false;  // allocations end with a stack id (TraceHeader::stacks)
  // The bytes of every allocation yielded so far (see kMaxTotalBytes): the producer's.
  uint64_t allocated_total = 0;
  // Heap coders (about 150 KB each) of threads that have no chunk loaded, for the next thread
  // that loads one: memory follows the threads active at the read position, not the trace's
  // thread count.
  std::vector<std::unique_ptr<fmt::HeapCoder>> spare_coders;
  std::vector<std::unique_ptr<fmt::HeapCoderV2>> spare_coders_v2;
  // What the index found, for judge(): the footer's verdict before any damage, the chunks
  // and events in the file (every chunk but the footer's, snapshots included, as the writer
  // counts them), and the events of chunks replaced by a longer one (snapshots).
  std::string end_reason;
  uint64_t file_chunks = 0, file_events = 0, superseded_events = 0;
  std::string first_gap;  // where the first chunk is missing: "thread 0's chunk 0"
  bool judged_at_end = false;

  ZSTD_DCtx *dctx = ZSTD_createDCtx();  // one decompression context for every chunk

  // ---- read-ahead: a producer thread decompresses, decodes and merges the threads' streams
  // into batches of events while the caller consumes the previous batch, so that reading
  // overlaps with what the caller does with the events (replay, analysis). Batches cross
  // threads as plain values; at most kBatches exist, so memory stays bounded.
  static constexpr size_t kBatchEvents = 16384;
  static constexpr int kBatches = 3;
  struct Batch {
    std::vector<Event> events = std::vector<Event>(kBatchEvents);
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
    ZSTD_freeDCtx(dctx);
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
  void release(Thread &t) {
    park(t);
    std::string().swap(t.text);
    std::vector<uint64_t>().swap(t.values);
  }

  // A thread whose chunk is decoded to its end (its last event may still wait, pending, with
  // its text or values) gives back what decoding needed: the chunk's bytes, the heap coder
  // (to the pool), version 6's live order. So a thread waiting in the merge holds its next
  // event only: 20,000 threads whose one chunk each overlapped in time took 3.5 GB (a heap
  // coder, 175 KB zeroed, each), and memory follows the chunks being decoded.
  void park(Thread &t) {
    std::vector<uint8_t>().swap(t.data);
    t.cur = {nullptr, nullptr};
    t.tag = t.tag_end = nullptr;
    for (auto &c : t.in) c = &t.cur;
    for (auto &c : t.columns) c = {nullptr, nullptr};
    if (t.coder) spare_coders.push_back(std::move(t.coder));
    if (t.coder_v2) spare_coders_v2.push_back(std::move(t.coder_v2));
    t.order.attach(nullptr, nullptr, 0);
    std::vector<uint64_t>().swap(t.order_words);
    std::vector<uint16_t>().swap(t.order_counts);
    std::vector<uint16_t>().swap(t.slot_at);
  }

  void reset() {
    waiting.clear();
    current = -1;
    chunks_consumed = 0;
    allocated_total = 0;
    for (uint32_t i = 0; i < threads.size(); ++i) {
      Thread &t = threads[i];
      t.next_chunk = 0;
      release(t);
      t.have_pending = false;
      if (!t.chunks.empty()) waiting.push_back({t.chunks.front().base_ts, i});
    }
    std::make_heap(waiting.begin(), waiting.end(), std::greater<>());
  }

  // Loads the thread's next chunk that passes its checks; false when none is left.
  bool load_chunk(Thread &t) {
    while (t.next_chunk < t.chunks.size()) {
      const ChunkRef &c = t.chunks[t.next_chunk++];
      ++chunks_consumed;
      uint8_t header[fmt::kChunkHeaderSize];
      stored_buf.resize(c.stored);
      if (!read_at(c.offset, header, sizeof header) ||
          !read_at(c.offset + sizeof header, stored_buf.data(), c.stored)) {
        ++live.corrupt_chunks;
        continue;
      }
      uLong crc = crc32(0L, header + 8, fmt::kChunkHeaderSize - 8);
      crc = crc32(crc, stored_buf.data(), c.stored);
      if (static_cast<uint32_t>(crc) != fmt::get_u32(header + 4)) {
        ++live.corrupt_chunks;
        continue;
      }
      if (c.flags & fmt::kChunkFlagZstd) {
        t.data.resize(c.raw);
        size_t n =
            dctx ? ZSTD_decompressDCtx(dctx, t.data.data(), c.raw, stored_buf.data(), c.stored)
                 : ZSTD_decompress(t.data.data(), c.raw, stored_buf.data(), c.stored);
        if (ZSTD_isError(n) || n != c.raw) {
          ++live.corrupt_chunks;
          continue;
        }
      } else {
        t.data.assign(stored_buf.begin(), stored_buf.end());
      }
      t.cur = {t.data.data(), t.data.data() + t.data.size()};
      if (version >= 2) {
        if (c.events > t.data.size()) {
          ++live.corrupt_chunks;
          continue;
        }
        t.tag = t.data.data();
        t.tag_end = t.tag + c.events;
        t.cur.p = t.tag_end;
      }
      t.columnar = version >= 2 && (c.flags & fmt::kChunkFlagColumns);
      for (auto &in : t.in) in = &t.cur;
      if (t.columnar && !open_columns(t, fmt::columns_in(version))) {
        ++live.corrupt_chunks;
        continue;
      }
      t.ticks = c.base_ts;
      t.last_addr = 0;
      t.last_stack.clear();
      t.last_alloc_stack = t.last_defined_id = 0;
      t.columns_v5 = t.columnar && version >= 5;
      t.delta_fields[0] = t.delta_fields[1] = 0;
      std::fill(std::begin(t.class_last_free), std::end(t.class_last_free), 0);
      t.ordinals = version >= 6;
      if (t.ordinals) {
        // At most one allocation per event. The storage grows with the largest chunk so far.
        if (t.order_words.empty() || !t.order.restart(c.events)) {  // none yet, or parked
          t.order_words.resize(fmt::LiveOrder::words_for(c.events));
          t.order_counts.resize(fmt::LiveOrder::counts_for(c.events));
          t.order.attach(t.order_words.data(), t.order_counts.data(), c.events);
          t.order.restart(c.events);
        }
        if (t.slot_at.size() < c.events) t.slot_at.resize(c.events);
      }
      if (version >= 3) {
        if (!t.coder) t.coder = take_spare(spare_coders);
        t.coder->reset();
      } else {
        if (!t.coder_v2) t.coder_v2 = take_spare(spare_coders_v2);
        t.coder_v2->reset();
      }
      ++live.chunks;
      return true;
    }
    return false;
  }

  // A coder from the pool, else a new one left uninitialised (reset() sets what decoding reads):
  // its arrays are touched only as far as a chunk uses them, where make_unique zeroed 175 KB.
  template <class Coder>
  static std::unique_ptr<Coder> take_spare(std::vector<std::unique_ptr<Coder>> &spare) {
    if (spare.empty()) return std::unique_ptr<Coder>(new Coder);
    std::unique_ptr<Coder> c = std::move(spare.back());
    spare.pop_back();
    return c;
  }

  // Splits a columnar chunk's bodies (after its tags) into its columns.
  static bool open_columns(Thread &t, int count) {
    fmt::Cursor &dir = t.cur;
    uint64_t length[fmt::kColumnCount] = {};
    for (int k = 0; k < count; ++k) length[k] = dir.varint();
    if (dir.bad) return false;
    const uint8_t *p = dir.p;
    for (int k = 0; k < count; ++k) {
      if (length[k] > static_cast<uint64_t>(dir.end - p)) return false;
      t.columns[k] = {p, p + length[k]};
      t.in[k] = &t.columns[k];
      p += length[k];
    }
    for (int k = count; k < fmt::kColumnCount; ++k) t.columns[k] = {nullptr, nullptr};
    return p == dir.end;
  }

  uint64_t addr(Thread &t, int column = fmt::kColOther) {
    t.last_addr += static_cast<uint64_t>(fmt::unzigzag(t.in[column]->varint()));
    return t.last_addr;
  }

  // Decodes one event at the thread's cursor into e. False on malformed bytes.
  bool decode(Thread &t, Event &e) {
    fmt::Cursor &c = *t.in[fmt::kColOther];
    uint8_t tag;
    if (t.tag) {
      if (t.tag == t.tag_end) return false;  // more body bytes than the tags account for
      tag = *t.tag++;
    } else {
      tag = c.byte();
    }
    uint8_t type = tag & 0x0F;
    e = Event{};
    e.operand = tag >> 4;
    e.thread = t.tid;
    t.ticks += t.in[fmt::kColDelta]->varint();
    e.ticks = t.ticks;
    if (type >= fmt::kEventTypeCount - (version >= 2 ? 0 : 1)) return false;
    e.type = static_cast<fmt::EventType>(type);
    switch (e.type) {
      case fmt::EventType::kHeap:
      case fmt::EventType::kStack:  // on disk: kThreadName's operands
      case fmt::EventType::kMapping:
      case fmt::EventType::kUnmapping:
        return false;  // kHeap: decoded in runs (decode_heap_run), never one at a time
      case fmt::EventType::kAlloc:
        if (e.operand >= ADPROF_SPACE_COUNT) return false;
        e.addr = addr(t);
        e.a = c.varint();
        e.b = c.varint();
        if (e.a > kMaxEventBytes || e.b > kMaxEventBytes ||
            (allocated_total += e.a + e.b) > kMaxTotalBytes)
          return false;
        if (e.operand >= ADPROF_SPACE_DEVICE_BLOCK) e.device = static_cast<uint32_t>(c.varint());
        if (stacks && !stack_id(t, c.varint(), e.stack)) return false;
        if (e.operand == ADPROF_SPACE_HEAP &&
            !on_heap_alloc(t, e.addr, fmt::HeapCoder::class_of(e.a + e.b)))
          return false;
        break;
      case fmt::EventType::kFree:
        if (e.operand >= ADPROF_SPACE_COUNT) return false;
        e.addr = addr(t);
        if (e.operand == ADPROF_SPACE_MMAP && (e.a = c.varint()) > kMaxEventBytes) return false;
        if (e.operand >= ADPROF_SPACE_DEVICE_BLOCK) e.device = static_cast<uint32_t>(c.varint());
        break;
      case fmt::EventType::kOpBegin:
        e.a = c.varint();
        e.b = c.varint();
        break;
      case fmt::EventType::kOpEnd:
        break;
      case fmt::EventType::kPhase:
        if (e.operand >= ADPROF_PHASE_COUNT) return false;
        break;
      case fmt::EventType::kRole:
      case fmt::EventType::kRetag:
        if (e.operand >= ADPROF_ROLE_COUNT) return false;
        if (e.type == fmt::EventType::kRetag) {
          e.addr = addr(t);
          e.b = c.varint();
        }
        break;
      case fmt::EventType::kStep:
        e.a = c.varint();
        break;
      case fmt::EventType::kCounter:
        if (e.operand >= fmt::kCounterKindCount) return false;
        e.a = c.varint();
        break;
      case fmt::EventType::kThreadName:
        if (version >= 4 && e.operand != 0) return decode_stack_event(t, c, e);
        [[fallthrough]];
      case fmt::EventType::kName: {
        if (e.type == fmt::EventType::kName) e.a = c.varint();
        uint64_t n = c.varint();
        if (n > fmt::kMaxNameBytes) return false;
        const uint8_t *s = c.bytes(n);
        if (!s) return false;
        t.text.assign(reinterpret_cast<const char *>(s), n);
        e.set_text(t.text);
        break;
      }
      case fmt::EventType::kAnnotate:
      case fmt::EventType::kDescribe: {
        uint64_t limit = fmt::kMaxAnnotateValues;
        if (e.type == fmt::EventType::kDescribe) {
          e.addr = addr(t);
          limit = fmt::kMaxRank;
        }
        e.a = c.varint();
        uint64_t n = c.varint();
        if (n > limit) return false;
        t.values.resize(n);
        for (uint64_t i = 0; i < n; ++i) t.values[i] = c.varint();
        e.set_values(t.values);
        break;
      }
      case fmt::EventType::kLabel:
      case fmt::EventType::kContentHash:
        e.addr = addr(t);
        e.a = c.varint();
        break;
    }
    return !t.bad();
  }

  // An allocation's stack id from its field `v` (trace_format.h, "Call stacks").
  bool stack_id(Thread &t, uint64_t v, uint32_t &id) const {
    if (!against_previous(t.last_alloc_stack, v)) return false;
    id = static_cast<uint32_t>(v);
    return true;
  }
  // Version 7 writes an id against the previous one of its kind in the chunk (`last`, updated);
  // before, the id itself. False: out of range.
  bool against_previous(uint32_t &last, uint64_t &v) const {
    if (version >= 7) v = last + static_cast<uint64_t>(fmt::unzigzag(v));
    if (v > UINT32_MAX) return false;
    last = static_cast<uint32_t>(v);
    return true;
  }

  // The call-stack events of version 4 (trace_format.h, "Call stacks"), kThreadName's
  // operands 1-3, yielded as kStack, kMapping and kUnmapping.
  bool decode_stack_event(Thread &t, fmt::Cursor &c, Event &e) {
    switch (e.operand) {
      case fmt::kStackOperand: {
        e.type = fmt::EventType::kStack;
        e.a = c.varint();
        e.b = 0;
        const uint64_t n = c.varint();
        if (!against_previous(t.last_defined_id, e.a) || e.a == 0 || n == 0 ||
            n > fmt::kMaxStackFrames)
          return false;
        t.values.resize(n);
        uint64_t frame = c.varint();
        t.values[0] = frame;
        for (uint64_t i = 1; i < n; ++i) t.values[i] = frame += fmt::unzigzag(c.varint());
        t.last_stack = t.values;
        e.set_values(t.values);
        break;
      }
      case fmt::kSharedStackOperand: {  // the outer frames of the chunk's last stack
        e.type = fmt::EventType::kStack;
        e.a = c.varint();
        const uint64_t n = c.varint(), shared = c.varint();
        if (!against_previous(t.last_defined_id, e.a) || e.a == 0 || n == 0 ||
            n > fmt::kMaxStackFrames || shared == 0 || shared > n || shared > t.last_stack.size())
          return false;
        t.values.resize(n);
        const uint64_t inner = n - shared;
        uint64_t frame = 0;
        for (uint64_t i = 0; i < inner; ++i)
          t.values[i] = frame = i == 0 ? c.varint() : frame + fmt::unzigzag(c.varint());
        std::copy(t.last_stack.end() - static_cast<ptrdiff_t>(shared), t.last_stack.end(),
                  t.values.begin() + static_cast<ptrdiff_t>(inner));
        t.last_stack = t.values;
        e.set_values(t.values);
        e.b = shared;
        break;
      }
      case fmt::kMappingOperand: {
        e.type = fmt::EventType::kMapping;
        e.addr = c.varint();
        e.a = c.varint();
        e.b = c.varint();
        const uint64_t path_length = c.varint();
        if (path_length == 0 || path_length > fmt::kMaxNameBytes || e.b < e.a) return false;
        const uint8_t *path = c.bytes(path_length);
        const uint64_t id_length = c.varint();
        if (!path || id_length > fmt::kMaxBuildIdBytes) return false;
        const uint8_t *id = c.bytes(id_length);
        if (!id && id_length) return false;
        t.text.assign(reinterpret_cast<const char *>(path), path_length);
        t.text.push_back('\0');
        t.text.append(reinterpret_cast<const char *>(id), id_length);
        e.set_text(t.text);
        break;
      }
      case fmt::kUnmappingOperand:
        e.type = fmt::EventType::kUnmapping;
        e.addr = c.varint();
        e.a = c.varint();
        break;
      default:
        return false;
    }
    return !t.bad();
  }

  // A heap allocation in the general form (kAlloc): the coder takes note, as the writer's did.
  // False: more allocations than the chunk has events (a damaged stream).
  static bool on_heap_alloc(Thread &t, uint64_t addr, uint32_t cls) {
    if (!t.coder) {
      t.coder_v2->on_alloc(addr, cls);
      return true;
    }
    const uint32_t slot = t.coder->on_alloc(addr, cls);
    return !t.ordinals || take_ordinal(t, slot);
  }
  // Version 6: the next allocation's ordinal, live, holding `slot`.
  static bool take_ordinal(Thread &t, uint32_t slot) {
    const uint32_t ordinal = t.order.size();
    if (ordinal >= t.slot_at.size() || !t.order.push()) return false;
    t.slot_at[ordinal] =
        slot < fmt::HeapCoder::kSlots ? static_cast<uint16_t>(slot) : kNoOrdinalSlot;
    return true;
  }
  // Version 6: the slot of a live allocation freed by slot (kNoSlot: none, a damaged stream).
  static uint32_t free_ordinal(Thread &t, uint32_t ordinal) {
    if (ordinal == fmt::LiveOrder::kNone || !t.order.live(ordinal)) return fmt::HeapCoder::kNoSlot;
    t.order.remove(ordinal);
    const uint16_t slot = t.slot_at[ordinal];
    return slot == kNoOrdinalSlot ? fmt::HeapCoder::kNoSlot : slot;
  }
  static constexpr uint16_t kNoOrdinalSlot = 0xFFFF;

  // A varint at p (see Cursor::varint), for the fast path's cursors held in registers.
  static bool varint_at(const uint8_t *&p, const uint8_t *end, uint64_t &v) {
    if (p < end && *p < 0x80) {
      v = *p++;
      return true;
    }
    fmt::Cursor c{p, end};
    v = c.varint();
    p = c.p;
    return !c.bad;
  }

  // Compact heap events (trace_format.h, "Heap events"), yielded as kAlloc or kFree: most
  // of any trace, so they are decoded in runs, with the thread's cursors and clock in locals,
  // which stores into the events cannot alias. Every field of an event is set. Writes at most
  // `max` events to `out` and stops before any other kind of event, at the end of the chunk's
  // tags, or at an event later than `limit`, which it leaves in t.pending. False on malformed
  // bytes (the events before them are written: `written`). In a plain chunk (a snapshot, or
  // one that did not compress) the fields follow each other in one stream and a slot is a
  // varint; in a columnar one each kind of field has its column.
  bool decode_heap_run(Thread &t, Event *out, size_t max, uint64_t limit, size_t &written) {
    if (t.ordinals)
      return t.columnar ? decode_heap_run<false, true, true>(t, *t.coder, out, max, limit, written)
                        : decode_heap_run<true, false, true>(t, *t.coder, out, max, limit, written);
    if (t.columns_v5)
      return decode_heap_run<false, true, false>(t, *t.coder, out, max, limit, written);
    if (t.columnar)
      return t.coder
                 ? decode_heap_run<false, false, false>(t, *t.coder, out, max, limit, written)
                 : decode_heap_run<false, false, false>(t, *t.coder_v2, out, max, limit, written);
    return t.coder ? decode_heap_run<true, false, false>(t, *t.coder, out, max, limit, written)
                   : decode_heap_run<true, false, false>(t, *t.coder_v2, out, max, limit, written);
  }
  // kV5: a version 5 (or later) columnar chunk (chunk_columns.h): delta fields from
  // kColHeapDelta, addressed frees against their class's last. kV6: a version 6 chunk: a free
  // by slot is the block's age (plain) or recency rank (columnar), allocations take ordinals.
  template <bool kPlain, bool kV5, bool kV6, class Coder>
  bool decode_heap_run(Thread &t, Coder &coder, Event *out, size_t max, uint64_t limit,
                       size_t &written) {
    using fmt::HeapCoder;
    const uint8_t *tag = t.tag;
    const uint8_t *const tag_end = t.tag_end;
    fmt::Cursor *col = t.columns;
    auto at = [&](int k) { return kPlain ? t.cur.p : col[k].p; };
    auto end = [&](int k) { return kPlain ? t.cur.end : col[k].end; };
    // Plain: every field cursor is the one stream's.
    const uint8_t *body = t.cur.p, *delta_col = at(fmt::kColDelta), *low = at(fmt::kColSlotLow),
                  *high = at(fmt::kColSlotHigh), *size_col = at(fmt::kColSize),
                  *haddr_col = at(fmt::kColHeapAddr), *other_col = at(fmt::kColOther);
    const uint8_t *&delta = kPlain ? body : delta_col;
    const uint8_t *&size = kPlain ? body : size_col;
    const uint8_t *&haddr = kPlain ? body : haddr_col;
    const uint8_t *&other = kPlain ? body : other_col;
    const uint8_t
        *const delta_end = end(fmt::kColDelta),
               *const low_end = end(fmt::kColSlotLow), *const high_end = end(fmt::kColSlotHigh),
               *const size_end = end(fmt::kColSize), *const haddr_end = end(fmt::kColHeapAddr),
               *const other_end = end(fmt::kColOther), *const stack_end = end(fmt::kColStack);
    const uint8_t *stack_col = at(fmt::kColStack);
    const uint8_t *rank_col = kPlain || !kV6 ? nullptr : at(fmt::kColRank),
                  *const rank_end = kPlain || !kV6 ? nullptr : end(fmt::kColRank);
    // Version 5: the delta fields of frees (and, without stacks, allocations), [0], and of
    // allocations with stacks, [1] (chunk_columns.h).
    const uint8_t *field_col[2] = {};
    size_t field_cap[2] = {};
    uint32_t field_at[2] = {t.delta_fields[0], t.delta_fields[1]};
    if constexpr (kV5) {
      for (int k = 0; k < 2; ++k) {
        const fmt::Cursor &c = col[k ? fmt::kColAllocDelta : fmt::kColHeapDelta];
        field_col[k] = c.p;
        field_cap[k] = 4 * static_cast<size_t>(c.end - c.p);
      }
    }
    const uint8_t *&stack = kPlain ? body : stack_col;
    const bool with_stacks = stacks;
    uint64_t ticks = t.ticks, last_addr = t.last_addr, total = allocated_total;
    const uint32_t tid = t.tid;
    size_t n = 0;
    bool ok = true;
    while (n < max && tag < tag_end &&
           (*tag & 0x0F) == static_cast<uint8_t>(fmt::EventType::kHeap)) {
      const uint8_t bits = *tag++ >> 4;
      uint64_t dt;
      if constexpr (kV5) {
        const int k = with_stacks && !(bits & fmt::kHeapFree);
        const uint32_t i = field_at[k]++;
        if (!(ok = i < field_cap[k])) break;
        dt = (field_col[k][i >> 2] >> (2 * (i & 3))) & 3;
      } else {
        dt = (bits >> fmt::kHeapDeltaShift) & 3;
      }
      if (dt == fmt::kHeapDeltaEscape && !(ok = varint_at(delta, delta_end, dt))) break;
      ticks += dt;
      // A free at the time of another thread's next event waits for it (merge_run).
      const bool later = ticks > limit || (ticks == limit && (bits & fmt::kHeapFree));
      Event &e = later ? t.pending : out[n];
      e.ticks = ticks;
      e.thread = tid;
      e.operand = ADPROF_SPACE_HEAP;
      e.device = 0;
      e.stack = 0;
      e.clear_payload();
      if (bits & fmt::kHeapFree) {
        e.type = fmt::EventType::kFree;
        e.a = e.b = 0;
        if (bits & fmt::kHeapAddressed) {
          uint64_t zz, cls;
          if (!(ok = varint_at(haddr, haddr_end, zz) && varint_at(other, other_end, cls) &&
                     cls <= HeapCoder::kLargeClass))
            break;
          if constexpr (kV5) {
            uint64_t &base = t.class_last_free[cls];
            last_addr = base += static_cast<uint64_t>(fmt::unzigzag(zz));
          } else {
            last_addr += static_cast<uint64_t>(fmt::unzigzag(zz));
          }
          e.addr = last_addr;
          coder.on_free_address(e.addr, static_cast<uint32_t>(cls));
        } else {
          uint64_t slot;
          if constexpr (kV6 && kPlain) {
            // 2 * age of a recent block, 2 * slot + 1 of an old one (trace_format.h).
            uint64_t v;
            if (!(ok = varint_at(body, other_end, v))) break;
            const uint64_t field = v >> 1;
            if (v & 1)
              slot = field < HeapCoder::kSlots ? field : HeapCoder::kNoSlot;
            else
              slot = free_ordinal(t, field >= 1 && field <= t.order.size()
                                         ? t.order.size() - static_cast<uint32_t>(field)
                                         : fmt::LiveOrder::kNone);
            if (!(ok = slot != HeapCoder::kNoSlot)) break;
          } else if constexpr (kV6) {
            // Rank + 1 of a recent block, 0 for an old one, whose slot is in the slot columns
            // (chunk_columns.h, kColRank).
            uint64_t v;
            if (!(ok = varint_at(rank_col, rank_end, v))) break;
            if (v == 0) {
              if (!(ok = low < low_end && high < high_end)) break;
              slot = *low++ | uint64_t{*high++} << 8;
              if (slot >= HeapCoder::kSlots) slot = HeapCoder::kNoSlot;
            } else {
              slot =
                  free_ordinal(t, v <= UINT32_MAX ? t.order.with_rank(static_cast<uint32_t>(v - 1))
                                                  : fmt::LiveOrder::kNone);
            }
            if (!(ok = slot != HeapCoder::kNoSlot)) break;
          } else if constexpr (kPlain) {
            if (!(ok = varint_at(body, other_end, slot) && slot < Coder::kNoSlot)) break;
          } else {
            if (!(ok = low < low_end && high < high_end)) break;
            slot = *low++ | uint64_t{*high++} << 8;
            constexpr int kAhead = 4;  // the slot of the free kAhead frees later, to prefetch
            if (low_end - low > kAhead && high_end - high > kAhead)
              coder.prefetch_slot(low[kAhead] | uint64_t{high[kAhead]} << 8);
          }
          e.addr = coder.on_free_slot(static_cast<uint32_t>(slot));
          if (!(ok = e.addr != 0)) break;  // an empty slot (or a damaged stream)
        }
      } else {
        e.type = fmt::EventType::kAlloc;
        uint64_t zz = 0;
        if (!(bits & fmt::kHeapPredicted) && !(ok = varint_at(haddr, haddr_end, zz))) break;
        if (!(ok = varint_at(size, size_end, e.a))) break;
        if (with_stacks) {
          uint64_t v;
          if (!(ok = varint_at(stack, stack_end, v) && stack_id(t, v, e.stack))) break;
        }
        const uint64_t usable = fmt::default_usable_size(e.a);  // 0 above 2^48
        if (!(ok = usable != 0 && (total += usable) <= kMaxTotalBytes)) break;
        e.b = usable - e.a;
        const uint32_t cls = HeapCoder::class_of(usable);
        if (bits & fmt::kHeapPredicted) {
          e.addr = coder.predicted(cls);
          if (!(ok = e.addr != 0)) break;
        } else {
          e.addr = coder.next_expected(cls, usable) + static_cast<uint64_t>(fmt::unzigzag(zz));
        }
        if constexpr (kV6) {
          if (!(ok = take_ordinal(t, coder.on_alloc(e.addr, cls)))) break;
        } else {
          coder.on_alloc(e.addr, cls);
        }
      }
      if (later) {
        t.have_pending = true;
        break;
      }
      ++n;
    }
    t.tag = tag;
    t.delta_fields[0] = field_at[0];
    t.delta_fields[1] = field_at[1];
    if constexpr (kPlain) {
      t.cur.p = body;
    } else {
      col[fmt::kColDelta].p = delta;
      col[fmt::kColSlotLow].p = low;
      col[fmt::kColSlotHigh].p = high;
      col[fmt::kColSize].p = size;
      col[fmt::kColHeapAddr].p = haddr;
      col[fmt::kColOther].p = other;
      col[fmt::kColStack].p = stack;
      if constexpr (kV6) col[fmt::kColRank].p = rank_col;
    }
    t.ticks = ticks;
    t.last_addr = last_addr;
    allocated_total = total;
    written = n;
    return ok;
  }

  // A thread's undecodable bytes (its checksum passed: a writer bug): the rest of its chunk
  // is skipped.
  void skip_chunk_rest(Thread &t) {
    ++live.corrupt_chunks;
    t.cur.p = t.cur.end;
    t.tag = t.tag_end;
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
  m.version = header_.version;
  if (fmt::get_u32(h + 60) != static_cast<uint32_t>(crc32(0L, h, 60)))
    throw TraceError("'" + path + "': the trace header is damaged (checksum mismatch)");
  header_.pid = fmt::get_u64(h + 16);
  header_.start_ticks = fmt::get_u64(h + 24);
  header_.start_wall_ns = fmt::get_u64(h + 32);
  header_.ticks_per_second = fmt::get_u64(h + 40);
  header_.page_size = fmt::get_u32(h + 48);
  header_.flags = fmt::get_u32(h + 52);
  header_.run_id = fmt::get_u32(h + 56);
  m.stacks = header_.stacks();
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
    ChunkRef ref{offset,
                 fmt::get_u64(c + 24),
                 fmt::get_u32(c + 12),
                 fmt::get_u32(c + 16),
                 fmt::get_u32(c + 20),
                 fmt::get_u32(c + 32),
                 fmt::get_u32(c + 36)};
    uint32_t tid = fmt::get_u32(c + 8);
    if (fmt::get_u32(c) != fmt::kChunkMagic || ref.stored > fmt::kMaxChunkBytes ||
        ref.raw > fmt::kMaxChunkBytes ||
        (ref.flags & ~(fmt::kChunkFlagZstd | fmt::kChunkFlagSnapshot | fmt::kChunkFlagColumns)) !=
            0 ||
        (!(ref.flags & fmt::kChunkFlagZstd) && ref.stored != ref.raw)) {
      damage = "a damaged chunk header";
      break;
    }
    if (m.file_size - offset - sizeof c < ref.stored) {
      damage = "a partial chunk";
      break;
    }
    if (tid == fmt::kFooterThread) {
      std::vector<uint8_t> body(ref.stored);
      uLong crc = crc32(0L, c + 8, fmt::kChunkHeaderSize - 8);
      if (m.read_at(offset + sizeof c, body.data(), body.size()) &&
          static_cast<uint32_t>(crc32(crc, body.data(), ref.stored)) == fmt::get_u32(c + 4)) {
        fmt::Cursor cur{body.data(), body.data() + body.size()};
        end_.footer_events = cur.varint();
        end_.footer_chunks = cur.varint();
        end_.footer_dropped = cur.varint();
        uint64_t reason = cur.varint();
        uint64_t sig = cur.varint();
        if (!cur.bad && !cur.done()) {  // a later field, written since issue 28
          fmt::Cursor more = cur;
          const uint64_t untraced = more.varint();
          if (!more.bad) end_.untraced_fork_children = untraced;
        }
        if (!cur.bad) {
          footer = true;
          if (reason == static_cast<uint64_t>(fmt::EndReason::kExit)) {
            end_.complete = true;
            end_.cut = false;
            end_.reason = "complete";
          } else if (reason == static_cast<uint64_t>(fmt::EndReason::kSignal)) {
            end_.reason = "the program was ended by " + signal_name(static_cast<int>(sig)) +
                          "; events of other threads since their last chunk are missing";
          } else if (reason == static_cast<uint64_t>(fmt::EndReason::kExec)) {
            end_.complete = true;
            end_.cut = false;
            end_.exec = true;
            end_.reason = "the process replaced itself with exec; its new image has its own trace";
          } else {
            end_.reason = "recording stopped early (trace write error)";
          }
        }
      }
    } else {
      auto [it, inserted] = thread_index.try_emplace(tid, static_cast<uint32_t>(m.threads.size()));
      if (inserted) {
        m.threads.emplace_back();
        m.threads.back().tid = tid;
      }
      m.threads[it->second].chunks.push_back(ref);
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
    return v1 ? c.events == 0 : (c.flags & fmt::kChunkFlagSnapshot) != 0;
  };
  for (auto &t : m.threads) {
    std::stable_sort(t.chunks.begin(), t.chunks.end(), [&](const ChunkRef &a, const ChunkRef &b) {
      if (a.seq != b.seq) return a.seq < b.seq;
      if (a.raw != b.raw) return a.raw > b.raw;
      return !is_snapshot(a) && is_snapshot(b);  // the full chunk before a snapshot of its length
    });
    // Two full chunks with one seq mean damage.
    auto last = std::unique(t.chunks.begin(), t.chunks.end(),
                            [&](const ChunkRef &kept, const ChunkRef &dropped) {
                              if (kept.seq != dropped.seq) return false;
                              if (!is_snapshot(kept) && !is_snapshot(dropped))
                                ++stats_.corrupt_chunks;
                              m.superseded_events += dropped.events;
                              return true;
                            });
    m.chunks_total -= static_cast<uint64_t>(t.chunks.end() - last);
    t.chunks.erase(last, t.chunks.end());
    // Sequence numbers start at 0 and have no gaps: what is not there is missing.
    uint64_t expected = 0;
    for (const ChunkRef &c : t.chunks) {
      if (c.seq != expected && m.first_gap.empty())
        m.first_gap = "thread " + std::to_string(t.tid) + "'s chunk " + std::to_string(expected);
      stats_.missing_chunks += c.seq - expected;
      expected = uint64_t{c.seq} + 1;
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
      m.threads[thread_index[order[rank]]].tid = rank;
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
    } else if (!t.more()) {
      if (!load_chunk(t)) {  // exhausted
        release(t);
        current = -1;
      }
      continue;
    } else {
      if (t.tag) {  // version 2 on: compact heap events, decoded in runs
        size_t written;
        bool ok = decode_heap_run(t, out + n, max - n, limit, written);
        n += written;
        if (!ok) {
          skip_chunk_rest(t);
          continue;
        }
        if (written > 0 && !t.have_pending) continue;
      }
      if (!t.have_pending) {  // an event of another kind: one at a time
        if (!t.more()) continue;
        Event &e = out[n];
        if (!decode(t, e)) {
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
    if (!t.more()) park(t);
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
    if (!t.chunks.empty()) last = std::max(last, t.chunks.back().base_ts);
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
