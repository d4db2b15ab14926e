// The writer thread's side of a step window (step_window.h; the encoding: trace_format.h, "Step
// windows"). Every buffer handed over is decoded here (the reader's chunk decoder, on the raw
// bytes), its heap events kept in a live map (address -> size, role, label), and the size changes
// they make merged by time over the threads (as the reader merges them) into the figures of the
// step their time falls in; the buffer is then written whole (before the process's first step mark,
// in the window, or while it is open) or folded: a chunk of the same thread and number holding only
// the events later chunks may need. The live map also knows which blocks the trace holds as live
// (their allocation written, their free not), so that the window's first chunk is preceded by the
// difference only. Nothing here runs on a recording thread but publish_step_mark; the writer's
// allocations (the maps) are the profiler's (its guard is up).
#include "step_window.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "address_map.h"
#include "chunk_decoder.h"
#include "preload_internal.h"
#include "recorder_internal.h"

namespace adprof::preload {

bool g_step_window = false;

namespace {

constexpr int kRoles = ADPROF_ROLE_COUNT;

// The report's host bytes (analysis: is_host_space).
bool is_host(uint8_t space) {
  return space == ADPROF_SPACE_HEAP || space == ADPROF_SPACE_HOST_PINNED;
}

// The steps [g_first_step, g_end_step) are recorded in full.
uint64_t g_first_step = 0, g_end_step = 0;

// The marks' ring (step_window.h, StepMarkRing: its encoding, several publishers at once): 1,024
// marks are a second of a program stepping a thousand times a second while the writer is busy.
// Static and constant-initialised, so that it is there before any thread marks a step; small,
// as every byte of the preload library counts against a program's RLIMIT_AS
// (Signals.ProfilersOwnAddressSpaceIsSmall).
constexpr uint32_t kNoThread = UINT32_MAX;  // a mark's thread when it had no index yet
constinit StepMarkRing<1 << 10> g_marks;
// A mark has opened (closed) the window, or was the process's first: every thread was told to
// hand its buffer over then.
std::atomic<bool> g_window_opened{false}, g_window_closed{false}, g_first_marked{false};

// A step is summarised once the writer has read its marking thread's events past its end (the
// next mark), no thread holds an event before its end unread (kIdleThreadNs), and it has been
// over for this long: every other thread that records hands its buffer over at each flush tick
// (100 ms). (Time alone is not enough: a writer busy with a large live set lags behind the
// program by more than that.)
constexpr uint64_t kSettleNs = 400'000'000;
// A thread idle since its last event keeps its buffer, unread, until its next one (a DataLoader
// worker's feeder thread, its batch freed, waits for the next batch as long as the training
// step takes): the merge waits for it (oldest_unread_ticks), but not for longer than this past
// its last event, as a thread that recorded once and sleeps for the run would hold it for good.
constexpr uint64_t kIdleThreadNs = 3'000'000'000;
// Summaries are written in chunks of at most this many, or after kSummaryFlushNs.
constexpr uint32_t kSummariesPerChunk = 64;
constexpr uint64_t kSummaryFlushNs = 1'000'000'000;

struct LiveBlock {
  uint64_t size;
  uint64_t ticks;  // its allocation's time
  uint32_t slack;
  uint32_t label;   // name id, 0: none
  uint32_t device;  // as recorded (a host pinned block's)
  uint8_t role;
  uint8_t space;
  // The trace holds it as live, as it is: its allocation (role, label) was written, whole or in
  // the window's live set, and no free of it.
  bool traced;
};

// A block the trace holds as live that died in a folded chunk (freed, replaced, or retagged or
// relabelled there): the window's live set frees it (`length`: an anonymous mapping's range).
struct TracedDeath {
  uint64_t addr, length;
  uint32_t device;
  uint8_t space;
};

// Buffers reach the writer one thread's at a time, each in its own order, not merged by time as
// the reader merges them: a block one thread allocates and another frees (a DataLoader worker's
// batch, pickled and freed by its queue's feeder thread) may have its free read first. Such a
// free is kept (EarlyFree, the last kEarlyFrees of them) until the allocation it ends is read;
// that block's life in the live map then ends where the reading reaches its free's time (Dying).
// Before, the free was taken for one of a block allocated before recording began and dropped:
// the block stayed live in every later step's figures and in the window's live set (a thread
// freeing another's 1 MiB a step: step 7's peak 6.2 MiB for 1.0 MiB). The steps' figures do not
// depend on the reading's order: they are merged by time (SizeChange).
struct EarlyFree {
  uint64_t ticks;
  uint32_t thread;  // its thread's index: never the end of a block that thread allocates later
  bool written;     // the trace holds the free (its buffer was written whole)
};
// At most this many frees read before their allocation are kept (about 1 MiB of the writer's),
// the oldest dropped first: frees of blocks allocated before recording began, or in the parent of
// a fork child, are never matched; another thread's are matched within a flush tick or two.
constexpr size_t kEarlyFrees = 1 << 14;

// A block whose free was read before its allocation: in the live map's bookkeeping (what the
// trace holds) until the reading reaches `ticks`; its bytes' end is a SizeChange at `ticks`.
struct Dying {
  uint64_t ticks, addr;
  LiveBlock block;
  bool written;  // the trace holds its free
  bool operator>(const Dying &o) const { return ticks > o.ticks; }
};

// A block the live map held when an allocation at its address was read, its free not read: it
// ended there (`at`), unless another thread's buffer read later frees it sooner. A DataLoader
// worker's main thread allocates a batch where its feeder thread freed the one before, and its
// buffer may come first: the feeder's free then moves the earlier batch's end back to its time.
// Before, that free was dropped and the earlier batch counted live until the later one began.
struct Replaced {
  LiveBlock block;
  uint64_t at;
  uint32_t thread;  // the replacing allocation's: its run holds the block's end at `at`
};

// A change of the host bytes live, by role and label: what the steps' figures are made of. Each
// thread's changes are a run in its time order (ChangeRun: its buffers reach the writer in
// order); the threads' runs are merged by time (merge_until) once the writer has read every
// thread past them: kSettleNs of the program's time behind the newest event read, and before
// the oldest event a thread still holds unread (`unread`: a thread hands its buffer over at its
// first event after a flush tick, and one blocked since keeps it), so a step's peak is the
// reader's, whichever thread's buffer came first. Before, a feeder thread blocked for 0.4 s
// after freeing a batch had its free merged after the next batch's allocations (a 1.106x worker
// peak in a loaded CI run of TorchSteps.WorkersMarkTheirBatchesAsSteps; StepWindowThreads.
// AFreeHeldByAnIdleThreadEndsItsBlockAtItsTime). A change read after its time was merged (a
// thread idle past kIdleThreadNs, or a writer lagging further) counts where the merge is.
struct SizeChange {
  uint64_t ticks;
  int64_t delta;
  uint32_t label;
  uint8_t role;
  bool operator>(const SizeChange &o) const { return ticks > o.ticks; }
};
struct ChangeRun {
  std::vector<SizeChange> changes;  // in time order
  size_t next = 0;                  // the first not merged yet

