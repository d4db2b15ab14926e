// A C++ library for the conformance suite's dlopen program (a C program, which does not link
// libstdc++ itself): new_lib_megabytes does `new char[1 << 20]` twenty times, the small
// reproduction of operator new bypassing the interposer; a static object allocates with new
// when the library is loaded and frees when it is unloaded.
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int kMegabytes = 20;
char *g_megabytes[kMegabytes];

struct Registry {
  std::map<std::string, std::vector<int>> entries;
  Registry() {
    for (int i = 0; i < 50; ++i)
      entries["entry number " + std::to_string(i)] = std::vector<int>(static_cast<size_t>(i) + 1);
  }
};
Registry g_registry;  // constructed in dlopen, destroyed in dlclose

}  // namespace

extern "C" __attribute__((visibility("default"))) int new_lib_megabytes() {
  for (char *&p : g_megabytes) {
    p = new char[1 << 20];
    std::memset(p, 1, 4096);
  }
  return kMegabytes;
}

extern "C" __attribute__((visibility("default"))) void new_lib_release() {
  for (char *&p : g_megabytes) {
    delete[] p;
    p = nullptr;
  }
}

extern "C" __attribute__((visibility("default"))) int new_lib_entries() {
  return static_cast<int>(g_registry.entries.size());
}
