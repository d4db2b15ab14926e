// A trace as a PyTorch memory snapshot, the pickle that pytorch.org/memory_viz, `python -m
// torch.cuda._memory_viz` and Mosaic read (layout: torch/cuda/memory.py, `_snapshot`).
//
// What is written (docs/PYTORCH.md, "Snapshots"):
//  - device_traces[i], i < N: the trace's device blocks of device i (N: the highest device
//    index seen, plus one), with its reserved segments as segment_alloc / segment_free;
//    device_traces[N]: the host heap (malloc & co. and pinned host memory). A trace without
//    device memory has the host heap as device 0. (PyTorch's own conversion of a profile,
//    `_memory_viz._profile_to_snapshot`, puts the CPU after the GPUs too.) A PyTorch snapshot
//    read as a trace (TraceHeader::heap_is_device) goes back to its own devices.
//  - each block's allocation is an `alloc` entry, its free a `free_requested` and a
//    `free_completed` at the same time (the viewer joins them into one `free`); `addr`, `size`
//    (the requested bytes), `stream` 0, `time_us` since the start of the recording, and
//    `frames`: first {filename: the block's label (a module path) or "", line 0, name: its op},
//    then its call stack when the trace has one (innermost first, as PyTorch writes them);
//  - `user_metadata`: the block's label, when it has one;
//  - `category`: the block's adprof role (the legend of the viewer's timeline): its role at
//    the host peak (the device peak, for device blocks) if it was live there, else its last;
//  - segments: the state at the end of the trace: a device's live segments with its live
//    blocks and the gaps between them ("inactive"); blocks outside every segment (every host
//    block) are grouped in runs, a run's blocks less than 64 MiB apart, each run a segment
//    marked `adprof_run_of_blocks` (its gaps are no memory anyone reserved: `stats`'s
//    total_reserved counts them, its total_allocated is exact);
//  - the AD protocol's ad.device.oom: an `oom` entry (size: the request; device_free: the
//    limit less what was reserved);
//  - a top-level "adprof" dict says that the categories are adprof's roles, which the reader
//    (torch_snapshot_read.cpp) takes as they are.
// Pickle protocol 4 without framing (pickle.h); the viewer's reader refuses protocol 5.
//
// Made in the one export pass (torch_snapshot_writer.h): the entries as the events come, the
// roles at the peaks kept as the peaks move (a block changed after the peak it was live at
// logs its state there), the device traces numbered and the segments taken from the replay at
// the end; no second reading of the trace.
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <map>

#include "adprof/ad_events.h"
#include "adprof/call_stacks.h"
#include "pickle.h"
#include "torch_snapshot_writer.h"
#include "trace_format.h"

namespace adprof {

namespace fmt = format;

namespace {

enum Action : uint8_t { kAllocEntry, kFreeEntry, kSegmentAlloc, kSegmentFree, kOom };

struct Entry {
  uint64_t addr = 0;  // an OOM: the bytes the device had free (limit - reserved)
  uint64_t size = 0;
  uint64_t time_us = 0;
  uint32_t alloc = 0;  // a free: its allocation's entry
  uint32_t stack = 0;  // index into the stacks' frames (0: none)
  uint32_t op_name = 0;
  uint32_t label = 0;
  uint8_t action = kAllocEntry;
  uint8_t role = ADPROF_ROLE_FOREIGN;
};

struct Frame {
  std::string file;
  int64_t line = 0;
  std::string name;
};

// Host blocks are one memory, each device's blocks another.
bool exported_space(int space) { return is_host_space(space) || is_device_space(space); }

}  // namespace

class TorchSnapshotWriter::Exporter {
 public:
  Exporter(const TraceReader &reader, const Replay &replay)
      : reader_(reader), replay_(replay), heap_is_device_(reader.header().heap_is_device) {}

  void on_heap(const Event &e, const Replay::HeapChange &c) {
    count_device(e);
    const uint64_t t = time_us(e);
    if (c.removed) freed(e.addr, *c.removed, t);
    if (e.type == fmt::EventType::kAlloc && c.block) allocated(e, e.addr, *c.block);
    note_peaks();
  }

