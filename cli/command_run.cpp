// adprof run [-o TRACE] [--stacks] [--json] [--no-report] [--torch | --jax] [--] PROGRAM [ARGS...]
//
// --torch: PROGRAM is a Python interpreter; adprof's hook (adprof/torch/__main__.py, by its
// path, which imports adprof from its own directory) goes after it (and its own options), and
// the package's directory (installed, or the source tree's python/ in a build tree) first on
// PYTHONPATH, so that PyTorch's ops, phases and roles are recorded; before it, the bootstrap
// (adprof/_bootstrap/sitecustomize.py), so that every other Python process of the run is
// instrumented when it imports torch. A Python program of its own (torchrun: a script whose
// "#!" names python) runs as it is, its processes instrumented by the bootstrap. --jax: the same
// hook with adprof/jax/__main__.py (XLA's buffer assignment, docs/JAX.md).
// --stacks with a Python interpreter running a script or a module (not -c): the same with the
// Python-frames hook (adprof/stacks/__main__.py; PYTHONPATH untouched), so that the stacks name
// the Python functions and lines (docs/STACKS.md, "Python frames").
//
// Starts PROGRAM with libadprof_preload.so preloaded and ADPROF_OUTPUT (absolute),
// ADPROF_ROOT_PID and ADPROF_RUN_ID set, waits for it, then says which processes and images
// were traced where (the files whose header carries this run's id) and prints the report of
// the program's last image. Exits with the program's status; when a signal N ended it, dies
// of the same signal if N ends a process without a core dump (SIGINT, SIGTERM, ...), else
// exits 128+N.
//
// Signals: SIGINT and SIGQUIT come from the terminal to the whole process group, so the
// program has them already: adprof ignores them while it waits (as time(1) does). Other
// terminating signals sent to adprof are forwarded to the program, unless the kernel sent them
// to the whole group (a terminal hang-up).
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "adprof/ad_analysis.h"
#include "cli_common.h"
#include "job_cli.h"

namespace adprof::cli {

namespace {

namespace fs = std::filesystem;

pid_t g_child = -1;

void forward_signal(int sig, siginfo_t *info, void *) {
  const int saved_errno = errno;  // the waitpid this interrupts reads errno after it
  if (g_child > 0 && info->si_code != SI_KERNEL) kill(g_child, sig);
  errno = saved_errno;
}

// What adprof does with each signal while the program runs; restored before it reports.
class SignalsWhileWaiting {
 public:
  SignalsWhileWaiting() {
    struct sigaction ignore = {}, forward = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    forward.sa_sigaction = forward_signal;
    forward.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&forward.sa_mask);
    for (int sig : kIgnored) set(sig, ignore);
    for (int sig : kForwarded) set(sig, forward);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) set(sig, forward);
  }
  ~SignalsWhileWaiting() {
    for (auto &[sig, old] : saved_) sigaction(sig, &old, nullptr);
  }
  SignalsWhileWaiting(const SignalsWhileWaiting &) = delete;
  SignalsWhileWaiting &operator=(const SignalsWhileWaiting &) = delete;

 private:
  static constexpr int kIgnored[] = {SIGINT, SIGQUIT, SIGPIPE};
  static constexpr int kForwarded[] = {SIGTERM, SIGHUP,  SIGUSR1,   SIGUSR2,
                                       SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF};
  void set(int sig, const struct sigaction &sa) {
    struct sigaction old;
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) return;
    sigaction(sig, &sa, &old);
    saved_[sig] = old;
  }
  std::map<int, struct sigaction> saved_;
};

// A nonzero id shared by every trace file of this run (trace_format.h, header offset 56).
uint32_t new_run_id() {
  uint32_t id = 0;
  while (id == 0)
    if (getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id))
      id = static_cast<uint32_t>(time(nullptr) ^ (getpid() << 16));
  return id;
}

