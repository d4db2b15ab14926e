// adprof dump TRACE [--from N] [--limit N] [--types LIST] [--numbered]: the trace's events, one
// per line, in time order (for checking what a program recorded, and for debugging the recorder).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

#include "adprof/replay.h"
#include "cli_common.h"

namespace adprof::cli {
namespace {

// A program's text as one token of one line: names and labels are the program's own words (an
// integration names a fix by the code to paste, over several lines), and a line per event is
// what scripts count on (the PyTorch tests find the peak's event by its line). Escaped as C and
// JSON do: \" \\ \n \t \r, any other control byte \xHH; bytes from 0x80 (UTF-8) as they are.
std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[8];
          snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// Each event type's name in a dump line, by format::EventType.
constexpr std::array<const char *, static_cast<size_t>(format::EventType::kStepSummary) + 1>
    kTypeNames = {"alloc", "free",    "op_begin", "op_end",  "phase",     "role",        "retag",
                  "step",  "counter", "name",     "thread",  "annotate",  "label",       "describe",
                  "hash",  "heap",    "stack",    "mapping", "unmapping", "step_summary"};

// The set of types named in LIST ("op_begin,op_end"), one bit per format::EventType; a
// UsageError naming the known types when a name is none of them.
uint32_t type_set(const std::string &list) {
  uint32_t set = 0;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    size_t i = 0;
    while (i < kTypeNames.size() && name != kTypeNames[i]) ++i;
    if (i == kTypeNames.size()) {
      std::string known;
      for (const char *type : kTypeNames) known += std::string(known.empty() ? "" : ", ") + type;
      throw UsageError("--types: unknown event type '" + name + "' (one of " + known + ")");
    }
    set |= 1u << i;
    start = comma + 1;
  }
  return set;
}

}  // namespace

int command_dump(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof dump TRACE [--from N] [--limit N] [--types LIST] [--numbered]\n\nPrints the "
      "trace's events in time order, one per line: time, thread, type and fields (names in "
      "double quotes, escaped as in C: \\\", \\\\, \\n, \\t, \\xHH). Events are numbered "
      "from 1 in that order, as `adprof report --json` numbers its peak.event; --from, --limit "
      "and --numbered count every event, printed or not.\n\nOptions");
  options.add_options()("help,h", "show this help")("limit", po::value<std::string>(),
                                                    "stop after event N (default: all)")(
      "from", po::value<std::string>(), "print from event N on (default: 1)")(
      "types", po::value<std::string>(),
      "print only events of these types, comma-separated (alloc,free,op_begin,...)")(
      "numbered", po::bool_switch(), "begin each line with the event's number")(
      "trace", po::value<std::string>(), "trace");
  auto parsed = parse_command("dump", args, options, {"trace"}, 1);
  if (!parsed) return kExitOk;
  const po::variables_map &vm = *parsed;
  const uint64_t limit =
      vm.count("limit") ? whole_number_option(vm, "limit", 0, UINT64_MAX - 1) : UINT64_MAX;
  const uint64_t from = vm.count("from") ? whole_number_option(vm, "from", 1, UINT64_MAX) : 1;
  const uint32_t printed_types = vm.count("types") ? type_set(vm["types"].as<std::string>()) : ~0u;
  const bool numbered = vm["numbered"].as<bool>();
  const std::string trace = vm["trace"].as<std::string>();
  TraceReader reader(trace);
  Replay names;  // only to resolve interned names
  Event e;
  for (uint64_t n = 1; n <= limit && reader.next(e); ++n) {
    names.apply(e);
    const auto type = static_cast<unsigned>(e.type);
    if (n < from || type >= kTypeNames.size() || !(printed_types >> type & 1u)) continue;
    if (numbered) printf("%" PRIu64 " ", n);
    printf("%12.6f t%-3u %-9s", reader.seconds(e.ticks), e.thread, kTypeNames[type]);
    switch (e.type) {
      case format::EventType::kAlloc:
        printf(" %s 0x%" PRIx64 " size=%" PRIu64 " slack=%" PRIu64, space_name(e.operand), e.addr,
               e.a, e.b);
        if (e.stack) printf(" stack=%u", e.stack);
        break;
      case format::EventType::kStack:
        printf(" %" PRIu64, e.a);
        for (uint64_t frame : e.values()) printf(" 0x%" PRIx64, frame);
        break;
      case format::EventType::kMapping: {
        const std::string_view text = e.text();
        const std::string_view path = text.substr(0, text.find('\0'));
        printf(" 0x%" PRIx64 "-0x%" PRIx64 " bias=0x%" PRIx64 " %s", e.a, e.b, e.addr,
               escaped(path).c_str());
        break;
      }
      case format::EventType::kUnmapping:
        printf(" 0x%" PRIx64 " bias=0x%" PRIx64, e.a, e.addr);
        break;
      case format::EventType::kStepSummary: {
        const auto v = e.values();
        printf(" step=%" PRIu64 " peak=%" PRIu64 " allocations=%" PRIu64 " bytes=%" PRIu64, e.a,
               v[format::kSummaryPeak], v[format::kSummaryAllocations], v[format::kSummaryBytes]);
        break;
      }
      case format::EventType::kFree:
        printf(" %s 0x%" PRIx64, space_name(e.operand), e.addr);
        if (e.a) printf(" length=%" PRIu64, e.a);
        break;
      case format::EventType::kOpBegin:
        printf(" %s", escaped(names.op_label(static_cast<uint32_t>(e.a), e.b)).c_str());
        break;
      case format::EventType::kPhase:
        printf(" %s", phase_name(e.operand));
        break;
      case format::EventType::kRole:
        printf(" %s", role_name(e.operand));
        break;
      case format::EventType::kRetag:
        printf(" 0x%" PRIx64 " -> %s", e.addr, role_name(e.operand));
        if (e.b) printf(" source=0x%" PRIx64, e.b);
        break;
      case format::EventType::kStep:
      case format::EventType::kCounter:
        printf(" %u %" PRIu64, e.operand, e.a);
        break;
      case format::EventType::kName:
        printf(" %" PRIu64 " \"%s\"", e.a, escaped(e.text()).c_str());
        break;
      case format::EventType::kThreadName:
        printf(" \"%s\"", escaped(e.text()).c_str());
        break;
      case format::EventType::kLabel:
        printf(" 0x%" PRIx64 " \"%s\"", e.addr,
               escaped(names.name(static_cast<uint32_t>(e.a))).c_str());
        break;
      case format::EventType::kContentHash:
        printf(" 0x%" PRIx64 " %016" PRIx64, e.addr, e.a);
        break;
      case format::EventType::kAnnotate:
      case format::EventType::kDescribe:
        if (e.type == format::EventType::kDescribe)
          printf(" 0x%" PRIx64 " dtype=%" PRIu64, e.addr, e.a);
        else
          printf(" %s", escaped(names.name(static_cast<uint32_t>(e.a))).c_str());
        for (uint64_t v : e.values()) printf(" %" PRIu64, v);
        break;
      default:
        break;
    }
    putchar('\n');
  }
  if (!reader.end().complete) printf("# %s\n", reader.end().reason.c_str());
  warn_if_incomplete(trace, reader.end().complete, reader.end().reason);
  return kExitOk;
}

}  // namespace adprof::cli