  void on_event(const Event &e, bool changed) {
    count_device(e);
    stacks_.on_event(e);
    if (e.type == fmt::EventType::kLabel) label(e);
    if (e.type == fmt::EventType::kAnnotate) oom(e, time_us(e));
    if (!changed) return;
    const Replay::LastChange &last = replay_.last();
    const uint64_t t = time_us(e);
    for (const auto &[key, b] : last.removed) freed(key, *b, t);
    if (last.alloc && last.block) allocated(e, last.key, *last.block);
    if (last.retag && last.block) {
      auto it = live_.find(last.key);
      if (it != live_.end()) changing(it->second).role = last.block->role;
    }
    note_peaks();
  }

  std::string finish(SnapshotExportStats *stats) {
    // Blocks live at their memory's peak and changed since: back to their state at the peak.
    for (const PeakLog *peak : {&host_peak_, &device_peak_})
      for (const PeakState &s : peak->log) {
        Entry &a = entries(s.trace)[s.index];
        a.role = s.role;
        a.label = s.label;
      }
    // The devices are known now: the host heap's trace follows them.
    host_ = heap_is_device_ ? kNoTrace : devices_;
    device_traces_.resize(devices_);  // a device index no allocation counted has no trace
    traces_ = std::move(device_traces_);
    if (host_ != kNoTrace) traces_.push_back(std::move(host_trace_));
    for (auto it = live_.begin(); it != live_.end();) {
      if (it->second.trace == kHostTrace) it->second.trace = host_;
      if (it->second.trace >= traces_.size())
        live_.erase(it++);
      else
        ++it;
    }
    for (const auto &[key, b] : replay_.blocks()) end_blocks_.push_back({key, &b});
    segments_ = end_segments(replay_);
    std::string bytes = write();
    if (stats) {
      stats->devices = static_cast<uint32_t>(traces_.size());
      for (const auto &t : traces_) {
        for (const Entry &e : t) {
          stats->allocations += e.action == kAllocEntry;
          stats->entries += e.action == kFreeEntry ? 2 : 1;  // free_requested, free_completed
        }
      }
      stats->bytes = bytes.size();
    }
    return bytes;
  }

 private:
  // A block the snapshot follows: its trace (kHostTrace: the host heap's, numbered at the end)
  // and entry, and the serial of the event that allocated it (Block::serial).
  struct Live {
    uint32_t trace, index;
    uint64_t serial;
  };

  // The devices: the highest device index an allocation of device memory names, plus one
  // (every device trace is kept as the pass goes; those above it are dropped at the end).
  void count_device(const Event &e) {
    if (e.type == fmt::EventType::kAlloc && e.device < kMaxDevices &&
        (e.operand == ADPROF_SPACE_HEAP
             ? heap_is_device_
             : e.operand != ADPROF_SPACE_MMAP && e.operand != ADPROF_SPACE_HOST_PINNED))
      devices_ = std::max(devices_, e.device + 1);
  }

  // The peaks of the host and of the devices (the events that first reached them: analyze()'s
  // rule). A block's category and label are those it had at its memory's peak if it was live
  // then: copying the live set at every new peak would cost a copy per allocation while memory
  // rises, so a block live at the peak logs its state there the first time it changes after it
  // (memory/live_at_peak.h's way), and a new peak clears the log.
  struct PeakState {
    uint32_t trace, index;
    uint8_t role;
    uint32_t label;
  };
  struct PeakLog {
    uint64_t bytes = 0;
    uint64_t serial = 0;  // the replay's serial after the peak's event (0: no peak yet)
    std::vector<PeakState> log;
    absl::flat_hash_set<uint64_t> logged;  // (trace, index)
    void at(uint64_t live, uint64_t now) {
      if (live <= bytes) return;
      bytes = live;
      serial = now;
      log.clear();
      logged.clear();
    }
  };
  void note_peaks() {
    host_peak_.at(replay_.host_live(), replay_.serial());
    device_peak_.at(replay_.device_live(), replay_.serial());
  }
  // The entry of a live block about to change its role or label.
  Entry &changing(const Live &l) {
    Entry &a = entries(l.trace)[l.index];
    // A snapshot's heap is its devices' memory, whose peak is the heap's.
    PeakLog &peak = heap_is_device_ || l.trace == kHostTrace ? host_peak_ : device_peak_;
    if (l.serial <= peak.serial && peak.logged.insert((uint64_t{l.trace} << 32) | l.index).second)
      peak.log.push_back({l.trace, l.index, a.role, a.label});
    return a;
  }

