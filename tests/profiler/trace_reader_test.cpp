// The reader against hand-packed bytes (trace_builder.h packs them per trace_format.h, not with
// the writer's code): every event type decoded field by field, threads merged by time, zstd and
// raw chunks, the footer; and what the reader does with damaged bytes.
#include "adprof/trace_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>

#include "../support/process.h"
#include "../support/sanitized_build.h"
#include "adprof/replay.h"
#include "adprof/report.h"
#include "chunk_columns.h"
#include "heap_coder.h"
#include "trace_builder.h"

namespace {

using namespace adprof_test;
using namespace ptest;  // trace_builder.h
using adprof::Event;
using adprof::TraceReader;
using ET = adprof::format::EventType;

// Version 6's column split needs room to follow a chunk's live allocations (chunk_columns.h).
struct SplitOrder {
  std::vector<uint64_t> words;
  std::vector<uint16_t> counts;
  adprof::format::LiveOrder order;
  explicit SplitOrder(size_t events)
      : words(adprof::format::LiveOrder::words_for(events)),
        counts(adprof::format::LiveOrder::counts_for(events)) {
    order.attach(words.data(), counts.data(), events);
  }
};

std::string save(const TempDir &dir, const std::string &name, const std::vector<uint8_t> &b) {
  std::string path = dir / name;
  write_file(path, std::string(b.begin(), b.end()));
  return path;
}

std::vector<Event> read_all(TraceReader &r, std::vector<std::string> *texts = nullptr,
                            std::vector<std::vector<uint64_t>> *values = nullptr) {
  std::vector<Event> out;
  Event e;
  while (r.next(e)) {
    out.push_back(e);
    if (texts) texts->emplace_back(e.text());
    if (values) values->emplace_back(e.values().begin(), e.values().end());
    out.back().clear_payload();
  }
  return out;
}

// A version 7 trace of `threads` threads, one plain chunk each, all starting at the same tick:
// a phase, an allocation (each thread's at a later time than the one before) and, with
// `frees`, its free after every thread's allocation. Every thread is then open in the merge at
// once.
std::vector<uint8_t> overlapping_threads(uint32_t threads, bool frees) {
  HeaderFields h;
  h.version = 7;
  Bytes f;
  f.append(file_header(h));
  for (uint32_t t = 0; t < threads; ++t) {
    Bytes tags, bodies;
    tags.u8(4 | 1 << 4);  // phase forward
    bodies.varint(0);
    tags.u8(0);  // kAlloc, heap
    bodies.varint(10 + t).zz(0x10000 + 64 * t).varint(48).varint(0);
    if (frees) {
      tags.u8(1);  // kFree, heap
      bodies.varint(threads + 100).zz(0);
    }
    Bytes raw;
    raw.append(tags.v).append(bodies.v);
    f.append(chunk(t, 0, 1000, frees ? 3 : 2, raw.v, false));
  }
  f.append(footer((frees ? 3ull : 2ull) * threads, threads, 0, 0, 1000 + 2ull * threads + 200));
  return f.v;
}

// The peak resident memory (KiB) of `adprof ARGS...` (its output discarded), -1 if it failed.
[[maybe_unused]] long peak_rss_kib_of_cli(const std::vector<std::string> &args) {
  std::vector<std::string> argv = {cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char *> cargv;
  for (auto &a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (pid < 0 || wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return -1;
  return usage.ru_maxrss;
}

// Readers' memory follows what is live, not the threads ever seen (issue 28, item 8): 20,000
// threads whose one chunk each overlaps the others' took 3.5 GB in every command (a heap coder
// of 175 KB, zeroed, per thread waiting in the merge) and 37 s to dump. Now a thread whose
// chunk is decoded to its end holds its next event only (46 MB, 0.4 s), and one whose chunk is
// still open a coder's touched pages (about 23 KB: 457 MB for 20,000 with a third event each).
TEST(TraceReaderMemory, FollowsTheThreadsBeingDecoded) {
  TempDir dir;
  constexpr uint32_t kThreads = 20000;
  for (const bool frees : {false, true}) {
    SCOPED_TRACE(frees ? "three events per thread" : "two events per thread");
    const std::string path = dir / (frees ? "three.adtrace" : "two.adtrace");
    write_file(path, [&] {
      const std::vector<uint8_t> b = overlapping_threads(kThreads, frees);
      return std::string(b.begin(), b.end());
    }());
    adprof::TraceReader reader(path);
    adprof::Event e;
    uint64_t events = 0;
    while (reader.next(e)) ++events;
    EXPECT_EQ(events, (frees ? 3u : 2u) * kThreads);
    EXPECT_TRUE(reader.end().complete) << reader.end().reason;
#ifndef ADPROF_SANITIZED_BUILD  // a sanitized adprof's memory is its runtime's shadow and
                                // quarantine
    for (const char *command : {"dump", "report"}) {
      const long kib = peak_rss_kib_of_cli({command, path});
      ASSERT_GT(kib, 0) << command << " failed";
      RecordProperty(std::string(command) + (frees ? "_three" : "_two") + "_peak_rss_kib",
                     std::to_string(kib));
      EXPECT_LT(kib, (frees ? 1024 : 160) * 1024) << command << ": " << kib / 1024 << " MiB";
    }
#endif
  }
}

TEST(TraceReaderBytes, HeaderFields) {
  TempDir dir;
  TraceReader r(save(dir, "t", reference_trace()));
  EXPECT_EQ(r.header().version, 1u);
  EXPECT_EQ(r.header().pid, 4242u);
  EXPECT_EQ(r.header().start_ticks, 1000u);
  EXPECT_EQ(r.header().start_wall_ns, 1700000000000000000ull);
  EXPECT_EQ(r.header().ticks_per_second, 1000000000ull);
  EXPECT_EQ(r.header().page_size, 4096u);
  EXPECT_EQ(r.header().flags, 0u);
  EXPECT_EQ(r.thread_count(), 2u);
  EXPECT_TRUE(r.end().complete);
  EXPECT_FALSE(r.end().cut);
  EXPECT_FALSE(r.end().exec);
  EXPECT_EQ(r.end().footer_events, 21u);
  EXPECT_DOUBLE_EQ(r.seconds(1000 + 500000000), 0.5);
}

TEST(TraceReaderBytes, EveryEventDecodedFieldByField) {
  TempDir dir;
  TraceReader r(save(dir, "t", reference_trace()));
  std::vector<std::string> texts;
  std::vector<std::vector<uint64_t>> values;
  std::vector<Event> ev = read_all(r, &texts, &values);
  ASSERT_EQ(ev.size(), 21u);
  EXPECT_EQ(r.stats().events, 21u);
  EXPECT_EQ(r.stats().chunks, 2u);
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
  EXPECT_EQ(r.stats().missing_chunks, 0u);

  // Expected merge by time: thread 1's events at 1005, 1009 and 1019 fall between thread 0's.
  struct Want {
    ET type;
    uint8_t operand;
    uint32_t thread;
    uint64_t ticks, addr, a, b;
    uint32_t device;
  };
  const Want want[] = {
      {ET::kPhase, 1, 0, 1000, 0, 0, 0, 0},
      {ET::kName, 0, 0, 1001, 0, 1, 0, 0},
      {ET::kOpBegin, 0, 0, 1003, 0, 1, 7, 0},
      {ET::kRole, 5, 0, 1003, 0, 0, 0, 0},
      {ET::kPhase, 2, 1, 1005, 0, 0, 0, 0},
      {ET::kAlloc, 0, 0, 1006, 0x1000, 100000, 12, 0},
      {ET::kAlloc, 2, 0, 1007, 0x2000, 4096, 0, 1},
      {ET::kFree, 1, 0, 1008, 0x7000, 8192, 0, 0},
      {ET::kRetag, 7, 0, 1008, 0x1000, 0, 0x3000, 0},
      {ET::kAlloc, 0, 1, 1009, 0x9000, 64, 0, 0},
      {ET::kStep, 0, 0, 1013, 0, 42, 0, 0},
      {ET::kCounter, 1, 0, 1013, 0, 123456, 0, 0},
      {ET::kThreadName, 0, 0, 1013, 0, 0, 0, 0},
      {ET::kAnnotate, 0, 0, 1014, 0, 1, 0, 0},
      {ET::kLabel, 0, 0, 1014, 0x1000, 1, 0, 0},
      {ET::kDescribe, 0, 0, 1014, 0x1000, 1, 0, 0},
      {ET::kContentHash, 0, 0, 1014, 0x1000, 0xDEADBEEF, 0, 0},
      {ET::kOpEnd, 0, 0, 1015, 0, 0, 0, 0},
      {ET::kFree, 0, 0, 1016, 0x1000, 0, 0, 0},
      {ET::kFree, 2, 0, 1017, 0x2000, 0, 0, 1},
      {ET::kFree, 0, 1, 1019, 0x9000, 0, 0, 0},
  };
  for (size_t i = 0; i < ev.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(ev[i].type, want[i].type);
    EXPECT_EQ(ev[i].operand, want[i].operand);
    EXPECT_EQ(ev[i].thread, want[i].thread);
    EXPECT_EQ(ev[i].ticks, want[i].ticks);
    EXPECT_EQ(ev[i].addr, want[i].addr);
    EXPECT_EQ(ev[i].a, want[i].a);
    EXPECT_EQ(ev[i].b, want[i].b);
    EXPECT_EQ(ev[i].device, want[i].device);
  }
  EXPECT_EQ(texts[1], "matmul");
  EXPECT_EQ(texts[12], "main");
  EXPECT_EQ(values[13], (std::vector<uint64_t>{1, 2, 300}));
  EXPECT_EQ(values[15], (std::vector<uint64_t>{3, 4}));

  // A second pass after rewind() gives the same events.
  r.rewind();
  std::vector<Event> again = read_all(r);
  ASSERT_EQ(again.size(), ev.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(again[i].type, ev[i].type);
    EXPECT_EQ(again[i].ticks, ev[i].ticks);
    EXPECT_EQ(again[i].addr, ev[i].addr);
  }
}

TEST(TraceReaderBytes, ReplayOfTheReferenceTrace) {
  TempDir dir;
  TraceReader r(save(dir, "t", reference_trace()));
  adprof::Replay replay;
  Event e;
  uint64_t peak = 0;
  while (r.next(e)) {
    replay.apply(e);
    peak = std::max(peak, replay.host_live());
  }
  EXPECT_EQ(peak, 100000u + 64u);
  EXPECT_EQ(replay.host_live(), 0u);
  EXPECT_EQ(replay.device_live(), 0u);
  EXPECT_EQ(replay.unmatched_frees(), 0u);  // the mmap free is a range unmap, never unmatched
  EXPECT_EQ(replay.name(1), "matmul");
}

TEST(TraceReaderBytes, NoFooterMeansCut) {
  TempDir dir;
  TraceReader r(save(dir, "t", reference_trace(false)));
  EXPECT_TRUE(r.end().cut);
  EXPECT_FALSE(r.end().complete);
  EXPECT_NE(r.end().reason.find("cut"), std::string::npos);
  EXPECT_EQ(read_all(r).size(), 21u);
}

TEST(TraceReaderBytes, FooterReasons) {
  TempDir dir;
  auto with_footer = [&](uint64_t reason, uint64_t sig) {
    Bytes f;
    f.append(reference_trace(false)).append(footer(21, 2, reason, sig));
    return save(dir, "t" + std::to_string(reason), f.v);
  };
  TraceReader sig(with_footer(1, 11));
  EXPECT_TRUE(sig.end().cut);
  EXPECT_NE(sig.end().reason.find("SIGSEGV"), std::string::npos) << sig.end().reason;
  TraceReader werr(with_footer(2, 0));
  EXPECT_TRUE(werr.end().cut);
  EXPECT_NE(werr.end().reason.find("write error"), std::string::npos) << werr.end().reason;
  TraceReader exec(with_footer(3, 0));
  EXPECT_TRUE(exec.end().exec);
  EXPECT_FALSE(exec.end().cut);
}

TEST(TraceReaderBytes, HeaderErrors) {
  TempDir dir;
  auto bytes = reference_trace();
  {
    auto b = bytes;
    b[20] ^= 1;  // pid byte: header CRC no longer matches
    EXPECT_THROW(TraceReader(save(dir, "crc", b)), adprof::TraceError);
  }
  {
    // A version newer than the reader's is refused with one line naming it (as the readers
    // of versions 1-3 refuse version 4).
    HeaderFields h;
    h.version = adprof::format::kVersion + 1;
    Bytes b;
    b.append(file_header(h));
    const std::string newer = "version " + std::to_string(h.version);
    try {
      TraceReader r(save(dir, "newer", b.v));
      FAIL() << newer << " accepted";
    } catch (const adprof::TraceError &e) {
      EXPECT_NE(std::string(e.what()).find(newer), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  {
    HeaderFields h;
    h.ticks_per_second = 0;
    EXPECT_THROW(TraceReader(save(dir, "clock", file_header(h))), adprof::TraceError);
  }
  EXPECT_THROW(TraceReader(save(dir, "short", {bytes.begin(), bytes.begin() + 63})),
               adprof::TraceError);
  EXPECT_THROW(TraceReader(save(dir, "empty", {})), adprof::TraceError);
  EXPECT_THROW(TraceReader(dir / "missing"), adprof::TraceError);
  EXPECT_THROW(TraceReader(dir.path()), adprof::TraceError);  // a directory
  // A header alone is a valid (empty, cut) trace.
  TraceReader alone(save(dir, "alone", file_header()));
  EXPECT_TRUE(alone.end().cut);
  EXPECT_EQ(read_all(alone).size(), 0u);
}

TEST(TraceReaderBytes, DamagedPayloadSkipsOnlyThatChunk) {
  TempDir dir;
  auto b = reference_trace();
  b[64 + 40 + 5] ^= 0x40;  // inside thread 0's raw payload
  TraceReader r(save(dir, "t", b));
  auto ev = read_all(r);
  EXPECT_EQ(r.stats().corrupt_chunks, 1u);
  ASSERT_EQ(ev.size(), 3u);  // thread 1's chunk
  for (auto &e : ev) EXPECT_EQ(e.thread, 1u);
  // Not cut, but not whole either.
  EXPECT_FALSE(r.end().cut);
  EXPECT_TRUE(r.end().damaged);
  EXPECT_FALSE(r.end().complete);
  EXPECT_NE(r.end().reason.find("1 chunk(s) damaged"), std::string::npos) << r.end().reason;
}

TEST(TraceReaderBytes, DamagedChunkHeaderEndsTheReadablePart) {
  TempDir dir;
  auto b = reference_trace();
  size_t second = 64 + 40 + chunk0_events().size();
  b[second + 1] ^= 0xFF;  // chunk magic of thread 1's chunk
  TraceReader r(save(dir, "t", b));
  EXPECT_TRUE(r.end().cut);
  EXPECT_EQ(r.end().cut_at_offset, second);
  EXPECT_NE(r.end().reason.find("damaged chunk header"), std::string::npos) << r.end().reason;
  EXPECT_EQ(read_all(r).size(), kChunk0Events);
}

TEST(TraceReaderBytes, SequenceGapCountsMissingChunks) {
  TempDir dir;
  Bytes f;
  f.append(file_header());
  f.append(chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false));
  f.append(chunk(1, 3, 1005, kChunk1Events, chunk1_events(), true));   // seqs 0..2 lost
  f.append(chunk(1, 5, 2000, kChunk1Events, chunk1_events(), false));  // seq 4 lost
  TraceReader r(save(dir, "t", f.v));
  EXPECT_EQ(r.stats().missing_chunks, 4u);  // known from the index, before any event is read
  EXPECT_TRUE(r.end().damaged);
  auto ev = read_all(r);
  EXPECT_EQ(ev.size(), kChunk0Events + 2 * kChunk1Events);
  EXPECT_EQ(r.stats().missing_chunks, 4u);
}

// A thread's first chunk lost: sequence numbers start at 0, so the trace is damaged even with
// a footer that says the program exited normally.
TEST(TraceReaderBytes, FirstChunkMissingIsDamage) {
  TempDir dir;
  Bytes f;
  f.append(file_header());
  f.append(chunk(0, 0, 1000, kChunk0Events, chunk0_events(), false));
  f.append(chunk(1, 1, 1005, kChunk1Events, chunk1_events(), true));  // thread 1's chunk 0 lost
  f.append(footer(kChunk0Events + 2 * kChunk1Events, 3));
  TraceReader r(save(dir, "t", f.v));
  EXPECT_EQ(r.stats().missing_chunks, 1u);
  EXPECT_FALSE(r.end().complete);
  EXPECT_FALSE(r.end().cut);
  EXPECT_TRUE(r.end().damaged);
  EXPECT_NE(r.end().reason.find("1 chunk(s) missing (the first: thread 1's chunk 0)"),
            std::string::npos)
      << r.end().reason;
  EXPECT_EQ(read_all(r).size(), kChunk0Events + kChunk1Events);
  EXPECT_FALSE(r.end().complete);
}

// The footer counts every event and chunk the writer wrote: a file that holds fewer was
// damaged, even when no sequence number is missing (a thread's last chunk, a whole thread).
TEST(TraceReaderBytes, FooterCountsMustMatch) {
  TempDir dir;
  {
    Bytes f;
    f.append(reference_trace(false)).append(footer(kChunk0Events + kChunk1Events + 5, 2));
    TraceReader r(save(dir, "events", f.v));
    EXPECT_TRUE(r.end().complete);  // not known before the events are read
    EXPECT_EQ(read_all(r).size(), kChunk0Events + kChunk1Events);
    EXPECT_FALSE(r.end().complete);
    EXPECT_TRUE(r.end().damaged);
    EXPECT_NE(r.end().reason.find("the end record counts 26 events, 21 were read"),
              std::string::npos)
        << r.end().reason;
    // A second pass keeps the verdict.
    r.rewind();
    EXPECT_FALSE(r.end().complete);
    EXPECT_EQ(read_all(r).size(), kChunk0Events + kChunk1Events);
    EXPECT_FALSE(r.end().complete);
  }
  {
    Bytes f;
    f.append(reference_trace(false)).append(footer(kChunk0Events + kChunk1Events, 4));
    TraceReader r(save(dir, "chunks", f.v));
    EXPECT_EQ(r.stats().missing_chunks, 2u);
    EXPECT_FALSE(r.end().complete);
    EXPECT_TRUE(r.end().damaged);
  }
  {
    Bytes f;
    f.append(reference_trace(false)).append(footer(kChunk0Events + kChunk1Events, 1));
    TraceReader r(save(dir, "extra", f.v));
    EXPECT_FALSE(r.end().complete);
    EXPECT_NE(r.end().reason.find("the file holds 2 chunks, its end record counts 1"),
              std::string::npos)
        << r.end().reason;
  }
  {  // the reference trace itself is whole
    TraceReader r(save(dir, "whole", reference_trace()));
    read_all(r);
    EXPECT_TRUE(r.end().complete) << r.end().reason;
    EXPECT_FALSE(r.end().damaged);
  }
}

// The writer counts a snapshot's events as well as those of the chunk that replaces it.
TEST(TraceReaderBytes, RealTracesAreWhole) {
  for (const char *name :
       {"real-scopes.adtrace", "real-v5-columnar.adtrace", "real-v5-stacks.adtrace",
        "real-v3-columnar.adtrace", "real-v2-columnar.adtrace", "real-exec-first-image.adtrace"}) {
    SCOPED_TRACE(name);
    TraceReader r(std::string(ADPROF_TEST_CORPUS) + "/" + name);
    read_all(r);
    EXPECT_TRUE(r.end().complete) << r.end().reason;
  }
}

TEST(TraceReaderBytes, EachChunkRestartsItsDeltaBases) {
  // Two chunks of one thread: the second's first address is coded from 0 and its first time
  // delta from its own base timestamp.
  TempDir dir;
  Bytes c0, c1;
  c0.tag(0, 0, 5).zz(0x5000).varint(10).varint(0);
  c1.tag(1, 0, 7).zz(0x5000);
  Bytes f;
  f.append(file_header());
  f.append(chunk(0, 0, 2000, 1, c0.v, false));
  f.append(chunk(0, 1, 3000, 1, c1.v, true));
  TraceReader r(save(dir, "t", f.v));
  auto ev = read_all(r);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].ticks, 2005u);
  EXPECT_EQ(ev[1].ticks, 3007u);
  EXPECT_EQ(ev[1].addr, 0x5000u);
  EXPECT_EQ(ev[1].type, ET::kFree);
}

TEST(TraceReaderBytes, UndecodableEventsAreCountedNotTrusted) {
  // A chunk with a valid checksum but an unknown event type (15) after one good event.
  TempDir dir;
  Bytes c;
  c.tag(0, 0, 1).zz(0x100).varint(8).varint(0);
  c.tag(15, 0, 1);
  c.tag(0, 0, 1).zz(0x100).varint(8).varint(0);
  Bytes f;
  f.append(file_header()).append(chunk(0, 0, 1000, 3, c.v, false));
  TraceReader r(save(dir, "t", f.v));
  auto ev = read_all(r);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_EQ(r.stats().corrupt_chunks, 1u);
}

// ---- version 2: compact heap events, split tags, columnar chunks ----

// The heap coder's table slot of an address in an empty table (heap_coder.h: Fibonacci
// hashing of addr >> 3 to 13 bits), computed here from the documented formula.
uint64_t home_slot(uint64_t addr) { return ((addr >> 3) * 0x9E3779B97F4A7C15ull) >> 51; }

// Six events of one thread, from base 1000 (usable 112 for size 100: class 14):
//   phase forward; kHeap alloc 0x10000 size 100, not predicted; kHeap free of it by slot;
//   kHeap alloc size 100 predicted (the class's last free: 0x10000); kHeap free 0x20000 by
//   address (class 14), with an escaped delta of 5; general kAlloc 0x30000 size 64.
// `slot`: the slot of the first allocation, version 2's default; version 3's is 0.
struct V2Events {
  Bytes tags;
  // Field bytes by column (chunk_columns.h): delta, slot low, slot high, size, heap addr, other.
  Bytes col[6];
  uint64_t slot;
  explicit V2Events(uint64_t first_slot = home_slot(0x10000)) : slot(first_slot) {
    tags.u8(0x14);  // phase (4), operand forward (1)
    col[0].varint(0);
    tags.u8(0x2F);  // kHeap alloc, delta 1
    col[4].zz(0x10000 - 112);
    col[3].varint(100);
    tags.u8(0x1F);  // kHeap free by slot, delta 0
    col[1].u8(static_cast<uint8_t>(slot));
    col[2].u8(static_cast<uint8_t>(slot >> 8));
    tags.u8(0xAF);  // kHeap alloc predicted, delta 1
    col[3].varint(100);
    tags.u8(0xFF);  // kHeap free by address, delta escaped
    col[0].varint(5);
    col[4].zz(0x20000);
    col[5].varint(14);
    tags.u8(0x00);  // kAlloc heap
    col[0].varint(1);
    col[5].zz(0x10000).varint(64).varint(0);
  }
  // The plain chunk: tags, then each event's body in order (the slot as a varint).
  std::vector<uint8_t> plain() const {
    Bytes b;
    b.append(tags.v);
    b.varint(0);                                   // phase: delta
    b.zz(0x10000 - 112).varint(100);               // alloc
    b.varint(slot);                                // free by slot
    b.varint(100);                                 // predicted alloc
    b.varint(5).zz(0x20000).varint(14);            // addressed free
    b.varint(1).zz(0x10000).varint(64).varint(0);  // general alloc
    return b.v;
  }
  std::vector<uint8_t> columnar() const {
    Bytes b;
    b.append(tags.v);
    for (const Bytes &c : col) b.varint(c.v.size());
    for (const Bytes &c : col) b.append(c.v);
    return b.v;
  }
};

// A version 2 (or `version`) trace of the given chunks (no footer).
std::vector<uint8_t> v2_trace(std::initializer_list<std::vector<uint8_t>> chunks,
                              uint32_t version = 2) {
  HeaderFields h;
  h.version = version;
  Bytes f;
  f.append(file_header(h));
  for (const auto &c : chunks) f.append(c);
  return f.v;
}

void expect_v2_events(const std::vector<Event> &ev) {
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].type, ET::kPhase);
  EXPECT_EQ(ev[1].type, ET::kAlloc);
  EXPECT_EQ(ev[1].addr, 0x10000u);
  EXPECT_EQ(ev[1].a, 100u);
  EXPECT_EQ(ev[1].b, 12u);
  EXPECT_EQ(ev[1].operand, 0u);
  EXPECT_EQ(ev[1].ticks, 1001u);
  EXPECT_EQ(ev[2].type, ET::kFree);
  EXPECT_EQ(ev[2].addr, 0x10000u);
  EXPECT_EQ(ev[2].ticks, 1001u);
  EXPECT_EQ(ev[3].type, ET::kAlloc);
  EXPECT_EQ(ev[3].addr, 0x10000u);
  EXPECT_EQ(ev[3].ticks, 1002u);
  EXPECT_EQ(ev[4].type, ET::kFree);
  EXPECT_EQ(ev[4].addr, 0x20000u);
  EXPECT_EQ(ev[4].ticks, 1007u);
  EXPECT_EQ(ev[5].type, ET::kAlloc);
  EXPECT_EQ(ev[5].addr, 0x30000u);
  EXPECT_EQ(ev[5].a, 64u);
  EXPECT_EQ(ev[5].b, 0u);
  EXPECT_EQ(ev[5].ticks, 1008u);
}

TEST(TraceReaderBytesV2, CompactHeapEventsPlainAndColumnar) {
  TempDir dir;
  V2Events v;
  for (bool columnar : {false, true}) {
    for (bool compress : {false, true}) {
      TraceReader r(save(dir, "v2",
                         v2_trace({chunk(0, 0, 1000, 6, columnar ? v.columnar() : v.plain(),
                                         compress, columnar ? 4 : 0)})));
      SCOPED_TRACE(columnar ? "columnar" : "plain");
      expect_v2_events(read_all(r));
      EXPECT_EQ(r.stats().corrupt_chunks, 0u);
    }
  }
}

TEST(TraceReaderBytesV2, SnapshotIsReplacedByTheFullChunk) {
  // A snapshot (flag 2) of the first three events, then the full chunk with the same seq.
  TempDir dir;
  V2Events v;
  Bytes snap;
  snap.append({v.tags.v.begin(), v.tags.v.begin() + 3});
  snap.varint(0).zz(0x10000 - 112).varint(100).varint(home_slot(0x10000));
  TraceReader r(save(dir, "v2",
                     v2_trace({chunk(0, 0, 1000, 3, snap.v, false, 2),
                               chunk(0, 0, 1000, 6, v.columnar(), true, 4)})));
  expect_v2_events(read_all(r));
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
}

TEST(TraceReaderBytesV2, DamagedHeapStreamsAreCountedNotTrusted) {
  TempDir dir;
  V2Events v;
  auto read = [&](const std::vector<uint8_t> &raw, uint32_t flags) {
    TraceReader r(save(dir, "v2", v2_trace({chunk(0, 0, 1000, 6, raw, false, flags)})));
    auto ev = read_all(r);
    EXPECT_EQ(r.stats().corrupt_chunks, 1u);
    return ev.size();
  };
  // A free of an empty slot: the events before it are kept, the rest of the chunk is not.
  auto plain = v.plain();
  plain[6 + 1 + 3 + 1] ^= 0x01;  // the slot varint's low byte (after the alloc's body)
  EXPECT_EQ(read(plain, 0), 2u);
  // A column directory longer than the chunk.
  auto columnar = v.columnar();
  columnar[6] = 0x7F;
  EXPECT_EQ(read(columnar, 4), 0u);
  // A predicted allocation with nothing to predict from (first heap event of the chunk).
  Bytes bad;
  bad.u8(0xAF).varint(100);
  TraceReader r(save(dir, "v2b", v2_trace({chunk(0, 0, 1000, 1, bad.v, false)})));
  EXPECT_EQ(read_all(r).size(), 0u);
  EXPECT_EQ(r.stats().corrupt_chunks, 1u);
}

// ---- version 3: slots from a free list ----

TEST(TraceReaderBytesV3, CompactHeapEventsPlainAndColumnar) {
  TempDir dir;
  V2Events v(0);  // the first allocation of a chunk takes slot 0
  for (bool columnar : {false, true}) {
    TraceReader r(save(dir, "v3",
                       v2_trace({chunk(0, 0, 1000, 6, columnar ? v.columnar() : v.plain(), true,
                                       columnar ? 4 : 0)},
                                3)));
    SCOPED_TRACE(columnar ? "columnar" : "plain");
    expect_v2_events(read_all(r));
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
  }
}

TEST(TraceReaderBytesV3, SlotsAreReusedLastFreedFirst) {
  // Allocations of size 100 (usable 112) at A, B, C take slots 0, 1, 2; B and then A are
  // freed; D takes slot 0, the one freed last, and its free by slot 0 is D's. Slot 1 is free
  // then: a free of it is damage, which ends the chunk.
  const uint64_t A = 0x10000, B = 0x20000, C = 0x30000, D = 0x40000;
  Bytes c;
  for (int i = 0; i < 3; ++i) c.u8(0x2F);  // allocations, delta 1
  c.u8(0x1F).u8(0x1F);                     // frees by slot
  c.u8(0x2F);                              // allocation
  c.u8(0x1F).u8(0x1F);                     // frees by slot
  c.zz(A - 112).varint(100).zz(B - (A + 112)).varint(100).zz(C - (B + 112)).varint(100);
  c.varint(1).varint(0);
  c.zz(D - (C + 112)).varint(100);  // A, on top of its class's stack, is not D: no prediction
  c.varint(0).varint(1);
  TempDir dir;
  TraceReader r(save(dir, "v3", v2_trace({chunk(0, 0, 1000, 8, c.v, false)}, 3)));
  auto ev = read_all(r);
  ASSERT_EQ(ev.size(), 7u);
  const std::pair<ET, uint64_t> want[] = {{ET::kAlloc, A}, {ET::kAlloc, B}, {ET::kAlloc, C},
                                          {ET::kFree, B},  {ET::kFree, A},  {ET::kAlloc, D},
                                          {ET::kFree, D}};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(ev[i].type, want[i].first) << i;
    EXPECT_EQ(ev[i].addr, want[i].second) << i;
  }
  EXPECT_EQ(r.stats().corrupt_chunks, 1u);
}

// next_events() hands out runs read in place; an event's text or values stay valid with its
// run. Two threads whose texts and values alternate with heap events (a run ends after each
// text, so the thread's buffer is not overwritten before the batch keeps a copy).
TEST(TraceReaderBytesV3, RunsKeepEveryText) {
  auto chunk_of = [](uint32_t thread, const std::string &prefix) {
    Bytes tags, bodies;
    for (int i = 0; i < 40; ++i) {
      tags.u8(0x09);  // name: delta, id, text
      const std::string name = prefix + std::to_string(i);
      bodies.varint(1).varint(static_cast<uint64_t>(i + 1)).varint(name.size()).text(name);
      tags.u8(0x0B);  // annotate: delta, kind, count, values
      bodies.varint(0).varint(1).varint(2).varint(static_cast<uint64_t>(i)).varint(thread);
    }
    Bytes raw;
    raw.append(tags.v).append(bodies.v);
    return chunk(thread, 0, 1000, 80, raw.v, true);
  };
  TempDir dir;
  TraceReader r(save(dir, "runs", v2_trace({chunk_of(0, "zero-"), chunk_of(1, "one-")}, 3)));
  std::vector<std::string> names[2];
  std::vector<uint64_t> values[2];
  for (std::span<const Event> run; !(run = r.next_events()).empty();) {
    for (const Event &e : run) {  // every event of the run, read after the whole run is out
      if (e.type == ET::kName) names[e.thread].emplace_back(e.text());
      if (e.type == ET::kAnnotate) {
        ASSERT_EQ(e.values().size(), 2u);
        EXPECT_EQ(e.values()[1], e.thread);
        values[e.thread].push_back(e.values()[0]);
      }
    }
  }
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_EQ(names[t].size(), 40u);
    ASSERT_EQ(values[t].size(), 40u);
    for (size_t i = 0; i < 40; ++i) {
      EXPECT_EQ(names[t][i], (t ? "one-" : "zero-") + std::to_string(i));
      EXPECT_EQ(values[t][i], i);
    }
  }
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
}

