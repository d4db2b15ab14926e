// The interposer records every allocation entry point exactly: an 8-thread storm through the
// whole C allocation family, and every operator new/delete form.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "../support/process.h"
#include "../support/same_lines.h"
#include "../support/trace_summary.h"
#include "adprof/report.h"

namespace {

using namespace adprof_test;

TEST(Interposer, StormCountsAreExact) {
  TempDir dir;
  std::string trace = dir / "storm.adtrace", expected = dir / "expected.txt";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STORM, "8", "100000", expected};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << "the workload saw an allocator violation (calloc not zeroed, "
                               "misaligned pointer or realloc lost contents)\n"
                            << r.err;
  EXPECT_TRUE(adprof_lines(r.err).empty()) << r.err;
  auto want = key_values(read_file(expected));
  ASSERT_EQ(want["violations"], "0");
  const uint64_t allocations = std::stoull(want["allocations"]);
  const uint64_t frees = std::stoull(want["frees"]);
  const uint64_t bytes = std::stoull(want["bytes"]);
  ASSERT_GT(allocations, 400000u);

  // Our own replay: allocations, frees and bytes of the blocks made inside "storm".
  const TraceSummary s = summarize(trace);
  EXPECT_TRUE(is_complete_with(s, {{"storm",
                                    {.allocations = allocations,
                                     .frees = frees,
                                     .bytes = bytes,
                                     .freed_bytes = bytes,
                                     .live_at_end = 0}}}));
  EXPECT_EQ(s.corrupt_chunks, 0u);
  EXPECT_EQ(s.missing_chunks, 0u);

  // The report says the same.
  adprof::Report report = adprof::analyze(trace);
  auto it = std::find_if(report.ops.begin(), report.ops.end(),
                         [](const adprof::OpSummary &op) { return op.name == "storm"; });
  ASSERT_NE(it, report.ops.end());
  EXPECT_EQ(it->calls, 8u);
  EXPECT_EQ(it->allocations, allocations);
  EXPECT_EQ(it->bytes, bytes);
  EXPECT_EQ(report.unmatched_frees, 0u);
  EXPECT_GE(report.frees, frees);
  EXPECT_GE(report.threads, 9u) << "8 workers and the writer at least";
}

// Every allocation function gives under the profiler what the program's glibc gives it, errno
// included (issue 28, item 6): odd alignments are rounded as glibc rounds them (jemalloc alone
// fails them with EINVAL), and a request no allocator can meet sets ENOMEM (jemalloc's memalign
// and realloc leave errno as it was).
TEST(Interposer, AllocationResultsMatchGlibcs) {
  TempDir dir;
  const auto [glibc, under] = run_alone_and_under({ADPROF_TEST_ALLOC_RESULTS}, dir / "t.adtrace");
  ASSERT_EQ(glibc.exit_code, 0) << glibc.err;
  ASSERT_EQ(under.exit_code, 0) << under.err;
  EXPECT_TRUE(adprof_lines(under.err).empty()) << under.err;
  ASSERT_GT(lines_of(glibc.out).size(), 30u);
  EXPECT_TRUE(same_lines(glibc.out, under.out));
  EXPECT_TRUE(is_complete_with(summarize(dir / "t.adtrace")));
}

