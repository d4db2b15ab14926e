// Issue 32, item 5: a Hugging Face model as its users run it. scripts/cuda_gpt2.py builds
// transformers' GPT2LMHeadModel from a GPT2Config (nothing downloaded: GPT-2 small's shape on
// CUDA, a 2-layer one on the CPU) and takes a few AdamW steps under `adprof run --torch`. At
// the device's peak (the device's on CUDA, the host's on the CPU, rebuilt from the trace): the
// parameters and AdamW's state are PyTorch's own bytes, by role and by module (the labels adprof
// gives a parameter start with its module's path), and on CUDA the device peak is at most
// torch.cuda.max_memory_allocated() (each declared storage lies inside one of the caching
// allocator's blocks). The modules holding most at the peak, every role, are printed.
#include <algorithm>

#include "cuda_checks.h"

namespace {

using namespace adprof_test;
using namespace adprof_test::cuda_checks;

class CudaModel : public testing::TestWithParam<std::string> {};

TEST_P(CudaModel, Gpt2AdamWByRoleAndModule) {
  const std::string device = GetParam();
  SKIP_UNLESS_DEVICE("torch", device);
  if (python_says("import transformers; print(transformers.__version__)").empty())
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
  const uint64_t peak =
      cuda ? report["device"]["peak"].get<uint64_t>() : report["peak"]["bytes"].get<uint64_t>();
  const LiveAtPeak live = live_at_peak(trace, cuda, peak);
  ASSERT_TRUE(live.found) << "the trace never reaches the report's peak " << peak;
  EXPECT_EQ(live.bytes, peak);
  std::map<int, uint64_t> by_role;
  for (const LiveBlock &b : live.blocks) by_role[b.role] += b.size;
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
      mib(by_role[ADPROF_ROLE_PARAMETER]), mib(parameter),
      mib(by_role[ADPROF_ROLE_OPTIMIZER_STATE]), mib(state),
      mib(by_role[ADPROF_ROLE_FORWARD_CACHE]), mib(by_role[ADPROF_ROLE_ADJOINT]),
      mib(by_role[ADPROF_ROLE_WORKSPACE]), mib(by_role[ADPROF_ROLE_FOREIGN]));
  EXPECT_EQ(by_role[ADPROF_ROLE_PARAMETER], parameter);
  EXPECT_EQ(by_role[ADPROF_ROLE_OPTIMIZER_STATE], state);
  if (cuda) {
    EXPECT_LE(peak, fig["max_allocated"].get<uint64_t>());
    EXPECT_EQ(report["device"]["by_role"]["parameter"].get<uint64_t>(), parameter);
  }
  // By module: a parameter's label is its path under the model's root label
  // ("gpt2lmheadmodel.transformer.h.0.attn.c_attn.weight").
  std::map<std::string, uint64_t> by_module;  // every role, by the module's path
  for (const LiveBlock &b : live.blocks) {
    const auto dot = b.label.find('.');
    std::string path = dot == std::string::npos ? b.label : b.label.substr(dot + 1);
    for (const auto &[module, bytes] : fig["parameter_by_module"].items())
      if (path == module || path.starts_with(module + ".")) path = module;
    by_module[path.empty() ? "(unlabelled)" : path] += b.size;
  }
  for (const auto &[module, bytes] : fig["parameter_by_module"].items()) {
    uint64_t ours = 0;
    for (const LiveBlock &b : live.blocks) {
      const auto dot = b.label.find('.');
      if (b.role == ADPROF_ROLE_PARAMETER && dot != std::string::npos &&
          b.label.substr(dot + 1).starts_with(module + "."))
        ours += b.size;
    }
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