// ---- bounded by live memory, not by thread indices or sizes ----------------------------------

namespace bounded {

using adprof::kMaxEventBytes;
using adprof::kMaxTotalBytes;

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A version 3 plain chunk: the tags, then the bodies (delta, then the fields).
std::vector<uint8_t> v3_raw(const Bytes &tags, const Bytes &bodies) {
  Bytes raw;
  raw.append(tags.v).append(bodies.v);
  return raw.v;
}

// `threads` short-lived threads, one after the other, each allocating and freeing one block.
std::vector<uint8_t> many_threads(uint32_t threads) {
  HeaderFields h;
  h.version = 3;
  Bytes f;
  f.append(file_header(h));
  for (uint32_t t = 0; t < threads; ++t) {
    Bytes tags, bodies;
    tags.u8(0x00).u8(0x01);                                       // kAlloc heap, kFree heap
    bodies.varint(0).zz(0x100000 + 64 * t).varint(48).varint(0);  // 48 bytes, no slack
    bodies.varint(1).zz(0);                                       // its free
    f.append(chunk(t, 0, 1000 + 10 * t, 2, v3_raw(tags, bodies), false));
  }
  f.append(footer(2 * threads, threads, 0, 0, 1000 + 10 * threads + 10));
  return f.v;
}

// The 20,000 threads of a program that starts a thread per task: the reader keeps a heap coder
// (about 150 KB) only for the threads whose chunk is being read, and the report's per-thread
// state follows the threads, so the report takes megabytes, not gigabytes.
TEST(TraceReaderBounded, ManyShortLivedThreads) {
  TempDir dir;
  const std::string path = save(dir, "t", many_threads(20000));
  const long before = max_rss_kib();
  adprof::Report r = adprof::analyze(path);
  const long grown_mib = (max_rss_kib() - before) / 1024;
  EXPECT_TRUE(r.complete) << r.end_reason;
  EXPECT_EQ(r.threads, 20000u);
  EXPECT_EQ(r.allocations, 20000u);
  EXPECT_EQ(r.peak, 48u);
  EXPECT_LT(grown_mib, 256) << "the report of 20,000 short threads took " << grown_mib << " MiB";
}

// A thread index anywhere in 0..2^32-2 (here at its limits, in a file of a few hundred bytes)
// is only a number: events carry the thread's rank among the file's threads.
TEST(TraceReaderBounded, ThreadIndicesAtTheirLimits) {
  TempDir dir;
  const long before = max_rss_kib();
  for (uint32_t tid : {0x7fffffffu, 1u << 24, 0xFFFFFFFEu}) {
    SCOPED_TRACE(tid);
    Bytes f;
    f.append(file_header());
    f.append(chunk(tid, 0, 1005, kChunk1Events, chunk1_events(), false));
    Bytes name;
    name.tag(10, 0, 0).varint(4).text("work");
    f.append(chunk(3, 0, 1000, 1, name.v, false));
    f.append(footer(kChunk1Events + 1, 2));
    const std::string path = save(dir, std::to_string(tid), f.v);
    TraceReader reader(path);
    EXPECT_EQ(reader.thread_count(), 2u);
    for (const Event &e : read_all(reader))
      EXPECT_EQ(e.thread, e.type == ET::kThreadName ? 0u : 1u);
    adprof::Report r = adprof::analyze(path);
    EXPECT_EQ(r.threads, 2u);
    EXPECT_EQ(r.peak, 64u);
    ASSERT_EQ(r.thread_names.size(), 2u);
    EXPECT_EQ(r.thread_names[0], "work");
  }
  const long grown_mib = (max_rss_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64) << "three small files took " << grown_mib << " MiB";
}

adprof::Report allocations(const TempDir &dir, const std::string &name, uint64_t size, int count) {
  Bytes e;
  for (int i = 0; i < count; ++i) e.tag(0, 0, 1).zz(0x1000).varint(size).varint(0);
  Bytes f;
  f.append(file_header()).append(chunk(0, 0, 1000, static_cast<uint32_t>(count), e.v, false));
  f.append(footer(static_cast<uint64_t>(count), 1));
  return adprof::analyze(save(dir, name, f.v));
}

// Sizes no address space holds are damaged events; totals never wrap.
TEST(TraceReaderBounded, SizesAndTotalsDoNotOverflow) {
  TempDir dir;
  // Four allocations of 2^63 bytes: impossible; the chunk is damaged from the first one.
  adprof::Report huge = allocations(dir, "huge", uint64_t{1} << 63, 4);
  EXPECT_EQ(huge.corrupt_chunks, 1u);
  EXPECT_FALSE(huge.complete);
  EXPECT_EQ(huge.peak, 0u);
  EXPECT_EQ(huge.bytes_allocated, 0u);
  // 300 of 2^56 each: the first 64 fit the reader's total (2^62), the rest is damage.
  adprof::Report many = allocations(dir, "many", kMaxEventBytes, 300);
  EXPECT_EQ(many.corrupt_chunks, 1u);
  EXPECT_FALSE(many.complete);
  EXPECT_EQ(many.allocations, kMaxTotalBytes / kMaxEventBytes);
  EXPECT_EQ(many.peak, kMaxTotalBytes);
  EXPECT_EQ(many.bytes_allocated, kMaxTotalBytes);
  // Just below the limits: read as they are.
  adprof::Report big = allocations(dir, "big", kMaxEventBytes, 2);
  EXPECT_TRUE(big.complete) << big.end_reason;
  EXPECT_EQ(big.peak, 2 * kMaxEventBytes);
}

}  // namespace bounded

}  // namespace