  // Drops what was merged, once it is most of the run, and the room a burst left (a thread's
  // run holds only what waits).
  void compact() {
    if (next == changes.size()) {
      changes.clear();
      next = 0;
    } else if (next >= 4096 && next * 2 >= changes.size()) {
      changes.erase(changes.begin(), changes.begin() + static_cast<ptrdiff_t>(next));
      next = 0;
    }
    if (changes.capacity() > 4096 && changes.capacity() > 4 * changes.size())
      changes.shrink_to_fit();
  }
};
// At most this many changes wait to be merged (12 MiB of the writer's): past it the oldest are
// merged sooner than kSettleNs behind the reading.
constexpr size_t kMaxWaitingChanges = 1 << 19;

// Device blocks (device_block, device_segment, device_raw) by address and space, as the reader
// keys them (a segment and its first block share an address).
uint64_t device_key(uint64_t addr, uint8_t space) {
  return addr ^ static_cast<uint64_t>(space) << 61;
}

uint64_t label_key(uint32_t label, uint8_t role) { return uint64_t{label} << 8 | role; }

struct StepFigures {
  uint64_t step = 0, start = 0, end = UINT64_MAX, end_ns = 0;
  uint32_t end_thread = kNoThread;  // the thread of the mark that ended it
  bool started = false;             // its figures at the start taken
  uint64_t allocations = 0, frees = 0, bytes = 0, peak = 0, peak_ticks = 0, last_ticks = 0;
  std::array<uint64_t, kRoles> peak_by_role{}, start_by_role{};
  std::vector<std::pair<uint64_t, uint64_t>> start_labels;  // label_key -> bytes, most first
};

// An event kept of a heap event or a context event for the live map, applied after the chunk's
// fate is decided (the live set written before a whole chunk holds none of its events).
struct Folded {
  fmt::EventType type;
  uint8_t operand;
  uint32_t thread, device;
  uint64_t ticks, addr, a, b;
};

// Events appended to a scratch buffer as a recording thread would write them (trace_format.h),
// then written as one chunk through the writer's compressor.
struct ChunkBuilder {
  Buffer *buf = nullptr;
  uint32_t events = 0;
  uint8_t *cursor = nullptr;
  uint64_t last_ts = 0, last_addr = 0;
  uint32_t last_defined = 0;  // the chunk's previous stack definition's id (version 7)

  void start(uint32_t tid, uint32_t seq, uint64_t base_ts) {
    buf->tid = tid;
    buf->seq = seq;
    buf->base_ts = base_ts;
    events = 0;
    cursor = buf->bodies;
    last_ts = base_ts;
    last_addr = 0;
    last_defined = 0;
  }
  // Room for an event of `bytes` at most.
  bool room(size_t bytes) const {
    return events < kTagBytes && static_cast<size_t>(buf->bodies + kBodyBytes - cursor) >= bytes;
  }
  uint8_t *begin(fmt::EventType type, uint8_t operand, uint64_t t) {
    t = std::max(t, last_ts);
    buf->tags[events] = static_cast<uint8_t>(static_cast<uint8_t>(type) | operand << 4);
    uint8_t *p = fmt::put_varint(cursor, t - last_ts);
    last_ts = t;
    return p;
  }
  void end(uint8_t *p) {
    cursor = p;
    ++events;
  }
  uint8_t *addr(uint8_t *p, uint64_t a) {
    p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(a - last_addr)));
    last_addr = a;
    return p;
  }
  uint8_t *bytes(uint8_t *p, std::string_view s) {
    p = fmt::put_varint(p, s.size());
    memcpy(p, s.data(), s.size());
    return p + s.size();
  }
  void write(Compressor &k) {
    if (events == 0) return;
    seal(buf, events, static_cast<uint32_t>(cursor - buf->bodies));
    write_buffer_whole(buf, k);
  }
};

struct WindowState {
  fmt::TraceDecoding decoding;
  std::unique_ptr<fmt::ChunkDecoder> decoder;
  std::vector<adprof::Event> run;
  std::vector<Folded> folded;
  AddressMap<LiveBlock> live;
  // The blocks of the other spaces, known only for what the trace holds of them (they count in
  // no step's figures): device blocks (device_key), anonymous mappings (start: a piece, split
  // by a partial munmap as the reader splits it).
  AddressMap<LiveBlock> device_blocks;
  std::map<uint64_t, LiveBlock> mappings;
  // The host bytes live, by role and by label_key, at `merged_until` (every change before it
  // merged, by time).
  uint64_t live_total = 0;
  std::array<uint64_t, kRoles> by_role{};
  AddressMap<uint64_t> by_label;
  uint64_t merged_until = 0;
  std::vector<ChangeRun> runs;  // waiting to be merged, by thread index
  uint32_t reading_thread = 0;  // the thread of the buffer read now
  // Ends of blocks whose free was read before their allocation (Dying), out of their run's order.
  std::priority_queue<SizeChange, std::vector<SizeChange>, std::greater<SizeChange>> out_of_order;
  size_t waiting_changes = 0;
  uint64_t newest_read = 0;          // the latest event read, of any thread
  uint64_t unread = UINT64_MAX;      // no thread holds an event before it unread (note_unread)
  std::vector<uint8_t> thread_role;  // by thread index
  std::vector<uint64_t> read_until;  // by thread index: its last event read
  std::vector<bool> tape_names;      // name ids of "ad.tape.*"
  uint64_t next_mark = 0, last_mark_ticks = 0;
  std::vector<TracedDeath> traced_deaths;  // until the window's live set is written
  uint64_t first_mark = UINT64_MAX;        // the process's first step mark (its time)
  std::deque<StepFigures> steps;           // the open ones, in mark order
  size_t started = 0;    // how many of them, from the first, have begun (take_start, by the merge)
  size_t step_hint = 0;  // where step_at looks first
  uint64_t window_open = UINT64_MAX, window_close = UINT64_MAX;
  bool opened = false;  // the window is open: every chunk whole until it closes
  // The live set's host blocks wait (HeapLiveSet) until every busy thread's events before the
  // window were read: `live_set_ticks` is its time; `as_at_open`, the blocks live then that an
  // event of the window has changed or ended since (as they were).
  bool heap_live_set_waits = false;
  uint64_t live_set_ticks = 0, opened_ns = 0;
  AddressMap<LiveBlock> as_at_open;
  ChunkBuilder kept, live_set, summaries;
  uint32_t live_set_seq = 0, summary_seq = 0, pending_summaries = 0;
  uint64_t pending_since_ns = 0;
  bool ready = false;
  // Frees read before the allocation they end (by address), in the order read; and the blocks
  // they end, counted live until the reading reaches their free (EarlyFree, Dying).
  std::unordered_multimap<uint64_t, EarlyFree> early_frees;
  std::deque<std::pair<uint64_t, uint64_t>> early_order;  // (address, ticks)
  std::priority_queue<Dying, std::vector<Dying>, std::greater<Dying>> dying;
  // While frees wait (early_frees): for each of the buffer's events, the time of the buffer's
  // next host event at its address (UINT64_MAX: none), and the map that makes it.
  std::vector<uint64_t> own_next;
  AddressMap<uint64_t> next_at;
  AddressMap<Replaced> replaced;  // by address, at most kEarlyFrees
};
alignas(WindowState) unsigned char g_window_storage[sizeof(WindowState)];
WindowState *g_window = nullptr;  // in g_window_storage, once configured

bool set_up(WindowState &w) {
  if (w.ready) return true;
  for (ChunkBuilder *b : {&w.kept, &w.live_set, &w.summaries}) {
    b->buf = static_cast<Buffer *>(profiler_mmap(sizeof(Buffer)));
    if (!b->buf) return false;
  }
  w.decoding.version = fmt::kVersion;
  w.decoding.stacks = g_stacks;
  w.decoder = std::make_unique<fmt::ChunkDecoder>(w.decoding);
  w.run.resize(1024);
  w.ready = true;
  return true;
}

