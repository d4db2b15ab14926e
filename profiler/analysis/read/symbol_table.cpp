#include "symbol_table.h"

#include <gelf.h>

#include <algorithm>

namespace adprof {

namespace {

// libdw's ranking of bindings (dwfl_module_addrsym.c): a stronger binding wins a tie.
int binding_rank(const GElf_Sym &sym) {
  switch (GELF_ST_BIND(sym.st_info)) {
    case STB_GLOBAL:
      return 3;
    case STB_WEAK:
      return 2;
    case STB_LOCAL:
      return 1;
    default:
      return 0;
  }
}

}  // namespace

SymbolTable::SymbolTable(Dwfl_Module *module) {
  if (!module) return;
  // The object's allocated sections: a label names only addresses of its own section.
  GElf_Addr elf_bias = 0;
  if (Elf *elf = dwfl_module_getelf(module, &elf_bias)) {
    for (Elf_Scn *scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (!gelf_getshdr(scn, &shdr) || !(shdr.sh_flags & SHF_ALLOC) || shdr.sh_size == 0 ||
          (shdr.sh_flags & SHF_TLS))
        continue;
      sections_.push_back({shdr.sh_addr + elf_bias, shdr.sh_addr + elf_bias + shdr.sh_size,
                           static_cast<uint32_t>(elf_ndxscn(scn))});
    }
    std::sort(sections_.begin(), sections_.end(),
              [](const Section &a, const Section &b) { return a.start < b.start; });
  }
  const int count = dwfl_module_getsymtab(module);
  for (int i = 1; i < count; ++i) {  // entry 0 is the null symbol
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    const char *name = dwfl_module_getsym_info(module, i, &sym, &addr, &shndx, nullptr, nullptr);
    if (!name || !*name || sym.st_shndx == SHN_UNDEF) continue;
    const int type = GELF_ST_TYPE(sym.st_info);
    if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) continue;
    Symbol s{addr, addr + sym.st_size, name, binding_rank(sym), shndx};
    if (sym.st_size) {
      sized_.push_back(s);
    } else if (shndx < SHN_LORESERVE) {  // libdw takes an absolute label for its address alone
      labels_.push_back(s);
    }
  }
  // Sized: by start, the preferred first at one start (stronger binding, then smaller size,
  // then the table's order, as libdw keeps the first of equals); several may share a start
  // with different sizes, and each is kept (a larger one may hold an address the smaller does
  // not).
  std::stable_sort(sized_.begin(), sized_.end(), [](const Symbol &a, const Symbol &b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.binding != b.binding) return a.binding > b.binding;
    return a.end < b.end;
  });
  max_end_.resize(sized_.size());
  uint64_t max_end = 0;
  for (size_t i = 0; i < sized_.size(); ++i)
    max_end_[i] = max_end = std::max(max_end, sized_[i].end);
  // Labels: one per start, the strongest binding.
  std::stable_sort(labels_.begin(), labels_.end(), [](const Symbol &a, const Symbol &b) {
    return a.start != b.start ? a.start < b.start : a.binding > b.binding;
  });
  labels_.erase(std::unique(labels_.begin(), labels_.end(),
                            [](const Symbol &a, const Symbol &b) { return a.start == b.start; }),
                labels_.end());
}

const char *SymbolTable::name_at(uint64_t addr) const {
  auto after = [](uint64_t a, const Symbol &s) { return a < s.start; };
  // The sized symbols that start at or below addr: [0, n).
  const size_t n = std::upper_bound(sized_.begin(), sized_.end(), addr, after) - sized_.begin();
  // Walk down from the highest start while an earlier symbol may still hold addr (max_end_):
  // usually one step. The first holder found has the highest start; at the same start the sort
  // put the preferred one first: the first of that start that holds addr.
  for (size_t j = n; j-- > 0 && max_end_[j] > addr;) {
    if (addr >= sized_[j].end) continue;
    for (size_t k = j; k-- > 0 && sized_[k].start == sized_[j].start;)
      if (addr < sized_[k].end) j = k;  // a preferred one at the same start holds it too
    return sized_[j].name;
  }
  // No sized symbol holds addr: the nearest label below it, unless a sized symbol starting at
  // or below addr reaches past the label (the label is then inside that symbol's code).
  const auto label = std::upper_bound(labels_.begin(), labels_.end(), addr, after);
  if (label == labels_.begin()) return nullptr;
  const Symbol &l = *(label - 1);
  if (n > 0 && max_end_[n - 1] > l.start) return nullptr;
  const auto section = std::upper_bound(sections_.begin(), sections_.end(), addr,
                                        [](uint64_t a, const Section &s) { return a < s.start; });
  if (section == sections_.begin() || addr >= (section - 1)->end ||
      (section - 1)->index != l.section)
    return nullptr;
  return l.name;
}

}  // namespace adprof
