// What the recorder's own files share: its state and the slow paths one file calls in another.
// The hooks see recorder.h only. The files, in the order a trace lives:
//   recorder.cpp       the life cycle (its rules), start-up, the hot path's out-of-line helpers
//   trace_file.cpp     settings, the trace file (created exclusively) and its header
//   buffer_pool.cpp    the buffer pool, the queue to the writer, the thread registry, refill
//   chunk_writer.cpp   chunk compression and writing, the chunk counters
//   writer_thread.cpp  the writer thread: queue, counter samples, snapshots of idle threads
//   step_window.cpp    --steps A:B: buffers outside the window folded into per-step summaries
//   recording_end.cpp  the trace's ending: exit, _exit, quick_exit, exec, fork, fatal signals
//   fork_child.cpp     a fork child's own recording, started afresh (each file's part of it:
//                      its *_in_fork_child function)
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <zstd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "chunk_columns.h"
#include "recorder.h"

namespace adprof::preload {

// ---- recorder.cpp: the recording's state -----------------------------------------------------

enum State : int { kInert = 0, kRecording = 1, kStopped = 2, kForkChild = 3, kFinished = 4 };

extern std::atomic<int> g_state;
extern uint64_t g_start_ns;
extern uint64_t g_start_ticks;
extern uint64_t g_start_wall_ns;     // CLOCK_REALTIME at g_start_ticks (the header's)
extern uint64_t g_ticks_per_second;  // calibrated once, by the first image (the header's)
extern size_t g_page_size;
// The process this memory is: the one that started recording, or a fork child (set by the fork
// handler in every child). A vfork child runs in its parent's memory, with another pid: it must
// neither finish the recording nor write what the parent holds (in_vfork_child, recorder.h).
extern pid_t g_process_pid;

// One line on stderr ("adprof: " a b c) without allocating.
void say(const char *a, const char *b = "", const char *c = "");

// ---- trace_file.cpp: settings and the trace file ---------------------------------------------

// The trace file: its absolute path and identity, so that a descriptor the program closed or
// replaced behind the hooks' back is noticed before a write (own_fds.h).
extern char g_trace_path[4096];
extern dev_t g_trace_dev;
extern ino_t g_trace_ino;
// ADPROF_OUTPUT, absolute: a process started by fork+exec writes ADPROF_OUTPUT.<pid>.
extern char g_output_base[4096];
// ADPROF_FORK (default 1): a fork child records into a trace of its own (fork_child.cpp);
// 0: it is not traced unless it execs.
extern bool g_trace_forks;
// The trace file: open (every image but a fork child), or a fork child's, created before its
// first chunk (pending), being created, or given up (the child exec'd first, or it could not be
// created: nothing is written).
enum TraceFile : int { kTraceOpen = 0, kTracePending = 1, kTraceCreating = 2, kTraceAbandoned = 3 };
extern std::atomic<int> g_trace_file;

// The environment's settings (ADPROF_OUTPUT and the rest); `path` gets this process's trace
// name. False (said on stderr when malformed): do not record.
bool read_settings(char *path, size_t path_size, bool &want_stacks);
int create_trace_file(char *path, size_t path_size);
bool absolute_path(const char *path, char *out, size_t out_size);
uint64_t calibrate_ticks_per_second();
uint64_t wall_clock_ns();
bool write_file_header();
off_t trace_size();
// Before a chunk is written: true when the trace can take it; a fork child's pending trace is
// created first (false when it cannot be: recording stops, said once).
bool trace_ready();

// ---- buffer_pool.cpp: buffers, the writer's queue, the thread registry -----------------------

// The queue of full buffers for the writer and the pool of free ones, under g_queue_mutex.
extern pthread_mutex_t g_queue_mutex;
extern pthread_cond_t g_work_cond;   // writer waits for buffers
extern pthread_cond_t g_space_cond;  // producers wait when it lags
extern Buffer *g_full_head;
extern Buffer *g_full_tail;
extern size_t g_full_count;
extern bool g_stop_writer;
// Its destructor flushes a thread's buffer at thread exit (on_thread_exit).
extern pthread_key_t g_thread_key;

void recycle_buffer(Buffer *b);
Buffer *take_queue_locked();
// Seals the thread's buffer and queues it for the writer; the thread has none after.
void hand_off(ThreadState &ts);
// hand_off while the recording is on; false when it is not (the buffer stays the thread's, and
// published: the final snapshots copy its complete events). The end of the recording leaves
// kRecording, then waits for the hand-offs that read it as on (wait_for_hand_offs) before it
// writes the queue and the final snapshots: a hand-off that reached the queue after those was
// lost, its buffer no longer published either
// (Lifecycle.HandOffUnderWayWhenTheTraceIsFinishedLosesNothing).
bool hand_off_while_recording(ThreadState &ts);
void wait_for_hand_offs();
void on_thread_exit(void *arg);

// The threads with a buffer (registry), for the snapshots of their complete events.
extern pthread_mutex_t g_registry_mutex;
extern uint32_t g_registry_slots;
// The complete events a registered thread has published, copied into `copy` as a raw chunk
// (tags, then bodies). With `idle_only`, only a thread that kept the same buffer through a
// whole flush interval counts (one that records starts a new buffer after each tick). Under
// g_registry_mutex; marks what it copied, so the same events are not written twice.
struct Copied {
  Buffer *buffer;
  uint32_t events, bytes;
};
bool copy_published(uint32_t slot, uint8_t *copy, bool idle_only, Copied *out);

// The time before which no registered thread holds an event the writer has not read (taken
// before the writer takes the queue), leaving out threads idle for `idle_ns` (buffer_pool.cpp);
// UINT64_MAX: none holds any. On the writer thread.
uint64_t oldest_unread_ticks(uint64_t now_ns, uint64_t idle_ns);

// ---- chunk_writer.cpp: compressing and writing chunks ----------------------------------------

// ADPROF_ZSTD_LEVEL, one level for every part of a chunk; kDefaultZstdLevel: each part its own
// (compress_chunk).
constexpr int kDefaultZstdLevel = 1000;
extern int g_zstd_level;
// What the footer counts.
extern std::atomic<uint64_t> g_events_written;
extern std::atomic<uint64_t> g_chunks_written;
extern std::atomic<uint64_t> g_events_dropped;

// Compresses a chunk (its tags, then its bodies) as zstd frames into `z`, columnar
// (chunk_columns.h) when the bodies can be split: the tags, the column directory and each
// column are frames of their own, so that each gets its own entropy tables; the reader
// decompresses them in one call. Returns the stored size (0: write the chunk plain) and sets
// the chunk's flags and raw size.
//
// Two zstd levels: every part at level 1 first; a part that shrank to less than 1/16 (a
// program's allocation pattern repeating over thousands of events) is compressed again at level
// 5, whose match finder (a hash chain) finds the repeats that level 1's single probe misses, and
// the smaller frame kept. On the Python JSON run of docs/PERFORMANCE.md the tags take 0.0039
// B/event instead of 0.0189, for 0.5 ns/event more of the writer's CPU; a part that level 1
// cannot shrink much (the storm's sizes and slots: random) costs level 5 most and gains least,
// and is not tried. ADPROF_ZSTD_LEVEL sets one level for every part.
struct Compressor {
  ZSTD_CCtx *cctx[2] = {};  // [kFirstPass]: level 1 (or ADPROF_ZSTD_LEVEL); [kSecondPass]: 5,
                            // made only without ADPROF_ZSTD_LEVEL
  uint8_t *z = nullptr;     // compressed output
  size_t z_cap = 0;
  uint8_t *columns = nullptr;  // the columnar chunk
  size_t columns_cap = 0;
  fmt::LiveOrder order;  // a chunk's live allocations, to write frees by rank (chunk_columns.h)
};

bool prepare_compressor(Compressor &k, uint8_t **snapshot_copy);
size_t compress_chunk(Compressor &k, const uint8_t *tags, uint32_t events, const uint8_t *bodies,
                      uint32_t body_len, uint32_t *flags, uint32_t *raw);
bool write_all(const iovec *iov, int count, bool in_handler = false);
bool write_chunk(uint32_t tid, uint32_t seq, uint64_t base_ts, uint32_t events, uint32_t flags,
                 const uint8_t *payload, uint32_t stored, uint32_t raw, bool in_handler = false);
void seal(Buffer *b, uint32_t events, uint32_t body_bytes);
void write_buffer(Buffer *b, Compressor &k);
void write_buffer_whole(Buffer *b, Compressor &k);  // never folded (step_window.h)
void write_buffers(Buffer *list, Compressor &k);
void stop_recording(const char *what, const char *detail);
void stop_for_memory();

// ---- writer_thread.cpp: the writer thread ----------------------------------------------------

extern int g_sample_ms;  // ADPROF_SAMPLE_MS: how often the writer samples the counters
// When the main thread left (pthread_exit; on_thread_exit), 0: it has not. The writer then
// looks for the process's end every millisecond for a while (writer_thread.cpp).
extern std::atomic<uint64_t> g_main_thread_left_ns;
extern pthread_t g_writer;
extern std::atomic<bool> g_writer_running;
// The writer thread's own: it never waits for room in the queue it empties (refill).
extern thread_local bool t_is_writer __attribute__((tls_model("initial-exec")));
extern Compressor g_compressor;   // the writer's (prepare_compressor)
extern uint8_t *g_snapshot_copy;  // the writer's scratch for snapshots of idle threads
extern uint8_t *g_final_copy;     // the same for the final snapshots (finish, a handler)

bool start_writer();
void stop_writer();

// ---- recording_end.cpp: the trace's ending ---------------------------------------------------

void on_fork_child();
void finish_at_quick_exit();

// ---- fork_child.cpp and each file's part: a fork child's own recording ----------------------

// In the child, from the fork handler: a fresh recording (its trace pending) of this process.
// False: the child is not recorded.
bool record_fork_child(pid_t parent);
// Each file's state, made the child's: its locks new (another thread of the parent may have
// held one at the fork, for good in the child), what they guarded abandoned or emptied.
void reset_trace_file_in_fork_child();
void reset_buffers_in_fork_child(ThreadState &ts);
void reset_chunk_writer_in_fork_child();
void reset_writer_in_fork_child();
void reset_recording_end_in_fork_child();
void reset_own_fds_in_fork_child();
void reset_stacks_in_fork_child(ThreadState &ts);
// The names interned so far (the table is the parent's copy), written again into the child's
// trace: the ids a program cached stay valid.
void reset_names_in_fork_child(ThreadState &ts);

}  // namespace adprof::preload