namespace {

// The corpus's traces crafted at the reader's limits (fuzz/make_packed_corpus.cpp): the damaged
// ones are never taken for whole, the odd but consistent ones are.
TEST(TraceReaderCorpus, CraftedLimits) {
  const std::string corpus = ADPROF_TEST_CORPUS;
  for (const char *name :
       {"packed-first-chunk-missing", "packed-footer-events-mismatch",
        "packed-footer-chunks-mismatch", "packed-size-2p63", "packed-size-2p56",
        "packed-munmap-2p63", "packed-event-count-max", "packed-sequence-max", "packed-name-limit",
        "packed-values-limit", "packed-v3-heap-size-limit"}) {
    SCOPED_TRACE(name);
    TraceReader r(corpus + "/" + name + ".adtrace");
    read_all(r);
    EXPECT_FALSE(r.end().complete);
    EXPECT_FALSE(r.end().reason.empty());
  }
  for (const char *name : {"packed-thread-7fffffff", "packed-thread-2p24", "packed-thread-fffffffe",
                           "packed-200-threads"}) {
    SCOPED_TRACE(name);
    TraceReader r(corpus + "/" + name + ".adtrace");
    for (const Event &e : read_all(r)) EXPECT_LT(e.thread, r.thread_count());
    EXPECT_TRUE(r.end().complete) << r.end().reason;
  }
}

}  // namespace

