// Whether an interpreter has the packages a suite needs, and their versions, read from the
// installed distributions' metadata (importlib.metadata): nothing is imported. ctest runs each
// test in a process of its own, and each asked by importing torch (2 to 4 s), torch, torchvision
// and transformers (8 s) or JAX: about a sixth of the suite's time went to asking. A distribution
// installed but broken now fails its tests instead of skipping them.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../support/process.h"

namespace adprof_test {

// What `python args...` printed on stdout, without its last newline ("" if it failed).
inline std::string python_output(const std::string &python, const std::vector<std::string> &args,
                                 std::vector<std::pair<std::string, std::string>> env = {},
                                 double timeout_s = 60) {
  SpawnOptions o;
  o.argv = {python};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.env = std::move(env);
  o.timeout_s = timeout_s;
  const Result r = run(o);
  std::string v = r.exited && r.exit_code == 0 ? r.out : "";
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// The versions of `distributions` (PyPI names) installed for `python`, space-separated in their
// order; "" when any of them is missing or the interpreter does not run.
inline std::string installed_versions(const std::string &python,
                                      const std::vector<std::string> &distributions) {
  std::vector<std::string> args = {
      "-c",
      "import sys\n"
      "from importlib import metadata\n"
      "try:\n"
      "    print(' '.join(metadata.version(d) for d in sys.argv[1:]))\n"
      "except metadata.PackageNotFoundError:\n"
      "    pass\n"};
  args.insert(args.end(), distributions.begin(), distributions.end());
  return python_output(python, args);
}

// installed_versions, said on a line of its own (once per test binary: its static keeps it):
// "[ TAG ] PYTHON: WHAT VERSIONS", or "[ TAG ] PYTHON: no WHAT".
inline std::string said_versions(const char *tag, const std::string &python,
                                 const std::vector<std::string> &distributions,
                                 const std::string &what) {
  const std::string v = installed_versions(python, distributions);
  std::printf("[ %-8s ] %s: %s\n", tag, python.c_str(),
              (v.empty() ? "no " + what : what + " " + v).c_str());
  return v;
}

// False when this machine has no NVIDIA device node (/dev/nvidia0, /dev/nvidiactl...; WSL's
// /dev/dxg): then no CUDA runtime can find a GPU, and asking one (importing torch or JAX) is not
// needed to say so.
inline bool may_have_cuda_device() {
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 || name == "dxg") return true;
  }
  return false;
}

}  // namespace adprof_test
