// PyTorch memory snapshots, both ways (torch_snapshot.h, docs/PYTORCH.md "Snapshots").
//
// In: the hand-made snapshots of data/ (tests/torch_snapshot/make_snapshots.py says what each
// holds) read by the analysis and by every command: live memory over time as PyTorch's viewer
// draws it, the peak by role, sites, labels, reserved, OOM; bad input is one line and exit 2.
// The pickle reader alone: memo, protocols, bounds, objects refused, every truncation and byte
// flip of a snapshot read or refused, never a crash.
// Out: a recorded run exported and read back gives the run's peak, roles and allocations.
#include "adprof/torch_snapshot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "../support/process.h"
#include "../support/sanitizer_skip.h"
#include "adprof/replay.h"
#include "adprof/report.h"
#include "adprof/trace_reader.h"
#include "torch_snapshot/pickle.h"

namespace {

using namespace adprof_test;
namespace fs = std::filesystem;
using adprof::pickle::Document;
using adprof::pickle::Kind;

constexpr uint64_t MiB = uint64_t{1} << 20;
const std::string kData = SNAPSHOT_DATA;

std::string data(const std::string &name) { return kData + "/" + name; }

adprof::Report report_of(const std::string &path) { return adprof::analyze(path); }

uint64_t role_at_peak(const adprof::Report &r, int role) { return r.peak_by_role[role]; }

uint64_t op_at_peak(const adprof::Report &r, const std::string &op) {
  for (const adprof::NamedBytes &o : r.peak_by_op)
    if (o.name == op) return o.bytes;
  return 0;
}

std::vector<std::string> flat(const std::vector<adprof::NamedBytes> &v) {
  std::vector<std::string> out;
  for (const adprof::NamedBytes &n : v) out.push_back(n.name + " " + std::to_string(n.bytes));
  std::sort(out.begin(), out.end());
  return out;
}
std::vector<std::string> flat(const std::vector<adprof::LabelBytes> &v) {
  std::vector<std::string> out;
  for (const adprof::LabelBytes &n : v)
    out.push_back(n.label + " " + n.role + " " + std::to_string(n.bytes) + " " +
                  std::to_string(n.buffers));
  std::sort(out.begin(), out.end());
  return out;
}

// ---- the pickle reader ---------------------------------------------------------------------

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(PickleReader, MemoSharesValues) {
  // PROTO 4, EMPTY_LIST, MEMOIZE, MARK, SHORT_BINUNICODE "x", MEMOIZE, BINGET 1, APPENDS, STOP
  auto d = Document::parse(bytes({0x80, 4, ']', 0x94, '(', 0x8c, 1, 'x', 0x94, 'h', 1, 'e', '.'}));
  ASSERT_TRUE(d->root().is(Kind::kList));
  ASSERT_EQ(d->root().size(), 2u);
  EXPECT_EQ(d->root().at(0).as_string(), "x");
  EXPECT_EQ(d->root().at(1).as_string(), "x");
  EXPECT_EQ(d->protocol(), 4);
}

TEST(PickleReader, IntegersOfEveryWidth) {
  // A list of: BININT1 7, BININT2 513, BININT -2, LONG1 6 bytes (an address), LONG1 8 bytes
  // (-1), LONG1 9 bytes 2^64 (out of int64: not an int), NEWTRUE.
  auto d = Document::parse(
      bytes({0x80, 2, ']', '(', 'K', 7,    'M',  1, 2,    'J',  0xFE, 0xFF, 0xFF, 0xFF, 0x8a, 6,
             0,    0, 0,   0,   0,   0x7F, 0x8a, 8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
             0x8a, 9, 0,   0,   0,   0,    0,    0, 0,    0,    1,    0x88, 'e',  '.'}));
  auto v = d->root();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v.at(0).as_int(), 7);
  EXPECT_EQ(v.at(1).as_int(), 513);
  EXPECT_EQ(v.at(2).as_int(), -2);
  EXPECT_EQ(v.at(3).as_int(), 0x7F0000000000);
  EXPECT_EQ(v.at(4).as_int(), -1);
  EXPECT_FALSE(v.at(5).is_int());
  EXPECT_EQ(v.at(6).as_int(), 1);
}

TEST(PickleReader, RefusesWhatBuildsObjects) {
  try {
    Document::parse_file(data("object.pickle"));
    FAIL() << "an OrderedDict (GLOBAL, REDUCE) was read";
  } catch (const adprof::pickle::PickleError &e) {
    EXPECT_NE(std::string(e.what()).find("builds a Python object"), std::string::npos) << e.what();
  }
}

