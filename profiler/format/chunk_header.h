// A chunk's 40-byte header (trace_format.h, "ChunkHeader") as read: its fields, its checks and
// its CRC-32 over header bytes 8..39 and the stored payload. The reader's chunk decoder
// (chunk_decoder.h) and the column bench read headers through it. (The writer packs them in
// preload/recorder.cpp; tests/profiler/trace_builder.h packs them by hand on purpose, from the
// documentation, so that the tests hold the code to it.)
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>

#include "trace_format.h"

namespace adprof::format {

struct ChunkHeader {
  uint32_t crc = 0;
  uint32_t thread = 0;  // kFooterThread: the footer
  uint32_t flags = 0;   // kChunkFlagZstd, kChunkFlagSnapshot, kChunkFlagColumns
  uint32_t stored = 0;  // payload bytes in the file
  uint32_t raw = 0;     // payload bytes inflated
  uint64_t base_ts = 0;
  uint32_t events = 0;
  uint32_t seq = 0;
};

// The CRC-32 of a header's bytes 8..39 (`header`) followed by the stored payload.
inline uint32_t chunk_crc(const uint8_t *header, const uint8_t *stored, size_t stored_size) {
  uLong crc = crc32(0L, header + 8, kChunkHeaderSize - 8);
  crc = crc32(crc, stored, static_cast<uInt>(stored_size));
  return static_cast<uint32_t>(crc);
}

// The header at `h`, field by field, unchecked.
inline ChunkHeader read_chunk_header(const uint8_t *h) {
  ChunkHeader c;
  c.crc = get_u32(h + 4);
  c.thread = get_u32(h + 8);
  c.flags = get_u32(h + 12);
  c.stored = get_u32(h + 16);
  c.raw = get_u32(h + 20);
  c.base_ts = get_u64(h + 24);
  c.events = get_u32(h + 32);
  c.seq = get_u32(h + 36);
  return c;
}

// A header any writer could have written: the magic, sizes within kMaxChunkBytes, known flags,
// a payload stored raw of its raw size. One that is not ends a file's readable part.
inline bool chunk_header_valid(const uint8_t *h) {
  const ChunkHeader c = read_chunk_header(h);
  return get_u32(h) == kChunkMagic && c.stored <= kMaxChunkBytes && c.raw <= kMaxChunkBytes &&
         (c.flags & ~(kChunkFlagZstd | kChunkFlagSnapshot | kChunkFlagColumns)) == 0 &&
         ((c.flags & kChunkFlagZstd) || c.stored == c.raw);
}

// The header's CRC matches its bytes and the stored payload's.
inline bool chunk_checksum_ok(const uint8_t *header, const uint8_t *stored, size_t stored_size) {
  return chunk_crc(header, stored, stored_size) == get_u32(header + 4);
}

}  // namespace adprof::format
