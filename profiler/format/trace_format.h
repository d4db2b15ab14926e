// The adprof trace file format, version 8 (the reader also reads versions 1 to 7; "Version
// history" at the end of this comment). The writer (preload/recorder.h, preload/chunk_writer.cpp)
// and the reader (chunk_decoder.h, analysis/read/file_header.cpp and chunk_index.cpp) both include
// this file and heap_coder.h; the layout documented here is the one they implement, and
// tests/profiler/trace_reader_test.cpp checks the reader against hand-packed bytes.
//
// File  := FileHeader Chunk*                       (all integers little-endian)
//
// FileHeader (64 bytes)
//   0  char[8]  magic "ADPROFTR"
//   8  u32      version (8; 7 = no step summaries (see "Step windows"); 6 = stack ids are
//               written as they are (see "Call stacks"); 5 = a kHeap free by slot is the
//               slot itself; 4 = columnar chunks
//               code the kHeap delta in the tag and an addressed free against the previous
//               address, chunk_columns.h; 3 = no stacks, no seventh column; 2 = other heap
//               slots, 1 = no kHeap events)
//  12  u32      header size (64)
//  16  u64      pid of the recorded process
//  24  u64      start timestamp (ticks, same clock as events)
//  32  u64      start wall clock (ns since the Unix epoch): the wall clock at the start
//               timestamp (since the job's lanes: before, read when the header was written,
//               2 ms or more after it)
//  40  u64      estimated ticks per second at start (refined by CLOCK counters)
//  48  u32      page size
//  52  u32      flags (bit 0: timestamps are TSC ticks >> 8 (version 1: >> 5); else ns.
//               bit 1 (version 4 on), kFileFlagStacks: call stacks recorded; every allocation
//               event, kHeap and kAlloc, ends with stack:varint, see "Call stacks")
//  56  u32      run id: the same for every process and image of one `adprof run` (ADPROF_RUN_ID),
//               so that a file left by an earlier run is never taken for this run's; 0: none
//               (reserved and 0 before the run id was written; readers of every version
//               ignore it)
//  60  u32      CRC-32 (zlib) of bytes 0..59
//
// Chunk := ChunkHeader payload[stored_size]
// ChunkHeader (40 bytes)
//   0  u32  magic "ADPC"
//   4  u32  CRC-32 of header bytes 8..39 followed by the payload
//   8  u32  thread index (0-based, in order of first event; kFooterThread for the footer)
//  12  u32  flags (bit 0: payload is zstd frames; else the raw bytes. bit 1 (version 2 on):
//           a snapshot of the complete events of a buffer still being filled, which the
//           reader replaces by a longer chunk of the same thread and sequence number. bit 2
//           (version 2 on): the bodies are in columns, chunk_columns.h)
//  16  u32  stored_size (payload bytes in the file)        <= kMaxChunkBytes
//  20  u32  raw_size (event bytes after decompression)      <= kMaxChunkBytes
//  24  u64  base timestamp: the first event's delta is relative to it
//  32  u32  event count (version 1: 0 in a snapshot)
//  36  u32  chunk sequence number (per thread, from 0: a gap means lost chunks)
//
// Raw chunk (version 2 on) := tags[event count] bodies: each event's tag byte in the first part,
// the rest of it (Event below, less the tag) in the second, in the same order. Tags are far
// more predictable than the bytes around them, and zstd codes them better apart. The writer
// thread stores most chunks columnar (chunk_columns.h), each part a zstd frame of its own;
// there (version 5 on) a kHeap tag's delta bits move to a column of their own and an
// addressed free's address is coded against its class's previous one: the fields below are
// the plain chunk's, which is also what the recording threads write.
// (Version 1: the events, tags inline.)
//
// A thread's events are written in its own chunks, each decodable alone: the delta bases
// (timestamp, addresses) and the heap coder (heap_coder.h) restart at the chunk's first-event
// timestamp, at 0 and empty. The reader merges the threads' chunk streams by timestamp.
//
// Event times (the writer: preload/recorder.h, "Heap event times"). Times are ticks of the
// header's clock and never go backwards within a thread. A kHeap event (or a call-stack event,
// kThreadName hi=1..4) of a thread that is the only one to record in its share tick (2^10
// ticks, about 105 us; 2^8 before version 7) is written at the tick's start, or at its
// thread's previous event's time if that is later; every other event has the clock's full
// resolution. So the order of two threads' events is the clock's, except for the events whose
// order does not matter, which take no part in share ticks (version 7 on: counters, thread
// names, the phase restated at a chunk's start): these are ordered to within a share tick.
// A single-threaded program's heap events cost almost no time bits. A free's time is read
// after every load before it (recorder.h, now_ticks_ordered), so that a block another thread
// handed over is not freed before that thread's allocation, and at equal times the reader
// puts a free after the other threads' events of that time (analysis/read/thread_merge.cpp,
// merge_run). The reader needs none of these numbers: it reads times as they are.
//
// Event := tag:u8 delta_ticks:varint body        (every type but kHeap)
//        | tag:u8 [delta_ticks:varint] body      (kHeap: the delta is in the tag)
//   tag low 4 bits: EventType; high 4 bits: a small operand (space, phase, role, counter kind).
//   varint: LEB128 unsigned; zz(x): zigzag-encoded signed varint.
//   Addresses are coded as zz(addr - previous address of this chunk), kHeap's as below.
//
// Heap events (version 2 on). Most events of a program are heap allocations and frees, so they
// have a compact form, kHeap, written whenever it applies; the general kAlloc/kFree forms
// (space heap) remain for the rest. Both forms update the thread's heap coder (heap_coder.h)
// in stream order: every heap allocation, `HeapCoder::on_alloc(addr, class_of(usable))`; a
// kHeap free by slot, `on_free_slot(slot)`; by address, `on_free_address(addr, class)`; a kFree,
// nothing.
//   kHeap tag high bits: 0x10 free (else allocation); 0x60 delta ticks 0..2, or 3: a
//   delta_ticks varint follows the tag; 0x80 allocation: the address is predicted; free: the
//   block is given by address.
//   allocation: [zz(addr - coder.next_expected(class, usable)) unless predicted] size:varint
//               usable size = default_usable_size(size); class = class_of(usable);
//               predicted: addr = coder.predicted(class)
//   free:       field:varint: version 6, 2 * age if the block's age is at most kRankedAge
//               (512; the chunk's heap allocations since its own, counting it:
//               HeapCoder::age_of, 1 for the last one), else 2 * slot + 1; a columnar chunk
//               holds 2 * the block's recency rank in place of 2 * age (chunk_columns.h,
//               LiveOrder in heap_coder.h). Before version 6: slot:varint (the block's slot in
//               the coder). If addressed: zz(addr - previous address of this chunk)
//               class:varint (class_of(usable)).
// Slots (version 3): every heap allocation whose address is below 2^48 takes the slot freed
// last, else the lowest never used, while fewer than 6144 are used (HeapCoder::on_alloc);
// a free by slot gives it back. A block freed by another thread keeps its slot to the end of
// the chunk. (Version 2: the slot was the block's place in a hash table, HeapCoderV2.)
// The writer uses kHeap for an allocation whose usable size is the default one (plain malloc,
// calloc, realloc) and for every free of a jemalloc block; kAlloc/kFree otherwise.
//
//   kAlloc    hi=space  zz(addr) size:varint slack:varint [device:varint if space >= 2]
//             slack = usable size - requested size (jemalloc's size class rounding)
//   kFree     hi=space  zz(addr) [length:varint if space == mmap] [device if space >= 2]
//   kOpBegin           name_id:varint instance:varint
//   kOpEnd
//   kPhase    hi=phase
//   kRole     hi=role  (role of the allocations that follow on this thread)
//   kRetag    hi=role  zz(addr) source:varint (absolute address, 0 = none)
//   kStep              step:varint
//   kCounter  hi=kind  value:varint            (CounterKind below)
//   kName              id:varint length:varint bytes      (interned string)
//   kThreadName hi=0   length:varint bytes
//   kThreadName hi=1..3: the call-stack events of version 4, below ("Call stacks")
//   kAnnotate          kind_name_id:varint count:varint value:varint*count
//   kLabel             zz(addr) name_id:varint
//   kDescribe          zz(addr) dtype:varint rank:varint dim:varint*rank
//   kContentHash       zz(addr) hash:varint
//
// Call stacks (version 4, header flag kFileFlagStacks; recorder: preload/stacks.cpp). Every
// allocation event (kHeap allocation, kAlloc) ends with its call stack's id (0: none:
// unwinding failed or gave no frame outside the profiler): version 7, zz(id - the id of the
// chunk's previous allocation event, 0 at its first); before, stack:varint, the id itself.
// Ids are process-wide and defined once per thread, in that thread's stream before their
// first use, by the definitions below, whose `id` is, version 7 on, zz(id - the id of the
// chunk's previous definition, 0 at its first) (before, the id itself):
//   kThreadName hi=1 (kStackOperand)    id:varint count:varint frame0:varint
//                                       zz(frame[i] - frame[i-1])*(count-1)
//      frames innermost first, return addresses (the caller of malloc first, the profiler's own
//      frames left out), count <= kMaxStackFrames. The same id may be defined by several
//      threads (the same frames); a lost chunk leaves its ids undefined (shown as unknown).
//   kThreadName hi=2 (kMappingOperand)  bias:varint start:varint end:varint
//                                       path_length:varint path build_id_length:varint build_id
//      an ELF object the process has loaded (dl_iterate_phdr): its load bias (l_addr), the
//      range [start, end) its PT_LOAD segments span, its path (the executable's from
//      /proc/self/exe) and its GNU build-id (raw bytes, <= kMaxBuildIdBytes; 0 bytes: none).
//      Written at start for every object, and for each object loaded later before the first
//      new stack that follows the load.
//   kThreadName hi=3 (kUnmappingOperand) bias:varint start:varint
//      the object mapped there was unloaded (dlclose).
//   kThreadName hi=4 (kSharedStackOperand, version 6) id:varint count:varint shared:varint
//                                       frame0:varint zz(frame[i] - frame[i-1])*(count-shared-1)
//      a stack whose outermost `shared` frames (1 <= shared <= count) are the outermost ones
//      of the stack defined last (hi=1 or 4) in the same chunk of the thread; the
//      count - shared inner frames follow as in hi=1 (none when shared == count). Consecutive
//      new stacks of a program share most of their outer frames (Python's 40-64 frame
//      stacks: a few new ones each).
// A frame resolves against the mappings as they were at the stack's definition.
//
// Python frames (issue 34; preload/python_stacks.cpp, the same format version: a reader that
// does not know them shows them as unknown addresses). A stack's frame with bit 63 set
// (kPythonFrameTag; no user-space address has it) is a Python frame:
//   bit 63 | name_id << 24 | line       (line: 24 bits, 0xFFFFFF for any line past it)
// name_id is a kName event's id (interned once per process, written before the first stack
// that uses it) whose text is kPythonCodePrefix, the code object's qualified name, '\x01', its
// file. The recorder puts a thread's Python frames, innermost first, in place of the native
// frames from the innermost one in CPython's eval loop (_PyEval_EvalFrameDefault) outward (the
// interpreter's own frames: the eval loop, run_mod, Py_RunMain, main), or after the native
// frames when none is in the eval loop; count <= kMaxStackFrames still holds (the outermost
// Python frames are left out of a deeper stack).
//
// Step windows (version 8; `adprof run --steps A:B`, ADPROF_STEPS=A:B; the writer thread:
// preload/step_window.cpp). A long job is recorded in full only for the steps A to B-1 (a step
// is the time from one adprof_step() mark to the next, of any thread: steps are per process);
// outside that window the writer thread folds each buffer a thread hands it into per-step
// figures instead of writing its events. Such a folded chunk keeps its thread, sequence number
// and base timestamp, and holds only the events later chunks may need, at their own times: the
// restated phase, names (kName), thread names, stack definitions and mappings, counters, and
// the annotations whose kind is not the AD tape's ("ad.tape.*": its per-op records). Every
// chunk with an event before the process's first step mark (a process that never marks one is
// recorded as without a window), every chunk with an event in the window, and every chunk
// handed over while the window is open, is written whole. Before the window's first whole
// chunk, the writer writes what the trace needs to hold the blocks then live (heap and pinned
// host blocks) as ordinary events of a thread of its own, kLiveSetThread: its name
// "adprof-live-set" (kThreadName hi=0), then a kFree of each block the trace holds live that
// died in a folded chunk (or was retagged or relabelled there), then for each live block the
// trace does not hold [kRole] kAlloc (slack as recorded, stack 0) [kLabel], all at one time
// just before that first whole chunk's base timestamp, so that the window's frees find their
// blocks and its live bytes start where the job's were (nothing when the trace holds them
// all; before issue 29's last change, every live block was written there, and nothing before
// the first step mark was). The figures of each step outside the window are
// written, once the step is over, as a record of a second thread of its own,
// kStepSummaryThread (named "adprof-steps"), at the step's end time:
//   kThreadName hi=5 (kStepSummaryOperand) step:varint start_back:varint peak_back:varint
//       allocations:varint frees:varint bytes:varint peak:varint
//       roles:varint peak_by_role:varint*roles start_by_role:varint*roles
//       labels:varint (label:varint role:varint bytes:varint)*labels
//     start = the event's time - start_back (the step's mark); peak_back likewise the time its
//     host bytes (heap and pinned host blocks) were highest; allocations, frees and bytes
//     allocated in the step; peak: those live bytes at their highest in the step (at least
//     those live at its start); roles = ADPROF_ROLE_COUNT; peak_by_role: the live bytes by
//     role at that peak; start_by_role: by role at the step's start; labels (at most
//     kMaxStepSummaryLabels, most bytes first): the bytes live at the step's start by (label
//     name id, role), label 0 for unlabelled blocks.
//   The reader yields it as kStepSummary (a: the step; values: StepSummaryField, then the
//   2*roles by-role figures, labels, 3*labels values). A step's events are those timed from
//   its mark to the next; the writer counts them in the order the buffers reach it (a thread's
//   events in order, threads buffer by buffer), so the peak of a step whose allocations come
//   from several threads at once is the one of that order, not always the clock's (the
//   window's steps are replayed exactly).
//
// The footer chunk (thread kFooterThread, raw) holds: events:varint chunks:varint
// dropped_events:varint end_reason:varint end_signal:varint [untraced_fork_children:varint].
// A trace without it was cut. untraced_fork_children (written since issue 28; readers ignore
// what follows end_signal, and one that lacks it reads 0): the children the process forked
// that had no trace of their own when it ended (a fork child is traced only once it execs).
//
// Version history (each version's reader reads every earlier one; a reader refuses a later
// version with one line: "... is an adprof trace of version N; this adprof reads versions 1 to
// M"). The figures are from docs/PERFORMANCE.md; profiler_bench_columns TRACE [LEVEL]
// (bench/profiler/trace_columns.cpp) prints where a trace's bytes go, column by column.
//   1  Every event in the general form (kAlloc/kFree for heap blocks too), tags inline.
//   2  Tags apart from the bodies (a chunk's tags first), compact heap events (kHeap) with a
//      hash-table heap coder (HeapCoderV2), snapshots of idle threads' buffers, columnar chunks.
//   3  Heap events as they are today (heap_coder.h): writer and reader keep the same
//      per-chunk state, slots for the chunk's live blocks handed out from a free list (a free
//      is its slot; only the writer needs an address-to-slot index, the reader mirrors the
//      list with an array) and a mirror of jemalloc's per-thread cache (an allocation that gets
//      the block its class freed last needs no address); the default slack is implied and the
//      time delta (100 ns ticks) sits in the tag. (The context was already carried as events,
//      op begin/end, phase, role changes, so an allocation event is only address, size and
//      slack.) An allocation storm costs 1.8 bytes per event, heaptrack 2.0.
//   4  Call stacks (`adprof run --stacks`, docs/STACKS.md): each allocation carries its stack
//      id; a new stack is written once as a table event, and the process's mappings (path,
//      bias, extent, build-id) at start, at the first new stack after a load, and at dlclose,
//      so the trace symbolises after the program is gone (symbols are resolved when the trace
//      is read, analysis/read/call_stacks.cpp, never while recording). The new events ride on
//      kThreadName's operand (the 4-bit type space is full) and the reader yields them as
//      kStack, kMapping, kUnmapping ("Call stacks" above); allocations in a trace with the
//      header flag kFileFlagStacks end with stack:varint (a seventh column, kColStack, in
//      columnar chunks). Without --stacks a version 4 trace is a version 3 trace with an empty
//      seventh column. (A CPython program's Python frames, "Python frames" above, came later in
//      the same version.)
//   5  Only the columnar chunks the writer thread makes change (chunk_columns.h): a kHeap tag's
//      2-bit time delta moves to a column of its own (four to a byte), so that the tags of a
//      regular allocation pattern repeat and zstd codes them as long matches, and a free by
//      address (a block of an earlier chunk) is coded against the previous such free of its
//      size class instead of the chunk's previous address. The recording threads write what
//      they wrote before (the hot path is unchanged); the writer thread's split does the rest.
//      On a Python run (10.4 M events) the trace went from 0.29 to 0.15-0.17 B/event; what is
//      left is mostly the time itself.
//   6  The free of a block the chunk allocated recently (at most 512 allocations ago) names the
//      block by its recency rank, how many blocks allocated after it are still live, instead
//      of its slot number; an older block keeps its slot. The recording thread writes the
//      block's age (one array load: HeapCoder::age_of), and the writer thread's split follows
//      the chunk's allocations in a LiveOrder (heap_coder.h: a bitmap with counts per block of
//      512 and per group of 32768 ordinals) to turn ages into ranks, which repeat with the
//      program's allocation pattern (a rank column of its own, kColRank). The writer
//      compresses every part at zstd level 1 and again at level 5 a part that level 1 shrank
//      under 1/16 (a repeating pattern), keeping the smaller frame. Heap event times are
//      coarse where that is free and exact where it matters ("Event times" above; share ticks
//      of 2^8 ticks, about 26 us, in this version). Stack definitions may share the outer
//      frames of the chunk's previous one (kSharedStackOperand). On the Python run the trace
//      went from 0.21 to about 0.048 B/event with stacks.
//   7  Every stack id is written against the previous one of its kind in the chunk: an
//      allocation's against the previous allocation's, a definition's against the previous
//      definition's (zigzag differences: a program's allocation pattern repeats as the same
//      small numbers, where the ids themselves grow). The writer changed with it, though the
//      reader does not depend on it: a stack definition is written with its allocation's coarse
//      time, and the events whose order against other threads' does not matter (the writer
//      thread's counter samples, a thread's name, the phase restated at a buffer's start)
//      neither claim nor share a share tick, which is now 2^10 ticks (about 105 us): a program
//      thread that records alone keeps coarse times while the writer samples. On the Python
//      run with stacks the trace went from about 0.047 to 0.036 B/event.
//   8  Step windows ("Step windows" above): the step summaries (kThreadName hi=5) and the
//      threads kLiveSetThread and kStepSummaryThread of a trace recorded with --steps A:B. A
//      trace recorded without it is a version 7 trace with a new number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace adprof::format {

