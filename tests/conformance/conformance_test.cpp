// The conformance suite (docs/CONFORMANCE.md): real programs run three times, plainly, under
// `adprof run`, and counted and recorded at once: an independent counter (counting_shim.c) in
// front of adprof's interposer in the same process, so that both count the same run (two runs
// of a real program need not make the same calls: cp's count depends on its files' inode
// numbers). Per process (an exec'd child writes its own trace and counts file), adprof's
// allocations and frees must be the counter's, adprof must see no free of a block it did not
// record, and the program's stdout and exit status must not change.
//
// What the two counts mean (counts_file.h): one allocation per successful malloc, calloc,
// realloc to a new block, reallocarray, posix_memalign, aligned_alloc, memalign, valloc,
// pvalloc or operator new; one free per free or delete of a non-null pointer and per realloc
// that released its block. The counter counts `new` once, through its own operator new on
// malloc, whichever library would otherwise serve it; adprof must record it once too.
//
// Windows: adprof records from its library's constructor until every library's destructor has
// run (an exit handler its destructor registers). The counter, initialised right after the
// interposer (which follows it in LD_PRELOAD), closes its window the same way, right after;
// the allocations it saw before its constructor (libstdc++'s emergency exception pool, made
// when libstdc++ is initialised) and anything after the window are outside both. They are
// printed, not compared; a free inside the window of a block from before it would show as an
// unmatched free in adprof.
#include <gtest/gtest.h>

#include <array>
#include <cinttypes>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "../support/process.h"
#include "../support/same_lines.h"
#include "../support/sanitizer_skip.h"
#include "counts_file.h"

namespace {

using namespace adprof_test;
using nlohmann::json;

// One process image's counts, from adprof's trace or from the counter's file.
struct ImageCounts {
  uint64_t pid = 0;
  int image = 0;  // 0, then 1, 2, ... for the images that follow an exec in the same process
  std::string name;
  uint64_t allocations = 0, frees = 0;
  // adprof only
  uint64_t unmatched_frees = 0;
  std::string end;
  uint64_t damaged_chunks = 0;
  // counter only
  uint64_t allocations_before_start = 0, allocations_after_finish = 0, frees_after_finish = 0;
  uint64_t new_calls = 0;
  std::array<uint64_t, CK_KINDS> calls{};  // by kind, from the counter's start to its finish
};

bool by_pid_then_image(const ImageCounts &a, const ImageCounts &b) {
  return a.pid != b.pid ? a.pid < b.pid : a.image < b.image;
}

// The image number of a file named PREFIX[.PID][.N] that belongs to process PID.
int image_of(const std::string &suffix, uint64_t pid) {
  auto dot = suffix.rfind('.');
  if (dot == std::string::npos) return 0;
  uint64_t last = std::stoull(suffix.substr(dot + 1));
  return last == pid ? 0 : static_cast<int>(last);
}

std::vector<std::string> files_starting(const std::string &dir, const std::string &prefix) {
  std::vector<std::string> out;
  for (const auto &name : files_in(dir))
    if (name == prefix || name.rfind(prefix + ".", 0) == 0) out.push_back(name);
  return out;
}

// adprof's counts, read with the CLI (`adprof report --json`) from every trace of the run.
std::vector<ImageCounts> read_traces(const std::string &dir, const std::string &prefix) {
  std::vector<ImageCounts> out;
  for (const auto &name : files_starting(dir, prefix)) {
    Result r = run_cli({"report", "--json", dir + "/" + name});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    json j = json::parse(r.out, nullptr, false);
    if (j.is_discarded()) {
      ADD_FAILURE() << name << ": adprof report printed no JSON: " << r.err;
      continue;
    }
    ImageCounts c;
    c.pid = j["trace"]["pid"].get<uint64_t>();
    c.image = image_of(name.substr(prefix.size()), c.pid);
    for (const json &thread : j["trace"]["thread_names"])  // the first but the recorder's own
      if (thread.get<std::string>() != "adprof-writer") {
        c.name = thread.get<std::string>();
        break;
      }
    c.allocations = j["totals"]["allocations"].get<uint64_t>();
    c.unmatched_frees = j["totals"]["unmatched_frees"].get<uint64_t>();
    // every free the trace holds: of blocks it recorded, and of blocks it did not
    c.frees = j["totals"]["frees"].get<uint64_t>() + c.unmatched_frees;
    c.end = j["trace"]["end"].get<std::string>();
    c.damaged_chunks =
        j["trace"]["corrupt_chunks"].get<uint64_t>() + j["trace"]["missing_chunks"].get<uint64_t>();
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), by_pid_then_image);
  return out;
}

