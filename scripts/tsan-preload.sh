#!/usr/bin/env bash
# Runs a program under a ThreadSanitizer-instrumented copy of libadprof_preload.so, to look for
# data races in the interposer itself (not CI). The sanitizer builds cannot: the preload library
# is built unsanitized there (ASan and TSan own malloc; profiler/CMakeLists.txt,
# adprof_unsanitized), so their tests run the sanitized CLI and analysis over traces that an
# uninstrumented interposer wrote.
#
# usage: scripts/tsan-preload.sh PROGRAM [ARGS...]
#   Records PROGRAM into $ADPROF_OUTPUT (default: ./tsan-preload.adtrace) with the preload's
#   settings from the environment (ADPROF_STEPS, ADPROF_STACKS, ...); TSan's reports go to
#   stderr (exit status 66 with a report). Needs the tsan preset configured (build/tsan: its
#   compile commands are reused) and GCC's libtsan.so.2.
#
# How: the preload's sources are compiled with -fsanitize=thread; its exported malloc family
# and mmap are renamed in hooks.o (objcopy) and reached through tsan_preload/shim.c, which
# keeps allocations made while libtsan itself starts out of instrumented code. libtsan is
# preloaded second, so that its interceptors (pthread_*, fork) come before glibc's.
#
# Limits (GCC 12's TSan): a fork child of a multi-threaded process is not checked (TSan ignores
# the forking thread there, and the child's new writer thread reuses the stack, and so the
# thread id, of the parent's writer: "dup thread with used id", exit 66); run the program
# itself under it, not a launcher that forks (timeout, a shell); reports made while a report is
# symbolized can deadlock: TSAN_OPTIONS=symbolize=0 (the default here) and addr2line after.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -ge 1 ]] || { sed -n 2,20p "$0"; exit 2; }
[[ -f "$root/build/tsan/build.ninja" ]] || { echo "tsan-preload: configure the tsan preset first (cmake --preset tsan)" >&2; exit 2; }
libtsan=$(g++ -print-file-name=libtsan.so.2)
[[ -f "$libtsan" ]] || { echo "tsan-preload: no libtsan.so.2" >&2; exit 2; }
out="$root/build/tsan-preload"
lib="$out/libadprof_preload_tsan.so"
mkdir -p "$out/obj"
objects=()
while read -r line; do
  src=${line##* -c }
  obj="$out/obj/$(basename "$(dirname "$src")")_$(basename "$src" .cpp).o"
  if [[ ! -f "$obj" || "$src" -nt "$obj" ]]; then
    # The preset's flags, instrumented (-fno-sanitize=all dropped), optimized a little.
    flags=$(sed -e 's/^ccache //' -e 's/ -fno-sanitize=all/ -O1/' -e 's/ -Werror//' \
              -e 's/ -MD -MT [^ ]* -MF [^ ]*//' -e 's/ -o [^ ]*\.o / /' -e 's/ -c [^ ]*$//' <<<"$line")
    $flags -o "$obj" -c "$src"
  fi
  objects+=("$obj")
done < <(cd "$root/build/tsan" && ninja -t commands profiler/libadprof_preload.so | grep ' -c ')
renames=()
for f in malloc free calloc realloc mmap mmap64 munmap; do renames+=(--redefine-sym "$f=adprof_tsan_$f"); done
for i in "${!objects[@]}"; do
  if [[ "${objects[$i]}" == */preload_hooks.o ]]; then
    objcopy "${renames[@]}" "${objects[$i]}" "$out/obj/hooks_renamed.o"
    objects[$i]="$out/obj/hooks_renamed.o"
  fi
done
gcc -O1 -g -fPIC -c "$root/scripts/tsan_preload/shim.c" -o "$out/obj/shim.o"
g++ -fPIC -g -fsanitize=thread -shared -Wl,-z,nodelete -Wl,--no-as-needed -o "$lib" \
  "$out/obj/shim.o" "${objects[@]}" -lz -ldl -ljemalloc -lzstd
export ADPROF_OUTPUT="${ADPROF_OUTPUT:-$PWD/tsan-preload.adtrace}"
export TSAN_OPTIONS="die_after_fork=0 detect_deadlocks=0 symbolize=0 ${TSAN_OPTIONS:-}"
LD_PRELOAD="$lib $libtsan" exec "$@"
