// CUDA entry points a program looks up itself (profiler/preload/cuda_lookups.cpp): XLA's dlsym
// on a dlopen'ed libcuda, the runtime's cuGetProcAddress, cudaGetDriverEntryPoint. Over a fake
// driver and runtime (tests/profiler/workloads/fake_libcuda.c, fake_cudart.c) loaded RTLD_LOCAL,
// as the real ones are: every block in the trace once, in its space, op, role and device, every
// free matched, and the program's own output the same as without the interposer. And dlsym's
// forwarding keeps its caller: dlsym(RTLD_NEXT) from a library resolves as without adprof.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "../support/process.h"
#include "../support/same_lines.h"
#include "../support/trace_summary.h"
#include "adprof/report.h"

namespace {

using namespace adprof_test;

// (space, size, device) -> allocations; every block's op and role checked against the step's.
using Blocks = std::map<std::tuple<int, uint64_t, uint32_t>, int>;

struct Recorded {
  Blocks blocks;
  uint64_t unmatched_frees = 0;
  uint64_t live_device_or_pinned = 0;  // blocks of those spaces still live at the end
  bool complete = false;
};

Recorded read_trace(const std::string &trace, const std::string &op, adprof_role role) {
  Recorded r;
  adprof::TraceReader reader(trace);
  adprof::Replay replay;
  adprof::Event e;
  while (reader.next(e)) {
    if (!replay.apply(e)) continue;
    const auto &c = replay.last();
    if (!c.alloc || c.block->space == ADPROF_SPACE_HEAP || c.block->space == ADPROF_SPACE_MMAP)
      continue;
    EXPECT_EQ(c.block->op_name ? replay.name(c.block->op_name) : "", op) << c.block->size;
    EXPECT_EQ(c.block->role, role) << c.block->size;
    ++r.blocks[{c.block->space, c.block->size, c.block->device}];
  }
  r.complete = reader.end().complete;
  r.unmatched_frees = replay.unmatched_frees();
  for (const auto &[key, b] : replay.blocks())
    if (b.space != ADPROF_SPACE_HEAP && b.space != ADPROF_SPACE_MMAP) ++r.live_device_or_pinned;
  return r;
}

// The workload alone and under the interposer: both succeed and print the same.
Recorded run_both(const std::vector<std::string> &argv, const std::string &op, adprof_role role) {
  TempDir dir;
  const std::string trace = dir / "lookups.adtrace";
  const auto [alone, under] = run_alone_and_under(argv, trace);
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_NE(alone.out.find("rc 0\n"), std::string::npos) << alone.out << alone.err;
  EXPECT_TRUE(under.exited) << under.err;
  EXPECT_EQ(under.exit_code, 0) << under.err;
  EXPECT_TRUE(adprof_lines(under.err).empty()) << under.err;
  EXPECT_EQ(under.out, alone.out) << "the program saw something else under the interposer";
  return read_trace(trace, op, role);
}

constexpr uint32_t kDriverDevice = 5;   // fake_libcuda.c's cuCtxGetDevice
constexpr uint32_t kRuntimeDevice = 3;  // fake_cudart.c's cudaGetDevice
constexpr int kRaw = ADPROF_SPACE_DEVICE_RAW, kPinned = ADPROF_SPACE_HOST_PINNED;

// XLA's stubs: dlopen("libcuda.so.1") RTLD_LOCAL, then dlsym(handle, "cuMemAlloc_v2") for each
// entry point. Before: dlsym returned the driver's own functions, and not one block was seen.
// Mapped virtual memory is a block where it is mapped, freed by the unmap that covers it.
TEST(CudaLookups, DlsymOnADlopenedDriverReturnsTheHooks) {
  const Recorded r = run_both({ADPROF_TEST_CUDA_LOOKUPS, "dlsym", ADPROF_TEST_FAKE_LIBCUDA},
                              "xla_step", ADPROF_ROLE_ACTIVATION);
  EXPECT_TRUE(r.complete);
  const Blocks expected = {
      {{kRaw, 1u << 20, kDriverDevice}, 1},    // cuMemAlloc_v2
      {{kRaw, 3u << 20, kDriverDevice}, 1},    // cuMemAllocManaged
      {{kRaw, 1024u * 64, kDriverDevice}, 1},  // cuMemAllocPitch_v2: pitch x rows
      {{kRaw, 5u << 20, kDriverDevice}, 1},    // cuMemAllocAsync
      {{kRaw, 7u << 20, kDriverDevice}, 1},    // cuMemAllocAsync_ptsz
      {{kRaw, 9u << 20, kDriverDevice}, 1},    // cuMemAllocFromPoolAsync
      {{kPinned, 2u << 20, 0}, 1},             // cuMemAllocHost_v2
      {{kPinned, 6u << 20, 0}, 1},             // cuMemHostAlloc
      {{kRaw, 11u << 20, kDriverDevice}, 1},   // cuMemMap of a whole range
      {{kRaw, 2u << 20, kDriverDevice}, 1},    // cuMemMap, page 1 ...
      {{kRaw, 4u << 20, kDriverDevice}, 1}};   // ... and page 2, both unmapped by one cuMemUnmap
  EXPECT_EQ(r.blocks, expected);
  EXPECT_EQ(r.unmatched_frees, 0u);
  EXPECT_EQ(r.live_device_or_pinned, 0u) << "a free was not recorded";
}

// The CUDA runtime's way: cuGetProcAddress(_v2) by name without the ABI suffix, the version
// picking the ABI (cuMemAlloc at 3010 is the 32-bit one, left alone: the program gets what dlsym
// gives for "cuMemAlloc"), the flags the per-thread-stream twin; cuGetProcAddress fetched through
// itself.
TEST(CudaLookups, CuGetProcAddressReturnsTheHooks) {
  const Recorded r = run_both({ADPROF_TEST_CUDA_LOOKUPS, "procaddress", ADPROF_TEST_FAKE_LIBCUDA},
                              "driver_step", ADPROF_ROLE_WORKSPACE);
  EXPECT_TRUE(r.complete);
  const Blocks expected = {
      {{kRaw, 1u << 20, kDriverDevice}, 1},  // cuMemAlloc, CUDA 12.0: cuMemAlloc_v2
      {{kRaw, 5u << 20, kDriverDevice}, 1},  // cuMemAllocAsync, per-thread stream
      {{kRaw, 9u << 20, kDriverDevice}, 1},  // cuMemAllocFromPoolAsync
      {{kPinned, 6u << 20, 0}, 1},           // cuMemHostAlloc
      {{kRaw, 3u << 20, kDriverDevice}, 1},  // cuMemAllocManaged, through cuGetProcAddress (v1)
      {{kPinned, 2u << 20, 0}, 1}};          // cuMemAllocHost, through the fetched _v2
  EXPECT_EQ(r.blocks, expected);
  EXPECT_EQ(r.unmatched_frees, 0u);
  EXPECT_EQ(r.live_device_or_pinned, 0u);
}

// A runtime over the driver, as the real one: its cudaMalloc calls the driver's cuMemAlloc_v2
// through a pointer from cuGetProcAddress, which is adprof's hook too. Each block once, in the
// runtime's terms (its device), never again as the driver's; and the program's own
// cudaGetDriverEntryPoint(ByVersion) lookups give hooks.
TEST(CudaLookups, RuntimeOverTheDriverIsRecordedOnce) {
  const Recorded r = run_both(
      {ADPROF_TEST_CUDA_LOOKUPS, "runtime", ADPROF_TEST_FAKE_CUDART, ADPROF_TEST_FAKE_LIBCUDA},
      "runtime_step", ADPROF_ROLE_PARAMETER);
  EXPECT_TRUE(r.complete);
  const Blocks expected = {
      {{kRaw, 1u << 20, kRuntimeDevice}, 1},  // cudaMalloc (found with dlsym)
      {{kRaw, 5u << 20, kRuntimeDevice}, 1},  // cudaMallocAsync
      {{kPinned, 4u << 20, 0}, 1},            // cudaMallocHost
      {{kRaw, 3u << 20, kDriverDevice}, 1},   // cuMemAlloc from cudaGetDriverEntryPoint
      {{kPinned, 2u << 20, 0}, 1}};  // cuMemAllocHost from cudaGetDriverEntryPointByVersion
  EXPECT_EQ(r.blocks, expected);
  EXPECT_EQ(r.unmatched_frees, 0u);
  EXPECT_EQ(r.live_device_or_pinned, 0u);
}

// dlsym and dlvsym are adprof's now; glibc's see the same caller. From a library: RTLD_NEXT
// finds the definition after it (its dependency's, not its own), RTLD_DEFAULT the first, a
// missing name's error names the same object, as without the interposer.
TEST(CudaLookups, DlsymNextFromALibraryIsUnchanged) {
  TempDir dir;
  const auto [alone, under] = run_alone_and_under({ADPROF_TEST_DLSYM_NEXT}, dir / "next.adtrace");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_NE(alone.out.find("next wl_next_probe libprofiler_wl_dlsym_next_b.so 2\n"),
            std::string::npos)
      << alone.out;
  ASSERT_EQ(under.exit_code, 0) << under.err;
  EXPECT_TRUE(adprof_lines(under.err).empty()) << under.err;
  ASSERT_EQ(lines_of(alone.out).size(), 8u) << alone.out;
  EXPECT_TRUE(same_lines(alone.out, under.out));
}

// Names adprof exports, looked up where no driver is in scope: NULL as without adprof, from the
// program (RTLD_DEFAULT, RTLD_NEXT, its own handle) and from a library loaded RTLD_LOCAL (the
// same error text, naming it). Before, each found adprof's hook, whose call failed with error
// 500 (CUDA_ERROR_NOT_FOUND): a program probing for a loaded driver was told there was one. A
// definition in the library's own scope is still found, and a driver loaded RTLD_GLOBAL later is
// found from the program and works.
TEST(CudaLookups, NamesNoDriverDefinesAreNotFound) {
  TempDir dir;
  const auto [alone, under] = run_alone_and_under(
      {ADPROF_TEST_CUDA_LOOKUPS, "absent", ADPROF_TEST_DLSYM_NEXT_A, ADPROF_TEST_FAKE_LIBCUDA},
      dir / "absent.adtrace");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  for (const char *line :
       {"program default cudaMalloc: null, error said\n",
        "program next cuMemAlloc_v2: null, error said\n",
        "program handle cuGetProcAddress: null, error said\n",
        "library default cuMemAlloc_v2: found, error none\n",  // its dependency's (dlsym_next_b)
        "library next cuMemAlloc_v2: found, error none\n", "global driver: cuMemAlloc_v2 found",
        "\nrc 0\n"})
    ASSERT_NE(alone.out.find(line), std::string::npos) << line << "\n" << alone.out;
  ASSERT_NE(alone.out.find("library default cudaMalloc: null, error /"), std::string::npos)
      << alone.out;
  ASSERT_EQ(under.exit_code, 0) << under.err;
  EXPECT_TRUE(adprof_lines(under.err).empty()) << under.err;
  EXPECT_TRUE(same_lines(alone.out, under.out));
  EXPECT_TRUE(is_complete_with(summarize(dir / "absent.adtrace")));
}

}  // namespace