// The counter's counts, from every counts file of the run, over adprof's window.
std::vector<ImageCounts> read_counts(const std::string &dir, const std::string &prefix) {
  std::vector<ImageCounts> out;
  for (const auto &name : files_starting(dir, prefix)) {
    std::string bytes = read_file(dir + "/" + name);
    counts_file f{};
    if (bytes.size() != sizeof f) {
      ADD_FAILURE() << name << ": " << bytes.size() << " bytes, not a counts file";
      continue;
    }
    memcpy(&f, bytes.data(), sizeof f);
    EXPECT_EQ(f.magic, COUNTS_FILE_MAGIC) << name;
    EXPECT_EQ(f.started, 1u) << name << ": the counter's constructor did not run";
    ImageCounts c;
    c.pid = f.pid;
    c.image = image_of(name.substr(prefix.size()), c.pid);
    c.name = std::string(f.comm, strnlen(f.comm, sizeof f.comm));
    c.allocations_before_start = counts_allocations(f.at_start);
    // A process that ended without running destructors (_exit) counted to its end.
    const uint64_t *until = f.finished ? f.at_finish : f.calls;
    c.allocations = counts_allocations(until) - c.allocations_before_start;
    c.allocations_after_finish = counts_allocations(f.calls) - counts_allocations(until);
    c.frees = counts_frees(until) - counts_frees(f.at_start);
    c.frees_after_finish = counts_frees(f.calls) - counts_frees(until);
    c.new_calls = f.calls[CK_NEW];
    for (int k = 0; k < CK_KINDS; ++k) c.calls[k] = until[k] - f.at_start[k];
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), by_pid_then_image);
  return out;
}

struct Program {
  std::vector<std::string> argv;  // "@DIR@" stands for the run's own directory
  std::vector<std::pair<std::string, std::string>> env;
  std::function<void(const std::string &dir)> prepare;        // the run's input, made afresh
  std::function<void(const std::string &trace)> check_trace;  // more checks of the root trace
};

struct Run {
  Result result;
  // each process image's counts, from the counts files and from the traces
  std::vector<ImageCounts> counted, recorded;
};

// Each run gets a directory of its own, of the same length (the paths a program handles are
// the same size), and the same environment variable names (a program such as Python copies
// its whole environment, one allocation per variable): the runs' stdout must agree. The
// variables that only adprof or only the counter reads are inert in the other runs.
// kCountedAndRecorded: LD_PRELOAD=counter:interposer with the settings `adprof run` gives.
enum class Mode { kPlain, kCountedAndRecorded, kRecorded };

SpawnOptions spawn_options(const Program &p, Mode mode, const TempDir &dir) {
  if (p.prepare) p.prepare(dir.path());
  SpawnOptions o;
  o.work_dir = dir.path();
  o.timeout_s = 240;
  // Without ASLR: where mappings land changes what some programs allocate (Python's pymalloc
  // callocs a 128 KiB node of its arena map when an arena lands in a new region: one
  // allocation more, never freed, in about 1 run of 40 of the numpy program).
  o.fixed_layout = true;
  auto with_dir = [&](std::string text) {
    for (size_t at; (at = text.find("@DIR@")) != std::string::npos;)
      text.replace(at, 5, dir.path());
    return text;
  };
  for (const auto &[name, value] : p.env) o.env.emplace_back(name, with_dir(value));
  const std::string counts = dir / "counts", trace = dir / "trace";
  o.env.emplace_back(COUNTS_ENV, counts);
  if (mode != Mode::kRecorded) {
    o.env.emplace_back("ADPROF_OUTPUT", trace);
    o.env.emplace_back("ADPROF_ROOT_PID", "1");  // no process is the root: each writes TRACE.<pid>
    o.env.emplace_back("ADPROF_RUN_ID", "1");
    if (mode == Mode::kCountedAndRecorded)
      o.env.emplace_back("LD_PRELOAD", std::string(CONFORMANCE_SHIM) + ":" + preload_path());
  } else {
    o.argv = {cli_path(), "run", "-o", trace, "--no-report", "--"};
  }
  for (const std::string &a : p.argv) o.argv.push_back(with_dir(a));
  return o;
}

