// The one allocator path: every storage is created here with its role, and retagged here.
#include "adcore/storage.h"

#include <algorithm>

#include "adcore/device.h"
#include "adprof/ad_protocol.h"

namespace adcore {
namespace detail {
void plan_storage_died(StorageImpl &s);  // plan.cpp
void plan_storage_retagged(StorageImpl &s, adprof_role role);
}  // namespace detail
namespace {

thread_local AllocStats g_stats;
thread_local Arena *g_arena = nullptr;
thread_local adprof_role g_alloc_role = ADPROF_ROLE_FOREIGN;

// Freed StorageImpl objects kept for reuse (the object, not its memory block). The hot path
// reads a plain thread-local pointer; the pool is made on a thread's first use.
constexpr size_t kPoolCap = 1 << 14;
struct StoragePool;
thread_local StoragePool *g_pool = nullptr;
thread_local bool g_pool_gone = false;  // the thread's pool was destroyed (thread exit)
struct StoragePool {
  std::vector<StorageImpl *> free;
  StoragePool() {
    free.reserve(1u << 12);
    g_pool = this;
  }
  ~StoragePool() {
    for (StorageImpl *s : free) delete s;
    g_pool = nullptr;
    g_pool_gone = true;
  }
  StoragePool(const StoragePool &) = delete;
  StoragePool &operator=(const StoragePool &) = delete;
};
StoragePool *storage_pool() {
  if (g_pool || g_pool_gone) return g_pool;
  thread_local StoragePool pool;
  return &pool;
}

void count_in(adprof_role r, size_t bytes) {
  AllocStats &s = g_stats;
  auto b = static_cast<int64_t>(bytes);
  s.live_bytes[r] += b;
  s.live_count[r] += 1;
  s.live_total += b;
  s.peak_bytes[r] = std::max(s.peak_bytes[r], s.live_bytes[r]);
  s.peak_count[r] = std::max(s.peak_count[r], s.live_count[r]);
  s.peak_total = std::max(s.peak_total, s.live_total);
}

void count_out(adprof_role r, size_t bytes) {
  AllocStats &s = g_stats;
  auto b = static_cast<int64_t>(bytes);
  s.live_bytes[r] -= b;
  s.live_count[r] -= 1;
  s.live_total -= b;
}

}  // namespace

bool profiled() {
  static const bool p = adprof_active() != 0;
  return p;
}

uint32_t intern(const char *name) { return profiled() ? adprof_name(name) : 0; }

AllocStats &alloc_stats() { return g_stats; }

void reset_alloc_stats() {
  AllocStats &s = g_stats;
  for (int r = 0; r < ADPROF_ROLE_COUNT; ++r) {
    s.allocs[r] = s.frees[r] = 0;
  }
  s.heap_allocs = s.heap_frees = s.arena_hits = 0;
  reset_peaks();
}

namespace detail {
void note_role_peaks(const int64_t *bytes, const int64_t *count) {
  AllocStats &s = g_stats;
  for (int r = 0; r < ADPROF_ROLE_COUNT; ++r) {
    if (bytes[r]) s.peak_bytes[r] = std::max(s.peak_bytes[r], s.live_bytes[r] + bytes[r]);
    if (count[r]) s.peak_count[r] = std::max(s.peak_count[r], s.live_count[r] + count[r]);
  }
}
}  // namespace detail

void reset_peaks() {
  AllocStats &s = g_stats;
  for (int r = 0; r < ADPROF_ROLE_COUNT; ++r) {
    s.peak_bytes[r] = s.live_bytes[r];
    s.peak_count[r] = s.live_count[r];
  }
  s.peak_total = s.live_total;
}

Arena::~Arena() {
  for (Bucket &b : buckets_) {
    for (void *p : b.free) {
      b.dev->deallocate(p, b.bytes);
      g_stats.heap_frees += 1;
      g_stats.arena_idle_bytes -= static_cast<int64_t>(b.bytes);
    }
  }
}

void *Arena::take(Device &dev, size_t bytes) {
  for (Bucket &b : buckets_) {
    if (b.bytes == bytes && b.dev == &dev) {
      if (b.free.empty()) return nullptr;
      void *p = b.free.back();
      b.free.pop_back();
      return p;
    }
  }
  return nullptr;
}

void Arena::give(Device &dev, void *p, size_t bytes) {
  for (Bucket &b : buckets_) {
    if (b.bytes == bytes && b.dev == &dev) {
      b.free.push_back(p);
      return;
    }
  }
  buckets_.push_back(Bucket{&dev, bytes, {}});
  buckets_.back().free.reserve(8);
  buckets_.back().free.push_back(p);
}

void Arena::prepare(Device &dev, size_t bytes, size_t count) {
  for (Bucket &b : buckets_) {
    if (b.bytes == bytes && b.dev == &dev) {
      b.free.reserve(b.free.size() + count);
      return;
    }
  }
  buckets_.push_back(Bucket{&dev, bytes, {}});
  buckets_.back().free.reserve(std::max<size_t>(count, 8));
}

size_t Arena::idle_buffers() const {
  size_t n = 0;
  for (const Bucket &b : buckets_) n += b.free.size();
  return n;
}

Arena *current_arena() { return g_arena; }
ArenaScope::ArenaScope(Arena *a) : prev_(g_arena) { g_arena = a; }
ArenaScope::~ArenaScope() { g_arena = prev_; }

namespace detail {
void reserve_storage_impls(size_t n) {
  StoragePool *p = storage_pool();
  while (p && p->free.size() < n && p->free.size() < kPoolCap) p->free.push_back(new StorageImpl());
}
}  // namespace detail

Storage allocate_storage(Device &dev, size_t bytes, adprof_role role, DType dtype,
                         const Shape &shape) {
  StorageImpl *s;
  StoragePool *pool = storage_pool();
  if (pool && !pool->free.empty()) {
    s = pool->free.back();
    pool->free.pop_back();
  } else {
    s = new StorageImpl();
  }
  s->bytes = bytes;
  s->device = &dev;
  s->role = role;
  s->saved = 0;
  Arena *a = g_arena;
  void *p = nullptr;
  const size_t want = bytes ? bytes : 1;
  if (a && a->open()) {
    p = a->take(dev, want);
    if (p) {
      g_stats.arena_hits += 1;
      g_stats.arena_idle_bytes -= static_cast<int64_t>(want);
      dev.retag(p, role);
      if (profiled()) adprof_retag(p, role, nullptr);
    }
    s->arena = Ref<Arena>(a);
  }
  if (!p) {
    adprof::RoleScope rs(role);
    g_alloc_role = role;
    p = dev.allocate(want);
    g_stats.heap_allocs += 1;
  }
  s->bytes = want;
  s->data = p;
  g_stats.allocs[role] += 1;
  count_in(role, want);
  if (profiled()) {
    adprof_describe(p, static_cast<adprof_dtype>(dtype), static_cast<uint32_t>(shape.rank),
                    shape.d);
  }
  return Storage(s);
}

void StorageImpl::destroy(StorageImpl *s) {
  if (s->plan) {
    detail::plan_storage_died(*s);
    s->plan = nullptr;
    s->plan_slot = -1;
  }
  count_out(s->role, s->bytes);
  g_stats.frees[s->role] += 1;
  if (s->arena && s->arena->open()) {
    if (profiled()) {
      static const uint32_t idle = adprof_name(ADPROF_AD_LABEL_ARENA_IDLE);
      adprof_retag(s->data, ADPROF_ROLE_WORKSPACE, nullptr);
      adprof_label(s->data, idle);
    }
    s->device->retag(s->data, ADPROF_ROLE_WORKSPACE);  // idle in the arena
    s->arena->give(*s->device, s->data, s->bytes);
    g_stats.arena_idle_bytes += static_cast<int64_t>(s->bytes);
  } else {
    s->device->deallocate(s->data, s->bytes);
    g_stats.heap_frees += 1;
  }
  s->arena.reset();
  s->data = nullptr;
  s->refs = 0;
  StoragePool *pool = storage_pool();
  if (pool && pool->free.size() < kPoolCap) {
    pool->free.push_back(s);
  } else {
    delete s;
  }
}

void retag_storage(StorageImpl &s, adprof_role role, const void *source) {
  if (s.plan && s.plan_slot >= 0) detail::plan_storage_retagged(s, role);  // a plan records it
  if (s.role != role) {
    count_out(s.role, s.bytes);
    count_in(role, s.bytes);
    s.role = role;
    s.device->retag(s.data, role);
  }
  if (profiled()) adprof_retag(s.data, role, source);
}

adprof_role allocation_role() { return g_alloc_role; }

}  // namespace adcore
