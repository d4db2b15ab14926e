// A library of 200,000 functions (many_symbols_f0 ... many_symbols_f199999, 16 bytes each) and
// nothing else: the size of libtorch_cpu's symbol table, for stacks_test.cpp's test that
// symbolising costs per distinct frame, not per frame times symbols. Made by the assembler's
// macros (.altmacro: `%expr` is the expression's value), so that the build compiles no code.
__asm__(
    ".text\n"
    ".altmacro\n"
    ".macro many_symbols_fn n\n"
    "  .globl many_symbols_f\\n\n"
    "  .type many_symbols_f\\n, @function\n"
    "many_symbols_f\\n:\n"
    "  .fill 15, 1, 0x90\n"
    "  ret\n"
    "  .size many_symbols_f\\n, 16\n"
    ".endm\n"
    ".set many_symbols_i, 0\n"
    ".rept 200000\n"
    "  many_symbols_fn %many_symbols_i\n"
    "  .set many_symbols_i, many_symbols_i + 1\n"
    ".endr\n"
    ".noaltmacro\n");