  uint64_t time_us(const Event &e) const {
    return static_cast<uint64_t>(reader_.seconds(e.ticks) * 1e6);
  }

  // The device trace of a block allocated by `e` (kNoTrace: none).
  uint32_t trace_of(const Block &b, const Event &e) const {
    if (b.space == ADPROF_SPACE_HEAP && heap_is_device_) return e.device;
    if (is_host_space(b.space)) return heap_is_device_ ? kNoTrace : kHostTrace;
    return b.device;
  }
  std::vector<Entry> &entries(uint32_t trace) {
    if (trace == kHostTrace) return host_trace_;
    if (trace >= device_traces_.size()) device_traces_.resize(trace + 1);
    return device_traces_[trace];
  }

  void freed(uint64_t key, const Block &b, uint64_t t) {
    auto it = live_.find(key);
    if (it == live_.end()) return;
    const Live l = it->second;
    live_.erase(it);
    std::vector<Entry> &trace = entries(l.trace);
    Entry f = trace[l.index];
    f.action = b.space == ADPROF_SPACE_DEVICE_SEGMENT ? kSegmentFree : kFreeEntry;
    f.alloc = l.index;
    f.time_us = t;
    trace.push_back(f);
  }

  void allocated(const Event &ev, uint64_t key, const Block &b) {
    const uint64_t t = time_us(ev);
    const bool segment = b.space == ADPROF_SPACE_DEVICE_SEGMENT;
    if (!segment && !exported_space(b.space)) return;
    const uint32_t trace = segment ? b.device : trace_of(b, ev);
    if (trace != kHostTrace && trace >= kMaxDevices) return;
    Entry e;
    e.action = segment ? kSegmentAlloc : kAllocEntry;
    e.addr = Replay::address_of(key);
    e.size = b.size;
    e.time_us = t;
    e.role = b.role;
    e.op_name = b.op_name;
    e.label = b.label;
    e.stack = b.stack ? stack_frames(b.stack) : 0;
    std::vector<Entry> &entries_of_trace = entries(trace);
    live_[key] = {trace, static_cast<uint32_t>(entries_of_trace.size()), b.serial};
    entries_of_trace.push_back(e);
  }

  // The AD protocol's ad.device.oom (or its legacy name): an `oom` entry of its device, with
  // what the device had free beside what the allocator reserved.
  void oom(const Event &e, uint64_t t) {
    const ad::Decoder::Annotation a = decoder_.annotation(e);
    if (a.kind != ad::Kind::kDeviceOom || a.values.size() < 5) return;
    const uint64_t device = a.values[4];
    if (device >= kMaxDevices) return;  // and a device no allocation counted: dropped at the end
    Entry o;
    o.action = kOom;
    o.size = a.values[0];
    o.addr = a.values[3] > a.values[1] ? a.values[3] - a.values[1] : 0;
    o.time_us = t;
    entries(static_cast<uint32_t>(device)).push_back(o);
  }

  void label(const Event &e) {
    for (int space : {ADPROF_SPACE_HEAP, ADPROF_SPACE_DEVICE_BLOCK, ADPROF_SPACE_DEVICE_RAW,
                      ADPROF_SPACE_HOST_PINNED}) {
      const uint64_t key = Replay::key(e.addr, space);
      auto it = live_.find(key);
      if (it == live_.end() || !replay_.blocks().contains(key)) continue;
      changing(it->second).label = static_cast<uint32_t>(e.a);
      return;
    }
  }

  uint32_t stack_frames(uint32_t id) {
    auto [it, inserted] = stack_index_.try_emplace(id, 0);
    if (!inserted) return it->second;
    std::vector<Frame> frames;
    for (const SourceFrame &f : stacks_.frames(id))
      frames.push_back(
          {f.file.empty() ? f.module : f.file, f.line, f.function.empty() ? f.name() : f.function});
    stacks_frames_.push_back(std::move(frames));
    it->second = static_cast<uint32_t>(stacks_frames_.size());  // from 1
    return it->second;
  }