// glibc's heap queries answer for the heap that holds the program's blocks: before, under the
// interposer mallinfo2 said 0 bytes in use with 32 MiB live, and malloc_trim(0) gave nothing
// back (the resident set stayed at 38 MiB; natively it fell to 1 MiB), as both described
// glibc's own arena, which jemalloc leaves empty. And a block of 32 MiB or more gives its pages
// back at its free, as glibc's, which maps it apart (before, a freed 64 MiB block stayed
// resident).
TEST(Interposer, HeapQueriesAnswerForTheHeapInUse) {
  TempDir dir;
  const auto [glibc, under] = run_alone_and_under({ADPROF_TEST_HEAP_QUERIES}, dir / "t.adtrace");
  ASSERT_EQ(glibc.exit_code, 0) << glibc.err;
  ASSERT_EQ(under.exit_code, 0) << under.err;
  const std::vector<std::string> want = lines_of(glibc.out);
  ASSERT_EQ(want.size(), 10u) << glibc.out;
  for (const std::string &line : want)
    EXPECT_TRUE(line.ends_with(": yes") || line.ends_with(": 1")) << "natively, glibc: " << line;
  EXPECT_TRUE(same_lines(glibc.out, under.out));

  // malloc_stats: glibc's layout, and the totals of a heap that holds something.
  for (const Result *r : {&glibc, &under}) {
    const std::string &err = r->err;
    const size_t total = err.find("Total (incl. mmap):\nsystem bytes     = ");
    ASSERT_NE(total, std::string::npos) << err;
    EXPECT_NE(err.find("Arena "), std::string::npos) << err;
    EXPECT_NE(err.find("\nmax mmap bytes   = "), std::string::npos) << err;
    const size_t in_use = err.find("in use bytes     = ", total);
    ASSERT_NE(in_use, std::string::npos) << err;
    EXPECT_GT(std::stoull(err.substr(in_use + 19)), 0u) << err;
  }
  EXPECT_TRUE(is_complete_with(summarize(dir / "t.adtrace")));
}

// A program we did not write that asks: GNU gold's --stats prints mallinfo2's figure for "total
// space allocated by malloc". Under the interposer it said 0 bytes before (glibc's empty arena).
TEST(Interposer, GoldLinkerStatsSeeTheHeap) {
  if (!std::filesystem::exists("/usr/bin/gcc") || !std::filesystem::exists("/usr/bin/ld.gold"))
    GTEST_SKIP() << "gcc or GNU gold (binutils) is not installed";
  TempDir dir;
  {
    std::ofstream(dir / "m.c") << "int main(void) { return 0; }\n";
    SpawnOptions compile;
    compile.argv = {"/usr/bin/gcc", "-c", dir / "m.c", "-o", dir / "m.o"};
    const Result r = run(compile);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto [alone, under] = run_alone_and_under(
      {"/usr/bin/gcc", "-fuse-ld=gold", "-Wl,--stats", dir / "m.o", "-o", dir / "m"},
      dir / "gold.adtrace");
  for (const Result *r : {&alone, &under}) {
    ASSERT_EQ(r->exit_code, 0) << r->err;
    const std::string said = "total space allocated by malloc: ";
    const size_t at = r->err.find(said);
    ASSERT_NE(at, std::string::npos) << r->err;
    EXPECT_GT(std::stoull(r->err.substr(at + said.size())), 0u)
        << (r == &alone ? "natively: " : "under adprof: ") << r->err;
  }
}

// A C program has no libstdc++ of its own: libjemalloc (the interposer's dependency) comes
// before libstdc++ in the lookup order and exports operator new too. The blocks a dlopen'd C++
// library makes with new[] must still be recorded, every one, and matched by their delete[].
TEST(Interposer, NewInALibraryOfACProgramIsRecorded) {
  TempDir dir;
  std::string trace = dir / "cnew.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_CNEW, ADPROF_TEST_CXX_NEW_LIB, "20", std::to_string(1 << 20)};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TraceSummary s = summarize(trace, /*keep_sizes=*/true);
  const std::vector<uint64_t> &sizes = s.ops[""].sizes;
  EXPECT_EQ(std::count(sizes.begin(), sizes.end(), uint64_t{1} << 20), 20)
      << "new[] of 1 MiB in a dlopen'd C++ library was not recorded";
  adprof::Report report = adprof::analyze(trace);
  EXPECT_EQ(report.unmatched_frees, 0u);
  EXPECT_LT(report.live_at_end, uint64_t{1} << 20) << "delete[] was not recorded";
}

// The CUDA hooks, with a stand-in runtime that only a dlopen'ed plugin links (RTLD_LOCAL, as
// adcore's CUDA plugin and PyTorch's CUDA extension load the real one): every call reaches the
// runtime (before: RTLD_NEXT did not see it, and every cudaMalloc of a sample under `adprof run
// --device cuda` failed with "named symbol not found" on the H200), and each block is recorded
// in its space, op, role and device; after adprof_device_memory_is_reserve() driver memory is
// a segment (reserved), with the block declared in it live, and a raw block taken before the
// declaration and freed after it is matched.
TEST(Interposer, CudaRuntimeOfAPluginIsFoundAndRecorded) {
  TempDir dir;
  const std::string trace = dir / "cuda.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_FAKE_CUDA, ADPROF_TEST_FAKE_CUDA_PLUGIN};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rc 0"), std::string::npos) << "a CUDA call failed: " << r.out;

  adprof::TraceReader reader(trace);
  adprof::Replay replay;
  adprof::Event e;
  std::map<std::pair<int, uint64_t>, int> seen;  // (space, size) -> allocations in the op
  uint64_t reserved_peak = 0, live_peak = 0;
  while (reader.next(e)) {
    if (!replay.apply(e)) continue;
    reserved_peak = std::max(reserved_peak, replay.device_reserved());
    live_peak = std::max(live_peak, replay.device_live());
    const auto &c = replay.last();
    if (!c.alloc || c.block->space == ADPROF_SPACE_HEAP) continue;
    EXPECT_EQ(c.block->op_name ? replay.name(c.block->op_name) : "", "device_work");
    EXPECT_EQ(c.block->role, ADPROF_ROLE_INPUT);
    if (c.block->space != ADPROF_SPACE_HOST_PINNED) {
      EXPECT_EQ(c.block->device, 3u);
    }
    ++seen[{c.block->space, c.block->size}];
  }
  EXPECT_TRUE(reader.end().complete) << reader.end().reason;
  const std::map<std::pair<int, uint64_t>, int> expected = {
      {{ADPROF_SPACE_DEVICE_RAW, 1u << 20}, 1},      // cudaMalloc
      {{ADPROF_SPACE_DEVICE_RAW, 5u << 20}, 1},      // cudaMallocAsync
      {{ADPROF_SPACE_HOST_PINNED, 4u << 20}, 1},     // cudaMallocHost
      {{ADPROF_SPACE_HOST_PINNED, 6u << 20}, 1},     // cudaHostAlloc
      {{ADPROF_SPACE_DEVICE_SEGMENT, 2u << 20}, 1},  // cudaMalloc, after the declaration
      {{ADPROF_SPACE_DEVICE_BLOCK, 256u << 10}, 1}};
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(reserved_peak, 2u << 20);
  EXPECT_EQ(live_peak, (1u << 20) + (5u << 20) + (256u << 10));  // raw blocks, then the block
  for (const auto &[key, b] : replay.blocks())
    EXPECT_EQ(b.space, ADPROF_SPACE_HEAP) << b.size << " B still live in space " << int(b.space);
  EXPECT_EQ(replay.unmatched_frees(), 0u);
}

