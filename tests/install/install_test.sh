#!/usr/bin/env bash
# The build tree installed as a user, an engine author and a packager would use it:
#  1. `cmake --install` with DESTDIR and --prefix puts every file where docs/INSTALL.md says;
#  2. the install is moved (it must not depend on where it was installed), and its `adprof`
#     finds its own interposer there;
#  3. an outside CMake project (tests/install/consumer) finds the package, links
#     adprof::context, and the installed `adprof run` reports its ops with their roles; a C
#     program built with pkg-config does the same; an unmodified system program is profiled;
#  4. `cpack -G DEB` makes a .deb whose Depends are runtime packages only, and whose adprof
#     runs from the unpacked tree.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE CPACK gui|nogui
set -euo pipefail
build=$1 source=$2 cmake=$3 cpack=$4 gui=$5
scratch=$(mktemp -d "${TMPDIR:-/tmp}/adprof-install-test.XXXXXX")
scratch=$(realpath "$scratch")
trap 'rm -rf "$scratch"' EXIT
unset ADPROF_PRELOAD ADPROF_OUTPUT

step() { echo "== $*"; }
fail() {
  echo "install_test: FAIL: $*" >&2
  exit 1
}
# Runs a command quietly; on failure shows its output and fails.
quiet() {
  local log=$scratch/last.log
  "$@" >"$log" 2>&1 || {
    cat "$log" >&2
    fail "command failed: $*"
  }
}

step "cmake --install with DESTDIR and --prefix"
DESTDIR=$scratch/dest quiet "$cmake" --install "$build" --prefix /opt/adprof
root=$scratch/dest/opt/adprof
config=$(cd "$root" && find . -name adprofConfig.cmake | head -1)
[[ -n $config ]] || fail "no adprofConfig.cmake installed"
libdir=${config#./}
libdir=${libdir%/cmake/adprof/adprofConfig.cmake}
expected=(bin/adprof "$libdir/adprof/libadprof_preload.so" "$libdir/libadprof_context.so"
  "$libdir/cmake/adprof/adprofConfigVersion.cmake" "$libdir/cmake/adprof/adprofTargets.cmake"
  "$libdir/pkgconfig/adprof.pc" share/man/man1/adprof.1.gz
  share/bash-completion/completions/adprof share/doc/adprof/README.md
  share/doc/adprof/ARCHITECTURE.md share/doc/adprof/INSTALL.md)
[[ $gui == gui ]] && expected+=(bin/adprof-gui share/man/man1/adprof-gui.1.gz)
for header in "$source"/profiler/include/adprof/*.h; do
  expected+=("include/adprof/$(basename "$header")")
done
for f in "${expected[@]}"; do
  [[ -e $root/$f ]] || fail "not installed: $f"
done

step "the install moved elsewhere still works (nothing points at the build tree or the prefix)"
prefix=$scratch/moved
mv "$root" "$prefix"
version=$("$prefix/bin/adprof" --version)
echo "$version"
format=$(sed -n 's/^inline constexpr uint32_t kVersion = \([0-9]*\);.*/\1/p' \
  "$source/profiler/format/trace_format.h")
[[ -n $format ]] || fail "cannot read kVersion from trace_format.h"
grep -q "writes trace format $format," <<<"$version" ||
  fail "adprof --version does not name trace format $format"
grep -qx "interposer: $prefix/$libdir/adprof/libadprof_preload.so" <<<"$version" ||
  fail "the installed adprof does not use the interposer installed beside it"

step "man page and completion"
for command in $("$prefix/bin/adprof" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z]*\) .*/\1/p'); do
  zgrep -q "^\.SS adprof $command\$" "$prefix/share/man/man1/adprof.1.gz" ||
    fail "adprof.1 has no section for '$command'"
done
if command -v man >/dev/null; then
  MANWIDTH=100 man -l "$prefix/share/man/man1/adprof.1.gz" 2>"$scratch/man.err" | grep -q "adprof run" ||
    fail "man -l adprof.1 does not render"
  [[ ! -s $scratch/man.err ]] || fail "man warns: $(cat "$scratch/man.err")"
