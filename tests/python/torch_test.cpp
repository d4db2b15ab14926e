// The PyTorch integration (python/adprof, docs/PYTORCH.md) end to end: Debian's python3 with
// torch runs scripts under `adprof run --torch`, and the trace is read back with the CLI.
//
// Exactness (issue #14): at the report's peak, the bytes of the roles parameter,
// optimizer_state, forward_cache and adjoint equal what PyTorch itself says at that point. The
// scripts (scripts/exact_*.py) carry an oracle (scripts/roles_oracle.py) that computes
// PyTorch's own account before every op of the backward pass and the optimizer step, keyed by
// the instance number of the op scope adprof records for the op; the test finds the op open at
// the report's peak event (`adprof dump`, the events up to report.peak.event) and compares that
// op's account with report.peak.by_role. The oracle's account is made before the op runs; what
// the op itself allocated before the peak is workspace until the op ends, a role not compared.
//
// Bad input: a script that raises, one that is not Python, PyTorch missing or too old.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "python_packages.h"
#include "torch_support.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

// The interpreter under test: Debian's python3 with its torch 1.13 (what CI runs), or the one
// ADPROF_TEST_PYTHON names (by hand: a venv with PyTorch 2.x, docs/PYTORCH.md).
const std::string kPython = env_or("ADPROF_TEST_PYTHON", "/usr/bin/python3");
// The source tree's scripts and package, unless the environment names others (the GPU bundle's
// run, scripts/gpu-check.sh, where the source tree lies elsewhere).
const std::string kScripts = env_or("ADPROF_TEST_TORCH_SCRIPTS", TORCH_TEST_SCRIPTS);
const std::string kPackage = env_or("ADPROF_TEST_TORCH_PACKAGE", TORCH_TEST_PACKAGE);

// The PyTorch version of kPython ("" without torch), said once per test binary: the suite runs
// on Debian's 1.13 and on the test venv's newest 2.x, and its log says which.
const std::string &torch_version() {
  static const std::string version = said_versions("torch", kPython, {"torch"}, "torch");
  return version;
}

bool python_has_torch() { return !torch_version().empty(); }

// kPython's sys.executable.
std::string run_python_print_executable() {
  SpawnOptions o;
  o.argv = {kPython, "-c", "import sys; sys.stdout.write(sys.executable)"};
  return run(o).out;
}

#define SKIP_WITHOUT_TORCH()                                                 \
  do {                                                                       \
    ADPROF_SKIP_IF_SANITIZED();                                              \
    if (!python_has_torch())                                                 \
      GTEST_SKIP() << "no torch for " << kPython                             \
                   << " (scripts/setup.sh installs Debian's python3-torch,"  \
                   << " scripts/setup-test-venv.sh the venv's PyTorch 2.x)"; \
  } while (0)

// `adprof run --torch --no-report -o TRACE -- python3 ARGS...` in `dir`.
Result run_torch(const std::string &trace, std::vector<std::string> python_args,
                 std::vector<std::pair<std::string, std::string>> env = {},
                 double timeout_s = 600) {
  SpawnOptions o;
  o.argv = {cli_path(), "run", "--torch", "--no-report", "-o", trace, "--", kPython};
  o.argv.insert(o.argv.end(), python_args.begin(), python_args.end());
  o.env = std::move(env);
  o.env.emplace_back("PYTHONDONTWRITEBYTECODE", "1");
  o.timeout_s = timeout_s;
  return run(o);
}

// `python3 ARGS...` alone: what the program does without adprof.
Result run_alone(std::vector<std::string> python_args) {
  SpawnOptions o;
  o.argv = {kPython};
  o.argv.insert(o.argv.end(), python_args.begin(), python_args.end());
  return run(o);
}

struct Exactness {
  json report;
  json expected;  // the oracle's account at the peak
  std::string peak_line;
  uint64_t peak_op = 0;
};

Exactness run_exactness(const std::string &script) {
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace", side = tmp / "views.json";
  Result r = run_torch(trace, {kScripts + "/" + script, side});
  Exactness x;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return x;
  x.report = report_of(trace);
  const json views = json::parse(read_file(side), nullptr, false);
  EXPECT_FALSE(views.is_discarded()) << "no oracle views in " << side;
  if (views.is_discarded() || x.report.is_discarded()) return x;
  const PeakPlace place = op_open_at(trace, x.report["peak"]["event"].get<uint64_t>());
  x.peak_line = place.line;
  // Inside an op: PyTorch's account before it (what the op made so far is in the oracle's
  // adjoint). Between two ops (PyTorch 2.x: a small allocation of Python's or of autograd's
  // engine, foreign, can top the plateau the last op left): the account right after the op
  // that ended last on the thread.
  const char *which = place.open ? "views" : "after";
  x.peak_op = place.open ? place.open : place.ended_last;
  EXPECT_NE(x.peak_op, 0u) << "the peak is before every op: " << x.peak_line;
  if (place.open && place.state_stores) {
    // An optimizer step run as one scope: the account after the tensors it stored so far.
    const json &stores = views["stores"][std::to_string(x.peak_op)];
    EXPECT_GE(stores.size(), place.state_stores)
        << "the oracle saw fewer stores in op #" << x.peak_op << ": " << x.peak_line;
    if (stores.size() >= place.state_stores) x.expected = stores[place.state_stores - 1];
    return x;
  }
  auto it = views[which].find(std::to_string(x.peak_op));
  EXPECT_NE(it, views[which].end())
      << "the oracle has no account (" << which << ") for op #" << x.peak_op << " (the peak is in "
      << x.report["peak"]["phase"] << ", where the oracle does not look): " << x.peak_line;
  if (it != views[which].end()) x.expected = *it;
  return x;
}

void expect_roles_exact(const Exactness &x) {
  if (x.expected.is_null()) return;
  const json &by_role = x.report["peak"]["by_role"];
  for (const char *role : {"parameter", "optimizer_state", "forward_cache", "adjoint"})
    EXPECT_EQ(by_role[role].get<uint64_t>(), x.expected[role].get<uint64_t>())
        << role << " at the peak (op #" << x.peak_op << ", " << x.report["peak"]["phase"]
        << "): adprof says " << by_role[role] << ", PyTorch " << x.expected[role];
}