// What a run left in `dir`, once it has ended with `result`.
Run finished_run(Mode mode, const TempDir &dir, Result result) {
  Run r;
  r.result = std::move(result);
  if (mode == Mode::kCountedAndRecorded) r.counted = read_counts(dir.path(), "counts");
  if (mode != Mode::kPlain) r.recorded = read_traces(dir.path(), "trace");
  return r;
}

Run run_program(const Program &p, Mode mode, const TempDir &dir) {
  return finished_run(mode, dir, run(spawn_options(p, mode, dir)));
}

// Per process: both counts over the recording window, and what the counter saw outside it
// (allocations before its start, allocations and frees after its finish) and of it, new calls.
std::string table(const std::vector<ImageCounts> &counted,
                  const std::vector<ImageCounts> &recorded) {
  std::string out =
      "  process         image | counter: allocs      frees | adprof: allocs      frees  "
      "unmatched | outside: before  after allocs/frees | new calls\n";
  char line[256];
  for (size_t i = 0; i < std::max(counted.size(), recorded.size()); ++i) {
    ImageCounts c = i < counted.size() ? counted[i] : ImageCounts{};
    ImageCounts a = i < recorded.size() ? recorded[i] : ImageCounts{};
    snprintf(line, sizeof line,
             "  %-15s %5d | %15" PRIu64 " %10" PRIu64 " | %14" PRIu64 " %10" PRIu64 " %10" PRIu64
             " | %15" PRIu64 " %6" PRIu64 "/%-6" PRIu64 "      | %9" PRIu64 "\n",
             c.name.c_str(), c.image, c.allocations, c.frees, a.allocations, a.frees,
             a.unmatched_frees, c.allocations_before_start, c.allocations_after_finish,
             c.frees_after_finish, c.new_calls);
    out += line;
  }
  return out;
}

// Trace I of TRACES is whole: complete, or closed by an exec that the process's next image
// follows; undamaged; no free of a block it did not record.
void expect_whole(const std::vector<ImageCounts> &traces, size_t i, const std::string &process) {
  const ImageCounts &a = traces[i];
  const bool exec_footer = a.end.find("exec") != std::string::npos;
  const bool next_image =
      i + 1 < traces.size() && traces[i + 1].pid == a.pid && traces[i + 1].image == a.image + 1;
  if (exec_footer)
    EXPECT_TRUE(next_image) << process << ": the trace ends with an exec footer, but the process "
                            << "did not exec (a vfork child's exec ended the parent's recording?)";
  else
    EXPECT_EQ(a.end, "complete") << process;
  EXPECT_EQ(a.damaged_chunks, 0u) << process;
  EXPECT_EQ(a.unmatched_frees, 0u)
      << process << ": frees of blocks allocated before recording (or lost)";
}

