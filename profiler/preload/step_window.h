// A window of steps (`adprof run --steps A:B`, ADPROF_STEPS=A:B): full events for steps A to
// B-1, a summary per step outside it (trace_format.h, "Step windows"). The recording threads
// record as always (the allocation hooks know nothing of it); adprof_step() publishes each
// step's mark, and the writer thread, off the hot path, folds the buffers outside the window.
#pragma once

#include <cstdint>

namespace adprof::preload {

struct Buffer;
struct Compressor;

// ADPROF_STEPS was given (read once, before recording starts; never changed after).
extern bool g_step_window;

// Reads ADPROF_STEPS ("A:B", 0 <= A < B) and reserves the marks' ring. False: malformed (said
// on stderr; the recording goes on without a window).
bool configure_step_window();

// A fork child (fork_child.cpp): the parent writer's window state abandoned; the child's writer
// configures a window of its own over the child's own steps (start_writer).
void reset_step_window_in_fork_child();

// adprof_step(): the step `step` starts at `ticks` (any thread; a lock-free ring the writer
// reads). Not the allocation hook: a few atomic operations and stores. True when the mark is the
// process's first, or opens or closes the window: then every thread hands its buffer over at its
// next event (the flush epoch), so that the chunks written whole before the first mark end
// there, and the window's chunks begin at its edges.
// `thread`: the calling thread's index, UINT32_MAX when it has none yet.
bool publish_step_mark(uint64_t step, uint64_t ticks, uint32_t thread);

// The writer's side, on the writer thread (or the thread that ends the recording once the
// writer has stopped): writes `b` whole, or folded (above). Chunks of the summaries and of the
// live set go out through `k` too.
void write_windowed_buffer(Buffer *b, Compressor &k);
// The steps over for long enough that no thread's events of theirs can still be on their way
// (every thread hands its buffer over at each flush tick) get their summaries written.
void write_settled_steps(Compressor &k);
// At the end of the recording: every step's summary written.
void write_remaining_steps(Compressor &k);

}  // namespace adprof::preload
