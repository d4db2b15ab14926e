// What the adprof subcommands share: exit codes, one-line errors, option parsing helpers.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "adprof/report.h"

namespace adprof::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitUsage = 2;

// Thrown for bad arguments or unreadable input; main prints "adprof: error: WHAT" and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace po = boost::program_options;

// Parses `args` against `options` (+ positionals); converts Boost's errors to UsageError.
po::variables_map parse(const std::vector<std::string> &args,
                        const po::options_description &options,
                        const po::positional_options_description &positional = {});

// Progress on stderr (only when it is a terminal): "  analysing 42%".
// Parses a command's arguments, `positionals` filling one value each, in order. Returns
// nullopt after printing the options (--help); throws a UsageError naming `command` when one
// of the first `required` positionals is missing.
std::optional<po::variables_map> parse_command(const std::string &command,
                                               const std::vector<std::string> &args,
                                               const po::options_description &options,
                                               const std::vector<std::string> &positionals,
                                               size_t required);

// A whole number option in [min, max] (declared as a string option): "-1", "3.5", "12x" or
// a value out of range is a UsageError naming the option and its range.
uint64_t whole_number_option(const po::variables_map &vm, const std::string &option, uint64_t min,
                             uint64_t max);

// --json's lists (report, run): --full keeps every buffer live at the peak; otherwise the --top
// largest, 100 when --top was not given.
JsonOptions json_options(const po::variables_map &vm);
// A number option (declared as a string option), finite and in [min, max]; else a UsageError.
double number_option(const po::variables_map &vm, const std::string &option, double min,
                     double max);

// An output file that appears whole or not at all: written to a temporary file beside `path`
// (same directory, so the rename is atomic), renamed over `path` by commit(). Until then
// `path` is untouched; a writer that fails or throws leaves it as it was (the destructor
// removes the temporary file). Open it only after the input has been read, or at least opened.
// What is at `path` keeps its kind: a symbolic link is followed (its target replaced, the link
// kept); a device, a FIFO, a socket or a descriptor's file named through /proc (/dev/stdout)
// is written in place, never replaced (a FIFO with no reader is refused, not waited on); a
// directory or a dangling link is refused.
class OutputFile {
 public:
  explicit OutputFile(const std::string &path);  // UsageError when it cannot be created
  ~OutputFile();
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;
  std::ostream &stream();
  void commit();  // flushes, checks every write, renames; a failure is a UsageError

 private:
  std::string path_, target_, temp_;
  std::unique_ptr<std::streambuf> in_place_;  // a DescriptorBuf (cli_common.cpp)
  std::unique_ptr<std::ostream> out_;
  bool committed_ = false;
};

// Writes a whole file through OutputFile.
void write_file(const std::string &path, const std::string &text);

// A JSON document as the commands print it (indented by 2). Names that are not UTF-8 (a thread
// name the kernel cut inside a character, a path in another encoding) are printed with U+FFFD in
// place of each bad byte, as the exports do (json_escape.h): nlohmann::json's default refuses
// them with an exception, and the report would have been lost for one byte.
std::string json_text(const nlohmann::json &document);

// The report's own options, shared by `report` and `run`: --top, --full, --details.
void add_report_options(po::options_description &options);

// Says on stderr, in one line, that `trace` was not read whole and why (what is missing, where
// reading stopped), when `complete` is false: "adprof: warning: 'T' is incomplete: REASON".
void warn_if_incomplete(const std::string &trace, bool complete, const std::string &reason);

// Standard output after a command: flushed and checked; a failed write (a full disk, a closed
// pipe) is one line on stderr and exit status 2 (the command's own status if it was already
// non-zero).
int finish_stdout(int status);

// Progress of long work on stderr, one line rewritten in place ("  symbolising stacks  42%"):
// on a terminal only, and only after the first second. end_progress() clears the line.
void show_progress(const char *what, double fraction);
void end_progress();
// Options for analyze() that show its progress so: reading the trace, then the stage after it.
AnalyzeOptions analyze_options_with_progress();

// The interposer `adprof run` preloads: $ADPROF_PRELOAD, else the one beside this executable
// (build tree, or installed under any prefix). Throws a UsageError when there is none.
std::string find_preload();

int command_run(const std::vector<std::string> &args);
int command_report(const std::vector<std::string> &args);
int command_diff(const std::vector<std::string> &args);
int command_check(const std::vector<std::string> &args);
int command_timeline(const std::vector<std::string> &args);
int command_export(const std::vector<std::string> &args);
int command_dump(const std::vector<std::string> &args);
int command_whatif(const std::vector<std::string> &args);

}  // namespace adprof::cli