// Returns the counter's counts.
std::vector<ImageCounts> check_program(const Program &p) {
  TempDir plain_dir, both_dir, recorded_dir;
  Run plain = run_program(p, Mode::kPlain, plain_dir);
  Run both = run_program(p, Mode::kCountedAndRecorded, both_dir);
  Run recorded = run_program(p, Mode::kRecorded, recorded_dir);
  EXPECT_TRUE(plain.result.exited && both.result.exited && recorded.result.exited)
      << plain.result.err << both.result.err << recorded.result.err;

  // The program's behaviour: unchanged by either.
  EXPECT_EQ(recorded.result.exit_code, plain.result.exit_code) << recorded.result.err;
  EXPECT_EQ(both.result.exit_code, plain.result.exit_code) << both.result.err;
  EXPECT_EQ(recorded.result.out, plain.result.out);
  EXPECT_EQ(both.result.out, plain.result.out);

  // The counter's counts and adprof's of the same run: the same processes, in the order they
  // started, with the same allocations and frees.
  std::string counts_table = table(both.counted, both.recorded);
  std::cout << counts_table;
  EXPECT_FALSE(both.counted.empty());
  EXPECT_EQ(both.recorded.size(), both.counted.size()) << counts_table;
  if (both.recorded.size() != both.counted.size()) return both.counted;
  for (size_t i = 0; i < both.counted.size(); ++i) {
    const ImageCounts &c = both.counted[i], &a = both.recorded[i];
    SCOPED_TRACE(counts_table);
    std::string process = c.name + " (process " + std::to_string(i) + ")";
    if (a.allocations + a.frees > 0) {  // else no thread was named
      EXPECT_EQ(a.name, c.name);
    }
    EXPECT_EQ(a.image, c.image) << process;
    expect_whole(both.recorded, i, process);
    EXPECT_EQ(a.allocations, c.allocations)
        << process << ": adprof recorded " << a.allocations << " allocations, the counter counted "
        << c.allocations;
    EXPECT_EQ(a.frees, c.frees) << process << ": adprof recorded " << a.frees
                                << " frees, the counter counted " << c.frees;
  }

  // `adprof run` (the interposer alone, as users run it): the same processes, each trace whole.
  // Its counts are another run's, so they are printed, not compared.
  std::cout << "  adprof run:";
  for (const ImageCounts &a : recorded.recorded)
    std::cout << " " << a.name << " " << a.allocations << "/" << a.frees;
  std::cout << " (allocations/frees)\n";
  EXPECT_EQ(recorded.recorded.size(), both.recorded.size()) << counts_table;
  for (size_t i = 0; i < recorded.recorded.size(); ++i) {
    const ImageCounts &a = recorded.recorded[i];
    std::string process = "adprof run: " + a.name + " (process " + std::to_string(i) + ")";
    if (i < both.recorded.size() && a.allocations + a.frees > 0 &&
        both.recorded[i].allocations + both.recorded[i].frees > 0) {
      EXPECT_EQ(a.name, both.recorded[i].name) << process;
      EXPECT_EQ(a.image, both.recorded[i].image) << process;
    }
    expect_whole(recorded.recorded, i, process);
  }
  if (p.check_trace) p.check_trace(recorded_dir / "trace");
  return both.counted;
}

bool runs(const std::vector<std::string> &argv) {
  SpawnOptions o;
  o.argv = argv;
  o.timeout_s = 60;
  Result r = run(o);
  return r.exited && r.exit_code == 0;
}

std::string programs_dir() { return CONFORMANCE_PROGRAMS; }

const std::vector<std::pair<std::string, std::string>> kPythonEnv = {
    {"PYTHONHASHSEED", "0"},           // no hash randomisation
    {"PYTHONDONTWRITEBYTECODE", "1"},  // the first run must not differ from the later ones
    {"OPENBLAS_NUM_THREADS", "1"},     // one BLAS thread: no scheduling in the counts
    {"OMP_NUM_THREADS", "1"},
};

// ---- the programs ----------------------------------------------------------------------------

TEST(Conformance, CounterLoadsTheInterposersLibraries) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!fs::exists("/usr/bin/readelf")) GTEST_SKIP() << "readelf (binutils) is not installed";
  auto needed = [](const std::string &lib) {
    SpawnOptions o;
    o.argv = {"/usr/bin/readelf", "-d", lib};
    std::vector<std::string> out;
    for (const auto &line : lines_of(run(o).out))
      if (auto at = line.find("(NEEDED)"); at != std::string::npos) out.push_back(line.substr(at));
    return out;
  };
  std::vector<std::string> interposer = needed(preload_path());
  ASSERT_FALSE(interposer.empty());
  EXPECT_EQ(needed(CONFORMANCE_SHIM), interposer)
      << "tests/conformance/CMakeLists.txt must link the counter with the interposer's libraries";
}

