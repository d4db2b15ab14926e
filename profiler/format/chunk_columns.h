// Columnar chunks (format version 2 on, chunk flag kChunkFlagColumns): the writer thread, before
// it compresses a chunk, moves each kind of field of the bodies into a column of its own, so
// that zstd codes each with an alphabet of its own (a slot's low byte is uniform, its high byte
// a few bits, a time delta almost always 1 byte of a few values: mixed in one stream, every
// byte costs the mixture's code length). The recording threads never pay for this.
//
// Raw columnar chunk := tags[event count] length:varint*columns_in(version) column*...
//   column kColDelta     delta_ticks of every event that has one (kHeap: escaped deltas)
//   column kColSlotLow   kHeap free by slot: slot & 0xFF (version 6: only of old blocks, those
//                        whose rank column entry is 0)
//   column kColSlotHigh  kHeap free by slot: slot >> 8 (slots are < 2^16; the same)
//   column kColSize      kHeap allocation: size
//   column kColHeapAddr  kHeap allocation not predicted, kHeap free by address: the address
//   column kColOther     everything else: kHeap free's class, every other event's body
//   column kColStack     kHeap allocation: stack id (version 4 on, traces with kFileFlagStacks;
//                        version 4 chunks have this seventh column, empty without stacks;
//                        versions 2-3 have six: columns_in(version))
//   column kColHeapDelta version 5 on: every kHeap event's 2-bit delta field (the tag's bits
//                        0x60: 0..2, or 3 = escaped, a varint in kColDelta), four to a byte,
//                        the first event in the low bits: byte i/4, bits 2*(i%4)..+1 for the
//                        i-th of the chunk's kHeap events whose field the column holds. Unused
//                        high bits of the last byte are 0. In a trace with kFileFlagStacks,
//                        only the kHeap frees' fields. (Version 5 chunks have nine columns.)
//   column kColAllocDelta version 5 on, traces with kFileFlagStacks: the kHeap allocations'
//                        2-bit delta fields, packed the same way (empty without stacks).
//                        With stacks an allocation's delta includes its unwinding and a
//                        free's does not: apart, each kind's distribution costs less (the
//                        Python JSON run with stacks: 0.158 -> 0.130 B/event of time). Without
//                        stacks the deltas of neighbouring events correlate more than the kinds
//                        differ, and one stream codes better (0.101 against 0.114).
//   column kColRank      version 6: every kHeap free by slot: a varint, the block's recency
//                        rank + 1 where the plain chunk has 2 * its age (LiveOrder,
//                        heap_coder.h: the chunk's allocations after it that are still live),
//                        0 where it has 2 * slot + 1 (an old block: its slot follows in the
//                        two slot columns). (Version 6 and 7 chunks have ten columns.)
// Each field keeps the coding it has in a plain chunk (trace_format.h); only where its bytes
// lie changes, except:
//   - the slot, which is two bytes here and a varint in a plain chunk (version 6: see kColRank);
//   - version 5 on: a kHeap tag's delta bits are 0 (the reader ignores them): the delta field
//     is in kColHeapDelta (kColAllocDelta). Without the time in them, the tags of a program's
//     regular allocation pattern repeat, and zstd codes them as long matches (the Python JSON run
//     of docs/PERFORMANCE.md: 0.19 B/event of tags became 0.012 of tags + 0.104 of deltas);
//   - version 5 on: a kHeap free by address codes its address against the previous kHeap
//     free by address of the same class in the chunk (0 before the first):
//     kColHeapAddr holds zz(addr - class_last_free[class]), kColOther the class as before. A
//     program that frees long-lived blocks (allocated in an earlier chunk) frees them class by
//     class in a regular order (Python's teardown: the same JSON run, 0.057 -> 0.007 B/event).
//     The address is still the chunk's previous address for the next address delta
//     (trace_format.h), as in a plain chunk.
//   - version 6: a kHeap free by slot of a recent block holds its recency rank, where the plain
//     chunk has its age (trace_format.h): the writer thread follows the chunk's allocations in a
//     LiveOrder to turn one into the other, off the recording threads' path. A block freed by
//     its slot (an old one) stays in both sides' LiveOrder: it is older than any block a later
//     free names by rank, so it never counts in a rank.
// The plain chunks of version 5 (snapshots, chunks that did not compress) are version 4's;
// version 6's differ only in the age of a free by slot; version 7's (and its columns) in the
// stack ids, written against the previous (trace_format.h, "Call stacks").
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap_coder.h"
#include "trace_format.h"

