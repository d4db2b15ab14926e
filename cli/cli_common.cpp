#include "cli_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

namespace adprof::cli {

po::variables_map parse(const std::vector<std::string> &args,
                        const po::options_description &options,
                        const po::positional_options_description &positional) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error &e) {
    throw UsageError(e.what());
  }
  return vm;
}

std::optional<po::variables_map> parse_command(const std::string &command,
                                               const std::vector<std::string> &args,
                                               const po::options_description &options,
                                               const std::vector<std::string> &positionals,
                                               size_t required) {
  po::positional_options_description positional;
  for (const std::string &name : positionals) positional.add(name.c_str(), 1);
  po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    std::cout << options;
    return std::nullopt;
  }
  for (size_t i = 0; i < required && i < positionals.size(); ++i) {
    if (vm.count(positionals[i])) continue;
    std::string names;
    for (size_t k = 0; k < required; ++k) {
      std::string upper = positionals[k];
      for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      names += (k ? " and " : "") + upper;
    }
    throw UsageError(command + " needs " + names + " (see adprof " + command + " --help)");
  }
  return vm;
}

JsonOptions json_options(const po::variables_map &vm) {
  JsonOptions o;
  o.full = vm.count("full") > 0;
  if (vm.count("top") && !vm["top"].defaulted())
    o.top = static_cast<size_t>(whole_number_option(vm, "top", 1, 100000));
  return o;
}

uint64_t whole_number_option(const po::variables_map &vm, const std::string &option, uint64_t min,
                             uint64_t max) {
  const std::string text = vm[option].as<std::string>();
  const std::string range = "--" + option + " takes a whole number from " + std::to_string(min) +
                            " to " + std::to_string(max) + " (got '" + text + "')";
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw UsageError(range);
  errno = 0;
  const unsigned long long v = strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max) throw UsageError(range);
  return v;
}

double number_option(const po::variables_map &vm, const std::string &option, double min,
                     double max) {
  const std::string text = vm[option].as<std::string>();
  char *end = nullptr;
  errno = 0;
  const double v = strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < min || v > max) {
    char range[128];
    snprintf(range, sizeof range, "--%s takes a number from %g to %g", option.c_str(), min, max);
    throw UsageError(std::string(range) + " (got '" + text + "')");
  }
  return v;
}

namespace {

// A stream buffer over a descriptor: an output written in place (a device, a FIFO, a pipe
// named through /dev/stdout), where no temporary file can stand for it.
class DescriptorBuf : public std::streambuf {
 public:
  explicit DescriptorBuf(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  ~DescriptorBuf() override { close(fd_); }
  DescriptorBuf(const DescriptorBuf &) = delete;
  DescriptorBuf &operator=(const DescriptorBuf &) = delete;
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char *p = pbase();
    while (p < pptr()) {
      const ssize_t n = write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : EIO;
        return false;
      }
      p += n;
    }
    setp(buffer_, buffer_ + sizeof buffer_);
    return true;
  }
  int fd_;
  int error_ = 0;
  char buffer_[1 << 16];
};

// Where an output path leads. A symbolic link is followed to its target, which is what gets
// written (the link stays); a link through /proc (/dev/stdout, /proc/self/fd/N) names a
// descriptor's file, written in place like a device.
struct OutputTarget {
  enum Kind { kNew, kRegular, kInPlace } kind = kNew;
  std::string path;  // the file to replace (kRegular) or create (kNew)
};

std::string directory_of(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

OutputTarget resolve_output(const std::string &path) {
  OutputTarget target{OutputTarget::kNew, path};
  std::string at = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(at.c_str(), &st) != 0) {
      if (errno != ENOENT) throw UsageError("cannot write '" + path + "': " + strerror(errno));
      if (at != path)
        throw UsageError("cannot write '" + path + "': it is a symbolic link to '" + at +
                         "', which does not exist");
      return target;
    }
    if (S_ISDIR(st.st_mode)) throw UsageError("cannot write '" + path + "': it is a directory");
    if (!S_ISLNK(st.st_mode)) {
      target.kind = S_ISREG(st.st_mode) ? OutputTarget::kRegular : OutputTarget::kInPlace;
      target.path = at;
      return target;
    }
    char dir_real[PATH_MAX];
    if (realpath(directory_of(at).c_str(), dir_real) &&
        (strcmp(dir_real, "/proc") == 0 || strncmp(dir_real, "/proc/", 6) == 0))
      return {OutputTarget::kInPlace, path};  // a descriptor's file: opened through the link
    char link[PATH_MAX];
    const ssize_t n = readlink(at.c_str(), link, sizeof link - 1);
    if (n < 0) throw UsageError("cannot write '" + path + "': " + strerror(errno));
    link[n] = 0;
    at = link[0] == '/' ? std::string(link) : directory_of(at) + "/" + link;
  }
  throw UsageError("cannot write '" + path + "': too many levels of symbolic links");
}

}  // namespace

