// The interposer records every allocation entry point exactly: an 8-thread storm through the
// whole C allocation family, and every operator new/delete form.
#include <gtest/gtest.h>

#include <algorithm>

#include "adprof/report.h"
#include "test_util.h"

namespace {

using namespace ptest;

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
  TraceSummary s = summarize(trace);
  EXPECT_TRUE(s.complete) << s.reason;
  EXPECT_EQ(s.corrupt_chunks, 0u);
  EXPECT_EQ(s.missing_chunks, 0u);
  const OpCounts &storm = s.ops["storm"];
  EXPECT_EQ(storm.allocations, allocations);
  EXPECT_EQ(storm.frees, frees);
  EXPECT_EQ(storm.bytes, bytes);
  EXPECT_EQ(storm.freed_bytes, bytes);
  EXPECT_EQ(storm.live_at_end, 0u);

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
