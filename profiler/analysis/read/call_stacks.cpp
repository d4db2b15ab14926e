#include "adprof/call_stacks.h"

#include <absl/container/flat_hash_map.h>
#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
// libiberty.h (included by demangle.h) declares basename() unless told glibc's is declared.
#define HAVE_DECL_BASENAME 1
#include <libiberty/demangle.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string_view>
#include <unordered_map>

#include "symbol_table.h"

namespace adprof {

namespace {

std::string base_name(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A Rust symbol of the legacy scheme: an Itanium-style nested name whose last part is the
// crate's hash, "h" and 16 hex digits (`..._ZN3std2io5stdio6_print17h1a2b3c4d5e6f7a8bE`).
bool legacy_rust_symbol(std::string_view name) {
  constexpr std::string_view kHashPrefix = "17h";
  constexpr size_t kHashDigits = 16;
  constexpr size_t kTail = kHashPrefix.size() + kHashDigits + 1;  // and the closing 'E'
  if (!name.starts_with("_ZN") || !name.ends_with('E') || name.size() < 3 + kTail) return false;
  const std::string_view hash = name.substr(name.size() - kTail, kTail - 1);
  return hash.starts_with(kHashPrefix) &&
         std::all_of(hash.begin() + kHashPrefix.size(), hash.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// A function's name from its DIE (an inlined instance's from its abstract origin): the linkage
// name demangled (C++: with its namespace, class and parameters), else its plain name.
std::string die_name(Dwarf_Die *die) {
  Dwarf_Attribute attr;
  const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (!name) name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (name) return demangle_symbol(name);
  name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
  return name ? name : "";
}

// A source file's path as the compiler named it, made absolute with the compilation's directory
// (a build names its sources relative to its build directory) and normalised.
std::string source_path(const char *file, const char *comp_dir) {
  std::filesystem::path p(file);
  if (p.is_relative() && comp_dir && *comp_dir) p = std::filesystem::path(comp_dir) / p;
  return p.lexically_normal().string();
}

const Dwfl_Callbacks kOfflineCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,  // separate debug info, by build-id too
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

}  // namespace

std::string demangle_symbol(const char *name) {
  const std::string_view view(name);
  if (view.starts_with("_R") || legacy_rust_symbol(view)) {
    if (char *d = cplus_demangle(name, DMGL_RUST | DMGL_PARAMS | DMGL_ANSI)) {
      std::string out(d);
      free(d);
      return out;
    }
    return name;
  }
  int status = 0;
  char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out(d);
  free(d);
  return out;
}

std::string SourceFrame::text() const {
  if (!function.empty() && !file.empty())
    return function + " (" + file + ":" + std::to_string(line) + ")";
  if (!function.empty())
    return module.empty() ? function : function + " (" + base_name(module) + ")";
  char offset_text[32];
  snprintf(offset_text, sizeof offset_text, "0x%" PRIx64, offset);
  return module.empty() ? std::string(offset_text) : base_name(module) + "+" + offset_text;
}

std::string SourceFrame::name() const {
  if (!function.empty()) return function;
  char offset_text[32];
  snprintf(offset_text, sizeof offset_text, "0x%" PRIx64, offset);
  return module.empty() ? std::string(offset_text) : base_name(module) + "+" + offset_text;
}

std::string mapping_path(const Event &e) {
  const std::string_view text = e.text();
  return std::string(text.substr(0, text.find('\0')));
}

std::string mapping_build_id(const Event &e) {
  const std::string_view text = e.text();
  const size_t nul = text.find('\0');
  return nul == std::string_view::npos ? std::string() : std::string(text.substr(nul + 1));
}

struct CallStacks::Impl {
  struct Module {
    std::string path;
    std::string build_id;
    Dwfl *dwfl = nullptr;
    Dwfl_Module *module = nullptr;
    bool opened = false;
    // Its symbol table, read once when a frame first needs it (symbol_table.h): libdw's own
    // lookup walks every symbol on each call.
    std::unique_ptr<SymbolTable> symbols;
    // The symbols' cache: a return address's frames, [first, first + count) in `table`.
    absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> by_offset;
  };
  struct Mapping {
    uint64_t bias, start, end;
    uint32_t module;
    uint64_t loaded_at, unloaded_at;  // in mapping events (an ordinal), [loaded, unloaded)
  };
  struct Stack {
    uint32_t leaf = 0;  // its innermost frame's node (0: no frames)
    uint32_t site = 0;  // its site's node: the innermost Python frame's, else the leaf
    uint32_t count = 0;
    bool defined = false;
    bool resolved = false;    // in `resolved`
    uint64_t defined_at = 0;  // mapping events seen before its definition
  };

  std::vector<Module> modules;
  std::unordered_map<std::string, uint32_t> module_by_key;  // path '\0' build-id
  std::vector<Mapping> mappings;
  uint64_t mapping_events = 0;
  // The stacks by id (dense from 1; an id past kDenseIds, from a damaged trace, in `sparse`),
  // their frames in a tree of return addresses, outermost at the root: a stack shares the outer
  // frames of its thread's previous stack (no lookup: a frame may have several nodes, one per
  // run of stacks that kept it). A Python program importing a deep-learning framework defined
  // 609,000 stacks of 47 frames on average, 28.6 million frames, which are 2.3 million nodes (a
  // vector of frames each cost 650 MB, and more time in the kernel's clearing of pages than the
  // report's reading; docs/PERFORMANCE.md, "Symbols at libtorch's scale").
  static constexpr uint32_t kDenseIds = 1u << 26;
  std::vector<Stack> dense;
  std::unordered_map<uint32_t, Stack> sparse;
  struct Node {
    uint64_t addr;
    uint32_t parent;  // the next outer frame's node; 0 (the root): none
  };
  std::vector<Node> nodes{Node{0, 0}};
  // Each thread's previous stack (its nodes, outermost first): a new stack's outer frames that
  // are the same need no lookup.
  struct Path {
    std::vector<uint32_t> nodes;
    std::vector<uint64_t> addrs;  // the nodes' addresses: compared in a row, not by node
  };
  std::unordered_map<uint32_t, Path> last_path;
  size_t defined = 0;

  // The leaf node of `frames` (innermost first), the stack defined now by `thread`, of which
  // the writer said `shared` outer frames are those of the thread's previous stack (the reader
  // read them from there: they need not be compared again, the frames being another thread's
  // memory, read ahead; the boundary is checked).
  uint32_t insert(uint32_t thread, std::span<const uint64_t> frames, uint64_t shared) {
    Path &path = last_path[thread];
    const size_t n = frames.size();
    const size_t most = std::min(n, path.addrs.size());
    size_t same = 0;
    if (shared > 0 && shared <= most && path.addrs[shared - 1] == frames[n - shared]) same = shared;
    while (same < most && path.addrs[same] == frames[n - 1 - same]) ++same;
    path.nodes.resize(same);
    path.addrs.resize(same);
    uint32_t parent = same ? path.nodes.back() : 0;
    for (size_t i = n - same; i-- > 0;) {
      nodes.push_back({frames[i], parent});
      parent = static_cast<uint32_t>(nodes.size() - 1);
      path.nodes.push_back(parent);
      path.addrs.push_back(frames[i]);
    }
    return parent;
  }
  Stack *stack(uint32_t id) {
    if (id < dense.size()) return dense[id].defined ? &dense[id] : nullptr;
    auto it = sparse.find(id);
    return it == sparse.end() ? nullptr : &it->second;
  }
  Stack &define(uint32_t id) {
    if (id >= kDenseIds) return sparse[id];
    if (id >= dense.size()) dense.resize(std::max<size_t>(id + 1, 2 * dense.size()));
    return dense[id];
  }
  // Every frame symbolised, once (a deque: references stay valid as it grows). A resolved stack
  // is a list of indices into it: a Python program's 12,500 stacks, 50 or more frames deep,
  // held 80 MB as copies of their frames' strings, and hold 2.5 MB as indices.
  std::deque<SourceFrame> table;
  std::unordered_map<uint64_t, uint32_t> unmapped;  // an address no object held -> its frame
  // Python frames (trace_format.h, "Python frames"): the code objects' names by name id
  // (qualified name, file), and each frame value's entry in `table`.
  std::unordered_map<uint64_t, std::pair<std::string, std::string>> python_codes;
  absl::flat_hash_map<uint64_t, uint32_t> python_frames;
  uint32_t python_frame(uint64_t value) {
    auto [it, inserted] = python_frames.try_emplace(value, static_cast<uint32_t>(table.size()));
    if (inserted) {
      SourceFrame &f = table.emplace_back();
      const uint64_t name = (value & ~format::kPythonFrameTag) >> format::kPythonLineBits;
      if (auto code = python_codes.find(name); code != python_codes.end()) {
        f.function = code->second.first;
        f.file = code->second.second;
      } else {
        f.function = "(python code " + std::to_string(name) + ")";
        f.file = "?";
      }
      f.line = static_cast<uint32_t>(value & format::kPythonLineMask);
      f.module = "python";
    }
    return it->second;
  }
  // Each address's frames once found, [first, first + count) in `table`, with the mapping that
  // held it (kUnmapped: none did): a stack's frames are looked up here before the mappings are
  // searched. Cleared by a mapping event (an address may then be held by another object).
  struct AddressFrames {
    uint32_t mapping, first, count;
  };
  static constexpr uint32_t kUnmapped = UINT32_MAX;
  absl::flat_hash_map<uint64_t, AddressFrames> by_address;
  std::unordered_map<uint32_t, std::vector<uint32_t>> resolved;  // stack id -> frames (indices)
  std::vector<SourceFrame> scratch;                              // frames()' result

  // Stack `id` as indices into `table`, symbolised on first use (empty: an id never defined).
  const std::vector<uint32_t> &resolve(uint32_t id);
  // Its innermost frame alone (kNoFrame: none): a site needs no more.
  uint32_t innermost(uint32_t id);
  // The frames of the return address `addr` of a stack defined after `at` mapping events.
  AddressFrames frames_at(uint64_t addr, uint64_t at);

  ~Impl() {
    for (Module &m : modules)
      if (m.dwfl) dwfl_end(m.dwfl);
  }

  // The object mapped at `addr` when the stack was defined; else the last one ever mapped there
  // (a definition may precede, by a hair, another thread's record of a load).
  const Mapping *mapping_for(uint64_t addr, uint64_t at) const {
    const Mapping *any = nullptr;
    for (const Mapping &m : mappings) {
      if (addr < m.start || addr >= m.end) continue;
      if (m.loaded_at <= at && at < m.unloaded_at) return &m;
      any = &m;
    }
    return any;
  }

  void open(Module &m) {
    m.opened = true;
    m.dwfl = dwfl_begin(&kOfflineCallbacks);
    if (!m.dwfl) return;
    dwfl_report_begin(m.dwfl);
    // Base 0: the module's addresses are those relative to its load bias.
    m.module = dwfl_report_elf(m.dwfl, base_name(m.path).c_str(), m.path.c_str(), -1, 0, true);
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    if (m.module && !m.build_id.empty()) {
      const unsigned char *bits = nullptr;
      GElf_Addr vaddr;
      const int n = dwfl_module_build_id(m.module, &bits, &vaddr);
      if (n > 0 && (static_cast<size_t>(n) != m.build_id.size() ||
                    memcmp(bits, m.build_id.data(), m.build_id.size()) != 0))
        m.module = nullptr;  // another build of the file than the one that ran
    }
  }

  // The frames at a return address `offset` of module `m`: the inlined functions at the call,
  // innermost first, then the function holding them.
  std::vector<SourceFrame> symbolise(Module &m, uint64_t offset) {
    SourceFrame plain;
    plain.module = m.path;
    plain.offset = offset;
    if (!m.opened) open(m);
    if (!m.module) return {plain};
    const Dwarf_Addr pc = offset > 0 ? offset - 1 : 0;  // inside the call instruction
    std::string file;
    int line = 0;
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(m.module, pc, &bias);
    Dwarf_Attribute comp_dir_attr;
    const char *comp_dir =
        cu ? dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &comp_dir_attr)) : nullptr;
    if (Dwfl_Line *l = dwfl_module_getsrc(m.module, pc)) {
      if (const char *f = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr))
        file = source_path(f, comp_dir);
    }
    std::vector<SourceFrame> out;
    bool have_function = false;
    if (cu) {
      Dwarf_Die *scopes = nullptr;
      const int n = dwarf_getscopes(cu, pc - bias, &scopes);
      Dwarf_Files *files = nullptr;
      size_t file_count = 0;
      if (n > 0 && dwarf_getsrcfiles(cu, &files, &file_count) != 0) files = nullptr;
      for (int i = 0; i < n && !have_function; ++i) {
        Dwarf_Die *scope = &scopes[i];
        const int tag = dwarf_tag(scope);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
        SourceFrame f = plain;
        f.function = die_name(scope);
        f.file = file;
        f.line = static_cast<uint32_t>(line);
        f.inlined = tag == DW_TAG_inlined_subroutine;
        out.push_back(std::move(f));
        if (tag == DW_TAG_subprogram) {
          have_function = true;
          break;
        }
        // The caller's line is the inlined call's site.
        Dwarf_Attribute attr;
        Dwarf_Word value;
        file.clear();
        line = 0;
        if (files && dwarf_formudata(dwarf_attr(scope, DW_AT_call_file, &attr), &value) == 0)
          if (const char *f = dwarf_filesrc(files, value, nullptr, nullptr))
            file = source_path(f, comp_dir);
        if (dwarf_formudata(dwarf_attr(scope, DW_AT_call_line, &attr), &value) == 0)
          line = static_cast<int>(value);
      }
      free(scopes);
    }
    if (!have_function) {  // no debug information: the symbol table's name
      SourceFrame f = plain;
      if (!m.symbols) m.symbols = std::make_unique<SymbolTable>(m.module);
      if (const char *name = m.symbols->name_at(pc)) f.function = demangle_symbol(name);
      f.file = file;
      f.line = static_cast<uint32_t>(line);
      out.push_back(std::move(f));
    }
    return out;
  }
};

CallStacks::CallStacks() : impl_(std::make_unique<Impl>()) {}
CallStacks::~CallStacks() = default;

bool CallStacks::empty() const { return impl_->defined == 0; }

bool CallStacks::on_event(const Event &e) {
  Impl &m = *impl_;
  switch (e.type) {
    case format::EventType::kStack: {
      const auto frames = e.values();
      const auto id = static_cast<uint32_t>(e.a);
      Impl::Stack &s = m.define(id);
      if (!s.defined) ++m.defined;
      if (s.resolved) m.resolved.erase(id);  // an id defined again: resolved anew
      s.leaf = m.insert(e.thread, frames, e.b);
      s.site = s.leaf;
      for (size_t i = 0; i < frames.size(); ++i)
        if (frames[i] & format::kPythonFrameTag) {
          for (size_t up = 0; up < i; ++up) s.site = m.nodes[s.site].parent;
          break;
        }
      s.count = static_cast<uint32_t>(frames.size());
      s.defined = true;
      s.resolved = false;
      s.defined_at = m.mapping_events;
      return true;
    }
    case format::EventType::kMapping: {
      std::string path = mapping_path(e), build_id = mapping_build_id(e);
      std::string key = path + '\0' + build_id;
      auto [it, inserted] =
          m.module_by_key.try_emplace(key, static_cast<uint32_t>(m.modules.size()));
      if (inserted) {
        Impl::Module &module = m.modules.emplace_back();
        module.path = std::move(path);
        module.build_id = std::move(build_id);
      }
      m.mappings.push_back({e.addr, e.a, e.b, it->second, m.mapping_events++, UINT64_MAX});
      m.by_address.clear();
      return true;
    }
    case format::EventType::kUnmapping:
      for (Impl::Mapping &map : m.mappings)
        if (map.bias == e.addr && map.start == e.a && map.unloaded_at == UINT64_MAX)
          map.unloaded_at = m.mapping_events;
      ++m.mapping_events;
      m.by_address.clear();
      return true;
    case format::EventType::kName: {
      // A Python code object's name (trace_format.h, "Python frames"); other names are not
      // the stacks' (false either way: the replay keeps every name).
      const std::string_view text = e.text();
      const std::string_view prefix = format::kPythonCodePrefix;
      if (text.starts_with(prefix)) {
        const std::string_view rest = text.substr(prefix.size());
        const size_t split = rest.find('\x01');
        m.python_codes[e.a] = {
            std::string(rest.substr(0, split)),
            split == std::string_view::npos ? std::string() : std::string(rest.substr(split + 1))};
      }
      return false;
    }
    default:
      return false;
  }
}

CallStacks::Impl::AddressFrames CallStacks::Impl::frames_at(uint64_t addr, uint64_t at) {
  // Most frames were seen in an earlier stack: one probe, when the mapping that held the
  // address then also held it when this stack was defined (no search of the mappings).
  if (auto hit = by_address.find(addr);
      hit != by_address.end() &&
      (hit->second.mapping == kUnmapped || (mappings[hit->second.mapping].loaded_at <= at &&
                                            at < mappings[hit->second.mapping].unloaded_at)))
    return hit->second;
  if (addr & format::kPythonFrameTag) return {kUnmapped, python_frame(addr), 1};
  const Mapping *map = mapping_for(addr, at);
  if (!map) {
    auto [it, inserted] = unmapped.try_emplace(addr, static_cast<uint32_t>(table.size()));
    if (inserted) table.emplace_back().offset = addr;
    return by_address[addr] = {kUnmapped, it->second, 1};
  }
  Module &module = modules[map->module];
  const uint64_t offset = addr - map->bias;
  auto cached = module.by_offset.find(offset);
  if (cached == module.by_offset.end()) {
    std::vector<SourceFrame> frames = symbolise(module, offset);
    const auto first = static_cast<uint32_t>(table.size());
    for (SourceFrame &f : frames) table.push_back(std::move(f));
    cached = module.by_offset.emplace(offset, std::pair{first, uint32_t(frames.size())}).first;
  }
  const AddressFrames found{static_cast<uint32_t>(map - mappings.data()), cached->second.first,
                            cached->second.second};
  if (map->loaded_at <= at && at < map->unloaded_at) by_address[addr] = found;
  return found;
}

const std::vector<uint32_t> &CallStacks::Impl::resolve(uint32_t id) {
  static const std::vector<uint32_t> kNone;
  Stack *s = stack(id);
  if (!s) return kNone;
  if (s->resolved) return resolved[id];
  std::vector<uint32_t> out;
  out.reserve(s->count);
  for (uint32_t node = s->leaf; node != 0; node = nodes[node].parent) {
    const AddressFrames f = frames_at(nodes[node].addr, s->defined_at);
    for (uint32_t i = 0; i < f.count; ++i) out.push_back(f.first + i);
  }
  s->resolved = true;
  return resolved[id] = std::move(out);
}

uint32_t CallStacks::Impl::innermost(uint32_t id) {
  const Stack *s = stack(id);
  if (!s || s->count == 0) return kNoFrame;
  return frames_at(nodes[s->site].addr, s->defined_at).first;
}

std::span<const uint32_t> CallStacks::frame_indices(uint32_t id) { return impl_->resolve(id); }

const SourceFrame &CallStacks::frame(uint32_t index) const { return impl_->table[index]; }

const std::vector<SourceFrame> &CallStacks::frames(uint32_t id) {
  Impl &m = *impl_;
  m.scratch.clear();
  for (uint32_t i : m.resolve(id)) m.scratch.push_back(m.table[i]);
  return m.scratch;
}

uint32_t CallStacks::site_frame(uint32_t id) { return impl_->innermost(id); }

std::string CallStacks::site(uint32_t id) {
  const uint32_t f = impl_->innermost(id);
  return f == kNoFrame ? std::string("(unknown stack)") : impl_->table[f].text();
}

}  // namespace adprof