TEST(PickleReader, EveryLengthIsBounded) {
  // SHORT_BINUNICODE of 200 bytes in a file that holds 3; a BINGET of a key never stored; a
  // STOP with nothing on the stack; a file that ends without STOP.
  for (const std::string &b :
       {bytes({0x80, 4, 0x8c, 200, 'a', 'b', 'c'}), bytes({0x80, 4, 'h', 9, '.'}),
        bytes({0x80, 4, '.'}), bytes({0x80, 4, ']'}), bytes({0x80, 6, ']', '.'}), std::string()})
    EXPECT_THROW(Document::parse(b), adprof::pickle::PickleError) << b.size();
}

TEST(PickleReader, ASelfContainingListReadsWithoutEnd) {
  // {"device_traces": L} where L = [L]: the reader never walks containers; the snapshot reader
  // follows its schema only (an entry that is not a dict is skipped).
  std::string b = bytes({0x80, 4, '}', 0x94, 0x8c, 13});
  b += "device_traces";
  b += bytes({']', 0x94, 'h', 1, 'a', 's', '.'});
  auto d = Document::parse(b);
  auto traces = d->root().get("device_traces");
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces.at(0).at(0).size(), 1u);  // itself
  TempDir dir;
  write_file(dir.path() + "/cycle.pickle", b);
  adprof::SnapshotEvents ev = adprof::read_torch_snapshot(dir.path() + "/cycle.pickle");
  EXPECT_EQ(ev.skipped_entries, 1u);
}

TEST(PickleWriter, WritesWhatTheReaderReads) {
  adprof::pickle::Writer w;
  w.begin_dict();
  w.shared_string("a");
  w.integer(-5);
  w.shared_string("b");
  w.integer(int64_t{1} << 47);
  w.shared_string("c");
  w.integer(INT64_MIN);
  w.shared_string("d");
  w.real(2.5);
  w.shared_string("e");
  w.string(std::string(300, 'z'));
  w.shared_string("f");
  w.begin_list();
  w.shared_string("a");  // the key's memo slot again
  w.none();
  w.boolean(true);
  w.end_list();
  w.shared_string("g");
  w.integer(1);
  w.integer(2);
  w.tuple2();
  w.end_dict();
  auto d = Document::parse(w.finish());
  auto r = d->root();
  EXPECT_EQ(r.get("a").as_int(), -5);
  EXPECT_EQ(r.get("b").as_int(), int64_t{1} << 47);
  EXPECT_EQ(r.get("c").as_int(), INT64_MIN);
  EXPECT_EQ(r.get("d").as_number(), 2.5);
  EXPECT_EQ(r.get("e").as_string(), std::string(300, 'z'));
  EXPECT_EQ(r.get("f").at(0).as_string(), "a");
  EXPECT_TRUE(r.get("f").at(1).is(Kind::kNone));
  EXPECT_EQ(r.get("f").at(2).as_int(), 1);
  EXPECT_TRUE(r.get("g").is(Kind::kTuple));
  EXPECT_EQ(r.get("g").at(1).as_int(), 2);
}

// Every prefix and every byte flipped (to each of a few values) of a real snapshot: read, or
// refused with a TraceError, never a crash or a hang (the sanitizer builds run it too).
TEST(PickleReader, EveryTruncationAndByteFlipIsReadOrRefused) {
  const std::string whole = read_file(data("basic.pickle"));
  ASSERT_FALSE(whole.empty());
  TempDir dir;
  const std::string path = dir.path() + "/m.pickle";
  uint64_t read = 0, refused = 0;
  auto attempt = [&](const std::string &b) {
    write_file(path, b);
    try {
      adprof::TraceReader reader(path);
      adprof::Replay replay;
      adprof::Event e;
      while (reader.next(e)) replay.apply(e);
      ++read;
    } catch (const adprof::TraceError &) {
      ++refused;
    }
  };
  for (size_t n = 1; n < whole.size(); ++n) attempt(whole.substr(0, n));
  for (size_t i = 1; i < whole.size(); ++i)
    for (int v : {0x00, 0xFF, int{'('}, int{'e'}, 0x94}) {
      std::string b = whole;
      b[i] = static_cast<char>(v);
      attempt(b);
    }
  EXPECT_GT(refused, whole.size() - 2);  // every truncation at least
  EXPECT_GT(read, 0u);
}

// ---- snapshots read as runs ----------------------------------------------------------------

