#include "adprof/snapshot.h"

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <tuple>

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

uint64_t buffer_count(const std::vector<LabelBytes> &by_label, size_t listed) {
  uint64_t n = 0;
  for (const LabelBytes &l : by_label) n += l.buffers;
  return std::max<uint64_t>(n, listed);
}

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
  // One count per (role, op name id, label id) over every live block, before the buffer list is
  // cut to max_buffers (label 0: unlabelled); the breakdowns by label, by op kind and by (role,
  // op kind) are all sums of it.
  struct Count {
    uint64_t bytes = 0, buffers = 0;
  };
  absl::flat_hash_map<std::tuple<uint8_t, uint32_t, uint32_t>, Count> role_op_label;
  bool any_source = false;
  for (const auto &[addr, b] : live) {
    s.host += b->size;
    s.by_role[b->role] += b->size;
    s.by_phase[b->phase] += b->size;
    s.slack += b->slack;
    Count &c = role_op_label[{b->role, b->op_name, b->label}];
    c.bytes += b->size;
    ++c.buffers;
    any_source |= b->source != 0;
  }
  {
    // Two name ids may share a kind ("(no op)"): theirs are summed together.
    auto label_name = [&](uint32_t id) { return id ? replay.name(id) : std::string(); };
    using LabelTotals = absl::flat_hash_map<std::string, uint64_t>;
    struct Group {
      Count count;
      LabelTotals labels;
    };
    absl::flat_hash_map<std::pair<uint32_t, uint8_t>, Count> label_role;
    absl::flat_hash_map<std::pair<uint8_t, std::string>, Group> groups;
    absl::flat_hash_map<std::string, LabelTotals> by_kind;
    absl::flat_hash_map<std::string, uint64_t> kind_bytes;
    for (const auto &[key, c] : role_op_label) {
      const auto &[role, op, label] = key;
      Count &l = label_role[{label, role}];
      l.bytes += c.bytes;
      l.buffers += c.buffers;
      const std::string kind = replay.op_kind(op), name = label_name(label);
      Group &g = groups[{role, kind}];
      g.count.bytes += c.bytes;
      g.count.buffers += c.buffers;
      g.labels[name] += c.bytes;
      by_kind[kind][name] += c.bytes;
      kind_bytes[kind] += c.bytes;
    }
    for (const auto &[key, c] : label_role)
      s.by_label.push_back({label_name(key.first), role_name(key.second), c.bytes, c.buffers});
    std::sort(s.by_label.begin(), s.by_label.end(), [](const LabelBytes &a, const LabelBytes &b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes
                                : std::tie(a.label, a.role) < std::tie(b.label, b.role);
    });
    auto largest_labels = [](const LabelTotals &label_bytes) {
      std::vector<NamedBytes> labels;
      for (const auto &[label, bytes] : label_bytes) labels.push_back({label, bytes});
      std::sort(labels.begin(), labels.end(), [](const NamedBytes &a, const NamedBytes &b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
      });
      if (labels.size() > kOpLabelsKept) labels.resize(kOpLabelsKept);
      return labels;
    };
    for (const auto &[kind, label_bytes] : by_kind)
      s.op_labels.emplace_back(kind, largest_labels(label_bytes));
    std::sort(s.op_labels.begin(), s.op_labels.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &[key, g] : groups)
      s.by_role_op.push_back({role_name(key.first), key.second, g.count.bytes, g.count.buffers,
                              largest_labels(g.labels)});
    std::sort(s.by_role_op.begin(), s.by_role_op.end(),
              [](const RoleOpBytes &a, const RoleOpBytes &b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes
                                          : std::tie(a.role, a.op) < std::tie(b.role, b.op);
              });
    for (const auto &[kind, bytes] : kind_bytes) s.by_op.push_back({kind, bytes});
    std::sort(s.by_op.begin(), s.by_op.end(), [](const auto &a, const auto &b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
    });
  }
  absl::flat_hash_map<uint64_t, const Block *> by_addr;  // for duplicates' sources
  if (any_source)
    for (const auto &[addr, b] : live) by_addr[addr] = b;
  // The largest max_buffers, in order: the rest is only split off, not sorted (the live set at a
  // Python program's peak is half a million blocks; the report keeps a hundred thousand).
  auto larger = [](const auto &a, const auto &b) {
    return a.second->size != b.second->size ? a.second->size > b.second->size : a.first < b.first;
  };
  const auto listed = static_cast<ptrdiff_t>(std::min(max_buffers, live.size()));
  if (listed < static_cast<ptrdiff_t>(live.size()))
    std::nth_element(live.begin(), live.begin() + listed, live.end(), larger);
  std::sort(live.begin(), live.begin() + listed, larger);
  live.resize(static_cast<size_t>(listed));
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
      // The block at the source's address now, if it is the source: one allocated after the
      // copy took a freed source's address (an optimizer state cloned from a gradient that
      // the next backward's blocks replaced).
      auto src = by_addr.find(b->source);
      if (src != by_addr.end() && src->second->alloc_ticks <= b->alloc_ticks) {
        lb.source_label = describe_block(*src->second);
        lb.source_dtype = dtype_name(src->second->dtype);
      }
    }
    lb.content_hash = b->content_hash;
  }
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
