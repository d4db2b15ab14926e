// The CLI on inputs it cannot trust: cut and damaged traces (a gate never passes on data that
// could not be read; the other commands warn), FIFOs, a full standard output, outputs that must
// stay untouched when the input fails, numeric options out of range. The traces are packed by
// hand (tests/profiler/trace_builder.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "../support/process.h"
#include "adprof/trace_reader.h"
#include "trace_builder.h"

namespace {

using namespace adprof_test;
using namespace ptest;  // trace_builder.h

std::string save(const TempDir &dir, const std::string &name, const std::vector<uint8_t> &b) {
  std::string path = dir / name;
  write_file(path, std::string(b.begin(), b.end()));
  return path;
}

// Thread 0 allocates 1000 bytes in its chunk 0 and 1 MiB in its chunk 1 (peak: 1 MiB + 1000).
struct TwoChunks {
  std::vector<uint8_t> whole, cut, first_lost;
  TwoChunks() {
    Bytes c0, c1;
    c0.tag(4, 1, 0);                                         // phase forward
    c0.tag(0, 0, 1).zz(0x1000).varint(1000).varint(8);       // alloc 1000
    c1.tag(0, 0, 1).zz(0x100000).varint(1 << 20).varint(0);  // alloc 1 MiB
    c1.tag(1, 0, 1).zz(0);                                   // its free
    std::vector<uint8_t> head = file_header(), k0 = chunk(0, 0, 1000, 2, c0.v, false),
                         k1 = chunk(0, 1, 2000, 2, c1.v, true), end = footer(4, 2);
    Bytes w, c, f;
    w.append(head).append(k0).append(k1).append(end);
    c.append(head).append(k0).append(std::vector<uint8_t>(k1.begin(), k1.begin() + 30));
    f.append(head).append(k1).append(footer(2, 1));
    whole = w.v;
    cut = c.v;
    first_lost = f.v;
  }
};

void expect_one_line(const std::string &err, const std::string &what) {
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find(what), std::string::npos) << err;
}

