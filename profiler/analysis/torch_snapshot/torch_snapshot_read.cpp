// A PyTorch memory snapshot as trace events (torch_snapshot.h says what the events mean).
// The snapshot's layout is PyTorch's (torch/cuda/memory.py, `_snapshot`'s docstring): a dict
// with `segments` (the allocator's segments at the dump, each with its `blocks`) and
// `device_traces` (per device, the allocator's recent actions), or, from PyTorch 1.13, a list
// of segments alone. Every field is optional here: what is missing reads as absent, never as
// an error; what is there with the wrong type is skipped.
#include <absl/container/flat_hash_map.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "adprof/ad_protocol.h"
#include "adprof/context.h"
#include "adprof/replay.h"
#include "adprof/torch_snapshot.h"
#include "pickle.h"
#include "trace_format.h"

namespace adprof {

namespace fmt = format;
using pickle::Kind;
using pickle::Value;

bool is_pickle_file(const std::string &path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  unsigned char first = 0;
  bool pickle = read(fd, &first, 1) == 1 && first == pickle::kProtoOpcode;
  close(fd);
  return pickle;
}

namespace {

// A snapshot's category or user_metadata as an adprof role; -1: none that means the same.
// `adprof_roles`: the snapshot was written by adprof, whose categories are its roles' names.
// PyTorch's memory profiler (torch/profiler/_memory_profiler.py, Category) calls ACTIVATION what
// autograd saved for backward (adprof's forward_cache), GRADIENT and AUTOGRAD_DETAIL the
// gradients and those in flight (adjoint), TEMPORARY what an op frees before it returns
// (workspace); INPUT, PARAMETER and OPTIMIZER_STATE mean what adprof's roles of those names do.
int role_of(std::string_view text, bool adprof_roles) {
  if (text.empty()) return -1;
  if (!adprof_roles) {
    std::string lower(text);
    for (char &c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "activation") return ADPROF_ROLE_FORWARD_CACHE;
    if (lower == "gradient" || lower == "autograd_detail") return ADPROF_ROLE_ADJOINT;
    if (lower == "temporary") return ADPROF_ROLE_WORKSPACE;
    if (lower == "unknown") return ADPROF_ROLE_FOREIGN;
    return role_from_name(lower);
  }
  return role_from_name(std::string(text));
}

bool under_torch(std::string_view file) {
  for (std::string_view dir : {"/torch/", "/site-packages/", "/dist-packages/", "<frozen"})
    if (file.find(dir) != std::string_view::npos) return true;
  return file.rfind("torch/", 0) == 0;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The allocation site of a frame list (innermost first): the innermost Python frame outside
// torch's and other installed packages' files (the user's line), else the innermost Python
// frame, else the innermost frame. "" when there are none.
std::string site_of(Value frames) {
  auto text = [](Value f) {
    std::string name(f.get("name").as_string());
    std::string file(f.get("filename").as_string());
    int64_t line = f.get("line").as_int(0);
    if (name.empty()) name = "?";
    if (file.empty()) return name;
    return name + " (" + file + (line > 0 ? ":" + std::to_string(line) : "") + ")";
  };
  const size_t n = frames.is(Kind::kList) || frames.is(Kind::kTuple) ? frames.size() : 0;
  Value first_python, first;
  for (size_t i = 0; i < n; ++i) {
    Value f = frames.at(i);
    if (!f.is(Kind::kDict)) continue;
    if (!first.valid()) first = f;
    std::string_view file = f.get("filename").as_string();
    if (!ends_with(file, ".py")) continue;
    if (!under_torch(file)) return text(f);
    if (!first_python.valid()) first_python = f;
  }
  if (first_python.valid()) return text(first_python);
  if (first.valid()) return text(first);
  return "";
}

// Address ranges (a device's reserved segments), split by partial unmaps (expandable
// segments map and unmap pieces of one reservation).
class Ranges {
 public:
  bool contains(uint64_t addr) const {
    auto it = ranges_.upper_bound(addr);
    if (it == ranges_.begin()) return false;
    --it;
    return addr - it->first < it->second;
  }
  void add(uint64_t addr, uint64_t size) { ranges_[addr] = size; }
  // Removes [addr, addr+size): the pieces removed whole and the pieces kept are reported
  // through `removed(start)` and `kept(start, size)`.
  template <class Removed, class Kept>
  void remove(uint64_t addr, uint64_t size, Removed removed, Kept kept) {
    const uint64_t end = addr + size < addr ? UINT64_MAX : addr + size;
    auto it = ranges_.upper_bound(addr);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      const uint64_t start = it->first, stop = it->first + it->second;
      if (stop <= addr) {
        ++it;
        continue;
      }
      removed(start);
      it = ranges_.erase(it);
      if (start < addr) {
        ranges_[start] = addr - start;
        kept(start, addr - start);
      }
      if (stop > end) {
        it = ranges_.emplace(end, stop - end).first;
        kept(end, stop - end);
        ++it;
      }
    }
  }
  const std::map<uint64_t, uint64_t> &all() const { return ranges_; }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

class Converter {
 public:
  Converter(SnapshotEvents &out, bool adprof_roles, const std::string &path)
      : out_(out), adprof_roles_(adprof_roles), path_(path) {}

  uint32_t name(const std::string &text) {
    auto [it, inserted] = names_.try_emplace(text, static_cast<uint32_t>(names_.size() + 1));
    if (inserted) {
      Event e{};
      e.type = fmt::EventType::kName;
      e.a = it->second;
      e.set_text(out_.texts.emplace_back(text));
      name_events_.push_back(e);
    }
    return it->second;
  }

  // One device: its trace entries (maybe none) and its segments at the dump.
  // `device_blocks`: its allocations are device blocks beside the host heap (adprof's export of
  // a run with both), not the run's primary memory.
  void device(uint32_t device, uint32_t thread, Value entries, const std::vector<Value> &segments,
              bool device_blocks) {
    device_ = device;
    space_ = device_blocks ? ADPROF_SPACE_DEVICE_BLOCK : ADPROF_SPACE_HEAP;
    thread_ = thread;
    role_ = ADPROF_ROLE_FOREIGN;
    live_.clear();
    reserved_ = Ranges();
    live_bytes_ = 0;
    live_by_role_.fill(0);
    const size_t n = entries.is(Kind::kList) ? entries.size() : 0;

    // Times: `time_us` where the entries have it, else their numbers.
    std::vector<uint64_t> ticks(n);
    uint64_t last = 0;
    for (size_t i = 0; i < n; ++i) {
      Value t = entries.at(i).get("time_us");
      double us = t.as_number(-1);
      if (us >= 0 && std::isfinite(us) && us < 9e18)
        last = std::max(last, static_cast<uint64_t>(us));
      else if (!t.valid())
        last = std::max(last, static_cast<uint64_t>(i));
      ticks[i] = last;
    }
    const uint64_t start = n ? ticks[0] : 0;

    // What was live before the trace: a block or segment the trace frees but never
    // allocated; a block or segment live at the dump that the trace never allocated.
    absl::flat_hash_map<uint64_t, uint64_t> alive;
    Ranges mapped;
    std::vector<Value> early_frees;
    std::vector<std::pair<uint64_t, uint64_t>> early_segments;
    for (size_t i = 0; i < n; ++i) {
      Value e = entries.at(i);
      std::string_view action = e.get("action").as_string();
      const uint64_t addr = static_cast<uint64_t>(e.get("addr").as_int(0));
      const uint64_t size = static_cast<uint64_t>(std::max<int64_t>(0, e.get("size").as_int(0)));
      if (action == "alloc") {
        alive[addr] = size;
      } else if (action == "free_completed" || action == "free") {
        if (!alive.erase(addr)) early_frees.push_back(e);
      } else if (action == "segment_alloc" || action == "segment_map") {
        mapped.add(addr, size);
      } else if (action == "segment_free" || action == "segment_unmap") {
        if (!mapped.contains(addr)) early_segments.emplace_back(addr, size);
        mapped.remove(
            addr, size, [](uint64_t) {}, [](uint64_t, uint64_t) {});
      }
    }
    for (const auto &[addr, size] : early_segments) segment_alloc(start, addr, size);
    for (Value seg : segments) {
      if (seg.get("adprof_run_of_blocks").as_int(0)) continue;  // adprof's export: no reserve
      const uint64_t addr = static_cast<uint64_t>(seg.get("address").as_int(0));
      const uint64_t total =
          static_cast<uint64_t>(std::max<int64_t>(0, seg.get("total_size").as_int(0)));
      if (!mapped.contains(addr) && !reserved_.contains(addr)) segment_alloc(start, addr, total);
    }
    for (Value e : early_frees) alloc(start, e, static_cast<uint64_t>(e.get("addr").as_int(0)), 0);
    for (Value seg : segments) {
      uint64_t addr = static_cast<uint64_t>(seg.get("address").as_int(0));
      Value blocks = seg.get("blocks");
      for (size_t i = 0; i < blocks.size(); ++i) {
        Value b = blocks.at(i);
        const int64_t size = std::max<int64_t>(0, b.get("size").as_int(0));
        const uint64_t at =
            b.get("address").is_int() ? static_cast<uint64_t>(b.get("address").as_int()) : addr;
        addr = at + static_cast<uint64_t>(size);
        std::string_view state = b.get("state").as_string();
        if (state != "active_allocated" && state != "active_pending_free" &&
            state != "active_awaiting_free")
          continue;
        if (alive.contains(at) || live_.contains(at)) continue;
        // PyTorch's viewer draws a block by its requested size (legacy: its history's).
        int64_t requested = b.get("requested_size").as_int(-1);
        Value history = b.get("history");
        if (requested < 0 && history.size()) requested = history.at(0).get("real_size").as_int(-1);
        if (requested < 0) requested = size;
        Value frames = b.get("frames");
        if (!frames.valid() && history.size()) frames = history.at(0).get("frames");
        alloc_block(start, at, static_cast<uint64_t>(requested), frames, b.get("category"),
                    b.get("user_metadata"));
      }
    }

    for (size_t i = 0; i < n; ++i) {
      Value e = entries.at(i);
      if (!e.is(Kind::kDict)) {
        ++out_.skipped_entries;
        continue;
      }
      std::string_view action = e.get("action").as_string();
      const uint64_t addr = static_cast<uint64_t>(e.get("addr").as_int(0));
      const uint64_t size = static_cast<uint64_t>(std::max<int64_t>(0, e.get("size").as_int(0)));
      const uint64_t t = ticks[i];
      if (action == "alloc") {
        alloc(t, e, addr, size);
      } else if (action == "free_completed" || action == "free") {
        free(t, addr);
      } else if (action == "free_requested" || action == "snapshot") {
        // a free that completes later (free_completed), and the dump itself: no change
      } else if (action == "segment_alloc" || action == "segment_map") {
        segment_alloc(t, addr, size);
      } else if (action == "segment_free" || action == "segment_unmap") {
        reserved_.remove(
            addr, size,
            [&](uint64_t s) { emit(t, fmt::EventType::kFree, s, 0, ADPROF_SPACE_DEVICE_SEGMENT); },
            [&](uint64_t s, uint64_t len) {
              emit(t, fmt::EventType::kAlloc, s, len, ADPROF_SPACE_DEVICE_SEGMENT);
            });
      } else if (action == "oom") {
        oom(t, size, static_cast<uint64_t>(std::max<int64_t>(0, e.get("device_free").as_int(0))));
      } else if (action == "annotate") {
        annotate(t, addr, e.get("user_metadata"));
      } else {
        ++out_.skipped_entries;
      }
    }
  }

  std::vector<Event> take_name_events() { return std::move(name_events_); }

 private:
  Event &emit(uint64_t ticks, fmt::EventType type, uint64_t addr, uint64_t a, uint8_t operand) {
    Event &e = out_.events.emplace_back();
    e.type = type;
    e.ticks = ticks;
    e.addr = addr;
    e.a = a;
    e.operand = operand;
    e.thread = thread_;
    e.device = device_;
    return e;
  }
  // The trace reader's bound (trace_reader.h): what every allocation adds up to fits, so that
  // no total downstream overflows.
  void count(uint64_t size) {
    allocated_ += size;
    if (allocated_ > kMaxTotalBytes)
      throw TraceError("'" + path_ + "': damaged: its allocations add up to more than 2^62 bytes");
  }
  void segment_alloc(uint64_t t, uint64_t addr, uint64_t size) {
    if (size == 0 || size > kMaxEventBytes) return;
    count(size);
    reserved_.add(addr, size);
    emit(t, fmt::EventType::kAlloc, addr, size, ADPROF_SPACE_DEVICE_SEGMENT);
  }
  void alloc(uint64_t t, Value e, uint64_t addr, uint64_t size) {
    if (size == 0) size = static_cast<uint64_t>(std::max<int64_t>(0, e.get("size").as_int(0)));
    alloc_block(t, addr, size, e.get("frames"), e.get("category"), e.get("user_metadata"));
  }
  void alloc_block(uint64_t t, uint64_t addr, uint64_t size, Value frames, Value category,
                   Value metadata) {
    if (size > kMaxEventBytes) size = kMaxEventBytes;  // the reader's bound on an event
    count(size);
    int role = role_of(category.as_string(), adprof_roles_);
    std::string_view meta = metadata.as_string();
    const int meta_role = role_of(meta, adprof_roles_);
    if (role < 0) role = meta_role;
    if (role < 0) role = ADPROF_ROLE_FOREIGN;
    if (role != role_) {
      emit(t, fmt::EventType::kRole, 0, 0, static_cast<uint8_t>(role));
      role_ = static_cast<uint8_t>(role);
    }
    // adprof's own export: the first frame is {label, 0, op} (torch_snapshot_write.cpp).
    Value first = frames.at(0);
    const std::string site =
        !adprof_roles_ ? site_of(frames)
        : first.get("line").as_int(-1) == 0 && first.get("name").as_string() != "(no op)"
            ? std::string(first.get("name").as_string())
            : std::string();
    if (!site.empty()) emit(t, fmt::EventType::kOpBegin, 0, name(site), 0);
    if (auto old = live_.find(addr); old != live_.end()) forget(old->second);
    live_[addr] = {size, static_cast<uint8_t>(role)};
    live_bytes_ += size;
    live_by_role_[role] += size;
    emit(t, fmt::EventType::kAlloc, addr, size, space_);
    if (!site.empty()) emit(t, fmt::EventType::kOpEnd, 0, 0, 0);
    if (!meta.empty() && meta_role < 0)
      emit(t, fmt::EventType::kLabel, addr, name(std::string(meta)), 0);
  }
  void free(uint64_t t, uint64_t addr) {
    auto it = live_.find(addr);
    if (it == live_.end()) return;  // a second free of one block: nothing was live
    forget(it->second);
    live_.erase(it);
    emit(t, fmt::EventType::kFree, addr, 0, space_);
  }
  struct Live {
    uint64_t size;
    uint8_t role;
  };
  void forget(const Live &b) {
    live_bytes_ -= b.size;
    live_by_role_[b.role] -= b.size;
  }
  void annotate(uint64_t t, uint64_t addr, Value metadata) {
    auto it = live_.find(addr);
    std::string_view meta = metadata.as_string();
    if (it == live_.end() || meta.empty()) return;
    const int role = role_of(meta, adprof_roles_);
    if (role < 0) {
      emit(t, fmt::EventType::kLabel, addr, name(std::string(meta)), 0);
      return;
    }
    live_by_role_[it->second.role] -= it->second.size;
    it->second.role = static_cast<uint8_t>(role);
    live_by_role_[role] += it->second.size;
    emit(t, fmt::EventType::kRetag, addr, 0, static_cast<uint8_t>(role));
  }
  // The AD protocol's ad.device.oom: {requested, reserved, allocated, limit, device, live bytes
  // by role}, the allocator's account as the trace shows it at that entry; the limit is what
  // the allocator held plus what CUDA said was still free.
  void oom(uint64_t t, uint64_t requested, uint64_t device_free) {
    uint64_t reserved = 0;
    for (const auto &[start, size] : reserved_.all()) reserved += size;
    std::vector<uint64_t> &v = out_.values.emplace_back();
    v = {requested, reserved, live_bytes_, reserved + device_free, device_};
    v.insert(v.end(), live_by_role_.begin(), live_by_role_.end());
    Event &e = emit(t, fmt::EventType::kAnnotate, 0, name(ADPROF_AD_DEVICE_OOM), 0);
    e.set_values(v);
  }

  SnapshotEvents &out_;
  const bool adprof_roles_;
  const std::string &path_;
  uint64_t allocated_ = 0;
  std::map<std::string, uint32_t> names_;
  std::vector<Event> name_events_;
  uint32_t device_ = 0, thread_ = 0;
  uint8_t space_ = ADPROF_SPACE_HEAP;
  uint8_t role_ = ADPROF_ROLE_FOREIGN;
  absl::flat_hash_map<uint64_t, Live> live_;
  Ranges reserved_;
  uint64_t live_bytes_ = 0;
  std::array<uint64_t, kRoleCount> live_by_role_{};
};

}  // namespace

SnapshotEvents read_torch_snapshot(const std::string &path) {
  std::unique_ptr<pickle::Document> doc;
  try {
    doc = pickle::Document::parse_file(path);
  } catch (const pickle::PickleError &e) {
    throw TraceError("'" + path +
                     "' is not a readable PyTorch memory snapshot (pickle): " + e.what());
  } catch (const std::runtime_error &e) {
    throw TraceError(e.what());
  }
  Value root = doc->root();
  Value segments, traces;
  if (root.is(Kind::kList)) {  // PyTorch 1.13: the segments alone
    segments = root;
  } else if (root.is(Kind::kDict)) {
    segments = root.get("segments");
    traces = root.get("device_traces");
  }
  if (!segments.is(Kind::kList) && !traces.is(Kind::kList))
    throw TraceError("'" + path +
                     "' is a pickle but not a PyTorch memory snapshot (it has neither "
                     "'segments' nor 'device_traces')");
  const bool adprof_roles = root.get("adprof").get("categories").as_string() == "roles";

  // Devices with memory: a trace with entries, or segments.
  std::map<uint32_t, std::vector<Value>> segments_of;
  for (size_t i = 0; i < segments.size(); ++i) {
    Value seg = segments.at(i);
    if (!seg.is(Kind::kDict)) continue;
    const int64_t device = seg.get("device").as_int(0);
    if (device < 0 || device > 65535) continue;
    segments_of[static_cast<uint32_t>(device)].push_back(seg);
  }
  std::map<uint32_t, Value> trace_of;
  for (size_t i = 0; i < traces.size() && i <= 65535; ++i)
    if (traces.at(i).size()) trace_of[static_cast<uint32_t>(i)] = traces.at(i);
  std::vector<uint32_t> devices;
  for (const auto &[d, v] : segments_of) devices.push_back(d);
  for (const auto &[d, v] : trace_of) devices.push_back(d);
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());