OutputFile::OutputFile(const std::string &path) : path_(path) {
  const OutputTarget target = resolve_output(path);
  if (target.kind == OutputTarget::kInPlace) {
    // A device, a FIFO, a socket or a descriptor's file: written in place, never replaced. A
    // FIFO nobody reads would block the open: refused instead. Appending: a regular file
    // behind /dev/stdout is the shell's redirection, written after what is already there.
    int fd = open(target.path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      const std::string why = errno == ENXIO ? "nothing reads from it" : strerror(errno);
      throw UsageError("cannot write '" + path + "': " + why);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    in_place_ = std::make_unique<DescriptorBuf>(fd);
    out_ = std::make_unique<std::ostream>(in_place_.get());
    return;
  }
  target_ = target.path;  // a link's target is replaced, the link stays
  const size_t slash = target_.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : target_.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? target_ : target_.substr(slash + 1);
  // A name of our own beside the output: created exclusively (0666 less the umask, as the
  // output would be), then written through a stream.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ =
        dir + "." + base + ".adprof-" + std::to_string(getpid()) + "-" + std::to_string(attempt);
    int fd = open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      close(fd);
      auto file = std::make_unique<std::ofstream>(temp_, std::ios::binary | std::ios::trunc);
      if (*file) {
        out_ = std::move(file);
        return;
      }
      break;
    }
    if (errno != EEXIST) break;
  }
  const std::string why = strerror(errno);
  temp_.clear();
  throw UsageError("cannot write '" + path + "': " + why);
}

OutputFile::~OutputFile() {
  out_.reset();
  in_place_.reset();
  if (!committed_ && !temp_.empty()) unlink(temp_.c_str());
}

std::ostream &OutputFile::stream() { return *out_; }

void OutputFile::commit() {
  out_->flush();
  const bool written = static_cast<bool>(*out_);
  if (in_place_) {
    if (!written) {
      const int err = static_cast<DescriptorBuf &>(*in_place_).error();
      throw UsageError("cannot write '" + path_ + "': " + (err ? strerror(err) : "write failed"));
    }
    committed_ = true;
    return;
  }
  auto &file = static_cast<std::ofstream &>(*out_);
  file.close();
  if (!written || file.fail()) throw UsageError("cannot write '" + path_ + "' (disk full?)");
  if (rename(temp_.c_str(), target_.c_str()) != 0)
    throw UsageError("cannot write '" + path_ + "': " + strerror(errno));
  committed_ = true;
}

void write_file(const std::string &path, const std::string &text) {
  OutputFile out(path);
  out.stream() << text;
  out.commit();
}

void warn_if_incomplete(const std::string &trace, bool complete, const std::string &reason) {
  if (complete) return;
  end_progress();
  fprintf(stderr, "adprof: warning: '%s' is incomplete: %s\n", trace.c_str(), reason.c_str());
}

int finish_stdout(int status) {
  std::cout.flush();
  const bool stream_ok = static_cast<bool>(std::cout);
  errno = 0;
  const bool flushed = fflush(stdout) == 0 && !ferror(stdout);
  if (stream_ok && flushed) return status;
  const int err = errno;
  fprintf(stderr, "adprof: error: cannot write to standard output%s%s\n", err ? ": " : "",
          err ? strerror(err) : "");
  return status != kExitOk ? status : kExitUsage;
}

namespace {
bool g_progress_shown = false;
bool g_progress_started = false;
std::chrono::steady_clock::time_point g_progress_start, g_progress_last;
std::string g_progress_what;
}  // namespace

void show_progress(const char *what, double fraction) {
  if (!isatty(2)) return;  // quiet when piped or redirected
  const auto now = std::chrono::steady_clock::now();
  if (!g_progress_started) {
    g_progress_started = true;
    g_progress_start = now;
  }
  // Only long work says how far it is: nothing in its first second (ADPROF_PROGRESS_DELAY_MS,
  // for tests), then ten lines a second at most (and each new stage at once).
  static const long delay_ms = [] {
    const char *text = getenv("ADPROF_PROGRESS_DELAY_MS");
    return text && *text ? strtol(text, nullptr, 10) : 1000L;
  }();
  if (now - g_progress_start < std::chrono::milliseconds(delay_ms)) return;
  if (g_progress_shown && g_progress_what == what &&
      now - g_progress_last < std::chrono::milliseconds(100))
    return;
  g_progress_last = now;
  g_progress_what = what;
  fprintf(stderr, "\r  %s %3.0f%%%-12s", what, std::clamp(fraction, 0.0, 1.0) * 100.0, "");
  fflush(stderr);
  g_progress_shown = true;
}

AnalyzeOptions analyze_options_with_progress() {
  AnalyzeOptions options;
  options.progress = [](double f) { show_progress("reading the trace", f); };
  options.stage_progress = [](const char *what, double f) { show_progress(what, f); };
  return options;
}

void end_progress() {
  if (g_progress_shown) fprintf(stderr, "\r%60s\r", "");
  g_progress_shown = false;
}

void add_report_options(po::options_description &options) {
  options.add_options()("top", po::value<std::string>()->default_value("10"),
                        "rows in each table (1 to 100000)")(
      "full",
      "with --json: every buffer live at the peak (default: the --top largest, 100 "
      "unless --top is given)")(
      "details",
      "also what the program's author cannot act on: the allocator's overhead, anonymous "
      "mappings, findings about the allocator or the engine; and every finding of a kind past "
      "--top");
}

std::string json_text(const nlohmann::json &document) {
  return document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace adprof::cli
