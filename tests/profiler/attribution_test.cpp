// Attribution: ops, phases and roles stamped on allocations; retags moving bytes between roles;
// labels, descriptions and duplicate sources in the live set at the peak; and a report whose
// numbers are known in advance.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "../support/process.h"
#include "adprof/report.h"
#include "adprof/timeline.h"

namespace {

using namespace adprof_test;

constexpr uint64_t kMiB = 1 << 20;

std::string record(const TempDir &dir, const std::string &mode) {
  std::string trace = dir / (mode + ".adtrace");
  SpawnOptions o;
  o.argv = {ADPROF_TEST_ATTRIBUTION, mode};
  o.trace = trace;
  Result r = run(o);
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.err;
  return trace;
}

TEST(Attribution, ScopesStampOpPhaseAndRole) {
  TempDir dir;
  adprof::Report r = adprof::analyze(record(dir, "scopes"));
  ASSERT_TRUE(r.complete) << r.end_reason;

  struct Want {
    uint64_t size;
    const char *op, *phase, *role;
  };
  const Want wants[] = {
      {1 * kMiB, "outer#1", "forward", "forward_cache"},  // activation, retagged by the tape
      {2 * kMiB, "inner#2", "forward", "forward_cache"},  // RoleScope inside a nested OpScope
      {3 * kMiB, "outer#1", "forward", "activation"},     // role restored after the scope
      {4 * kMiB, "grad#3", "backward", "adjoint"},
      {2 * kMiB + 0, nullptr, nullptr, nullptr},  // (the duplicate: checked below)
      {8 * kMiB, "peak_marker#4", "optimizer", "optimizer_state"},
  };
  int twos = 0;
  for (const auto &b : r.live_at_peak)
    if (b.size == 2 * kMiB) ++twos;
  ASSERT_EQ(twos, 2);
  for (const Want &w : wants) {
    if (!w.op) continue;
    const adprof::LiveBuffer *b = nullptr;
    for (const auto &lb : r.live_at_peak)
      if (lb.size == w.size && lb.op == w.op) b = &lb;
    ASSERT_NE(b, nullptr) << "no live buffer of " << w.size << " bytes in " << w.op;
    EXPECT_EQ(b->phase, w.phase) << w.op;
    EXPECT_EQ(b->role, w.role) << w.op;
    EXPECT_EQ(b->space, "heap");
  }

  // Label and description of b; the duplicate names its source by that label.
  const adprof::LiveBuffer *labelled = nullptr, *dup = nullptr;
  for (const auto &lb : r.live_at_peak) {
    if (lb.op == "inner#2") labelled = &lb;
    if (lb.op == "grad#3" && lb.size == 2 * kMiB) dup = &lb;
  }
  ASSERT_NE(labelled, nullptr);
  EXPECT_EQ(labelled->label, "net.x1");
  EXPECT_EQ(labelled->dtype, "f32");
  EXPECT_EQ(labelled->shape, (std::vector<int64_t>{512, 1024}));
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->role, "duplicate");
  EXPECT_EQ(dup->phase, "backward");
  EXPECT_EQ(dup->source, labelled->addr);
  EXPECT_EQ(dup->source_label, "net.x1");

  // The retag moved a's 1 MiB from activation to forward_cache at the peak.
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_FORWARD_CACHE], 3 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_ACTIVATION], 3 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_ADJOINT], 4 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_DUPLICATE], 2 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_OPTIMIZER_STATE], 8 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_PARAMETER], 0u);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_WORKSPACE], 0u);
  EXPECT_EQ(r.peak_phase, "optimizer");
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_FORWARD], 6 * kMiB);
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_BACKWARD], 6 * kMiB);
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_OPTIMIZER], 8 * kMiB);

  // Per op kind: calls and bytes.
  auto op = [&](const std::string &name) {
    auto it = std::find_if(r.ops.begin(), r.ops.end(),
                           [&](const adprof::OpSummary &s) { return s.name == name; });
    return it != r.ops.end() ? *it : adprof::OpSummary{};
  };
  EXPECT_EQ(op("outer").calls, 1u);
  EXPECT_EQ(op("outer").allocations, 2u);
  EXPECT_EQ(op("outer").bytes, 4 * kMiB);
  EXPECT_EQ(op("inner").bytes, 2 * kMiB);
  EXPECT_EQ(op("grad").bytes, 6 * kMiB);
  EXPECT_EQ(op("grad").live_at_peak, 6 * kMiB);
}