// ---- version 4: call stacks ----

namespace {

// A chunk of a trace with stacks: a mapping, a stack, a compact allocation and a general one
// using it, and the mapping's unload (trace_format.h, "Call stacks").
std::vector<uint8_t> v4_stack_chunk(bool columnar) {
  const uint64_t A = 0x10000;
  Bytes tags, bodies;
  tags.u8(0x2A);  // kThreadName, operand 2: mapping
  bodies.varint(0).varint(0x400000).varint(0x400000).varint(0x500000).varint(8).text("/bin/foo");
  bodies.varint(2).u8(0xAB).u8(0xCD);
  tags.u8(0x1A);  // kThreadName, operand 1: stack 5 of two frames
  bodies.varint(1).varint(5).varint(2).varint(0x401234).zz(0x402000 - 0x401234);
  tags.u8(0x2F);  // kHeap allocation, delta 1, address given: size 100 (usable 112), stack 5
  bodies.zz(A - 112).varint(100).varint(5);
  tags.u8(0x00);  // kAlloc heap: 64 bytes, no slack, stack 5
  bodies.varint(1).zz(0x20000).varint(64).varint(0).varint(5);
  tags.u8(0x3A);  // kThreadName, operand 3: unmapping
  bodies.varint(1).varint(0x400000).varint(0x400000);
  std::vector<uint8_t> raw = tags.v;
  raw.insert(raw.end(), bodies.v.begin(), bodies.v.end());
  if (!columnar) return chunk(0, 0, 1000, 5, raw, false);
  std::vector<uint8_t> out(adprof::format::columns_scratch_bytes(5, bodies.v.size()));
  size_t dir_at = 0;
  SplitOrder order(5);
  const size_t n =
      adprof::format::to_columns(tags.v.data(), 5, bodies.v.data(), bodies.v.size(), out.data(),
                                 out.size(), &dir_at, true, order.order, 4);
  EXPECT_GT(n, 0u) << "the writer's column split takes the stack events";
  out.resize(n);
  return chunk(0, 0, 1000, 5, out, true, adprof::format::kChunkFlagColumns);
}

}  // namespace