inline constexpr char kFileMagic[8] = {'A', 'D', 'P', 'R', 'O', 'F', 'T', 'R'};
inline constexpr uint32_t kVersion = 8;
inline constexpr uint32_t kOldestVersion = 1;  // the oldest version the reader reads
inline constexpr uint32_t kFileHeaderSize = 64;

inline constexpr uint32_t kChunkMagic = 0x43504441;  // "ADPC"
inline constexpr uint32_t kChunkHeaderSize = 40;
inline constexpr uint32_t kMaxChunkBytes = 4u << 20;
inline constexpr uint32_t kFooterThread = 0xFFFFFFFFu;
inline constexpr uint32_t kStepSummaryThread = 0xFFFFFFFEu;  // version 8: "Step windows"
inline constexpr uint32_t kLiveSetThread = 0xFFFFFFFDu;
inline constexpr uint32_t kChunkFlagZstd = 1;
inline constexpr uint32_t kChunkFlagSnapshot = 2;
inline constexpr uint32_t kChunkFlagColumns = 4;  // the bodies are in columns (chunk_columns.h)
inline constexpr uint32_t kFileFlagTsc = 1;
inline constexpr uint32_t kFileFlagStacks = 2;  // version 4 on: allocations carry a stack id
inline constexpr uint8_t kSpaceHeap = 0;  // a kAlloc/kFree operand: ADPROF_SPACE_HEAP (context.h)
inline constexpr uint8_t kStackOperand = 1;  // kThreadName operands (version 4 on)
inline constexpr uint8_t kMappingOperand = 2;
inline constexpr uint8_t kUnmappingOperand = 3;
inline constexpr uint8_t kSharedStackOperand = 4;  // version 6
inline constexpr uint8_t kStepSummaryOperand = 5;  // version 8
inline constexpr uint32_t kMaxStepSummaryLabels = 1024;
// A kStepSummary event's values (the reader's), before the by-role figures and the labels.
enum StepSummaryField : uint8_t {
  kSummaryStart = 0,  // ticks
  kSummaryPeakTime = 1,
  kSummaryAllocations = 2,
  kSummaryFrees = 3,
  kSummaryBytes = 4,
  kSummaryPeak = 5,
  kStepSummaryFixedFields = 6,
};
inline constexpr uint32_t kMaxStackFrames = 64;
// Python frames in stacks ("Python frames" above).
inline constexpr uint64_t kPythonFrameTag = uint64_t{1} << 63;
inline constexpr int kPythonLineBits = 24;
inline constexpr uint64_t kPythonLineMask = (uint64_t{1} << kPythonLineBits) - 1;
inline constexpr uint64_t kPythonNameMask = (uint64_t{1} << (63 - kPythonLineBits)) - 1;
inline constexpr char kPythonCodePrefix[] = "\x01py\x01";
inline constexpr uint32_t kMaxBuildIdBytes = 64;
inline constexpr uint32_t kMaxNameBytes = 4096;
inline constexpr uint32_t kMaxAnnotateValues = 32;
inline constexpr uint32_t kMaxRank = 16;