// 5 MiB forward_cache (forward), then 10 MiB adjoint (backward), then both freed: the peak is
// 15 MiB above what the runtime itself holds, and the breakdown is exact.
TEST(Attribution, KnownPeakIsExact) {
  TempDir dir;
  std::string trace = record(dir, "known");
  adprof::Report r = adprof::analyze(trace);
  ASSERT_TRUE(r.complete) << r.end_reason;
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_ADJOINT], 10 * kMiB);
  EXPECT_EQ(r.peak_by_role[ADPROF_ROLE_FORWARD_CACHE], 5 * kMiB);
  const uint64_t foreign = r.peak_by_role[ADPROF_ROLE_FOREIGN];
  for (int role = 0; role < adprof::kRoleCount; ++role) {
    if (role != ADPROF_ROLE_ADJOINT && role != ADPROF_ROLE_FORWARD_CACHE &&
        role != ADPROF_ROLE_FOREIGN) {
      EXPECT_EQ(r.peak_by_role[role], 0u) << adprof::role_name(role);
    }
  }
  EXPECT_EQ(r.peak, 15 * kMiB + foreign);
  EXPECT_LT(foreign, 1 * kMiB) << "the runtime's own baseline should be small";
  EXPECT_EQ(r.peak_phase, "backward");
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_FORWARD], 5 * kMiB);
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_BACKWARD], 10 * kMiB);
  EXPECT_EQ(r.peak_by_phase[ADPROF_PHASE_OTHER], foreign);
  EXPECT_EQ(r.phases[ADPROF_PHASE_BACKWARD].allocations, 1u);
  EXPECT_EQ(r.phases[ADPROF_PHASE_BACKWARD].bytes, 10 * kMiB);
  EXPECT_EQ(r.phases[ADPROF_PHASE_FORWARD].allocations, 1u);
  EXPECT_EQ(r.phases[ADPROF_PHASE_FORWARD].bytes, 5 * kMiB);
  ASSERT_GE(r.live_at_peak.size(), 2u);
  EXPECT_EQ(r.live_at_peak[0].size, 10 * kMiB);
  EXPECT_EQ(r.live_at_peak[0].role, "adjoint");
  EXPECT_EQ(r.live_at_peak[1].size, 5 * kMiB);
  EXPECT_EQ(r.live_at_peak[1].role, "forward_cache");
  EXPECT_EQ(r.live_at_end + 15 * kMiB, r.peak) << "the two blocks were freed";

  // The CLI's JSON says the same and round-trips through report_from_json.
  Result cli = run_cli({"report", "--json", trace});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  nlohmann::json j = nlohmann::json::parse(cli.out);  // throws (fails the test) if invalid
  EXPECT_EQ(j["schema"], "adprof.report");
  EXPECT_EQ(j["peak"]["bytes"].get<uint64_t>(), r.peak);
  EXPECT_EQ(j["peak"]["by_role"]["adjoint"].get<uint64_t>(), 10 * kMiB);
  EXPECT_EQ(j["peak"]["by_role"]["forward_cache"].get<uint64_t>(), 5 * kMiB);
  adprof::Report back = adprof::report_from_json(j);
  EXPECT_EQ(back.peak, r.peak);
  EXPECT_EQ(back.peak_by_role, r.peak_by_role);
  EXPECT_EQ(back.live_at_peak.size(), r.live_at_peak.size());
  EXPECT_EQ(adprof::to_json(back), j) << "to_json(report_from_json(j)) != j";

  // And the text report names the three AD roles first.
  Result text = run_cli({"report", trace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("adjoint buffers"), std::string::npos);
  EXPECT_NE(text.out.find("10.0 MiB"), std::string::npos) << text.out;
}

