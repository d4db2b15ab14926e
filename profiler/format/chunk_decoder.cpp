// The chunk decoder (chunk_decoder.h): the footer, inflating, a chunk's parts, and every kind of
// event but the compact heap events (chunk_decoder_heap.cpp).
#include "chunk_decoder.h"

#include <zstd.h>

#include <algorithm>
#include <iterator>

#include "adprof/context.h"

namespace adprof::format {

static_assert(kAddressedFreeClasses == HeapCoder::kLargeClass + 1);

bool read_footer(const uint8_t *body, size_t size, Footer &out) {
  Cursor cur{body, body + size};
  out.events = cur.varint();
  out.chunks = cur.varint();
  out.dropped = cur.varint();
  out.reason = cur.varint();
  out.signal = cur.varint();
  if (!cur.bad && !cur.done()) {  // a later field, written since issue 28
    Cursor more = cur;
    const uint64_t untraced = more.varint();
    if (!more.bad) {
      out.has_untraced_fork_children = true;
      out.untraced_fork_children = untraced;
    }
  }
  return !cur.bad;
}

PayloadInflater::PayloadInflater() : dctx_(ZSTD_createDCtx()) {}
PayloadInflater::~PayloadInflater() { ZSTD_freeDCtx(static_cast<ZSTD_DCtx *>(dctx_)); }

bool PayloadInflater::inflate(const ChunkHeader &c, const uint8_t *stored,
                              std::vector<uint8_t> &raw) {
  if (!(c.flags & kChunkFlagZstd)) {
    raw.assign(stored, stored + c.stored);
    return true;
  }
  raw.resize(c.raw);
  auto *dctx = static_cast<ZSTD_DCtx *>(dctx_);
  const size_t n = dctx ? ZSTD_decompressDCtx(dctx, raw.data(), c.raw, stored, c.stored)
                        : ZSTD_decompress(raw.data(), c.raw, stored, c.stored);
  return !ZSTD_isError(n) && n == c.raw;
}

bool split_chunk(const uint8_t *raw, size_t size, const ChunkHeader &c, uint32_t version,
                 ChunkParts &out) {
  out = ChunkParts{};
  if (version < 2) {  // tags inline
    out.bodies = {raw, raw + size};
    return true;
  }
  if (c.events > size) return false;
  out.tags = {raw, raw + c.events};
  out.bodies = {raw + c.events, raw + size};
  if (!(c.flags & kChunkFlagColumns)) return true;
  Cursor dir = out.bodies;
  const int count = columns_in(version);
  uint64_t length[kColumnCount] = {};
  for (int k = 0; k < count; ++k) length[k] = dir.varint();
  if (dir.bad) return false;
  const uint8_t *p = dir.p;
  out.columns_at = p;
  for (int k = 0; k < count; ++k) {
    if (length[k] > static_cast<uint64_t>(dir.end - p)) return false;
    out.columns[k] = {p, p + length[k]};
    p += length[k];
  }
  return p == dir.end;
}

// A coder from the pool, else a new one left uninitialised (reset() sets what decoding reads):
// its arrays are touched only as far as a chunk uses them, where make_unique zeroed 175 KB.
template <class Coder>
std::unique_ptr<Coder> ChunkDecoder::take_spare(std::vector<std::unique_ptr<Coder>> &spare) {
  if (spare.empty()) return std::unique_ptr<Coder>(new Coder);
  std::unique_ptr<Coder> c = std::move(spare.back());
  spare.pop_back();
  return c;
}

bool ChunkDecoder::load(const uint8_t *header, const ChunkHeader &c, const uint8_t *stored,
                        PayloadInflater &inflater) {
  if (!chunk_checksum_ok(header, stored, c.stored) || !inflater.inflate(c, stored, data_)) {
    park();
    return false;
  }
  return open(c);
}

bool ChunkDecoder::load_raw(const ChunkHeader &c, const uint8_t *raw) {
  data_.assign(raw, raw + c.raw);
  return open(c);
}

bool ChunkDecoder::open(const ChunkHeader &c) {
  const uint32_t version = trace_->version;
  ChunkParts parts;
  if (!split_chunk(data_.data(), data_.size(), c, version, parts)) {
    park();
    return false;
  }
  cur_ = parts.bodies;
  tag_ = parts.tags.p;
  tag_end_ = parts.tags.end;
  columnar_ = version >= 2 && (c.flags & kChunkFlagColumns);
  if (columnar_) cur_.p = parts.columns_at;  // past the directory
  for (int k = 0; k < kColumnCount; ++k) {
    columns_[k] = parts.columns[k];
    in_[k] = columnar_ && k < columns_in(version) ? &columns_[k] : &cur_;
  }
  ticks_ = c.base_ts;
  last_addr_ = 0;
  last_stack_.clear();
  last_alloc_stack_ = last_defined_id_ = 0;
  columns_v5_ = columnar_ && version >= 5;
  delta_fields_[0] = delta_fields_[1] = 0;
  std::fill(std::begin(class_last_free_), std::end(class_last_free_), 0);
  ordinals_ = version >= 6;
  if (ordinals_) {
    // At most one allocation per event. The storage grows with the largest chunk so far.
    if (order_words_.empty() || !order_.restart(c.events)) {  // none yet, or parked
      order_words_.resize(LiveOrder::words_for(c.events));
      order_counts_.resize(LiveOrder::counts_for(c.events));
      order_.attach(order_words_.data(), order_counts_.data(), c.events);
      order_.restart(c.events);
    }
    if (slot_at_.size() < c.events) slot_at_.resize(c.events);
  }
  if (version >= 3) {
    if (!coder_) coder_ = take_spare(trace_->spare_coders);
    coder_->reset();
  } else {
    if (!coder_v2_) coder_v2_ = take_spare(trace_->spare_coders_v2);
    coder_v2_->reset();
  }
  return true;
}

// A thread waiting in the merge holds its next event only: 20,000 threads whose one chunk each
// overlapped in time took 3.5 GB (a heap coder, 175 KB zeroed, each), and memory follows the
// chunks being decoded.
void ChunkDecoder::park() {
  std::vector<uint8_t>().swap(data_);
  cur_ = {nullptr, nullptr};
  tag_ = tag_end_ = nullptr;
  for (auto &c : in_) c = &cur_;
  for (auto &c : columns_) c = {nullptr, nullptr};
  if (coder_) trace_->spare_coders.push_back(std::move(coder_));
  if (coder_v2_) trace_->spare_coders_v2.push_back(std::move(coder_v2_));
  order_.attach(nullptr, nullptr, 0);
  std::vector<uint64_t>().swap(order_words_);
  std::vector<uint16_t>().swap(order_counts_);
  std::vector<uint16_t>().swap(slot_at_);
}

void ChunkDecoder::release() {
  park();
  std::string().swap(text_);
  std::vector<uint64_t>().swap(values_);
}

void ChunkDecoder::skip_rest() {
  cur_.p = cur_.end;
  tag_ = tag_end_;
}

bool ChunkDecoder::bad() const {
  bool b = false;
  for (const Cursor *c : in_) b |= c->bad;
  return b;
}

uint64_t ChunkDecoder::addr(int column) {
  last_addr_ += static_cast<uint64_t>(unzigzag(in_[column]->varint()));
  return last_addr_;
}

bool ChunkDecoder::decode(Event &e) {
  const uint32_t version = trace_->version;
  Cursor &c = *in_[kColOther];
  uint8_t tag;
  if (tag_) {
    if (tag_ == tag_end_) return false;  // more body bytes than the tags account for
    tag = *tag_++;
  } else {
    tag = c.byte();
  }
  uint8_t type = tag & 0x0F;
  e = Event{};
  e.operand = tag >> 4;
  e.thread = thread_;
  ticks_ += in_[kColDelta]->varint();
  e.ticks = ticks_;
  if (type >= kEventTypeCount - (version >= 2 ? 0 : 1)) return false;
  e.type = static_cast<EventType>(type);
  switch (e.type) {
    case EventType::kHeap:
    case EventType::kStack:  // on disk: kThreadName's operands
    case EventType::kMapping:
    case EventType::kUnmapping:
    case EventType::kStepSummary:
      return false;  // kHeap: decoded in runs (decode_heap_run), never one at a time
    case EventType::kAlloc:
      if (e.operand >= ADPROF_SPACE_COUNT) return false;
      e.addr = addr();
      e.a = c.varint();
      e.b = c.varint();
      if (e.a > kMaxEventBytes || e.b > kMaxEventBytes ||
          (trace_->allocated_total += e.a + e.b) > kMaxTotalBytes)
        return false;
      if (e.operand >= ADPROF_SPACE_DEVICE_BLOCK) e.device = static_cast<uint32_t>(c.varint());
      if (trace_->stacks && !stack_id(c.varint(), e.stack)) return false;
      if (e.operand == ADPROF_SPACE_HEAP && !on_heap_alloc(e.addr, HeapCoder::class_of(e.a + e.b)))
        return false;
      break;
    case EventType::kFree:
      if (e.operand >= ADPROF_SPACE_COUNT) return false;
      e.addr = addr();
      if (e.operand == ADPROF_SPACE_MMAP && (e.a = c.varint()) > kMaxEventBytes) return false;
      if (e.operand >= ADPROF_SPACE_DEVICE_BLOCK) e.device = static_cast<uint32_t>(c.varint());
      break;
    case EventType::kOpBegin:
      e.a = c.varint();
      e.b = c.varint();
      break;
    case EventType::kOpEnd:
      break;
    case EventType::kPhase:
      if (e.operand >= ADPROF_PHASE_COUNT) return false;
      break;
    case EventType::kRole:
    case EventType::kRetag:
      if (e.operand >= ADPROF_ROLE_COUNT) return false;
      if (e.type == EventType::kRetag) {
        e.addr = addr();
        e.b = c.varint();
      }
      break;
    case EventType::kStep:
      e.a = c.varint();
      break;
    case EventType::kCounter:
      if (e.operand >= kCounterKindCount) return false;
      e.a = c.varint();
      break;
    case EventType::kThreadName:
      if (version >= 4 && e.operand != 0) return decode_stack_event(c, e);
      [[fallthrough]];
    case EventType::kName: {
      if (e.type == EventType::kName) e.a = c.varint();
      uint64_t n = c.varint();
      if (n > kMaxNameBytes) return false;
      const uint8_t *s = c.bytes(n);
      if (!s) return false;
      text_.assign(reinterpret_cast<const char *>(s), n);
      e.set_text(text_);
      break;
    }
    case EventType::kAnnotate:
    case EventType::kDescribe: {
      uint64_t limit = kMaxAnnotateValues;
      if (e.type == EventType::kDescribe) {
        e.addr = addr();
        limit = kMaxRank;
      }
      e.a = c.varint();
      uint64_t n = c.varint();
      if (n > limit) return false;
      values_.resize(n);
      for (uint64_t i = 0; i < n; ++i) values_[i] = c.varint();
      e.set_values(values_);
      break;
    }
    case EventType::kLabel:
    case EventType::kContentHash:
      e.addr = addr();
      e.a = c.varint();
      break;
  }
  return !bad();
}

// An allocation's stack id from its field `v` (trace_format.h, "Call stacks").
bool ChunkDecoder::stack_id(uint64_t v, uint32_t &id) {
  if (!against_previous(last_alloc_stack_, v)) return false;
  id = static_cast<uint32_t>(v);
  return true;
}

// Version 7 writes an id against the previous one of its kind in the chunk (`last`, updated);
// before, the id itself. False: out of range.
bool ChunkDecoder::against_previous(uint32_t &last, uint64_t &v) const {
  if (trace_->version >= 7) v = last + static_cast<uint64_t>(unzigzag(v));
  if (v > UINT32_MAX) return false;
  last = static_cast<uint32_t>(v);
  return true;
}

// The call-stack events of version 4 (trace_format.h, "Call stacks"), kThreadName's operands
// 1-4, yielded as kStack, kMapping and kUnmapping.
bool ChunkDecoder::decode_stack_event(Cursor &c, Event &e) {
  switch (e.operand) {
    case kStackOperand: {
      e.type = EventType::kStack;
      e.a = c.varint();
      e.b = 0;
      const uint64_t n = c.varint();
      if (!against_previous(last_defined_id_, e.a) || e.a == 0 || n == 0 || n > kMaxStackFrames)
        return false;
      values_.resize(n);
      uint64_t frame = c.varint();
      values_[0] = frame;
      for (uint64_t i = 1; i < n; ++i) values_[i] = frame += unzigzag(c.varint());
      last_stack_ = values_;
      e.set_values(values_);
      break;
    }
    case kSharedStackOperand: {  // the outer frames of the chunk's last stack
      e.type = EventType::kStack;
      e.a = c.varint();
      const uint64_t n = c.varint(), shared = c.varint();
      if (!against_previous(last_defined_id_, e.a) || e.a == 0 || n == 0 || n > kMaxStackFrames ||
          shared == 0 || shared > n || shared > last_stack_.size())
        return false;
      values_.resize(n);
      const uint64_t inner = n - shared;
      uint64_t frame = 0;
      for (uint64_t i = 0; i < inner; ++i)
        values_[i] = frame = i == 0 ? c.varint() : frame + unzigzag(c.varint());
      std::copy(last_stack_.end() - static_cast<ptrdiff_t>(shared), last_stack_.end(),
                values_.begin() + static_cast<ptrdiff_t>(inner));
      last_stack_ = values_;
      e.set_values(values_);
      e.b = shared;
      break;
    }
    case kMappingOperand: {
      e.type = EventType::kMapping;
      e.addr = c.varint();
      e.a = c.varint();
      e.b = c.varint();
      const uint64_t path_length = c.varint();
      if (path_length == 0 || path_length > kMaxNameBytes || e.b < e.a) return false;
      const uint8_t *path = c.bytes(path_length);
      const uint64_t id_length = c.varint();
      if (!path || id_length > kMaxBuildIdBytes) return false;
      const uint8_t *id = c.bytes(id_length);
      if (!id && id_length) return false;
      text_.assign(reinterpret_cast<const char *>(path), path_length);
      text_.push_back('\0');
      text_.append(reinterpret_cast<const char *>(id), id_length);
      e.set_text(text_);
      break;
    }
    case kUnmappingOperand:
      e.type = EventType::kUnmapping;
      e.addr = c.varint();
      e.a = c.varint();
      break;
    case kStepSummaryOperand:
      if (trace_->version < 8) return false;
      return decode_step_summary(c, e);
    default:
      return false;
  }
  return !bad();
}

// A step's summary (trace_format.h, "Step windows"), yielded as kStepSummary: a = the step,
// values = StepSummaryField's fields, then the (label, role, bytes) triples.
bool ChunkDecoder::decode_step_summary(Cursor &c, Event &e) {
  e.type = EventType::kStepSummary;
  e.a = c.varint();
  const uint64_t start_back = c.varint(), peak_back = c.varint();
  if (start_back > e.ticks || peak_back > e.ticks) return false;
  values_.assign(kStepSummaryFixedFields, 0);
  values_[kSummaryStart] = e.ticks - start_back;
  values_[kSummaryPeakTime] = e.ticks - peak_back;
  values_[kSummaryAllocations] = c.varint();
  values_[kSummaryFrees] = c.varint();
  values_[kSummaryBytes] = c.varint();
  values_[kSummaryPeak] = c.varint();
  const uint64_t roles = c.varint();
  if (roles != ADPROF_ROLE_COUNT) return false;
  for (uint64_t i = 0; i < 2 * roles; ++i) values_.push_back(c.varint());
  const uint64_t labels = c.varint();
  if (labels > kMaxStepSummaryLabels) return false;
  values_.push_back(labels);
  for (uint64_t i = 0; i < 3 * labels; ++i) values_.push_back(c.varint());
  // Byte counts and counts are bounded as an allocation's are (trace_event.h); label ids and
  // roles are checked where they are read (analysis/memory/step_summaries.cpp).
  for (size_t i = kSummaryAllocations; i < values_.size(); ++i)
    if (values_[i] > kMaxTotalBytes) return false;
  e.set_values(values_);
  return !bad();
}

// A heap allocation in the general form (kAlloc): the coder takes note, as the writer's did.
// False: more allocations than the chunk has events (a damaged stream).
bool ChunkDecoder::on_heap_alloc(uint64_t addr, uint32_t cls) {
  if (!coder_) {
    coder_v2_->on_alloc(addr, cls);
    return true;
  }
  const uint32_t slot = coder_->on_alloc(addr, cls);
  return !ordinals_ || take_ordinal(slot);
}

// Version 6: the next allocation's ordinal, live, holding `slot`.
bool ChunkDecoder::take_ordinal(uint32_t slot) {
  const uint32_t ordinal = order_.size();
  if (ordinal >= slot_at_.size() || !order_.push()) return false;
  slot_at_[ordinal] = slot < HeapCoder::kSlots ? static_cast<uint16_t>(slot) : kNoOrdinalSlot;
  return true;
}

// Version 6: the slot of a live allocation freed by slot (kNoSlot: none, a damaged stream).
uint32_t ChunkDecoder::free_ordinal(uint32_t ordinal) {
  if (ordinal == LiveOrder::kNone || !order_.live(ordinal)) return HeapCoder::kNoSlot;
  order_.remove(ordinal);
  const uint16_t slot = slot_at_[ordinal];
  return slot == kNoOrdinalSlot ? HeapCoder::kNoSlot : slot;
}

}  // namespace adprof::format