  // The segments at the end: (device, address, size, blocks (address, size, entry)).
  struct EndBlock {
    uint64_t addr, size;
    const Entry *entry;
  };
  struct EndSegment {
    uint32_t device;
    uint64_t addr, size;
    std::vector<EndBlock> blocks;
    bool run = false;  // a run of blocks outside the allocator's segments, not reserved memory
  };
  static constexpr uint64_t kRunGap = uint64_t{64} << 20;
  std::vector<uint32_t> runs_;  // per device trace: the run being grown
  std::vector<EndSegment> end_segments(const Replay &replay) {
    std::vector<EndSegment> out;
    std::map<std::pair<uint32_t, uint64_t>, size_t> by_start;  // (device, address) -> segment
    for (const auto &[key, b] : end_blocks_)
      if (b->space == ADPROF_SPACE_DEVICE_SEGMENT && b->device < traces_.size())
        by_start[{b->device, Replay::address_of(key)}] = 0;
    for (auto &[where, index] : by_start) {
      index = out.size();
      const Block *seg =
          replay.blocks().get(Replay::key(where.second, ADPROF_SPACE_DEVICE_SEGMENT));
      out.push_back({where.first, where.second, seg ? seg->size : 0, {}});
    }
    std::vector<std::pair<std::pair<uint32_t, uint64_t>, EndBlock>> blocks;
    for (const auto &[key, b] : end_blocks_) {
      if (!exported_space(b->space)) continue;
      auto it = live_.find(key);
      if (it == live_.end()) continue;
      blocks.push_back(
          {{it->second.trace, Replay::address_of(key)},
           {Replay::address_of(key), b->size, &traces_[it->second.trace][it->second.index]}});
    }
    std::sort(blocks.begin(), blocks.end(),
              [](const auto &x, const auto &y) { return x.first < y.first; });
    for (const auto &[where, block] : blocks) {
      // The segment that holds it whole, after the blocks placed before it; else its own.
      auto it = by_start.upper_bound(where);
      EndSegment *seg = nullptr;
      if (it != by_start.begin()) {
        EndSegment &s = out[std::prev(it)->second];
        const uint64_t used =
            s.blocks.empty() ? s.addr : s.blocks.back().addr + s.blocks.back().size;
        if (s.device == where.first && block.addr >= used && block.addr - s.addr <= s.size &&
            block.size <= s.size - (block.addr - s.addr))
          seg = &s;
      }
      if (seg) {
        seg->blocks.push_back(block);
        continue;
      }
      // Outside the allocator's segments (every host block): a run of blocks less than
      // kRunGap apart is one segment of its own, so that PyTorch's tools, which look an
      // address up segment by segment, find each among few.
      if (runs_.size() > where.first && runs_[where.first] != kNoTrace) {
        EndSegment &run = out[runs_[where.first]];
        const uint64_t end = run.addr + run.size;
        if (block.addr >= end && block.addr - end < kRunGap) {
          run.size = block.addr + block.size - run.addr;
          run.blocks.push_back(block);
          continue;
        }
      }
      if (runs_.size() <= where.first) runs_.resize(where.first + 1, kNoTrace);
      runs_[where.first] = static_cast<uint32_t>(out.size());
      out.push_back({where.first, block.addr, block.size, {block}, true});
    }
    return out;
  }

