#!/usr/bin/env bash
# Regenerates the trace reader's fuzz corpus (this directory): hand-packed traces, crafted at
# the reader's limits among others (written by profiler_make_packed_corpus,
# tests/profiler/fuzz/make_packed_corpus.cpp), small real traces, and damaged variants of them
# (truncated, flipped bytes, lying sizes), plus non-traces. Each file stays under 20 KiB. The
# hand-packed files are the same bytes on every run; the real ones depend on the machine.
# usage: tests/profiler/corpus/make_corpus.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: make_corpus.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$build/tests/profiler/profiler_make_packed_corpus" "$here"
adprof=$build/bin/adprof
wl=$build/tests/profiler
"$adprof" run -o "$tmp/scopes" --no-report -- "$wl/profiler_wl_attribution" scopes 2>/dev/null
"$adprof" run -o "$tmp/abort" --no-report -- "$wl/profiler_wl_lifecycle" abort 2>/dev/null || true
"$adprof" run -o "$tmp/exec" --no-report -- "$wl/profiler_wl_lifecycle" exec 2>/dev/null
cp "$tmp/scopes" "$here/real-scopes.adtrace"
cp "$tmp/abort" "$here/real-abort.adtrace"
cp "$tmp/exec" "$here/real-exec-first-image.adtrace"
# Columnar chunks with compact heap events, whole and cut mid-chunk, in the current format
# version (5), without and with call stacks. real-v2-columnar.adtrace, real-v3-columnar.adtrace
# and their cut-* twins, made the same way by an adprof that wrote version 2 or 3, are kept:
# the reader still reads those versions.
"$adprof" run -o "$tmp/v5" --no-report -- "$build/bench/profiler/profiler_bench_storm" 2 300 2>/dev/null
cp "$tmp/v5" "$here/real-v5-columnar.adtrace"
head -c $(( $(stat -c %s "$tmp/v5") * 2 / 3 )) "$tmp/v5" > "$here/cut-v5-columnar.adtrace"
"$adprof" run -o "$tmp/v5s" --stacks --no-report -- "$build/bench/profiler/profiler_bench_storm" 2 300 2>/dev/null
cp "$tmp/v5s" "$here/real-v5-stacks.adtrace"

python3 - "$here" <<'PY'
import os, struct, sys, zlib
here = sys.argv[1]
base = open(os.path.join(here, "real-scopes.adtrace"), "rb").read()

def put(name, data):
    assert len(data) < 20 * 1024, name
    open(os.path.join(here, name), "wb").write(data)

def flip(data, at, mask=0x10):
    b = bytearray(data)
    b[at] ^= mask
    return bytes(b)

def recrc(data, offset):
    """Recomputes the CRC of the chunk at `offset` (so that a lie passes the checksum)."""
    b = bytearray(data)
    stored = struct.unpack_from("<I", b, offset + 16)[0]
    crc = zlib.crc32(bytes(b[offset + 8:offset + 40]))
    crc = zlib.crc32(bytes(b[offset + 40:offset + 40 + stored]), crc)
    struct.pack_into("<I", b, offset + 4, crc & 0xFFFFFFFF)
    return bytes(b)

first = 64
stored = struct.unpack_from("<I", base, first + 16)[0]
for cut in (1, 8, 63, 64, 65, 100, 104, len(base) // 2, len(base) - 6, len(base) - 1):
    put("cut-%d.adtrace" % cut, base[:cut])
put("flip-payload.adtrace", flip(base, first + 40 + stored // 2))
put("flip-chunk-magic.adtrace", flip(base, first + 1))
put("flip-chunk-stored-size.adtrace", flip(base, first + 17))
put("flip-chunk-raw-size.adtrace", flip(base, first + 21))
put("flip-chunk-thread.adtrace", flip(base, first + 9))
put("flip-file-header.adtrace", flip(base, 20))
put("bad-version.adtrace", base[:8] + struct.pack("<I", 7) + base[12:])
# Lies that pass the checksum: event count, raw size, sequence number, a huge name length.
b = bytearray(base); struct.pack_into("<I", b, first + 32, 0xFFFFFFFF)
put("lie-event-count.adtrace", recrc(bytes(b), first))
b = bytearray(base); struct.pack_into("<I", b, first + 36, 0x7FFFFFFF)
put("lie-sequence.adtrace", recrc(bytes(b), first))
b = bytearray(base); struct.pack_into("<II", b, first + 12, 1, stored)  # claims zstd
put("lie-zstd-flag.adtrace", recrc(bytes(b), first))
b = bytearray(base); b[first + 40 + 2] = 0x09; b[first + 40 + 4:first + 40 + 7] = b"\xff\xff\x7f"
put("lie-name-length.adtrace", recrc(bytes(b), first))
put("empty", b"")
put("text.txt", b"this is not a trace\n" * 10)
put("magic-only", b"ADPROFTR")
put("elf-head", open("/bin/ls", "rb").read(4096))
PY
ls -la "$here"
