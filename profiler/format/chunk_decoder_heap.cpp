// The chunk decoder's compact heap events (chunk_decoder.h, decode_heap_run): most of any
// trace, so they are decoded in runs, with the chunk's cursors and clock in locals, which
// stores into the events cannot alias; one instance per chunk kind (plain or columnar, version).
#include "adprof/context.h"
#include "chunk_decoder.h"

namespace adprof::format {

namespace {

// A varint at p (see Cursor::varint), for the fast path's cursors held in registers.
bool varint_at(const uint8_t *&p, const uint8_t *end, uint64_t &v) {
  if (p < end && *p < 0x80) {
    v = *p++;
    return true;
  }
  Cursor c{p, end};
  v = c.varint();
  p = c.p;
  return !c.bad;
}

}  // namespace

// Compact heap events (trace_format.h, "Heap events"), yielded as kAlloc or kFree: most
// of any trace, so they are decoded in runs, with the thread's cursors and clock in locals,
// which stores into the events cannot alias. Every field of an event is set. Writes at most
// `max` events to `out` and stops before any other kind of event, at the end of the chunk's
// tags, or at an event later than `limit`, which it leaves in `pending` (`has_pending`). False on
// malformed bytes (the events before them are written: `written`). In a plain chunk (a snapshot, or
// one that did not compress) the fields follow each other in one stream and a slot is a
// varint; in a columnar one each kind of field has its column.
bool ChunkDecoder::decode_heap_run(Event *out, size_t max, uint64_t limit, size_t &written,
                                   Event &pending, bool &has_pending) {
  if (ordinals_)
    return columnar_ ? decode_heap_run<false, true, true>(*coder_, out, max, limit, written,
                                                          pending, has_pending)
                     : decode_heap_run<true, false, true>(*coder_, out, max, limit, written,
                                                          pending, has_pending);
  if (columns_v5_)
    return decode_heap_run<false, true, false>(*coder_, out, max, limit, written, pending,
                                               has_pending);
  if (columnar_)
    return coder_ ? decode_heap_run<false, false, false>(*coder_, out, max, limit, written, pending,
                                                         has_pending)
                  : decode_heap_run<false, false, false>(*coder_v2_, out, max, limit, written,
                                                         pending, has_pending);
  return coder_ ? decode_heap_run<true, false, false>(*coder_, out, max, limit, written, pending,
                                                      has_pending)
                : decode_heap_run<true, false, false>(*coder_v2_, out, max, limit, written, pending,
                                                      has_pending);
}
// kV5: a version 5 (or later) columnar chunk (chunk_columns.h): delta fields from
// kColHeapDelta, addressed frees against their class's last. kV6: a version 6 chunk: a free
// by slot is the block's age (plain) or recency rank (columnar), allocations take ordinals.
template <bool kPlain, bool kV5, bool kV6, class Coder>
bool ChunkDecoder::decode_heap_run(Coder &coder, Event *out, size_t max, uint64_t limit,
                                   size_t &written, Event &pending, bool &has_pending) {
  const uint8_t *tag = tag_;
  const uint8_t *const tag_end = tag_end_;
  Cursor *col = columns_;
  auto at = [&](int k) { return kPlain ? cur_.p : col[k].p; };
  auto end = [&](int k) { return kPlain ? cur_.end : col[k].end; };
  // Plain: every field cursor is the one stream's.
  const uint8_t *body = cur_.p, *delta_col = at(kColDelta), *low = at(kColSlotLow),
                *high = at(kColSlotHigh), *size_col = at(kColSize), *haddr_col = at(kColHeapAddr),
                *other_col = at(kColOther);
  const uint8_t *&delta = kPlain ? body : delta_col;
  const uint8_t *&size = kPlain ? body : size_col;
  const uint8_t *&haddr = kPlain ? body : haddr_col;
  const uint8_t *&other = kPlain ? body : other_col;
  const uint8_t *const delta_end = end(kColDelta), *const low_end = end(kColSlotLow),
                       *const high_end = end(kColSlotHigh), *const size_end = end(kColSize),
                       *const haddr_end = end(kColHeapAddr), *const other_end = end(kColOther),
                       *const stack_end = end(kColStack);
  const uint8_t *stack_col = at(kColStack);
  const uint8_t *rank_col = kPlain || !kV6 ? nullptr : at(kColRank), *const rank_end =
                                                                         kPlain || !kV6
                                                                             ? nullptr
                                                                             : end(kColRank);
  // Version 5: the delta fields of frees (and, without stacks, allocations), [0], and of
  // allocations with stacks, [1] (chunk_columns.h).
  const uint8_t *field_col[2] = {};
  size_t field_cap[2] = {};
  uint32_t field_at[2] = {delta_fields_[0], delta_fields_[1]};
  if constexpr (kV5) {
    for (int k = 0; k < 2; ++k) {
      const Cursor &c = col[k ? kColAllocDelta : kColHeapDelta];
      field_col[k] = c.p;
      field_cap[k] = 4 * static_cast<size_t>(c.end - c.p);
    }
  }
  const uint8_t *&stack = kPlain ? body : stack_col;
  const bool with_stacks = trace_->stacks;
  uint64_t ticks = ticks_, last_addr = last_addr_, total = trace_->allocated_total;
  const uint32_t tid = thread_;
  size_t n = 0;
  bool ok = true;
  while (n < max && tag < tag_end && (*tag & 0x0F) == static_cast<uint8_t>(EventType::kHeap)) {
    const uint8_t bits = *tag++ >> 4;
    uint64_t dt;
    if constexpr (kV5) {
      const int k = with_stacks && !(bits & kHeapFree);
      const uint32_t i = field_at[k]++;
      if (!(ok = i < field_cap[k])) break;
      dt = (field_col[k][i >> 2] >> (2 * (i & 3))) & 3;
    } else {
      dt = (bits >> kHeapDeltaShift) & 3;
    }
    if (dt == kHeapDeltaEscape && !(ok = varint_at(delta, delta_end, dt))) break;
    ticks += dt;
    // A free at the time of another thread's next event waits for it (merge_run).
    const bool later = ticks > limit || (ticks == limit && (bits & kHeapFree));
    Event &e = later ? pending : out[n];
    e.ticks = ticks;
    e.thread = tid;
    e.operand = ADPROF_SPACE_HEAP;
    e.device = 0;
    e.stack = 0;
    e.clear_payload();
    if (bits & kHeapFree) {
      e.type = EventType::kFree;
      e.a = e.b = 0;
      if (bits & kHeapAddressed) {
        uint64_t zz, cls;
        if (!(ok = varint_at(haddr, haddr_end, zz) && varint_at(other, other_end, cls) &&
                   cls <= HeapCoder::kLargeClass))
          break;
        if constexpr (kV5) {
          uint64_t &base = class_last_free_[cls];
          last_addr = base += static_cast<uint64_t>(unzigzag(zz));
        } else {
          last_addr += static_cast<uint64_t>(unzigzag(zz));
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
            slot = free_ordinal(field >= 1 && field <= order_.size()
                                    ? order_.size() - static_cast<uint32_t>(field)
                                    : LiveOrder::kNone);
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
            slot = free_ordinal(v <= UINT32_MAX ? order_.with_rank(static_cast<uint32_t>(v - 1))
                                                : LiveOrder::kNone);
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
      e.type = EventType::kAlloc;
      uint64_t zz = 0;
      if (!(bits & kHeapPredicted) && !(ok = varint_at(haddr, haddr_end, zz))) break;
      if (!(ok = varint_at(size, size_end, e.a))) break;
      if (with_stacks) {
        uint64_t v;
        if (!(ok = varint_at(stack, stack_end, v) && stack_id(v, e.stack))) break;
      }
      const uint64_t usable = default_usable_size(e.a);  // 0 above 2^48
      if (!(ok = usable != 0 && (total += usable) <= kMaxTotalBytes)) break;
      e.b = usable - e.a;
      const uint32_t cls = HeapCoder::class_of(usable);
      if (bits & kHeapPredicted) {
        e.addr = coder.predicted(cls);
        if (!(ok = e.addr != 0)) break;
      } else {
        e.addr = coder.next_expected(cls, usable) + static_cast<uint64_t>(unzigzag(zz));
      }
      if constexpr (kV6) {
        if (!(ok = take_ordinal(coder.on_alloc(e.addr, cls)))) break;
      } else {
        coder.on_alloc(e.addr, cls);
      }
    }
    if (later) {
      has_pending = true;
      break;
    }
    ++n;
  }
  tag_ = tag;
  delta_fields_[0] = field_at[0];
  delta_fields_[1] = field_at[1];
  if constexpr (kPlain) {
    cur_.p = body;
  } else {
    col[kColDelta].p = delta;
    col[kColSlotLow].p = low;
    col[kColSlotHigh].p = high;
    col[kColSize].p = size;
    col[kColHeapAddr].p = haddr;
    col[kColOther].p = other;
    col[kColStack].p = stack;
    if constexpr (kV6) col[kColRank].p = rank_col;
  }
  ticks_ = ticks;
  last_addr_ = last_addr;
  trace_->allocated_total = total;
  written = n;
  return ok;
}

}  // namespace adprof::format
