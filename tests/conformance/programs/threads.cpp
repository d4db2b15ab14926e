// The conformance suite's multi-threaded C++ program: kThreads threads allocate through every
// C and C++ entry point and free each other's blocks (a block made by thread t is freed by
// thread t+1), in rounds separated by a barrier. Each thread's work is a fixed sequence from
// its own seeded generator, and every container is sized before the threads start, so the
// number of allocations does not depend on scheduling. Prints a checksum per round.
#include <stdio.h>
#include <stdlib.h>

#include <barrier>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 4;
constexpr int kBlocksPerRound = 3000;

enum class Kind {
  kMalloc,
  kCalloc,
  kRealloc,
  kMemalign,
  kAlignedAlloc,
  kNew,
  kNewArray,
  kAlignedNew,
  kString,
  kVector,
  kKinds
};

struct Block {
  Kind kind;
  void *p;
  size_t size;
};

struct alignas(64) Wide {
  char bytes[200];
};

uint64_t next_random(uint64_t &state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

Block make_block(uint64_t &rng) {
  const Kind kind = static_cast<Kind>(next_random(rng) % static_cast<int>(Kind::kKinds));
  const size_t size = 1 + next_random(rng) % 4000;
  Block b{kind, nullptr, size};
  switch (kind) {
    case Kind::kMalloc:
      b.p = malloc(size);
      break;
    case Kind::kCalloc:
      b.p = calloc(size, 3);
      break;
    case Kind::kRealloc:
      b.p = realloc(malloc(size / 2 + 1), size);
      break;
    case Kind::kMemalign:
      if (posix_memalign(&b.p, 64, size) != 0) b.p = nullptr;
      break;
    case Kind::kAlignedAlloc:
      b.p = aligned_alloc(256, (size + 255) & ~size_t{255});
      break;
    case Kind::kNew:
      b.p = new std::vector<char>(size);  // two allocations: the vector and its elements
      break;
    case Kind::kNewArray:
      b.p = new char[size];
      break;
    case Kind::kAlignedNew:
      b.p = new Wide[1 + size % 7];
      break;
    case Kind::kString:
      b.p = new std::string(size + 16, 'x');  // longer than the small-string buffer
      break;
    case Kind::kVector: {
      auto *v = new std::vector<int>;
      for (size_t i = 0; i < size % 200; ++i) v->push_back(static_cast<int>(i));  // grows
      b.p = v;
      break;
    }
    case Kind::kKinds:
      break;
  }
  if (!b.p) abort();
  return b;
}

void free_block(const Block &b) {
  switch (b.kind) {
    case Kind::kMalloc:
    case Kind::kCalloc:
    case Kind::kRealloc:
    case Kind::kMemalign:
    case Kind::kAlignedAlloc:
      free(b.p);
      break;
    case Kind::kNew:
      delete static_cast<std::vector<char> *>(b.p);
      break;
    case Kind::kNewArray:
      delete[] static_cast<char *>(b.p);
      break;
    case Kind::kAlignedNew:
      delete[] static_cast<Wide *>(b.p);
      break;
    case Kind::kString:
      delete static_cast<std::string *>(b.p);
      break;
    case Kind::kVector:
      delete static_cast<std::vector<int> *>(b.p);
      break;
    case Kind::kKinds:
      break;
  }
}

}  // namespace

int main() {
  // made[t]: the blocks thread t made this round (sized up front: no growth during the run).
  std::vector<std::vector<Block>> made(kThreads);
  for (auto &m : made) m.reserve(kBlocksPerRound);
  std::vector<uint64_t> sums(kThreads * kRounds, 0);
  std::barrier sync(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kBlocksPerRound; ++i) made[t].push_back(make_block(rng));
        sync.arrive_and_wait();
        auto &theirs = made[(t + 1) % kThreads];  // another thread's blocks
        for (const Block &b : theirs) {
          sums[t * kRounds + round] += b.size;
          free_block(b);
        }
        sync.arrive_and_wait();
        theirs.clear();
        sync.arrive_and_wait();
      }
    });
  for (auto &th : threads) th.join();
  for (int round = 0; round < kRounds; ++round) {
    uint64_t sum = 0;
    for (int t = 0; t < kThreads; ++t) sum += sums[t * kRounds + round];
    printf("round %d bytes %llu\n", round, static_cast<unsigned long long>(sum));
  }
  return 0;
}