// The marks published since the last look: each ends the step before it and opens or closes
// the window.
void read_marks(WindowState &w) {
  g_marks.read(w.next_mark, [&](const StepMark &m) {
    const uint64_t ticks = std::max(m.ticks, w.last_mark_ticks);
    w.last_mark_ticks = ticks;
    if (!w.steps.empty() && w.steps.back().end == UINT64_MAX) {
      w.steps.back().end = ticks;
      w.steps.back().end_ns = m.ns;
      w.steps.back().end_thread = m.thread;
    }
    StepFigures &s = w.steps.emplace_back();
    s.step = m.step;
    s.start = ticks;
    w.first_mark = std::min(w.first_mark, ticks);
    if (m.step >= g_first_step && w.window_open == UINT64_MAX) w.window_open = ticks;
    if (m.step >= g_end_step && w.window_open != UINT64_MAX && w.window_close == UINT64_MAX)
      w.window_close = ticks;
  });
}

bool in_window(const WindowState &w, const StepFigures &s) {
  return s.step >= g_first_step && s.step < g_end_step && s.start >= w.window_open &&
         s.start < w.window_close;
}

void take_start(WindowState &w, StepFigures &s) {
  s.started = true;
  s.peak = w.live_total;
  s.peak_ticks = s.start;
  s.peak_by_role = s.start_by_role = w.by_role;
  s.start_labels.clear();
  for (const auto &[key, bytes] : w.by_label)
    if (bytes) s.start_labels.emplace_back(key, bytes);
  // Ties by key: the summary does not depend on the map's order.
  std::sort(s.start_labels.begin(), s.start_labels.end(), [](const auto &x, const auto &y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  if (s.start_labels.size() > fmt::kMaxStepSummaryLabels)
    s.start_labels.resize(fmt::kMaxStepSummaryLabels);
}

// The open step an event at `ticks` belongs to (null: before the first mark, or a step already
// summarised), among the first `count`. The steps are in time order (the marks may be read well
// ahead of the buffers: searched by halves).
StepFigures *step_at(WindowState &w, uint64_t ticks, size_t count) {
  // A buffer's events are in time order: most fall in the step the last one found (a search of
  // the deque cost the writer as much as its live map). The hint is only a guess: checked
  // whole, whatever steps were closed or marked since.
  size_t i = w.step_hint;
  if (i >= count || ticks < w.steps[i].start || (i + 1 < count && ticks >= w.steps[i + 1].start)) {
    const auto begin = w.steps.begin(), end = begin + static_cast<ptrdiff_t>(count);
    auto after = std::upper_bound(begin, end, ticks,
                                  [](uint64_t t, const StepFigures &s) { return t < s.start; });
    if (after == begin) return nullptr;
    i = static_cast<size_t>(after - begin) - 1;
    w.step_hint = i;
  }
  StepFigures &s = w.steps[i];
  return ticks < s.end ? &s : nullptr;
}
StepFigures *step_at(WindowState &w, uint64_t ticks) { return step_at(w, ticks, w.steps.size()); }

// The figures at the start of every step begun by `ticks` (the changes before it merged).
void start_steps(WindowState &w, uint64_t ticks) {
  while (w.started < w.steps.size() && w.steps[w.started].start <= ticks)
    take_start(w, w.steps[w.started++]);
}

// `c` counted into the live bytes, and into the peak of the step begun that holds it (or, for a
// change read after its time was merged, at its time's step if still open).
void merge_change(WindowState &w, const SizeChange &c) {
  start_steps(w, c.ticks);
  const auto delta = static_cast<uint64_t>(c.delta);
  w.live_total += delta;
  w.by_role[c.role] += delta;
  w.by_label[label_key(c.label, c.role)] += delta;
  if (c.delta <= 0) return;
  if (StepFigures *s = step_at(w, c.ticks, w.started); s && w.live_total > s->peak) {
    s->peak = w.live_total;
    s->peak_ticks = c.ticks;
    s->peak_by_role = w.by_role;
  }
}

// Merges, by time, every change before `ticks` waiting in the runs and out of order.
void merge_until(WindowState &w, uint64_t ticks) {
  using Head = std::pair<uint64_t, size_t>;  // a run's next change's time, the run's index
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  for (size_t i = 0; i < w.runs.size(); ++i)
    if (const ChangeRun &r = w.runs[i]; r.next < r.changes.size())
      heads.push({r.changes[r.next].ticks, i});
  for (;;) {
    const bool from_run = !heads.empty() && heads.top().first < ticks;
    const bool from_ends = !w.out_of_order.empty() && w.out_of_order.top().ticks < ticks;
    if (!from_run && !from_ends) break;
    if (!from_run || (from_ends && w.out_of_order.top().ticks < heads.top().first)) {
      merge_change(w, w.out_of_order.top());
      w.out_of_order.pop();
      --w.waiting_changes;
      continue;
    }
    // The earliest run, for as long as no other change comes before its next (one heap
    // operation for many changes where threads take turns).
    const size_t i = heads.top().second;
    heads.pop();
    uint64_t until = ticks - 1;  // the last time taken from this run now
    if (!heads.empty()) until = std::min(until, heads.top().first);
    if (!w.out_of_order.empty()) until = std::min(until, w.out_of_order.top().ticks);
    ChangeRun &r = w.runs[i];
    do {
      merge_change(w, r.changes[r.next++]);
      --w.waiting_changes;
    } while (r.next < r.changes.size() && r.changes[r.next].ticks <= until);
    if (r.next < r.changes.size()) heads.push({r.changes[r.next].ticks, i});
  }
  start_steps(w, ticks);
  w.merged_until = std::max(w.merged_until, ticks);
  for (ChangeRun &r : w.runs) r.compact();
}

// The program's time `ns` behind the newest event read: every thread busy since has handed over
// what it recorded before it (a buffer at each flush tick).
uint64_t read_past(const WindowState &w, uint64_t ns) {
  const uint64_t ticks = g_ticks_per_second * (ns / 1'000'000) / 1000;
  return w.newest_read - std::min(w.newest_read, ticks);
}

// Merges what every thread busy in the meantime has handed over (read_past kSettleNs); sooner
// when too many changes wait.
void merge_waiting(WindowState &w) {
  const bool too_many = w.waiting_changes > kMaxWaitingChanges;
  uint64_t horizon = read_past(w, too_many ? kSettleNs / 4 : kSettleNs);
  if (!too_many) horizon = std::min(horizon, w.unread);
  if (horizon > w.merged_until) merge_until(w, horizon);
  if (w.waiting_changes > kMaxWaitingChanges) merge_until(w, w.newest_read);
}

// A change of the host bytes live: `b`'s size, added (sign > 0) or taken at `ticks`; in the
// thread's run (`in_order`: at its events' time order), or out of order.
void add_bytes(WindowState &w, const LiveBlock &b, int64_t sign, uint64_t ticks,
               bool in_order = true) {
  const SizeChange c{ticks, sign > 0 ? static_cast<int64_t>(b.size) : -static_cast<int64_t>(b.size),
                     b.label, b.role};
  if (ticks < w.merged_until) {  // read after its time was merged
    merge_change(w, c);
    return;
  }
  if (in_order)
    w.runs[w.reading_thread].changes.push_back(c);
  else
    w.out_of_order.push(c);
  ++w.waiting_changes;
}

// `b`, live at `addr`, changes or ends at `ticks`: while the live set's host blocks wait, a
// block the trace does not hold yet is kept as the window found it (its event is written whole
// and applies to the live set's allocation).
void keep_as_at_open(WindowState &w, uint64_t addr, const LiveBlock &b, uint64_t ticks) {
  if (w.heap_live_set_waits && !b.traced && ticks >= w.live_set_ticks)
    w.as_at_open.emplace(addr, b);
}

// The trace no longer holds `b` as it is live (an event of a folded chunk changed it): the
// window's live set frees it, and allocates it anew if it is still live then.
// The live set's frees: before the window opens, and of host blocks before its start while its
// host part waits (HeapLiveSet; not a block folded after the window closed).
bool live_set_frees(const WindowState &w, uint8_t space, uint64_t ticks) {
  return !w.opened || (w.heap_live_set_waits && is_host(space) && ticks < w.window_open);
}

void untrace(WindowState &w, uint64_t addr, LiveBlock &b, uint64_t ticks) {
  if (!b.traced) return;
  b.traced = false;
  if (live_set_frees(w, b.space, ticks))
    w.traced_deaths.push_back({addr, b.size, b.device, b.space});
}

// munmap of [start, start + length) (or a MAP_FIXED mapping over it): the pieces of the
// mappings there end, as the reader ends them (Replay::unmap_range); a piece the trace holds
// dies there unless the trace holds the event (`written`).
void unmap_range(WindowState &w, uint64_t start, uint64_t length, bool written) {
  if (length == 0 || w.mappings.empty()) return;
  const uint64_t end = start + length;
  auto it = w.mappings.upper_bound(start);
  if (it != w.mappings.begin()) --it;
  while (it != w.mappings.end() && it->first < end) {
    const uint64_t piece_start = it->first, piece_end = it->first + it->second.size;
    if (piece_end <= start) {
      ++it;
      continue;
    }
    const LiveBlock b = it->second;
    it = w.mappings.erase(it);
    const uint64_t hole = std::max(start, piece_start), hole_end = std::min(end, piece_end);
    if (b.traced && !written && !w.opened)
      w.traced_deaths.push_back({hole, hole_end - hole, b.device, b.space});
    if (piece_start < start) {  // the part before the hole
      LiveBlock head = b;
      head.size = start - piece_start;
      head.slack = 0;
      w.mappings.emplace(piece_start, head);
    }
    if (piece_end > end) {  // and the part after it
      LiveBlock tail = b;
      tail.size = piece_end - end;
      tail.slack = 0;
      it = std::next(w.mappings.emplace(end, tail).first);
    }
  }
}

// A block of the other spaces at `addr`: as the reader finds it (Replay::find).
LiveBlock *find_other(WindowState &w, uint64_t addr) {
  for (const uint8_t space :
       {ADPROF_SPACE_DEVICE_BLOCK, ADPROF_SPACE_DEVICE_RAW, ADPROF_SPACE_DEVICE_SEGMENT})
    if (auto it = w.device_blocks.find(device_key(addr, space)); it != w.device_blocks.end())
      return &it->second;
  auto m = w.mappings.find(addr);
  return m != w.mappings.end() ? &m->second : nullptr;
}

// An allocation or free of the other spaces, kept as the reader would (Replay::on_alloc,
// on_free) for what the trace holds of them.
void apply_other(WindowState &w, const Folded &e, bool written) {
  const uint8_t space = e.operand;
  if (space == ADPROF_SPACE_MMAP) {
    unmap_range(w, e.addr, e.a, written);  // a MAP_FIXED mapping replaces what was there
    if (e.type == fmt::EventType::kAlloc) {
      const uint8_t role =
          e.thread < w.thread_role.size() ? w.thread_role[e.thread] : uint8_t{ADPROF_ROLE_FOREIGN};
      w.mappings[e.addr] = {e.a, e.ticks, 0, 0, e.device, role, space, written};
    }
    return;
  }
  auto end_block = [&](uint64_t key) {
    auto it = w.device_blocks.find(key);
    if (it == w.device_blocks.end()) return false;
    if (!written) untrace(w, e.addr, it->second, e.ticks);
    w.device_blocks.erase(it);
    return true;
  };
  if (e.type == fmt::EventType::kFree) {
    // The same driver memory may be seen in the other space (a segment declared over a raw
    // cudaMalloc): the reader looks there too.
    if (!end_block(device_key(e.addr, space)) &&
        (space == ADPROF_SPACE_DEVICE_RAW || space == ADPROF_SPACE_DEVICE_SEGMENT))
      end_block(device_key(e.addr, space == ADPROF_SPACE_DEVICE_RAW ? ADPROF_SPACE_DEVICE_SEGMENT
                                                                    : ADPROF_SPACE_DEVICE_RAW));
    return;
  }
  if (space == ADPROF_SPACE_DEVICE_SEGMENT)
    end_block(device_key(e.addr, ADPROF_SPACE_DEVICE_RAW));  // counted once, as reserve
  end_block(device_key(e.addr, space));                      // its free was not seen
  const uint8_t role =
      e.thread < w.thread_role.size() ? w.thread_role[e.thread] : uint8_t{ADPROF_ROLE_FOREIGN};
  w.device_blocks[device_key(e.addr, space)] = {
      e.a,   e.ticks, static_cast<uint32_t>(std::min<uint64_t>(e.b, UINT32_MAX)), 0, e.device, role,
      space, written};
}

// The kept free at `addr` read at `ticks`, or the end.
std::unordered_multimap<uint64_t, EarlyFree>::iterator find_early_free(WindowState &w,
                                                                       uint64_t addr,
                                                                       uint64_t ticks) {
  auto [it, end] = w.early_frees.equal_range(addr);
  for (; it != end; ++it)
    if (it->second.ticks == ticks) return it;
  return w.early_frees.end();
}

// A free of a block the live map does not hold: kept for an allocation read later (EarlyFree).
// The oldest kept are dropped past kEarlyFrees. `early_order` still lists those taken since
// (take_early_free): they are skipped, and cleared out when they are as many as the kept.
void remember_early_free(WindowState &w, uint64_t addr, uint64_t ticks, bool written) {
  w.early_frees.emplace(addr, EarlyFree{ticks, w.reading_thread, written});
  w.early_order.emplace_back(addr, ticks);
  if (w.early_order.size() > 2 * kEarlyFrees)
    std::erase_if(w.early_order, [&](const std::pair<uint64_t, uint64_t> &o) {
      return find_early_free(w, o.first, o.second) == w.early_frees.end();
    });
  while (w.early_frees.size() > kEarlyFrees && !w.early_order.empty()) {
    const auto [old_addr, old_ticks] = w.early_order.front();
    w.early_order.pop_front();
    if (auto it = find_early_free(w, old_addr, old_ticks); it != w.early_frees.end())
      w.early_frees.erase(it);
  }
}

// The free, read already, of the block the reading thread allocated at `addr` at `ticks`: the
// first another thread made there at or after `ticks` (an earlier one ended an earlier block),
// and before `until`, the allocating thread's next event there (its own free of the block, or an
// allocation there after another thread freed it). Before that limit, a thread that allocated
// and freed a temporary where another thread later freed a batch gave the temporary the batch's
// free, and the batch, its free taken, stayed live for good. False: none.
bool take_early_free(WindowState &w, uint64_t addr, uint64_t ticks, uint64_t until,
                     EarlyFree &free) {
  if (w.early_frees.empty()) return false;
  auto [it, end] = w.early_frees.equal_range(addr);
  auto found = end;
  for (; it != end; ++it)
    if (it->second.ticks >= ticks && it->second.ticks < until &&
        it->second.thread != w.reading_thread &&
        (found == end || it->second.ticks < found->second.ticks))
      found = it;
  if (found == end) return false;
  free = found->second;
  w.early_frees.erase(found);  // its entry in early_order is skipped (remember_early_free)
  return true;
}

// The blocks whose free was read before their allocation end where the reading has reached
// their free (`ticks`; UINT64_MAX: all of them, at a buffer's end).
void end_dying(WindowState &w, uint64_t ticks) {
  while (!w.dying.empty() && w.dying.top().ticks <= ticks) {
    const Dying d = w.dying.top();
    w.dying.pop();  // its bytes' end was added out of order with its allocation
    // The trace holds its allocation and not its free: the window's live set frees it, unless
    // the trace holds another block there now.
    if (d.block.traced && !d.written && live_set_frees(w, d.block.space, d.ticks)) {
      auto live = w.live.find(d.addr);
      if (live == w.live.end() || !live->second.traced)
        w.traced_deaths.push_back({d.addr, d.block.size, d.block.device, d.block.space});
    }
    for (size_t i = w.steps.size(); i-- > 0;)
      if (w.steps[i].start <= d.ticks) {
        if (d.ticks < w.steps[i].end) ++w.steps[i].frees;
        break;
      }
  }
}

// A block replaced in the live map by an allocation read at `at` (Replaced), kept for a free
// read later. Past kEarlyFrees of them, those merged already go first (a free of them would
// move nothing), then all.
void remember_replaced(WindowState &w, uint64_t addr, const LiveBlock &b, uint64_t at) {
  w.replaced[addr] = {b, at, w.reading_thread};
  if (w.replaced.size() <= kEarlyFrees) return;
  std::vector<uint64_t> merged;
  for (const auto &[a, r] : w.replaced)
    if (r.at < w.merged_until) merged.push_back(a);
  for (const uint64_t a : merged) w.replaced.erase(a);
  if (w.replaced.size() > kEarlyFrees) w.replaced.clear();
}

// The free at `addr` at `ticks` of a block replaced since by a later allocation there: the
// block's end moves back from the replacement to `ticks`, if the replacement is not merged yet.
// Its end there is taken out of the replacing thread's run (made a change of nothing), not
// undone by a change of its own: at the replacement's time, which a thread's events share when
// it is alone in a share tick, the run's other changes would come between the two (the block
// counted twice as freed, the live bytes below zero for a moment). False: no such block.
bool end_replaced(WindowState &w, uint64_t addr, uint64_t ticks) {
  auto it = w.replaced.find(addr);
  if (it == w.replaced.end() || it->second.block.ticks > ticks || ticks >= it->second.at)
    return false;
  const Replaced r = it->second;
  w.replaced.erase(it);
  if (r.at < w.merged_until) return true;  // ended there for good
  ChangeRun &run = w.runs[r.thread];
  const auto waiting = run.changes.begin() + static_cast<ptrdiff_t>(run.next);
  auto change = std::lower_bound(waiting, run.changes.end(), r.at,
                                 [](const SizeChange &c, uint64_t t) { return c.ticks < t; });
  const auto size = static_cast<int64_t>(r.block.size);
  for (; change != run.changes.end() && change->ticks == r.at; ++change)
    if (change->delta == -size && change->label == r.block.label && change->role == r.block.role) {
      change->delta = 0;
      add_bytes(w, r.block, -1, ticks);
      break;
    }
  return true;
}

// For each event of the buffer (w.folded), the time of the buffer's next host allocation or free
// at its address (take_early_free's limit). Only while frees of other threads wait to be matched
// (those of this buffer never end its own blocks): else none, and no limit.
void find_own_next_events(WindowState &w) {
  w.own_next.clear();
  if (w.early_frees.empty()) return;
  w.own_next.assign(w.folded.size(), UINT64_MAX);
  w.next_at.clear();
  for (size_t i = w.folded.size(); i-- > 0;) {
    const Folded &e = w.folded[i];
    if ((e.type != fmt::EventType::kAlloc && e.type != fmt::EventType::kFree) ||
        !is_host(e.operand))
      continue;
    auto [it, inserted] = w.next_at.emplace(e.addr, e.ticks);
    if (!inserted) {
      w.own_next[i] = it->second;
      it->second = e.ticks;
    }
  }
}

// `e` counted into the live map and its step; `written`: its buffer is written whole (the trace
// holds the event); `own_next`: its thread's next event at its address in the buffer
// (find_own_next_events).
void apply(WindowState &w, const Folded &e, bool written, uint64_t own_next) {
  if (!w.dying.empty()) end_dying(w, e.ticks);
  switch (e.type) {
    case fmt::EventType::kRole:
      if (e.thread >= w.thread_role.size())
        w.thread_role.resize(e.thread + 1, uint8_t{ADPROF_ROLE_FOREIGN});
      w.thread_role[e.thread] = e.operand;
      return;
    case fmt::EventType::kAlloc: {
      if (!is_host(e.operand)) {
        apply_other(w, e, written);
        return;
      }
      // The figures at the start of a step it begins are taken before it counts.
      StepFigures *s = step_at(w, e.ticks);
      // Freed on another thread whose events were read first (EarlyFree): live until then, in
      // place of nothing the live map holds.
      EarlyFree early{};
      const bool freed = take_early_free(w, e.addr, e.ticks, own_next, early);
      if (auto it = w.live.find(e.addr); !freed && it != w.live.end()) {  // its free not seen
        if (it->second.ticks <= e.ticks) remember_replaced(w, e.addr, it->second, e.ticks);
        keep_as_at_open(w, e.addr, it->second, e.ticks);
        if (!written) untrace(w, e.addr, it->second, e.ticks);
        add_bytes(w, it->second, -1, e.ticks);
        w.live.erase(it);
      }
      const uint8_t role =
          e.thread < w.thread_role.size() ? w.thread_role[e.thread] : uint8_t{ADPROF_ROLE_FOREIGN};
      const LiveBlock b{
          e.a,       e.ticks,  static_cast<uint32_t>(std::min<uint64_t>(e.b, UINT32_MAX)),
          0,         e.device, role,
          e.operand, written};
      add_bytes(w, b, +1, e.ticks);
      if (freed) {
        w.dying.push({early.ticks, e.addr, b, early.written});
        add_bytes(w, b, -1, early.ticks, /*in_order=*/false);
      } else {
        w.live.emplace(e.addr, b);
      }
      if (s) {
        ++s->allocations;
        s->bytes += e.a;
        s->last_ticks = e.ticks;
      }
      return;
    }
    case fmt::EventType::kFree: {
      if (!is_host(e.operand)) {
        apply_other(w, e, written);
        return;
      }
      auto it = w.live.find(e.addr);
      // The free of an earlier block there, read after the allocation that reused its address
      // (another thread's buffer first; the new block maybe freed since): that block ends here,
      // not where the new one began (Replaced).
      const bool of_replaced =
          (it == w.live.end() || it->second.ticks > e.ticks) && end_replaced(w, e.addr, e.ticks);
      if (it == w.live.end() && !of_replaced) {  // allocated before recording began, or read later
        remember_early_free(w, e.addr, e.ticks, written);
        return;
      }
      StepFigures *s = step_at(w, e.ticks);
      if (s) {
        ++s->frees;
        s->last_ticks = e.ticks;
      }
      if (of_replaced || it->second.ticks > e.ticks) return;
      keep_as_at_open(w, e.addr, it->second, e.ticks);
      if (!written) untrace(w, e.addr, it->second, e.ticks);
      add_bytes(w, it->second, -1, e.ticks);
      w.live.erase(it);
      return;
    }
    case fmt::EventType::kRetag:
    case fmt::EventType::kLabel: {
      step_at(w, e.ticks);
      auto it = w.live.find(e.addr);
      if (it == w.live.end()) {
        if (LiveBlock *b = find_other(w, e.addr)) {
          if (!written) untrace(w, e.addr, *b, e.ticks);
          if (e.type == fmt::EventType::kRetag)
            b->role = e.operand;
          else
            b->label = static_cast<uint32_t>(std::min<uint64_t>(e.a, UINT32_MAX));
        }
        return;
      }
      keep_as_at_open(w, e.addr, it->second, e.ticks);
      if (!written) untrace(w, e.addr, it->second, e.ticks);
      add_bytes(w, it->second, -1, e.ticks);
      if (e.type == fmt::EventType::kRetag)
        it->second.role = e.operand;
      else
        it->second.label = static_cast<uint32_t>(std::min<uint64_t>(e.a, UINT32_MAX));
      add_bytes(w, it->second, +1, e.ticks);
      return;
    }
    default:
      return;
  }
}

// The event `e` of a folded chunk kept in it (trace_format.h, "Step windows"): false when it
// is not one to keep, or does not fit (the chunk is then written whole).
bool keep(WindowState &w, const adprof::Event &e, bool &fits) {
  ChunkBuilder &c = w.kept;
  const std::string_view text = e.text();
  const auto values = e.values();
  // The largest kept event: a name or a mapping's path and build-id, or 64 frames.
  const size_t need = 64 + text.size() + values.size() * fmt::kMaxVarintBytes;
  auto check = [&] {
    if (!c.room(need)) fits = false;
    return fits;
  };
  uint8_t *p;
  switch (e.type) {
    case fmt::EventType::kPhase:
      if (!check()) return false;
      c.end(c.begin(e.type, e.operand, e.ticks));
      return true;
    case fmt::EventType::kCounter:
      if (!check()) return false;
      c.end(fmt::put_varint(c.begin(e.type, e.operand, e.ticks), e.a));
      return true;
    case fmt::EventType::kName:
      if (!check()) return false;
      p = fmt::put_varint(c.begin(e.type, 0, e.ticks), e.a);
      c.end(c.bytes(p, text));
      return true;
    case fmt::EventType::kThreadName:
      if (!check()) return false;
      c.end(c.bytes(c.begin(e.type, 0, e.ticks), text));
      return true;
    case fmt::EventType::kAnnotate:
      if (e.a < w.tape_names.size() && w.tape_names[e.a]) return false;
      if (!check()) return false;
      p = fmt::put_varint(c.begin(e.type, 0, e.ticks), e.a);
      p = fmt::put_varint(p, values.size());
      for (const uint64_t v : values) p = fmt::put_varint(p, v);
      c.end(p);
      return true;
    case fmt::EventType::kStack: {
      if (!check() || values.empty()) return false;
      const uint64_t shared = e.b;
      const uint32_t id = static_cast<uint32_t>(e.a);
      p = c.begin(fmt::EventType::kThreadName,
                  shared ? fmt::kSharedStackOperand : fmt::kStackOperand, e.ticks);
      p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(id) - c.last_defined));
      c.last_defined = id;
      p = fmt::put_varint(p, values.size());
      if (shared) p = fmt::put_varint(p, shared);
      const size_t inner = values.size() - shared;
      for (size_t i = 0; i < (shared ? inner : values.size()); ++i)
        p = fmt::put_varint(
            p, i == 0 ? values[0] : fmt::zigzag(static_cast<int64_t>(values[i] - values[i - 1])));
      c.end(p);
      return true;
    }
    case fmt::EventType::kMapping: {
      if (!check()) return false;
      const size_t zero = text.find('\0');
      const std::string_view path = text.substr(0, zero);
      const std::string_view id =
          zero == std::string_view::npos ? std::string_view() : text.substr(zero + 1);
      p = c.begin(fmt::EventType::kThreadName, fmt::kMappingOperand, e.ticks);
      p = fmt::put_varint(p, e.addr);
      p = fmt::put_varint(p, e.a);
      p = fmt::put_varint(p, e.b);
      p = c.bytes(p, path);
      c.end(c.bytes(p, id));
      return true;
    }
    case fmt::EventType::kUnmapping:
      if (!check()) return false;
      p = c.begin(fmt::EventType::kThreadName, fmt::kUnmappingOperand, e.ticks);
      p = fmt::put_varint(p, e.addr);
      c.end(fmt::put_varint(p, e.a));
      return true;
    default:
      return false;
  }
}