enum class EventType : uint8_t {
  kAlloc = 0,
  kFree = 1,
  kOpBegin = 2,
  kOpEnd = 3,
  kPhase = 4,
  kRole = 5,
  kRetag = 6,
  kStep = 7,
  kCounter = 8,
  kName = 9,
  kThreadName = 10,
  kAnnotate = 11,
  kLabel = 12,
  kDescribe = 13,
  kContentHash = 14,
  kHeap = 15,  // compact heap allocation or free (version 2 on); the reader yields kAlloc/kFree
  // Yielded by the reader only; on disk kThreadName with operand 1, 2, 3 (version 4 on).
  kStack = 16,        // a: id; values: the frames
  kMapping = 17,      // addr: bias; a: start; b: end; text: path '\0' build-id bytes
  kUnmapping = 18,    // addr: bias; a: start
  kStepSummary = 19,  // version 8: a: the step; values: "Step windows"
};
inline constexpr uint8_t kEventTypeCount = 16;  // on disk (a tag's low 4 bits)

// kHeap operand bits (the tag's high nibble).
inline constexpr uint8_t kHeapFree = 0x1;
inline constexpr uint8_t kHeapDeltaShift = 1;  // 2 bits: delta ticks 0..2, 3 = varint follows
inline constexpr uint8_t kHeapDeltaEscape = 3;
inline constexpr uint8_t kHeapPredicted = 0x8;  // allocation
inline constexpr uint8_t kHeapAddressed = 0x8;  // free

