// dlsym and dlvsym, for CUDA entry points a program looks up itself (cuda_lookups.cpp).
//
// glibc's dlsym takes its caller from its return address: RTLD_NEXT searches after the
// caller's object, RTLD_DEFAULT searches the caller's scope, and symbol versions follow the
// caller's. A C++ forwarder would make every caller libadprof_preload.so, and a dlsym(RTLD_NEXT)
// from any library would resolve differently: a program behaving differently under adprof. So
// the forwarding is a jump, not a call (GCC 12 has no guaranteed tail call): the real dlsym
// returns straight to the program's caller and sees it as its own. Only a name starting with
// "cu" and a handle other than RTLD_DEFAULT (0) and RTLD_NEXT (-1) takes the slow path
// (adprof_dlsym_cuda), a lookup in one library's scope, which does not depend on the caller
// (glibc tells only LD_AUDIT modules who asked). RTLD_NEXT is how an interposer finds what it
// wraps, and RTLD_DEFAULT finds adprof's exported hooks first: both would find "cuMemAlloc_v2"
// (RTLD_NEXT from the program, whose next objects are the preloaded ones) in a process with no
// CUDA driver in its scope, where the program gets NULL without adprof (a probe for a loaded
// driver, then a call failing with error 500). So dlsym with either and a "cu" name asks
// adprof_dlsym_scope_is_only_adprofs (cuda_lookups.cpp), with the caller's return address, and
// answers NULL when it says so; otherwise it jumps to glibc's as any other lookup.
//
// glibc's functions come from libc's own symbol table (adprof_resolve_dl), on the first call:
// the library's constructors may run after other libraries' (jemalloc's) first dlsym. The
// registers holding the arguments are saved around that call; the stack stays 16-byte aligned.
//
// x86-64 System V only (the project's target); on another architecture dlsym is not hooked.
#if defined(__x86_64__)

#include "cuda_hooks.h"

asm(R"(
    # The start both stubs share: a name starting with "cu" with a real handle jumps to `cuda`,
    # with RTLD_DEFAULT or RTLD_NEXT to `on_scope`; anything else to glibc's function, read from
    # `real` (label 2, after the macro, when it is not resolved yet).
    .macro adprof_dl_dispatch cuda, on_scope, real
    testq %rsi, %rsi
    jz 1f
    cmpb $0x63, (%rsi)          # 'c'
    jne 1f
    cmpb $0x75, 1(%rsi)         # 'u'
    jne 1f
    leaq 1(%rdi), %rax          # RTLD_NEXT (-1) -> 0, RTLD_DEFAULT (0) -> 1
    cmpq $1, %rax
    jbe \on_scope
    jmp \cuda                   # its result goes straight back to the caller
1:  movq \real(%rip), %rax
    testq %rax, %rax
    jz 2f
    jmp *%rax
    .endm

    # A call that keeps the arguments of dlsym (rdi, rsi) and dlvsym (and rdx) for the jump
    # after it; three pushes over the return address keep the stack 16-byte aligned.
    .macro adprof_call_keeping_arguments function
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    call \function
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    .endm

    .text
    .p2align 4
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    endbr64
    adprof_dl_dispatch adprof_dlsym_cuda, 3f, adprof_real_dlsym
3:  movq (%rsp), %rdx          # RTLD_DEFAULT or _NEXT, "cu...": only adprof's definition?
    adprof_call_keeping_arguments adprof_dlsym_scope_is_only_adprofs  # (handle, name, caller)
    testl %eax, %eax
    jnz 4f
    movq adprof_real_dlsym(%rip), %rax  # resolved by that call
    jmp *%rax                   # glibc's lookup, from the caller, as without adprof
4:  xorl %eax, %eax             # NULL, glibc's error for the name already set
    ret
2:  adprof_call_keeping_arguments adprof_resolve_dl
    movq adprof_real_dlsym(%rip), %rax
    jmp *%rax
    .cfi_endproc
    .size dlsym, .-dlsym

    .p2align 4
    .globl dlvsym
    .type dlvsym, @function
dlvsym:
    .cfi_startproc
    endbr64
    adprof_dl_dispatch adprof_dlvsym_cuda, 1f, adprof_real_dlvsym
2:  adprof_call_keeping_arguments adprof_resolve_dl
    movq adprof_real_dlvsym(%rip), %rax
    jmp *%rax
    .cfi_endproc
    .size dlvsym, .-dlvsym

    .purgem adprof_dl_dispatch
    .purgem adprof_call_keeping_arguments
)");

#endif
