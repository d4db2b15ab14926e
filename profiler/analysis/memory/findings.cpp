#include "adprof/findings.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "adprof/ad_events.h"

namespace adprof {

namespace {

std::string percent(uint64_t part, uint64_t whole) {
  char text[32];
  snprintf(text, sizeof text, "%.0f%%", whole ? 100.0 * part / whole : 0.0);
  return text;
}

std::string share(uint64_t bytes, uint64_t peak) {
  return format_bytes(bytes) + " (" + percent(bytes, peak) + " of peak)";
}

// "; most by label: a 8.0 MiB, b 2.0 MiB" for a role's labelled buffers at the peak ("" when
// none is labelled).
std::string largest_labels(const Report &r, const char *role) {
  std::string out;
  int shown = 0;
  for (const LabelBytes &l : r.peak_by_label) {  // most bytes first
    if (l.role != role || l.label.empty()) continue;
    out += (shown ? ", " : "; most by label: ") + l.label + " " + format_bytes(l.bytes);
    if (++shown == 3) break;
  }
  return out;
}

int integer_bits(const std::string &dtype) { return dtype == "i64" ? 64 : dtype == "i32" ? 32 : 0; }

// Whether the engine's index policy (no_index_widening) removes this copy: a widened index
// (the engine's label says so, or it is wider than its source), or any integer copy where the
// engine says its wording removes those in their own width too (ad_protocol.h, "Index
// copies"). A clone of an i64 tensor in a program that never widened one is not the policy's.
bool index_policy_removes(const LiveBuffer &b, const ad::EngineDescription &engine) {
  if (ad::meaning_of(b.label).kind == ad::Kind::kLabelIndexWidened) return true;
  const int bits = integer_bits(b.dtype);
  if (bits == 0) return false;
  if (const int source_bits = integer_bits(b.source_dtype); source_bits && bits > source_bits)
    return true;
  return engine.policy(ADPROF_AD_POLICY_NO_INDEX_WIDENING).index_copies ==
         ADPROF_AD_INDEX_COPIES_SAME_WIDTH;
}

// Every copy live at the peak: role duplicate, or a copy that took another role since (a
// widened index the backward keeps is a forward cache, and still a copy of its source).
// A copy the program has since made its own parameter, input or optimizer state (SGD's
// momentum buffer starts as a clone of the gradient) is that, not a duplicate to remove.
void duplicates(const Report &r, std::vector<Finding> &out) {
  for (const LiveBuffer &b : r.live_at_peak) {
    if (b.role != "duplicate" && !b.source) continue;
    if (b.role == "optimizer_state" || b.role == "parameter" || b.role == "input") continue;
    Finding f;
    f.kind = "duplicate";
    f.bytes = b.size;
    std::string what = b.dtype.empty() ? "copy" : b.dtype + " copy";
    std::string of = b.source_label.empty() ? "a buffer no longer live" : b.source_label;
    f.message = share(b.size, r.peak) + ": duplicate - " + what + " of " + of + " made by " + b.op;
    // (a label of the protocol's own, such as ad.index_widened, says what the dtype says)
    if (!b.label.empty() && b.label != b.source_label && !b.label.starts_with("ad."))
      f.message += " in " + b.label;
    if (b.role == "forward_cache") f.message += ", kept for the backward pass (a forward cache)";
    f.evidence = "live at the peak (" + format_bytes(r.peak) + " at " +
                 std::to_string(r.peak_time) + " s), allocated in the " + b.phase + " phase";
    if (index_policy_removes(b, r.engine))
      f.fix = r.engine.fix(ADPROF_AD_POLICY_NO_INDEX_WIDENING,
                           "keep indices in their original width (read i32 indices natively)");
    else
      f.fix = "operate on the source directly instead of materialising a copy";
    out.push_back(std::move(f));
  }
}

// Byte-identical live buffers (content hashes recorded with --hash-contents), whatever made
// them: duplicates the engine did not foresee. The first of each group is the original.
void content_duplicates(const Report &r, std::vector<Finding> &out) {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<const LiveBuffer *>> groups;
  for (const LiveBuffer &b : r.live_at_peak)
    // Workspace is scratch (idle arena buffers keep stale contents): not a duplicate.
    if (b.content_hash != 0 && b.size >= 4096 && b.role != "workspace")
      groups[{b.content_hash, b.size}].push_back(&b);
  for (auto &[key, members] : groups) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end(), [](const LiveBuffer *a, const LiveBuffer *b) {
      return a->alloc_time < b->alloc_time;
    });
    uint64_t extra = key.second * (members.size() - 1);
    Finding f;
    f.kind = "content_duplicate";
    f.bytes = extra;
    auto name = [](const LiveBuffer *b) { return b->label.empty() ? b->op : b->label; };
    f.message = share(extra, r.peak) + ": " + std::to_string(members.size()) + " live buffers of " +
                format_bytes(key.second) + " hold identical contents (" + name(members[0]) +
                " and " + std::to_string(members.size() - 1) + " copies)";
    std::string ev = "same content hash " + std::to_string(key.first) + ":";
    for (size_t i = 0; i < members.size() && i < 4; ++i)
      ev += " " + name(members[i]) + " (" + members[i]->role + ")";
    f.evidence = ev;
    f.fix = "keep one buffer and share it (a view or a reference) instead of copying";
    out.push_back(std::move(f));
  }
}