enum class CounterKind : uint8_t {
  kClockNs = 0,  // monotonic ns since start: calibrates ticks
  kRss = 1,      // resident set size, bytes
  kJemallocAllocated = 2,
  kJemallocActive = 3,
  kJemallocResident = 4,
  kJemallocRetained = 5,
  kJemallocMapped = 6,
};
inline constexpr uint8_t kCounterKindCount = 7;

enum class EndReason : uint8_t { kExit = 0, kSignal = 1, kWriteError = 2, kExec = 3 };

// ---- little-endian fixed-width helpers --------------------------------------------------------
inline void put_u32(uint8_t *p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void put_u64(uint8_t *p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t get_u32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Claim: `adprof run` creates the root process's trace before it starts the program (exclusively,
// mode 0600), so that a second run naming the same file is refused before its program runs. The
// claim is a file header alone (64 bytes): the magic, version 0, header size, pid 0, the run id
// at 56, every other byte 0. The root process of that run (same run id) truncates it and writes
// its own header (trace_file.cpp, create_trace_file). A file still a claim after the run holds no
// trace (the program was never recorded); readers refuse version 0.
inline void make_claim(uint8_t *header, uint32_t run_id) {
  std::memset(header, 0, kFileHeaderSize);
  std::memcpy(header, kFileMagic, 8);
  put_u32(header + 12, kFileHeaderSize);
  put_u32(header + 56, run_id);
}
inline bool is_claim(const uint8_t *header, uint32_t run_id) {
  uint8_t claim[kFileHeaderSize];
  make_claim(claim, run_id);
  return std::memcmp(header, claim, kFileHeaderSize) == 0;
}
inline uint64_t get_u64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// ---- varints ----------------------------------------------------------------------------------
inline constexpr size_t kMaxVarintBytes = 10;

inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
inline uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Bounds-checked decoding cursor: every read past the end sets `bad` and yields 0.
struct Cursor {
  const uint8_t *p;
  const uint8_t *end;
  bool bad = false;

  bool done() const { return p >= end; }
  uint8_t byte() {
    if (p >= end) {
      bad = true;
      return 0;
    }
    return *p++;
  }
  uint64_t varint() {
    if (p < end && *p < 0x80) return *p++;  // most values fit one byte
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) {
        bad = true;
        return 0;
      }
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad = true;  // more than 10 bytes
    return 0;
  }
  const uint8_t *bytes(uint64_t n) {
    if (n > static_cast<uint64_t>(end - p)) {
      bad = true;
      p = end;
      return nullptr;
    }
    const uint8_t *r = p;
    p += n;
    return r;
  }
};

}  // namespace adprof::format
