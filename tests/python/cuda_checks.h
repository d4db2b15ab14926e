// What the GPU checks of issue 32 share (cuda_*_test.cpp, the binary python_cuda_checks_test):
// each check takes the device as its parameter, so the same code runs here on the CPU (its
// logic, its scripts, its comparisons) and on a GPU machine (scripts/gpu-check.sh), where its
// "cuda" instance runs; without a CUDA device that instance skips, saying so.
//
// Each check prints its figures on lines that start with "[ issue32 ]": gpu-check.sh collects
// them for docs/CUDA.md's "GPU results".
#pragma once

#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "adprof/replay.h"
#include "adprof/replay_driver.h"
#include "adprof/trace_reader.h"
#include "python_packages.h"

namespace adprof_test::cuda_checks {

using nlohmann::json;

// The interpreter with PyTorch 2.x, transformers, JAX and optax: the test venv here
// (ADPROF_TEST_VENV_PYTHON), the GPU machine's python3 there (gpu-check.sh sets
// ADPROF_TEST_PYTHON).
inline const std::string &python() {
  static const std::string p = env_or("ADPROF_TEST_PYTHON", ADPROF_TEST_VENV_PYTHON);
  return p;
}
inline std::string scripts() { return env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS); }
// The source tree (bench/, scripts/, tests/torch_snapshot/).
inline std::string source_root() { return env_or("ADPROF_TEST_SOURCE_ROOT", SOURCE_ROOT); }

// What `code` printed on stdout, without its last newline ("" if it failed).
inline std::string python_says(const std::string &code,
                               std::vector<std::pair<std::string, std::string>> env = {}) {
  return python_output(python(), {"-c", code}, std::move(env), 120);
}

// Why `device` cannot run a check of `engine` ("torch", "jax") with python(): "" when it can.
// Asked once per engine and device (the answer is printed once).
inline std::string unavailable(const std::string &engine, const std::string &device) {
  static std::map<std::string, std::string> known;
  const std::string key = engine + "/" + device;
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  const bool torch = engine == "torch";
  const std::string name = torch ? "PyTorch" : "JAX";
  // The version from the packages' metadata (nothing imported: the CPU instances and a machine
  // without a device node never import the engine to ask).
  std::string version =
      installed_versions(python(), torch ? std::vector<std::string>{"torch"}
                                         : std::vector<std::string>{"jax", "jaxlib", "optax"});
  version = version.substr(0, version.find(' '));
  std::string why, gpu;
  if (version.empty()) {
    why = torch ? "no torch for " + python() : "no jax/optax for " + python();
  } else if (device == "cuda") {
    // The engine's first GPU's name ("" without one). JAX without preallocation: XLA's pool
    // would take 75% of the GPU from the checks running beside this one (gpu-check.sh runs some
    // side by side).
    if (may_have_cuda_device())
      gpu = torch ? python_says(
                        "import torch; print(torch.cuda.get_device_name(0) "
                        "if torch.cuda.is_available() else '')")
                  : python_says(
                        "import jax; print(next((d.device_kind for d in jax.devices() "
                        "if d.platform == 'gpu'), ''))",
                        {{"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}});
    if (gpu.empty()) why = "no CUDA device for " + name + " " + version + " (" + python() + ")";
  }
  std::printf("[ issue32  ] %s on %s: %s\n", key.c_str(), python().c_str(),
              !why.empty()  ? why.c_str()
              : gpu.empty() ? (name + " " + version).c_str()
                            : (name + " " + version + " on " + gpu).c_str());
  return known[key] = why;
}

#define SKIP_UNLESS_DEVICE(engine, device)                                             \
  do {                                                                                 \
    ADPROF_SKIP_IF_SANITIZED();                                                        \
    const std::string why_not = adprof_test::cuda_checks::unavailable(engine, device); \
    if (!why_not.empty()) GTEST_SKIP() << why_not;                                     \
  } while (0)

// An instance's name: its device ("Devices/CudaStep.X/cuda", as gpu-check.sh filters them).
inline std::string device_name(const testing::TestParamInfo<std::string> &info) {
  return info.param;
}

// A figure for the GPU results: printed on a line of its own, "[ issue32 ] ...".
inline void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
inline void say(const char *format, ...) {
  std::va_list args;
  va_start(args, format);
  std::printf("[ issue32  ] ");
  std::vprintf(format, args);
  std::printf("\n");
  std::fflush(stdout);
  va_end(args);
}

inline double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// `adprof run [--ENGINE] --no-report -o TRACE -- python() ARGS...` (engine "" : no engine).
inline Result run_python_under_adprof(const std::string &engine, const std::string &trace,
                                      const std::vector<std::string> &args,
                                      std::vector<std::pair<std::string, std::string>> env = {},
                                      double timeout_s = 600) {
  SpawnOptions o;
  o.argv = {cli_path(), "run"};
  if (!engine.empty()) o.argv.push_back("--" + engine);
  o.argv.insert(o.argv.end(), {"--no-report", "-o", trace, "--", python()});
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  env.emplace_back("PYTHONDONTWRITEBYTECODE", "1");
  o.env = std::move(env);
  o.timeout_s = timeout_s;
  return run(o);
}

// `adprof report --json [--full] FILE`.
inline json report_json(const std::string &file, bool full = false) {
  std::vector<std::string> args = {"report", "--json"};
  if (full) args.push_back("--full");
  args.push_back(file);
  Result r = run_cli(args, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "adprof report printed no JSON: " << r.err;
  return j;
}

inline json json_file(const std::string &path) {
  json j = json::parse(read_file(path), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "no JSON in " << path;
  return j;
}

// The blocks of one space (host: heap and pinned; device: device blocks and raw device memory)
// live at that space's peak, rebuilt from the trace: the report gives the device's peak by
// role only, and the host's by label and op. The peak is the first event at which the space's
// live bytes reach `peak` (the report's figure).
struct LiveBlock {
  uint64_t size = 0;
  int role = 0;
  std::string op;          // the op's kind, "(no op)" for none
  std::string label;       // "" unlabelled
  bool described = false;  // with a dtype and shape: a tensor's storage, as its engine said
};

struct LiveAtPeak {
  bool found = false;
  uint64_t bytes = 0;
  std::vector<LiveBlock> blocks;
  // The bytes of the blocks whose label starts with `prefix`, of one role (-1: any).
  uint64_t labelled(const std::string &prefix, int role = -1) const {
    uint64_t n = 0;
    for (const LiveBlock &b : blocks)
      if (b.label.starts_with(prefix) && (role < 0 || b.role == role)) n += b.size;
    return n;
  }
};

inline LiveAtPeak live_at_peak(const std::string &trace, bool device, uint64_t peak) {
  LiveAtPeak out;
  adprof::TraceReader reader(trace);
  adprof::Replay replay;
  adprof::ReplayDriver driver(reader, replay);
  auto take = [&] {
    if (out.found) return;
    if ((device ? replay.device_live() : replay.host_live()) < peak) return;
    out.found = true;
    for (const auto &[key, b] : replay.blocks()) {
      if (!(device ? adprof::is_device_space(b.space) : adprof::is_host_space(b.space))) continue;
      out.bytes += b.size;
      out.blocks.push_back({b.size, b.role, replay.op_kind(b.op_name),
                            b.label ? replay.name(b.label) : std::string(), b.describe_index != 0});
    }
  };
  auto observer =
      adprof::observe([&](const adprof::Event &, const adprof::Replay::HeapChange &) { take(); },
                      [&](const adprof::Event &, bool) { take(); });
  driver.run(observer);
  return out;
}

}  // namespace adprof_test::cuda_checks
