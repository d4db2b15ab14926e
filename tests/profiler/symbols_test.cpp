// Symbol lookups (call_stacks.cpp, symbol_table.h): at libtorch's scale (200,000 symbols, no
// debug information) symbolising costs per distinct frame, not per frame times symbols; and
// the sorted table names every address as libdw's own (linear) lookup does.
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <gtest/gtest.h>
#include <link.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../../profiler/analysis/read/symbol_table.h"
#include "adprof/call_stacks.h"

namespace {

// A kMapping event for an object loaded in this process (its load bias and the extent of its
// segments), as the recorder writes one. The event points into `text` (path '\0' build-id).
adprof::Event mapping_event(const std::string &text, const link_map *map) {
  adprof::Event e;
  e.type = adprof::format::EventType::kMapping;
  e.addr = map->l_addr;
  e.a = UINT64_MAX;
  e.b = 0;
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        auto *ev = static_cast<adprof::Event *>(data);
        if (info->dlpi_addr != ev->addr) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          ev->a = std::min<uint64_t>(ev->a, info->dlpi_addr + ph.p_vaddr);
          ev->b = std::max<uint64_t>(ev->b, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        return 1;
      },
      &e);
  e.set_text(text);
  return e;
}

TEST(Symbols, LookupsCostPerDistinctFrameNotPerSymbol) {
  void *lib = dlopen(ADPROF_TEST_MANY_SYMBOLS, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  link_map *map = nullptr;
  ASSERT_EQ(dlinfo(lib, RTLD_DI_LINKMAP, &map), 0);
  adprof::CallStacks stacks;
  const std::string text = std::string(ADPROF_TEST_MANY_SYMBOLS) + '\0';
  ASSERT_TRUE(stacks.on_event(mapping_event(text, map)));
  // 20,000 stacks, each of a distinct function called from one shared outer frame. libdw's
  // lookup walked the 200,000 symbols for each (about 14 ms a frame: more than 4 minutes).
  constexpr int kStacks = 20000, kStride = 10;
  const void *outer = dlsym(lib, "many_symbols_f199999");
  ASSERT_NE(outer, nullptr);
  for (int k = 0; k < kStacks; ++k) {
    const std::string name = "many_symbols_f" + std::to_string(k * kStride);
    const void *f = dlsym(lib, name.c_str());
    ASSERT_NE(f, nullptr) << name;
    // Return addresses: the symboliser looks up the byte before (inside the call).
    std::vector<uint64_t> frames = {reinterpret_cast<uint64_t>(f) + 1 + k % 15,
                                    reinterpret_cast<uint64_t>(outer) + 8};
    adprof::Event stack;
    stack.type = adprof::format::EventType::kStack;
    stack.a = k + 1;
    stack.set_values(frames);
    ASSERT_TRUE(stacks.on_event(stack));
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string module = std::filesystem::path(ADPROF_TEST_MANY_SYMBOLS).filename();
  for (int k = 0; k < kStacks; ++k) {
    const auto &frames = stacks.frames(k + 1);
    ASSERT_EQ(frames.size(), 2u);
    ASSERT_EQ(frames[0].text(),
              "many_symbols_f" + std::to_string(k * kStride) + " (" + module + ")");
    ASSERT_EQ(frames[1].function, "many_symbols_f199999");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0) << "symbolising 20,000 distinct frames took " << seconds << " s";
  dlclose(lib);
}

// Every address of the objects this test has loaded (the C and C++ runtimes, the test
// library): the sorted table's name is libdw's dwfl_module_addrname's.
TEST(Symbols, TableNamesWhatLibdwNames) {
  void *lib = dlopen(ADPROF_TEST_MANY_SYMBOLS, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        if (path.find("libc.so") != std::string::npos ||
            path.find("libstdc++") != std::string::npos ||
            path.find("libm.so") != std::string::npos)
          static_cast<std::vector<std::string> *>(data)->push_back(path);
        return 0;
      },
      &paths);
  ASSERT_GE(paths.size(), 2u);
  paths.push_back(ADPROF_TEST_MANY_SYMBOLS);
  static const Dwfl_Callbacks callbacks = {dwfl_build_id_find_elf, dwfl_standard_find_debuginfo,
                                           dwfl_offline_section_address, nullptr};
  std::mt19937_64 random(34);
  for (const std::string &path : paths) {
    Dwfl *dwfl = dwfl_begin(&callbacks);
    dwfl_report_begin(dwfl);
    Dwfl_Module *module = dwfl_report_elf(dwfl, "m", path.c_str(), -1, 0, true);
    dwfl_report_end(dwfl, nullptr, nullptr);
    ASSERT_NE(module, nullptr) << path;
    Dwarf_Addr low = 0, high = 0;
    dwfl_module_info(module, nullptr, &low, &high, nullptr, nullptr, nullptr, nullptr);
    const adprof::SymbolTable table(module);
    EXPECT_GT(table.size(), 1000u) << path;
    // libdw's lookup is slow on the test library (200,000 symbols): fewer addresses there.
    const int samples = path == ADPROF_TEST_MANY_SYMBOLS ? 100 : 1500;
    int named = 0;
    for (int i = 0; i < samples; ++i) {
      const uint64_t addr = low + random() % (high - low);
      const char *expected = dwfl_module_addrname(module, addr);
      const char *actual = table.name_at(addr);
      named += expected != nullptr;
      EXPECT_STREQ(actual, expected) << path << " at 0x" << std::hex << addr;
    }
    EXPECT_GT(named, samples / 10) << path;
    dwfl_end(dwfl);
  }
  dlclose(lib);
}

}  // namespace