// A reusable tape's arena keeps the buffers of the last evaluation for the next one (buffers
// labelled ad.arena.idle, ad_protocol.h).
void arena_idle(const Report &r, std::vector<Finding> &out) {
  uint64_t bytes = 0;
  int count = 0;
  std::string idle_label;
  for (const LiveBuffer &b : r.live_at_peak)
    if (ad::is_arena_idle_label(b.label)) {
      bytes += b.size;
      ++count;
      idle_label = b.label;
    }
  if (bytes == 0 || bytes * 10 < r.peak) return;
  Finding f;
  f.kind = "arena_idle";
  f.bytes = bytes;
  f.message = share(bytes, r.peak) + ": " + std::to_string(count) +
              " idle buffers held by the reusable tape's arena for the next evaluation";
  f.evidence = "role workspace, label " + idle_label + ", live at the peak";
  const ad::EnginePolicy &reuse = r.engine.policy(ADPROF_AD_POLICY_REUSABLE_TAPE);
  f.fix = "the arena trades memory for zero allocations per call; switching the reusable tape off";
  f.fix += reuse.switch_off.empty() ? "" : " (" + r.engine.name + ": " + reuse.switch_off + ")";
  f.fix += " returns the buffers to the allocator at the end of each gradient";
  out.push_back(std::move(f));
}

void accumulation(const Report &r, std::vector<Finding> &out) {
  uint64_t bytes = r.peak_by_role[ADPROF_ROLE_ACCUMULATION];
  if (bytes == 0) return;
  std::map<std::string, std::pair<int, uint64_t>> by_target;  // "op size" -> count, bytes
  int count = 0;
  for (const LiveBuffer &b : r.live_at_peak) {
    if (b.role != "accumulation") continue;
    ++count;
    std::string what = b.label.empty() ? b.op.substr(0, b.op.find('#')) : b.label;
    auto &slot = by_target[what + " " + format_bytes(b.size)];
    ++slot.first;
    slot.second += b.size;
  }
  Finding f;
  f.kind = "non_inplace_accumulation";
  f.bytes = bytes;
  f.message = share(bytes, r.peak) + ": " + std::to_string(count) +
              " gradient contributions were held until all had arrived, then summed";
  std::string ev;
  int shown = 0;
  for (const auto &[target, cb] : by_target) {
    if (shown++ == 4) break;
    if (!ev.empty()) ev += "; ";
    ev += std::to_string(cb.first) + " x " + target;
  }
  f.evidence = ev;
  f.fix =
      "in-place gradient accumulation adds each contribution as it arrives and keeps one "
      "buffer per gradient (" +
      r.engine.fix(ADPROF_AD_POLICY_INPLACE_ACCUMULATION, "switch it on") + ")";
  out.push_back(std::move(f));
}

