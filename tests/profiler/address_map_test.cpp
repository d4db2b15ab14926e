// The step window writer's live-block map (profiler/preload/address_map.h) against
// std::unordered_map: the same contents after every operation of long random churns (erase-heavy,
// as an allocation storm's frees and mallocs, keys like heap addresses, and few keys in a small
// table so that runs wrap around its end and backward shifts cross it), the key 0, and growth.
#include "address_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace adprof::preload {
namespace {

struct Block {
  uint64_t size = 0, ticks = 0;
  uint8_t role = 0;
  bool operator==(const Block &) const = default;
};

// `map` holds exactly what `reference` holds: every key found with its value, and its
// iteration visits each key once and no other.
template <class V>
void expect_same(const AddressMap<V> &map, const std::unordered_map<uint64_t, V> &reference) {
  ASSERT_EQ(map.size(), reference.size());
  ASSERT_EQ(map.empty(), reference.empty());
  for (const auto &[key, value] : reference) {
    auto it = map.find(key);
    ASSERT_NE(it, map.end()) << "key " << key << " lost";
    ASSERT_EQ(it->first, key);
    ASSERT_EQ(it->second, value) << "key " << key;
    ASSERT_TRUE(map.contains(key));
  }
  std::unordered_map<uint64_t, int> seen;
  for (const auto &[key, value] : map) {
    ASSERT_EQ(++seen[key], 1) << "key " << key << " visited twice";
    auto ref = reference.find(key);
    ASSERT_NE(ref, reference.end()) << "key " << key << " not in the reference";
    ASSERT_EQ(value, ref->second);
  }
  ASSERT_EQ(seen.size(), reference.size());
}

TEST(AddressMap, FindsEmplacesAndErases) {
  AddressMap<Block> map;
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.find(0x1000), map.end());
  EXPECT_FALSE(map.contains(0));
  EXPECT_EQ(map.erase(0x1000), 0u);
  EXPECT_EQ(map.begin(), map.end());

  auto [it, inserted] = map.emplace(0x1000, {64, 1, 2});
  EXPECT_TRUE(inserted);
  EXPECT_EQ(it->first, 0x1000u);
  // As try_emplace: a key already there keeps its value.
  auto [again, inserted_again] = map.emplace(0x1000, {128, 5, 3});
  EXPECT_FALSE(inserted_again);
  EXPECT_EQ(again->second, (Block{64, 1, 2}));
  EXPECT_EQ(map.size(), 1u);

  // operator[]: value-initialised when new, the same value when not.
  EXPECT_EQ(map[0x2000], Block{});
  map[0x2000].size = 7;
  EXPECT_EQ(map.find(0x2000)->second.size, 7u);
  EXPECT_EQ(map.size(), 2u);

  map.erase(map.find(0x1000));
  EXPECT_FALSE(map.contains(0x1000));
  EXPECT_EQ(map.erase(0x2000), 1u);
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.begin(), map.end());
}

// 0 marks an empty slot of the table: the key 0 is kept aside, and found, iterated and erased
// as any other; so are the keys at the other end.
TEST(AddressMap, KeyZeroAndLargestKeys) {
  AddressMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> reference;
  for (const uint64_t key :
       {uint64_t{0}, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63, uint64_t{1}, uint64_t{0xFF}}) {
    map[key] += key + 1;
    reference[key] += key + 1;
    expect_same(map, reference);
  }
  map[0] += 5;
  reference[0] += 5;
  expect_same(map, reference);
  EXPECT_EQ(map.find(0)->second, 6u);
  map.erase(map.find(0));
  reference.erase(0);
  expect_same(map, reference);
  EXPECT_FALSE(map.contains(0));
  EXPECT_TRUE(map.emplace(0, 9).second);
  reference.emplace(0, 9);
  expect_same(map, reference);
  // A growth keeps the key 0 too.
  for (uint64_t k = 1; k <= 1000; ++k) {
    map[k * 16] = k;
    reference[k * 16] = k;
  }
  expect_same(map, reference);
  EXPECT_EQ(map.find(0)->second, 9u);
}