TEST(Interposer, EveryOperatorNewFormIsRecorded) {
  TempDir dir;
  std::string trace = dir / "new.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_NEWFORMS};
  o.trace = trace;
  Result r = run(o);
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.exit_code, 0) << "an aligned operator new returned a misaligned pointer";
  std::vector<uint64_t> want;
  for (auto &line : lines_of(r.out))
    if (line.rfind("size ", 0) == 0) want.push_back(std::stoull(line.substr(5)));
  ASSERT_EQ(want.size(), 14u);

  TraceSummary s = summarize(trace, /*keep_sizes=*/true);
  const OpCounts &forms = s.ops["newforms"];
  // The op's allocations are exactly the forms' (stdio's buffer for the "size" lines is made
  // inside the op too: it is the one block still live at exit).
  std::vector<uint64_t> got = forms.sizes;
  for (uint64_t w : want) {
    auto it = std::find(got.begin(), got.end(), w);
    ASSERT_NE(it, got.end()) << "operator new of " << w << " bytes was not recorded";
    got.erase(it);
  }
  EXPECT_LE(got.size(), 1u) << "unexpected allocations inside the op";
  uint64_t extra = got.empty() ? 0 : got.front();
  EXPECT_EQ(forms.frees, want.size()) << "every operator delete form is recorded as a free";
  EXPECT_EQ(forms.live_at_end, extra);
}

}  // namespace
