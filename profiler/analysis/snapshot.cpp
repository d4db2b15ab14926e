#include "adprof/snapshot.h"

#include <absl/container/flat_hash_map.h>

#include <algorithm>

#include "adprof/replay_driver.h"

namespace adprof {

namespace {

const char *dtype_name(uint8_t dtype) {
  switch (dtype) {
    case ADPROF_DTYPE_F32:
      return "f32";
    case ADPROF_DTYPE_F64:
      return "f64";
    case ADPROF_DTYPE_I32:
      return "i32";
    case ADPROF_DTYPE_I64:
      return "i64";
    case ADPROF_DTYPE_BOOL:
      return "bool";
    default:
      return "";
  }
}

}  // namespace

Snapshot take_snapshot(const Replay &replay, const TraceReader &reader, size_t max_buffers) {
  std::vector<std::pair<uint64_t, const Block *>> live;
  live.reserve(replay.live_blocks());
  for (const auto &[k, b] : replay.blocks()) live.emplace_back(Replay::address_of(k), &b);
  for (const auto &[addr, b] : replay.mmap_blocks()) live.emplace_back(addr, &b);
  return describe_blocks(std::move(live), replay, reader, max_buffers);
}

Snapshot describe_blocks(std::vector<std::pair<uint64_t, const Block *>> live, const Replay &replay,
                         const TraceReader &reader, size_t max_buffers) {
  Snapshot s;
  std::erase_if(live, [](const auto &p) { return !is_host_space(p.second->space); });
  absl::flat_hash_map<uint32_t, uint64_t> op_bytes;
  bool any_source = false;
  for (const auto &[addr, b] : live) {
    s.host += b->size;
    s.by_role[b->role] += b->size;
    s.by_phase[b->phase] += b->size;
    s.slack += b->slack;
    op_bytes[b->op_name] += b->size;
    any_source |= b->source != 0;
  }
  absl::flat_hash_map<uint64_t, const Block *> by_addr;  // for duplicates' sources
  if (any_source)
    for (const auto &[addr, b] : live) by_addr[addr] = b;
  std::sort(live.begin(), live.end(), [](const auto &a, const auto &b) {
    return a.second->size != b.second->size ? a.second->size > b.second->size : a.first < b.first;
  });
  if (live.size() > max_buffers) live.resize(max_buffers);
  auto describe_block = [&](const Block &b) {
    return b.label ? replay.name(b.label) : replay.op_label(b.op_name, b.op_instance);
  };
  s.buffers.reserve(live.size());
  for (const auto &[addr, b] : live) {
    LiveBuffer &lb = s.buffers.emplace_back();
    lb.addr = addr;
    lb.size = b->size;
    lb.slack = b->slack;
    lb.role = role_name(b->role);
    lb.phase = phase_name(b->phase);
    lb.space = space_name(b->space);
    lb.device = b->device;
    lb.thread = b->thread;
    lb.stack = b->stack;
    lb.op = replay.op_label(b->op_name, b->op_instance);
    lb.alloc_time = reader.seconds(b->alloc_ticks);
    lb.label = b->label ? replay.name(b->label) : "";
    lb.dtype = dtype_name(b->dtype);
    if (const auto *shape = replay.shape_of(*b)) lb.shape = *shape;
    lb.source = b->source;
    if (b->source) {
      auto src = by_addr.find(b->source);
      if (src != by_addr.end()) lb.source_label = describe_block(*src->second);
    }
    lb.content_hash = b->content_hash;
  }
  for (const auto &[id, bytes] : op_bytes) s.by_op.push_back({replay.op_kind(id), bytes});
  std::sort(s.by_op.begin(), s.by_op.end(), [](const auto &a, const auto &b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  return s;
}

Snapshot snapshot_at(TraceReader &reader, double time, uint64_t event, size_t max_buffers) {
  reader.rewind();
  Replay replay;
  // Replayed through the driver, which stops before the first event past the instant (or
  // after event number `event`).
  ReplayDriver driver(reader, replay);
  uint64_t index = 0;
  double now = 0;
  auto stop = [&](const Event &e) {
    if (event ? index >= event : false) return true;
    const double t = reader.seconds(e.ticks);
    if (!event && t > time) return true;  // that event is after the instant: not applied
    ++index;
    now = t;
    return false;
  };
  auto upto =
      observe([](const Event &, const Replay::HeapChange &) {}, [](const Event &, bool) {}, stop);
  driver.run(upto);
  Snapshot s = take_snapshot(replay, reader, max_buffers);
  s.time = event ? now : time;
  return s;
}

}  // namespace adprof