// The root process's trace, created before the program starts (exclusively, never through a
// link, mode 0600) and holding this run's claim (trace_format.h, "Claim"), which the program's
// preloaded interposer takes over. Removed again when the program never took it.
class TraceClaim {
 public:
  TraceClaim(const std::string &path, uint32_t run_id) : path_(path), run_id_(run_id) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST)
      throw UsageError("'" + path + "' already exists; adprof never overwrites a trace");
    if (fd < 0) throw UsageError("cannot create '" + path + "': " + strerror(errno));
    uint8_t header[format::kFileHeaderSize];
    format::make_claim(header, run_id);
    const bool written = write(fd, header, sizeof header) == static_cast<ssize_t>(sizeof header);
    const int err = errno;
    close(fd);
    if (!written) {
      unlink(path.c_str());
      throw UsageError("cannot write '" + path + "': " + strerror(err));
    }
  }
  ~TraceClaim() {
    if (unused()) unlink(path_.c_str());
  }
  TraceClaim(const TraceClaim &) = delete;
  TraceClaim &operator=(const TraceClaim &) = delete;
  // The file still holds the claim alone: no process of the run took it.
  bool unused() const {
    uint8_t header[format::kFileHeaderSize];
    const int fd = open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    const bool claim = fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof header) &&
                       pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header) &&
                       format::is_claim(header, run_id_);
    close(fd);
    return claim;
  }

 private:
  std::string path_;
  uint32_t run_id_;
};

// Signals whose default action ends a process without a core dump: `adprof run` dies of the
// same signal the program died of (after its report), so that a shell sees what it would have
// seen without adprof (bash ends a loop whose command died of SIGINT; 130 is only a number).
// A signal that dumps core (SIGSEGV, SIGABRT, SIGQUIT, ...) is exit status 128+N instead: a
// core of adprof's would mislead.
bool ends_without_core(int sig) {
  switch (sig) {
    case SIGHUP:
    case SIGINT:
    case SIGKILL:
    case SIGPIPE:
    case SIGALRM:
    case SIGTERM:
    case SIGUSR1:
    case SIGUSR2:
    case SIGIO:
    case SIGPROF:
    case SIGVTALRM:
#ifdef SIGSTKFLT
    case SIGSTKFLT:
#endif
#ifdef SIGPWR
    case SIGPWR:
#endif
      return true;
    default:
      return sig >= SIGRTMIN && sig <= SIGRTMAX;
  }
}

// The end of `adprof run`: its status `exit_code`, or, when the program died of a signal that
// ends a process without a core, that signal (standard output flushed first).
int end_as_the_program(int wait_status, int exit_code) {
  if (!WIFSIGNALED(wait_status) || !ends_without_core(WTERMSIG(wait_status))) return exit_code;
  const int sig = WTERMSIG(wait_status);
  const int flushed = finish_stdout(exit_code);
  if (flushed != exit_code) return flushed;  // the output failed: that is the status to give
  fflush(nullptr);
  signal(sig, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  raise(sig);
  return exit_code;  // not reached: the signal ends the process
}

struct TracedImage {
  std::string path;
  uint64_t pid = 0;
  uint64_t untraced_fork_children = 0;  // its footer's count
  uint64_t start_wall_ns = 0;
  std::string ending;  // how it ended, in words
  bool exec = false;
};

// The trace files of this run: TRACE and TRACE.* beside it whose header has this run's id.
// Files of other runs (a stale TRACE.1) and files that are not traces are passed over.
std::vector<TracedImage> traced_images(const std::string &trace, uint32_t run_id) {
  std::vector<TracedImage> images;
  fs::path dir = fs::path(trace).parent_path();
  const std::string base = fs::path(trace).filename().string();
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != base && name.rfind(base + ".", 0) != 0) continue;
    if (!entry.is_regular_file(ec)) continue;
    try {
      TraceReader reader(entry.path().string());
      if (reader.header().run_id != run_id) continue;
      TracedImage image;
      image.path = entry.path().string();
      image.pid = reader.header().pid;
      image.start_wall_ns = reader.header().start_wall_ns;
      image.exec = reader.end().exec;
      image.untraced_fork_children = reader.end().untraced_fork_children;
      image.ending = reader.end().complete ? "exited"
                     : reader.end().exec   ? "exec'd"
                                           : reader.end().reason;
      images.push_back(std::move(image));
    } catch (const TraceError &) {
    }
  }
  std::sort(images.begin(), images.end(), [](const TracedImage &a, const TracedImage &b) {
    return a.start_wall_ns < b.start_wall_ns;
  });
  return images;
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

