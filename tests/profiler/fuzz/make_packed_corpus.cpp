// Writes the hand-packed part of the trace reader's fuzz corpus (tests/profiler/corpus): the
// reference trace and variants of it, and traces crafted at the reader's limits (thread
// indices, counts, sizes, sequence numbers, footer counts). Packed with trace_builder.h, so the
// same bytes every time: tests/profiler/corpus/make_corpus.sh runs it.
// usage: profiler_make_packed_corpus DIR
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trace_builder.h"

namespace {

using namespace ptest;

std::string g_dir;
int g_failures = 0;

void put(const std::string &name, const std::vector<uint8_t> &bytes) {
  const std::string path = g_dir + "/" + name;
  FILE *f = fopen(path.c_str(), "wb");
  if (!f || fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || fclose(f) != 0) {
    fprintf(stderr, "make_packed_corpus: cannot write '%s': %s\n", path.c_str(), strerror(errno));
    ++g_failures;
  }
}

std::vector<uint8_t> with_header(std::initializer_list<std::vector<uint8_t>> chunks,
                                 uint32_t version = 1) {
  HeaderFields h;
  h.version = version;
  Bytes f;
  f.append(file_header(h));
  for (const auto &c : chunks) f.append(c);
  return f.v;
}

// `count` general heap allocations of `size` bytes (version 1), 0x1000 apart.
std::vector<uint8_t> allocations(uint64_t size, int count) {
  Bytes e;
  for (int i = 0; i < count; ++i) e.tag(0, 0, 1).zz(0x1000).varint(size).varint(0);
  return with_header({chunk(0, 0, 1000, static_cast<uint32_t>(count), e.v, false),
                      footer(static_cast<uint64_t>(count), 1)});
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    fputs("usage: profiler_make_packed_corpus DIR\n", stderr);
    return 2;
  }
  g_dir = argv[1];

  // The reference trace and its variants.
  put("packed-reference.adtrace", reference_trace());
  put("packed-no-footer.adtrace", reference_trace(false));
  Bytes sig;
  sig.append(reference_trace(false)).append(footer(21, 2, 1, 6));
  put("packed-sigabrt.adtrace", sig.v);
  put("packed-header-only.adtrace", file_header());
  put("packed-seq-gap.adtrace",
      with_header({chunk(1, 2, 1005, kChunk1Events, chunk1_events(), true)}));

  // Damage the footer reveals: a thread's first chunk missing (its sequence starts at 1), an
  // event count or a chunk count the file does not hold.
  put("packed-first-chunk-missing.adtrace",
      with_header({chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false),
                   chunk(1, 1, 1005, kChunk1Events, chunk1_events(), true),
                   footer(kChunk0Events + 2 * kChunk1Events, 3)}));
  Bytes events;
  events.append(reference_trace(false)).append(footer(kChunk0Events + kChunk1Events + 5, 2));
  put("packed-footer-events-mismatch.adtrace", events.v);
  Bytes chunks;
  chunks.append(reference_trace(false)).append(footer(kChunk0Events + kChunk1Events, 7));
  put("packed-footer-chunks-mismatch.adtrace", chunks.v);

  // Thread indices at their limits (0xFFFFFFFF is the footer's).
  for (const auto &[name, tid] : {std::pair<const char *, uint32_t>{"7fffffff", 0x7fffffffu},
                                  {"2p24", 1u << 24},
                                  {"fffffffe", 0xFFFFFFFEu}})
    put(std::string("packed-thread-") + name + ".adtrace",
        with_header({chunk(tid, 0, 1005, kChunk1Events, chunk1_events(), false),
                     chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false),
                     footer(kChunk0Events + kChunk1Events, 2)}));
  // Many threads, each one chunk: the reader's per-thread state.
  {
    Bytes f;
    f.append(file_header());
    for (uint32_t t = 0; t < 200; ++t)
      f.append(chunk(t * 977, 0, 1000 + t, kChunk1Events, chunk1_events(), false));
    f.append(footer(200 * kChunk1Events, 200));
    put("packed-200-threads.adtrace", f.v);
  }

  // Counts and sequence numbers at their limits, checksums right.
  put("packed-event-count-max.adtrace",
      with_header({chunk(0, 0, 1000, 0xFFFFFFFFu, chunk0_events(), false), footer(21, 1)}));
  put("packed-sequence-max.adtrace",
      with_header({chunk(0, 0xFFFFFFFFu, 1000, kChunk0Events, chunk0_events(), false),
                   chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false)}));
  {
    Bytes e;
    e.tag(9, 0, 0).varint(1).varint(4096).text(std::string(4096, 'n'));  // name at its limit
    e.tag(9, 0, 0).varint(2).varint(4097).text(std::string(4097, 'n'));  // one byte over
    put("packed-name-limit.adtrace", with_header({chunk(0, 0, 1000, 2, e.v, false)}));
  }
  {
    Bytes e;
    e.tag(11, 0, 0).varint(1).varint(32);  // annotate: 32 values, the limit
    for (int i = 0; i < 32; ++i) e.varint(UINT64_MAX);
    e.tag(13, 0, 0).zz(0x1000).varint(1).varint(16);  // describe: rank 16, the limit
    for (int i = 0; i < 16; ++i) e.varint(UINT64_MAX);
    e.tag(13, 0, 0).zz(0).varint(1).varint(17);  // rank 17: over
    put("packed-values-limit.adtrace", with_header({chunk(0, 0, 1000, 3, e.v, false)}));
  }
  {
    Bytes e;  // times and addresses at the ends of 64 bits
    e.tag(0, 0, UINT64_MAX - 1000).zz(INT64_MIN).varint(8).varint(0);
    e.tag(1, 0, UINT64_MAX).zz(INT64_MAX);
    e.tag(8, 0, 0).varint(UINT64_MAX);
    put("packed-u64-limits.adtrace", with_header({chunk(0, 0, 1000, 3, e.v, false)}));
  }

  // Sizes at their limits: four allocations of 2^63 bytes (each impossible), 300 of 2^56 (the
  // largest size the reader takes; their total passes its limit, 2^62), an unmapped length of
  // 2^63.
  put("packed-size-2p63.adtrace", allocations(uint64_t{1} << 63, 4));
  put("packed-size-2p56.adtrace", allocations(uint64_t{1} << 56, 300));
  {
    Bytes e;
    e.tag(0, 1, 0).zz(0x10000).varint(1u << 20).varint(0);  // mmap 1 MiB
    e.tag(1, 1, 1).zz(0).varint(uint64_t{1} << 63);         // munmap of 2^63 bytes
    put("packed-munmap-2p63.adtrace",
        with_header({chunk(0, 0, 1000, 2, e.v, false), footer(2, 1)}));
  }
  // Version 3: a compact allocation of the largest size it codes (2^48), and one over.
  {
    Bytes tags, bodies;
    tags.u8(0x0F).u8(0x0F);  // kHeap allocations, not predicted, delta 0
    bodies.zz(0).varint(uint64_t{1} << 48);
    bodies.zz(0).varint((uint64_t{1} << 48) + 1);
    Bytes raw;
    raw.append(tags.v).append(bodies.v);
    put("packed-v3-heap-size-limit.adtrace", with_header({chunk(0, 0, 1000, 2, raw.v, false)}, 3));
  }
  return g_failures ? 1 : 0;
}