// Folded's share of an event: what the live map and the steps' figures read.
void note(WindowState &w, const adprof::Event &e) {
  switch (e.type) {
    case fmt::EventType::kName:
      if (e.text().starts_with("ad.tape.")) {
        if (e.a >= w.tape_names.size()) w.tape_names.resize(e.a + 1);
        w.tape_names[e.a] = true;
      }
      return;
    case fmt::EventType::kAlloc:
    case fmt::EventType::kFree:
    case fmt::EventType::kRole:
    case fmt::EventType::kRetag:
    case fmt::EventType::kLabel:
      w.folded.push_back({e.type, e.operand, e.thread, e.device, e.ticks, e.addr, e.a, e.b});
      return;
    default:
      return;
  }
}

// Decodes `b`: its events into w.folded, its kept ones into w.kept; its first and last times.
// False: it does not decode (written whole, the live map unchanged).
bool decode(WindowState &w, Buffer *b, uint64_t &first, uint64_t &last, bool &fits) {
  fmt::ChunkHeader c;
  c.thread = b->tid;
  c.base_ts = b->base_ts;
  c.events = b->events;
  c.seq = b->seq;
  c.raw = b->used;
  fmt::ChunkDecoder &d = *w.decoder;
  d.set_thread(b->tid);
  if (!d.load_raw(c, b->tags)) return false;
  w.folded.clear();
  w.kept.start(b->tid, b->seq, b->base_ts);
  first = UINT64_MAX;
  last = b->base_ts;
  fits = true;
  adprof::Event e, pending;
  auto take = [&](const adprof::Event &x) {
    first = std::min(first, x.ticks);
    last = std::max(last, x.ticks);
    note(w, x);
    keep(w, x, fits);
  };
  while (d.more()) {
    size_t written = 0;
    bool has_pending = false;
    if (d.tags_apart() &&
        !d.decode_heap_run(w.run.data(), w.run.size(), UINT64_MAX, written, pending, has_pending))
      return false;
    for (size_t i = 0; i < written; ++i) take(w.run[i]);
    if (has_pending) take(pending);
    if (written || has_pending) continue;
    if (!d.decode(e)) return false;
    take(e);
  }
  d.park();
  if (first == UINT64_MAX) first = b->base_ts;
  return true;
}

