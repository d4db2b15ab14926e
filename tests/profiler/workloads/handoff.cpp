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
//   - op "ping" / "pong": PINGPONG rounds of one block sent back and forth: each thread frees
//     the block it receives and sends a new one of the same size, which the allocator gives
//     at the same address. So each thread frees, at an address it allocated itself earlier in
//     its chunk, a block the other thread allocated: its heap coder still holds its own,
//     freed, block there, and the free looks like one of its own.
//
// usage: handoff SOLO HANDOFF [NESTED [PINGPONG]]
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

constexpr size_t kPingPongSize = 48;

// The ping-pong's shared state: the block in flight, and `turn`, whose turn it is (even: the
// side that starts, odd: the other).
struct PingPong {
  std::atomic<long> turn{0};
  void *block = nullptr;
};

void ping_pong_side(PingPong *game, long rounds, int side, const char *op) {
  adprof_op_begin(adprof_name(op), 1);
  for (long i = 0; i < rounds; ++i) {
    const long mine = 2 * i + side;
    while (game->turn.load(std::memory_order_acquire) != mine) {
    }
    free(game->block);  // null on the first turn
    game->block = malloc(kPingPongSize);
    game->turn.store(mine + 1, std::memory_order_release);
  }
  adprof_op_end();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: handoff SOLO HANDOFF [NESTED [PINGPONG]]\n");
    return 2;
  }
  const long solo = atol(argv[1]), handoff = atol(argv[2]), nested = argc > 3 ? atol(argv[3]) : 0,
             ping_pong = argc > 4 ? atol(argv[4]) : 0;
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
  PingPong game;
  std::thread pong(ping_pong_side, &game, ping_pong, 1, "pong");
  std::thread ping(ping_pong_side, &game, ping_pong, 0, "ping");
  ping.join();
  pong.join();
  free(game.block);
  return 0;
}
