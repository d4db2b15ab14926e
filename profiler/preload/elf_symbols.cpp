// Symbol lookup in a loaded object's dynamic section (elf_symbols.h): the object found in the
// dynamic linker's list of loaded objects (by name: libc, when dlsym is first called, possibly
// while a sanitizer runtime starts: no lock, no call it could intercept) or with dl_iterate_phdr
// (by address: any time), the symbol in its GNU hash table (else the SysV one), its version in
// its version table. Neither allocates nor touches dlerror's state; no libc string function (a
// sanitizer's interceptor could run before its runtime is ready).
#include "elf_symbols.h"

#include <elf.h>
#include <link.h>

#include <cstdint>

namespace adprof::preload {
namespace {

ADPROF_UNINSTRUMENTED bool same(const char *a, const char *b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

ADPROF_UNINSTRUMENTED uint32_t gnu_hash(const char *s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

ADPROF_UNINSTRUMENTED uint32_t sysv_hash(const char *s) {
  uint32_t h = 0;
  for (; *s; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    const uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

ADPROF_UNINSTRUMENTED bool is_library(const char *path, const char *base) {
  if (!path || !*path) return false;
  const char *name = path;
  for (const char *c = path; *c; ++c)
    if (*c == '/') name = c + 1;
  return same(name, base);
}

bool contains(const dl_phdr_info *info, uintptr_t address) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && address >= start && address < start + ph.p_memsz) return true;
  }
  return false;
}

// One object's dynamic tables. The dynamic linker relocates some entries in place (the string
// and symbol tables, the hashes, the version symbols) and not others (the version definitions):
// an address below the load base is still an offset.
class Tables {
 public:
  ADPROF_UNINSTRUMENTED Tables(uintptr_t base, const ElfW(Dyn) * dynamic) : base_(base) {
    if (dynamic) {
      for (const ElfW(Dyn) *d = dynamic; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
          case DT_SYMTAB:
            symtab_ = at<ElfW(Sym)>(d->d_un.d_ptr);
            break;
          case DT_STRTAB:
            strtab_ = at<char>(d->d_un.d_ptr);
            break;
          case DT_GNU_HASH:
            gnu_hash_ = at<uint32_t>(d->d_un.d_ptr);
            break;
          case DT_HASH:
            sysv_hash_ = at<uint32_t>(d->d_un.d_ptr);
            break;
          case DT_VERSYM:
            versym_ = at<ElfW(Half)>(d->d_un.d_ptr);
            break;
          case DT_VERDEF:
            verdef_ = at<ElfW(Verdef)>(d->d_un.d_ptr);
            break;
          default:
            break;
        }
      }
    }
  }

  ADPROF_UNINSTRUMENTED void *find(const char *name, const char *version) const {
    if (!symtab_ || !strtab_) return nullptr;
    if (gnu_hash_) {
      const uint32_t nbuckets = gnu_hash_[0], symoffset = gnu_hash_[1], bloom_size = gnu_hash_[2];
      if (nbuckets == 0) return nullptr;
      const auto *bloom = reinterpret_cast<const ElfW(Addr) *>(gnu_hash_ + 4);
      const auto *buckets = reinterpret_cast<const uint32_t *>(bloom + bloom_size);
      const uint32_t *chain = buckets + nbuckets;
      const uint32_t h = gnu_hash(name);
      uint32_t i = buckets[h % nbuckets];
      if (i < symoffset) return nullptr;
      for (;; ++i) {
        const uint32_t ch = chain[i - symoffset];
        if ((ch | 1) == (h | 1))
          if (void *f = match(i, name, version)) return f;
        if (ch & 1) return nullptr;
      }
    }
    if (sysv_hash_) {
      const uint32_t nbucket = sysv_hash_[0];
      if (nbucket == 0) return nullptr;
      const uint32_t *bucket = sysv_hash_ + 2, *chain = bucket + nbucket;
      for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i != STN_UNDEF; i = chain[i])
        if (void *f = match(i, name, version)) return f;
    }
    return nullptr;
  }

 private:
  template <typename T>
  ADPROF_UNINSTRUMENTED const T *at(ElfW(Addr) p) const {
    return reinterpret_cast<const T *>(p < base_ ? p + base_ : p);
  }

  ADPROF_UNINSTRUMENTED void *match(uint32_t i, const char *name, const char *version) const {
    const ElfW(Sym) &s = symtab_[i];
    const unsigned type = ELF64_ST_TYPE(s.st_info);
    if (s.st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_OBJECT)) return nullptr;
    if (!same(strtab_ + s.st_name, name)) return nullptr;
    if (!versions_match(i, version)) return nullptr;
    return reinterpret_cast<void *>(base_ + s.st_value);
  }

  ADPROF_UNINSTRUMENTED bool versions_match(uint32_t i, const char *version) const {
    if (!versym_) return version == nullptr;
    const ElfW(Half) v = versym_[i];
    if (!version) return (v & 0x8000) == 0;  // the default version: not hidden
    if (!verdef_) return false;
    const ElfW(Half) index = v & 0x7fff;
    for (const ElfW(Verdef) *d = verdef_;; d = reinterpret_cast<const ElfW(Verdef) *>(
                                               reinterpret_cast<const char *>(d) + d->vd_next)) {
      if (d->vd_ndx == index) {
        const auto *aux =
            reinterpret_cast<const ElfW(Verdaux) *>(reinterpret_cast<const char *>(d) + d->vd_aux);
        return same(strtab_ + aux->vda_name, version);
      }
      if (d->vd_next == 0) return false;
    }
  }

  uintptr_t base_;
  const ElfW(Sym) *symtab_ = nullptr;
  const char *strtab_ = nullptr;
  const uint32_t *gnu_hash_ = nullptr;
  const uint32_t *sysv_hash_ = nullptr;
  const ElfW(Half) *versym_ = nullptr;
  const ElfW(Verdef) *verdef_ = nullptr;
};

struct ByAddress {
  uintptr_t address;
  const char *name;
  void *found;
};

int visit(dl_phdr_info *info, size_t, void *data) {
  auto &q = *static_cast<ByAddress *>(data);
  if (!contains(info, q.address)) return 0;
  const ElfW(Dyn) *dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dynamic = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  q.found = Tables(info->dlpi_addr, dynamic).find(q.name, nullptr);
  return 1;  // the object is found: stop
}

}  // namespace

ADPROF_UNINSTRUMENTED void *symbol_of_library(const char *library, const char *name,
                                              const char *version) {
  // Objects are appended to this list and libc is never unloaded: a walk without the lock finds
  // it, even while another thread loads a library.
  for (const link_map *m = _r_debug.r_map; m; m = m->l_next)
    if (is_library(m->l_name, library)) return Tables(m->l_addr, m->l_ld).find(name, version);
  return nullptr;
}

void *symbol_of_object_at(const void *address, const char *name) {
  if (!address) return nullptr;
  ByAddress q{reinterpret_cast<uintptr_t>(address), name, nullptr};
  dl_iterate_phdr(visit, &q);
  return q.found;
}

}  // namespace adprof::preload