// Which of the live set's blocks a chunk of it holds.
enum class LiveSetPart {
  kAtOpen,  // when the window opens: device blocks and anonymous mappings
  kHeap,    // once every busy thread's events before it were read (HeapLiveSet)
};

// The window's live set, as events of the live set's thread at `ticks` (trace_format.h): what
// the trace needs to hold the blocks live then, given what it holds already (written whole
// before the first step mark): a free of each block it holds that has died since, then an
// allocation of each live block it does not hold. Every such block is then held.
//
// HeapLiveSet: the host blocks are written apart, later, at the same time. A thread's buffer may
// reach the writer after the window's first one although it frees blocks before the window (a
// DataLoader worker's batch freed by its queue's feeder thread): written at once, the live set
// would hold those blocks, and the window's frees of them come before its time, unmatched: each
// stayed live through the window (a MiB a step in StepWindowThreads.AFreeHandedOverLate...). So
// the host part waits until the writer has read kSettleNs of the program's time past the window's
// start on some thread, as the steps' merge does; meanwhile every chunk is written whole and a
// block live at the window's start that an event of the window ends or changes is kept as it was
// (as_at_open). A process killed (SIGKILL) within 0.4 s of the window's start has no host live set.
void write_live_set(WindowState &w, Compressor &k, uint64_t ticks, LiveSetPart part) {
  ChunkBuilder &c = w.live_set;
  // By role, then address: one role event per role, and small address deltas (a Python
  // process has hundreds of thousands of blocks live after its start-up).
  std::vector<std::pair<uint64_t, LiveBlock *>> blocks;
  if (part == LiveSetPart::kHeap) {
    // Not a block allocated since, folded after the window closed (every chunk in between is
    // written whole).
    auto live_at_open = [&](const LiveBlock &b) { return !b.traced && b.ticks < w.window_open; };
    for (auto &[addr, b] : w.live)
      if (live_at_open(b) && !w.as_at_open.contains(addr)) blocks.emplace_back(addr, &b);
    for (auto &[addr, b] : w.as_at_open) {
      if (!live_at_open(b)) continue;
      if (auto live = w.live.find(addr); live != w.live.end() && !live->second.traced)
        live->second.traced = true;  // the window's events make it what it is now
      blocks.emplace_back(addr, &b);
    }
  } else {
    for (auto &[key, b] : w.device_blocks)
      if (!b.traced)
        blocks.emplace_back(key ^ static_cast<uint64_t>(b.space) << 61, &b);  // its address
    for (auto &[addr, b] : w.mappings)
      if (!b.traced) blocks.emplace_back(addr, &b);
  }
  std::vector<TracedDeath> &deaths = w.traced_deaths;
  if (blocks.empty() && deaths.empty()) return;
  // A total order (a device segment and its first block share an address): the bytes do not
  // depend on the maps' order.
  std::sort(blocks.begin(), blocks.end(), [](const auto &x, const auto &y) {
    if (x.second->role != y.second->role) return x.second->role < y.second->role;
    return x.first != y.first ? x.first < y.first : x.second->space < y.second->space;
  });
  // A block may have died twice (held again through a late whole chunk): one free.
  auto order = [](const TracedDeath &x, const TracedDeath &y) {
    return x.space != y.space ? x.space < y.space : x.addr < y.addr;
  };
  std::sort(deaths.begin(), deaths.end(), order);
  deaths.erase(std::unique(deaths.begin(), deaths.end(),
                           [](const TracedDeath &x, const TracedDeath &y) {
                             return x.space == y.space && x.addr == y.addr;
                           }),
               deaths.end());
  c.start(fmt::kLiveSetThread, w.live_set_seq, ticks);
  if (w.live_set_seq++ == 0)
    c.end(c.bytes(c.begin(fmt::EventType::kThreadName, 0, ticks), "adprof-live-set"));
  auto next_chunk_if_full = [&](uint8_t &role) {
    if (c.room(3 * kMaxFixedEvent)) return;
    c.write(k);
    c.start(fmt::kLiveSetThread, w.live_set_seq++, ticks);
    role = 0xFF;
  };
  uint8_t role = 0xFF;
  for (const TracedDeath &d : deaths) {
    next_chunk_if_full(role);
    uint8_t *p = c.addr(c.begin(fmt::EventType::kFree, d.space, ticks), d.addr);
    if (d.space == ADPROF_SPACE_MMAP) p = fmt::put_varint(p, d.length);
    if (d.space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, d.device);
    c.end(p);
  }
  deaths.clear();
  deaths.shrink_to_fit();
  for (const auto &[addr, block] : blocks) {
    LiveBlock &b = *block;
    next_chunk_if_full(role);
    if (b.role != role) {
      c.end(c.begin(fmt::EventType::kRole, b.role, ticks));
      role = b.role;
    }
    uint8_t *p = c.addr(c.begin(fmt::EventType::kAlloc, b.space, ticks), addr);
    p = fmt::put_varint(p, b.size);
    p = fmt::put_varint(p, b.slack);
    if (b.space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, b.device);
    if (g_stacks) p = fmt::put_varint(p, 0);  // no stack (zz(0 - 0))
    c.end(p);
    if (b.label) {
      p = c.addr(c.begin(fmt::EventType::kLabel, 0, ticks), addr);
      c.end(fmt::put_varint(p, b.label));
    }
    b.traced = true;
  }
  c.write(k);
}

