// Columnar chunks (format version 2 on, chunk flag kChunkFlagColumns): the writer thread, before
// it compresses a chunk, moves each kind of field of the bodies into a column of its own, so
// that zstd codes each with an alphabet of its own (a slot's low byte is uniform, its high byte
// a few bits, a time delta almost always 1 byte of a few values: mixed in one stream, every
// byte costs the mixture's code length). The recording threads never pay for this.
//
// Raw columnar chunk := tags[event count] length:varint*kColumnCount column*kColumnCount
//   column kColDelta     delta_ticks of every event that has one (kHeap: escaped deltas)
//   column kColSlotLow   kHeap free by slot: slot & 0xFF
//   column kColSlotHigh  kHeap free by slot: slot >> 8 (slots are < 2^16)
//   column kColSize      kHeap allocation: size
//   column kColHeapAddr  kHeap allocation not predicted, kHeap free by address: the address
//   column kColOther     everything else: kHeap free's class, every other event's body
//   column kColStack     kHeap allocation: stack id (version 4 on, traces with kFileFlagStacks;
//                        version 4 chunks have this seventh column, empty without stacks;
//                        versions 2-3 have six: columns_in(version))
// Each field keeps the coding it has in a plain chunk (trace_format.h); only where its bytes
// lie changes, except the slot, which is two bytes here and a varint in a plain chunk.
#pragma once

#include <cstddef>
#include <cstdint>

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
  kColumnCount
};

// Columns of a columnar chunk of a trace of `version` (the stack column is version 4's).
inline constexpr int columns_in(uint32_t version) {
  return version >= 4 ? kColumnCount : kColumnCount - 1;
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
      } else if (operand == kUnmappingOperand) {
        c.varint();
        c.varint();
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
      return false;
  }
  return !c.bad;
}

// Room `to_columns` needs.
inline size_t columns_scratch_bytes(size_t events, size_t body_len) {
  return 3 * events + kColumnCount * kMaxVarintBytes + 5 * body_len;
}

// Rewrites a plain chunk (tags, then bodies) as a columnar one into `out`, of at least
// columns_scratch_bytes(). Returns its length and the end of its directory (where the columns
// start), 0 if the bodies are malformed (the caller then writes the plain chunk). Writes the
// current version's columns; `stacks`: the trace has kFileFlagStacks.
inline size_t to_columns(const uint8_t *tags, uint32_t events, const uint8_t *body, size_t body_len,
                         uint8_t *out, size_t cap, size_t *columns_at, bool stacks) {
  // Columns are built after a directory of worst-case size, then packed behind it.
  const size_t dir_max = kColumnCount * kMaxVarintBytes;
  if (cap < columns_scratch_bytes(events, body_len)) return 0;
  uint8_t *col_base = out + events + dir_max;
  // Column k may take at most `bound[k]` bytes: the slot planes at most one byte per event,
  // the others at most the body's length.
  uint8_t *start[kColumnCount], *pos[kColumnCount];
  const size_t bound[kColumnCount] = {body_len, events,   events,  body_len,
                                      body_len, body_len, body_len};
  uint8_t *next = col_base;
  for (int k = 0; k < kColumnCount; ++k) {
    start[k] = pos[k] = next;
    next += bound[k];
  }
  Cursor c{body, body + body_len};
  auto copy_varint = [&](Column k) {
    const uint8_t *from = c.p;
    uint64_t v = c.varint();
    size_t n = static_cast<size_t>(c.p - from);
    for (size_t i = 0; i < n; ++i) *pos[k]++ = from[i];
    return v;
  };
  for (uint32_t i = 0; i < events && !c.bad; ++i) {
    const uint8_t type = tags[i] & 0x0F, operand = tags[i] >> 4;
    if (type == static_cast<uint8_t>(EventType::kHeap)) {
      if (((operand >> kHeapDeltaShift) & 3) == kHeapDeltaEscape) copy_varint(kColDelta);
      if (operand & kHeapFree) {
        if (operand & kHeapAddressed) {
          copy_varint(kColHeapAddr);
          copy_varint(kColOther);
        } else {
          uint64_t slot = c.varint();
          if (slot >> 16) return 0;
          *pos[kColSlotLow]++ = static_cast<uint8_t>(slot);
          *pos[kColSlotHigh]++ = static_cast<uint8_t>(slot >> 8);
        }
      } else {
        if (!(operand & kHeapPredicted)) copy_varint(kColHeapAddr);
        copy_varint(kColSize);
        if (stacks) copy_varint(kColStack);
      }
    } else {
      copy_varint(kColDelta);
      const uint8_t *from = c.p;
      if (!skip_general_body(type, operand, c, stacks)) return 0;
      for (const uint8_t *q = from; q < c.p; ++q) *pos[kColOther]++ = *q;
    }
  }
  if (c.bad || c.p != c.end) return 0;
  // Tags, directory, then the columns packed one after another.
  for (uint32_t i = 0; i < events; ++i) out[i] = tags[i];
  uint8_t *w = out + events;
  for (int k = 0; k < kColumnCount; ++k)
    w = put_varint(w, static_cast<uint64_t>(pos[k] - start[k]));
  *columns_at = static_cast<size_t>(w - out);
  for (int k = 0; k < kColumnCount; ++k) {
    size_t n = static_cast<size_t>(pos[k] - start[k]);
    for (size_t i = 0; i < n; ++i) w[i] = start[k][i];  // w never passes start[k]: no overlap
    w += n;
  }
  return static_cast<size_t>(w - out);
}

}  // namespace adprof::format
