// What-if rendering: each policy's one-line explanation, JSON and the table (whatif.h).
#include "render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "adprof/replay.h"
#include "adprof/whatif.h"

namespace adprof {
namespace whatif {

std::string mib(double bytes) {
  char b[48];
  const double a = std::fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024)
    std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024)
    std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024));
  else if (a >= 1024.0)
    std::snprintf(b, sizeof b, "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(b, sizeof b, "%.0f B", bytes);
  return b;
}

namespace {

// "COUNT NOUN (SIZE)": how every policy's sentence states a number of buffers and their bytes.
std::string counted(uint64_t count, const char *noun, uint64_t bytes) {
  return std::to_string(count) + " " + noun + " (" + mib(static_cast<double>(bytes)) + ")";
}

}  // namespace

std::string explain_programs(int policy, const ProgramPlans::Applied &a) {
  std::string out;
  // A checkpointing prediction counts, with the arena, what the call would hold beside it (the
  // forward that the returned value needs, in buffers of its own): ad_protocol.h.
  const char *beside =
      policy == ADPROF_AD_POLICY_CHECKPOINTING ? " (with what a call would hold beside them)" : "";
  if (a.arenas)
    out = std::to_string(a.arenas) + " compiled programs' arenas " +
          mib(static_cast<double>(a.predicted_bytes)) + " in all" + beside + " instead of " +
          mib(static_cast<double>(a.recorded_bytes)) +
          ", as the engine predicts them from the compiler's schedule";
  if (a.results)
    out += (out.empty() ? "" : "; ") + std::to_string(a.results) +
           " results written into the buffers of the arguments they replace (" +
           mib(static_cast<double>(a.result_bytes)) +
           ") instead of new buffers beside them: each argument's buffer lives on as its result";
  return out;
}