// The live set's host part (HeapLiveSet), once its time has settled (`all`: at the end).
void write_heap_live_set(WindowState &w, Compressor &k, bool all) {
  if (!w.heap_live_set_waits) return;
  // Read past it on some thread, or over for as long by the clock, every buffer handed over
  // since read (a process that stops allocating, then is killed by the OOM killer, has it); and
  // no thread holds an event from before it unread (a feeder blocked since it freed the last
  // batch before the window), unless that thread was left out as idle (note_unread_events).
  // Before, a window opened while such a thread waited held its freed batch live throughout.
  const uint64_t since_open = now_ns() - w.opened_ns;
  if (!all && ((read_past(w, kSettleNs) < w.live_set_ticks && since_open < kSettleNs) ||
               (w.unread <= w.live_set_ticks && since_open < kIdleThreadNs)))
    return;
  w.heap_live_set_waits = false;
  write_live_set(w, k, w.live_set_ticks, LiveSetPart::kHeap);
  w.as_at_open.clear();
}

void flush_summaries(WindowState &w, Compressor &k) {
  if (w.pending_summaries == 0) return;
  w.summaries.write(k);
  w.pending_summaries = 0;
}

// The summary of step `s` (trace_format.h, "Step windows").
void write_summary(WindowState &w, Compressor &k, const StepFigures &s) {
  const uint64_t end = s.end != UINT64_MAX ? s.end : std::max(s.last_ticks, s.start);
  ChunkBuilder &c = w.summaries;
  const size_t need =
      128 + 2 * kRoles * fmt::kMaxVarintBytes + s.start_labels.size() * 3 * fmt::kMaxVarintBytes;
  if (w.pending_summaries && !c.room(need)) flush_summaries(w, k);
  if (w.pending_summaries == 0) {
    c.start(fmt::kStepSummaryThread, w.summary_seq, std::max(end, c.last_ts));
    if (w.summary_seq++ == 0)
      c.end(c.bytes(c.begin(fmt::EventType::kThreadName, 0, end), "adprof-steps"));
    w.pending_since_ns = now_ns();
  }
  uint8_t *p = c.begin(fmt::EventType::kThreadName, fmt::kStepSummaryOperand, end);
  const uint64_t at = c.last_ts;  // the event's time (never before the previous one)
  p = fmt::put_varint(p, s.step);
  p = fmt::put_varint(p, at - std::min(s.start, at));
  p = fmt::put_varint(p, at - std::min(s.peak_ticks, at));
  p = fmt::put_varint(p, s.allocations);
  p = fmt::put_varint(p, s.frees);
  p = fmt::put_varint(p, s.bytes);
  p = fmt::put_varint(p, s.peak);
  p = fmt::put_varint(p, kRoles);
  for (const uint64_t v : s.peak_by_role) p = fmt::put_varint(p, v);
  for (const uint64_t v : s.start_by_role) p = fmt::put_varint(p, v);
  p = fmt::put_varint(p, s.start_labels.size());
  for (const auto &[key, bytes] : s.start_labels) {
    p = fmt::put_varint(p, key >> 8);
    p = fmt::put_varint(p, key & 0xFF);
    p = fmt::put_varint(p, bytes);
  }
  c.end(p);
  if (++w.pending_summaries >= kSummariesPerChunk) flush_summaries(w, k);
}