// A thread that names no phase (a library's worker: ATen's intra-op threads, OpenBLAS's) works
// for the process in the phase the process is in: its 12 MiB, made while the main thread waits
// in backward, are backward's, and so is the peak they make (it was "other"); the thread that
// allocates once the main thread is back in "other" is "other"'s.
TEST(Attribution, ThreadThatNamesNoPhaseTakesTheProcesssPhase) {
  TempDir dir;
  const std::string trace = record(dir, "helper_thread");
  adprof::Report r = adprof::analyze(trace);
  ASSERT_TRUE(r.complete) << r.end_reason;
  EXPECT_EQ(r.peak_phase, "backward");
  ASSERT_FALSE(r.live_at_peak.empty());
  EXPECT_EQ(r.live_at_peak[0].size, 12 * kMiB);
  EXPECT_EQ(r.live_at_peak[0].phase, "backward");
  EXPECT_EQ(r.live_at_peak[0].role, "foreign");  // its role is not inferred: only its phase
  // 13 MiB and what pthread_create allocates on the main thread (a few hundred bytes).
  EXPECT_GE(r.peak_by_phase[ADPROF_PHASE_BACKWARD], 13 * kMiB);
  EXPECT_LT(r.peak_by_phase[ADPROF_PHASE_BACKWARD], 13 * kMiB + (64 << 10));
  EXPECT_EQ(r.phases[ADPROF_PHASE_BACKWARD].bytes, r.peak_by_phase[ADPROF_PHASE_BACKWARD]);
  EXPECT_GE(r.phases[ADPROF_PHASE_OTHER].bytes, 2 * kMiB);
  // The timeline's bands: one backward band, not cut by the worker's chunks restating "other".
  adprof::TraceReader reader(trace);
  const adprof::Timeline t = adprof::build_timeline(reader);
  std::vector<adprof::PhaseBand> backward;
  for (const adprof::PhaseBand &b : t.phases)
    if (b.phase == ADPROF_PHASE_BACKWARD) backward.push_back(b);
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_LE(backward[0].start, r.peak_time);
  EXPECT_GE(backward[0].end, r.peak_time) << "the band ended before the peak it holds";
}

}  // namespace

// A copy names its source only while the block at the source's address is the source: the
// next gradient at a freed gradient's address is not what an earlier copy copied (the momentum
// buffers of a torchvision model's SGD were "copies of" whatever layer's gradient sat there at
// the peak). And a copy the program made its optimizer state is no duplicate finding (SGD's
// momentum buffers were 190 of them).
TEST(Attribution, CopiesNameTheirSourceOnlyWhileItLives) {
  TempDir dir;
  const std::string trace = dir / "copies.adtrace";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_ATTRIBUTION, "copies_of_a_gradient"};
  o.trace = trace;
  Result run_result = run(o);
  ASSERT_TRUE(run_result.exited && run_result.exit_code == 0) << run_result.err;
  ASSERT_EQ(run_result.out, "address reused\n") << "the workload's premise: the next gradient "
                                                   "takes the freed one's address";
  adprof::Report r = adprof::analyze(trace);
  const adprof::LiveBuffer *state = nullptr, *copy = nullptr;
  for (const auto &b : r.live_at_peak) {
    if (b.label == "w.momentum_buffer") state = &b;
    if (b.role == "duplicate") copy = &b;
  }
  ASSERT_NE(state, nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(state->role, "optimizer_state");
  EXPECT_EQ(copy->source_label, "") << "the block at the source's address came after the copy";
  EXPECT_EQ(copy->source_dtype, "");
  std::vector<std::string> duplicates;
  for (const adprof::Finding &f : r.findings)
    if (f.kind == "duplicate") duplicates.push_back(f.message);
  ASSERT_EQ(duplicates.size(), 1u) << testing::PrintToString(duplicates);
  EXPECT_NE(duplicates[0].find("f32 copy of a buffer no longer live"), std::string::npos)
      << duplicates[0];
}
