// Whether an interpreter has the packages a suite needs, and their versions, read from the
// installed distributions' metadata (importlib.metadata): nothing is imported. ctest runs each
// test in a process of its own, and each asked by importing torch (2 to 4 s), torch, torchvision
// and transformers (8 s) or JAX: about a sixth of the suite's time went to asking. A distribution
// installed but broken now fails its tests instead of skipping them.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/process.h"

namespace adprof_test {

// The versions of `distributions` (PyPI names) installed for `python`, space-separated in their
// order; "" when any of them is missing or the interpreter does not run.
inline std::string installed_versions(const std::string &python,
                                      const std::vector<std::string> &distributions) {
  SpawnOptions o;
  o.argv = {python, "-c",
            "import sys\n"
            "from importlib import metadata\n"
            "try:\n"
            "    print(' '.join(metadata.version(d) for d in sys.argv[1:]))\n"
            "except metadata.PackageNotFoundError:\n"
            "    pass\n"};
  o.argv.insert(o.argv.end(), distributions.begin(), distributions.end());
  o.timeout_s = 60;
  const Result r = run(o);
  std::string v = r.exited && r.exit_code == 0 ? r.out : "";
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// Said once per test binary: which interpreter, and `what` (e.g. "PyTorch 2.15.0") or `missing`.
inline void say_stack(const char *tag, const std::string &python, const std::string &what,
                      const std::string &missing) {
  std::printf("[ %-8s ] %s: %s\n", tag, python.c_str(),
              what.empty() ? missing.c_str() : what.c_str());
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