// make_snapshots.py, basic(): E 3 MiB (freed in the trace, never allocated there) and F 0.5 MiB
// (active at the dump, never allocated: its requested size) live from the start; +A 4 MiB
// parameter, +B 8 MiB PyTorch "activation", +C 2 MiB user_metadata "optimizer_state": the peak,
// 17.5 MiB; then -B, +D 1 MiB labelled "encoder.embedding", -E. One 20 MiB segment.
TEST(TorchSnapshot, PeakRolesAndReservedFollowTheDeviceTrace) {
  adprof::Report r = report_of(data("basic.pickle"));
  EXPECT_EQ(r.peak, 17 * MiB + MiB / 2);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_FOREIGN), 3 * MiB + MiB / 2);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_PARAMETER), 4 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_FORWARD_CACHE), 8 * MiB);  // PyTorch's "activation"
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_OPTIMIZER_STATE), 2 * MiB);
  EXPECT_EQ(r.allocations, 6u);  // four in the trace, two live before it
  EXPECT_EQ(r.frees, 2u);
  EXPECT_EQ(r.live_at_end, 7 * MiB + MiB / 2);  // A, C, D, F: the segments' allocated bytes
  EXPECT_EQ(r.device_reserved_peak, 20 * MiB);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.memory, "allocated device memory (PyTorch snapshot)");
  EXPECT_DOUBLE_EQ(r.peak_time, (1300 - 1000) / 1e6);  // time_us since the first entry
  // Sites: the innermost Python frame outside torch's files (C++ and linear.py skipped).
  EXPECT_EQ(op_at_peak(r, "build (/home/me/train.py:12)"), 4 * MiB);
  EXPECT_EQ(op_at_peak(r, "forward (/home/me/train.py:20)"), 8 * MiB);
}

TEST(TorchSnapshot, MetadataThatNamesNoRoleIsALabel) {
  adprof::TraceReader reader(data("basic.pickle"));
  adprof::Replay replay;
  adprof::Event e;
  while (reader.next(e)) replay.apply(e);
  const adprof::Block *d = replay.blocks().get(0x7F0000000000 + 14 * MiB);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(replay.name(d->label), "encoder.embedding");
  EXPECT_EQ(d->role, ADPROF_ROLE_FOREIGN);
  ASSERT_EQ(replay.thread_names().size(), 1u);
  EXPECT_EQ(replay.thread_names()[0], "device 0");
}

TEST(TorchSnapshot, PicklesOfEveryProtocolPythonWritesReadAlike) {
  const adprof::Report base = report_of(data("basic.pickle"));
  for (const char *name :
       {"basic_protocol2.pickle", "basic_protocol3.pickle", "basic_protocol5.pickle"}) {
    adprof::Report r = report_of(data(name));
    EXPECT_EQ(r.peak, base.peak) << name;
    EXPECT_EQ(r.peak_by_role, base.peak_by_role) << name;
    EXPECT_EQ(r.allocations, base.allocations) << name;
  }
}

TEST(TorchSnapshot, OutOfMemoryEntryIsTheDeviceOom) {
  adprof::Report r = report_of(data("oom.pickle"));
  EXPECT_EQ(r.device_ooms, 1u);
  EXPECT_EQ(r.oom_requested, 2048 * MiB);
  EXPECT_EQ(r.oom_reserved, 1024 * MiB);
  EXPECT_EQ(r.oom_allocated, 1024 * MiB);
  EXPECT_EQ(r.oom_limit, 1536 * MiB);  // reserved + what CUDA said was free
  EXPECT_EQ(r.oom_by_role[ADPROF_ROLE_FORWARD_CACHE], 1024 * MiB);
  Result cli = run_cli({"report", data("oom.pickle")});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find("device 0 ran out of memory asking for 2.0 GiB"), std::string::npos)
      << cli.out;
}

TEST(TorchSnapshot, EntriesWithoutFramesOrTimes) {
  adprof::Report r = report_of(data("no_frames.pickle"));
  EXPECT_EQ(r.peak, 3 * MiB);
  EXPECT_EQ(r.allocations, 2u);
  EXPECT_EQ(r.frees, 1u);
  EXPECT_EQ(op_at_peak(r, "(no op)"), 3 * MiB);
}

TEST(TorchSnapshot, UnknownActionsAreSkippedAndCounted) {
  adprof::SnapshotEvents ev = adprof::read_torch_snapshot(data("unknown_action.pickle"));
  EXPECT_EQ(ev.skipped_entries, 3u);  // "segment_mystery", an entry with no action, 42
  adprof::Report r = report_of(data("unknown_action.pickle"));
  EXPECT_EQ(r.peak, 4 * MiB);
  EXPECT_EQ(r.device_reserved_peak, 0u);
}