TEST(TraceReaderBytesV4, CallStackEventsPlainAndColumnar) {
  TempDir dir;
  for (bool columnar : {false, true}) {
    SCOPED_TRACE(columnar ? "columnar" : "plain");
    HeaderFields h;
    h.version = 4;
    h.flags = adprof::format::kFileFlagStacks;
    Bytes f;
    f.append(file_header(h)).append(v4_stack_chunk(columnar));
    TraceReader r(save(dir, columnar ? "columnar" : "plain", f.v));
    EXPECT_TRUE(r.header().stacks());
    std::vector<std::string> texts;
    std::vector<std::vector<uint64_t>> values;
    const std::vector<Event> ev = read_all(r, &texts, &values);
    ASSERT_EQ(ev.size(), 5u);
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
    EXPECT_EQ(ev[0].type, ET::kMapping);
    EXPECT_EQ(ev[0].addr, 0x400000u);
    EXPECT_EQ(ev[0].a, 0x400000u);
    EXPECT_EQ(ev[0].b, 0x500000u);
    EXPECT_EQ(texts[0], std::string("/bin/foo\0\xAB\xCD", 11));
    EXPECT_EQ(ev[1].type, ET::kStack);
    EXPECT_EQ(ev[1].a, 5u);
    EXPECT_EQ(values[1], (std::vector<uint64_t>{0x401234, 0x402000}));
    EXPECT_EQ(ev[2].type, ET::kAlloc);
    EXPECT_EQ(ev[2].addr, 0x10000u);
    EXPECT_EQ(ev[2].a, 100u);
    EXPECT_EQ(ev[2].stack, 5u);
    EXPECT_EQ(ev[3].type, ET::kAlloc);
    EXPECT_EQ(ev[3].addr, 0x20000u);
    EXPECT_EQ(ev[3].a, 64u);
    EXPECT_EQ(ev[3].stack, 5u);
    EXPECT_EQ(ev[4].type, ET::kUnmapping);
    EXPECT_EQ(ev[4].addr, 0x400000u);
  }
}

// The same events in a version 3 trace are read as version 3 defines them: kThreadName's
// operand means nothing there, and allocations carry no stack id.
TEST(TraceReaderBytesV4, Version3HasNoStacks) {
  TempDir dir;
  Bytes tags, bodies;
  tags.u8(0x00);
  bodies.varint(1).zz(0x20000).varint(64).varint(0);
  std::vector<uint8_t> raw = tags.v;
  raw.insert(raw.end(), bodies.v.begin(), bodies.v.end());
  HeaderFields h;
  h.version = 3;
  h.flags = adprof::format::kFileFlagStacks;  // ignored before version 4
  Bytes f;
  f.append(file_header(h)).append(chunk(0, 0, 1000, 1, raw, false));
  TraceReader r(save(dir, "v3", f.v));
  EXPECT_FALSE(r.header().stacks());
  const std::vector<Event> ev = read_all(r);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].a, 64u);
  EXPECT_EQ(ev[0].stack, 0u);
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
}

// ---- version 5: kHeap delta fields in a column, addressed frees against their class ----

namespace {

// Seven events of one thread from base 1000, as the recording threads write them (the plain
// chunk) and as version 5's columnar chunk holds them (chunk_columns.h), packed by hand:
//   1000 phase forward
//   1001 kAlloc heap 0x30000, 64 bytes (slot 0; the chunk's previous address is 0x30000)
//   1003 kHeap free by address 0x20000, class 14 (delta field 2)
//   1010 kHeap free by address 0x20070, class 14 (delta 7, escaped)
//   1011 kFree heap 0x30000 (general form: against the previous address, 0x20070)
//   1011 kHeap allocation size 100 (usable 112, class 14), predicted: 0x20070 (slot 1)
//   1012 kHeap free by slot 1
struct V5Events {
  static constexpr uint32_t kEvents = 7;
  Bytes tags_plain, tags_columnar, plain_bodies;
  Bytes col[adprof::format::kColumnCount];
  V5Events() {
    namespace f = adprof::format;
    auto both = [&](uint8_t plain_tag, uint8_t columnar_tag) {
      tags_plain.u8(plain_tag);
      tags_columnar.u8(columnar_tag);
    };
    both(0x14, 0x14);
    plain_bodies.varint(0);
    col[f::kColDelta].varint(0);
    both(0x00, 0x00);
    plain_bodies.varint(1).zz(0x30000).varint(64).varint(0);
    col[f::kColDelta].varint(1);
    col[f::kColOther].zz(0x30000).varint(64).varint(0);
    both(0xDF, 0x9F);  // free | addressed, delta field 2 (0x40) in the plain tag only
    plain_bodies.zz(0x20000 - 0x30000).varint(14);
    col[f::kColHeapAddr].zz(0x20000);  // class 14's first addressed free: against 0
    col[f::kColOther].varint(14);
    both(0xFF, 0x9F);  // delta field 3: escaped
    plain_bodies.varint(7).zz(0x70).varint(14);
    col[f::kColDelta].varint(7);
    col[f::kColHeapAddr].zz(0x70);  // against class 14's last, 0x20000
    col[f::kColOther].varint(14);
    both(0x01, 0x01);
    plain_bodies.varint(1).zz(0x30000 - 0x20070);
    col[f::kColDelta].varint(1);
    col[f::kColOther].zz(0x30000 - 0x20070);
    both(0x8F, 0x8F);  // predicted allocation, delta field 0
    plain_bodies.varint(100);
    col[f::kColSize].varint(100);
    both(0x3F, 0x1F);  // free by slot, delta field 1
    plain_bodies.varint(1);
    col[f::kColSlotLow].u8(1);
    col[f::kColSlotHigh].u8(0);
    // The delta fields of the four kHeap events, 2, 3, 0, 1, from the low bits.
    col[f::kColHeapDelta].u8(2 | 3 << 2 | 0 << 4 | 1 << 6);
  }
  std::vector<uint8_t> plain() const {
    Bytes b;
    b.append(tags_plain.v).append(plain_bodies.v);
    return b.v;
  }
  std::vector<uint8_t> columnar() const {
    Bytes b;
    b.append(tags_columnar.v);
    for (int k = 0; k < adprof::format::columns_in(5); ++k) b.varint(col[k].v.size());
    for (int k = 0; k < adprof::format::columns_in(5); ++k) b.append(col[k].v);
    return b.v;
  }
};

std::vector<uint8_t> trace_of(uint32_t version, uint32_t flags,
                              std::initializer_list<std::vector<uint8_t>> chunks) {
  HeaderFields h;
  h.version = version;
  h.flags = flags;
  Bytes f;
  f.append(file_header(h));
  for (const auto &c : chunks) f.append(c);
  return f.v;
}

void expect_v5_events(const std::vector<Event> &ev) {
  ASSERT_EQ(ev.size(), V5Events::kEvents);
  const struct {
    ET type;
    uint64_t ticks, addr, size;
  } want[] = {{ET::kPhase, 1000, 0, 0},      {ET::kAlloc, 1001, 0x30000, 64},
              {ET::kFree, 1003, 0x20000, 0}, {ET::kFree, 1010, 0x20070, 0},
              {ET::kFree, 1011, 0x30000, 0}, {ET::kAlloc, 1011, 0x20070, 100},
              {ET::kFree, 1012, 0x20070, 0}};
  for (size_t i = 0; i < V5Events::kEvents; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ev[i].type, want[i].type);
    EXPECT_EQ(ev[i].ticks, want[i].ticks);
    EXPECT_EQ(ev[i].addr, want[i].addr);
    EXPECT_EQ(ev[i].a, want[i].size);
  }
  EXPECT_EQ(ev[5].b, 12u);  // usable 112
}

}  // namespace

TEST(TraceReaderBytesV5, HandPackedColumnsAndPlain) {
  TempDir dir;
  V5Events v;
  for (bool columnar : {false, true}) {
    SCOPED_TRACE(columnar ? "columnar" : "plain");
    TraceReader r(
        save(dir, "v5",
             trace_of(5, 0,
                      {chunk(0, 0, 1000, V5Events::kEvents, columnar ? v.columnar() : v.plain(),
                             true, columnar ? adprof::format::kChunkFlagColumns : 0)})));
    EXPECT_EQ(r.header().version, 5u);
    expect_v5_events(read_all(r));
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
  }
}