TEST(AddressMap, GrowsAtThreeQuartersAndClearGivesItsMemoryBack) {
  AddressMap<uint64_t> map;
  EXPECT_EQ(map.capacity(), 0u);
  map[16];
  EXPECT_EQ(map.capacity(), 16u);
  for (uint64_t k = 2; k <= 12; ++k) map[k * 16];
  EXPECT_EQ(map.capacity(), 16u);  // 12 of 16
  map[13 * 16];
  EXPECT_EQ(map.capacity(), 32u);
  map[0];  // aside: not counted against the table
  for (uint64_t k = 14; k <= 24; ++k) map[k * 16];
  EXPECT_EQ(map.capacity(), 32u);  // 24 of 32 in the table
  map.clear();
  EXPECT_EQ(map.capacity(), 0u);
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.begin(), map.end());
  map[48] = 3;
  EXPECT_EQ(map.find(48)->second, 3u);
}

// An allocation storm's pattern: a sliding window of live blocks, each step freeing a random
// one (its erase) and allocating a new one (an address like jemalloc's: aligned, clustered by
// size class, often reused), with lookups of live and dead addresses between.
TEST(AddressMap, StormChurnMatchesUnorderedMap) {
  std::mt19937_64 rng(42);
  AddressMap<Block> map;
  std::unordered_map<uint64_t, Block> reference;
  std::vector<uint64_t> live;
  auto address = [&] {
    const uint64_t region = 0x7f0000000000ull + (rng() % 8) * (uint64_t{1} << 32);
    const uint64_t align = uint64_t{16} << (rng() % 9);  // 16 B to 4 KiB
    return region + (rng() % 4096) * align;
  };
  for (int i = 0; i < 300'000; ++i) {
    if (live.size() >= 2048 || (!live.empty() && rng() % 2)) {
      const size_t slot = rng() % live.size();
      const uint64_t key = live[slot];
      live[slot] = live.back();
      live.pop_back();
      auto it = map.find(key);
      ASSERT_NE(it, map.end());
      ASSERT_EQ(it->second, reference.at(key));
      map.erase(it);
      reference.erase(key);
    } else {
      const uint64_t key = address();
      const Block b{rng() % 65536, static_cast<uint64_t>(i), static_cast<uint8_t>(rng() % 8)};
      const bool inserted = map.emplace(key, b).second;
      ASSERT_EQ(inserted, reference.emplace(key, b).second);
      if (inserted) live.push_back(key);
    }
    const uint64_t probe = address();
    ASSERT_EQ(map.contains(probe), reference.contains(probe));
    if (i % 20'000 == 0) expect_same(map, reference);
  }
  expect_same(map, reference);
  // Emptied by erases alone: nothing left behind.
  for (const uint64_t key : live) ASSERT_EQ(map.erase(key), 1u);
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.begin(), map.end());
}

// Few keys from a small pool: the table stays at 16 or 32 slots, most of them in use, so probe
// runs wrap around the table's end and erases shift slots back across it. Checked whole after
// every operation.
TEST(AddressMap, EraseHeavyChurnInASmallTable) {
  for (const uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937_64 rng(seed);
    AddressMap<uint64_t> map;
    std::unordered_map<uint64_t, uint64_t> reference;
    for (int i = 0; i < 40'000; ++i) {
      const uint64_t key = (rng() % 40) * (seed % 2 ? 16 : 1);  // the key 0 among them
      switch (rng() % 4) {
        case 0:
        case 1:
          ASSERT_EQ(map.erase(key), reference.erase(key));
          break;
        case 2:
          ASSERT_EQ(map.emplace(key, i).second, reference.emplace(key, i).second);
          break;
        default:
          map[key] += 1;
          reference[key] += 1;
      }
      expect_same(map, reference);
      ASSERT_LE(map.capacity(), 64u);
    }
  }
}

// The order of iteration follows from the operations alone (the live set's and the summaries'
// bytes do not depend on a seed).
TEST(AddressMap, IteratesInTheSameOrderForTheSameOperations) {
  auto run = [] {
    std::mt19937_64 rng(7);
    AddressMap<int> map;
    for (int i = 0; i < 10'000; ++i) {
      const uint64_t key = rng() % 5000 * 16;
      if (rng() % 3 == 0)
        map.erase(key);
      else
        map[key] = i;
    }
    std::vector<std::pair<uint64_t, int>> order(map.begin(), map.end());
    return order;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace adprof::preload