void forward_caches(const Report &r, std::vector<Finding> &out) {
  uint64_t bytes = r.peak_by_role[ADPROF_ROLE_FORWARD_CACHE];
  if (bytes == 0 || bytes * 10 < r.peak) return;
  int count = 0;
  for (const LiveBuffer &b : r.live_at_peak) count += b.role == "forward_cache";
  Finding f;
  f.kind = "forward_caches";
  f.bytes = bytes;
  f.message = share(bytes, r.peak) + ": forward caches - " + std::to_string(count) +
              " buffers saved by the tape for the backward pass were live at the peak";
  f.evidence = "the peak was reached in the " + r.peak_phase + " phase";
  f.evidence += largest_labels(r, "forward_cache");
  const std::string checkpoint =
      r.engine.fix(ADPROF_AD_POLICY_CHECKPOINTING,
                   "checkpoint the longest chain (recompute its caches in backward)");
  // Early release only where the engine has it (an engine's undescribed policy is no advice).
  const bool early_release =
      !r.engine.described() || r.engine.policy(ADPROF_AD_POLICY_EARLY_RELEASE).described;
  f.fix = r.peak_phase == "backward" && early_release
              ? "release each cache at its last backward use (" +
                    r.engine.fix(ADPROF_AD_POLICY_EARLY_RELEASE, "early release") + "), or " +
                    checkpoint
              : checkpoint;
  out.push_back(std::move(f));
}

// The engine's policies that were off, with the peak the what-if analysis predicts with each on;
// the fix in the engine's own words (its ad.policy description).
void policy_savings(const Report &r, std::vector<Finding> &out) {
  for (const PolicySaving &p : r.policy_savings) {
    if (p.saving <= 0 || static_cast<uint64_t>(p.saving) * 100 < r.peak) continue;  // < 1%
    Finding f;
    f.kind = "policy." + p.name;
    f.bytes = static_cast<uint64_t>(p.saving);
    f.message = share(f.bytes, r.peak) + " would be saved by " + p.title + ": predicted peak " +
                format_bytes(p.predicted_peak) + " instead of " + format_bytes(r.peak);
    f.evidence =
        p.explanation + (p.engine_predicted ? " (adprof whatif replays the recording "
                                              "with the engine's own prediction)"
                                            : " (adprof whatif replays the recorded tape)");
    const std::string generic = p.name == "checkpointing"
                                    ? "checkpoint the longest chain in sqrt(n) segments"
                                    : "switch " + p.title + " on";
    f.fix = p.fix.empty() ? generic : r.engine.name + ": " + p.fix;
    out.push_back(std::move(f));
  }
}

// The device ran out of memory: what filled it, from the allocator's own account.
void device_oom(const Report &r, std::vector<Finding> &out) {
  if (r.device_ooms == 0) return;
  Finding f;
  f.kind = "device_oom";
  f.bytes = r.oom_allocated;
  f.message = "device " + std::to_string(r.oom_device) + " ran out of memory asking for " +
              format_bytes(r.oom_requested) + " (" + format_bytes(r.oom_allocated) +
              " allocated, " + format_bytes(r.oom_reserved) + " reserved, limit " +
              format_bytes(r.oom_limit) + ")";
  std::vector<int> roles;
  for (int i = 0; i < kRoleCount; ++i)
    if (r.oom_by_role[i]) roles.push_back(i);
  std::sort(roles.begin(), roles.end(),
            [&](int a, int b) { return r.oom_by_role[a] > r.oom_by_role[b]; });
  std::string ev = "live then:";
  for (int i : roles) ev += std::string(" ") + role_name(i) + " " + format_bytes(r.oom_by_role[i]);
  if (r.device_ooms > 1) ev += "; " + std::to_string(r.device_ooms) + " out-of-memory events";
  f.evidence = ev;
  f.fix =
      "the largest role above is what to shrink first (the findings on host memory apply the "
      "same way on the device)";
  out.push_back(std::move(f));
}

void steady_allocations(const Report &r, std::vector<Finding> &out) {
  if (r.steady_allocations_per_step <= 0) return;
  Finding f;
  f.kind = "allocations_per_step";
  f.message = "every repeated step allocates: " +
              std::to_string(static_cast<uint64_t>(r.steady_allocations_per_step)) +
              " heap allocations per step after the first";
  f.evidence = std::to_string(r.steps.size()) + " steps recorded";
  const char *tape =
      "a reusable tape and arena serves repeated evaluations from the buffers of the first";
  if (r.engine.described() && !r.engine.policy(ADPROF_AD_POLICY_REUSABLE_TAPE).described) {
    // The engine said which policies it has, and this is not one: no switch to quote, and
    // "use another engine" is no fix. Nothing for the program's author to do: a detail.
    f.fix = "nothing to change in the program: " + r.engine.name +
            " allocates anew each step and the allocator's caches serve these";
    f.detail = true;
  } else
    f.fix = std::string(tape) + " (" +
            r.engine.fix(ADPROF_AD_POLICY_REUSABLE_TAPE, "an engine with a reusable tape") + ")";
  out.push_back(std::move(f));
}