// The writer's column split (to_columns, run by the writer thread) produces exactly the
// hand-packed version 5 chunk from the plain one the recording threads wrote, and version 4's
// from the same bytes, which a version 4 reader reads as the same events.
TEST(TraceReaderBytesV5, WriterSplitIsTheDocumentedLayout) {
  namespace f = adprof::format;
  V5Events v;
  const std::vector<uint8_t> plain = v.plain();
  const size_t body_len = plain.size() - V5Events::kEvents;
  auto split = [&](uint32_t version) {
    std::vector<uint8_t> out(f::columns_scratch_bytes(V5Events::kEvents, body_len));
    size_t dir_at = 0;
    SplitOrder order(V5Events::kEvents);
    const size_t n =
        f::to_columns(plain.data(), V5Events::kEvents, plain.data() + V5Events::kEvents, body_len,
                      out.data(), out.size(), &dir_at, false, order.order, version);
    out.resize(n);
    return out;
  };
  EXPECT_EQ(split(5), v.columnar());
  const std::vector<uint8_t> v4 = split(4);
  ASSERT_FALSE(v4.empty());
  TempDir dir;
  TraceReader r(
      save(dir, "v4",
           trace_of(4, 0, {chunk(0, 0, 1000, V5Events::kEvents, v4, true, f::kChunkFlagColumns)})));
  expect_v5_events(read_all(r));
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
}

TEST(TraceReaderBytesV5, DamagedColumnsAreCountedNotTrusted) {
  TempDir dir;
  auto read = [&](const std::vector<uint8_t> &raw) {
    TraceReader r(save(dir, "v5",
                       trace_of(5, 0,
                                {chunk(0, 0, 1000, V5Events::kEvents, raw, false,
                                       adprof::format::kChunkFlagColumns)})));
    auto ev = read_all(r);
    EXPECT_EQ(r.stats().corrupt_chunks, 1u);
    return ev.size();
  };
  // No heap delta column: the first kHeap event has no delta field; the two events before it
  // are kept.
  V5Events v;
  v.col[adprof::format::kColHeapDelta] = Bytes{};
  EXPECT_EQ(read(v.columnar()), 2u);
  // A class out of range in an addressed free.
  V5Events w;
  w.col[adprof::format::kColOther] = Bytes{};
  w.col[adprof::format::kColOther].zz(0x30000).varint(64).varint(0).varint(50);
  EXPECT_EQ(read(w.columnar()), 2u);
}

// Round trip on many events: a stream written as the recording threads write it (recorder.h's
// choices, made with the same HeapCoder), read plain and columnar as version 6 (frees by age,
// by rank) and 5 (by slot), and columnar as version 4 (the writer's split of each), with and
// without stacks, gives back every event.
TEST(TraceReaderBytesV5, RoundTripOfARandomStream) {
  namespace f = adprof::format;
  struct Truth {
    ET type;
    uint64_t ticks, addr, size, usable;
    uint32_t stack;
  };
  for (bool stacks : {false, true}) {
    SCOPED_TRACE(stacks ? "stacks" : "no stacks");
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    auto rand = [&](uint64_t n) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return rng % n;
    };
    auto coder = std::make_unique<f::HeapCoder>();
    coder->reset();
    // The plain bodies of version 5 (a free by slot: the slot) and 6 (its age).
    struct TwoBodies {
      Bytes v5, v6;
      TwoBodies &varint(uint64_t x) {
        v5.varint(x);
        v6.varint(x);
        return *this;
      }
      TwoBodies &zz(int64_t x) {
        v5.zz(x);
        v6.zz(x);
        return *this;
      }
    } body;
    Bytes tags;
    std::vector<Truth> truth;
    const uint64_t base = 5000;
    uint64_t ts = base, last_addr = 0;
    std::vector<std::pair<uint64_t, uint64_t>> live, earlier;  // (address, size)
    for (int i = 0; i < 64; ++i) earlier.push_back({0x7f0000000000 + 0x10000 * i, 16 + 8 * i});
    std::map<uint64_t, std::vector<uint64_t>> freed;  // per usable size: addresses, LIFO
    uint64_t fresh = 0x500000000;
    auto tick = [&]() {
      const uint64_t choices[] = {0, 0, 1, 1, 2, 3, 7, 300};
      const uint64_t dt = choices[rand(8)];
      ts += dt;
      return dt;
    };
    auto heap_tag = [&](uint8_t bits, uint64_t dt) {
      const uint64_t field = dt < 3 ? dt : 3;
      tags.u8(static_cast<uint8_t>(15 | (bits | field << f::kHeapDeltaShift) << 4));
      if (field == 3) body.varint(dt);
    };
    for (int i = 0; i < 20000; ++i) {
      const uint64_t what = rand(100);
      const uint64_t dt = tick();
      if (what < 45) {  // allocation: a freed block of its size (LIFO, mostly), else fresh
        const uint64_t sizes[] = {24, 24, 48, 100, 100, 200, 1000, 5000, 40000};
        const uint64_t size = sizes[rand(9)];
        const uint64_t usable = f::default_usable_size(size);
        const uint32_t cls = f::HeapCoder::class_of(usable);
        uint64_t addr;
        auto &pool = freed[usable];
        if (!pool.empty() && rand(10) < 8) {
          addr = pool.back();
          pool.pop_back();
        } else {
          addr = fresh;
          fresh += usable + (rand(4) == 0 ? 64 : 0);
        }
        const uint32_t stack = static_cast<uint32_t>(rand(5));
        if (coder->predicted(cls) == addr) {
          heap_tag(f::kHeapPredicted, dt);
        } else {
          heap_tag(0, dt);
          body.zz(static_cast<int64_t>(addr - coder->next_expected(cls, usable)));
        }
        body.varint(size);
        if (stacks) body.varint(stack);
        if (const uint32_t slot = coder->on_alloc(addr, cls); slot != f::HeapCoder::kNoSlot)
          coder->remember(addr, slot);
        live.push_back({addr, size});
        truth.push_back({ET::kAlloc, ts, addr, size, usable, stacks ? stack : 0});
      } else if (what < 85 && !live.empty()) {  // free of a live block, by slot
        // Mostly one of the last few (a rank in columnar version 6), now and then any (an
        // old one: its age).
        const size_t k = rand(8) == 0 ? rand(live.size())
                                      : live.size() - 1 - rand(std::min<size_t>(live.size(), 8));
        const auto [addr, size] = live[k];
        live.erase(live.begin() + static_cast<ptrdiff_t>(k));
        const uint32_t slot = coder->take(addr);
        ASSERT_NE(slot, f::HeapCoder::kNoSlot);
        heap_tag(f::kHeapFree, dt);
        body.v5.varint(slot);
        const uint64_t age = coder->age_of(slot);  // recorder.h's choice
        body.v6.varint(age <= f::kRankedAge ? 2 * age : 2 * uint64_t{slot} + 1);
        coder->on_free_slot(slot);
        freed[f::default_usable_size(size)].push_back(addr);
        truth.push_back({ET::kFree, ts, addr, 0, 0, 0});
      } else if (what < 95 && !earlier.empty()) {  // a block of an earlier chunk: by address
        const size_t k = rand(earlier.size());
        const auto [addr, size] = earlier[k];
        earlier.erase(earlier.begin() + static_cast<ptrdiff_t>(k));
        const uint64_t usable = f::default_usable_size(size);
        const uint32_t cls = f::HeapCoder::class_of(usable);
        heap_tag(f::kHeapFree | f::kHeapAddressed, dt);
        body.zz(static_cast<int64_t>(addr - last_addr)).varint(cls);
        last_addr = addr;
        coder->on_free_address(addr, cls);
        freed[usable].push_back(addr);
        truth.push_back({ET::kFree, ts, addr, 0, 0, 0});
      } else {  // a general event with an address: a label of a live block or of anything
        const uint64_t addr = live.empty() ? 0x1234 : live[rand(live.size())].first;
        tags.u8(12);  // kLabel
        body.varint(dt).zz(static_cast<int64_t>(addr - last_addr)).varint(1);
        last_addr = addr;
        truth.push_back({ET::kLabel, ts, addr, 1, 0, 0});
      }
    }
    const uint32_t n = static_cast<uint32_t>(truth.size());
    auto plain = [&](const Bytes &bodies) {
      std::vector<uint8_t> raw = tags.v;
      raw.insert(raw.end(), bodies.v.begin(), bodies.v.end());
      return raw;
    };
    auto split = [&](const Bytes &bodies, uint32_t version) {
      std::vector<uint8_t> out(f::columns_scratch_bytes(n, bodies.v.size()));
      size_t dir_at = 0;
      SplitOrder order(n);
      const size_t len =
          f::to_columns(tags.v.data(), n, bodies.v.data(), bodies.v.size(), out.data(), out.size(),
                        &dir_at, stacks, order.order, version);
      EXPECT_GT(len, 0u);
      out.resize(len);
      return out;
    };
    const uint32_t flags = stacks ? f::kFileFlagStacks : 0;
    const struct {
      const char *name;
      uint32_t version;
      std::vector<uint8_t> raw;
      uint32_t chunk_flags;
    } forms[] = {{"plain 6", 6, plain(body.v6), 0},
                 {"columns 6", 6, split(body.v6, 6), f::kChunkFlagColumns},
                 {"plain 5", 5, plain(body.v5), 0},
                 {"columns 5", 5, split(body.v5, 5), f::kChunkFlagColumns},
                 {"columns 4", 4, split(body.v5, 4), f::kChunkFlagColumns}};
    TempDir dir;
    for (const auto &form : forms) {
      SCOPED_TRACE(form.name);
      TraceReader r(save(
          dir, "rt",
          trace_of(form.version, flags, {chunk(0, 0, base, n, form.raw, true, form.chunk_flags)})));
      const std::vector<Event> ev = read_all(r);
      EXPECT_EQ(r.stats().corrupt_chunks, 0u);
      ASSERT_EQ(ev.size(), truth.size());
      for (size_t i = 0; i < truth.size(); ++i) {
        const Truth &t = truth[i];
        ASSERT_EQ(ev[i].type, t.type) << i;
        ASSERT_EQ(ev[i].ticks, t.ticks) << i;
        ASSERT_EQ(ev[i].addr, t.addr) << i;
        ASSERT_EQ(ev[i].a, t.size) << i;
        if (t.type == ET::kAlloc) {
          ASSERT_EQ(ev[i].b, t.usable - t.size) << i;
          ASSERT_EQ(ev[i].stack, t.stack) << i;
        }
      }
    }
  }
}

