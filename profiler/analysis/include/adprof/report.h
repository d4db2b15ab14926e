// The memory report: what a trace says about where memory went and what made the peak.
// `analyze` computes it in one pass (replay_driver.h; the live set at the peak is rebuilt from a
// log, docs/ARCHITECTURE.md); the AD layer (ad_analysis.h) adds the what-if savings;
// `to_json`/`from_json` are its versioned machine form (docs/REPORT_SCHEMA.md); `render_text` is
// the CLI's view. Nothing here knows about Qt or the terminal.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "adprof/ad_events.h"
#include "adprof/replay.h"
#include "adprof/sites.h"
#include "adprof/trace_reader.h"

namespace adprof {

inline constexpr int kReportSchemaVersion = 1;

struct LiveBuffer {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t slack = 0;
  std::string role;
  std::string phase;  // phase at allocation
  std::string space;
  uint32_t device = 0;
  uint32_t thread = 0;
  std::string op;         // "matmul#12", or "(no op)"
  double alloc_time = 0;  // seconds since start
  std::string label;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t source = 0;       // duplicate: address of its source
  std::string source_label;  // the source's label or op, when it was live at the peak
  std::string source_dtype;  // the source's element type, when it was live and described
  uint64_t content_hash = 0;
  uint32_t stack = 0;  // its call stack's id (traces with stacks; 0: none)
  std::string site;    // its allocation site (call_stacks.h), when the trace has stacks
};

struct NamedBytes {
  std::string name;
  uint64_t bytes = 0;
};

// Bytes held by the threads of one name (the workers of a pool share theirs), and how
// many of them hold some.
struct ThreadNameBytes {
  std::string name;
  uint32_t threads = 0;
  uint64_t bytes = 0;
};

// Bytes live at the peak that carry one label (the name a program gave its buffers through
// adprof_label: an engine's module path, a variable's name) and one role. Unlabelled buffers
// have label "". The analysis knows nothing of what labels mean; it groups by them.
struct LabelBytes {
  std::string label;
  std::string role;
  uint64_t bytes = 0;
  uint64_t buffers = 0;
};

struct OpSummary {
  std::string name;  // op kind ("matmul"), all its calls together
  uint64_t calls = 0;
  uint64_t allocations = 0;
  uint64_t bytes = 0;
  uint64_t temporaries = 0;  // blocks freed inside the call that made them
  uint64_t temporary_bytes = 0;
  uint64_t live_at_peak = 0;  // bytes of its blocks live at the peak
  // The labels of its blocks live at the peak, most bytes first (at most kOpLabelsKept; ""
  // for unlabelled blocks).
  std::vector<NamedBytes> labels_at_peak;
};

inline constexpr size_t kOpLabelsKept = 5;

// The host bytes live at one instant that one op kind made in one role, over every buffer (a
// list of buffers keeps only the largest): the groups of the "at an instant" tree.
struct RoleOpBytes {
  std::string role;
  std::string op;  // op kind ("matmul", "(no op)")
  uint64_t bytes = 0;
  uint64_t buffers = 0;
  std::vector<NamedBytes> labels;  // its buffers' labels, most bytes first (at most kOpLabelsKept)
};

struct PhaseSummary {
  std::string name;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t bytes = 0;
  uint64_t peak = 0;  // highest live host bytes while a thread was in this phase
  double peak_time = 0;
};

struct StepSummary {
  uint64_t step = 0;
  double start = 0;
  double end = 0;
  uint64_t allocations = 0;
  uint64_t bytes = 0;
  uint64_t peak = 0;
  // Host bytes live by role when the step began (a role that grows from step to step is kept
  // by the program: the "growth" finding). Not in the JSON.
  std::array<uint64_t, kRoleCount> live_by_role{};
  // When the host bytes were highest in the step, and by role then. In the JSON of a trace
  // recorded with a step window (Report::step_window).
  double peak_time = 0;
  std::array<uint64_t, kRoleCount> peak_by_role{};
  // Outside a step window (`adprof run --steps A:B`): the writer's summary of the step, not a
  // replay of its events (trace_format.h, "Step windows"), with its frees and the bytes live
  // at its start by (label, role), most first (the growth finding's module).
  bool summarized = false;
  uint64_t frees = 0;
  std::vector<LabelBytes> labels_at_start{};
};

struct Finding {
  std::string kind;      // stable identifier, e.g. "duplicate", "non_inplace_accumulation"
  std::string message;   // plain words, first line of the report
  std::string evidence;  // the numbers it rests on
  std::string fix;       // the switch or change that removes it
  uint64_t bytes = 0;    // bytes at the peak it explains
  // About the allocator or the engine, not something the program's author can change (the
  // allocator's overhead, an engine with no reusable tape): the text report shows it only with
  // --details.
  bool detail = false;
};

// A finding's kind as its user reads it: "policy.fused_optimizer" -> "fused optimizer step
// (a policy the engine has)"; a kind this table does not know is shown with its words spaced.
std::string finding_title(const std::string &kind);

// A memory policy of the engine that was off in the recording, and the peak the what-if
// analysis predicts with it on (adprof/whatif.h).
struct PolicySaving {
  std::string name;   // "inplace_accumulation" (ad_protocol.h's shared list)
  std::string title;  // "in-place accumulation"
  std::string fix;    // how the engine's users switch it on (its own words)
  uint64_t predicted_peak = 0;
  int64_t saving = 0;
  std::string explanation;
  // The engine's own what-if of its compiled programs (ad_protocol.h version 6), applied to
  // the recording; else a replay of its tape.
  bool engine_predicted = false;
};

struct Report {
  int schema_version = kReportSchemaVersion;
  std::string trace;
  // trace
  uint64_t pid = 0;
  std::string memory = "host memory";  // what the peak counts (TraceHeader::memory)
  double duration = 0;
  uint64_t events = 0;
  uint32_t threads = 0;
  std::vector<std::string> thread_names;
  bool complete = false;
  std::string end_reason;
  uint64_t corrupt_chunks = 0;
  uint64_t missing_chunks = 0;
  // totals
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t bytes_allocated = 0;
  uint64_t unmatched_frees = 0;
  uint64_t live_at_end = 0;
  // the host peak
  uint64_t peak = 0;
  double peak_time = 0;
  uint64_t peak_event = 0;  // index of the event that reached it
  std::string peak_phase;   // phase of the thread that reached it
  std::array<uint64_t, kRoleCount> peak_by_role{};
  std::array<uint64_t, kPhaseCount> peak_by_phase{};
  std::vector<NamedBytes> peak_by_op;     // descending
  std::vector<LabelBytes> peak_by_label;  // every (label, role) pair live at the peak, descending
  std::vector<RoleOpBytes> peak_by_role_op;  // every (role, op kind) live at the peak, descending
  std::vector<LiveBuffer> live_at_peak;      // descending by size
  uint64_t live_at_peak_omitted = 0;         // read from a compact report JSON: buffers it left out
  uint64_t peak_slack = 0;                   // usable - requested of the blocks live at the peak
  // Foreign host bytes at the peak split by when they were allocated: before the program's
  // first op or step (start-up: imports, libraries, the model's construction outside ops) and
  // after it (made while the steps ran). start_up_end < 0: the trace has no op or step (all
  // foreign memory is unexplained by any AD event, and there is no split).
  double start_up_end = -1;  // seconds: the first op or step
  uint64_t peak_foreign_start_up = 0, peak_foreign_after_start_up = 0;
  // The part of them made by threads other than the process's first, by the threads' name, most
  // first: what a library's own threads (a compiler's runtime, a BLAS pool) made outside any op.
  std::vector<ThreadNameBytes> peak_foreign_after_start_up_by_other_threads;
  // jemalloc statistics sampled nearest before the peak and at the end
  bool have_allocator_stats = false;
  uint64_t jemalloc_allocated_at_peak = 0, jemalloc_resident_at_peak = 0;
  uint64_t jemalloc_active_at_peak = 0, jemalloc_retained_at_peak = 0;
  uint64_t rss_at_peak = 0, max_rss = 0;
  // anonymous mappings, counted apart from the peak (see is_host_space)
  uint64_t mapped_peak = 0;                  // highest bytes mapped
  uint64_t mapped_at_peak = 0;               // mapped when host memory peaked
  std::vector<LiveBuffer> largest_mappings;  // live at the host peak, largest first (at most 5)
  // device
  uint64_t device_peak = 0;
  double device_peak_time = 0;
  uint64_t device_reserved_peak = 0;
  std::array<uint64_t, kRoleCount> device_peak_by_role{};
  // Every (label, role) pair of the device blocks live at the device peak, descending (the
  // labels the host peak's breakdown uses: a module path, an op's label; "" unlabelled).
  std::vector<LabelBytes> device_peak_by_label;
  // A device allocator's out-of-memory (the AD protocol's ad.device.oom event): the first one.
  uint64_t device_ooms = 0;
  uint64_t oom_requested = 0, oom_reserved = 0, oom_allocated = 0, oom_limit = 0;
  uint32_t oom_device = 0;
  double oom_time = 0;
  std::array<uint64_t, kRoleCount> oom_by_role{};
  // breakdowns
  std::array<PhaseSummary, kPhaseCount> phases;
  std::vector<OpSummary> ops;  // descending by bytes
  std::vector<StepSummary> steps;
  // Recorded with a step window (`adprof run --steps A:B`): some steps are summaries, and the
  // peak, the live set and the breakdowns above are those of the events recorded in full.
  bool step_window = false;
  double steady_allocations_per_step = -1;  // median over steps after the first; -1: < 2 steps
  uint64_t temporaries = 0;
  uint64_t temporary_bytes = 0;
  // AD traces (ad_protocol.h): the engine's description; whether the trace has tape events;
  // what each policy would save (filled by the AD layer, ad_analysis.h).
  ad::EngineDescription engine;
  bool ad_tape = false;
  // Events of the context API or the AD protocol: ops, steps, labels, annotations, retags,
  // descriptions, and roles or phases other than the defaults (foreign, other). 0: nobody
  // described this program's memory (a plain C program, a launcher), and the report says so in
  // one line instead of a table of zeros. ad_events_known is false for a report JSON written
  // before the count (shown as before).
  uint64_t ad_events = 0;
  bool ad_events_known = true;
  std::vector<PolicySaving> policy_savings;
  std::vector<Finding> findings;
  // Traces recorded with call stacks (`adprof run --stacks`): the allocation sites, by bytes
  // allocated (sites.h).
  bool stacks = false;
  std::vector<SiteSummary> sites;
  // Folded stacks (outermost first, ';'-separated) of the host bytes live at the peak (not in
  // the JSON form; made when AnalyzeOptions::folded_stacks asks).
  std::vector<std::pair<std::string, uint64_t>> peak_stacks;
};

struct AnalyzeOptions {
  std::function<void(double)> progress;  // fraction of the trace read, called now and then
  // The work after the reading, when there is some (symbolising a trace's stacks): what it is
  // ("symbolising stacks") and the fraction done, called now and then.
  std::function<void(const char *what, double fraction)> stage_progress;
  size_t max_live_buffers = 100000;  // live_at_peak keeps the largest this many
  bool folded_stacks = false;        // fill Report::peak_stacks (traces with stacks)
  // Fill each site's stack (SiteSummary::stack: the JSON and the GUI show it, the text report
  // does not; symbolising every frame of one stack per site is most of a site's cost).
  bool site_stacks = true;
  // Called with each annotation the pass reads and the replay that names its kind: what rides
  // along without a pass of its own (a job's process facts, job.h).
  std::function<void(const Event &, const Replay &)> on_annotation;
};

// Throws TraceError for unreadable traces.
Report analyze(const std::string &trace_path, const AnalyzeOptions &options = {});
Report analyze(TraceReader &reader, const std::string &trace_path,
               const AnalyzeOptions &options = {});

// The JSON's list of buffers live at the peak: the `top` largest unless `full` (every buffer the
// report kept; a Python run's peak holds hundreds of thousands). The other lists are whole.
struct JsonOptions {
  bool full = false;
  size_t top = 100;
};
nlohmann::json to_json(const Report &report, const JsonOptions &options = {});
Report report_from_json(const nlohmann::json &j);  // throws std::runtime_error on bad input

// details: also what a user of the program cannot act on (the allocator's overhead, anonymous
// mappings, detail findings, how many buffers the top list was taken from).
std::string render_text(const Report &report, size_t top = 10, bool details = false);
std::string format_bytes(uint64_t bytes);  // "48.0 MiB"
// The roles with bytes in `bytes` (peak_by_role, device_peak_by_role), most first.
std::vector<int> roles_most_first(const std::array<uint64_t, kRoleCount> &bytes);

}  // namespace adprof
