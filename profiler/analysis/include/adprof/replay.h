// Replays a trace's events into live memory: which blocks are live, with what role, op, phase
// and thread, and the running totals by role, phase, space and op. The report, the timeline,
// the GUI and the what-if analysis are all built on this one replay.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "adprof/context.h"
#include "adprof/trace_reader.h"

namespace adprof {

inline constexpr int kRoleCount = ADPROF_ROLE_COUNT;
inline constexpr int kPhaseCount = ADPROF_PHASE_COUNT;
inline constexpr int kSpaceCount = ADPROF_SPACE_COUNT;

const char *role_name(int role);              // "forward_cache", ...
const char *phase_name(int phase);            // "backward", ...
const char *space_name(int space);            // "heap", "mmap", ...
int role_from_name(const std::string &name);  // -1 if unknown

// Host bytes: the heap and pinned host memory. Anonymous mappings are counted apart: what a
// program maps itself (BLAS buffers, thread stacks, runtimes' arenas) is mostly reserved
// address space that is touched little by little, and counting it at its full length would
// bury the heap's picture (OpenBLAS maps 128 MiB it barely touches). Device bytes: blocks
// handed to tensors and raw cudaMalloc; a caching allocator's reserved segments apart.
inline bool is_host_space(int space) {
  return space == ADPROF_SPACE_HEAP || space == ADPROF_SPACE_HOST_PINNED;
}
inline bool is_device_space(int space) {
  return space == ADPROF_SPACE_DEVICE_BLOCK || space == ADPROF_SPACE_DEVICE_RAW;
}

struct Block {
  uint64_t size = 0;
  uint64_t slack = 0;  // usable - requested
  uint64_t alloc_ticks = 0;
  uint64_t op_instance = 0;
  uint64_t source = 0;  // duplicate: the address of the buffer it copies
  uint64_t content_hash = 0;
  uint32_t op_name = 0;  // innermost op at allocation (name id; 0: none)
  uint32_t label = 0;
  uint32_t thread = 0;
  uint32_t device = 0;
  uint8_t role = ADPROF_ROLE_FOREIGN;
  uint8_t phase = ADPROF_PHASE_OTHER;
  uint8_t space = ADPROF_SPACE_HEAP;
  uint8_t dtype = 0;
  uint32_t describe_index = 0;  // 1 + index into Replay's shapes, 0: none
  uint64_t serial = 0;          // number of events applied when this block took its shape
};

struct OpFrame {
  uint32_t name;
  uint64_t instance;
};

class Replay {
 public:
  Replay();

  // Applies one event. Returns true when it changed live memory (alloc, free, retag).
  bool apply(const Event &e);

  // Live blocks by key (mmap ranges are kept apart, see mmap_blocks()). A heap block's key is
  // its address; other spaces put the space in the top byte, because a caching device
  // allocator's first block shares its address with the segment it was cut from.
  using BlockMap = absl::flat_hash_map<uint64_t, Block>;
  const BlockMap &blocks() const { return blocks_; }
  static uint64_t key(uint64_t addr, int space) {
    return space == ADPROF_SPACE_HEAP ? addr : addr | (static_cast<uint64_t>(space) << 56);
  }
  static uint64_t address_of(uint64_t key) { return key & ((1ull << 56) - 1); }
  const std::map<uint64_t, Block> &mmap_blocks() const { return mmap_; }
  const std::vector<int64_t> *shape_of(const Block &b) const;

  // Running totals of live requested bytes.
  uint64_t host_live() const { return host_live_; }
  uint64_t device_live() const { return device_live_; }
  uint64_t device_reserved() const { return device_reserved_; }
  uint64_t mapped_live() const { return by_space_[ADPROF_SPACE_MMAP]; }
  const std::array<uint64_t, kRoleCount> &host_by_role() const { return host_by_role_; }
  const std::array<uint64_t, kRoleCount> &device_by_role() const { return device_by_role_; }
  const std::array<uint64_t, kPhaseCount> &host_by_phase() const { return host_by_phase_; }
  const std::array<uint64_t, kSpaceCount> &by_space() const { return by_space_; }
  uint64_t host_slack() const { return host_slack_; }
  uint64_t live_blocks() const { return blocks_.size() + mmap_.size(); }

  // Context of the thread of the last applied event.
  int thread_phase(uint32_t thread) const;
  const std::vector<OpFrame> &op_stack(uint32_t thread) const;

  const std::string &name(uint32_t id) const;   // "" for unknown ids
  std::string op_kind(uint32_t name_id) const;  // "cast", "(no op)", "op7" when unnamed
  std::string op_label(uint32_t name_id, uint64_t instance) const;  // "cast#3"
  const std::vector<std::string> &thread_names() const { return thread_names_; }
  const std::array<uint64_t, format::kCounterKindCount> &counters() const { return counters_; }
  const std::array<bool, format::kCounterKindCount> &have_counters() const { return have_counter_; }

  // What the last apply() did, for callers that account per event.
  struct LastChange {
    bool alloc = false;
    bool free = false;
    bool retag = false;
    bool temporary = false;  // a free inside the op invocation that allocated the block
    Block block;             // the block allocated, freed or retagged (after the change)
    uint8_t old_role = 0;    // retag: the role it had
    Block before;            // retag: the block as it was
    uint64_t key = 0;        // retag, alloc: the block's key
    // Blocks that stopped being live: a free, an unmap (several ranges, or the parts of one
    // that was split), an allocation over a block whose free was lost. (key, block)
    std::vector<std::pair<uint64_t, Block>> removed;
  };
  const LastChange &last() const { return last_; }

  uint64_t serial() const { return serial_; }  // events applied so far
  uint64_t unmatched_frees() const { return unmatched_frees_; }
  uint64_t unknown_retags() const { return unknown_retags_; }

 private:
  struct ThreadContext {
    uint8_t phase = ADPROF_PHASE_OTHER;
    uint8_t role = ADPROF_ROLE_FOREIGN;
    std::vector<OpFrame> ops;
  };
  ThreadContext &context(uint32_t thread);
  void add(const Block &b, int sign);
  void on_alloc(const Event &e);
  void on_free(const Event &e);
  void unmap_range(uint64_t start, uint64_t length);
  Block *find(uint64_t addr);

  BlockMap blocks_;
  std::map<uint64_t, Block> mmap_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<uint32_t> free_shapes_;
  std::vector<ThreadContext> threads_;
  std::vector<std::string> names_;
  std::vector<std::string> thread_names_;
  std::array<uint64_t, format::kCounterKindCount> counters_{};
  std::array<bool, format::kCounterKindCount> have_counter_{};
  uint64_t host_live_ = 0, device_live_ = 0, device_reserved_ = 0, host_slack_ = 0;
  std::array<uint64_t, kRoleCount> host_by_role_{}, device_by_role_{};
  std::array<uint64_t, kPhaseCount> host_by_phase_{};
  std::array<uint64_t, kSpaceCount> by_space_{};
  uint64_t unmatched_frees_ = 0, unknown_retags_ = 0, serial_ = 0;
  LastChange last_;
};

}  // namespace adprof
