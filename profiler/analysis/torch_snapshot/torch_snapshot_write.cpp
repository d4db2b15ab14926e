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
#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <map>

#include "adprof/ad_events.h"
#include "adprof/call_stacks.h"
#include "adprof/replay_driver.h"
#include "adprof/torch_snapshot.h"
#include "pickle.h"
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
  bool frozen = false;  // its role and label are those at the peak
};

struct Frame {
  std::string file;
  int64_t line = 0;
  std::string name;
};

// Host blocks are one memory, each device's blocks another.
bool exported_space(int space) { return is_host_space(space) || is_device_space(space); }

class Exporter {
 public:
  explicit Exporter(TraceReader &reader) : reader_(reader) {}

  std::string run(SnapshotExportStats *stats) {
    first_pass();
    host_ = reader_.header().heap_is_device ? kNoTrace : devices_;  // after the GPUs
    traces_.resize(devices_ + (host_ == kNoTrace ? 0 : 1));
    second_pass();
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
  // The peaks (the events that first reached them: analyze()'s rule) and the devices.
  void first_pass() {
    Replay replay;
    ReplayDriver driver(reader_, replay);
    uint64_t host_peak = 0, device_peak = 0;
    auto after = [&] {
      if (replay.host_live() > host_peak) {
        host_peak = replay.host_live();
        host_peak_event_ = driver.index();
      }
      if (replay.device_live() > device_peak) {
        device_peak = replay.device_live();
        device_peak_event_ = driver.index();
      }
    };
    const bool heap_is_device = reader_.header().heap_is_device;
    auto device = [&](const Event &e) {
      if (e.type == fmt::EventType::kAlloc && e.device < 65536 &&
          (e.operand == ADPROF_SPACE_HEAP
               ? heap_is_device
               : e.operand != ADPROF_SPACE_MMAP && e.operand != ADPROF_SPACE_HOST_PINNED))
        devices_ = std::max(devices_, e.device + 1);
    };
    auto obs = observe(
        [&](const Event &e, const Replay::HeapChange &) {
          device(e);
          after();
        },
        [&](const Event &e, bool changed) {
          device(e);
          if (changed) after();
        });
    driver.run(obs);
  }

  // The device trace of a block allocated by `e`.
  uint32_t trace_of(const Block &b, const Event &e) const {
    if (b.space == ADPROF_SPACE_HEAP && host_ == kNoTrace) return e.device;
    return is_host_space(b.space) ? host_ : b.device;
  }

  void second_pass() {
    reader_.rewind();
    Replay &replay = replay_;
    ReplayDriver driver(reader_, replay);
    auto time_us = [&](const Event &e) {
      return static_cast<uint64_t>(reader_.seconds(e.ticks) * 1e6);
    };
    auto freed = [&](uint64_t key, const Block &b, uint64_t t) {
      auto it = live_.find(key);
      if (it == live_.end()) return;
      const auto [trace, index] = it->second;
      live_.erase(it);
      Entry f = traces_[trace][index];
      f.action = b.space == ADPROF_SPACE_DEVICE_SEGMENT ? kSegmentFree : kFreeEntry;
      f.alloc = index;
      f.time_us = t;
      traces_[trace].push_back(f);
    };
    auto allocated = [&](const Event &ev, uint64_t key, const Block &b, CallStacks &stacks) {
      const uint64_t t = time_us(ev);
      const bool segment = b.space == ADPROF_SPACE_DEVICE_SEGMENT;
      if (!segment && !exported_space(b.space)) return;
      const uint32_t trace = segment ? b.device : trace_of(b, ev);
      if (trace >= traces_.size()) return;
      Entry e;
      e.action = segment ? kSegmentAlloc : kAllocEntry;
      e.addr = Replay::address_of(key);
      e.size = b.size;
      e.time_us = t;
      e.role = b.role;
      e.op_name = b.op_name;
      e.label = b.label;
      e.stack = b.stack ? stack_frames(b.stack, stacks) : 0;
      live_[key] = {trace, static_cast<uint32_t>(traces_[trace].size())};
      traces_[trace].push_back(e);
    };
    auto freeze = [&](bool host) {
      for (auto &[key, where] : live_) {
        Entry &e = traces_[where.first][where.second];
        // A snapshot's heap is its devices' memory, whose peak is the heap's.
        const bool heap = host_ == kNoTrace || where.first == host_;
        if (heap == host) e.frozen = true;
      }
    };
    auto peaks = [&] {
      if (driver.index() == host_peak_event_) freeze(true);
      if (driver.index() == device_peak_event_ && devices_) freeze(false);
    };
    auto obs = observe(
        [&](const Event &e, const Replay::HeapChange &c) {
          const uint64_t t = time_us(e);
          if (c.removed) freed(e.addr, *c.removed, t);
          if (e.type == fmt::EventType::kAlloc && c.block) allocated(e, e.addr, *c.block, stacks_);
          peaks();
        },
        [&](const Event &e, bool changed) {
          stacks_.on_event(e);
          if (e.type == fmt::EventType::kLabel) label(e, replay);
          if (e.type == fmt::EventType::kAnnotate) oom(e, time_us(e));
          if (!changed) return;
          const Replay::LastChange &last = replay.last();
          const uint64_t t = time_us(e);
          for (const auto &[key, b] : last.removed) freed(key, *b, t);
          if (last.alloc && last.block) allocated(e, last.key, *last.block, stacks_);
          if (last.retag && last.block) {
            auto it = live_.find(last.key);
            if (it != live_.end()) {
              Entry &a = traces_[it->second.first][it->second.second];
              if (!a.frozen) a.role = last.block->role;
            }
          }
          peaks();
        });
    driver.run(obs);
    for (const auto &[key, b] : replay.blocks()) end_blocks_.push_back({key, &b});
    segments_ = end_segments(replay);
  }

  // The AD protocol's ad.device.oom (or its legacy name): an `oom` entry of its device, with
  // what the device had free beside what the allocator reserved.
  void oom(const Event &e, uint64_t t) {
    const ad::Decoder::Annotation a = decoder_.annotation(e);
    if (a.kind != ad::Kind::kDeviceOom || a.values.size() < 5) return;
    const uint64_t device = a.values[4];
    if (device >= traces_.size() || device == host_) return;
    Entry o;
    o.action = kOom;
    o.size = a.values[0];
    o.addr = a.values[3] > a.values[1] ? a.values[3] - a.values[1] : 0;
    o.time_us = t;
    traces_[device].push_back(o);
  }

  void label(const Event &e, const Replay &replay) {
    for (int space : {ADPROF_SPACE_HEAP, ADPROF_SPACE_DEVICE_BLOCK, ADPROF_SPACE_DEVICE_RAW,
                      ADPROF_SPACE_HOST_PINNED}) {
      const uint64_t key = Replay::key(e.addr, space);
      auto it = live_.find(key);
      if (it == live_.end() || !replay.blocks().contains(key)) continue;
      Entry &a = traces_[it->second.first][it->second.second];
      if (!a.frozen) a.label = static_cast<uint32_t>(e.a);
      return;
    }
  }

  uint32_t stack_frames(uint32_t id, CallStacks &stacks) {
    auto [it, inserted] = stack_index_.try_emplace(id, 0);
    if (!inserted) return it->second;
    std::vector<Frame> frames;
    for (const SourceFrame &f : stacks.frames(id))
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
          {{it->second.first, Replay::address_of(key)},
           {Replay::address_of(key), b->size, &traces_[it->second.first][it->second.second]}});
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

  TraceReader &reader_;
  Replay replay_;  // the second pass's: the names of labels and ops, the blocks at the end
  ad::Decoder decoder_{replay_};
  uint64_t host_peak_event_ = 0, device_peak_event_ = 0;
  static constexpr uint32_t kNoTrace = UINT32_MAX;
  uint32_t devices_ = 0, host_ = 0;  // host_: the host heap's trace (kNoTrace: none)
  std::vector<std::vector<Entry>> traces_;
  absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> live_;  // key -> (trace, entry)
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

}  // namespace

std::string write_torch_snapshot(const std::string &trace_path, SnapshotExportStats *stats) {
  TraceReader reader(trace_path);
  Exporter exporter(reader);
  return exporter.run(stats);
}

}  // namespace adprof