TEST(TorchSnapshot, EmptySnapshotIsAnEmptyRun) {
  adprof::Report r = report_of(data("empty.pickle"));
  EXPECT_EQ(r.peak, 0u);
  EXPECT_EQ(r.allocations, 0u);
  Result cli = run_cli({"report", data("empty.pickle")});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
}

TEST(TorchSnapshot, DevicesAreThreadsMergedByTime) {
  adprof::Report r = report_of(data("two_devices.pickle"));
  EXPECT_EQ(r.peak, 3 * MiB);  // 1 MiB on device 0 and 2 MiB on device 1 at 20 us
  EXPECT_EQ(r.threads, 2u);
  ASSERT_EQ(r.thread_names.size(), 2u);
  EXPECT_EQ(r.thread_names[1], "device 1");
}

TEST(TorchSnapshot, CategoriesMapToRolesWhereTheyMeanTheSame) {
  adprof::Report r = report_of(data("categories.pickle"));
  EXPECT_EQ(r.peak, 511 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_PARAMETER), 1 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_INPUT), 2 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_FORWARD_CACHE), 4 * MiB);  // activation
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_ADJOINT), 24 * MiB);       // gradient, autograd_detail
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_WORKSPACE), 32 * MiB);     // temporary
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_OPTIMIZER_STATE), 64 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_FOREIGN), 384 * MiB);  // unknown, and one PyTorch lacks
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_ACTIVATION), 0u);
}

TEST(TorchSnapshot, AnnotateEntriesRetagOrLabel) {
  adprof::Report r = report_of(data("annotate.pickle"));
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_PARAMETER), 1 * MiB);
  EXPECT_EQ(role_at_peak(r, ADPROF_ROLE_FOREIGN), 2 * MiB);
  bool labelled = false;
  for (const adprof::LabelBytes &l : r.peak_by_label)
    labelled |= l.label == "decoder.out" && l.bytes == 2 * MiB;
  EXPECT_TRUE(labelled);
}

TEST(TorchSnapshot, PartialUnmapsOfExpandableSegments) {
  adprof::Report r = report_of(data("expandable.pickle"));
  EXPECT_EQ(r.device_reserved_peak, 10 * MiB);  // 8, 6 after the hole, 10
}

TEST(TorchSnapshot, SegmentsAloneAreTheStateAtTheDump) {
  adprof::Report r = report_of(data("segments_only.pickle"));  // PyTorch 1.13's layout
  EXPECT_EQ(r.peak, 3 * MiB - 100);                            // the histories' real sizes
  EXPECT_EQ(r.device_reserved_peak, 8 * MiB);
  EXPECT_EQ(op_at_peak(r, "a (/home/me/train.py:1)"), 2 * MiB - 100);
}

TEST(TorchSnapshot, BadInputIsOneLineAndExitTwo) {
  for (const char *name : {"damaged.pickle", "not_snapshot.pickle", "object.pickle",
                           "protocol0.pickle", "huge.pickle"}) {
    for (std::vector<std::string> args : {std::vector<std::string>{"report"},
                                          {"check", "--max-peak", "1GiB"},
                                          {"timeline"},
                                          {"dump"},
                                          {"export", "--torch-snapshot", "/dev/null/x"}}) {
      args.push_back(data(name));
      Result r = run_cli(args);
      EXPECT_EQ(r.exit_code, 2) << name << " " << args[0] << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
      EXPECT_EQ(r.err.rfind("adprof: ", 0), 0u) << r.err;
    }
    Result d = run_cli({"diff", data("before.pickle"), data(name)});
    EXPECT_EQ(d.exit_code, 2) << name << ": " << d.err;
  }
  Result r = run_cli({"report", data("damaged.pickle")});
  EXPECT_NE(r.err.find("is not a readable PyTorch memory snapshot"), std::string::npos) << r.err;
  r = run_cli({"report", data("huge.pickle")});
  EXPECT_NE(r.err.find("add up to more than 2^62 bytes"), std::string::npos) << r.err;
  r = run_cli({"report", data("not_snapshot.pickle")});
  EXPECT_NE(r.err.find("not a PyTorch memory snapshot"), std::string::npos) << r.err;
}

