// Interposition on the GPU: interpose_workload runs under libadprof_preload.so and its trace is
// replayed with the analysis library. Asserts: cuBLAS's workspace is DEVICE_RAW, attributed to
// the matmul op with role workspace; the caching allocator's segments are DEVICE_SEGMENT and are
// counted once (the raw cudaMalloc behind each is absorbed); tensors are DEVICE_BLOCKs with
// their roles and ops (adjoints in the backward phase); the raw cudaMalloc outside any op is
// DEVICE_RAW with role foreign; pinned host memory is HOST_PINNED and cudaMallocAsync's memory
// DEVICE_RAW, both in the program's op "staging" with its role, and freed (no lost free); the
// out-of-memory error left an ADPROF_AD_DEVICE_OOM ("ad.device.oom") annotation.
// Paths: ADPROF_PRELOAD_LIB and CUDA_INTERPOSE_WORKLOAD override the build-tree defaults (the
// GPU bundle sets them). Skips when no CUDA device is present.
#include <adcore/cuda/cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../support/env.h"
#include "../support/process.h"
#include "adprof/ad_protocol.h"
#include "adprof/replay.h"
#include "adprof/trace_reader.h"

namespace {

struct Seen {
  int space, role, phase;
  uint64_t size, addr;
  std::string op;
};

}  // namespace