// Closes the oldest open steps: those over for kSettleNs (all of them when `all`).
void close_steps(WindowState &w, Compressor &k, bool all) {
  const uint64_t now = now_ns();
  while (!w.steps.empty()) {
    StepFigures &s = w.steps.front();
    if (!all &&
        (s.end == UINT64_MAX || now - std::min(now, s.end_ns) < kSettleNs || s.end > w.unread ||
         (s.end_thread != kNoThread &&
          (s.end_thread >= w.read_until.size() || w.read_until[s.end_thread] < s.end))))
      break;
    merge_until(w, s.end);
    if (!s.started) take_start(w, s);
    if (!in_window(w, s)) write_summary(w, k, s);
    w.steps.pop_front();
    if (w.started > 0) --w.started;
  }
  if (w.pending_summaries && (all || now - w.pending_since_ns >= kSummaryFlushNs))
    flush_summaries(w, k);
}

}  // namespace

bool configure_step_window() {
  const char *text = getenv("ADPROF_STEPS");
  if (!text || !*text || g_step_window) return true;
  char *end = nullptr;
  const unsigned long long first = strtoull(text, &end, 10);
  const bool colon = end != text && *end == ':';
  const char *second_text = colon ? end + 1 : end;
  const unsigned long long second = colon ? strtoull(second_text, &end, 10) : 0;
  if (!colon || end == second_text || *end || first >= second || text[0] == '-' ||
      second_text[0] == '-') {
    say("ADPROF_STEPS must be A:B with 0 <= A < B (the steps A to B-1 in full); recording every "
        "step in full");
    return false;
  }
  g_window = new (g_window_storage) WindowState();
  // From the marks published from now on.
  g_window->next_mark = g_marks.claimed();
  g_first_step = first;
  g_end_step = second;
  g_step_window = true;
  return true;
}

