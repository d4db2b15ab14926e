// Issue 32, item 5: a Hugging Face model as its users run it. scripts/cuda_gpt2.py builds
// transformers' GPT2LMHeadModel from a GPT2Config (nothing downloaded: GPT-2 small's shape on
// CUDA, a 2-layer one on the CPU) and takes a few AdamW steps under `adprof run --torch`. At
// the device's peak (the device's on CUDA, the host's on the CPU), as `adprof report --json`
// breaks it down by label and role (`device.by_label`, `peak.by_label`: the product's own
// figures, summing to its peak): the parameters and AdamW's state are PyTorch's own bytes, by
// role and by module (the labels adprof gives a parameter start with its module's path), and on
// CUDA the device peak is at most torch.cuda.max_memory_allocated() (each declared storage lies
// inside one of the caching allocator's blocks). The modules holding most at the peak, every
// role, are printed.
#include <algorithm>

#include "cuda_checks.h"

namespace {

using namespace adprof_test;
using namespace adprof_test::cuda_checks;

class CudaModel : public testing::TestWithParam<std::string> {};

TEST_P(CudaModel, Gpt2AdamWByRoleAndModule) {
  const std::string device = GetParam();
  SKIP_UNLESS_DEVICE("torch", device);
  if (installed_versions(python(), {"transformers"}).empty())
    GTEST_SKIP() << "no transformers for " << python();
  const bool cuda = device == "cuda";
  TempDir tmp;
  const std::string trace = tmp / "gpt2.adtrace", figures_path = tmp / "figures.json";
  Result r = run_python_under_adprof(
      "torch", trace,
      {scripts() + "/cuda_gpt2.py", figures_path, "--device", device, "--size",
       cuda ? "gpt2" : "tiny", "--steps", "3", "--batch", "8", "--seq", cuda ? "512" : "128"},
      {{"OMP_NUM_THREADS", "1"}, {"TOKENIZERS_PARALLELISM", "false"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << r.err;
  const json fig = json_file(figures_path);
  const json report = report_json(trace);
  ASSERT_FALSE(fig.is_discarded() || report.is_discarded());
  // The peak and its breakdown by (label, role) as the report gives them: every pair live at
  // the peak, so the rows sum to the peak and their roles to its bytes by role.
  const json &space = cuda ? report["device"] : report["peak"];
  const uint64_t peak = cuda ? space["peak"].get<uint64_t>() : space["bytes"].get<uint64_t>();
  const json &rows = space["by_label"];
  ASSERT_TRUE(rows.is_array() && !rows.empty()) << space.dump();
  uint64_t rows_bytes = 0;
  std::map<std::string, uint64_t> by_role;
  for (const json &row : rows) {
    rows_bytes += row["bytes"].get<uint64_t>();
    by_role[row["role"].get<std::string>()] += row["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(rows_bytes, peak) << "the rows by label are every buffer live at the peak";
  for (const auto &[role, bytes] : space["by_role"].items())
    EXPECT_EQ(by_role[role], bytes.get<uint64_t>()) << role;
  const uint64_t parameter = fig["parameter"], state = fig["optimizer_state"];
  say("gpt2 (%s, %s, %llu parameters): peak %.1f MiB%s; parameter %.2f MiB (PyTorch %.2f), "
      "optimizer_state %.2f (PyTorch %.2f), forward_cache %.2f, adjoint %.2f, workspace %.2f, "
      "foreign %.2f MiB",
      device.c_str(), fig["size"].get<std::string>().c_str(),
      static_cast<unsigned long long>(fig["parameters"].get<uint64_t>()), mib(peak),
      cuda ? (" (PyTorch max allocated " +
              std::to_string(mib(fig["max_allocated"].get<uint64_t>())) + " MiB)")
                 .c_str()
           : "",
      mib(by_role["parameter"]), mib(parameter), mib(by_role["optimizer_state"]), mib(state),
      mib(by_role["forward_cache"]), mib(by_role["adjoint"]), mib(by_role["workspace"]),
      mib(by_role["foreign"]));
  EXPECT_EQ(by_role["parameter"], parameter);
  EXPECT_EQ(by_role["optimizer_state"], state);
  if (cuda) {
    EXPECT_LE(peak, fig["max_allocated"].get<uint64_t>());
  }
  // By module: a parameter's label is its path under the model's root label
  // ("gpt2lmheadmodel.transformer.h.0.attn.c_attn.weight").
  auto path_of = [](const std::string &label) {
    const auto dot = label.find('.');
    return dot == std::string::npos ? std::string() : label.substr(dot + 1);
  };
  std::map<std::string, uint64_t> by_module;  // every role, by the module's path
  for (const json &row : rows) {
    const std::string label = row["label"];
    std::string path = label.find('.') == std::string::npos ? label : path_of(label);
    for (const auto &[module, bytes] : fig["parameter_by_module"].items())
      if (path == module || path.starts_with(module + ".")) path = module;
    by_module[path.empty() ? "(unlabelled)" : path] += row["bytes"].get<uint64_t>();
  }
  for (const auto &[module, bytes] : fig["parameter_by_module"].items()) {
    uint64_t ours = 0;
    for (const json &row : rows)
      if (row["role"] == "parameter" && path_of(row["label"]).starts_with(module + "."))
        ours += row["bytes"].get<uint64_t>();
    EXPECT_EQ(ours, bytes.get<uint64_t>()) << "the parameters of " << module;
  }
  std::vector<std::pair<uint64_t, std::string>> largest;
  for (const auto &[module, bytes] : by_module) largest.emplace_back(bytes, module);
  std::sort(largest.rbegin(), largest.rend());
  std::string top;
  for (size_t i = 0; i < largest.size() && i < 8; ++i) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%s %.1f", i ? ", " : "", largest[i].second.c_str(),
                  mib(largest[i].first));
    top += buf;
  }
  say("gpt2 (%s): at the peak by module (MiB, every role): %s", device.c_str(), top.c_str());
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaModel, testing::Values("cpu", "cuda"), device_name);

}  // namespace
