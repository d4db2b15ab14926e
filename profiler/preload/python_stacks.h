// Python frames in call stacks (`adprof run --stacks` on CPython 3.11-3.13; docs/STACKS.md,
// "Python frames"): a per-thread shadow stack of Python frames kept by a profile function that
// the Python package installs (python/adprof/_pystacks.py calls adprof_python_stacks_thread()
// through ctypes, GIL held), read by capture_stack() on every allocation. Encoding:
// trace_format.h, "Python frames".
#pragma once

#include <cstdint>

#include "recorder.h"

namespace adprof::preload {

struct PyShadow;

// The thread's Python frames mixed into a native stack's hash (`native` itself when the thread
// has none). Hot path: a few loads and, for the innermost frame's current line, CPython's
// PyFrame_GetLineNumber (a walk of the code's line table: no lock, allocation or syscall).
uint64_t python_stack_hash(ThreadState &ts, uint64_t native);
// At a stack's definition (cold): `frames` (native, innermost first, `count` of them, room for
// kMaxStackFrames) with the thread's Python frames put in place of the native frames from the
// innermost eval loop frame outward (the interpreter's own); the new count.
int splice_python_frames(ThreadState &ts, uint64_t *frames, int count);
// A thread's end: its shadow stack goes back.
void release_python_shadow(ThreadState &ts);

}  // namespace adprof::preload
