// One object's symbol table, read once and sorted, searched by address in O(log n).
// libdw's dwfl_module_addrname walks the module's whole symbol table on every call: on a
// deep-learning framework's library (hundreds of thousands of symbols) a report of a Python
// program that only imported it, with stacks, ran for more than 18 minutes. The choice of a symbol
// is libdw's (dwfl_module_addrsym.c): the sized symbol that holds the address with the highest
// start (then the stronger binding, then the smaller size); else the nearest sizeless symbol (an
// assembly label) below the address in the address's section, if no sized symbol that starts at or
// below the address extends past the label.
#pragma once

#include <elfutils/libdwfl.h>

#include <cstdint>
#include <vector>

namespace adprof {

class SymbolTable {
 public:
  // Reads `module`'s symbols (.symtab, else .dynsym, and a separate debug file's or the
  // MiniDebugInfo's when libdw found one): the names stay owned by libdw's module.
  explicit SymbolTable(Dwfl_Module *module);

  // The symbol's (mangled) name at `addr` (relative to the module's bias), or nullptr.
  const char *name_at(uint64_t addr) const;
  size_t size() const { return sized_.size() + labels_.size(); }

 private:
  struct Symbol {
    uint64_t start = 0, end = 0;  // [start, end); a label's end is its start
    const char *name = nullptr;
    int binding = 0;       // global 3, weak 2, local 1: the stronger wins at the same start
    uint32_t section = 0;  // its section's index
  };
  struct Section {
    uint64_t start = 0, end = 0;
    uint32_t index = 0;
  };
  std::vector<Symbol> sized_;      // by start, then the preferred first (one per start)
  std::vector<uint64_t> max_end_;  // max_end_[i]: the highest end of sized_[0..i]
  std::vector<Symbol> labels_;     // sizeless, by start (one per start)
  std::vector<Section> sections_;  // allocated, by start
};

}  // namespace adprof