fi
bash -c "source '$prefix/share/bash-completion/completions/adprof' && complete -p adprof" \
  >/dev/null || fail "the bash completion does not load"

step "an outside CMake project: find_package(adprof), adprof::context"
quiet "$cmake" -S "$source/tests/install/consumer" -B "$scratch/consumer" \
  -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
quiet "$cmake" --build "$scratch/consumer"
[[ $(ldd "$scratch/consumer/consumer") == *"$prefix/$libdir/libadprof_context.so"* ]] ||
  fail "consumer does not load the installed libadprof_context: $(ldd "$scratch/consumer/consumer")"

step "the installed adprof run profiles it and names its ops and roles"
cd "$scratch"
"$prefix/bin/adprof" run -o consumer.adtrace -- "$scratch/consumer/consumer" >consumer.txt 2>&1 ||
  { cat consumer.txt; fail "adprof run consumer failed"; }
grep -q "consumer: profiled yes" consumer.txt || { cat consumer.txt; fail "not profiled"; }
for row in '4\.0 MiB +forward_cache +consumer\.forward#1' '2\.0 MiB +adjoint +consumer\.backward#1'; do
  grep -Eq "^ +$row " consumer.txt ||
    { cat consumer.txt; fail "the report has no live buffer '$row' (the consumer's op and role)"; }
done

step "pkg-config: a C program"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
[[ $(pkg-config --modversion adprof) == "$(sed -n 's/^Version: //p' "$prefix/$libdir/pkgconfig/adprof.pc")" ]] ||
  fail "pkg-config --modversion adprof"
# shellcheck disable=SC2046
quiet cc -o pkgconfig_consumer "$source/tests/install/consumer/consumer_pkgconfig.c" \
  $(pkg-config --cflags --libs adprof) -Wl,-rpath,"$prefix/$libdir"
"$prefix/bin/adprof" run -o pkgconfig.adtrace -- ./pkgconfig_consumer >pkgconfig.txt 2>&1 ||
  { cat pkgconfig.txt; fail "adprof run pkgconfig_consumer failed"; }
grep -Eq '^ +3\.0 MiB +workspace +pkgconfig\.op#1 ' pkgconfig.txt ||
  { cat pkgconfig.txt; fail "the report does not show the C program's op"; }

step "an unmodified system program"
"$prefix/bin/adprof" run -o sort.adtrace -- sort -n /dev/null >sort.txt 2>&1 ||
  { cat sort.txt; fail "adprof run sort failed"; }
grep -q "^Peak: " sort.txt || { cat sort.txt; fail "no report for sort"; }

step "cpack -G DEB: runtime dependencies only"
quiet "$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/deb"
deb=$(ls "$scratch"/deb/*.deb)
info=$(dpkg-deb -I "$deb")
depends=$(sed -n 's/^ Depends: //p' <<<"$info")
echo "Depends: $depends"
[[ -n $depends ]] || fail "the .deb has no Depends"
if grep -Eq -- '-dev([ ,(]|$)' <<<"$depends"; then fail "the .deb depends on -dev packages"; fi
needed=(libjemalloc2 libzstd1 libboost-program-options zlib1g libstdc++6)
[[ $gui == gui ]] && needed+=(libqt6widgets6 qt6-qpa-plugins)
for p in "${needed[@]}"; do
  grep -q "$p" <<<"$depends" || fail "the .deb does not depend on $p"
done
dpkg-deb -x "$deb" "$scratch/unpacked"
unpacked_version=$("$scratch/unpacked/usr/bin/adprof" --version)
grep -q "^interposer: $scratch/unpacked/usr/" <<<"$unpacked_version" ||
  fail "the packaged adprof does not find its packaged interposer: $unpacked_version"
[[ -f $scratch/unpacked/usr/share/man/man1/adprof.1.gz ]] || fail "no man page in the .deb"
echo "install_test: OK"