// before: 10 MiB parameter + 100 MiB activation (110 MiB); after: 10 + 110 (120 MiB, +9.1%).
TEST(TorchSnapshot, CheckAndDiffGateSnapshots) {
  EXPECT_EQ(run_cli({"check", data("before.pickle"), "--max-peak", "110MiB"}).exit_code, 0);
  Result over = run_cli({"check", data("before.pickle"), "--max-peak", "109MiB"});
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_EQ(
      run_cli({"check", data("after.pickle"), "--max-role", "forward_cache=100MiB"}).exit_code, 1);
  EXPECT_EQ(
      run_cli({"check", data("before.pickle"), "--max-role", "forward_cache=100MiB"}).exit_code, 0);
  Result grew =
      run_cli({"diff", data("before.pickle"), data("after.pickle"), "--fail-if", "peak > +5%"});
  EXPECT_EQ(grew.exit_code, 1) << grew.out << grew.err;
  EXPECT_NE(grew.out.find("+9.1%"), std::string::npos) << grew.out;
  EXPECT_EQ(
      run_cli({"diff", data("before.pickle"), data("after.pickle"), "--fail-if", "peak > +10%"})
          .exit_code,
      0);
}

TEST(TorchSnapshot, TimelineFollowsTheTrace) {
  TempDir dir;
  const std::string csv = dir.path() + "/t.csv";
  Result r = run_cli({"timeline", data("basic.pickle"), "--csv", csv});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_file(csv).find(std::to_string(17 * MiB + MiB / 2)), std::string::npos)
      << read_file(csv);
  Result chart = run_cli({"timeline", data("basic.pickle"), "--no-color"});
  EXPECT_NE(chart.out.find("live bytes of allocated device memory (PyTorch snapshot)"),
            std::string::npos)
      << chart.out;
}

// ---- out -----------------------------------------------------------------------------------

// A recorded run exported and read back: the same peak, roles at the peak, allocations and
// bytes live at the end (categories are the roles at the peak; a snapshot is read back as the
// run's memory).
TEST(TorchSnapshotExport, ARunReadsBackAsItself) {
  ADPROF_SKIP_IF_SANITIZED();  // densenet is sanitized there
  TempDir dir;
  const std::string trace = dir.path() + "/d.adtrace", pickle = dir.path() + "/d.pickle";
  Result run = run_cli({"run", "--no-report", "-o", trace, "--", DENSENET, "--naive", "--quiet",
                        "--size", "262144", "--n", "8"},
                       300);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result ex = run_cli({"export", trace, "--torch-snapshot", pickle}, 300);
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_NE(ex.err.find("allocations"), std::string::npos) << ex.err;
  const adprof::Report a = report_of(trace), b = report_of(pickle);
  EXPECT_GT(a.peak, 0u);
  EXPECT_EQ(b.peak, a.peak);
  EXPECT_EQ(b.peak_by_role, a.peak_by_role);
  EXPECT_EQ(b.allocations, a.allocations);
  EXPECT_EQ(b.live_at_end, a.live_at_end);
  EXPECT_EQ(b.threads, 1u);               // device 0: the host heap (no device memory in this run)
  EXPECT_EQ(b.device_reserved_peak, 0u);  // its runs of blocks are no reserve
  EXPECT_EQ(b.memory, "host memory");     // the export named its device 0 "host"
  // Ops and labels come back from the frames and user_metadata.
  EXPECT_EQ(flat(b.peak_by_op), flat(a.peak_by_op));
  EXPECT_EQ(flat(b.peak_by_label), flat(a.peak_by_label));
  // A snapshot exported again: the same again.
  const std::string again = dir.path() + "/again.pickle";
  ASSERT_EQ(run_cli({"export", pickle, "--torch-snapshot", again}, 300).exit_code, 0);
  const adprof::Report c = report_of(again);
  EXPECT_EQ(c.peak, a.peak);
  EXPECT_EQ(c.peak_by_role, a.peak_by_role);
  EXPECT_EQ(c.allocations, a.allocations);
}

