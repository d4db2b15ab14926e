// x86-64 unwind rules read from the loaded objects' .eh_frame (through .eh_frame_hdr's search
// table), for the frame walker of stacks.cpp: the few rule forms that compilers emit for
// ordinary code, as libunwind's fast trace handles them (CFA = rsp or rbp + constant, return
// address at CFA-8, caller's rbp unchanged or saved at CFA + constant, rsp = CFA). Everything
// else (signal frames, DWARF expressions, realigned stacks, code without unwind tables) is
// kUnsupported: the caller then unwinds that stack with libunwind.
#pragma once

#include <cstdint>

namespace adprof::preload {

struct UnwindRule {
  enum Kind : uint8_t { kEmpty = 0, kStandard, kLast, kUnsupported };
  enum Flags : uint8_t { kCfaFromRbp = 1, kRbpSaved = 2 };
  uint64_t pc = 0;         // the address looked up (a return address - 1, or the start pc)
  int32_t cfa_offset = 0;  // CFA = (kCfaFromRbp ? rbp : rsp) + cfa_offset
  int16_t rbp_offset = 0;  // kRbpSaved: the caller's rbp is at CFA + rbp_offset
  uint8_t kind = kEmpty;   // kLast: the return address is undefined (the outermost frame)
  uint8_t flags = 0;
};
static_assert(sizeof(UnwindRule) == 16);

// The rule at `pc` of the object that holds it. Cold: walks the loader's list
// (dl_iterate_phdr) and interprets the FDE's call-frame instructions; no allocation.
UnwindRule find_unwind_rule(uint64_t pc);

}  // namespace adprof::preload
