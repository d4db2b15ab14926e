// Where `adprof report`'s time goes: reads a trace RUNS times through each stage alone — the
// reader (decompress, decode, merge threads), then reader + Replay, then the whole analyze() —
// and prints the median CPU nanoseconds per event of each.
// usage: profiler_bench_read TRACE [RUNS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <span>
#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace {

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename F>
double median_ns_per_event(int runs, uint64_t events, F &&stage) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    double start = cpu_seconds();
    stage();
    t.push_back((cpu_seconds() - start) * 1e9 / static_cast<double>(events));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: profiler_bench_read TRACE [RUNS]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int runs = argc > 2 ? std::max(1, atoi(argv[2])) : 5;
  try {
    uint64_t events = 0;
    {
      adprof::TraceReader r(path);
      adprof::Event e;
      while (r.next(e)) ++events;
    }
    if (events == 0) {
      fprintf(stderr, "profiler_bench_read: '%s' has no events\n", path.c_str());
      return 2;
    }
    double read = median_ns_per_event(runs, events, [&] {
      adprof::TraceReader r(path);
      uint64_t n = 0;
      for (std::span<const adprof::Event> run; !(run = r.next_events()).empty();) n += run.size();
      if (n != events) abort();
    });
    double replay = median_ns_per_event(runs, events, [&] {
      adprof::TraceReader r(path);
      adprof::Replay replay;
      for (std::span<const adprof::Event> run; !(run = r.next_events()).empty();)
        for (const adprof::Event &e : run) replay.apply(e);
    });
    double analyze =
        median_ns_per_event(runs, events, [&] { adprof::analyze(path, adprof::AnalyzeOptions{}); });
    printf("%llu events, median of %d runs, CPU ns per event:\n",
           static_cast<unsigned long long>(events), runs);
    printf("  read (decompress, decode, merge)  %7.1f\n", read);
    printf("  read + replay                     %7.1f\n", replay);
    printf("  analyze (adprof report's work)    %7.1f\n", analyze);
  } catch (const std::exception &ex) {
    fprintf(stderr, "profiler_bench_read: %s\n", ex.what());
    return 2;
  }
  return 0;
}
