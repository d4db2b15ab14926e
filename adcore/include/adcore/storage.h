// Storages and the one allocator path every buffer goes through.
//
// allocate_storage() sets the profiler role around the device allocation (RoleScope), describes
// the buffer (dtype/shape) and keeps adcore's own counters by role (readable from tests).
// retag_storage() is the only way a buffer changes role. When an Arena is current (a Tape with
// the reuse_tape policy), a released storage's memory goes back to the arena, and the next
// storage of the same byte size takes it without calling malloc; the profiler sees the buffer
// retagged to its new role (and, while idle in the arena, to workspace labelled
// "ad.arena.idle", adprof/ad_protocol.h).
#pragma once
#include <adprof/context.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "adcore/dtype.h"
#include "adcore/ref.h"

namespace adcore {

class Device;
class Arena;

struct StorageImpl {
  int refs = 0;
  void *data = nullptr;
  size_t bytes = 0;
  Device *device = nullptr;
  adprof_role role = ADPROF_ROLE_FOREIGN;
  int saved = 0;  // how many tape nodes hold it as a forward cache
  Ref<Arena> arena;
  // A tape's replay plan that knows this storage (recording: slot >= 0; a planned buffer: -2).
  void *plan = nullptr;
  int32_t plan_slot = -1;
  static void destroy(StorageImpl *s);
};
using Storage = Ref<StorageImpl>;

// Counters kept by the allocator, per role. "live"/"peak" are of storages in use (a buffer idle
// in an arena is not in use); heap_allocs/heap_frees count real device allocations.
struct AllocStats {
  uint64_t allocs[ADPROF_ROLE_COUNT] = {};  // storages created with this role
  uint64_t frees[ADPROF_ROLE_COUNT] = {};   // storages released while in this role
  int64_t live_bytes[ADPROF_ROLE_COUNT] = {};
  int64_t peak_bytes[ADPROF_ROLE_COUNT] = {};
  int64_t live_count[ADPROF_ROLE_COUNT] = {};
  int64_t peak_count[ADPROF_ROLE_COUNT] = {};
  int64_t live_total = 0, peak_total = 0;
  uint64_t heap_allocs = 0, heap_frees = 0, arena_hits = 0;
  int64_t arena_idle_bytes = 0;

  int64_t peak(adprof_role r) const { return peak_bytes[r]; }
  // The three things AD adds: forward caches + adjoints + accumulation + duplicates, live now.
};

// Thread's counters (the engine is single-threaded per thread).
AllocStats &alloc_stats();
// Zeroes the counters; live values are recomputed from nothing (call between experiments when
// no storage is alive, or accept that live counts start from zero).
void reset_alloc_stats();
// Starts a new peak window: peaks := current live values.
void reset_peaks();

// A cache of freed buffers keyed by device and byte size (see the file comment).
class Arena {
 public:
  int refs = 0;
  Arena() = default;
  explicit Arena(Device &) {}  // buffers of any device are kept apart by device
  ~Arena();
  void *take(Device &dev, size_t bytes);
  void give(Device &dev, void *p, size_t bytes);
  // Makes room for `count` idle buffers of this device and size (no allocation in give later).
  void prepare(Device &dev, size_t bytes, size_t count);
  void set_open(bool open) { open_ = open; }
  bool open() const { return open_; }
  size_t idle_buffers() const;
  static void destroy(Arena *a) { delete a; }

 private:
  struct Bucket {
    Device *dev;
    size_t bytes;
    std::vector<void *> free;
  };
  std::vector<Bucket> buckets_;
  bool open_ = true;
};

// The arena new storages come from on this thread (nullptr: straight to the device).
Arena *current_arena();
class ArenaScope {
 public:
  explicit ArenaScope(Arena *a);
  ~ArenaScope();
  ArenaScope(const ArenaScope &) = delete;
  ArenaScope &operator=(const ArenaScope &) = delete;

 private:
  Arena *prev_;
};

Storage allocate_storage(Device &dev, size_t bytes, adprof_role role, DType dtype,
                         const Shape &shape);
void retag_storage(StorageImpl &s, adprof_role role, const void *source = nullptr);
// The role of the storage whose memory is being allocated on this thread (valid inside
// Device::allocate, for device allocators that keep their own by-role figures).
adprof_role allocation_role();

// True when the profiler is preloaded (cached once); metadata calls are skipped otherwise.
bool profiled();
uint32_t intern(const char *name);  // adprof_name, skipped when not profiled

}  // namespace adcore