TEST(GpuInterpose, CublasWorkspaceSegmentsBlocksAndOom) {
  if (!adcore::cuda::available())
    GTEST_SKIP() << "no CUDA device: " << adcore::cuda::unavailable_reason();
  const std::string preload = adprof_test::env_or("ADPROF_PRELOAD_LIB", ADPROF_TEST_PRELOAD);
  const std::string workload =
      adprof_test::env_or("CUDA_INTERPOSE_WORKLOAD", CUDA_INTERPOSE_WORKLOAD);
  ASSERT_TRUE(std::filesystem::exists(preload)) << preload;
  ASSERT_TRUE(std::filesystem::exists(workload)) << workload;
  const std::string dir =
      std::filesystem::temp_directory_path() / ("adprof-cuda-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string trace = dir + "/cuda.adtrace";
  using adprof_test::shell_quote;
  const adprof_test::ProcessResult run = adprof_test::run_shell(
      "ADPROF_ROOT_PID=$$ LD_PRELOAD=" + shell_quote(preload) +
      " ADPROF_OUTPUT=" + shell_quote(trace) + " exec " + shell_quote(workload));
  const std::string out = run.out + run.err;
  ASSERT_EQ(run.code, 0) << out;
  ASSERT_NE(out.find("oom: device out of memory on cuda:0"), std::string::npos) << out;

  adprof::TraceReader reader(trace);
  adprof::Replay replay;
  adprof::Event e;
  std::vector<Seen> allocs;
  uint32_t oom_kind = 0;
  int oom_events = 0;
  uint64_t peak_device = 0, peak_reserved = 0;
  while (reader.next(e)) {
    if (e.type == adprof::format::EventType::kName && e.text() == ADPROF_AD_DEVICE_OOM)
      oom_kind = static_cast<uint32_t>(e.a);
    if (e.type == adprof::format::EventType::kAnnotate && oom_kind && e.a == oom_kind) {
      ++oom_events;
      EXPECT_EQ(e.values().size(), 15u);
      if (!e.values().empty()) {
        EXPECT_EQ(e.values()[0], 32u << 20);  // requested
      }
    }
    if (!replay.apply(e)) continue;
    peak_device = std::max(peak_device, replay.device_live());
    peak_reserved = std::max(peak_reserved, replay.device_reserved());
    const auto &c = replay.last();
    if (!c.alloc) continue;
    allocs.push_back(Seen{c.block->space, c.block->role, c.block->phase, c.block->size, 0,
                          c.block->op_name ? replay.name(c.block->op_name) : ""});
  }
  EXPECT_TRUE(reader.end().complete) << reader.end().reason;
  EXPECT_EQ(oom_events, 1);

  bool workspace = false, segment = false, matmul_block = false, adjoint_backward = false,
       foreign_raw = false, pinned = false, pinned_host_alloc = false, async = false;
  for (const Seen &s : allocs) {
    if (s.space == ADPROF_SPACE_DEVICE_RAW && s.op == "matmul" && s.role == ADPROF_ROLE_WORKSPACE &&
        s.size == (32u << 20))
      workspace = true;
    if (s.space == ADPROF_SPACE_DEVICE_SEGMENT) segment = true;
    if (s.space == ADPROF_SPACE_DEVICE_BLOCK && s.op == "matmul" && s.size == 64 * 128 * 4)
      matmul_block = true;
    if (s.space == ADPROF_SPACE_DEVICE_BLOCK && s.role == ADPROF_ROLE_ADJOINT &&
        s.phase == ADPROF_PHASE_BACKWARD)
      adjoint_backward = true;
    if (s.space == ADPROF_SPACE_DEVICE_RAW && s.op.empty() && s.size == (3u << 20) &&
        s.role == ADPROF_ROLE_FOREIGN)
      foreign_raw = true;
    if (s.space == ADPROF_SPACE_HOST_PINNED && s.op == "staging" && s.role == ADPROF_ROLE_INPUT) {
      if (s.size == (4u << 20)) pinned = true;
      if (s.size == (6u << 20)) pinned_host_alloc = true;
    }
    if (s.space == ADPROF_SPACE_DEVICE_RAW && s.op == "staging" && s.role == ADPROF_ROLE_INPUT &&
        s.size == (5u << 20))
      async = true;
  }
  EXPECT_TRUE(workspace) << "no 32 MiB DEVICE_RAW block in op matmul with role workspace";
  EXPECT_TRUE(segment) << "no DEVICE_SEGMENT";
  EXPECT_TRUE(matmul_block) << "no DEVICE_BLOCK for matmul's (64,128) f32 output";
  EXPECT_TRUE(adjoint_backward) << "no adjoint DEVICE_BLOCK in the backward phase";
  EXPECT_TRUE(foreign_raw) << "no foreign 3 MiB DEVICE_RAW block";
  EXPECT_TRUE(pinned) << "no 4 MiB HOST_PINNED block (cudaMallocHost) in op staging, role input";
  EXPECT_TRUE(pinned_host_alloc) << "no 6 MiB HOST_PINNED block (cudaHostAlloc) in op staging";
  EXPECT_TRUE(async) << "no 5 MiB DEVICE_RAW block (cudaMallocAsync) in op staging, role input";
  // Every pinned or device staging block's free was matched: none is live at the end (the
  // runtime's own small heap blocks made in the op may stay).
  for (const auto &[key, b] : replay.blocks())
    EXPECT_FALSE(b.space != ADPROF_SPACE_HEAP && b.op_name && replay.name(b.op_name) == "staging")
        << "staging block of " << b.size << " B in space " << int(b.space) << " still live";
  // Segments counted once: no live raw block shares an address with a live segment.
  for (const auto &[key, b] : replay.blocks())
    if (b.space == ADPROF_SPACE_DEVICE_SEGMENT) {
      EXPECT_EQ(replay.blocks().count(
                    adprof::Replay::key(adprof::Replay::address_of(key), ADPROF_SPACE_DEVICE_RAW)),
                0u);
    }
  EXPECT_GE(peak_device, 64u * 128 * 4);
  EXPECT_GE(peak_reserved, 2u << 20);
  std::printf("[interpose] device live peak %llu B, reserved peak %llu B, %zu device events\n",
              static_cast<unsigned long long>(peak_device),
              static_cast<unsigned long long>(peak_reserved), allocs.size());
  std::filesystem::remove_all(dir);
}