// The directory holding the Python package adprof/ (for PYTHONPATH): installed relative to this
// executable, else the source tree's python/ (a build tree).
std::string find_python_package() {
  if (const char *env = getenv("ADPROF_PYTHON_DIR"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path() / ADPROF_PYTHON_FROM_BINDIR);
  candidates.push_back(ADPROF_SOURCE_PYTHON);
  for (const fs::path &dir : candidates)
    if (fs::exists(dir / "adprof" / "torch" / "__main__.py", ec))
      return fs::canonical(dir, ec).string();
  throw UsageError(
      "--torch: cannot find the adprof Python package (set ADPROF_PYTHON_DIR to the directory "
      "holding adprof/)");
}

// Python's options that take a value in the next argument.
bool python_option_takes_value(const std::string &a) {
  return a == "-W" || a == "-X" || a == "--check-hash-based-pycs";
}

std::string program_file(const std::string &name);

// PROGRAM with adprof's hook (`hook`: python/adprof/ENGINE/__main__.py, by its path, for
// `engine` "torch" or "jax") after the
// interpreter and its options: `python3 -u train.py` becomes `python3 -u HOOK train.py`;
// `python3 -m pkg.train` becomes `python3 HOOK -m pkg.train`. By path, not `-m adprof.torch`:
// -m searches the working directory first, where a user's adprof.py or package adprof/ was
// imported instead of adprof's (the hook puts its own directory first).
std::vector<std::string> with_engine_instrumentation(const std::vector<std::string> &program,
                                                     const std::string &hook,
                                                     const std::string &engine) {
  const std::string flag = "--" + engine;  // "--torch", "--jax"
  const std::string interpreter = fs::path(program[0]).filename().string();
  // A Python program of its own (torchrun, a console script): it runs as it is, and the
  // bootstrap on PYTHONPATH instruments each of its Python processes that imports torch.
  if (engine == "torch" && interpreter.rfind("python", 0) != 0 &&
      is_python_script(program_file(program[0])))
    return program;
  if (interpreter.rfind("python", 0) != 0)
    throw UsageError(
        engine == "torch"
            ? "--torch needs a Python interpreter or a Python program as PROGRAM (adprof run "
              "--torch -- python3 train.py, or torchrun ... train.py), not '" +
                  program[0] + "'"
            : flag + " needs a Python interpreter as PROGRAM (adprof run " + flag + " -- " +
                  "python3 train.py), not '" + program[0] + "'");
  size_t at = 1;
  while (at < program.size()) {
    const std::string &a = program[at];
    if (a == "-m" || a.empty() || a[0] != '-' || a == "-" || a == "--") break;
    if (a == "-c" || a.rfind("-c", 0) == 0)
      throw UsageError(
          flag + " runs a script or a module (python3 train.py, python3 -m pkg), not python3 -c");
    at += python_option_takes_value(a) ? 2 : 1;
  }
  at = std::min(at, program.size());
  if (at + 1 < program.size() && program[at] == "-m" && program[at + 1] == "adprof." + engine)
    return program;  // already there
  if (at == program.size())
    throw UsageError(flag + " needs a script to run (adprof run " + flag + " -- python3 train.py)");
  // `python3 -- train.py`: the module goes before the "--", which then has no use.
  const size_t rest = program[at] == "--" ? at + 1 : at;
  if (rest == program.size())
    throw UsageError(flag + " needs a script to run (adprof run " + flag + " -- python3 train.py)");
  // A mistyped script path: one line before anything runs (python's error, then a full report
  // of a 0.03 s run, read as a profile).
  std::error_code ec;
  if (program[rest] != "-m" && program[rest] != "-" && !fs::exists(program[rest], ec))
    throw UsageError(flag + ": no script '" + program[rest] + "' (" +
                     (fs::path(program[rest]).is_absolute()
                          ? std::string("no such file")
                          : "no such file in " + fs::current_path(ec).string()) +
                     ")");
  std::vector<std::string> out(program.begin(), program.begin() + static_cast<std::ptrdiff_t>(at));
  out.push_back(hook);
  out.insert(out.end(), program.begin() + static_cast<std::ptrdiff_t>(rest), program.end());
  return out;
}

// PROGRAM's file: as given when it names a path, else the first executable of that name on
// PATH (as execvp finds it). Empty when there is none.
std::string program_file(const std::string &name) {
  if (name.find('/') != std::string::npos) return name;
  const char *path = getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = end > at ? dirs.substr(at, end - at) : ".";
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate;
    at = end + 1;
  }
  return "";
}