  // adprof's export names its devices: the one that is the host heap is host memory again,
  // and the others device blocks beside it (torch_snapshot_write.cpp).
  Value device_names = root.get("adprof").get("devices");
  bool host = false;  // whether it has a host heap, with or without entries
  for (size_t d = 0; d < device_names.size(); ++d) host |= device_names.at(d).as_string() == "host";

  SnapshotEvents out;
  Converter convert(out, adprof_roles, path);
  static const std::vector<Value> kNone;
  for (uint32_t thread = 0; thread < devices.size(); ++thread) {
    const uint32_t d = devices[thread];
    const size_t first = out.events.size();
    auto seg = segments_of.find(d);
    convert.device(d, thread, trace_of.count(d) ? trace_of[d] : Value(),
                   seg == segments_of.end() ? kNone : seg->second,
                   host && device_names.at(d).as_string() != "host");
    Event name{};
    name.type = fmt::EventType::kThreadName;
    name.thread = thread;
    name.device = d;
    name.ticks = first < out.events.size() ? out.events[first].ticks : 0;
    name.set_text(out.texts.emplace_back("device " + std::to_string(d)));
    out.events.insert(out.events.begin() + static_cast<std::ptrdiff_t>(first), name);
  }
  out.threads = static_cast<uint32_t>(devices.size());

  // Devices' events merged by time (stable: each device's own order is kept); the names first.
  std::stable_sort(out.events.begin(), out.events.end(),
                   [](const Event &a, const Event &b) { return a.ticks < b.ticks; });
  uint64_t start = out.events.empty() ? 0 : out.events.front().ticks;
  std::vector<Event> names = convert.take_name_events();
  for (Event &e : names) e.ticks = start;
  out.events.insert(out.events.begin(), names.begin(), names.end());

  out.header.version = 0;
  out.header.ticks_per_second = 1000000;  // time_us
  out.header.start_ticks = start;
  out.header.memory = host ? "host memory" : "allocated device memory (PyTorch snapshot)";
  out.header.heap_is_device = !host;
  return out;
}

}  // namespace adprof
