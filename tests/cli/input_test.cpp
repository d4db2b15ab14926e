// The CLI on inputs it cannot trust: cut and damaged traces (a gate never passes on data that
// could not be read; the other commands warn), FIFOs, a full standard output, outputs that must
// stay untouched when the input fails, numeric options out of range. The traces are packed by
// hand (tests/profiler/trace_builder.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>

#include "test_util.h"
#include "trace_builder.h"

namespace {

using namespace ptest;

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