void reset_step_window_in_fork_child() {
  // The window's state is the parent writer's (its live map of the parent's blocks, the marks it
  // had read), copied at any point of that writer's work: abandoned, never touched. The child's
  // writer configures a window of its own (start_writer), over the child's own steps, its
  // window's edges its own. The parent's marks are not the child's, and an entry that one of the
  // parent's other threads was writing at the fork would stay half written: the ring starts
  // anew (only this thread runs yet).
  g_step_window = false;
  g_window = nullptr;
  g_marks.reset();
  g_window_opened.store(false, std::memory_order_relaxed);
  g_window_closed.store(false, std::memory_order_relaxed);
  g_first_marked.store(false, std::memory_order_relaxed);
}

bool publish_step_mark(uint64_t step, uint64_t ticks, uint32_t thread) {
  if (!g_step_window) return false;
  g_marks.publish({step, ticks, now_ns(), thread});
  const bool opens =
      step >= g_first_step && !g_window_opened.exchange(true, std::memory_order_relaxed);
  const bool closes =
      step >= g_end_step && !g_window_closed.exchange(true, std::memory_order_relaxed);
  // The first mark ends what is written whole before the steps: the buffers end there too.
  const bool first = !g_first_marked.load(std::memory_order_relaxed) &&
                     !g_first_marked.exchange(true, std::memory_order_relaxed);
  if (opens || closes || first) g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
  return opens || closes || first;
}

void write_windowed_buffer(Buffer *b, Compressor &k) {
  WindowState &w = *g_window;
  if (!set_up(w)) {
    write_buffer_whole(b, k);
    return;
  }
  read_marks(w);
  uint64_t first = 0, last = 0;
  bool fits = true;
  if (!decode(w, b, first, last, fits)) {
    write_buffer_whole(b, k);
    return;
  }
  const bool in_window = first < w.window_close && (w.opened || last >= w.window_open);
  if (in_window && !w.opened) {
    // Before the window's first mark, and before this buffer's first event: another thread's
    // buffer with events of the window's first step may come later (this one a thread that
    // freed them).
    w.live_set_ticks = std::min({first, b->base_ts, w.window_open}) - 1;
    write_live_set(w, k, w.live_set_ticks, LiveSetPart::kAtOpen);
    w.opened = true;
    w.opened_ns = now_ns();
    w.heap_live_set_waits = true;
  }
  // Before the process's first step mark there is no step to hold the events: the buffer is
  // written whole (a process that never marks a step is recorded as without a window).
  const bool whole = in_window || first < w.first_mark || !fits || w.kept.events == 0;
  if (b->tid >= w.runs.size()) w.runs.resize(b->tid + 1);
  w.reading_thread = b->tid;
  find_own_next_events(w);
  for (size_t i = 0; i < w.folded.size(); ++i)
    apply(w, w.folded[i], whole, w.own_next.empty() ? UINT64_MAX : w.own_next[i]);
  end_dying(w, UINT64_MAX);
  if (b->tid >= w.read_until.size()) w.read_until.resize(b->tid + 1, 0);
  w.read_until[b->tid] = std::max(w.read_until[b->tid], last);
  // The reading's progress is the program's threads': not the writer's own buffers (its counter
  // samples, at the writer's time), which would carry the horizon past a stalled thread's
  // events not handed over yet (StepWindowStall.AProgramStalledAfterAMarkKeepsEveryStepsFigures).
  if (!w.folded.empty()) w.newest_read = std::max(w.newest_read, last);
  if (w.waiting_changes > kMaxWaitingChanges) merge_waiting(w);
  if (whole)
    write_buffer_whole(b, k);
  else
    w.kept.write(k);
}

void note_unread_events() {
  if (!g_step_window) return;
  g_window->unread = oldest_unread_ticks(now_ns(), kIdleThreadNs);
}

void write_settled_steps(Compressor &k) {
  if (!g_step_window || !g_window->ready) return;
  WindowState &w = *g_window;
  read_marks(w);
  merge_waiting(w);
  write_heap_live_set(w, k, false);
  close_steps(w, k, false);
}

void write_remaining_steps(Compressor &k) {
  if (!g_step_window || !g_window->ready) return;
  read_marks(*g_window);
  write_heap_live_set(*g_window, k, true);
  close_steps(*g_window, k, true);
}

}  // namespace adprof::preload
