// The recorder's settings are safe: it never overwrites a file or follows a symlink, malformed
// settings leave the program running untraced with one message, the trace is created 0600,
// and a full disk stops recording (one message) without disturbing the program.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "../support/process.h"
#include "../support/trace_summary.h"

namespace {

using namespace adprof_test;

Result run_exit0(const std::string &trace,
                 std::vector<std::pair<std::string, std::string>> env = {}) {
  SpawnOptions o;
  o.argv = {ADPROF_TEST_LIFECYCLE, "exit", "0"};
  o.trace = trace;
  o.env = std::move(env);
  return run(o);
}

TEST(Settings, ExistingOutputIsNotOverwritten) {
  TempDir dir;
  write_file(dir / "t", "precious");
  Result r = run_exit0(dir / "t");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(read_file(dir / "t"), "precious");
  auto lines = adprof_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("exists"), std::string::npos) << lines[0];
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"t"});
}

TEST(Settings, SymlinkIsNotFollowed) {
  TempDir dir;
  // Dangling: the target must not be created.
  ASSERT_EQ(symlink((dir / "target").c_str(), (dir / "dangling").c_str()), 0);
  Result r = run_exit0(dir / "dangling");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "target"));
  EXPECT_TRUE(fs::is_symlink(dir / "dangling"));
  EXPECT_EQ(adprof_lines(r.err).size(), 1u) << r.err;
  // To an existing file: left as it was.
  write_file(dir / "existing", "precious");
  ASSERT_EQ(symlink((dir / "existing").c_str(), (dir / "link").c_str()), 0);
  r = run_exit0(dir / "link");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(read_file(dir / "existing"), "precious");
  EXPECT_EQ(adprof_lines(r.err).size(), 1u) << r.err;
}

TEST(Settings, MalformedSettingsRunUntracedWithOneMessage) {
  const std::pair<std::string, std::string> bad[] = {
      {"ADPROF_SAMPLE_MS", "abc"},  {"ADPROF_SAMPLE_MS", "0"},
      {"ADPROF_SAMPLE_MS", "10ms"}, {"ADPROF_SAMPLE_MS", "99999999999999999999"},
      {"ADPROF_ZSTD_LEVEL", "100"}, {"ADPROF_ROOT_PID", "me"},
      {"ADPROF_STACKS", "yes"},     {"ADPROF_STACKS", "2"},
  };
  for (const auto &[key, value] : bad) {
    SCOPED_TRACE(key + "=" + value);
    TempDir dir;
    Result r = run_exit0(dir / "t", {{key, value}});
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
    auto lines = adprof_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find(key), std::string::npos) << lines[0];
    EXPECT_FALSE(fs::exists(dir / "t"));
  }
  // And a good one is accepted.
  TempDir dir;
  Result r = run_exit0(
      dir / "t", {{"ADPROF_SAMPLE_MS", "5"}, {"ADPROF_ZSTD_LEVEL", "-3"}, {"ADPROF_STACKS", "1"}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(adprof_lines(r.err).empty()) << r.err;
  EXPECT_TRUE(is_complete_with(summarize(dir / "t")));
}

// A trace holds the process's addresses, libraries and call sites: readable by its owner only,
// whatever the umask (issue 28, item 10; it was 0666 less the umask, world-readable under 022).
TEST(Settings, TraceIsCreatedOwnerOnly) {
  for (int mask : {0, 022, 077}) {
    TempDir dir;
    SpawnOptions o;
    o.argv = {ADPROF_TEST_LIFECYCLE, "forkexec"};
    o.trace = dir / "t";
    o.umask_value = mask;
    Result r = run(o);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    size_t traces = 0;
    for (const std::string &name : files_in(dir.path())) {
      struct stat st;
      ASSERT_EQ(stat((dir / name).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << name << " umask " << std::oct << mask;
      ++traces;
    }
    EXPECT_GE(traces, 2u) << "the program's and its exec'd child's";
  }
}

// A full disk: the program finishes normally, adprof says so once, and the trace reads up to
// its last complete chunk.
void expect_write_error_handled(const Result &r, const std::string &trace) {
  ASSERT_TRUE(r.exited) << "signal " << r.signal;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto lines = adprof_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("write failed"), std::string::npos) << lines[0];
  adprof::TraceReader reader(trace);
  EXPECT_TRUE(reader.end().cut);
  EXPECT_FALSE(reader.end().complete);
  adprof::Event e;
  uint64_t events = 0;
  while (reader.next(e)) ++events;
  EXPECT_GT(events, 1000u);
  EXPECT_EQ(reader.stats().corrupt_chunks, 0u);
  EXPECT_GT(reader.stats().chunks, 0u);
}

TEST(Settings, DiskFullViaFileSizeLimit) {
  TempDir dir;
  std::string trace = dir / "t";
  SpawnOptions o;
  // A limit of a few chunks (a chunk holds up to 512 KiB of event bodies, compressed about 3x),
  // reached well before the storm ends.
  o.argv = {ADPROF_TEST_STORM, "2", "1000000", "-"};
  o.trace = trace;
  o.fsize_limit = 2 * 1024 * 1024;  // writes past it fail with EFBIG (SIGXFSZ ignored)
  Result r = run(o);
  expect_write_error_handled(r, trace);
  EXPECT_LE(fs::file_size(trace), 2u * 1024 * 1024);
}

TEST(Settings, DiskFullOnTinyTmpfs) {
  TempDir dir;
  std::string mnt = dir / "mnt";
  fs::create_directory(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << strerror(errno) << ")";
  std::string trace = mnt + "/t";
  SpawnOptions o;
  o.argv = {ADPROF_TEST_STORM, "2", "1000000", "-"};
  o.trace = trace;
  Result r = run(o);
  expect_write_error_handled(r, trace);
  umount2(mnt.c_str(), MNT_DETACH);
}

}  // namespace