bool starts_with_shebang(const std::string &file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char head[2] = {};
  ssize_t n = read(fd, head, 2);
  close(fd);
  return n == 2 && head[0] == '#' && head[1] == '!';
}

// What `interpreter -c 'import sys; print(sys.executable)'` prints (its first line), run plain
// (no interposer), with a time limit; empty when it fails.
std::string ask_sys_executable(const std::string &interpreter) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return "";
  fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    close(out[0]);
    close(out[1]);
    return "";
  }
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    alarm(30);  // a shim that hangs does not hang the run
    execlp(interpreter.c_str(), interpreter.c_str(), "-c",
           "import sys; sys.stdout.write(sys.executable or '')", static_cast<char *>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0 && text.size() < 65536) text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
  return text.substr(0, text.find('\n'));
}

// pyenv's and conda's `python3` may be a shell script that execs the real interpreter (a
// shim). Profiled as it is, the shim's shell, pyenv's own commands and the interpreter were all
// traced (39 images), and the instrumentation may start in another interpreter than the one the
// shim picks. The run takes the interpreter the shim runs (its sys.executable) and says so;
// one that does not say is profiled as it is, with a word.
std::string resolve_python_shim(const std::string &interpreter) {
  const std::string file = program_file(interpreter);
  if (file.empty() || !starts_with_shebang(file)) return interpreter;
  const std::string real = ask_sys_executable(interpreter);
  std::error_code ec;
  if (!real.empty() && real[0] == '/' && access(real.c_str(), X_OK) == 0 &&
      !starts_with_shebang(real) && !fs::equivalent(real, file, ec)) {
    std::cerr << "adprof: --torch: " << interpreter << " is a script (" << file
              << "), not an interpreter; profiling the interpreter it runs: " << real << "\n";
    return real;
  }
  std::cerr << "adprof: --torch: " << interpreter << " is a script (" << file
            << ") that did not name the interpreter it runs; profiling it as it is (name the "
               "interpreter itself: adprof run --torch -- /path/to/python3 SCRIPT)\n";
  return interpreter;
}

