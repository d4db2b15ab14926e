// Call stacks of allocations (`adprof run --stacks`, ADPROF_STACKS=1): what the recorder needs
// beyond capture_stack() (recorder.h). Encoding: trace_format.h, "Call stacks".
#pragma once

#include "recorder.h"

namespace adprof::preload {

// Before the trace header is written: loads libunwind (RTLD_LOCAL, so that its _Unwind_*
// never stand in for the program's unwinder), sets its per-thread cache and warms it up, finds
// the profiler's own code (frames left out). False: stacks cannot be recorded (said once).
bool init_stacks();
// Once recording: the mappings of every object loaded now (kMappingOperand events).
void record_initial_mappings(ThreadState &ts);
// A thread's end: its stack table goes back to the pool (its ids stay valid: ids are global).
void release_stack_table(ThreadState &ts);
// After a dlclose: records the unload and renews every thread's table.
void note_unload();
// Whether `code` lies in libunwind (loaded by init_stacks): its pipe is the profiler's.
bool called_from_unwinder(const void *code);

}  // namespace adprof::preload
