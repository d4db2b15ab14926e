// Packs trace bytes by hand, following profiler/format/trace_format.h field by field — not
// through the writer's code — so that tests keep the documented encoding honest.
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ptest {

struct Bytes {
  std::vector<uint8_t> v;
  Bytes &u8(uint8_t x) {
    v.push_back(x);
    return *this;
  }
  Bytes &u32(uint32_t x) {
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
  Bytes &u64(uint64_t x) {
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
  Bytes &varint(uint64_t x) {  // LEB128
    while (x >= 0x80) {
      v.push_back(static_cast<uint8_t>(x | 0x80));
      x >>= 7;
    }
    v.push_back(static_cast<uint8_t>(x));
    return *this;
  }
  Bytes &zz(int64_t x) {
    return varint((static_cast<uint64_t>(x) << 1) ^ static_cast<uint64_t>(x >> 63));
  }
  Bytes &text(const std::string &s) {
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes &append(const std::vector<uint8_t> &b) {
    v.insert(v.end(), b.begin(), b.end());
    return *this;
  }
  // An event's tag (type | operand << 4) and time delta.
  Bytes &tag(uint8_t type, uint8_t operand, uint64_t delta) {
    return u8(static_cast<uint8_t>(type | (operand << 4))).varint(delta);
  }
};

inline uint32_t crc(const uint8_t *p, size_t n, uint32_t start = 0) {
  return static_cast<uint32_t>(crc32(start, p, static_cast<uInt>(n)));
}

struct HeaderFields {
  uint32_t version = 1;
  uint64_t pid = 4242;
  uint64_t start_ticks = 1000;
  uint64_t wall_ns = 1700000000000000000ull;
  uint64_t ticks_per_second = 1000000000ull;
  uint32_t page_size = 4096;
  uint32_t flags = 0;
};

inline std::vector<uint8_t> file_header(const HeaderFields &h = {}) {
  Bytes b;
  b.text("ADPROFTR").u32(h.version).u32(64).u64(h.pid).u64(h.start_ticks).u64(h.wall_ns);
  b.u64(h.ticks_per_second).u32(h.page_size).u32(h.flags).u32(0);
  b.u32(crc(b.v.data(), 60));
  return b.v;
}

// A chunk: 40-byte header (CRC over header bytes 8..39 then the stored payload) + payload.
// `extra_flags`: chunk flags beside zstd (version 2: snapshot 2, columns 4).
inline std::vector<uint8_t> chunk(uint32_t thread, uint32_t seq, uint64_t base_ts, uint32_t events,
                                  const std::vector<uint8_t> &raw, bool compress,
                                  uint32_t extra_flags = 0) {
  std::vector<uint8_t> stored = raw;
  uint32_t flags = extra_flags;
  if (compress) {
    stored.resize(ZSTD_compressBound(raw.size()));
    size_t n = ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3);
    stored.resize(n);
    flags |= 1;
  }
  Bytes h;
  h.u32(0x43504441).u32(0).u32(thread).u32(flags).u32(static_cast<uint32_t>(stored.size()));
  h.u32(static_cast<uint32_t>(raw.size())).u64(base_ts).u32(events).u32(seq);
  uint32_t c = crc(h.v.data() + 8, 32);
  c = crc(stored.data(), stored.size(), c);
  for (int i = 0; i < 4; ++i) h.v[4 + i] = static_cast<uint8_t>(c >> (8 * i));
  h.append(stored);
  return h.v;
}

inline std::vector<uint8_t> footer(uint64_t events, uint64_t chunks, uint64_t reason = 0,
                                   uint64_t sig = 0, uint64_t ts = 5000) {
  Bytes body;
  body.varint(events).varint(chunks).varint(0).varint(reason).varint(sig);
  return chunk(0xFFFFFFFFu, 0, ts, 0, body.v, false);
}

// The reference trace of trace_reader_test: thread 0 in a raw chunk with one event of every
// type, thread 1 in a zstd chunk, and a footer. Its decoded form is checked field by field.
inline std::vector<uint8_t> chunk0_events() {
  Bytes e;
  e.tag(4, 1, 0);                                                       // 1000 phase forward
  e.tag(9, 0, 1).varint(1).varint(6).text("matmul");                    // 1001 name 1
  e.tag(2, 0, 2).varint(1).varint(7);                                   // 1003 op_begin matmul#7
  e.tag(5, 5, 0);                                                       // 1003 role adjoint
  e.tag(0, 0, 3).zz(0x1000).varint(100000).varint(12);                  // 1006 alloc heap
  e.tag(0, 2, 1).zz(0x1000).varint(4096).varint(0).varint(1);           // 1007 alloc dev block
  e.tag(1, 1, 1).zz(0x5000).varint(8192);                               // 1008 free mmap 0x7000
  e.tag(6, 7, 0).zz(-0x6000).varint(0x3000);                            // 1008 retag 0x1000 dup
  e.tag(7, 0, 5).varint(42);                                            // 1013 step 42
  e.tag(8, 1, 0).varint(123456);                                        // 1013 counter rss
  e.tag(10, 0, 0).varint(4).text("main");                               // 1013 thread name
  e.tag(11, 0, 1).varint(1).varint(3).varint(1).varint(2).varint(300);  // 1014 annotate
  e.tag(12, 0, 0).zz(0).varint(1);                                      // 1014 label 0x1000
  e.tag(13, 0, 0).zz(0).varint(1).varint(2).varint(3).varint(4);        // 1014 describe f32 [3,4]
  e.tag(14, 0, 0).zz(0).varint(0xDEADBEEFull);                          // 1014 content hash
  e.tag(3, 0, 1);                                                       // 1015 op_end
  e.tag(1, 0, 1).zz(0);                                                 // 1016 free heap 0x1000
  e.tag(1, 2, 1).zz(0x1000).varint(1);                                  // 1017 free dev 0x2000
  return e.v;
}
inline constexpr uint32_t kChunk0Events = 18;

inline std::vector<uint8_t> chunk1_events() {
  Bytes e;
  e.tag(4, 2, 0);                                  // 1005 phase backward
  e.tag(0, 0, 4).zz(0x9000).varint(64).varint(0);  // 1009 alloc heap 0x9000
  e.tag(1, 0, 10).zz(0);                           // 1019 free 0x9000
  return e.v;
}
inline constexpr uint32_t kChunk1Events = 3;

inline std::vector<uint8_t> reference_trace(bool with_footer = true) {
  Bytes f;
  f.append(file_header());
  f.append(chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false));
  f.append(chunk(1, 0, 1005, kChunk1Events, chunk1_events(), true));
  if (with_footer) f.append(footer(kChunk0Events + kChunk1Events, 2));
  return f.v;
}

}  // namespace ptest