std::string explain(int id, const Plan &pl, const Replay &replay, uint64_t widened,
                    uint64_t widened_bytes, CheckpointChain &out_chain) {
  char line[512];
  switch (id) {
    case ADPROF_AD_POLICY_ACTIVITY_ANALYSIS:
      return counted(pl.suppressed_count, "buffers", pl.suppressed_bytes) +
             " for values that lead to no requested gradient are never allocated; " +
             counted(pl.early_count, "caches", pl.early_bytes) + " die at the end of forward";
    case ADPROF_AD_POLICY_EARLY_RELEASE:
      return counted(pl.early_count, "forward caches", pl.early_bytes) +
             " freed right after their node's backward rule instead of at the end of the sweep";
    case ADPROF_AD_POLICY_INPLACE_ACCUMULATION:
      return counted(pl.suppressed_count, "accumulation copies and sums", pl.suppressed_bytes) +
             " not made; " + counted(pl.virtual_count, "out-of-place adds", pl.virtual_bytes) +
             " where an adjoint is shared";
    case ADPROF_AD_POLICY_FUSED_OPTIMIZER:
      return counted(pl.early_count, "parameter gradients", pl.early_bytes) +
             " freed at their adjoint's completion instead of living until the optimizer step";
    case ADPROF_AD_POLICY_FREE_GRADIENTS:
      return counted(pl.early_count, "gradient buffers", pl.early_bytes) +
             " freed where the program zeroes them instead of kept; the next backward's first "
             "gradient becomes the buffer";
    case ADPROF_AD_POLICY_CHECKPOINTING:
      if (pl.chain.layered) {
        const ChainStats &c = pl.chain;
        CheckpointChain &out = out_chain;
        out.layered = true;
        out.nodes = c.nodes;
        out.layers = c.layers;
        out.ops_per_layer = c.ops_per_layer;
        out.segments = c.segments;
        out.generations = c.generations;
        out.dropped_bytes = c.dropped_bytes;
        out.recomputed_bytes = c.recomputed_bytes;
        out.checkpointed_layers = c.checkpointed;
        out.first = replay.name(c.first_label);
        out.last = replay.name(c.last_label);
        out.parent = c.parent_label ? replay.name(c.parent_label) : std::string();
        if (c.blocks)
          std::snprintf(line, sizeof line,
                        "the %llu blocks %s .. %s, each checkpointed on its own: the forward "
                        "drops %llu saved tensors (%s), backward recomputes each block (%s "
                        "allocated again)",
                        static_cast<unsigned long long>(c.layers), out.first.c_str(),
                        out.last.c_str(), static_cast<unsigned long long>(c.dropped),
                        mib(static_cast<double>(c.dropped_bytes)).c_str(),
                        mib(static_cast<double>(c.recomputed_bytes)).c_str());
        else
          std::snprintf(line, sizeof line,
                        "the longest chain of layers, %llu (%s .. %s), in %llu segments of %llu, "
                        "the last one not checkpointed: the forward drops %llu saved tensors "
                        "(%s), backward recomputes each checkpointed segment (%s allocated "
                        "again)",
                        static_cast<unsigned long long>(c.layers), out.first.c_str(),
                        out.last.c_str(), static_cast<unsigned long long>(c.segments),
                        static_cast<unsigned long long>(c.segments ? c.layers / c.segments : 0),
                        static_cast<unsigned long long>(c.dropped),
                        mib(static_cast<double>(c.dropped_bytes)).c_str(),
                        mib(static_cast<double>(c.recomputed_bytes)).c_str());
        if (c.generations > 1)
          std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                        " (in each of %llu tape generations)",
                        static_cast<unsigned long long>(c.generations));
        break;
      }
      {
        const ChainStats &c = pl.chain;
        CheckpointChain &out = out_chain;
        out.nodes = c.nodes;
        out.layers = c.layers;
        out.ops_per_layer = c.ops_per_layer;
        out.segments = c.segments;
        out.generations = c.generations;
        out.dropped_bytes = c.dropped_bytes;
        out.recomputed_bytes = c.recomputed_bytes;
        std::string ops;
        for (uint32_t id : c.layer_ops) {
          if (c.periodic) out.layer.push_back(replay.op_kind(id));
          ops += (ops.empty() ? "" : ", ") + replay.op_kind(id);
        }
        if (!c.periodic && c.nodes > c.layer_ops.size()) ops += ", ...";
        if (ops.size() > 60) ops = ops.substr(0, 57) + "...";
        char layers[128];
        if (c.periodic)
          std::snprintf(layers, sizeof layers, "%llu layers of %llu ops (%s)",
                        static_cast<unsigned long long>(c.layers),
                        static_cast<unsigned long long>(c.ops_per_layer), ops.c_str());
        else
          std::snprintf(layers, sizeof layers, "%llu nodes (%s), one layer each",
                        static_cast<unsigned long long>(c.nodes), ops.c_str());
        std::snprintf(line, sizeof line,
                      "the longest chain, %s, checkpointed in %llu segments: "
                      "the forward drops %llu cached outputs (%s), backward recomputes each "
                      "segment (%s allocated again)",
                      layers, static_cast<unsigned long long>(c.segments),
                      static_cast<unsigned long long>(c.dropped),
                      mib(static_cast<double>(c.dropped_bytes)).c_str(),
                      mib(static_cast<double>(c.recomputed_bytes)).c_str());
        if (c.generations > 1)
          std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                        " (in each of %llu tape generations)",
                        static_cast<unsigned long long>(c.generations));
        break;
      }
    default:
      return counted(widened, "widened i64 copies of i32 index arrays", widened_bytes) +
             " not made";
  }
  return line;
}

}  // namespace whatif

using whatif::mib;

const PolicyPrediction *find_policy(const WhatIf &w, const std::string &n) {
  for (const PolicyPrediction &p : w.policies)
    if (p.name == n || p.title == n || (!p.switch_off.empty() && p.switch_off == n)) return &p;
  if (n == "all") return &w.all;
  return nullptr;
}