// With stacks, the allocations' delta fields are in kColAllocDelta, the frees' in
// kColHeapDelta (chunk_columns.h). Four events from base 1000, size 100 (usable 112, class 14):
//   1003 kHeap allocation 0x10000, stack 5 (delta 3: escaped)   slot 0
//   1004 kHeap free by slot 0 (delta 1)
//   1006 kHeap allocation, predicted (0x10000), stack 5 (delta 2)
//   1006 kHeap free by slot 0 (delta 0)
TEST(TraceReaderBytesV5, WithStacksAllocationDeltasApart) {
  namespace f = adprof::format;
  Bytes plain_tags, plain_bodies, columnar_tags, col[f::kColumnCount];
  plain_tags.u8(0x6F).u8(0x3F).u8(0xCF).u8(0x1F);
  plain_bodies.varint(3).zz(0x10000 - 112).varint(100).varint(5);
  plain_bodies.varint(0);
  plain_bodies.varint(100).varint(5);
  plain_bodies.varint(0);
  columnar_tags.u8(0x0F).u8(0x1F).u8(0x8F).u8(0x1F);
  col[f::kColDelta].varint(3);
  col[f::kColHeapAddr].zz(0x10000 - 112);
  col[f::kColSize].varint(100).varint(100);
  col[f::kColStack].varint(5).varint(5);
  col[f::kColSlotLow].u8(0).u8(0);
  col[f::kColSlotHigh].u8(0).u8(0);
  col[f::kColHeapDelta].u8(1 | 0 << 2);   // the frees': 1, 0
  col[f::kColAllocDelta].u8(3 | 2 << 2);  // the allocations': 3 (escaped), 2
  Bytes columnar;
  columnar.append(columnar_tags.v);
  for (int k = 0; k < adprof::format::columns_in(5); ++k) columnar.varint(col[k].v.size());
  for (int k = 0; k < adprof::format::columns_in(5); ++k) columnar.append(col[k].v);

  std::vector<uint8_t> split(f::columns_scratch_bytes(4, plain_bodies.v.size()));
  size_t dir_at = 0;
  SplitOrder order(4);
  split.resize(f::to_columns(plain_tags.v.data(), 4, plain_bodies.v.data(), plain_bodies.v.size(),
                             split.data(), split.size(), &dir_at, true, order.order, 5));
  EXPECT_EQ(split, columnar.v);

  TempDir dir;
  TraceReader r(save(dir, "v5s",
                     trace_of(5, f::kFileFlagStacks,
                              {chunk(0, 0, 1000, 4, columnar.v, true, f::kChunkFlagColumns)})));
  const std::vector<Event> ev = read_all(r);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(r.stats().corrupt_chunks, 0u);
  const uint64_t ticks[] = {1003, 1004, 1006, 1006};
  const ET types[] = {ET::kAlloc, ET::kFree, ET::kAlloc, ET::kFree};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ev[i].type, types[i]);
    EXPECT_EQ(ev[i].ticks, ticks[i]);
    EXPECT_EQ(ev[i].addr, 0x10000u);
    EXPECT_EQ(ev[i].stack, types[i] == ET::kAlloc ? 5u : 0u);
  }
}

// ---- version 6: frees by recency rank ----

// LiveOrder (heap_coder.h) against a plain list of the live ordinals, over random pushes and
// removals that reach far back (ranks across words, blocks and groups).
TEST(TraceReaderBytesV6, LiveOrderRanksMatchAPlainList) {
  constexpr size_t kCapacity = 100000;  // over three groups of 32768 ordinals
  SplitOrder storage(kCapacity);
  adprof::format::LiveOrder &order = storage.order;
  uint64_t rng = 12345;
  auto rand = [&](uint64_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
  };
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(order.restart(kCapacity - round * 50000));
    std::vector<uint32_t> live;  // oldest first
    uint32_t next = 0;
    for (int i = 0; i < 90000 - round * 50000; ++i) {
      if (live.empty() || rand(3) != 0) {
        ASSERT_TRUE(order.push());
        live.push_back(next++);
        continue;
      }
      const size_t rank = rand(4) == 0 ? rand(live.size()) : rand(std::min<size_t>(live.size(), 5));
      const uint32_t ordinal = live[live.size() - 1 - rank];
      ASSERT_EQ(order.with_rank(static_cast<uint32_t>(rank)), ordinal) << i;
      ASSERT_EQ(order.rank_of(ordinal), rank) << i;
      ASSERT_TRUE(order.live(ordinal));
      order.remove(ordinal);
      ASSERT_FALSE(order.live(ordinal));
      live.erase(live.end() - 1 - static_cast<ptrdiff_t>(rank));
    }
    EXPECT_EQ(order.with_rank(static_cast<uint32_t>(live.size())),
              adprof::format::LiveOrder::kNone);
    EXPECT_EQ(order.size(), next);
  }
  EXPECT_FALSE(order.restart(kCapacity + 64)) << "more than its storage";
}

// Three allocations and two frees by slot, plain (ages) and columnar (ranks), packed by hand:
//   1001 kHeap allocation 0x10000, size 100 (usable 112)      ordinal 0
//   1001 kHeap allocation 0x20000, size 100                    ordinal 1
//   1001 kAlloc heap 0x30000, 64 bytes (the general form)      ordinal 2
//   1002 kHeap free of 0x10000: age 3 (plain: 2 * 3) / rank 2 (columnar: 2 + 1 in kColRank;
//        ordinals 1 and 2 are newer)
//   1002 kHeap free of 0x30000: age 1 (2 * 1) / rank 0 (0 + 1)
// (a block older than kRankedAge is written as 2 * its slot + 1, and in a columnar chunk as
// 0 and its slot: RoundTripOfARandomStream)
TEST(TraceReaderBytesV6, FreesByAgeAndByRank) {
  namespace f = adprof::format;
  Bytes tags, body;
  tags.u8(0x2F).u8(0x0F).u8(0x00).u8(0x3F).u8(0x1F);
  body.zz(0x10000 - 112).varint(100);
  body.zz(0x20000 - (0x10000 + 112)).varint(100);
  body.varint(0).zz(0x30000).varint(64).varint(0);
  body.varint(2 * 3);
  body.varint(2 * 1);
  std::vector<uint8_t> plain = tags.v;
  plain.insert(plain.end(), body.v.begin(), body.v.end());
  std::vector<uint8_t> columnar(f::columns_scratch_bytes(5, body.v.size()));
  size_t dir_at = 0;
  SplitOrder order(5);
  columnar.resize(f::to_columns(tags.v.data(), 5, body.v.data(), body.v.size(), columnar.data(),
                                columnar.size(), &dir_at, false, order.order));
  ASSERT_FALSE(columnar.empty());
  // The rank column: 2 + 1, then 0 + 1 (both ages are under kRankedAge); no slots.
  Bytes col[f::kColumnCount];
  col[f::kColRank].varint(3).varint(1);
  {
    f::Cursor dir{columnar.data() + 5, columnar.data() + dir_at};
    const uint8_t *p = columnar.data() + dir_at;
    for (int k = 0; k < f::kColumnCount; ++k) {
      const size_t len = dir.varint();
      EXPECT_EQ(std::vector<uint8_t>(p, p + len) == col[k].v,
                k != f::kColOther && k != f::kColSize && k != f::kColHeapAddr &&
                    k != f::kColDelta && k != f::kColHeapDelta)
          << "column " << k;
      p += len;
    }
  }
  TempDir dir;
  for (bool is_columnar : {false, true}) {
    SCOPED_TRACE(is_columnar ? "columnar" : "plain");
    TraceReader r(save(dir, "v6",
                       trace_of(6, 0,
                                {chunk(0, 0, 1000, 5, is_columnar ? columnar : plain, true,
                                       is_columnar ? f::kChunkFlagColumns : 0)})));
    const std::vector<Event> ev = read_all(r);
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
    ASSERT_EQ(ev.size(), 5u);
    const uint64_t addr[] = {0x10000, 0x20000, 0x30000, 0x10000, 0x30000};
    const ET type[] = {ET::kAlloc, ET::kAlloc, ET::kAlloc, ET::kFree, ET::kFree};
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(ev[i].type, type[i]) << i;
      EXPECT_EQ(ev[i].addr, addr[i]) << i;
    }
  }
  // Each chunk restarts the order, one larger than the first too (the reader's storage grows).
  {
    Bytes phase_tag, phase_body;
    phase_tag.u8(0x14);
    phase_body.varint(0);
    std::vector<uint8_t> longer = phase_tag.v;
    longer.insert(longer.end(), tags.v.begin(), tags.v.end());
    longer.insert(longer.end(), phase_body.v.begin(), phase_body.v.end());
    longer.insert(longer.end(), body.v.begin(), body.v.end());
    // A first chunk of 5 events, then 30 of 6 (90 allocations in all, more than one word of
    // the order holds: stale state would run out of room).
    Bytes f;
    HeaderFields h;
    h.version = 6;
    f.append(file_header(h));
    f.append(chunk(0, 0, 1000, 5, plain, true, 0));
    for (uint32_t k = 1; k <= 30; ++k) f.append(chunk(0, k, 1000 + 10 * k, 6, longer, true, 0));
    TraceReader r(save(dir, "v6many", f.v));
    EXPECT_EQ(read_all(r).size(), 5u + 30 * 6);
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
  }
  // Ages and ranks that name no live allocation: the chunk is damaged from there on.
  for (uint64_t field : {0, 2 * 4, 2 * 6144 + 1, 2 * 0 + 1}) {  // ages 0, 4; slots 6144, 0
    Bytes bad = body;
    bad.v.pop_back();
    bad.varint(field);
    std::vector<uint8_t> raw = tags.v;
    raw.insert(raw.end(), bad.v.begin(), bad.v.end());
    TraceReader r(save(dir, "v6a", trace_of(6, 0, {chunk(0, 0, 1000, 5, raw, true, 0)})));
    EXPECT_EQ(read_all(r).size(), 4u) << field;
    EXPECT_EQ(r.stats().corrupt_chunks, 1u);
  }
  {  // the same block freed twice: age 3 is ordinal 0 again
    Bytes bad = body;
    bad.v.pop_back();
    bad.varint(2 * 3);
    std::vector<uint8_t> raw = tags.v;
    raw.insert(raw.end(), bad.v.begin(), bad.v.end());
    TraceReader r(save(dir, "v6b", trace_of(6, 0, {chunk(0, 0, 1000, 5, raw, true, 0)})));
    EXPECT_EQ(read_all(r).size(), 4u);
    EXPECT_EQ(r.stats().corrupt_chunks, 1u);
  }
}

