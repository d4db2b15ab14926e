// Device plugins: a device that is not built into adcore (the CUDA device) lives in a shared
// library, libadcore_<kind>.so, loaded with dlopen the first time a program asks for a device of
// that kind. A CPU-only run therefore loads no accelerator library at all (no CUDA runtime, no
// cuBLAS and their start-up cost).
//
// The plugin is built against this adcore and resolves adcore's symbols from the program (which
// exports them: adcore's link options add --export-dynamic to executables). It exports
//   extern "C" const char *adcore_plugin_init(int abi, uint64_t op_table_hash);
// which registers its devices (register_device) and kernels (register_kernel) and returns
// nullptr, or an error message when it was built against another adcore.
//
// Search order for libadcore_<kind>.so: $ADCORE_PLUGIN_DIR when set (only there); else the
// build tree's plugin folder (ADCORE_PLUGIN_BUILD_DIR), the program's folder and ../lib beside
// it, then the dynamic loader's own search (LD_LIBRARY_PATH, rpath, system folders).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "adcore/device.h"

namespace adcore {
namespace {

namespace fs = std::filesystem;

std::string program_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::vector<std::string> candidates(const std::string &file) {
  std::vector<std::string> c;
  if (const char *dir = std::getenv("ADCORE_PLUGIN_DIR"); dir && *dir) {
    c.push_back((fs::path(dir) / file).string());
    return c;
  }
#ifdef ADCORE_PLUGIN_BUILD_DIR
  c.push_back((fs::path(ADCORE_PLUGIN_BUILD_DIR) / file).string());
#endif
  if (const std::string d = program_dir(); !d.empty()) {
    c.push_back((fs::path(d) / file).string());
    c.push_back((fs::path(d) / ".." / "lib" / file).string());
  }
  c.push_back(file);  // the loader's search path
  return c;
}

// Loads and initialises libadcore_<kind>.so; throws with the reason when that fails.
void load(const std::string &kind) {
  const std::string file = "libadcore_" + kind + ".so";
  std::string tried, failure;
  for (const std::string &path : candidates(file)) {
    const bool bare = path == file;
    if (!bare && !fs::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *msg = dlerror();
      const std::string e = msg ? msg : "";
      // From the loader's path, "libadcore_cuda.so: cannot open ..." means not found there; any
      // other error (a missing dependency such as the CUDA runtime) is the reason.
      if (bare && (e.empty() || e.rfind(file + ":", 0) == 0)) {
        tried += (tried.empty() ? "" : ", ") + std::string("the library path");
        break;
      }
      failure = path + ": " + (e.empty() ? std::string("dlopen failed") : e);
      break;
    }
    using Init = const char *(*)(int, uint64_t);
    auto init = reinterpret_cast<Init>(dlsym(h, "adcore_plugin_init"));
    if (!init) {
      failure = path + ": not an adcore plugin (no adcore_plugin_init)";
      break;
    }
    if (const char *err = init(kPluginAbi, kOpTableHash)) {
      failure = path + ": " + err;
      break;
    }
    return;  // the library stays loaded for the life of the process
  }
  if (!failure.empty()) throw std::runtime_error("cannot load the " + kind + " plugin " + failure);
  throw std::runtime_error("the " + kind + " plugin " + file +
                           " is not installed (this build has no " + kind +
                           " device, or set ADCORE_PLUGIN_DIR); looked in: " + tried);
}

// The plugin kind of a device name: "cuda" for "cuda" and "cuda:0"; empty when the name cannot
// name a plugin.
std::string plugin_kind(const std::string &name) {
  const std::string kind = name.substr(0, name.find(':'));
  if (kind.empty()) return {};
  for (char ch : kind)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return {};
  return kind;
}

struct Loaded {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> tried;  // kind, error ("" loaded)
};
Loaded &loaded() {
  static Loaded *l = new Loaded();  // never destroyed: plugins stay loaded until exit
  return *l;
}

}  // namespace

Device &open_device(const char *name) {
  if (Device *d = find_device(name)) {
    if (const std::string why = d->unavailable(); !why.empty())
      throw std::runtime_error(std::string("device '") + name + "': " + why);
    return *d;
  }
  const std::string kind = plugin_kind(name);
  if (kind.empty() || kind == "cpu")
    throw std::runtime_error(std::string("unknown device '") + name + "'");
  Loaded &l = loaded();
  {
    std::lock_guard<std::mutex> lock(l.mu);
    std::string error;
    bool seen = false;
    for (const auto &[k, e] : l.tried)
      if (k == kind) {
        seen = true;
        error = e;
      }
    if (!seen) {
      try {
        load(kind);
      } catch (const std::exception &e) {
        error = e.what();
      }
      l.tried.emplace_back(kind, error);
    }
    if (!error.empty()) throw std::runtime_error(std::string("device '") + name + "': " + error);
  }
  Device *d = find_device(name);
  if (!d)
    throw std::runtime_error(std::string("unknown device '") + name + "' (the " + kind +
                             " plugin does not provide it)");
  if (const std::string why = d->unavailable(); !why.empty())
    throw std::runtime_error(std::string("device '") + name + "': " + why);
  return *d;
}

}  // namespace adcore