namespace adprof::format {

enum Column : uint8_t {
  kColDelta = 0,
  kColSlotLow,
  kColSlotHigh,
  kColSize,
  kColHeapAddr,
  kColOther,
  kColStack,
  kColHeapDelta,
  kColAllocDelta,
  kColRank,
  kColumnCount
};

// Columns of a columnar chunk of a trace of `version` (the stack column is version 4's, the
// delta field columns version 5's, the rank column version 6's).
inline constexpr int columns_in(uint32_t version) {
  return version >= 6   ? kColumnCount
         : version == 5 ? kColumnCount - 1
         : version == 4 ? kColumnCount - 3
                        : kColumnCount - 4;
}

// The classes of a chunk's last kHeap frees by address (version 5's columnar address base).
inline constexpr uint32_t kAddressedFreeClasses = 50;  // HeapCoder::class_of: 0..49

// Event types whose body starts with zz(address - previous address of the chunk).
inline constexpr bool body_has_address(uint8_t type) {
  switch (static_cast<EventType>(type)) {
    case EventType::kAlloc:
    case EventType::kFree:
    case EventType::kRetag:
    case EventType::kLabel:
    case EventType::kDescribe:
    case EventType::kContentHash:
      return true;
    default:
      return false;
  }
}

// Skips the body of a general (non-kHeap) event after its time delta. False if malformed.
// `stacks`: the trace has kFileFlagStacks (an allocation ends with its stack id).
inline bool skip_general_body(uint8_t type, uint8_t operand, Cursor &c, bool stacks) {
  switch (static_cast<EventType>(type)) {
    case EventType::kAlloc:
      c.varint();  // address
      c.varint();  // size
      c.varint();  // slack
      if (operand >= 2) c.varint();
      if (stacks) c.varint();
      break;
    case EventType::kFree:
      c.varint();
      if (operand == 1) c.varint();  // mmap length
      if (operand >= 2) c.varint();
      break;
    case EventType::kOpBegin:
      c.varint();
      c.varint();
      break;
    case EventType::kRetag:
      c.varint();
      c.varint();
      break;
    case EventType::kStep:
    case EventType::kCounter:
      c.varint();
      break;
    case EventType::kName:
      c.varint();
      c.bytes(c.varint());
      break;
    case EventType::kThreadName:
      if (operand == kStackOperand) {
        c.varint();  // id
        uint64_t n = c.varint();
        if (n > kMaxStackFrames) return false;
        for (uint64_t i = 0; i < n; ++i) c.varint();
      } else if (operand == kMappingOperand) {
        c.varint();  // bias
        c.varint();  // start
        c.varint();  // end
        c.bytes(c.varint());
        c.bytes(c.varint());
      } else if (operand == kSharedStackOperand) {
        c.varint();  // id
        const uint64_t n = c.varint(), shared = c.varint();
        if (n > kMaxStackFrames || shared > n) return false;
        for (uint64_t i = shared; i < n; ++i) c.varint();
      } else if (operand == kUnmappingOperand) {
        c.varint();
        c.varint();
      } else if (operand == kStepSummaryOperand) {  // version 8 (trace_format.h)
        for (int i = 0; i < 7; ++i) c.varint();     // step .. peak
        const uint64_t roles = c.varint();
        if (roles > 64) return false;
        for (uint64_t i = 0; i < 2 * roles; ++i) c.varint();
        const uint64_t labels = c.varint();
        if (labels > kMaxStepSummaryLabels) return false;
        for (uint64_t i = 0; i < 3 * labels; ++i) c.varint();
      } else {
        c.bytes(c.varint());
      }
      break;
    case EventType::kAnnotate:
    case EventType::kDescribe: {
      if (static_cast<EventType>(type) == EventType::kDescribe) c.varint();  // address
      c.varint();
      uint64_t n = c.varint();
      if (n > kMaxAnnotateValues) return false;
      for (uint64_t i = 0; i < n; ++i) c.varint();
      break;
    }
    case EventType::kLabel:
    case EventType::kContentHash:
      c.varint();
      c.varint();
      break;
    case EventType::kOpEnd:
    case EventType::kPhase:
    case EventType::kRole:
      break;
    case EventType::kHeap:
    case EventType::kStack:
    case EventType::kMapping:
    case EventType::kUnmapping:
    case EventType::kStepSummary:
      return false;
  }
  return !c.bad;
}

// Room `to_columns` needs for a chunk of `events` tags and `body_len` body bytes, whatever they
// hold: the tags, the directory and the columns. Every body byte goes to one column, or none,
// as it is, but for three codings that grow: version 5's free by address re-codes its address
// (at least one body byte, with its class at least two) as a varint of at most ten bytes (9
// bytes more per event, at most body_len / 2 such events: 4.5 bytes per body byte), version
// 6's free by slot writes its rank (at most 3 bytes) or a 0 and the slot's two bytes for a
// field of at least one byte (2 more), an older one the slot's two bytes (1 more); and version
// 5's kHeap delta fields take a byte per four events in each of two columns. So the columns
// hold at most 5.5 bytes per body byte, and to_columns places each at the length a counting
// pass found (a rank counted as 3). Sized for each column's own worst case instead, this was
// 6 * events + 10 * body_len: 8 MiB of a program's address space for the writer's scratch.
inline size_t columns_scratch_bytes(size_t events, size_t body_len) {
  return events + kColumnCount * kMaxVarintBytes + body_len + body_len / 2 * 9 +
         2 * (events / 4 + 1);
}

inline size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

// One pass of to_columns over a chunk's events. kCount: adds each column's length to `length`
// (a rank as 3 bytes, its most; the live order untouched); else writes the tags to `tag_out`
// and each column at `pos`, checking and following the live order. False if the bodies are
// malformed.
template <bool kCount>
inline bool columns_pass(const uint8_t *tags, uint32_t events, const uint8_t *body, size_t body_len,
                         uint8_t *tag_out, uint8_t **pos, size_t *length, bool stacks,
                         LiveOrder &order, uint32_t version) {
  const bool v5 = version >= 5, v6 = version >= 6;
  Cursor c{body, body + body_len};
  auto put_byte = [&](Column k, uint8_t b) {
    if constexpr (kCount)
      ++length[k];
    else
      *pos[k]++ = b;
  };
  auto put_value = [&](Column k, uint64_t v) {
    if constexpr (kCount)
      length[k] += varint_size(v);
    else
      pos[k] = put_varint(pos[k], v);
  };
  auto copy_varint = [&](Column k) {
    const uint8_t *from = c.p;
    uint64_t v = c.varint();
    size_t n = static_cast<size_t>(c.p - from);
    if constexpr (kCount)
      length[k] += n;
    else
      for (size_t i = 0; i < n; ++i) *pos[k]++ = from[i];
    return v;
  };
  uint64_t last_addr = 0;                                // the chunk's previous address
  uint64_t class_last_free[kAddressedFreeClasses] = {};  // version 5
  uint32_t field_count[2] = {};  // version 5: delta fields in kColHeapDelta, kColAllocDelta
  for (uint32_t i = 0; i < events && !c.bad; ++i) {
    const uint8_t type = tags[i] & 0x0F, operand = tags[i] >> 4;
    if constexpr (!kCount) tag_out[i] = tags[i];
    if (type == static_cast<uint8_t>(EventType::kHeap)) {
      const uint8_t delta_field = (operand >> kHeapDeltaShift) & 3;
      if (v5) {
        if constexpr (!kCount)
          tag_out[i] = static_cast<uint8_t>(tags[i] & ~(3u << (4 + kHeapDeltaShift)));
        const bool apart = stacks && !(operand & kHeapFree);
        const Column k = apart ? kColAllocDelta : kColHeapDelta;
        uint32_t &n = field_count[apart];
        if ((n & 3) == 0) put_byte(k, 0);
        if constexpr (!kCount) pos[k][-1] |= static_cast<uint8_t>(delta_field << (2 * (n & 3)));
        ++n;
      }
      if (delta_field == kHeapDeltaEscape) copy_varint(kColDelta);
      if (operand & kHeapFree) {
        if (operand & kHeapAddressed) {
          if (v5) {
            const uint64_t addr = last_addr + static_cast<uint64_t>(unzigzag(c.varint()));
            const uint64_t cls = copy_varint(kColOther);
            if (cls >= kAddressedFreeClasses) return false;
            put_value(kColHeapAddr, zigzag(static_cast<int64_t>(addr - class_last_free[cls])));
            class_last_free[cls] = addr;
            last_addr = addr;
          } else {
            copy_varint(kColHeapAddr);
            copy_varint(kColOther);
          }
        } else if (v6) {  // 2 * age: rank + 1; 2 * slot + 1: 0, and the slot's two bytes
          const uint64_t field = c.varint();
          if (!(field & 1)) {
            if constexpr (kCount) {
              length[kColRank] += 3;
            } else {
              const uint64_t age = field >> 1;
              if (age == 0 || age > order.size()) return false;
              const uint32_t ordinal = order.size() - static_cast<uint32_t>(age);
              if (!order.live(ordinal)) return false;
              put_value(kColRank, uint64_t{order.rank_of(ordinal)} + 1);
              order.remove(ordinal);
            }
          } else {
            const uint64_t slot = field >> 1;
            if (slot >> 16) return false;
            put_byte(kColRank, 0);
            put_byte(kColSlotLow, static_cast<uint8_t>(slot));
            put_byte(kColSlotHigh, static_cast<uint8_t>(slot >> 8));
          }
        } else {
          uint64_t slot = c.varint();
          if (slot >> 16) return false;
          put_byte(kColSlotLow, static_cast<uint8_t>(slot));
          put_byte(kColSlotHigh, static_cast<uint8_t>(slot >> 8));
        }
      } else {
        if (!(operand & kHeapPredicted)) copy_varint(kColHeapAddr);
        copy_varint(kColSize);
        if (stacks) copy_varint(kColStack);
        if (!kCount && v6 && !order.push()) return false;
      }
    } else {
      if (!kCount && v6 && type == static_cast<uint8_t>(EventType::kAlloc) &&
          operand == kSpaceHeap && !order.push())
        return false;
      copy_varint(kColDelta);
      const uint8_t *from = c.p;
      if (body_has_address(type)) {
        Cursor a{c.p, c.end};
        last_addr += static_cast<uint64_t>(unzigzag(a.varint()));
      }
      if (!skip_general_body(type, operand, c, stacks)) return false;
      if constexpr (kCount)
        length[kColOther] += static_cast<size_t>(c.p - from);
      else
        for (const uint8_t *q = from; q < c.p; ++q) *pos[kColOther]++ = *q;
    }
  }
  return !c.bad && c.p == c.end;
}

// Rewrites a plain chunk (tags, then bodies) as a columnar one of trace format `version` (4 to
// 6; the writer's is kVersion) into `out`, of at least columns_scratch_bytes(). Returns its
// length and the end of its directory (where the columns start), 0 if the bodies are
// malformed (the caller then writes the plain chunk). `stacks`: the trace has kFileFlagStacks.
// `order`: version 6's live allocations, with storage for `events` of them.
inline size_t to_columns(const uint8_t *tags, uint32_t events, const uint8_t *body, size_t body_len,
                         uint8_t *out, size_t cap, size_t *columns_at, bool stacks,
                         LiveOrder &order, uint32_t version = kVersion) {
  // Columns are built after a directory of worst-case size, each where a counting pass placed
  // it, then packed behind the directory.
  const size_t dir_max = kColumnCount * kMaxVarintBytes;
  if (cap < columns_scratch_bytes(events, body_len)) return 0;
  const int count = columns_in(version);
  size_t length[kColumnCount] = {};
  uint8_t *start[kColumnCount], *pos[kColumnCount];
  if (!columns_pass<true>(tags, events, body, body_len, nullptr, pos, length, stacks, order,
                          version))
    return 0;
  uint8_t *next = out + events + dir_max;
  for (int k = 0; k < kColumnCount; ++k) {
    start[k] = pos[k] = next;
    next += length[k];
  }
  if (next > out + cap) return 0;  // beyond columns_scratch_bytes' bound: not a chunk we wrote
  if (version >= 6 && !order.restart(events)) return 0;
  if (!columns_pass<false>(tags, events, body, body_len, out, pos, length, stacks, order, version))
    return 0;
  for (int k = 0; k < kColumnCount; ++k)
    if (pos[k] > start[k] + length[k]) return 0;  // never: the counting pass bounds each column
  // Tags (written above), directory, then the columns packed one after another.
  uint8_t *w = out + events;
  for (int k = 0; k < count; ++k) w = put_varint(w, static_cast<uint64_t>(pos[k] - start[k]));
  *columns_at = static_cast<size_t>(w - out);
  for (int k = 0; k < count; ++k) {
    size_t n = static_cast<size_t>(pos[k] - start[k]);
    for (size_t i = 0; i < n; ++i) w[i] = start[k][i];  // w never passes start[k]: no overlap
    w += n;
  }
  return static_cast<size_t>(w - out);
}

}  // namespace adprof::format