// PROGRAM, a Python interpreter running a script or a module, with adprof's Python-frames
// hook (`hook`: python/adprof/stacks/__main__.py) after the interpreter and its options, as
// with_torch_instrumentation() does; anything else (not python*, python3 -c, no script)
// unchanged, its stacks then native only. `note`: what to say when a Python program is left so.
std::vector<std::string> with_python_frames(const std::vector<std::string> &program,
                                            const std::string &hook, std::string *note) {
  const std::string interpreter = fs::path(program[0]).filename().string();
  if (interpreter.rfind("python", 0) != 0) return program;
  size_t at = 1;
  while (at < program.size()) {
    const std::string &a = program[at];
    if (a == "-m" || a.empty() || a[0] != '-' || a == "-" || a == "--") break;
    if (a.rfind("-c", 0) == 0) {
      *note = "adprof: " + interpreter +
              " -c: call stacks show native frames only (Python frames need a script or -m "
              "MODULE)";
      return program;
    }
    at += python_option_takes_value(a) ? 2 : 1;
  }
  const size_t rest = at < program.size() && program[at] == "--" ? at + 1 : at;
  if (rest >= program.size() || program[rest] == "-") return program;  // the REPL, stdin
  std::vector<std::string> out(program.begin(), program.begin() + static_cast<std::ptrdiff_t>(at));
  out.push_back(hook);
  out.insert(out.end(), program.begin() + static_cast<std::ptrdiff_t>(rest), program.end());
  return out;
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
      "usage: adprof run [-o TRACE] [--stacks] [--steps A:B] [--torch | --jax] [--json]\n"
      "                  [--no-report] [--] PROGRAM [ARGS...]\n\n"
      "Runs PROGRAM under the adprof interposer (every allocation is served by jemalloc and\n"
      "recorded with the op, phase and role the program declares), writes the trace and prints\n"
      "the memory report. Exits with PROGRAM's exit status; when signal N ended PROGRAM, adprof\n"
      "dies of N too (SIGINT, SIGTERM, ...: a shell loop stops at Ctrl-C), or exits 128+N when N\n"
      "dumps core (SIGSEGV, SIGABRT, SIGQUIT, ...).\n"
      "Every process PROGRAM starts is traced into TRACE.<pid>: a forked child (a DataLoader's\n"
      "or multiprocessing's worker) as its own image, naming its parent, from the fork on\n"
      "(ADPROF_FORK=0: only once it execs); one that execs at once as the image it execs. An\n"
      "image that replaces itself with exec continues in TRACE.1, TRACE.2, ... Every file of\n"
      "one run carries the run's id, and adprof lists them.\n"
      "While PROGRAM runs, adprof ignores SIGINT and SIGQUIT (the terminal sends them to\n"
      "PROGRAM too) and forwards other terminating signals sent to it.\n"
      "--torch: PROGRAM is a Python interpreter running a PyTorch script (adprof run --torch\n"
      "-- python3 train.py ARGS) or a Python program such as torchrun; its ops, phases and\n"
      "roles (parameters, activations, forward caches, gradients, optimizer state) are\n"
      "recorded in every Python process of the run that imports torch (a launcher's ranks,\n"
      "spawned workers), each saying what it is; a run with ranks is reported as a job, the\n"
      "ranks side by side (adprof report --job; docs/PYTORCH.md, \"Training jobs\").\n"
      "--jax: the same for a JAX script: every program XLA compiles is read from XLA's own\n"
      "buffer assignment, its temp arena cut into its logical buffers (docs/JAX.md).\n"
      "--steps A:B: a long job's trace stays small: every event of the steps A to B-1 (the\n"
      "program's step marks: an optimizer's steps under --torch) is recorded, and of every\n"
      "other step a summary (its peak, bytes by role at its peak and at its start,\n"
      "allocations); the report shows every step's peak (docs/RECORDING.md, \"Step windows\").\n"
      "What a process does before its first step mark is recorded in full (its start-up; a\n"
      "process that never marks one, as a launcher or a DataLoader's worker, is recorded\n"
      "whole).\n\n"
      "Options");
  options.add_options()("help,h", "show this help")(
      "output,o", po::value<std::string>(),
      "trace file to create (default: adprof.PROGRAM.DATE-TIME.adtrace); never overwritten")(
      "stacks",
      "record each allocation's call stack (libunwind), symbolised when the trace is read: "
      "the report then names the allocation sites; a Python script's (CPython 3.11-3.13) "
      "with its Python functions and lines")("json", "print the report as JSON")(
      "no-report", "only record; print no report")(
      "steps", po::value<std::string>(),
      "A:B (0 <= A < B): record every event of steps A to B-1 and before the first step, a "
      "summary of each other step")(
      "torch",
      "PROGRAM is python running a PyTorch script, or a Python program starting them "
      "(torchrun): record the AD roles of each")(
      "jax", "PROGRAM is python running a JAX script: record XLA's buffers and their AD roles");
  add_report_options(options);

  // adprof's options end at the first argument that is not one (or at "--").
  size_t program_at = 0;
  while (program_at < args.size()) {
    const std::string &a = args[program_at];
    if (a == "--") {
      ++program_at;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    program_at += (a == "-o" || a == "--output" || a == "--top" || a == "--steps") ? 2 : 1;
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
  std::string python_path;
  if (vm.count("torch") && vm.count("jax"))
    throw UsageError("--torch and --jax: one engine per run");
  std::string steps;  // ADPROF_STEPS (preload/step_window.h)
  if (vm.count("steps")) {
    steps = vm["steps"].as<std::string>();
    const size_t colon = steps.find(':');
    const std::string first = steps.substr(0, colon),
                      end = colon == std::string::npos ? "" : steps.substr(colon + 1);
    auto digits = [](const std::string &s) {
      return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(first) || !digits(end) || std::stoull(first) >= std::stoull(end))
      throw UsageError(
          "--steps takes A:B, whole numbers with A < B (the steps A to B-1 in full), not '" +
          steps + "'");
  }
  if (vm.count("torch") || vm.count("jax")) {
    const std::string engine = vm.count("jax") ? "jax" : "torch";
    python_path = find_python_package();
    program = with_engine_instrumentation(
        program, (fs::path(python_path) / "adprof" / engine / "__main__.py").string(), engine);
    if (fs::path(program[0]).filename().string().rfind("python", 0) == 0)
      program[0] = resolve_python_shim(program[0]);  // not a Python program of its own
  } else if (vm.count("stacks") &&
             fs::path(program[0]).filename().string().rfind("python", 0) == 0) {
    // Python frames in the stacks (docs/STACKS.md, "Python frames"); without the package,
    // native frames only.
    std::string note;
    try {
      // The hook finds the package beside itself: PYTHONPATH is left as it was (the program's
      // children see the environment they would without adprof).
      program = with_python_frames(
          program, (fs::path(find_python_package()) / "adprof" / "stacks" / "__main__.py").string(),
          &note);
    } catch (const UsageError &) {
      note = "adprof: call stacks show native frames only (cannot find the adprof Python package)";
    }
    if (!note.empty()) std::cerr << note << "\n";
  }

  const uint64_t top = whole_number_option(vm, "top", 1, 100000);
  if (vm.count("output") && vm["output"].as<std::string>().empty())
    throw UsageError("-o needs a file name");
  std::string preload = find_preload();
  // Absolute: the program may change directory before it execs (the next image's trace).
  std::string trace = fs::absolute(vm.count("output") ? vm["output"].as<std::string>()
                                                      : default_trace_name(program[0]))
                          .lexically_normal()
                          .string();
  struct stat st;
  {
    fs::path parent = fs::path(trace).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec))
      throw UsageError("cannot create '" + trace + "': no directory '" + parent.string() + "'");
  }
  const uint32_t run_id = new_run_id();
  // The trace is claimed before the program starts: a second run naming the same file (at the
  // same time, or later) is refused here, before its program runs.
  TraceClaim claim(trace, run_id);

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
    setenv("ADPROF_RUN_ID", std::to_string(run_id).c_str(), 1);
    // Only a run with stacks adds the variable: every variable more is allocations more in a
    // program that copies its environment (bash, Python), a difference the run must not make.
    if (vm.count("stacks"))
      setenv("ADPROF_STACKS", "1", 1);
    else
      unsetenv("ADPROF_STACKS");
    if (!steps.empty())
      setenv("ADPROF_STEPS", steps.c_str(), 1);
    else
      unsetenv("ADPROF_STEPS");
    if (!python_path.empty()) {
      // Under --torch, the bootstrap first: every Python process of the run (a launcher's
      // ranks, spawned workers) installs the instrumentation when it imports torch (its
      // sitecustomize.py). --jax instruments the program's own process only.
      std::string path =
          vm.count("torch") ? python_bootstrap_dir(python_path) + ":" + python_path : python_path;
      if (const char *old = getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
      setenv("PYTHONPATH", path.c_str(), 1);
    }
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
  int exec_errno = 0;
  ssize_t n;
  int status = 0;
  {
    SignalsWhileWaiting signals;
    do {
      n = read(status_pipe[0], &exec_errno, sizeof exec_errno);
    } while (n < 0 && errno == EINTR);
    close(status_pipe[0]);
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (n == static_cast<ssize_t>(sizeof exec_errno))  // the claim is removed on the way out
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
  if (lstat(trace.c_str(), &st) != 0 || claim.unused()) {
    std::cerr << "adprof: error: no trace was written (see the messages above)\n";
    return end_as_the_program(status, exit_code != 0 ? exit_code : kExitUsage);
  }
  // The program's images: the root process's files of this run, in the order they started (a
  // wrapper script that execs the real program closes each with an "exec" footer). Reported:
  // the last one.
  std::vector<TracedImage> images = traced_images(trace, run_id);
  std::string reported = trace;
  size_t root_images = 0;
  for (const TracedImage &image : images)
    if (image.pid == static_cast<uint64_t>(child)) {
      reported = image.path;
      ++root_images;
    }
  // A training job is read before its images are listed, so that the list says what each one
  // is and which report follows: the job's, or one image's ("<- reported").
  std::optional<job::Job> job;
  if (vm.count("torch") && images.size() > 1 && !vm.count("no-report")) {
    std::vector<std::string> paths;
    for (const TracedImage &image : images) paths.push_back(image.path);
    job = run_as_job(paths, reported);
  }
  if (images.size() > 1) {
    std::cerr << "adprof: traced " << images.size() << " process images of this run:\n";
    for (const TracedImage &image : images) {
      std::string mark;
      if (job)
        mark = role_in_job(*job, image.path);
      else if (image.path == reported && !vm.count("no-report"))
        mark = "<- reported";
      std::cerr << "  " << image.path << "  pid " << image.pid
                << (image.pid == static_cast<uint64_t>(child) ? " (the program)" : "") << ", "
                << image.ending << (mark.empty() ? "" : "  " + mark) << "\n";
    }
    if (root_images > 1)
      std::cerr << "adprof: " << program[0]
                << " replaced itself with exec; reporting its last image: " << reported << "\n";
  }
  // Fork children with no trace of their own when their parent ended (ADPROF_FORK=0 and no
  // exec, killed before their first chunk, a trace that could not be created): said once,
  // plainly, so that a report of a program with worker processes is not taken for the whole
  // job's.
  uint64_t untraced = 0;
  for (const TracedImage &image : images) untraced += image.untraced_fork_children;
  if (untraced > 0)
    std::cerr << "adprof: " << untraced << (untraced == 1 ? " process" : " processes")
              << " forked by " << program[0] << " had no trace of "
              << (untraced == 1 ? "its" : "their") << " own when "
              << (untraced == 1 ? "its parent" : "their parent") << " ended: what "
              << (untraced == 1 ? "it" : "they")
              << " allocated is in no trace (ADPROF_FORK=0, or ended before its first chunk)\n";
  if (vm.count("no-report")) return end_as_the_program(status, exit_code);
  if (job) {  // a training job: its ranks side by side
    report_run_as_job(*job, reported, vm);
    return end_as_the_program(status, exit_code);
  }
  AnalyzeOptions analyze_options = analyze_options_with_progress();
  analyze_options.site_stacks = vm.count("json") > 0;             // the text shows no site's stack
  Report report = analyze_all(reported, analyze_options).report;  // both layers
  end_progress();
  if (vm.count("json"))
    std::cout << json_text(to_json(report, json_options(vm))) << '\n';
  else
    std::cout << render_text(report, static_cast<size_t>(top), vm.count("details") > 0);
  return end_as_the_program(status, exit_code);
}

}  // namespace adprof::cli
