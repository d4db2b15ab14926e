// Reading x86-64 call-frame information (DWARF 4 section 6.4, LSB's .eh_frame and .eh_frame_hdr)
// for one pc: find the object (dl_iterate_phdr), binary-search its .eh_frame_hdr table, parse the
// FDE and its CIE, run the CIE's and FDE's instructions up to the pc. Only rsp, rbp and the
// return address column are followed; any form the frame walker cannot replay exactly is
// kUnsupported (never a guess).
#include "unwind_rules.h"

#include <link.h>

#include <cstring>

namespace adprof::preload {
namespace {

constexpr uint8_t kRegRbp = 6, kRegRsp = 7, kRegRa = 16;

// Encodings of pointers (DW_EH_PE_*).
constexpr uint8_t kPeOmit = 0xff, kPeIndirect = 0x80;
constexpr uint8_t kPeAbs = 0x00, kPePcrel = 0x10, kPeDatarel = 0x30;
constexpr uint8_t kPeDatarelSdata4 = 0x3b;

struct Reader {
  const uint8_t *p, *end;
  bool ok = true;

  template <typename T>
  T fixed() {
    T v{};
    if (end - p < static_cast<long>(sizeof(T))) {
      ok = false;
      return v;
    }
    memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  int64_t sleb() {
    int64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const uint8_t b = *p++;
      v |= static_cast<int64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        if (shift + 7 < 64 && (b & 0x40)) v |= -(static_cast<int64_t>(1) << (shift + 7));
        return v;
      }
    }
    ok = false;
    return 0;
  }
  // A pointer in encoding `enc`; `datarel` is the base of DW_EH_PE_datarel.
  uint64_t pointer(uint8_t enc, uint64_t datarel = 0) {
    if (enc == kPeOmit) return 0;
    const uint64_t field = reinterpret_cast<uintptr_t>(p);
    uint64_t v;
    switch (enc & 0x0f) {
      case 0x00:
        v = fixed<uint64_t>();
        break;
      case 0x01:
        v = uleb();
        break;
      case 0x02:
        v = fixed<uint16_t>();
        break;
      case 0x03:
        v = fixed<uint32_t>();
        break;
      case 0x04:
        v = fixed<uint64_t>();
        break;
      case 0x09:
        v = static_cast<uint64_t>(sleb());
        break;
      case 0x0a:
        v = static_cast<uint64_t>(static_cast<int64_t>(fixed<int16_t>()));
        break;
      case 0x0b:
        v = static_cast<uint64_t>(static_cast<int64_t>(fixed<int32_t>()));
        break;
      case 0x0c:
        v = fixed<uint64_t>();
        break;
      default:
        ok = false;
        return 0;
    }
    switch (enc & 0x70) {
      case kPeAbs:
        break;
      case kPePcrel:
        v += field;
        break;
      case kPeDatarel:
        v += datarel;
        break;
      default:
        ok = false;
        return 0;
    }
    if (enc & kPeIndirect) ok = false;  // never in the fields read here (personality is skipped)
    return v;
  }
};

struct ObjectSearch {
  uint64_t pc;
  const uint8_t *eh_frame_hdr = nullptr;
  bool found = false;
};

int find_object(dl_phdr_info *info, size_t, void *data) {
  auto *s = static_cast<ObjectSearch *>(data);
  bool inside = false;
  const uint8_t *hdr = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    const uint64_t at = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && s->pc >= at && s->pc < at + ph.p_memsz) inside = true;
    if (ph.p_type == PT_GNU_EH_FRAME) hdr = reinterpret_cast<const uint8_t *>(at);
  }
  if (!inside) return 0;
  s->found = true;
  s->eh_frame_hdr = hdr;
  return 1;
}

