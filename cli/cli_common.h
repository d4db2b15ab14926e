// What the adprof subcommands share: exit codes, one-line errors, option parsing helpers.
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

// Writes a whole file; a failure (disk full, no permission) is a UsageError naming the path.
void write_file(const std::string &path, const std::string &text);

void show_progress(const char *what, double fraction);
void end_progress();

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
