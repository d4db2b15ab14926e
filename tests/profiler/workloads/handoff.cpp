// Share ticks (recorder.h, heap_event_ticks): a thread that allocates alone, then two threads
// that hand blocks over, one allocating, the other freeing.
//   - op "solo": the main thread alone allocates and frees SOLO blocks;
//   - op "produce" / "consume": a producer allocates HANDOFF blocks and passes each through a
//     ring to a consumer thread, which frees it at once. Each free is recorded right after
//     its allocation on the other thread: if their order in the trace came from timestamps
//     rounded too coarsely, a free would come first and be unmatched;
//   - op "outer" / "inner": NESTED rounds of two threads passing a baton: the outer thread
//     allocates a block of kOuterBase + round bytes, the inner thread then allocates and frees
//     one of kInnerBase + round bytes, then the outer thread frees its block. In the trace each
//     inner block must lie between its round's outer allocation and free.
//
// usage: handoff SOLO HANDOFF [NESTED]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <thread>

#include "adprof/context.h"

namespace {

constexpr uint32_t kRing = 64;

struct Ring {
  std::atomic<void *> slot[kRing] = {};
};

void produce(Ring *ring, long count) {
  adprof_op_begin(adprof_name("produce"), 1);
  for (long i = 0; i < count; ++i) {
    void *p = malloc(16 + static_cast<size_t>(i % 7) * 8);
    std::atomic<void *> &s = ring->slot[static_cast<uint32_t>(i) % kRing];
    while (s.load(std::memory_order_acquire) != nullptr) {
    }
    s.store(p, std::memory_order_release);
  }
  adprof_op_end();
}

void consume(Ring *ring, long count) {
  adprof_op_begin(adprof_name("consume"), 1);
  for (long i = 0; i < count; ++i) {
    std::atomic<void *> &s = ring->slot[static_cast<uint32_t>(i) % kRing];
    void *p;
    while ((p = s.load(std::memory_order_acquire)) == nullptr) {
    }
    s.store(nullptr, std::memory_order_release);
    free(p);
  }
  adprof_op_end();
}

constexpr size_t kOuterBase = 100000, kInnerBase = 300000;

void nested_outer(std::atomic<long> *baton, long rounds) {
  adprof_op_begin(adprof_name("outer"), 1);
  for (long i = 0; i < rounds; ++i) {
    void *p = malloc(kOuterBase + static_cast<size_t>(i));
    baton->store(2 * i + 1, std::memory_order_release);  // the inner thread's turn
    while (baton->load(std::memory_order_acquire) != 2 * i + 2) {
    }
    free(p);
  }
  adprof_op_end();
}

void nested_inner(std::atomic<long> *baton, long rounds) {
  adprof_op_begin(adprof_name("inner"), 1);
  for (long i = 0; i < rounds; ++i) {
    while (baton->load(std::memory_order_acquire) != 2 * i + 1) {
    }
    free(malloc(kInnerBase + static_cast<size_t>(i)));
    baton->store(2 * i + 2, std::memory_order_release);
  }
  adprof_op_end();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: handoff SOLO HANDOFF [NESTED]\n");
    return 2;
  }
  const long solo = atol(argv[1]), handoff = atol(argv[2]), nested = argc > 3 ? atol(argv[3]) : 0;
  adprof_op_begin(adprof_name("solo"), 1);
  for (long i = 0; i < solo; ++i) {
    void *p = malloc(24 + static_cast<size_t>(i % 5) * 16);
    free(p);
  }
  adprof_op_end();
  Ring *ring = new Ring;
  std::thread consumer(consume, ring, handoff);
  std::thread producer(produce, ring, handoff);
  producer.join();
  consumer.join();
  delete ring;
  std::atomic<long> baton{0};
  std::thread inner(nested_inner, &baton, nested);
  std::thread outer(nested_outer, &baton, nested);
  outer.join();
  inner.join();
  return 0;
}