void allocator_overhead(const Report &r, std::vector<Finding> &out) {
  if (!r.have_allocator_stats || r.jemalloc_resident_at_peak <= r.peak) return;
  uint64_t over = r.jemalloc_resident_at_peak - r.peak;
  if (over * 4 < r.peak) return;
  Finding f;
  f.kind = "allocator_overhead";
  f.bytes = over;
  f.message = format_bytes(over) + " held by the allocator beyond the requested bytes at the peak";
  f.evidence = "jemalloc resident " + format_bytes(r.jemalloc_resident_at_peak) + ", requested " +
               format_bytes(r.peak) + ", size-class rounding " + format_bytes(r.peak_slack);
  f.fix = "fewer, larger and longer-lived buffers";
  f.detail = true;  // the allocator's, not the program's
  out.push_back(std::move(f));
}

// The label of `role` whose bytes live at the steps' starts grew most from the first summarized
// step to the last (a step window's summaries, step_summaries.h), and in how many of the
// summarized steps' increments it grew; "" when no label grew.
struct GrowingLabel {
  std::string label;
  uint64_t first = 0, last = 0;
  size_t increments = 0, grew = 0;
};
GrowingLabel growing_label_of_summaries(const std::vector<StepSummary> &steps, int role) {
  const std::string name = role_name(role);
  std::map<std::string, std::vector<uint64_t>> bytes;  // label -> bytes at each summary's start
  size_t summaries = 0;
  for (const StepSummary &s : steps) {
    if (!s.summarized) continue;
    for (const LabelBytes &l : s.labels_at_start)
      if (l.role == name && !l.label.empty()) {
        std::vector<uint64_t> &v = bytes[l.label];
        v.resize(summaries + 1);
        v[summaries] = l.bytes;
      }
    ++summaries;
  }
  GrowingLabel best;
  for (auto &[label, v] : bytes) {
    v.resize(summaries);
    if (summaries < 2 || v.back() <= v.front()) continue;
    size_t grew = 0;
    for (size_t i = 1; i < v.size(); ++i) grew += v[i] > v[i - 1];
    if (v.back() - v.front() > best.last - best.first)
      best = {label, v.front(), v.back(), v.size() - 1, grew};
  }
  return best;
}