namespace {
nlohmann::json policy_json(const PolicyPrediction &p) {
  nlohmann::json j;
  j["name"] = p.name;
  j["title"] = p.title;
  if (!p.switch_on.empty()) j["switch_on"] = p.switch_on;
  if (!p.switch_off.empty()) j["switch_off"] = p.switch_off;
  if (p.id >= 0) {
    j["id"] = p.id;
    j["recorded"] = p.recorded_on ? "on" : p.recorded_mixed ? "mixed" : "off";
  }
  j["applicable"] = p.applicable;
  j["measured_peak"] = p.measured_peak;
  if (p.applicable) {
    j["predicted_peak"] = p.predicted_peak;
    j["saving"] = p.saving;
    j["saving_fraction"] = p.saving_fraction;
    j["explanation"] = p.explanation;
    if (p.chain.generations) {
      const CheckpointChain &c = p.chain;
      j["chain"] = {{"nodes", c.nodes},
                    {"layers", c.layers},
                    {"ops_per_layer", c.ops_per_layer},
                    {"layer", c.layer},
                    {"segments", c.segments},
                    {"generations", c.generations},
                    {"dropped_bytes", c.dropped_bytes},
                    {"recomputed_bytes", c.recomputed_bytes}};
      if (c.layered) {
        j["chain"]["first"] = c.first;
        j["chain"]["last"] = c.last;
        j["chain"]["parent"] = c.parent;
        j["chain"]["checkpointed_layers"] = c.checkpointed_layers;
      }
    }
  } else {
    j["reason"] = p.reason;
  }
  return j;
}
}  // namespace

nlohmann::json to_json(const WhatIf &w) {
  nlohmann::json j;
  j["trace"] = w.trace;
  j["ad_tape"] = w.ad_tape;
  j["compiled_programs"] = w.programs;
  if (w.engine.described()) j["engine"] = {{"name", w.engine.name}, {"version", w.engine.version}};
  if (!w.reason.empty()) j["reason"] = w.reason;
  j["measured_peak"] = w.measured_peak;
  j["replayed_peak"] = w.replayed_peak;
  j["tapes"] = w.tapes;
  j["recorded_policy_bits"] = w.recorded_bits_and;
  nlohmann::json ps = nlohmann::json::array();
  for (const PolicyPrediction &p : w.policies) ps.push_back(policy_json(p));
  j["policies"] = ps;
  j["all"] = policy_json(w.all);
  return j;
}

std::string render_text(const WhatIf &w) {
  std::string out;
  char line[512];
  out += "adprof whatif: " + w.trace + "\n";
  out += "Measured peak: " + mib(static_cast<double>(w.measured_peak)) + " of host memory\n";
  if (!w.ad_tape && !w.programs) {
    out += "No prediction: " + w.reason + ".\n";
    return out;
  }
  if (w.engine.described()) out += "Engine: " + w.engine.name + " " + w.engine.version + "\n";
  std::snprintf(line, sizeof line, "Tape generations: %llu\n\n",
                static_cast<unsigned long long>(w.tapes));
  out += line;
  // Each column as wide as its widest cell (fixed widths overflowed on an engine's longer
  // titles and switches, and the rows no longer lined up).
  using Row = std::vector<std::string>;
  auto cells = [&](const PolicyPrediction &p) -> Row {
    std::string rec = p.id < 0 ? "" : p.recorded_on ? "on" : p.recorded_mixed ? "mixed" : "off";
    if (!p.applicable) return {p.title, p.switch_off, rec, "-", "-"};
    char saving[64];
    std::snprintf(saving, sizeof saving, "%s (%.1f%%)", mib(static_cast<double>(p.saving)).c_str(),
                  100.0 * p.saving_fraction);
    return {p.title, p.switch_off, rec, mib(static_cast<double>(p.predicted_peak)), saving};
  };
  std::vector<Row> rows = {{"policy", "switch off with", "recorded", "predicted peak", "saving"}};
  std::vector<const PolicyPrediction *> of_row = {nullptr};
  for (const PolicyPrediction &p : w.policies) {
    rows.push_back(cells(p));
    of_row.push_back(&p);
  }
  rows.push_back(cells(w.all));
  of_row.push_back(&w.all);
  std::vector<size_t> width(rows[0].size(), 0);
  for (const Row &r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string text = " ";
    for (size_t c = 0; c < rows[i].size(); ++c) {
      const std::string &cell = rows[i][c];
      std::string pad(width[c] - cell.size(), ' ');
      text += " " + (c >= 3 ? pad + cell : cell + pad);  // numbers right-aligned
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
    if (const PolicyPrediction *p = of_row[i])
      out += "      " + (p->applicable ? p->explanation : p->reason) + "\n";
  }
  return out;
}

}  // namespace adprof