  void write_frames(pickle::Writer &w, const Entry &e) {
    const uint64_t key = (uint64_t{e.stack} << 40) ^ (uint64_t{e.op_name} << 20) ^ e.label;
    auto [it, inserted] = frames_memo_.try_emplace(key, FramesKey{e.stack, e.op_name, e.label, 0});
    if (!inserted && it->second.stack == e.stack && it->second.op == e.op_name &&
        it->second.label == e.label) {
      w.get(it->second.slot);
      return;
    }
    w.begin_list();
    auto frame = [&](const std::string &file, int64_t line, const std::string &name) {
      w.begin_dict();
      w.shared_string("filename");
      w.shared_string(file);
      w.shared_string("line");
      w.integer(line);
      w.shared_string("name");
      w.shared_string(name);
      w.end_dict();
    };
    if (e.op_name || e.label)
      frame(e.label ? replay_.name(e.label) : std::string(), 0, replay_.op_kind(e.op_name));
    if (e.stack)
      for (const Frame &f : stacks_frames_[e.stack - 1]) frame(f.file, f.line, f.name);
    w.end_list();
    it->second = {e.stack, e.op_name, e.label, w.memoize()};
  }

  void write_entry(pickle::Writer &w, const Entry &e, const std::vector<Entry> &trace,
                   const char *action) {
    const Entry &a = e.action == kFreeEntry || e.action == kSegmentFree ? trace[e.alloc] : e;
    w.begin_dict();
    w.shared_string("action");
    w.shared_string(action);
    w.shared_string("addr");
    w.integer(static_cast<int64_t>(e.addr));
    w.shared_string("size");
    w.integer(static_cast<int64_t>(e.size));
    w.shared_string("stream");
    w.integer(0);
    w.shared_string("time_us");
    w.integer(static_cast<int64_t>(e.time_us));
    w.shared_string("frames");
    if (e.action == kSegmentAlloc || e.action == kSegmentFree) {
      w.begin_list();
      w.end_list();
    } else {
      write_frames(w, a);
    }
    if (e.action == kAllocEntry) {
      w.shared_string("category");
      w.shared_string(role_name(a.role));
      if (a.label) {  // the label again, where PyTorch keeps a buffer's annotation
        w.shared_string("user_metadata");
        w.shared_string(replay_.name(a.label));
      }
    }
    w.end_dict();
  }

  std::string write() {
    pickle::Writer w;
    w.begin_dict();
    w.shared_string("segments");
    w.begin_list();
    for (const EndSegment &s : segments_) {
      w.begin_dict();
      uint64_t allocated = 0;
      for (const EndBlock &b : s.blocks) allocated += b.size;
      w.shared_string("device");
      w.integer(s.device);
      w.shared_string("address");
      w.integer(static_cast<int64_t>(s.addr));
      w.shared_string("total_size");
      w.integer(static_cast<int64_t>(s.size));
      w.shared_string("allocated_size");
      w.integer(static_cast<int64_t>(allocated));
      w.shared_string("active_size");
      w.integer(static_cast<int64_t>(allocated));
      w.shared_string("requested_size");
      w.integer(static_cast<int64_t>(allocated));
      w.shared_string("stream");
      w.integer(0);
      w.shared_string("segment_type");
      w.shared_string(s.size >= (uint64_t{1} << 20) ? "large" : "small");
      w.shared_string("segment_pool_id");
      w.integer(0);
      w.integer(0);
      w.tuple2();
      w.shared_string("is_expandable");
      w.boolean(false);
      if (s.run) {  // the reader reserves nothing for it
        w.shared_string("adprof_run_of_blocks");
        w.boolean(true);
      }
      w.shared_string("frames");
      w.begin_list();
      w.end_list();
      w.shared_string("blocks");
      w.begin_list();
      uint64_t at = s.addr;
      auto gap = [&](uint64_t until) {
        if (until <= at) return;
        w.begin_dict();
        w.shared_string("address");
        w.integer(static_cast<int64_t>(at));
        w.shared_string("size");
        w.integer(static_cast<int64_t>(until - at));
        w.shared_string("requested_size");
        w.integer(0);
        w.shared_string("state");
        w.shared_string("inactive");
        w.shared_string("frames");
        w.begin_list();
        w.end_list();
        w.end_dict();
      };
      for (const EndBlock &b : s.blocks) {
        gap(b.addr);
        w.begin_dict();
        w.shared_string("address");
        w.integer(static_cast<int64_t>(b.addr));
        w.shared_string("size");
        w.integer(static_cast<int64_t>(b.size));
        w.shared_string("requested_size");
        w.integer(static_cast<int64_t>(b.size));
        w.shared_string("state");
        w.shared_string("active_allocated");
        w.shared_string("frames");
        write_frames(w, *b.entry);
        w.shared_string("category");
        w.shared_string(role_name(b.entry->role));
        w.end_dict();
        at = b.addr + b.size;
      }
      gap(s.addr + s.size);
      w.end_list();
      w.end_dict();
    }
    w.end_list();
    w.shared_string("device_traces");
    w.begin_list();
    for (const std::vector<Entry> &trace : traces_) {
      w.begin_list();
      for (const Entry &e : trace) {
        switch (e.action) {
          case kAllocEntry:
            write_entry(w, e, trace, "alloc");
            break;
          case kFreeEntry:
            write_entry(w, e, trace, "free_requested");
            write_entry(w, e, trace, "free_completed");
            break;
          case kSegmentAlloc:
            write_entry(w, e, trace, "segment_alloc");
            break;
          case kSegmentFree:
            write_entry(w, e, trace, "segment_free");
            break;
          case kOom:
            w.begin_dict();
            w.shared_string("action");
            w.shared_string("oom");
            w.shared_string("size");
            w.integer(static_cast<int64_t>(e.size));
            w.shared_string("device_free");
            w.integer(static_cast<int64_t>(e.addr));
            w.shared_string("stream");
            w.integer(0);
            w.shared_string("time_us");
            w.integer(static_cast<int64_t>(e.time_us));
            w.shared_string("frames");
            w.begin_list();
            w.end_list();
            w.end_dict();
            break;
        }
      }
      w.end_list();
    }
    w.end_list();
    w.shared_string("adprof");
    w.begin_dict();
    w.shared_string("schema");
    w.shared_string("adprof.torch_snapshot");
    w.shared_string("version");
    w.integer(1);
    w.shared_string("categories");
    w.shared_string("roles");
    w.shared_string("devices");
    w.begin_list();
    for (uint32_t d = 0; d < devices_; ++d) w.string("device " + std::to_string(d));
    if (host_ != kNoTrace) w.string("host");
    w.end_list();
    w.end_dict();
    w.end_dict();
    return w.finish();
  }