// The FDE covering pc, from .eh_frame_hdr's sorted table; null when there is none.
const uint8_t *find_fde(const uint8_t *hdr, uint64_t pc) {
  // version, eh_frame_ptr_enc, fde_count_enc, table_enc
  if (hdr[0] != 1 || hdr[3] != kPeDatarelSdata4) return nullptr;
  const uint64_t base = reinterpret_cast<uintptr_t>(hdr);
  Reader r{hdr + 4, hdr + 4 + 16};
  r.pointer(hdr[1], base);
  const uint64_t count = r.pointer(hdr[2], base);
  if (!r.ok || count == 0) return nullptr;
  struct Entry {
    int32_t start, fde;
  };
  const auto *table = reinterpret_cast<const Entry *>(r.p);
  uint64_t lo = 0, hi = count;  // the last entry whose start <= pc
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (base + static_cast<int64_t>(table[mid].start) <= pc)
      lo = mid;
    else
      hi = mid;
  }
  if (base + static_cast<int64_t>(table[lo].start) > pc) return nullptr;
  return reinterpret_cast<const uint8_t *>(base + static_cast<int64_t>(table[lo].fde));
}

// One record's extent (CIE or FDE): [body, end), body just after the length.
bool record(const uint8_t *at, const uint8_t **body, const uint8_t **end) {
  uint32_t length;
  memcpy(&length, at, 4);
  if (length == 0 || length == 0xffffffffu) return false;  // terminator; 64-bit DWARF (unused)
  *body = at + 4;
  *end = at + 4 + length;
  return true;
}

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = 1;
  uint8_t fde_encoding = kPeAbs;
  bool augmented = false, signal = false;
  const uint8_t *instructions = nullptr, *end = nullptr;
};

bool parse_cie(const uint8_t *at, Cie *cie) {
  const uint8_t *body, *end;
  if (!record(at, &body, &end)) return false;
  Reader r{body, end};
  if (r.fixed<uint32_t>() != 0) return false;  // a CIE's id
  const uint8_t version = r.fixed<uint8_t>();
  if (!r.ok || (version != 1 && version != 3 && version != 4)) return false;
  const char *augmentation = reinterpret_cast<const char *>(r.p);
  const size_t length = strnlen(augmentation, static_cast<size_t>(end - r.p));
  r.p += length + 1;
  if (version == 4) {
    if (r.fixed<uint8_t>() != 8 || r.fixed<uint8_t>() != 0) return false;
  }
  cie->code_align = r.uleb();
  cie->data_align = r.sleb();
  const uint64_t ra = version == 1 ? r.fixed<uint8_t>() : r.uleb();
  if (!r.ok || ra != kRegRa) return false;
  if (augmentation[0] == 'z') {
    cie->augmented = true;
    const uint64_t data_length = r.uleb();
    const uint8_t *data_end = r.p + data_length;
    if (!r.ok || data_end > end) return false;
    for (const char *c = augmentation + 1; *c; ++c) {
      if (*c == 'R') {
        cie->fde_encoding = r.fixed<uint8_t>();
      } else if (*c == 'L') {
        r.fixed<uint8_t>();
      } else if (*c == 'P') {
        const uint8_t enc = r.fixed<uint8_t>();
        r.pointer(enc & 0x7f);  // skipped, never dereferenced
      } else if (*c == 'S') {
        cie->signal = true;
      } else {
        break;  // an unknown letter: the data length still says where the data ends
      }
    }
    r.p = data_end;
  } else if (augmentation[0] != 0) {
    return false;
  }
  if (!r.ok) return false;
  cie->instructions = r.p;
  cie->end = end;
  return true;
}

// The state of the three columns followed.
struct Row {
  enum Rule : uint8_t { kSame, kOffset, kUndefined, kOther };
  uint8_t cfa_reg = kRegRsp;
  bool cfa_other = false;  // an expression, or a register other than rsp/rbp
  int64_t cfa_offset = 0;
  uint8_t rule[3] = {kSame, kSame, kSame};  // rbp, rsp, return address
  int64_t offset[3] = {0, 0, 0};
};