// The counter itself, on a program that calls every entry point a known number of times; then
// adprof against it as for the other programs.
TEST(Conformance, EveryEntryPoint) {
  ADPROF_SKIP_IF_SANITIZED();
  Program p;
  p.argv = {CONFORMANCE_ENTRY_POINTS};
  std::vector<ImageCounts> counted = check_program(p);
  ASSERT_EQ(counted.size(), 1u);
  const auto &calls = counted[0].calls;
  EXPECT_EQ(calls[CK_MALLOC], 1u + 4u) << "malloc, and the four unaligned operator new forms";
  EXPECT_EQ(calls[CK_CALLOC], 1u);
  EXPECT_EQ(calls[CK_REALLOC_NULL], 2u) << "realloc and reallocarray of NULL";
  EXPECT_EQ(calls[CK_REALLOC_MOVE], 2u);
  EXPECT_EQ(calls[CK_REALLOC_FREE], 1u);
  EXPECT_EQ(calls[CK_POSIX_MEMALIGN], 1u);
  EXPECT_EQ(calls[CK_ALIGNED_ALLOC], 1u + 4u) << "aligned_alloc, and the aligned new forms";
  EXPECT_EQ(calls[CK_MEMALIGN], 1u);
  EXPECT_EQ(calls[CK_VALLOC], 1u);
  EXPECT_EQ(calls[CK_PVALLOC], 1u);
  EXPECT_EQ(calls[CK_NEW], 8u);
  EXPECT_EQ(calls[CK_DELETE], 8u);
  EXPECT_EQ(calls[CK_FREE], 8u + 8u) << "eight free calls of a block, and the eight deletes";
  EXPECT_EQ(counted[0].allocations, 19u);
  EXPECT_EQ(counted[0].frees, 19u);
}

TEST(Conformance, PythonTorchTraining) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!runs({"/usr/bin/python3", "-c", "import torch"}))
    GTEST_SKIP() << "Debian's python3-torch is not installed (scripts/setup.sh installs it)";
  Program p;
  p.argv = {"/usr/bin/python3", programs_dir() + "/torch_train.py"};
  p.env = kPythonEnv;
  // Exact though Highway's hwy::Measure (libhwy, which libtorch_cpu loads through libjxl) runs
  // a timing loop when it is loaded, calling new until its measurements settle: up to 132 calls
  // more or fewer in 1.1 million from run to run; the counter counts the run adprof records.
  check_program(p);
}

// The runs are made without address-space randomisation (run_program): the numpy program's
// counts differed by one allocation in about 1 run of 40 with it (docs/CONFORMANCE.md,
// "Determinism"). The three runs of a program printing where its stack is must agree.
TEST(Conformance, RunsShareOneAddressSpaceLayout) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!fs::exists("/usr/bin/grep")) GTEST_SKIP() << "grep is not installed";
  Program p;
  p.argv = {"/usr/bin/grep", "-F", "[stack]", "/proc/self/maps"};
  check_program(p);
}

TEST(Conformance, PythonNumpy) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!runs({"/usr/bin/python3", "-c", "import numpy"}))
    GTEST_SKIP() << "Debian's python3-numpy is not installed (scripts/setup.sh installs it)";
  Program p;
  p.argv = {"/usr/bin/python3", programs_dir() + "/numpy_work.py"};
  p.env = kPythonEnv;
  check_program(p);
}

TEST(Conformance, ThreadsAllocatingAndFreeingAcrossThreads) {
  ADPROF_SKIP_IF_SANITIZED();
  Program p;
  p.argv = {CONFORMANCE_THREADS};
  check_program(p);
}

TEST(Conformance, DlopenOfLibrariesThatAllocate) {
  ADPROF_SKIP_IF_SANITIZED();
  Program p;
  p.argv = {CONFORMANCE_DLOPEN_HOST, CONFORMANCE_CTOR_LIB, CONFORMANCE_NEW_LIB};
  // The small reproduction of new bypassing the interposer: the C++ library's new char[1 MiB],
  // twenty times a round for three rounds, are in the trace (all 60 MiB).
  p.check_trace = [](const std::string &trace) {
    Result dump = run_cli({"dump", trace});
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    int megabytes = 0;
    for (const auto &line : lines_of(dump.out))
      if (line.find(" alloc ") != std::string::npos &&
          line.find(" size=1048576 ") != std::string::npos)
        ++megabytes;
    EXPECT_EQ(megabytes, 3 * 20) << "operator new[] of 1 MiB in a dlopen'd C++ library";
  };
  check_program(p);
}