  const TraceReader &reader_;
  const Replay &replay_;       // the pass's: the names of labels and ops, the blocks at the end
  const bool heap_is_device_;  // a PyTorch snapshot read as a trace (TraceHeader)
  ad::Decoder decoder_{replay_};
  static constexpr uint32_t kMaxDevices = 65536;
  static constexpr uint32_t kNoTrace = UINT32_MAX, kHostTrace = UINT32_MAX - 1;
  PeakLog host_peak_, device_peak_;
  uint32_t devices_ = 0, host_ = 0;                // host_: the host heap's trace (kNoTrace: none)
  std::vector<std::vector<Entry>> device_traces_;  // during the pass, by device
  std::vector<Entry> host_trace_;                  // during the pass
  std::vector<std::vector<Entry>> traces_;         // at the end: the devices', then the host's
  absl::flat_hash_map<uint64_t, Live> live_;       // key -> its trace and entry
  CallStacks stacks_;
  absl::flat_hash_map<uint32_t, uint32_t> stack_index_;
  std::vector<std::vector<Frame>> stacks_frames_;
  struct FramesKey {
    uint32_t stack, op, label, slot;
  };
  absl::flat_hash_map<uint64_t, FramesKey> frames_memo_;
  std::vector<std::pair<uint64_t, const Block *>> end_blocks_;
  std::vector<EndSegment> segments_;
};

TorchSnapshotWriter::TorchSnapshotWriter(const TraceReader &reader, const Replay &replay)
    : exporter_(std::make_unique<Exporter>(reader, replay)) {}
TorchSnapshotWriter::~TorchSnapshotWriter() = default;

void TorchSnapshotWriter::on_heap(const Event &e, const Replay::HeapChange &c) {
  exporter_->on_heap(e, c);
}
void TorchSnapshotWriter::on_event(const Event &e, bool changed) {
  exporter_->on_event(e, changed);
}
std::string TorchSnapshotWriter::finish(SnapshotExportStats *stats) {
  return exporter_->finish(stats);
}

}  // namespace adprof