// A run with device memory (a segment, two blocks, an OOM; tests/cli/oom_workload.cpp): device
// 0 is the device, device 1 the host heap; read back, the device's peak, roles, reserved and OOM
// are the run's.
TEST(TorchSnapshotExport, DeviceMemoryIsDeviceZeroAndTheHostFollows) {
  TempDir dir;
  const std::string trace = dir.path() + "/o.adtrace", pickle = dir.path() + "/o.pickle";
  ASSERT_EQ(run_cli({"run", "--no-report", "-o", trace, "--", OOM_WORKLOAD}).exit_code, 0);
  ASSERT_EQ(run_cli({"export", trace, "--torch-snapshot", pickle}).exit_code, 0);
  auto doc = Document::parse_file(pickle);
  auto traces = doc->root().get("device_traces");
  ASSERT_EQ(traces.size(), 2u);
  uint64_t allocs = 0, ooms = 0, segments = 0;
  for (size_t i = 0; i < traces.at(0).size(); ++i) {
    auto e = traces.at(0).at(i);
    allocs += e.get("action").as_string() == "alloc";
    segments += e.get("action").as_string() == "segment_alloc";
    if (e.get("action").as_string() == "oom") {
      ++ooms;
      EXPECT_EQ(e.get("size").as_int(), int64_t{64} << 20);
      EXPECT_EQ(e.get("device_free").as_int(), int64_t{4} << 20);  // limit 100 - reserved 96
    }
  }
  EXPECT_EQ(allocs, 2u);
  EXPECT_EQ(segments, 1u);
  EXPECT_EQ(ooms, 1u);
  const adprof::Report a = report_of(trace), b = report_of(pickle);
  EXPECT_EQ(a.device_peak, 90 * MiB);
  EXPECT_EQ(b.device_peak, a.device_peak);
  EXPECT_EQ(b.device_peak_by_role, a.device_peak_by_role);
  EXPECT_EQ(b.device_reserved_peak, 96 * MiB);
  EXPECT_EQ(b.peak, a.peak);
  EXPECT_EQ(b.memory, "host memory");
  EXPECT_EQ(b.device_ooms, 1u);
  EXPECT_EQ(b.oom_requested, a.oom_requested);
  EXPECT_EQ(b.oom_limit, a.oom_limit);
}

// A run recorded with call stacks: each allocation's frames are its label and op, then its
// stack, innermost first; the categories are adprof's roles.
TEST(TorchSnapshotExport, FramesCarryOpAndCallStack) {
  ADPROF_SKIP_IF_SANITIZED();  // densenet is sanitized there
  TempDir dir;
  const std::string trace = dir.path() + "/s.adtrace", pickle = dir.path() + "/s.pickle";
  ASSERT_EQ(run_cli({"run", "--stacks", "--no-report", "-o", trace, "--", DENSENET, "--quiet",
                     "--size", "262144", "--n", "8"},
                    300)
                .exit_code,
            0);
  ASSERT_EQ(run_cli({"export", trace, "--torch-snapshot", pickle}, 300).exit_code, 0);
  auto doc = Document::parse_file(pickle);
  auto entries = doc->root().get("device_traces").at(0);
  uint64_t with_stack = 0, with_main = 0, with_op = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    auto e = entries.at(i);
    if (e.get("action").as_string() != "alloc") continue;
    EXPECT_GE(adprof::role_from_name(std::string(e.get("category").as_string())), 0);
    auto frames = e.get("frames");
    if (frames.size() < 3) continue;
    ++with_stack;
    with_op += frames.at(0).get("line").as_int(-1) == 0 &&  // {label, 0, op}
               !frames.at(0).get("name").as_string().empty();
    for (size_t f = 1; f < frames.size(); ++f)
      with_main += frames.at(f).get("name").as_string() == "main";
  }
  EXPECT_GT(with_stack, 0u);
  EXPECT_GT(with_op, 0u);
  EXPECT_GT(with_main, 0u);
}

TEST(TorchSnapshotExport, HandMadeSnapshotRoundTrips) {
  TempDir dir;
  const std::string out = dir.path() + "/basic.pickle";
  Result ex = run_cli({"export", data("basic.pickle"), "--torch-snapshot", out});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  const adprof::Report a = report_of(data("basic.pickle")), b = report_of(out);
  EXPECT_EQ(b.peak, a.peak);
  EXPECT_EQ(b.peak_by_role, a.peak_by_role);  // forward_cache stays forward_cache
  EXPECT_EQ(b.allocations, a.allocations);
  EXPECT_EQ(b.live_at_end, a.live_at_end);
  EXPECT_EQ(op_at_peak(b, "build (/home/me/train.py:12)"), 4 * MiB);
}

TEST(TorchSnapshotExport, ExportNeedsAReadableTraceAndLeavesTheOutputAlone) {
  TempDir dir;
  const std::string out = dir.path() + "/out.pickle";
  write_file(out, "keep");
  Result r = run_cli({"export", data("damaged.pickle"), "--torch-snapshot", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(read_file(out), "keep");
}

}  // namespace