int column(uint64_t reg) {
  return reg == kRegRbp ? 0 : reg == kRegRsp ? 1 : reg == kRegRa ? 2 : -1;
}

// Runs instructions [p, end) from `loc` while the location stays <= pc; `initial` is the row
// after the CIE's instructions (for DW_CFA_restore). False: a malformed or unknown instruction.
bool run_cfi(const uint8_t *p, const uint8_t *end, const Cie &cie, uint64_t loc, uint64_t pc,
             Row *row, const Row &initial) {
  constexpr int kMaxStates = 16;
  Row saved[kMaxStates];
  int depth = 0;
  Reader r{p, end};
  auto set = [row](uint64_t reg, uint8_t rule, int64_t offset) {
    const int c = column(reg);
    if (c < 0) return;
    row->rule[c] = rule;
    row->offset[c] = offset;
  };
  auto advance = [&](uint64_t delta) {
    const uint64_t next = loc + delta * cie.code_align;
    if (next > pc) return false;
    loc = next;
    return true;
  };
  while (r.ok && r.p < r.end) {
    const uint8_t op = *r.p++;
    const uint8_t low = op & 0x3f;
    switch (op >> 6) {
      case 1:
        if (!advance(low)) return true;
        continue;
      case 2:
        set(low, Row::kOffset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        continue;
      case 3: {
        const int c = column(low);
        if (c >= 0) {
          row->rule[c] = initial.rule[c];
          row->offset[c] = initial.offset[c];
        }
        continue;
      }
      default:
        break;
    }
    switch (op) {
      case 0x00:
        break;      // nop
      case 0x01: {  // set_loc
        const uint64_t next = r.pointer(cie.fde_encoding);
        if (next > pc) return r.ok;
        loc = next;
        break;
      }
      case 0x02:
        if (!advance(r.fixed<uint8_t>())) return r.ok;
        break;
      case 0x03:
        if (!advance(r.fixed<uint16_t>())) return r.ok;
        break;
      case 0x04:
        if (!advance(r.fixed<uint32_t>())) return r.ok;
        break;
      case 0x05: {  // offset_extended
        const uint64_t reg = r.uleb();
        set(reg, Row::kOffset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      case 0x06: {  // restore_extended
        const int c = column(r.uleb());
        if (c >= 0) {
          row->rule[c] = initial.rule[c];
          row->offset[c] = initial.offset[c];
        }
        break;
      }
      case 0x07:
        set(r.uleb(), Row::kUndefined, 0);
        break;
      case 0x08:
        set(r.uleb(), Row::kSame, 0);
        break;
      case 0x09: {  // register: reg's value is in another register
        const uint64_t reg = r.uleb();
        r.uleb();
        set(reg, Row::kOther, 0);
        break;
      }
      case 0x0a:
        if (depth == kMaxStates) return false;
        saved[depth++] = *row;
        break;
      case 0x0b:
        if (depth == 0) return false;
        *row = saved[--depth];  // the CFA too, as GCC's and libunwind's unwinders do
        break;
      case 0x0c: {  // def_cfa
        const uint64_t reg = r.uleb();
        row->cfa_reg = static_cast<uint8_t>(reg);
        row->cfa_other = reg != kRegRsp && reg != kRegRbp;
        row->cfa_offset = static_cast<int64_t>(r.uleb());
        break;
      }
      case 0x0d: {  // def_cfa_register
        const uint64_t reg = r.uleb();
        row->cfa_reg = static_cast<uint8_t>(reg);
        row->cfa_other = reg != kRegRsp && reg != kRegRbp;
        break;
      }
      case 0x0e:
        row->cfa_offset = static_cast<int64_t>(r.uleb());
        break;
      case 0x0f:  // def_cfa_expression
        r.p += r.uleb();
        row->cfa_other = true;
        break;
      case 0x10: {  // expression
        const uint64_t reg = r.uleb();
        r.p += r.uleb();
        set(reg, Row::kOther, 0);
        break;
      }
      case 0x11: {  // offset_extended_sf
        const uint64_t reg = r.uleb();
        set(reg, Row::kOffset, r.sleb() * cie.data_align);
        break;
      }
      case 0x12: {  // def_cfa_sf
        const uint64_t reg = r.uleb();
        row->cfa_reg = static_cast<uint8_t>(reg);
        row->cfa_other = reg != kRegRsp && reg != kRegRbp;
        row->cfa_offset = r.sleb() * cie.data_align;
        break;
      }
      case 0x13:
        row->cfa_offset = r.sleb() * cie.data_align;
        break;
      case 0x14:  // val_offset
      case 0x15: {
        const uint64_t reg = r.uleb();
        if (op == 0x14)
          r.uleb();
        else
          r.sleb();
        set(reg, Row::kOther, 0);
        break;
      }
      case 0x16: {  // val_expression
        const uint64_t reg = r.uleb();
        r.p += r.uleb();
        set(reg, Row::kOther, 0);
        break;
      }
      case 0x2e:
        r.uleb();
        break;      // GNU_args_size
      case 0x2f: {  // GNU_negative_offset_extended
        const uint64_t reg = r.uleb();
        set(reg, Row::kOffset, -static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      default:
        return false;
    }
  }
  return r.ok && r.p <= r.end;
}

}  // namespace

UnwindRule find_unwind_rule(uint64_t pc) {
  UnwindRule rule;
  rule.pc = pc;
  rule.kind = UnwindRule::kUnsupported;
  ObjectSearch search{pc};
  dl_iterate_phdr(find_object, &search);
  if (!search.found || !search.eh_frame_hdr) return rule;
  const uint8_t *fde = find_fde(search.eh_frame_hdr, pc);
  if (!fde) return rule;
  const uint8_t *body, *end;
  if (!record(fde, &body, &end)) return rule;
  Reader r{body, end};
  const uint32_t cie_pointer = r.fixed<uint32_t>();
  if (!r.ok || cie_pointer == 0) return rule;  // a CIE, not an FDE
  Cie cie;
  if (!parse_cie(body - cie_pointer, &cie) || cie.signal) return rule;
  const uint64_t start = r.pointer(cie.fde_encoding);
  const uint64_t range = r.pointer(cie.fde_encoding & 0x0f);
  if (!r.ok || pc < start || pc - start >= range) return rule;
  if (cie.augmented) {
    const uint64_t data_length = r.uleb();
    r.p += data_length;
    if (!r.ok || r.p > end) return rule;
  }
  Row initial;
  if (!run_cfi(cie.instructions, cie.end, cie, start, ~0ull, &initial, initial)) return rule;
  Row row = initial;
  if (!run_cfi(r.p, end, cie, start, pc, &row, initial)) return rule;

  if (row.cfa_other || row.rule[1] != Row::kSame) return rule;  // rsp must be the CFA
  if (row.rule[2] == Row::kUndefined) {
    rule.kind = UnwindRule::kLast;
    return rule;
  }
  if (row.rule[2] != Row::kOffset || row.offset[2] != -8) return rule;
  if (row.cfa_offset < INT32_MIN || row.cfa_offset > INT32_MAX) return rule;
  rule.cfa_offset = static_cast<int32_t>(row.cfa_offset);
  rule.flags = row.cfa_reg == kRegRbp ? UnwindRule::kCfaFromRbp : 0;
  if (row.rule[0] == Row::kOffset) {
    if (row.offset[0] < INT16_MIN || row.offset[0] > INT16_MAX) return rule;
    rule.rbp_offset = static_cast<int16_t>(row.offset[0]);
    rule.flags |= UnwindRule::kRbpSaved;
  } else if (row.rule[0] != Row::kSame) {
    return rule;
  }
  rule.kind = UnwindRule::kStandard;
  return rule;
}

}  // namespace adprof::preload