// A role whose live bytes grow from each step's start to the next, every step after the first
// (of more than ten increments, nine in ten: a long job's occasional step that frees as much
// as it keeps does not hide it): the program keeps something of every step (a list of outputs
// or losses). A leak raised a training run's peak 213.8 -> 281.0 MiB with the same findings as
// before; only a gate caught it. The first step is left out: it makes what later steps reuse
// (gradients, optimizer state). The label that grows is the one whose buffers live at the peak
// were made in most steps, or in a trace recorded with a step window, the one whose bytes at
// the summarized steps' starts grew most.
void growth(const Report &r, std::vector<Finding> &out) {
  const std::vector<StepSummary> &steps = r.steps;
  if (steps.size() < 4) return;  // three increments after the first step at least
  uint64_t highest_step_peak = r.peak;
  for (const StepSummary &s : steps) highest_step_peak = std::max(highest_step_peak, s.peak);
  const uint64_t floor = std::max<uint64_t>(1 << 20, highest_step_peak / 50);
  for (int role = 0; role < kRoleCount; ++role) {
    if (role == ADPROF_ROLE_FOREIGN || role == ADPROF_ROLE_WORKSPACE) continue;  // not the model's
    const uint64_t increments = steps.size() - 2;
    uint64_t grew = 0;
    for (size_t i = 2; i < steps.size(); ++i)
      grew += steps[i].live_by_role[role] > steps[i - 1].live_by_role[role];
    const bool grows = increments <= 10 ? grew == increments : grew * 10 >= increments * 9;
    const uint64_t first = steps[1].live_by_role[role], last = steps.back().live_by_role[role];
    if (!grows || last <= first || last - first < floor) continue;
    std::string label, evidence = std::to_string(steps.size()) + " steps";
    if (r.step_window) {
      const GrowingLabel g = growing_label_of_summaries(steps, role);
      label = g.label;
      evidence += ", grew in " + std::to_string(grew) + " of " + std::to_string(increments) +
                  " (steps outside the window summarized)";
      if (!label.empty())
        evidence += "; " + label + ": " + format_bytes(g.first) + " -> " + format_bytes(g.last) +
                    " at the summarized steps' starts, grew in " + std::to_string(g.grew) + " of " +
                    std::to_string(g.increments);
    } else {
      // The label that grows: its buffers live at the peak, made in the most distinct steps.
      auto step_of = [&](double t) {
        size_t k = 0;
        while (k + 1 < steps.size() && steps[k + 1].start <= t) ++k;
        return k;
      };
      std::map<std::string, std::pair<std::set<size_t>, std::pair<uint64_t, uint64_t>>> by_label;
      for (const LiveBuffer &b : r.live_at_peak) {
        if (b.label.empty() || role_from_name(b.role) != role || b.alloc_time < steps[0].start)
          continue;
        auto &entry = by_label[b.label];
        entry.first.insert(step_of(b.alloc_time));
        entry.second.first += b.size;
        ++entry.second.second;
      }
      size_t most = 1;
      uint64_t label_bytes = 0, label_buffers = 0;
      for (const auto &[name, entry] : by_label)
        if (entry.first.size() > most) {
          most = entry.first.size();
          label = name;
          label_bytes = entry.second.first;
          label_buffers = entry.second.second;
        }
      if (!label.empty())
        evidence += "; " + label + ": " + std::to_string(label_buffers) + " buffers (" +
                    format_bytes(label_bytes) + ") live at the peak, made in " +
                    std::to_string(most) + " different steps";
    }
    Finding f;
    f.kind = "growth";
    f.bytes = last - first;
    f.message = std::string(role_name(role)) + " memory grows every step: +" +
                format_bytes((last - first) / increments) + " a step (" + format_bytes(first) +
                " at the start of step " + std::to_string(steps[1].step) + ", " +
                format_bytes(last) + " at the start of step " + std::to_string(steps.back().step) +
                ")" + (label.empty() ? "" : ", in " + label);
    f.evidence = std::move(evidence);
    f.fix =
        "the program keeps something of every step (a list of outputs or losses): keep a plain "
        "number (a loss's value) or a copy detached from the computation graph when the values "
        "are needed (a value kept with its graph keeps that step's saved tensors too), or drop "
        "the reference";
    out.push_back(std::move(f));
  }
}

}  // namespace

std::string finding_title(const std::string &kind) {
  static const std::map<std::string, std::string> titles = {
      {"duplicate", "duplicated intermediate"},
      {"content_duplicate", "same bytes held twice"},
      {"arena_idle", "idle buffers in the tape's arena"},
      {"non_inplace_accumulation", "gradients summed out of place"},
      {"forward_caches", "forward caches"},
      {"device_oom", "out of device memory"},
      {"allocations_per_step", "allocations every step"},
      {"allocator_overhead", "allocator overhead"},
      {"growth", "memory grows every step"},
  };
  if (auto it = titles.find(kind); it != titles.end()) return it->second;
  std::string name = kind;
  const std::string policy = "policy.";
  const bool is_policy = name.rfind(policy, 0) == 0;
  if (is_policy) name = name.substr(policy.size());
  for (const ad::PolicyName &p : ad::policy_names())
    if (name == p.name) return std::string(p.title) + " (a memory policy)";
  std::replace(name.begin(), name.end(), '_', ' ');
  std::replace(name.begin(), name.end(), '.', ' ');
  return name;
}

std::vector<Finding> find_findings(const Report &report) {
  std::vector<Finding> out;
  duplicates(report, out);
  content_duplicates(report, out);
  accumulation(report, out);
  arena_idle(report, out);
  forward_caches(report, out);
  policy_savings(report, out);
  device_oom(report, out);
  steady_allocations(report, out);
  allocator_overhead(report, out);
  growth(report, out);
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding &a, const Finding &b) { return a.bytes > b.bytes; });
  return out;
}

}  // namespace adprof
