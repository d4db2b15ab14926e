// adprof run [-o TRACE] [--json] [--no-report] [--] PROGRAM [ARGS...]
//
// Starts PROGRAM with libadprof_preload.so preloaded and ADPROF_OUTPUT/ADPROF_ROOT_PID set,
// waits for it (forwarding SIGINT/SIGTERM), then analyses the trace and prints the report.
// Exits with the program's status, or 128+N when a signal N ended it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adprof/report.h"
#include "cli_common.h"

namespace adprof::cli {

namespace {

namespace fs = std::filesystem;

pid_t g_child = -1;

void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

// adprof.<program>.<date>-<time>.adtrace in the current directory, with a -N suffix when taken.
std::string default_trace_name(const std::string &program) {
  char stamp[32];
  time_t now = time(nullptr);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
  std::string base = "adprof." + fs::path(program).filename().string() + "." + stamp;
  std::string name = base + ".adtrace";
  for (int i = 1; fs::exists(name); ++i) name = base + "-" + std::to_string(i) + ".adtrace";
  return name;
}

}  // namespace

std::string find_preload() {
  if (const char *env = getenv("ADPROF_PRELOAD"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bindir = exe.parent_path();
    for (const fs::path &candidate :
         {bindir / "../profiler/libadprof_preload.so",  // build tree: bin/ and profiler/
          bindir / ADPROF_PRELOAD_FROM_BINDIR / "libadprof_preload.so",  // installed
          bindir / "libadprof_preload.so"})
      if (fs::exists(candidate, ec)) return fs::canonical(candidate, ec).string();
  }
#ifdef ADPROF_BUILD_PRELOAD
  if (fs::exists(ADPROF_BUILD_PRELOAD, ec)) return ADPROF_BUILD_PRELOAD;
#endif
  throw UsageError("cannot find libadprof_preload.so (set ADPROF_PRELOAD to its path)");
}

int command_run(const std::vector<std::string> &args) {
  po::options_description options(
      "usage: adprof run [-o TRACE] [--json] [--no-report] [--] PROGRAM [ARGS...]\n\n"
      "Runs PROGRAM under the adprof interposer (every allocation is served by jemalloc and\n"
      "recorded with the op, phase and role the program declares), writes the trace and prints\n"
      "the memory report. Exits with PROGRAM's exit status (128+N if signal N ended it).\n"
      "Processes PROGRAM starts with exec are traced into TRACE.<pid>; forked children that do\n"
      "not exec are not traced.\n\n"
      "Options");
  options.add_options()("help,h", "show this help")(
      "output,o", po::value<std::string>(),
      "trace file to create (default: adprof.PROGRAM.DATE-TIME.adtrace); never overwritten")(
      "json", "print the report as JSON")("no-report", "only record; print no report")(
      "top", po::value<size_t>()->default_value(10), "rows in each table of the report");

  // adprof's options end at the first argument that is not one (or at "--").
  size_t program_at = 0;
  while (program_at < args.size()) {
    const std::string &a = args[program_at];
    if (a == "--") {
      ++program_at;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    program_at += (a == "-o" || a == "--output" || a == "--top") ? 2 : 1;
  }
  program_at = std::min(program_at, args.size());
  std::vector<std::string> own(args.begin(),
                               args.begin() + static_cast<std::ptrdiff_t>(program_at));
  if (!own.empty() && own.back() == "--") own.pop_back();
  auto vm = parse(own, options);
  if (vm.count("help")) {
    std::cout << options;
    return kExitOk;
  }
  std::vector<std::string> program(args.begin() + static_cast<std::ptrdiff_t>(program_at),
                                   args.end());
  if (program.empty()) throw UsageError("run needs a PROGRAM to profile (see adprof run --help)");

  std::string preload = find_preload();
  std::string trace =
      vm.count("output") ? vm["output"].as<std::string>() : default_trace_name(program[0]);
  struct stat st;
  if (lstat(trace.c_str(), &st) == 0)
    throw UsageError("'" + trace + "' already exists; adprof never overwrites a trace");
  {
    fs::path parent = fs::path(trace).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec))
      throw UsageError("cannot create '" + trace + "': no directory '" + parent.string() + "'");
  }

  // A close-on-exec pipe tells the parent whether exec failed, and why.
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) throw std::runtime_error(strerror(errno));
  fflush(nullptr);
  pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("fork failed: ") + strerror(errno));
  if (child == 0) {
    close(status_pipe[0]);
    std::string ld = preload;
    if (const char *old = getenv("LD_PRELOAD"); old && *old) ld += std::string(":") + old;
    setenv("LD_PRELOAD", ld.c_str(), 1);
    setenv("ADPROF_OUTPUT", trace.c_str(), 1);
    setenv("ADPROF_ROOT_PID", std::to_string(getpid()).c_str(), 1);
    std::vector<char *> argv;
    for (auto &a : program) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    ssize_t ignored = write(status_pipe[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  close(status_pipe[1]);
  g_child = child;
  struct sigaction sa = {}, old_int, old_term;
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(status_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (n == static_cast<ssize_t>(sizeof exec_errno))
    throw UsageError("cannot run '" + program[0] + "': " + strerror(exec_errno));

  int exit_code;
  std::string how;
  if (WIFSIGNALED(status)) {
    exit_code = 128 + WTERMSIG(status);
    how = std::string("was ended by signal ") + std::to_string(WTERMSIG(status)) + " (" +
          strsignal(WTERMSIG(status)) + ")";
  } else {
    exit_code = WEXITSTATUS(status);
    how = "exited with status " + std::to_string(exit_code);
  }
  std::cerr << "adprof: " << program[0] << " " << how << "; trace: " << trace << "\n";
  if (lstat(trace.c_str(), &st) != 0) {
    std::cerr << "adprof: error: no trace was written (see the messages above)\n";
    return exit_code != 0 ? exit_code : kExitUsage;
  }
  // Follow the program through exec (a wrapper script that execs the real program): each image
  // closes its trace with an "exec" footer and the next one writes TRACE.1, TRACE.2, ...
  std::string reported = trace;
  for (int image = 1; image < 1000; ++image) {
    std::string next = trace + "." + std::to_string(image);
    if (lstat(next.c_str(), &st) != 0) break;
    try {
      if (!TraceReader(reported).end().exec) break;
    } catch (const TraceError &) {
      break;
    }
    reported = next;
  }
  if (reported != trace)
    std::cerr << "adprof: " << program[0]
              << " replaced itself with exec; reporting its last image: " << reported << "\n";
  if (vm.count("no-report")) return exit_code;
  AnalyzeOptions analyze_options;
  analyze_options.progress = [](double f) { show_progress("analysing", f); };
  Report report = analyze(reported, analyze_options);
  end_progress();
  if (vm.count("json"))
    std::cout << to_json(report).dump(2) << '\n';
  else
    std::cout << render_text(report, vm["top"].as<size_t>());
  return exit_code;
}

}  // namespace adprof::cli
