// libFuzzer target for the trace reader: the input is a trace file; the reader must refuse it
// with TraceError or read every event, and the replay must digest whatever it yields.
// Build: configure with -DCMAKE_CXX_COMPILER=clang++ -DADPROF_FUZZ=ON, then
//   build/fuzz/tests/profiler/profiler_trace_reader_fuzz -max_len=65536 CORPUS_COPY
//   tests/profiler/corpus
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "adprof/replay.h"
#include "adprof/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The reader works on files (pread): each input goes through one in the fuzzer's own tmpfs.
  static const std::string path = "/dev/shm/adprof-fuzz-" + std::to_string(getpid());
  FILE *f = fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  try {
    adprof::TraceReader reader(path);
    adprof::Replay replay;
    adprof::Event e;
    uint64_t n = 0;
    while (reader.next(e) && n < 10000000) {
      replay.apply(e);
      ++n;
    }
    // A second pass as analyze() reads: runs of events, heap events on the replay's fast path.
    reader.rewind();
    adprof::Replay fast;
    for (std::span<const adprof::Event> run; !(run = reader.next_events()).empty();)
      for (const adprof::Event &ev : run) {
        if (adprof::Replay::is_heap_event(ev))
          fast.apply_heap(ev);
        else
          fast.apply(ev);
      }
  } catch (const adprof::TraceError &) {
  }
  return 0;
}