TEST(Conformance, GitCommitInAFreshRepository) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!fs::exists("/usr/bin/git")) GTEST_SKIP() << "git is not installed";
  Program p;
  // bash runs each git as a child process (each writes its own trace and counts file); bash
  // starts them with fork (dash, Debian's sh, uses vfork: see VforkThenExec). The files keep
  // their old modification time (cp -p): a file modified in the second the index was written
  // is "racily clean", and git status then reads and hashes it again, 50 allocations more,
  // in whichever run the commands happened to fit in one second. cp's count differs from run
  // to run by itself: it keeps its sources in a hash table of 79 buckets keyed by inode number,
  // and when the two files' inode numbers are equal modulo 79 the second insert mallocs an
  // overflow entry (16 bytes), 1 run in about 80; the test counts and records the same run.
  p.argv = {"/bin/bash", "-c",
            "cd @DIR@ && git init -q repo && cd repo && cp -p ../a.txt ../b.txt . && git add . && "
            "git commit -q -m conformance && git log --stat && git status --short"};
  p.env = {{"HOME", "@DIR@"},
           {"GIT_CONFIG_NOSYSTEM", "1"},
           {"GIT_AUTHOR_NAME", "Conformance"},
           {"GIT_AUTHOR_EMAIL", "conformance@example.com"},
           {"GIT_COMMITTER_NAME", "Conformance"},
           {"GIT_COMMITTER_EMAIL", "conformance@example.com"},
           {"GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z"},
           {"GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z"},
           {"GIT_PAGER", "cat"}};
  p.prepare = [](const std::string &dir) {
    std::string a, b;
    for (int i = 0; i < 2000; ++i) a += "line " + std::to_string(i * 7919 % 2000) + "\n";
    for (int i = 0; i < 300; ++i) b += "another line " + std::to_string(i) + "\n";
    write_file(dir + "/a.txt", a);
    write_file(dir + "/b.txt", b);
    for (const char *name : {"/a.txt", "/b.txt"})  // an hour old: never racily clean
      fs::last_write_time(dir + name, fs::file_time_type::clock::now() - std::chrono::hours(1));
  };
  check_program(p);
}

TEST(Conformance, SortAGeneratedFile) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!fs::exists("/usr/bin/sort")) GTEST_SKIP() << "sort (coreutils) is not installed";
  Program p;
  // One thread and a buffer of a fixed size (the default depends on the machine's memory),
  // small enough that sort spills to temporary files and merges them.
  p.argv = {"/usr/bin/sort", "--parallel=1", "-S", "256K", "-T", "@DIR@", "@DIR@/input.txt"};
  p.prepare = [](const std::string &dir) {
    std::string text;
    uint64_t state = 12345;
    for (int i = 0; i < 50000; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += "key" + std::to_string(state >> 40) + " value " + std::to_string(i) + "\n";
    }
    write_file(dir + "/input.txt", text);
  };
  check_program(p);
}

// A child made with vfork shares its parent's memory, and its exec runs the interposer's exec
// hook: it must not close the PARENT's trace (it did: the parent recorded nothing more). gcc's
// driver and collect2, and dash (sh), start their children this way.
TEST(Conformance, VforkThenExec) {
  ADPROF_SKIP_IF_SANITIZED();
  Program p;
  p.argv = {CONFORMANCE_VFORK_EXEC};
  check_program(p);
}

// A process that ends with _exit runs no destructor: the interposer's _exit hook must write
// the events since the last flush (all of them in a short process; they were lost) and the end
// record. dash and fork children end this way. (The counter's counts are in its mapped file.)
TEST(Conformance, QuickExit) {
  ADPROF_SKIP_IF_SANITIZED();
  Program p;
  p.argv = {CONFORMANCE_QUICK_EXIT};
  check_program(p);
}

