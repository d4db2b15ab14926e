// Metrics, gates and diffs over hand-made reports: the numbers are known, so every outcome is.
#include "adprof/compare.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace adprof {
namespace {

Report make_report(uint64_t peak, uint64_t allocations, uint64_t duplicate) {
  Report r;
  r.peak = peak;
  r.allocations = allocations;
  r.peak_by_role[ADPROF_ROLE_DUPLICATE] = duplicate;
  r.peak_by_role[ADPROF_ROLE_ADJOINT] = peak - duplicate;
  r.peak_by_op = {{"matmul", peak}};
  r.ops = {{"matmul", 3, allocations, peak, 0, 0, peak, {}}};
  for (int p = 0; p < kPhaseCount; ++p) r.phases[p].name = phase_name(p);
  return r;
}

TEST(Gates, ParseForms) {
  Gate g = parse_gate("peak > +5%");
  EXPECT_EQ(g.metric, "peak");
  EXPECT_EQ(g.op, ">");
  EXPECT_DOUBLE_EQ(g.value, 5);
  EXPECT_TRUE(g.relative);
  EXPECT_TRUE(g.change);
  g = parse_gate("role.duplicate>=0");
  EXPECT_EQ(g.metric, "role.duplicate");
  EXPECT_EQ(g.op, ">=");
  EXPECT_FALSE(g.change);
  g = parse_gate("peak > 64MiB");
  EXPECT_DOUBLE_EQ(g.value, 64.0 * 1024 * 1024);
  g = parse_gate("allocations <= -10");
  EXPECT_TRUE(g.change);
  EXPECT_DOUBLE_EQ(g.value, -10);
  EXPECT_THROW(parse_gate("peak"), std::invalid_argument);
  EXPECT_THROW(parse_gate("peak > 5%"), std::invalid_argument);  // a percentage needs a sign
  EXPECT_THROW(parse_gate("peak > 5 parsecs"), std::invalid_argument);
  EXPECT_THROW(parse_gate("> 5"), std::invalid_argument);
  EXPECT_EQ(parse_bytes("1KiB"), 1024u);
  EXPECT_EQ(parse_bytes("2MB"), 2000000u);
  EXPECT_THROW(parse_bytes("5%"), std::invalid_argument);
}

TEST(Gates, RelativeAndAbsolute) {
  auto base = report_metrics(make_report(100 << 20, 1000, 0));
  auto grown = report_metrics(make_report(106 << 20, 1050, 4 << 20));
  EXPECT_TRUE(evaluate(parse_gate("peak > +5%"), &base, grown).failed);  // +6%
  EXPECT_FALSE(evaluate(parse_gate("peak > +10%"), &base, grown).failed);
  EXPECT_FALSE(evaluate(parse_gate("allocations > +10%"), &base, grown).failed);  // +5%
  EXPECT_TRUE(evaluate(parse_gate("role.duplicate > 0"), &base, grown).failed);
  EXPECT_FALSE(evaluate(parse_gate("role.duplicate > 0"), &base, base).failed);
  EXPECT_TRUE(evaluate(parse_gate("peak > +5MiB"), &base, grown).failed);  // +6 MiB
  EXPECT_FALSE(evaluate(parse_gate("peak > 200MiB"), nullptr, grown).failed);
  EXPECT_TRUE(evaluate(parse_gate("op.matmul > 100MiB"), nullptr, grown).failed);
  EXPECT_FALSE(evaluate(parse_gate("op.absent > 0"), nullptr, grown).failed);  // absent op: 0 B
  EXPECT_THROW(evaluate(parse_gate("nonsense > 0"), nullptr, grown), std::invalid_argument);
  // The device peak by role (a GPU budget per role).
  Report gpu = make_report(100 << 20, 1000, 0);
  gpu.device_peak = 5 << 20;
  gpu.device_peak_by_role[ADPROF_ROLE_ADJOINT] = 3 << 20;
  gpu.device_peak_by_role[ADPROF_ROLE_PARAMETER] = 2 << 20;
  const auto on_gpu = report_metrics(gpu);
  EXPECT_TRUE(evaluate(parse_gate("device.role.adjoint > 2MiB"), nullptr, on_gpu).failed);
  EXPECT_FALSE(evaluate(parse_gate("device.role.adjoint > 4MiB"), nullptr, on_gpu).failed);
  EXPECT_FALSE(evaluate(parse_gate("device.role.duplicate > 0"), nullptr, on_gpu).failed);
  EXPECT_THROW(evaluate(parse_gate("device.role.nonsense > 0"), nullptr, on_gpu),
               std::invalid_argument);
  EXPECT_THROW(evaluate(parse_gate("peak > +5%"), nullptr, grown), std::invalid_argument);
}

// A gate's line reads as what was checked and whether the limit held, numbers as a person
// writes them (it read "peak: 213.8 MiB  passes 'peak > 230MiB'", which looks like a breach,
// and "allocations_per_step > 200000.000000").
TEST(Gates, ExplanationSaysWhetherTheLimitHeld) {
  auto base = report_metrics(make_report(100 << 20, 1000, 0));
  auto grown = report_metrics(make_report(106 << 20, 250000, 4 << 20));
  GateResult ok = evaluate(parse_gate("peak > 230MiB"), nullptr, grown);
  EXPECT_EQ(ok.explanation, "peak: 106.0 MiB, limit held (fails when over 230.0 MiB)");
  GateResult broken = evaluate(parse_gate("peak > 100MiB"), nullptr, grown);
  EXPECT_EQ(broken.explanation, "peak: 106.0 MiB, LIMIT BROKEN (fails when over 100.0 MiB)");
  GateResult count = evaluate(parse_gate("allocations > 200000"), nullptr, grown);
  EXPECT_EQ(count.explanation, "allocations: 250,000, LIMIT BROKEN (fails when over 200,000)");
  GateResult change = evaluate(parse_gate("peak > +5%"), &base, grown);
  EXPECT_EQ(change.explanation,
            "peak: 100.0 MiB -> 106.0 MiB (+6.0 MiB (+6.0%)), LIMIT BROKEN (fails when the change "
            "is over +5%)");
}

// A run recorded with a step window whose highest step was folded into its summary: a gate on
// the peak (or a role at it) says which step and that it is a summarized one, so a CI user
// knows where to look (before, "peak: 10.0 MiB" alone: the window's report has no such peak).
Report windowed_report(uint64_t window_peak, uint64_t step, uint64_t summarized_peak) {
  Report r = make_report(window_peak, 1000, 0);
  r.step_window = true;
  r.peak_time = 0.5;
  r.steps.push_back({});
  r.steps.back().step = 0;
  r.steps.back().start = 0;
  r.steps.back().end = 1;
  r.steps.push_back({});
  StepSummary &folded = r.steps.back();
  folded.step = step;
  folded.start = 1;
  folded.end = 2;
  folded.summarized = true;
  folded.peak = summarized_peak;
  folded.peak_time = 1.5;
  folded.peak_by_role[ADPROF_ROLE_FORWARD_CACHE] = summarized_peak;
  return r;
}

TEST(Gates, APeakInASummarizedStepIsNamedWithItsStep) {
  const Metrics windowed = report_metrics(windowed_report(2 << 20, 7, 10 << 20));
  GateResult broken = evaluate(parse_gate("peak > 5MiB"), nullptr, windowed);
  EXPECT_TRUE(broken.failed);
  EXPECT_EQ(broken.explanation,
            "peak: 10.0 MiB in step 7, summarized, LIMIT BROKEN (fails when over 5.0 MiB)");
  EXPECT_TRUE(broken.sourced);
  EXPECT_EQ(broken.current_source.step, 7);
  EXPECT_TRUE(broken.current_source.summarized);
  // A role at that peak is read there too.
  GateResult role = evaluate(parse_gate("role.forward_cache > 16MiB"), nullptr, windowed);
  EXPECT_EQ(role.explanation,
            "role.forward_cache: 10.0 MiB in step 7, summarized, limit held (fails when over "
            "16.0 MiB)");
  // A peak recorded in full says nothing more (its step is in the report), in the JSON's "at".
  const Metrics whole = report_metrics(windowed_report(12 << 20, 7, 10 << 20));
  GateResult held = evaluate(parse_gate("peak > 16MiB"), nullptr, whole);
  EXPECT_EQ(held.explanation, "peak: 12.0 MiB, limit held (fails when over 16.0 MiB)");
  EXPECT_EQ(held.current_source.step, 0);
  EXPECT_FALSE(held.current_source.summarized);
  // A diff names each side's step: the base recorded in full, the new one's peak folded.
  GateResult grown = evaluate(parse_gate("peak > +5%"), &whole, windowed);
  EXPECT_FALSE(grown.failed);
  EXPECT_EQ(grown.explanation,
            "peak: 12.0 MiB -> 10.0 MiB in step 7, summarized (-2.0 MiB (-16.7%)), limit held "
            "(fails when the change is over +5%)");
  GateResult shrunk = evaluate(parse_gate("peak > +5%"), &windowed, whole);
  EXPECT_EQ(shrunk.explanation.rfind("peak: 10.0 MiB in step 7, summarized -> 12.0 MiB (", 0), 0u)
      << shrunk.explanation;
  // The diff's table stars the values read in a summarized step and names the step under it.
  const ReportDiff d =
      diff_reports(windowed_report(12 << 20, 7, 10 << 20), windowed_report(2 << 20, 7, 10 << 20));
  ASSERT_EQ(d.rows[0].metric, "peak");
  EXPECT_TRUE(d.rows[0].current_source.summarized);
  EXPECT_FALSE(d.rows[0].base_source.summarized);
  const std::string text = render_diff_text(d, {});
  EXPECT_NE(text.find("      12.0 MiB      10.0 MiB*  -2.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("*: read in a step outside the step window, from its summary (new: step 7)"),
            std::string::npos)
      << text;
  const std::string md = render_diff_markdown(d, {});
  EXPECT_NE(md.find("| `peak` | 12.0 MiB | 10.0 MiB* |"), std::string::npos) << md;
  EXPECT_NE(md.find("\\*: read in a step outside the step window"), std::string::npos) << md;
}

// A device gate on a run that recorded no device memory has nothing to weigh: an input error
// naming the run (base or new), never a pass (before, device.peak read 0 and every budget held:
// a model that fell back to the CPU passed its GPU budget).
TEST(Gates, ADeviceGateOnARunWithoutDeviceMemoryIsAnError) {
  const Metrics host = report_metrics(make_report(100 << 20, 1000, 0));
  Report gpu_report = make_report(100 << 20, 1000, 0);
  gpu_report.device_peak = 5 << 20;
  gpu_report.device_peak_by_role[ADPROF_ROLE_ADJOINT] = 5 << 20;
  const Metrics gpu = report_metrics(gpu_report);
  EXPECT_FALSE(host.device_recorded);
  EXPECT_TRUE(gpu.device_recorded);
  for (const char *gate : {"device.peak > 1GiB", "device.role.adjoint > 1GiB",
                           "device.reserved_peak > 1GiB", "device.ooms > 0"}) {
    SCOPED_TRACE(gate);
    try {
      evaluate(parse_gate(gate), nullptr, host);
      ADD_FAILURE() << "passed on no device memory";
    } catch (const UnrecordedMetric &e) {
      EXPECT_FALSE(e.in_base);
      EXPECT_NE(std::string(e.what()).find("the new run recorded none"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(evaluate(parse_gate("device.peak > 1GiB"), nullptr, gpu).failed);
  // A diff: whichever run recorded none.
  try {
    evaluate(parse_gate("device.peak > +5%"), &host, gpu);
    ADD_FAILURE() << "passed on a base without device memory";
  } catch (const UnrecordedMetric &e) {
    EXPECT_TRUE(e.in_base);
  }
  EXPECT_THROW(evaluate(parse_gate("device.peak > +5%"), &gpu, host), UnrecordedMetric);
  EXPECT_TRUE(evaluate(parse_gate("device.peak > +5%"), &gpu, gpu).failed == false);
  // Host gates on a host run are unchanged; an out-of-memory event alone is device memory
  // recorded (the allocator said it ran out).
  EXPECT_FALSE(evaluate(parse_gate("peak > 1GiB"), nullptr, host).failed);
  Report oom = make_report(1 << 20, 10, 0);
  oom.device_ooms = 1;
  EXPECT_TRUE(evaluate(parse_gate("device.ooms > 0"), nullptr, report_metrics(oom)).failed);
}

TEST(Diff, RowsAndSites) {
  Report a = make_report(100, 10, 0), b = make_report(150, 10, 50);
  b.peak_by_op.push_back({"cast", 50});
  ReportDiff d = diff_reports(a, b);
  ASSERT_FALSE(d.rows.empty());
  EXPECT_EQ(d.rows[0].metric, "peak");
  EXPECT_EQ(d.rows[0].base, 100);
  EXPECT_EQ(d.rows[0].current, 150);
  ASSERT_EQ(d.appeared.size(), 1u);
  EXPECT_EQ(d.appeared[0], "op cast");
  EXPECT_TRUE(d.vanished.empty());
  std::string md = render_diff_markdown(d, {});
  EXPECT_NE(md.find("| `peak` | 100 B | 150 B | +50 B (+50.0%) |"), std::string::npos) << md;
}

TEST(Schema, RoundTrip) {
  Report r = make_report(123456, 77, 1000);
  r.trace = "x.adtrace";
  r.steady_allocations_per_step = 3;
  r.findings.push_back({"duplicate", "msg", "ev", "fix", 1000});
  r.live_at_peak.push_back({});
  r.live_at_peak.back().size = 1000;
  r.live_at_peak.back().role = "duplicate";
  r.live_at_peak.back().shape = {2, 3};
  nlohmann::json j = to_json(r);
  Report back = report_from_json(j);
  EXPECT_EQ(to_json(back), j);
  // Older or newer readers: unknown keys are ignored, missing ones default.
  j["a_key_from_the_future"] = 1;
  j.erase("steps");
  EXPECT_NO_THROW(report_from_json(j));
  EXPECT_THROW(report_from_json(nlohmann::json::object()), std::runtime_error);
  nlohmann::json bad = to_json(r);
  bad["schema_version"] = 99;
  EXPECT_THROW(report_from_json(bad), std::runtime_error);
  bad = to_json(r);
  bad["peak"]["bytes"] = "lots";
  EXPECT_THROW(report_from_json(bad), std::runtime_error);
}

// The report JSON is compact by default: the largest buffers live at the peak only (a Python
// run's JSON was 38 MiB for 5 steps), every buffer with full; diff reads the labels at the peak
// from peak.by_label, so a compact JSON diffs as the full one does.
TEST(Schema, CompactByDefaultFullOnRequest) {
  Report r = make_report(1 << 20, 500, 0);
  for (int i = 0; i < 250; ++i) {
    r.live_at_peak.push_back({});
    r.live_at_peak.back().size = 4096 - static_cast<uint64_t>(i);
    r.live_at_peak.back().role = "activation";
    r.live_at_peak.back().label = "model.layer" + std::to_string(i);
    r.peak_by_label.push_back({r.live_at_peak.back().label, "activation", 4096, 1});
  }
  const nlohmann::json compact = to_json(r);
  EXPECT_EQ(compact["live_at_peak"].size(), 100u);
  EXPECT_EQ(compact["live_at_peak_omitted"], 150);
  EXPECT_EQ(compact["peak"]["by_label"].size(), 250u);
  EXPECT_EQ(to_json(report_from_json(compact)), compact);  // a compact JSON round-trips
  JsonOptions full;
  full.full = true;
  EXPECT_EQ(to_json(r, full)["live_at_peak"].size(), 250u);
  EXPECT_FALSE(to_json(r, full).contains("live_at_peak_omitted"));
  JsonOptions top;
  top.top = 7;
  EXPECT_EQ(to_json(r, top)["live_at_peak"].size(), 7u);
  const ReportDiff d = diff_reports(report_from_json(to_json(r, full)), report_from_json(compact));
  EXPECT_TRUE(d.appeared.empty()) << d.appeared.size();
  EXPECT_TRUE(d.vanished.empty()) << d.vanished.size();
}

}  // namespace
}  // namespace adprof
