// Where `adprof report`'s time goes: runs each stage RUNS times — the reader alone (decompress,
// decode, merge threads; its read-ahead thread included), the Replay alone on events held in
// memory, the whole analyze() — and prints the median nanoseconds per event of each.
// usage: profiler_bench_read TRACE [RUNS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"

namespace {

double wall_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

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
    // The replay alone, on events held in memory (at most the first 2 M): what the caller of
    // the reader spends, apart from the reader's own thread.
    std::vector<adprof::Event> held;
    std::deque<std::string> texts;
    std::deque<std::vector<uint64_t>> values;
    {
      adprof::TraceReader r(path);
      for (std::span<const adprof::Event> run;
           held.size() < (2u << 20) && !(run = r.next_events()).empty();)
        for (const adprof::Event &e : run) {
          adprof::Event &kept = held.emplace_back(e);
          if (!e.text().empty()) kept.set_text(texts.emplace_back(e.text()));
          if (!e.values().empty())
            kept.set_values(values.emplace_back(e.values().begin(), e.values().end()));
        }
    }
    double replay = median_ns_per_event(runs, held.size(), [&] {
      adprof::Replay replay;
      for (const adprof::Event &e : held) {
        if (adprof::Replay::is_heap_event(e))  // as analyze() does
          replay.apply_heap(e);
        else
          replay.apply(e);
      }
    });
    std::vector<double> walls, callers;
    double analyze = median_ns_per_event(runs, events, [&] {
      double start = wall_seconds(), caller = thread_cpu_seconds();
      adprof::analyze(path, adprof::AnalyzeOptions{});
      walls.push_back((wall_seconds() - start) * 1e9 / static_cast<double>(events));
      callers.push_back((thread_cpu_seconds() - caller) * 1e9 / static_cast<double>(events));
    });
    std::sort(walls.begin(), walls.end());
    std::sort(callers.begin(), callers.end());
    printf("%llu events, median of %d runs, ns per event:\n",
           static_cast<unsigned long long>(events), runs);
    printf("  read (decompress, decode, merge; CPU)          %7.1f\n", read);
    printf("  replay alone (first %zu events in memory; CPU) %7.1f\n", held.size(), replay);
    printf("  analyze, adprof report's work (CPU)             %7.1f\n", analyze);
    printf("  analyze: its caller's thread (replay, analysis; CPU) %7.1f\n",
           callers[callers.size() / 2]);
    printf("  analyze, adprof report's work (wall)            %7.1f\n", walls[walls.size() / 2]);
  } catch (const std::exception &ex) {
    fprintf(stderr, "profiler_bench_read: %s\n", ex.what());
    return 2;
  }
  return 0;
}