// gcc's driver and collect2 use vfork (see VforkThenExec).
TEST(Conformance, GccCompilesAndLinksACProgram) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!fs::exists("/usr/bin/gcc")) GTEST_SKIP() << "gcc is not installed";
  Program p;
  // gcc runs cc1, as, collect2 and ld as child processes.
  p.argv = {"/usr/bin/gcc", "-O1", "-o", "@DIR@/hello", "@DIR@/hello.c"};
  p.env = {{"TMPDIR", "@DIR@"}};
  p.prepare = [](const std::string &dir) {
    write_file(dir + "/hello.c",
               "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
               "struct point { double x, y; };\n"
               "static int compare(const void *a, const void *b) {\n"
               "  return memcmp(a, b, sizeof(struct point));\n}\n"
               "int main(void) {\n  struct point p[16];\n"
               "  for (int i = 0; i < 16; ++i) p[i] = (struct point){i * 0.5, 16 - i};\n"
               "  qsort(p, 16, sizeof p[0], compare);\n"
               "  printf(\"%g %g\\n\", p[0].x, p[15].y);\n  return 0;\n}\n");
  };
  // Exact though cc1 keeps hash tables keyed by pointers, whose growth depends on where the
  // allocator put things (one calloc more or fewer from run to run): one run is counted.
  check_program(p);
}

// CPython's own tests of what a process sees of signals, faults and its children (Debian's
// libpython3.11-testsuite, which scripts/setup.sh installs), run alone and under `adprof run`
// (programs/cpython_tests.py prints each case's outcome): every case must end as it does alone,
// and every trace of the run be undamaged. They found
// that a SIGSEGV sent by raise let the program go on (test_faulthandler, 8 cases) and that a
// vfork child's SIG_DFL was written into its parent's view (test_subprocess's
// test_restore_signals). One difference is known and left out: test_pass_fds_redirected probes
// every descriptor number with fstat and finds the profiler's three (docs/RECORDING.md).
// test_signal's SiginterruptTest (34 s of sleeps) and ItimerTest and StressTest (timing) are
// not run.
TEST(Conformance, CPythonsOwnTestsOfSignalsFaultsAndChildren) {
  ADPROF_SKIP_IF_SANITIZED();
  if (!runs({"/usr/bin/python3", "-c",
             "import test.test_faulthandler, test.test_subprocess, test.test_signal"}))
    GTEST_SKIP() << "CPython's test suite is not installed (Debian's libpython3.11-testsuite; "
                    "scripts/setup.sh installs it)";
  Program p;
  p.argv = {"/usr/bin/python3", programs_dir() + "/cpython_tests.py", "test_faulthandler",
            "test_subprocess:POSIXProcessTestCase,-test_pass_fds_redirected",
            "test_signal:PosixTests,WakeupFDTests,WakeupSignalTests,PendingSignalsTests,"
            "RaiseSignalTest,PidfdSignalTest"};
  p.env = kPythonEnv;
  TempDir plain_dir, recorded_dir;
  // Both runs at once: the cases mostly wait (sleeps, time-outs, children), about 15 s of CPU
  // in a run of 75, one after the other.
  Child plain_child(spawn_options(p, Mode::kPlain, plain_dir));
  Child recorded_child(spawn_options(p, Mode::kRecorded, recorded_dir));
  const auto plain = finished_run(Mode::kPlain, plain_dir, plain_child.wait());
  const auto recorded = finished_run(Mode::kRecorded, recorded_dir, recorded_child.wait());
  ASSERT_TRUE(plain.result.exited && plain.result.exit_code == 0) << plain.result.err;
  const std::vector<std::string> cases = lines_of(plain.result.out);
  ASSERT_GT(cases.size(), 150u) << plain.result.out;
  EXPECT_TRUE(recorded.result.exited && recorded.result.exit_code == 0) << recorded.result.err;
  EXPECT_TRUE(same_lines(plain.result.out, recorded.result.out)) << recorded.result.err;
  EXPECT_GT(recorded.recorded.size(), 50u) << "the cases' child processes were not traced";
  std::cout << "  " << cases.size() << " cases, " << recorded.recorded.size()
            << " process images traced\n";
  // Undamaged; not compared: frees of unknown blocks (a child forked without exec frees what
  // it inherited) and the ends (cases kill their children).
  for (const ImageCounts &a : recorded.recorded)
    EXPECT_EQ(a.damaged_chunks, 0u) << a.name << " (pid " << a.pid << "): " << a.end;
}

}  // namespace