// A stack written against the outer frames of the chunk's last definition (version 6,
// kSharedStackOperand), and one with no definition before it in its chunk (damaged).
TEST(TraceReaderBytesV6, StackSharingTheLastOnesOuterFrames) {
  namespace f = adprof::format;
  Bytes tags, body;
  tags.u8(0x1A);  // stack 7: 0x1000, 0x2000, 0x3000 (innermost first)
  body.varint(0).varint(7).varint(3).varint(0x1000).zz(0x1000).zz(0x1000);
  tags.u8(0x4A);  // stack 8: 0x1500 then the last two of stack 7
  body.varint(0).varint(8).varint(3).varint(2).varint(0x1500);
  tags.u8(0x4A);  // stack 9: the outermost frame of stack 8 only
  body.varint(0).varint(9).varint(1).varint(1);
  std::vector<uint8_t> raw = tags.v;
  raw.insert(raw.end(), body.v.begin(), body.v.end());
  TempDir dir;
  {
    TraceReader r(
        save(dir, "v6s", trace_of(6, f::kFileFlagStacks, {chunk(0, 0, 1000, 3, raw, true, 0)})));
    std::vector<std::vector<uint64_t>> frames;
    std::vector<uint64_t> ids;
    Event e;
    while (r.next(e)) {  // the values live until the next event
      EXPECT_EQ(e.type, ET::kStack);
      ids.push_back(e.a);
      frames.emplace_back(e.values().begin(), e.values().end());
    }
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
    const std::vector<std::vector<uint64_t>> want = {
        {0x1000, 0x2000, 0x3000}, {0x1500, 0x2000, 0x3000}, {0x3000}};
    EXPECT_EQ(frames, want);
    EXPECT_EQ(ids, (std::vector<uint64_t>{7, 8, 9}));
  }
  {  // the same chunk without its first definition: nothing to share
    Bytes t2, b2;
    t2.u8(0x4A);
    b2.varint(0).varint(8).varint(3).varint(2).varint(0x1500);
    std::vector<uint8_t> r2 = t2.v;
    r2.insert(r2.end(), b2.v.begin(), b2.v.end());
    TraceReader r(
        save(dir, "v6s2", trace_of(6, f::kFileFlagStacks, {chunk(0, 0, 1000, 1, r2, true, 0)})));
    EXPECT_EQ(read_all(r).size(), 0u);
    EXPECT_EQ(r.stats().corrupt_chunks, 1u);
  }
}

// ---- version 7: stack ids against the previous id of their kind in the chunk ----

namespace {

// Two chunks of one thread (trace_format.h, "Call stacks"). Chunk 0: stack 10 defined, stack
// 12 against it (sharing its outer frame), allocations with stacks 10, 12, 10 and none (0);
// chunk 1 starts over: an allocation with stack 12, then stack 13 defined. As written:
// definitions zz(10 - 0), zz(12 - 10), zz(13 - 0); allocations zz(10 - 0), zz(12 - 10),
// zz(10 - 12), zz(0 - 10), zz(12 - 0).
struct V7Chunks {
  Bytes tags[2], bodies[2];
  V7Chunks() {
    tags[0].u8(0x1A);  // kThreadName hi=1: stack 10, frames 0x1000, 0x2000 (innermost first)
    bodies[0].varint(0).zz(10).varint(2).varint(0x1000).zz(0x1000);
    tags[0].u8(0x4A);  // hi=4: stack 12: 0x1500, 0x1600, then stack 10's outermost frame
    bodies[0].varint(0).zz(12 - 10).varint(3).varint(1).varint(0x1500).zz(0x100);
    tags[0].u8(0x2F);  // kHeap allocation, delta 1, address given: 0x10000, size 100, stack 10
    bodies[0].zz(0x10000 - 112).varint(100).zz(10);
    general_alloc(0, 0x20000, 12 - 10);
    general_alloc(0, 0x10000, 10 - 12);  // addresses against the previous one, 0x20000
    general_alloc(0, 0x10000, 0 - 10);
    general_alloc(1, 0x50000, 12);
    tags[1].u8(0x1A);  // stack 13: one frame, 0x3000
    bodies[1].varint(0).zz(13).varint(1).varint(0x3000);
  }
  // A kAlloc in the heap space of 64 bytes, `addr_delta` from the chunk's previous address.
  void general_alloc(int c, int64_t addr_delta, int64_t stack_delta) {
    tags[c].u8(0x00);
    bodies[c].varint(1).zz(addr_delta).varint(64).varint(0).zz(stack_delta);
  }
  std::vector<uint8_t> chunk_of(int c, bool columnar) const {
    const auto events = static_cast<uint32_t>(tags[c].v.size());
    std::vector<uint8_t> raw = tags[c].v;
    raw.insert(raw.end(), bodies[c].v.begin(), bodies[c].v.end());
    if (!columnar) return chunk(0, c, 1000 + 1000 * c, events, raw, true, 0);
    std::vector<uint8_t> out(adprof::format::columns_scratch_bytes(events, bodies[c].v.size()));
    size_t dir_at = 0;
    SplitOrder order(events);
    const size_t n =
        adprof::format::to_columns(tags[c].v.data(), events, bodies[c].v.data(), bodies[c].v.size(),
                                   out.data(), out.size(), &dir_at, true, order.order, 7);
    EXPECT_GT(n, 0u);
    out.resize(n);
    return chunk(0, c, 1000 + 1000 * c, events, out, true, adprof::format::kChunkFlagColumns);
  }
};

}  // namespace

TEST(TraceReaderBytesV7, StackIdsAgainstThePreviousOfTheirKind) {
  namespace f = adprof::format;
  TempDir dir;
  const V7Chunks v;
  for (bool columnar : {false, true}) {
    SCOPED_TRACE(columnar ? "columnar" : "plain");
    TraceReader r(
        save(dir, columnar ? "columnar" : "plain",
             trace_of(7, f::kFileFlagStacks, {v.chunk_of(0, columnar), v.chunk_of(1, columnar)})));
    std::vector<std::vector<uint64_t>> values;
    const std::vector<Event> ev = read_all(r, nullptr, &values);
    EXPECT_EQ(r.stats().corrupt_chunks, 0u);
    ASSERT_EQ(ev.size(), 8u);
    const ET types[] = {ET::kStack, ET::kStack, ET::kAlloc, ET::kAlloc,
                        ET::kAlloc, ET::kAlloc, ET::kAlloc, ET::kStack};
    for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].type, types[i]) << i;
    EXPECT_EQ(ev[0].a, 10u);
    EXPECT_EQ(values[0], (std::vector<uint64_t>{0x1000, 0x2000}));
    EXPECT_EQ(ev[1].a, 12u);
    EXPECT_EQ(values[1], (std::vector<uint64_t>{0x1500, 0x1600, 0x2000}));
    EXPECT_EQ(ev[7].a, 13u);
    EXPECT_EQ(values[7], (std::vector<uint64_t>{0x3000}));
    const uint32_t stacks[] = {10, 12, 10, 0, 12};
    const uint64_t addrs[] = {0x10000, 0x20000, 0x30000, 0x40000, 0x50000};
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(ev[2 + i].stack, stacks[i]) << i;
      EXPECT_EQ(ev[2 + i].addr, addrs[i]) << i;
    }
  }
}

// An id that the difference takes out of range (below 0, or a definition's 0) damages its
// chunk, not the others.
TEST(TraceReaderBytesV7, StackIdsOutOfRangeAreCountedNotTrusted) {
  namespace f = adprof::format;
  TempDir dir;
  const V7Chunks v;
  for (bool columnar : {false, true}) {
    SCOPED_TRACE(columnar ? "columnar" : "plain");
    V7Chunks below;  // chunk 1's allocation written as -1 from the chunk's start: id -1
    below.bodies[1] = Bytes();
    below.tags[1] = Bytes();
    below.general_alloc(1, 0x50000, -1);
    V7Chunks zero;  // chunk 1's definition of stack 0
    zero.bodies[1] = Bytes();
    zero.tags[1] = Bytes();
    zero.tags[1].u8(0x1A);
    zero.bodies[1].varint(0).zz(0).varint(1).varint(0x3000);
    for (const V7Chunks *bad : {&below, &zero}) {
      TraceReader r(save(
          dir, "bad",
          trace_of(7, f::kFileFlagStacks, {v.chunk_of(0, columnar), bad->chunk_of(1, columnar)})));
      EXPECT_EQ(read_all(r).size(), 6u);
      EXPECT_EQ(r.stats().corrupt_chunks, 1u);
    }
  }
}