// An MLP with Adam: the peak is in the first optimizer step (Adam's state is made while every
// gradient is alive), and each role there is what PyTorch holds.
TEST(TorchExactness, MlpWithAdam) {
  SKIP_WITHOUT_TORCH();
  Exactness x = run_exactness("exact_mlp.py");
  if (x.report.is_null()) return;
  EXPECT_EQ(x.report["engine"]["name"], "pytorch");
  EXPECT_EQ(x.report["peak"]["phase"], "optimizer") << "the script is meant to peak in Adam's "
                                                       "first step";
  expect_roles_exact(x);
  // 3 linear layers: 256*512 + 512 + 512*512 + 512 + 512*10 + 10 floats
  const uint64_t params = 4ull * (256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  EXPECT_EQ(x.report["peak"]["by_role"]["parameter"].get<uint64_t>(), params);
  EXPECT_EQ(x.report["steps"].size(), 3u);
}

// Embedding, layer norm, MLP head, Adam; activation-heavy: the peak is in a backward pass,
// with forward caches alive and gradients in flight.
TEST(TorchExactness, EmbeddingLayerNorm) {
  SKIP_WITHOUT_TORCH();
  Exactness x = run_exactness("exact_embedding.py");
  if (x.report.is_null()) return;
  EXPECT_EQ(x.report["peak"]["phase"], "backward") << "the script is meant to peak in backward";
  expect_roles_exact(x);
  EXPECT_GT(x.report["peak"]["by_role"]["forward_cache"].get<uint64_t>(), 0u);
  EXPECT_GT(x.report["peak"]["by_role"]["adjoint"].get<uint64_t>(), 0u);
}

// The program's report names modules, phases, steps and the widened index.
TEST(TorchRecording, ModulePathsPhasesAndDuplicates) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace", side = tmp / "views.json";
  Result r = run_torch(trace, {kScripts + "/exact_embedding.py", side});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result dump = run_cli({"dump", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0);
  for (const char *text : {"op_begin  aten::addmm#", "op_begin  aten::native_layer_norm#",
                           "op_begin  aten::embedding_dense_backward#", "phase     forward",
                           "phase     backward", "phase     optimizer", "-> forward_cache",
                           "-> duplicate source=0x", "-> optimizer_state", "-> input"})
    EXPECT_NE(dump.out.find(text), std::string::npos) << "no '" << text << "' in the trace";
  // (the root is named after the model's class, TokenModel)
  for (const char *name :
       {"tokenmodel.mlp.0", "tokenmodel.norm.weight", "tokenmodel.embed.weight.exp_avg",
        "tokenmodel.head.weight.grad", "ad.index_widened", "pytorch"})
    EXPECT_NE(dump.out.find(std::string("\"") + name + "\""), std::string::npos)
        << "name '" << name << "' never interned";
  // Gradients in flight are named by the module whose forward made the node computing them
  // (the script peaks in backward, with the head's input gradient and the MLP's alive).
  const json report = report_of(trace);
  std::set<std::string> adjoint_modules;
  for (const json &row : report["peak"]["by_label"])
    if (row["role"] == "adjoint") {
      const std::string label = row["label"];
      if (label.rfind("tokenmodel", 0) == 0 && label.find(".grad") == std::string::npos)
        adjoint_modules.insert(label);
    }
  EXPECT_FALSE(adjoint_modules.empty())
      << "no adjoint named by module at the peak: " << report["peak"]["by_label"].dump();
  EXPECT_TRUE(adjoint_modules.count("tokenmodel.mlp.2")) << report["peak"]["by_label"].dump();
}

// Each gradient is labelled with the module whose forward made the autograd node computing it:
// the child's Linear, the child's own multiply, the parent's Linear; the parent's own exp, which
// reaches the child by keyword, is the parent's where PyTorch numbers its nodes (2.x); 1.13 has
// no sequence numbers and labels it the child's (docs/PYTORCH.md). The root, a local of main(),
// is named after its class.
TEST(TorchRecording, GradientLabelsNameTheModuleThatMadeTheNode) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  Result r = run_torch(tmp / "run.adtrace", {kScripts + "/backward_labels.py"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::pair<std::string, std::string>> ops;  // (op, label) in backward's order
  bool numbered = false;
  for (const std::string &line : lines_of(r.out)) {
    if (line.rfind("sequence numbers: ", 0) == 0) {
      numbered = line == "sequence numbers: yes";
      continue;
    }
    std::istringstream fields(line);
    std::string op, label;
    if (fields >> op >> label) ops.emplace_back(op, label);
  }
  ASSERT_EQ(ops.size(), 8u) << r.out;
  EXPECT_EQ(ops[0].second, "-") << "the seed (ones_like) is no module's: " << r.out;
  EXPECT_EQ(ops[1], std::make_pair(std::string("aten::mul.Tensor"), std::string("parent.child")));
  EXPECT_EQ(ops[2], std::make_pair(std::string("aten::mul.Tensor"), std::string("parent.child")));
  EXPECT_EQ(ops[3], std::make_pair(std::string("aten::mm"), std::string("parent.child.fc")));
  EXPECT_EQ(ops[4].second, "parent.child.fc");
  EXPECT_EQ(ops[5].first, "aten::mul.Tensor") << "exp's backward";
  EXPECT_EQ(ops[5].second, numbered ? "parent" : "parent.child") << r.out;
  EXPECT_EQ(ops[6], std::make_pair(std::string("aten::mm"), std::string("parent.pre")));
  EXPECT_EQ(ops[7].second, "parent.pre");
}

// Inside the program's own saved-tensor hooks (save_on_cpu) adprof's are not called: what the
// program's pack hook keeps is the forward cache, until autograd drops it (back to activation,
// or freed with it).
TEST(TorchRecording, ProgramSavedTensorHooksKeepForwardCaches) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/save_on_cpu.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result dump = run_cli({"dump", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0);
  std::map<std::string, int> cached;  // address -> forward_cache retags not yet undone
  int retags = 0;
  for (const std::string &line : lines_of(dump.out)) {
    std::istringstream fields(line);
    std::string time, thread, type, addr, arrow, role;
    fields >> time >> thread >> type >> addr >> arrow >> role;
    if (type == "free" && cached.count(arrow)) {  // "free heap ADDR": freed as a cache
      cached[arrow] = 0;
      continue;
    }
    if (type != "retag") continue;
    if (role == "forward_cache") {
      ++retags;
      ++cached[addr];
    } else if (role == "activation" && cached[addr] > 0) {
      --cached[addr];
    }
  }
  // the two ReLU outputs and the last Linear's output
  EXPECT_EQ(retags, 3) << "forward caches kept by save_on_cpu's pack hook";
  for (const auto &[addr, n] : cached) EXPECT_EQ(n, 0) << addr << " a cache to the end";
}

// A program's own TorchDispatchMode still sees its ops (adprof's mode stays under it), and a
// thread the program starts is instrumented too (its backward is recorded as such).
TEST(TorchRecording, UserModesAndThreads) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/modes_threads.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result p = run_alone({kScripts + "/modes_threads.py"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(r.out, p.out) << "the program's mode sees other ops under adprof";
  Result dump = run_cli({"dump", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0);
  std::set<std::string> backward_threads, pow_threads;
  std::istringstream lines(dump.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string time, thread, type, value;
    fields >> time >> thread >> type >> value;
    if (type == "phase" && value == "backward") backward_threads.insert(thread);
    if (type == "op_begin" && value.rfind("aten::pow", 0) == 0) pow_threads.insert(thread);
  }
  EXPECT_EQ(backward_threads.size(), 2u) << "backward recorded on the main thread and the "
                                            "trainer thread";
  EXPECT_EQ(pow_threads.size(), 1u) << "the trainer thread's own op";
  EXPECT_EQ(
      pow_threads.count(*backward_threads.rbegin()) + pow_threads.count(*backward_threads.begin()),
      1u);
}

// Checkpointing's forward, run again inside backward (non-reentrant: saved_tensors_hooks;
// reentrant: the modules' forward), is forward work: no aten::relu (only forward runs it) in
// phase backward, and what the recomputation saves becomes forward_cache there. One SGD per
// parameter, stepped from the gradient hooks (2.x) or one after the other: one adprof step per
// training step. The loss is scaled by a Python number (1.13: its saved "wrapped number" made
// the mode fail the engine's detach).
TEST(TorchRecording, CheckpointRecomputationAndPerParameterOptimizers) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/checkpoint_steps.py", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << r.err;
  Result dump = run_cli({"dump", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0);
  std::map<std::string, std::string> phase;   // thread -> phase
  std::map<std::string, bool> backward_seen;  // thread -> a backward began this step
  int relu_forward = 0, relu_backward = 0, recomputed_saves = 0, forward_saves = 0;
  std::vector<std::string> steps;
  for (const std::string &line : lines_of(dump.out)) {
    std::istringstream fields(line);
    std::string time, thread, type, value, arrow, role;
    fields >> time >> thread >> type >> value;
    if (type == "phase") {
      phase[thread] = value;
      if (value == "backward") backward_seen[thread] = true;
    } else if (type == "step") {
      fields >> value;
      steps.push_back(value);
      backward_seen.clear();
    } else if (type == "op_begin" && value.rfind("aten::relu#", 0) == 0) {
      if (phase[thread] == "backward") ++relu_backward;
      if (phase[thread] == "forward") ++relu_forward;
    } else if (type == "retag" && (fields >> arrow >> role) && role == "forward_cache") {
      if (phase[thread] == "forward")
        (backward_seen[thread] ? recomputed_saves : forward_saves) += 1;
    }
  }
  // A step: seg1's two ReLUs in forward (seg2's first forward runs under no_grad: phase other),
  // seg1's two and seg2's one again in backward.
  EXPECT_EQ(relu_backward, 0) << "a recomputed forward recorded as backward";
  EXPECT_EQ(relu_forward, 3 * 5);
  EXPECT_GT(recomputed_saves, 0) << "what the recomputation saved is not forward_cache";
  EXPECT_GT(forward_saves, 0);
  EXPECT_EQ(steps, (std::vector<std::string>{"0", "1", "2"}))
      << "one step per training step, not per optimizer";
}

// A tape listener that raises never reaches the program: one line, and training goes on.
// torch.utils.checkpoint reads and deletes attributes of the pack hook it pushed (2.x:
// `_user_hooks`), walks autograd's stack of hooks for `_checkpoint_internal`, and nests; the
// instrumentation stands in for the program's pack hooks to see what they keep. The program
// must not notice: the same lines (gradients bit for bit) with and without adprof, on 1.13 and
// on the newest 2.x. (PyTorch 2.15: AttributeError '_user_hooks' in checkpoint's __exit__.)
TEST(TorchRecording, CheckpointingLeavesTheProgramAsItIs) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  Result alone = run_alone({kScripts + "/checkpoint_hooks.py"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(lines_of(alone.out).size(), 6u) << alone.out;
  for (const std::string &line : lines_of(alone.out))
    EXPECT_NE(line.find(": same gradients"), std::string::npos) << line;
  Result r = run_torch(tmp / "run.adtrace", {kScripts + "/checkpoint_hooks.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, alone.out) << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
}

// An int32 index widened by .long() and saved by the embedding for its backward: at the peak
// it is a forward cache, and still an i64 copy of its int32 source, which the report names as
// a duplicate with PyTorch's own fix (before, only "forward cache labelled ad.index_widened").
TEST(TorchRecording, WidenedIndexSavedForBackwardIsADuplicate) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/widened_index.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = report_of(trace);
  ASSERT_FALSE(report.is_discarded());
  bool named = false;
  for (const json &f : report["findings"]) {
    if (f["kind"] != "duplicate") continue;
    const std::string message = f["message"], fix = f["fix"];
    // (the root is named after its class, Net)
    named = message.find("i64 copy of net.input") != std::string::npos;
    EXPECT_NE(message.find("kept for the backward pass"), std::string::npos) << message;
    EXPECT_EQ(f["bytes"].get<uint64_t>(), 4096u * 8 * 8) << message;
    EXPECT_EQ(fix.rfind("pytorch: pass the int32 index as it is", 0), 0u) << fix;
  }
  EXPECT_TRUE(named) << "no finding names the widened index: " << report["findings"];
  Result text = run_cli({"report", trace}, 300);
  EXPECT_NE(text.out.find("duplicate - i64 copy of net.input"), std::string::npos) << text.out;
}

// torch.compile under adprof compiles as it does alone (a dispatch mode that does not ignore
// compile internals made dynamo skip compiling: eager losses), its module hooks break no graph,
// PyTorch does not warn about adprof's global hooks, and the labels are the model's own paths
// ("sequential.0.up": the root named after its class, not the wrapper's
// "cmodel._orig_mod.0.up"). An optimizer step compiled as a whole computes as it does alone too:
// adprof's step hooks, which it calls, run outside dynamo's tracing (before, their graph breaks
// changed its last bits and dynamo recompiled _state_tensor until its limit, with warnings),
// and the ops of compilation's fake tensors are no internal error; so does a whole training
// step compiled, and dynamo compiles no frame of adprof's (before, the gradient hooks and the
// optimizer state's stores that the step's eager backward and step ran were compiled for each
// parameter up to dynamo's recompile limit, with warnings naming adprof's files). Each
// compilation is an op scope of its own. PyTorch 2.x only.
TEST(TorchRecording, CompiledModelIsCompiledAndLabelledWithItsOwnPaths) {
  SKIP_WITHOUT_TORCH();
  SpawnOptions plain;
  plain.argv = {kPython, kScripts + "/compiled.py"};
  plain.timeout_s = 600;
  Result alone = run(plain);
  if (alone.exited && alone.exit_code == 3) GTEST_SKIP() << "no torch.compile in this PyTorch";
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/compiled.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, alone.out) << "the compiled program computed differently under adprof";
  EXPECT_EQ(r.err.find("global hooks"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("adprof.torch:"), std::string::npos) << "an internal error: " << r.err;
  EXPECT_EQ(r.err.find("adprof/torch/_"), std::string::npos) << "dynamo traced adprof: " << r.err;
  Result dump = run_cli({"dump", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0);
  EXPECT_NE(dump.out.find("\"sequential.0.up.weight\""), std::string::npos)
      << "the parameters are not labelled with the model's paths";
  EXPECT_EQ(dump.out.find("_orig_mod"), std::string::npos) << "the wrapper's path in a label";
  const json report = report_of(trace);
  EXPECT_EQ(report["peak"]["by_role"]["parameter"].get<uint64_t>(),
            2u * 4 * (32 * 128 + 128 + 128 * 32 + 32))
      << "every parameter adopted";
  // Each compilation is an op scope of its own, "torch.compile": what dynamo and inductor
  // allocate is not the op's that runs when they compile (before, the compiled steps' scopes
  // held it: SGD.step allocated 402 MB in 3 steps of this 33K-parameter model, Adam.step 67 MB).
  uint64_t compiled_bytes = 0;
  for (const json &op : report["ops"]) {
    const std::string name = op["name"].get<std::string>();
    if (name == "torch.compile") compiled_bytes = op["bytes"].get<uint64_t>();
    if (name.ends_with(".step")) {
      EXPECT_LT(op["bytes"].get<uint64_t>(), 16u << 20) << name << " holds a compilation";
    }
  }
  EXPECT_GT(compiled_bytes, 64u << 20) << "no compilation of its own";
}

TEST(TorchRecording, FailingListenerNeverRaisesIntoTheProgram) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "listener.py",
             "import torch, adprof.torch\n"
             "class Broken:\n"
             "    def __getattr__(self, name):\n"
             "        def fail(*args):\n"
             "            raise RuntimeError('listener bug')\n"
             "        return fail\n"
             "adprof.torch.instrumentation().listener = Broken()\n"
             "model = torch.nn.Linear(4, 2)\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for _ in range(2):\n"
             "    opt.zero_grad()\n"
             "    model(torch.randn(3, 4)).sum().backward()\n"
             "    opt.step()\n"
             "print('trained')\n");
  Result r = run_torch(tmp / "t.adtrace", {tmp / "listener.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("trained"), std::string::npos);
  EXPECT_NE(r.err.find("adprof.torch: the tape listener failed in"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
}

// The integration imports no module of torch or of any other package that the program does not
// import itself (only adprof's own and the standard library's): on 2.x, TorchDispatchMode's
// wrapper of the mode's __torch_dispatch__ imported torch._dynamo at the first op (with sympy and
// inductor: 2 s and 27 MiB more at the peak of a small program, all of it measured as its own).
TEST(TorchRecording, ImportsNothingTheProgramDoesNot) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "train.py",
             "import sys, torch\n"
             "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(),\n"
             "                            torch.nn.Linear(8, 1))\n"
             "for _ in range(2):  # by hand: torch.optim's step imports torch._dynamo itself\n"
             "    model(torch.randn(4, 8)).sum().backward()\n"
             "    with torch.no_grad():\n"
             "        for p in model.parameters():\n"
             "            p -= 0.1 * p.grad\n"
             "            p.grad = None\n"
             "std = sys.stdlib_module_names\n"
             "with open(sys.argv[1], 'w') as f:\n"
             "    for name in sorted(sys.modules):\n"
             "        top = name.split('.')[0]\n"
             "        if top not in std and top != 'adprof':\n"
             "            f.write(name + '\\n')\n");
  SpawnOptions plain;
  plain.argv = {kPython, tmp / "train.py", tmp / "plain.txt"};
  plain.env = {{"PYTHONDONTWRITEBYTECODE", "1"}};
  Result alone = run(plain);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  Result r = run_torch(tmp / "t.adtrace", {tmp / "train.py", tmp / "recorded.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream plain_names(read_file(tmp / "plain.txt"));
  std::set<std::string> imported_alone;
  for (std::string name; std::getline(plain_names, name);) imported_alone.insert(name);
  ASSERT_GT(imported_alone.count("torch"), 0u) << "the program's modules were not written";
  std::istringstream recorded_names(read_file(tmp / "recorded.txt"));
  std::string added;
  for (std::string name; std::getline(recorded_names, name);)
    if (!imported_alone.count(name)) added += " " + name;
  EXPECT_EQ(added, "") << "imported under adprof only";
}

// An optimizer step on the CPU is one op scope, "<class>.step", without the dispatch mode
// (Adam's ten ops a parameter each paid its round trip); the model run inside a step (LBFGS's
// closure, a forward without one) and a mode the program pushes inside a step are recorded op
// by op; a step that raises ends there; and the program prints what it prints alone (its mode
// sees the same ops).
TEST(TorchRecording, OptimizerStepOnTheCpuIsOneScope) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace";
  Result r = run_torch(trace, {kScripts + "/optimizer_scopes.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result p = run_alone({kScripts + "/optimizer_scopes.py"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(r.out, p.out) << "the program computes or sees other things under adprof";
  Result dump = run_cli({"dump", "--types", "op_begin,op_end,step", trace}, 300);
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  std::map<std::string, int> steps;                          // class -> step scopes
  std::map<std::string, std::multiset<std::string>> inside;  // class -> op scopes in its steps
  std::map<std::string, std::vector<std::string>> open;      // thread -> open scopes
  std::map<std::string, int> marks_after;  // class -> step marks after its first step scope
  std::string stepped;                     // the class of the latest step scope
  std::istringstream lines(dump.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string time, thread, type, label;
    fields >> time >> thread >> type >> label;
    if (type == "step") {
      ++marks_after[stepped];
      continue;
    }
    std::vector<std::string> &stack = open[thread];
    if (type == "op_end") {
      if (!stack.empty()) stack.pop_back();
      continue;
    }
    const std::string name = label.substr(0, label.rfind('#'));
    if (name.ends_with(".step")) ++steps[stepped = name.substr(0, name.size() - 5)];
    for (const std::string &outer : stack)
      if (outer.ends_with(".step")) inside[outer.substr(0, outer.size() - 5)].insert(name);
    stack.push_back(name);
  }
  EXPECT_EQ(steps["Adam"], 2) << "one scope a step";
  EXPECT_EQ(inside["Adam"].size(), 0u) << "no op recorded one by one inside Adam's step";
  EXPECT_EQ(steps["LBFGS"], 0) << "a step with a closure runs op by op";
  EXPECT_EQ(steps["CountedSGD"], 2);
  EXPECT_GT(inside["CountedSGD"].count("aten::clone"), 0u)
      << "the program's mode pushed in the step: ours is back below it, recording";
  EXPECT_EQ(steps["LookAround"], 2);
  EXPECT_EQ(inside["LookAround"].count("aten::addmm"), 4u)
      << "a forward inside the step (2 Linear layers, 2 steps) is recorded op by op";
  // Flaky's second step raises; the program catches it and takes two more (before, on 2.x, the
  // step hooks' post hook never ran: the raised step's scope stayed open over the rest of the
  // run and the later steps were neither steps nor scopes).
  EXPECT_EQ(steps["Flaky"], 4) << "every step a scope, the one that raised too";
  EXPECT_EQ(inside["Flaky"].size(), 0u) << "the step that raised ended there";
  for (const auto &[thread, stack] : open)
    EXPECT_TRUE(stack.empty()) << thread << " ends with " << stack.size() << " scopes open";
  EXPECT_EQ(marks_after["Flaky"], 4) << "each of Flaky's steps marks the next iteration";
}

// The explicit API under a plain `adprof run`: the model named as given, the caller's steps,
// and a step that raises ends there.
TEST(TorchRecording, ExplicitProfileApi) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "explicit.py",
             "import torch, adprof.torch\n"
             "class Flaky(torch.optim.Adam):  # its second step raises\n"
             "    calls = 0\n"
             "    def step(self, closure=None):\n"
             "        Flaky.calls += 1\n"
             "        if Flaky.calls == 2:\n"
             "            raise FloatingPointError('a bad batch')\n"
             "        return super().step(closure)\n"
             "net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),\n"
             "                          torch.nn.Linear(16, 1))\n"
             "opt = Flaky(net.parameters(), lr=0.01)\n"
             "with adprof.torch.profile(net, opt, name='mynet') as prof:\n"
             "    for step in range(3):\n"
             "        prof.step(10 + step)\n"
             "        opt.zero_grad()\n"
             "        net(torch.randn(4, 8)).sum().backward()\n"
             "        try:\n"
             "            opt.step()\n"
             "        except FloatingPointError:\n"
             "            print('a step raised')\n"
             "print('installed after:', adprof.torch.instrumentation())\n");
  SpawnOptions o;
  o.argv = {cli_path(),        "run", "--no-report", "-o",
            tmp / "t.adtrace", "--",  kPython,       tmp / "explicit.py"};
  o.env = {{"PYTHONPATH", kPackage}};
  Result r = run(o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("installed after: None"), std::string::npos) << r.out;
  Result dump = run_cli({"dump", tmp / "t.adtrace"}, 300);
  std::vector<std::string> steps;
  int step_scopes = 0;
  std::map<std::string, int> open;  // thread -> op scopes open
  for (const std::string &line : lines_of(dump.out)) {
    std::istringstream fields(line);
    std::string time, thread, type, kind, value;
    fields >> time >> thread >> type >> kind >> value;
    if (type == "step") steps.push_back(value);
    if (type == "op_begin") {
      ++open[thread];
      if (kind.starts_with("Flaky.step#")) ++step_scopes;
    }
    if (type == "op_end") --open[thread];
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"10", "11", "12"}));
  // The optimizer's class was hooked by PyTorch before profile() installed adprof: a step that
  // raises ends there all the same (before, on 2.x, its scope stayed open until profile()
  // ended and the third step was no step: 2 scopes).
  EXPECT_EQ(step_scopes, 3);
  for (const auto &[thread, depth] : open)
    EXPECT_EQ(depth, 0) << thread << " ends with op scopes open";
  for (const char *name : {"mynet.0.weight", "mynet.2.bias.exp_avg", "mynet.0.weight.grad"})
    EXPECT_NE(dump.out.find(std::string("\"") + name + "\""), std::string::npos) << name;
}

// A script that raises: its traceback (from its own frames) and status 1, as plain python; the
// trace is complete.
TEST(TorchBadInput, ScriptRaises) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "raises.py",
             "import torch\ndef f():\n    raise ValueError('boom')\nprint('before')\nf()\n");
  Result r = run_torch(tmp / "t.adtrace", {tmp / "raises.py"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("before"), std::string::npos);
  EXPECT_NE(r.err.find("Traceback (most recent call last):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 5, in <module>"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ValueError: boom"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("runpy"), std::string::npos) << "frames that are not the script's:\n"
                                                    << r.err;
  EXPECT_EQ(r.err.find("adprof/torch"), std::string::npos) << r.err;
  json j = report_of(tmp / "t.adtrace");
  EXPECT_EQ(j["trace"]["complete"], true);
}

// sys.exit(N) is the program's status.
TEST(TorchBadInput, ExitStatusPassesThrough) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "exits.py", "import sys\nsys.exit(7)\n");
  Result r = run_torch(tmp / "t.adtrace", {tmp / "exits.py", "a"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 7) << r.err;
}

// Not Python: the SyntaxError python3 prints (no traceback) and its status.
TEST(TorchBadInput, NotPython) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "notpython.py", "x = (\n");
  write_file(tmp / "binary.py", std::string("\x7f"
                                            "ELF\x02\x01\x01\0\0\0",
                                            10));
  for (const char *name : {"notpython.py", "binary.py"}) {
    Result p = run_alone({tmp / name});
    Result r = run_torch(tmp / (std::string(name) + ".adtrace"), {tmp / name});
    EXPECT_EQ(r.exit_code, p.exit_code) << name << ": " << r.err;
    EXPECT_EQ(r.exit_code, 1) << name;
    EXPECT_NE(r.err.find("SyntaxError"), std::string::npos) << name << ": " << r.err;
    EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << name << ": " << r.err;
  }
}

// PyTorch missing (python3 -S: no site-packages) or too old (a stand-in torch 1.12 first on
// PYTHONPATH): one clear line, status 1, the script never runs.
TEST(TorchBadInput, TorchMissingOrTooOld) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "script.py", "print('ran')\n");
  Result missing = run_torch(tmp / "a.adtrace", {"-S", tmp / "script.py"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.out.find("ran"), std::string::npos);
  EXPECT_NE(missing.err.find("adprof.torch: PyTorch is not installed\n"), std::string::npos)
      << missing.err;

  fs::create_directories(tmp / "old/torch");
  write_file(tmp / "old/torch/__init__.py", "__version__ = '1.12.1+cpu'\n");
  Result old =
      run_torch(tmp / "b.adtrace", {"-S", tmp / "script.py"}, {{"PYTHONPATH", tmp / "old"}});
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_EQ(old.out.find("ran"), std::string::npos);
  EXPECT_NE(old.err.find("adprof.torch: needs PyTorch >= 1.13 (this is 1.12.1+cpu)\n"),
            std::string::npos)
      << old.err;
}

// --torch needs an interpreter and a script.
TEST(TorchCli, UsageErrors) {
  ADPROF_SKIP_IF_SANITIZED();
  TempDir tmp;
  Result r = run_cli({"run", "--torch", "-o", tmp / "a.adtrace", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--torch needs a Python interpreter"), std::string::npos) << r.err;
  r = run_cli({"run", "--torch", "-o", tmp / "b.adtrace", "--", kPython, "-c", "pass"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not python3 -c"), std::string::npos) << r.err;
  // A mistyped script path: one line, exit 2, nothing run and no report (it was python's
  // error, then a full report of a 0.03 s run).
  r = run_cli({"run", "--torch", "-o", tmp / "c.adtrace", "--", kPython, tmp / "trian.py"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "adprof: error: --torch: no script '" + (tmp / "trian.py") + "' (no such file)\n");
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(fs::exists(tmp / "c.adtrace"));
}

// --torch goes after the interpreter's own options; `python3 -- SCRIPT` and `python3 -m MODULE`
// work as without adprof, instrumented.
TEST(TorchCli, InterpreterOptionsAndModules) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string probe =
      "import sys, adprof.torch\n"
      "print('instrumented', adprof.torch.instrumentation() is not None, sys.argv[1:])\n";
  write_file(tmp / "probe.py", probe);
  fs::create_directories(tmp / "pkg");
  write_file(tmp / "pkg/__init__.py", "");
  write_file(tmp / "pkg/train.py", probe);
  Result r = run_torch(tmp / "a.adtrace", {"-u", "-W", "ignore", "--", tmp / "probe.py", "x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("instrumented True ['x']"), std::string::npos) << r.out << r.err;
  r = run_torch(tmp / "b.adtrace", {"-m", "pkg.train", "y"}, {{"PYTHONPATH", tmp.path()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("instrumented True ['y']"), std::string::npos) << r.out << r.err;
}

// The hook is adprof's whatever the program's directory holds (issue 28, item 4): `-m
// adprof.torch` searched the working directory first, so an adprof.py there made the run fail
// ("Error while finding module specification for 'adprof.torch'", exit 1) and a package
// adprof/ of the user's ran its own torch.py instead of the hook (exit 9).
TEST(TorchCli, TheWorkingDirectoryCannotReplaceTheHook) {
  SKIP_WITHOUT_TORCH();
  for (const bool package : {false, true}) {
    SCOPED_TRACE(package ? "a package adprof/" : "a module adprof.py");
    TempDir work;
    if (package) {
      fs::create_directories(work / "adprof");
      write_file(work / "adprof/__init__.py", "");
      write_file(work / "adprof/torch.py", "raise SystemExit(9)\n");
    } else {
      write_file(work / "adprof.py", "raise SystemExit(9)\n");
    }
    write_file(work / "train.py",
               "import sys, adprof.torch\n"
               "print('instrumented', adprof.torch.instrumentation() is not None)\n");
    const std::string command = "cd '" + work.path() + "' && PYTHONDONTWRITEBYTECODE=1 '" +
                                cli_path() + "' run --torch --no-report -o t.adtrace -- " +
                                kPython + " train.py > out 2> err";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << read_file(work / "err");
    EXPECT_NE(read_file(work / "out").find("instrumented True"), std::string::npos)
        << read_file(work / "out") << read_file(work / "err");
  }
}

// A leak (each step's output kept in a list) is a finding that names the role and the module
// that grows (issue 35, item 3: the peak rose 213.8 -> 281.0 MiB with the same findings).
TEST(TorchRecording, OutputsKeptEveryStepAreAGrowthFinding) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "leak.py",
             "import torch\n"
             "class Net(torch.nn.Module):\n"
             "    def __init__(self):\n"
             "        super().__init__()\n"
             "        self.body = torch.nn.Linear(256, 256)\n"
             "        self.head = torch.nn.Linear(256, 2048)\n"
             "    def forward(self, x):\n"
             "        return self.head(torch.relu(self.body(x)))\n"
             "net = Net()\n"
             "opt = torch.optim.SGD(net.parameters(), lr=0.01)\n"
             "kept = []\n"
             "for step in range(6):\n"
             "    out = net(torch.randn(512, 256))\n"
             "    loss = out.square().mean()\n"
             "    opt.zero_grad()\n"
             "    loss.backward()\n"
             "    opt.step()\n"
             "    kept.append(out.detach())\n");
  Result r = run_torch(tmp / "t.adtrace", {tmp / "leak.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = report_of(tmp / "t.adtrace");
  std::string growth;
  for (const json &f : report["findings"])
    if (f["kind"] == "growth") growth = f["message"].get<std::string>();
  EXPECT_NE(growth.find("memory grows every step"), std::string::npos)
      << report["findings"].dump(1);
  EXPECT_NE(growth.find("head"), std::string::npos) << growth;
}

// Every fix a PyTorch finding prints is code that runs on the recorded script, or says plainly
// what to do by hand (issue 35, item 1: "checkpoint_sequential(net, 2, x) in place of net(x)"
// raised, "early release" was no PyTorch setting). scripts/advice_train.py gives each finding
// PyTorch describes; each printed fix is pasted into a copy of it as its code says (a line
// "X  # in place of Y" replaces Y; other code goes right after the lines that make the
// variables it names), or applied by hand as its words say (the index widening, the growth),
// and the copy runs: the peak it gives is the one predicted (the growth: the peak drops by at
// least what grew). Checkpointing's code is pasted too (CheckpointAdvice, models_test.cpp,
// holds it on the model zoo).
struct Applied {
  std::string what, fix;
  double predicted = 0, measured = 0;
};

// `script` with the printed `code` pasted as the code says.
std::string paste_fix(const std::string &script, const std::string &code) {
  const size_t in_place = code.find("  # in place of ");
  if (in_place != std::string::npos && code.find('\n') == std::string::npos) {
    const std::string replaced = code.substr(in_place + 16);
    const size_t at = script.find(replaced);
    if (at == std::string::npos) return "";
    return script.substr(0, at) + code.substr(0, in_place) + script.substr(at + replaced.size());
  }
  // after the last line that makes a variable the code uses ("model = ...": "model.")
  std::vector<std::string> lines = lines_of(script);
  size_t after = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t eq = lines[i].find(" = ");
    if (eq == std::string::npos || lines[i][0] == ' ' || lines[i][0] == '#') continue;
    if (code.find(lines[i].substr(0, eq) + ".") != std::string::npos) after = i + 1;
  }
  if (after == 0) return "";
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
    if (i + 1 == after) out += code + "\n";
  }
  return out;
}

TEST(TorchAdvice, EveryPrintedFixRunsAndGivesThePredictedPeak) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  const std::string script = read_file(kScripts + "/advice_train.py");
  int runs = 0;
  auto record = [&](const std::string &text, std::vector<std::string> args = {}) {
    const std::string name = "run" + std::to_string(runs++);
    write_file(tmp / (name + ".py"), text);
    args.insert(args.begin(), tmp / (name + ".py"));
    Result r = run_torch(tmp / (name + ".adtrace"), args);
    EXPECT_EQ(r.exit_code, 0) << "this does not run:\n" << text << "\n" << r.err;
    return r.exit_code == 0 ? report_of(tmp / (name + ".adtrace")) : json();
  };
  const json base = record(script);
  ASSERT_TRUE(base.is_object());
  const double peak = base["peak"]["bytes"].get<double>();
  std::map<std::string, double> predicted;
  for (const json &p : base["policy_savings"])
    if (p.contains("predicted_peak")) predicted[p["name"]] = p["predicted_peak"].get<double>();
  const std::string engine = "pytorch: ";
  std::vector<Applied> applied;
  std::set<std::string> kinds;
  for (const json &f : base["findings"]) {
    const std::string kind = f["kind"], fix = f["fix"];
    kinds.insert(kind);
    SCOPED_TRACE(kind + ": " + fix);
    // (forward_caches: checkpointing's code again; growth: below; details: nothing to do)
    if (kind == "forward_caches" || kind == "growth" || f.value("detail", false)) continue;
    ASSERT_EQ(fix.rfind(engine, 0), 0u) << "not in PyTorch's words";
    const std::string code = fix.substr(engine.size());
    Applied a{kind, fix};
    std::string fixed;
    if (kind == "duplicate") {  // by hand: the words say what to drop
      EXPECT_NE(code.find("without .long()"), std::string::npos);
      const std::string widened = "self.embed(ids.long())";
      ASSERT_NE(script.find(widened), std::string::npos);
      fixed = script;
      fixed.replace(fixed.find(widened), widened.size(), "self.embed(ids)");
      a.predicted = predicted["no_index_widening"];
    } else {
      ASSERT_EQ(kind.rfind("policy.", 0), 0u) << "a finding this test does not know";
      fixed = paste_fix(script, code);
      ASSERT_FALSE(fixed.empty()) << "the code names nothing of the script to paste it after";
      a.predicted = predicted[kind.substr(7)];
    }
    const json after = record(fixed);
    if (!after.is_object()) continue;
    a.measured = after["peak"]["bytes"].get<double>();
    applied.push_back(a);
  }
  for (const char *kind :
       {"policy.free_gradients", "policy.fused_optimizer", "policy.checkpointing", "duplicate"})
    EXPECT_TRUE(kinds.count(kind)) << "no " << kind << " finding: " << base["findings"].dump(1);
  for (const Applied &a : applied) {
    std::printf("[ advice   ] %s: peak %.1f MiB, predicted %.1f MiB, measured %.1f MiB\n",
                a.what.c_str(), peak / 1048576, a.predicted / 1048576, a.measured / 1048576);
    // within a quarter of the predicted saving, or 1% of the peak
    const double slack = std::max(0.25 * (peak - a.predicted), 0.01 * peak);
    EXPECT_NEAR(a.measured, a.predicted, slack) << a.what << " with " << a.fix;
    EXPECT_LT(a.measured, peak) << a.what << " saved nothing";
  }
  // The growth: each step's output kept in a list. Its words say to drop the reference: the
  // script as it is, which does.
  const json leak = record(script, {"--leak", "--steps", "5"});  // 3 increments after step 1
  ASSERT_TRUE(leak.is_object());
  std::string growth_fix;
  uint64_t grew = 0;
  for (const json &f : leak["findings"])
    if (f["kind"] == "growth") {
      growth_fix = f["fix"].get<std::string>();
      grew = f["bytes"].get<uint64_t>();
    }
  EXPECT_NE(growth_fix.find("or drop the reference"), std::string::npos)
      << leak["findings"].dump(1);
  for (const json &f : base["findings"]) EXPECT_NE(f["kind"], "growth") << f.dump();
  // (the plain run's peak is in its second step, and every step's is the same)
  EXPECT_GE(leak["peak"]["bytes"].get<double>() - peak, static_cast<double>(grew))
      << "the peak did not drop by what grew";
}

// Labels are module paths from the model's root whatever the script does around the model:
// naming its variable otherwise, wrapping it in DataParallel or torch.compile, or calling its
// layers on their own through checkpoint in the loop (issue 35, item 2: `net.lstm` became
// `lstm`, renaming `net` to `model` renamed every label, and `diff` listed every parameter
// twice). The root is named after the model's class; `diff` against the plain run shows no
// label under another name.
TEST(TorchRecording, LabelsSurviveRenamingWrappingAndCheckpointing) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  auto script = [](const std::string &var, const std::string &forward) {
    return "import torch, torch.utils.checkpoint\n"
           "class Net(torch.nn.Module):\n"
           "    def __init__(self):\n"
           "        super().__init__()\n"
           "        self.body = torch.nn.Linear(1024, 1024)\n"
           "        self.head = torch.nn.Linear(1024, 1024)\n"
           "    def forward(self, x):\n"
           "        return self.head(torch.relu(self.body(x)))\n"
           "torch.manual_seed(0)\n" +
           var + " = Net()\n" + "opt = torch.optim.SGD(" + var +
           ".parameters(), lr=0.01)\n"
           "wrapped = torch.nn.DataParallel(" +
           var +
           ")\n"
           // torch.compile where this PyTorch has it (2.x); 1.13 runs the model as it is
           "compiled = torch.compile(" +
           var + ") if hasattr(torch, 'compile') else " + var +
           "\n"
           "for step in range(3):\n"
           "    x = torch.randn(32, 1024, requires_grad=True)\n"
           "    " +
           forward +
           "\n"
           "    out.square().mean().backward()\n"
           "    opt.step()\n"
           "    opt.zero_grad()\n";
  };
  const std::map<std::string, std::string> scripts = {
      {"plain", script("net", "out = net(x)")},
      {"renamed", script("model", "out = model(x)")},
      {"parallel", script("net", "out = wrapped(x)")},
      {"compiled", script("net", "out = compiled(x)")},
      {"checkpointed",
       script("model",
              "out = model.head(torch.relu(torch.utils.checkpoint.checkpoint(model.body, x, "
              "use_reentrant=False)))")}};
  std::map<std::string, std::set<std::string>> labels;
  for (const auto &[name, text] : scripts) {
    write_file(tmp / (name + ".py"), text);
    Result r = run_torch(tmp / (name + ".adtrace"), {tmp / (name + ".py")});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const json report = report_of(tmp / (name + ".adtrace"));
    for (const json &l : report["peak"]["by_label"])
      if (l["role"] == "parameter") labels[name].insert(l["label"].get<std::string>());
  }
  const std::set<std::string> expected = {"net.body.bias", "net.body.weight", "net.head.bias",
                                          "net.head.weight"};
  for (const auto &[name, text] : scripts) {
    std::string got;
    for (const std::string &l : labels[name]) got += l + " ";
    EXPECT_EQ(labels[name], expected) << name << ": " << got;
    if (name == "plain") continue;
    // `diff` matches every label: what it lists at one peak only is a role the edit changed
    // (checkpointing drops forward caches), never a label under another root
    Result d = run_cli({"diff", "--json", tmp / "plain.adtrace", tmp / (name + ".adtrace")}, 300);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const json diff = json::parse(d.out, nullptr, false);
    ASSERT_FALSE(diff.is_discarded()) << d.out;
    for (const char *side : {"appeared", "vanished"})
      for (const json &row : diff[side]) {
        const std::string entry = row.get<std::string>();
        if (entry.rfind("op ", 0) == 0 || entry.rfind("site ", 0) == 0) continue;
        const std::string label = entry.substr(entry.find(' ') + 1);
        EXPECT_TRUE(label == "net" || label.rfind("net.", 0) == 0)
            << name << ": " << side << " '" << entry << "' is not under the model's root";
        EXPECT_NE(name, "renamed") << "renaming the variable changed '" << entry << "'";
      }
  }
}

// pyenv's and conda's python3 is a shell script that execs the real interpreter (a shim):
// `adprof run --torch -- python3 train.py` profiles the interpreter the shim runs and says
// which; the shim's shell is not traced (one image, no TRACE.1).
TEST(TorchCli, PythonShimScriptIsResolvedToItsInterpreter) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  fs::create_directories(tmp / "shims");
  write_file(tmp / "shims/python3", "#!/bin/sh\nexec '" + kPython + "' \"$@\"\n");
  fs::permissions(tmp / "shims/python3", fs::perms::owner_all);
  write_file(tmp / "train.py",
             "import sys, torch, adprof.torch\n"
             "print('instrumented', adprof.torch.instrumentation() is not None)\n");
  const char *path = getenv("PATH");
  SpawnOptions o;
  o.argv = {cli_path(),        "run", "--torch", "--no-report",   "-o",
            tmp / "t.adtrace", "--",  "python3", tmp / "train.py"};
  o.env = {{"PATH", tmp / "shims" + std::string(":") + (path ? path : "/usr/bin:/bin")},
           {"PYTHONDONTWRITEBYTECODE", "1"}};
  Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("instrumented True"), std::string::npos) << r.out << r.err;
  std::string real = run_python_print_executable();
  EXPECT_NE(r.err.find("is a script (" + (tmp / "shims/python3") +
                       "), not an interpreter; profiling the interpreter it runs: " + real),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp / "t.adtrace.1")) << "the shim's shell was traced: " << r.err;
}

// The ledger that makes CUDA storages device blocks (python/adprof/torch/_device.py) follows
// each storage's life: CPU storages stand in for CUDA ones, so no GPU is needed. PyTorch 1.13
// cannot tell when a storage dies (the ledger is off there): skipped with that message.
TEST(TorchDevice, LedgerFollowsEachStorageLife) {
  SKIP_WITHOUT_TORCH();
  SpawnOptions o;
  o.argv = {kPython, kScripts + "/device_blocks_check.py"};
  o.env = {{"PYTHONPATH", kPackage}};
  Result r = run(o);
  if (r.exit_code == 3) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("device_blocks_check: ok"), std::string::npos) << r.out;
}

// scripts/cuda_roles.py (an MLP trained with Adam on CUDA) under `adprof run`, with the PyTorch
// instrumentation or without: the report's device section, and the script's own figures.
// `skip` says why it could not run here (no GPU); empty when it ran.
struct CudaRolesRun {
  std::string skip;
  json device, expected;
};

CudaRolesRun run_cuda_roles(bool instrumented) {
  TempDir tmp;
  const std::string trace = tmp / "run.adtrace", side = tmp / "cuda.json";
  const std::string script = kScripts + "/cuda_roles.py";
  Result r;
  if (instrumented) {
    r = run_torch(trace, {script, side});
  } else {
    SpawnOptions o;
    o.argv = {cli_path(), "run", "--no-report", "-o", trace, "--", kPython, script, side};
    r = run(o);
  }
  CudaRolesRun run;
  if (r.exit_code == 3) {
    run.skip = "no CUDA device for " + kPython + ": " + r.out;
    return run;
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return run;
  run.device = report_of(trace)["device"];
  run.expected = json::parse(read_file(side), nullptr, false);
  EXPECT_FALSE(run.expected.is_discarded()) << "no figures in " << side;
  EXPECT_TRUE(run.device.is_object()) << "no device section in the report";
  return run;
}

uint64_t u64(const json &j, const char *key) { return j[key].get<uint64_t>(); }

// On a GPU (scripts/gpu-check.sh runs it; skipped here with a message): a CUDA training
// script's device memory by role. Parameters are exact; every declared block is a storage inside
// one of the caching allocator's blocks, so the device peak never exceeds PyTorch's own maximum;
// the allocator's cudaMalloc calls are its segments, reserved and not live (counted once), at
// least as many bytes as PyTorch's own maximum reserved.
TEST(TorchDevice, CudaStoragesByRole) {
  SKIP_WITHOUT_TORCH();
  const CudaRolesRun run = run_cuda_roles(/*instrumented=*/true);
  if (!run.skip.empty()) GTEST_SKIP() << run.skip;
  if (HasFailure()) return;
  const json &device = run.device, &expected = run.expected;
  EXPECT_EQ(u64(device["by_role"], "parameter"), u64(expected, "parameter"));
  EXPECT_GT(u64(device["by_role"], "adjoint"), 0u);
  EXPECT_LE(u64(device, "peak"), u64(expected, "max_allocated"));
  EXPECT_GE(u64(device, "peak"), u64(expected, "parameter") + u64(expected, "optimizer_state"));
  EXPECT_GE(u64(device, "reserved_peak"), u64(expected, "max_reserved"));
  std::printf(
      "[torch cuda] %s: device peak %llu B (torch max allocated %llu), reserved peak %llu B "
      "(torch max reserved %llu)\n",
      expected["torch"].get<std::string>().c_str(),
      static_cast<unsigned long long>(u64(device, "peak")),
      static_cast<unsigned long long>(u64(expected, "max_allocated")),
      static_cast<unsigned long long>(u64(device, "reserved_peak")),
      static_cast<unsigned long long>(u64(expected, "max_reserved")));
}

// On a GPU, without the instrumentation: the interposer alone sees the caching allocator's
// segments (cudaMalloc from PyTorch's CUDA library), as the device memory of the program.
TEST(TorchDevice, CudaSegmentsSeenWithoutInstrumentation) {
  SKIP_WITHOUT_TORCH();
  const CudaRolesRun run = run_cuda_roles(/*instrumented=*/false);
  if (!run.skip.empty()) GTEST_SKIP() << run.skip;
  if (HasFailure()) return;
  EXPECT_GE(u64(run.device, "peak"), u64(run.expected, "max_reserved"));
  EXPECT_EQ(u64(run.device, "reserved_peak"), 0u);  // nobody declared segments
  std::printf("[torch cuda, no instrumentation] device peak %llu B (torch max reserved %llu)\n",
              static_cast<unsigned long long>(u64(run.device, "peak")),
              static_cast<unsigned long long>(u64(run.expected, "max_reserved")));
}

// Not under adprof, the package is inert: the script runs as with plain python.
TEST(TorchInert, PlainPythonRunsTheScript) {
  SKIP_WITHOUT_TORCH();
  TempDir tmp;
  write_file(tmp / "script.py",
             "import sys, torch, adprof\nprint('active', adprof.active(), sys.argv[1:])\n");
  SpawnOptions o;
  o.argv = {kPython, "-m", "adprof.torch", tmp / "script.py", "x", "y"};
  o.env = {{"PYTHONPATH", kPackage}};
  Result r = run(o);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("active False ['x', 'y']"), std::string::npos) << r.out;
}

}  // namespace
