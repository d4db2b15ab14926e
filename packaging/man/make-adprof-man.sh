#!/usr/bin/env bash
# Writes the adprof(1) man page from `adprof --help` and every command's `--help`, so the page
# says what the program says. Usage: make-adprof-man.sh ADPROF VERSION OUTPUT
# (Debian's help2man would do the top page; this one also takes each command's options.)
set -euo pipefail
adprof=$1 version=$2 output=$3

# roff: backslashes escaped, a line starting with . or ' protected, hyphens as \-.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/" -e 's/-/\\-/g'; }

usage=$("$adprof" --help)
commands=$(sed -n '/^Commands:/,/^$/p' <<<"$usage" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
[[ -n $commands ]] || { echo "make-adprof-man.sh: no commands in '$adprof --help'" >&2; exit 1; }

mkdir -p "$(dirname "$output")"
{
  echo ".TH ADPROF 1 \"\" \"adprof $version\" \"User Commands\""
  echo ".SH NAME"
  echo "adprof \\- memory profiling for automatic\\-differentiation programs"
  echo ".SH SYNOPSIS"
  echo ".B adprof"
  echo ".I COMMAND"
  echo "[\\fIARGS\\fR...]"
  echo ".br"
  echo ".B adprof \\-\\-version"
  echo ".SH DESCRIPTION"
  echo ".nf"
  sed '1,/^$/d' <<<"$usage" | roff
  echo ".fi"
  echo ".SH COMMANDS"
  for c in $commands; do
    echo ".SS adprof $c"
    echo ".nf"
    "$adprof" "$c" --help | roff
    echo ".fi"
  done
  cat <<'ROFF'
.SH ENVIRONMENT
.TP
.B ADPROF_PRELOAD
The interposer \fBadprof run\fR preloads. By default the one installed with \fBadprof\fR
(\fIPREFIX\fR/lib/adprof/libadprof_preload.so); \fBadprof \-\-version\fR names the one in use.
.SH EXIT STATUS
0 ok, 1 a check failed, 2 usage or input error; \fBadprof run\fR exits with the program's
status (128+N when signal N ended it).
.SH FILES
.TP
.I PREFIX/include/adprof/context.h
The context API a program calls to declare its ops, phases and roles; link
\fBlibadprof_context\fR (CMake: \fBfind_package(adprof)\fR and \fBadprof::context\fR;
pkg\-config: \fBadprof\fR).
.SH SEE ALSO
.BR adprof\-gui (1);
the documents in \fIPREFIX\fR/share/doc/adprof/ (docs/ARCHITECTURE.md, docs/CI.md,
docs/REPORT_SCHEMA.md, docs/INSTALL.md).
ROFF
} >"$output.tmp"
mv "$output.tmp" "$output"