TEST(CliInput, CheckAndDiffRefuseCutOrDamagedRuns) {
  TempDir dir;
  TwoChunks t;
  const std::string whole = save(dir, "whole", t.whole), cut = save(dir, "cut", t.cut),
                    lost = save(dir, "lost", t.first_lost),
                    empty = save(dir, "empty", file_header());
  // The whole run fails a budget below its peak.
  Result r = run_cli({"check", whole, "--max-peak", "10KiB"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // A cut copy of it must not pass the same budget: an input error, one line.
  for (const std::string &run : {cut, lost}) {
    SCOPED_TRACE(run);
    r = run_cli({"check", run, "--max-peak", "10KiB"});
    EXPECT_EQ(r.exit_code, 2) << r.out;
    expect_one_line(r.err, "is incomplete, so no gate is checked");
    EXPECT_EQ(r.out, "");
  }
  // Explicitly allowed: checked on what was read, with a warning.
  r = run_cli({"check", cut, "--max-peak", "10KiB", "--allow-incomplete"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  expect_one_line(r.err, "adprof: warning: '" + cut + "' is incomplete: cut");
  // diff: a new run with no data at all does not pass 'peak > +5%'; nor does a cut base.
  r = run_cli({"diff", whole, empty, "--fail-if", "peak > +5%"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  expect_one_line(r.err, "'" + empty + "' is incomplete");
  r = run_cli({"diff", cut, whole, "--fail-if", "peak > +5%"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  expect_one_line(r.err, "'" + cut + "' is incomplete");
  r = run_cli({"diff", whole, whole, "--fail-if", "peak > +5%"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // The help says so.
  r = run_cli({"check", "--help"});
  EXPECT_NE(r.out.find("--allow-incomplete"), std::string::npos);
  r = run_cli({"diff", "--help"});
  EXPECT_NE(r.out.find("--allow-incomplete"), std::string::npos);
}

TEST(CliInput, EveryReaderWarnsOnCutOrDamagedTraces) {
  TempDir dir;
  TwoChunks t;
  const std::string cut = save(dir, "cut", t.cut), lost = save(dir, "lost", t.first_lost),
                    whole = save(dir, "whole", t.whole);
  for (const std::string &trace : {cut, lost}) {
    SCOPED_TRACE(trace);
    const std::string what =
        trace == cut ? "cut: a partial chunk header at byte " : "damaged: 1 chunk";
    const std::vector<std::vector<std::string>> commands = {
        {"report", trace},
        {"report", "--json", trace},
        {"whatif", trace},
        {"timeline", trace},
        {"export", trace, "--perfetto", dir / "p.json"},
        {"export", trace, "--folded", dir / "f.txt"}};
    for (const auto &args : commands) {
      SCOPED_TRACE(args[0]);
      Result r = run_cli(args);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      expect_one_line(r.err, "adprof: warning: '" + trace + "' is incomplete: " + what);
    }
  }
  Result r = run_cli({"report", whole});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
}

// Names are bytes: a thread name the kernel cut to 15 bytes inside a character is not UTF-8.
// The JSON outputs stay UTF-8 (U+FFFD for each bad byte): report --json refused the whole report
// ("incomplete UTF-8 string", exit 2) and the Perfetto export wrote JSON no parser reads.
TEST(CliInput, NamesThatAreNotUtf8LeaveTheJsonReadable) {
  TempDir dir;
  const std::string cut_name = "\xc3\xa9\xc3\xa9\xc3\xa9\xc3";  // "ééé" and half of "é"
  Bytes c;
  c.tag(10, 0, 0).varint(cut_name.size()).text(cut_name);  // the thread's name
  c.tag(0, 0, 1).zz(0x1000).varint(4096).varint(8);        // alloc 4 KiB
  Bytes w;
  w.append(file_header()).append(chunk(0, 0, 1000, 2, c.v, false)).append(footer(2, 1));
  const std::string trace = save(dir, "t.adtrace", w.v);
  Result r = run_cli({"report", "--json", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.out;
  EXPECT_EQ(report["trace"]["thread_names"][0], "\xc3\xa9\xc3\xa9\xc3\xa9\xef\xbf\xbd")
      << report["trace"].dump();
  ASSERT_EQ(run_cli({"export", trace, "--perfetto", dir / "p.json"}).exit_code, 0);
  const nlohmann::json perfetto = nlohmann::json::parse(read_file(dir / "p.json"), nullptr, false);
  EXPECT_FALSE(perfetto.is_discarded()) << read_file(dir / "p.json");
}

TEST(CliInput, FifoIsRefusedNotWaitedFor) {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::vector<std::string> &args :
       std::vector<std::vector<std::string>>{{"report", fifo},
                                             {"dump", fifo},
                                             {"whatif", fifo},
                                             {"timeline", fifo},
                                             {"export", fifo, "--folded", dir / "f"},
                                             {"check", fifo, "--max-peak", "1MiB"},
                                             {"diff", fifo, fifo}}) {
    SCOPED_TRACE(args[0]);
    Result r = run_cli(args, 20);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 2);
    expect_one_line(r.err, "is not a regular file");
  }
}

TEST(CliInput, FullStandardOutputIsAnError) {
  TempDir dir;
  TwoChunks t;
  const std::string whole = save(dir, "whole", t.whole);
  for (const std::string &args :
       {"report " + whole, "report --json " + whole, "dump " + whole, "whatif " + whole,
        "timeline " + whole, "check " + whole + " --max-peak 10MiB", "diff " + whole + " " + whole,
        std::string("--help")}) {
    SCOPED_TRACE(args);
    const std::string err = dir / "err";
    const std::string command =
        std::string(cli_path()) + " " + args + " > /dev/full 2> '" + err + "'";
    int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2);
    expect_one_line(read_file(err), "cannot write to standard output");
  }
}

TEST(CliInput, ExportLeavesTheOutputAloneUntilItSucceeds) {
  TempDir dir;
  TwoChunks t;
  const std::string whole = save(dir, "whole", t.whole);
  for (const char *format : {"--perfetto", "--folded"}) {
    SCOPED_TRACE(format);
    const std::string out = dir / "out";
    write_file(out, "precious");
    Result r = run_cli({"export", dir / "missing", format, out});
    EXPECT_EQ(r.exit_code, 2);
    expect_one_line(r.err, "cannot open");
    EXPECT_EQ(read_file(out), "precious");
    r = run_cli({"export", whole, format, out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(read_file(out), "precious");
    EXPECT_GT(read_file(out).size(), 10u);
  }
  // No temporary file is left behind.
  size_t files = 0;
  for (auto &entry : fs::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 2u);  // whole, out
  // A directory that cannot be written: one line, nothing created.
  Result r = run_cli({"timeline", whole, "--csv", dir / "no/such/dir/x.csv"});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line(r.err, "cannot write");
}

// What is at an output's path keeps its kind (issue 28, item 2): before, the temporary file
// was renamed over it, so `--perfetto /dev/full` replaced the machine's /dev/full with a plain
// file, a symbolic link became a file and `--folded /dev/stdout` sent nothing down the pipe.
TEST(CliInput, OutputsThatAreNotRegularFilesKeepTheirKind) {
  TempDir dir;
  TwoChunks t;
  const std::string whole = save(dir, "whole", t.whole);
  auto kind_of = [](const std::string &path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0 ? st.st_mode & S_IFMT : 0u;
  };
  // A symbolic link: its target is written, the link stays a link.
  const std::string real = dir / "real.json", link = dir / "link.json";
  write_file(real, "precious");
  ASSERT_EQ(symlink("real.json", link.c_str()), 0);
  Result r = run_cli({"export", whole, "--perfetto", link});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(kind_of(link), static_cast<unsigned>(S_IFLNK));
  EXPECT_NE(read_file(real).find("traceEvents"), std::string::npos);
  // A dangling link is refused, and stays.
  const std::string dangling = dir / "dangling";
  ASSERT_EQ(symlink("nowhere/x", dangling.c_str()), 0);
  r = run_cli({"timeline", whole, "--csv", dangling});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line(r.err, "does not exist");
  EXPECT_EQ(kind_of(dangling), static_cast<unsigned>(S_IFLNK));
  // A link to /proc/self/fd/1 (as /dev/stdout is; a link of our own, so that a failing run
  // replaces nothing of the machine's): the output goes down the pipe, the link stays.
  const std::string piped = dir / "piped", to_stdout = dir / "stdout";
  ASSERT_EQ(symlink("/proc/self/fd/1", to_stdout.c_str()), 0);
  const std::string command = std::string(cli_path()) + " export " + whole + " --folded '" +
                              to_stdout + "' | cat > '" + piped + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  EXPECT_FALSE(read_file(piped).empty());
  EXPECT_EQ(kind_of(to_stdout), static_cast<unsigned>(S_IFLNK));
  // A FIFO with a reader is written in place; one with none is refused, not waited on.
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  r = run_cli({"export", whole, "--folded", fifo}, 20);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line(r.err, "nothing reads from it");
  EXPECT_EQ(kind_of(fifo), static_cast<unsigned>(S_IFIFO));
  std::string from_fifo;
  std::thread reader([&] { from_fifo = read_file(fifo); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the reader opens first
  r = run_cli({"timeline", whole, "--svg", fifo}, 20);
  reader.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(from_fifo.find("<svg"), std::string::npos);
  EXPECT_EQ(kind_of(fifo), static_cast<unsigned>(S_IFIFO));
  // Character devices of our own (root only): a full device is a one-line error, a null one
  // takes the output, and both stay devices.
  if (geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  const std::string full = dir / "full", null = dir / "null";
  ASSERT_EQ(mknod(full.c_str(), S_IFCHR | 0600, makedev(1, 7)), 0);
  ASSERT_EQ(mknod(null.c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
  r = run_cli({"export", whole, "--perfetto", full});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line(r.err, "No space left on device");
  EXPECT_EQ(kind_of(full), static_cast<unsigned>(S_IFCHR));
  r = run_cli({"export", whole, "--folded", null});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(kind_of(null), static_cast<unsigned>(S_IFCHR));
  // A directory is refused.
  r = run_cli({"timeline", whole, "--csv", dir.path()});
  EXPECT_EQ(r.exit_code, 2);
  expect_one_line(r.err, "is a directory");
}

// Two runs naming the same trace, started together (issue 28, item 3): the one that loses the
// race for the file is refused (exit 2) before its program starts. Before, it printed "cannot
// create trace ...: file exists; not recording", ran its program unrecorded, exited 0 and
// reported the winner's unfinished trace as its own (3 of 4 tries). The trace is created
// owner-only (item 10).
TEST(CliRun, ASecondRunOfTheSameTraceNeverStartsItsProgram) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    SCOPED_TRACE(attempt);
    TempDir dir;
    const std::string trace = dir / "t.adtrace";
    auto start = [&](const std::string &marker) {
      SpawnOptions o;
      o.argv = {cli_path(), "run", "--no-report",
                "-o",       trace, "--",
                "/bin/sh",  "-c",  "echo $$ > '" + marker + "'; sleep 0.3"};
      return std::make_unique<Child>(o);
    };
    auto a = start(dir / "a"), b = start(dir / "b");
    const Result ra = a->wait(), rb = b->wait();
    const bool a_ran = fs::exists(dir / "a"), b_ran = fs::exists(dir / "b");
    ASSERT_NE(a_ran, b_ran) << "both programs ran:\n" << ra.err << "\n" << rb.err;
    const Result &winner = a_ran ? ra : rb, &loser = a_ran ? rb : ra;
    EXPECT_EQ(winner.exit_code, 0) << winner.err;
    EXPECT_EQ(loser.exit_code, 2) << loser.err;
    expect_one_line(loser.err, "already exists");
    adprof::TraceReader reader(trace);
    EXPECT_EQ(std::to_string(reader.header().pid) + "\n", read_file(dir / (a_ran ? "a" : "b")));
    struct stat st;
    ASSERT_EQ(stat(trace.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  // A program that is never recorded (it cannot be run) leaves no claim behind.
  TempDir dir;
  Result r = run_cli({"run", "-o", dir / "t.adtrace", "--", dir / "missing"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "t.adtrace"));
}

// A program ended by a signal that ends a process without a core (Ctrl-C's SIGINT, SIGTERM):
// `adprof run` dies of the same signal after its report, so that a shell stops a loop at
// Ctrl-C as it would without adprof (issue 28, item 5: it exited 130). A signal that dumps
// core is status 128+N: adprof leaves no core of its own.
TEST(CliRun, DiesOfTheSignalThatEndedTheProgram) {
  TempDir dir;
  const std::pair<int, const char *> ending[] = {{SIGINT, "INT"}, {SIGTERM, "TERM"}};
  for (const auto &[sig, name] : ending) {
    for (const bool report : {false, true}) {
      SCOPED_TRACE(std::string(name) + (report ? " with a report" : ""));
      SpawnOptions o;
      o.argv = {cli_path(), "run", "-o", dir / (std::string(name) + std::to_string(report))};
      if (!report) o.argv.push_back("--no-report");
      o.argv.insert(o.argv.end(), {"--", "/bin/sh", "-c", std::string("kill -") + name + " $$"});
      o.own_process_group = true;  // default dispositions, as a shell's job
      Result r = run(o);
      EXPECT_FALSE(r.exited) << "exit status " << r.exit_code << "\n" << r.err;
      EXPECT_EQ(r.signal, sig) << r.err;
      if (report) {
        EXPECT_NE(r.out.find("peak"), std::string::npos) << r.out;
      }
    }
  }
  SpawnOptions o;
  o.argv = {cli_path(), "run",     "--no-report", "-o",           dir / "abrt",
            "--",       "/bin/sh", "-c",          "kill -ABRT $$"};
  o.own_process_group = true;
  Result r = run(o);
  EXPECT_TRUE(r.exited) << "signal " << r.signal;
  EXPECT_EQ(r.exit_code, 128 + SIGABRT);
}

TEST(CliInput, NumericOptionsOutOfRangeAreUsageErrors) {
  TempDir dir;
  TwoChunks t;
  const std::string whole = save(dir, "whole", t.whole);
  const std::vector<std::vector<std::string>> bad = {
      {"report", whole, "--top", "-1"},
      {"report", whole, "--top", "0"},
      {"report", whole, "--top", "18446744073709551615"},
      {"report", whole, "--top", "3x"},
      {"dump", whole, "--limit", "-1"},
      {"dump", whole, "--from", "0"},
      {"dump", whole, "--types", "alloc,allocs"},
      {"dump", whole, "--types", ""},
      {"timeline", whole, "--width", "-5"},
      {"timeline", whole, "--height", "1e9"},
      {"timeline", whole, "--from", "-1"},
      {"timeline", whole, "--to", "nan"},
      {"check", whole, "--max-allocs-per-step", "-3"}};
  for (const auto &args : bad) {
    SCOPED_TRACE(args[2] + " " + args[3]);
    Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    expect_one_line(r.err, args[2]);
    EXPECT_EQ(r.out.find("18446744073709551615"), std::string::npos);
  }
  Result r = run_cli({"report", whole, "--top", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_cli({"dump", whole, "--limit", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 2u);
}

}  // namespace
