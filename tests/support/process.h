// Running programs and reading what they leave, for every test that starts processes (the
// profiler's, the CLI's, conformance, what-if, workloads, samples, PyTorch, CUDA interposition):
// a program started directly (Child, run, run_alone_and_under, run_cli: its own environment without
// the profiler's variables, optionally preloaded, with a time limit) or through the shell
// (run_shell: the test's environment, output through pipes), and the file helpers they share.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "env.h"
#include "temp_dir.h"

extern char **environ;

// The build tree's preload library and CLI, defined by the tests that start them; a test that
// starts neither has none.
#ifndef ADPROF_TEST_PRELOAD
#define ADPROF_TEST_PRELOAD ""
#endif
#ifndef ADPROF_TEST_CLI
#define ADPROF_TEST_CLI ""
#endif

namespace adprof_test {

namespace fs = std::filesystem;

// The build tree's, unless ADPROF_TEST_PRELOAD / ADPROF_TEST_CLI name others (the GPU bundle's,
// scripts/gpu-check.sh, where the build tree is not).
inline const char *preload_path() { return env_or("ADPROF_TEST_PRELOAD", ADPROF_TEST_PRELOAD); }
inline const char *cli_path() { return env_or("ADPROF_TEST_CLI", ADPROF_TEST_CLI); }

// ---- files -----------------------------------------------------------------------------------

// A whole file (empty when it cannot be read).
inline std::string read_file(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the file (a new inode: on ext4, truncating a file in place costs milliseconds).
inline void write_file(const std::string &path, const std::string &bytes) {
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

// Lines that the profiler printed ("adprof: ...").
inline std::vector<std::string> adprof_lines(const std::string &text) {
  std::vector<std::string> out;
  for (auto &l : lines_of(text))
    if (l.rfind("adprof:", 0) == 0) out.push_back(l);
  return out;
}

// "key value" lines written by the workloads.
inline std::map<std::string, std::string> key_values(const std::string &text) {
  std::map<std::string, std::string> out;
  for (auto &l : lines_of(text)) {
    auto sp = l.find(' ');
    if (sp != std::string::npos) out[l.substr(0, sp)] = l.substr(sp + 1);
  }
  return out;
}

inline std::vector<std::string> files_in(const std::string &dir) {
  std::vector<std::string> names;
  for (auto &entry : fs::directory_iterator(dir)) {
    std::string n = entry.path().filename().string();
    if (n.rfind(".stdout", 0) != 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline bool wait_for_file(const std::string &path, double timeout_s) {
  auto start = std::chrono::steady_clock::now();
  while (!fs::exists(path)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// ---- a program started directly --------------------------------------------------------------

// A resource limit of this process for a test's scope: the programs it starts inherit it.
class ScopedLimit {
 public:
  ScopedLimit(int resource, rlim_t soft) : resource_(resource) {
    getrlimit(resource_, &saved_);
    rlimit lowered{soft, saved_.rlim_max};
    ok_ = setrlimit(resource_, &lowered) == 0;
  }
  ~ScopedLimit() { setrlimit(resource_, &saved_); }
  ScopedLimit(const ScopedLimit &) = delete;
  ScopedLimit &operator=(const ScopedLimit &) = delete;
  bool ok() const { return ok_; }

 private:
  int resource_;
  rlimit saved_{};
  bool ok_ = false;
};

struct SpawnOptions {
  std::vector<std::string> argv;
  // Under the preload library, writing this trace (empty: not preloaded).
  std::string trace;
  bool root_pid = true;                                  // set ADPROF_ROOT_PID to the child's pid
  std::vector<std::pair<std::string, std::string>> env;  // added/overriding variables
  int umask_value = -1;
  long fsize_limit = -1;  // RLIMIT_FSIZE in bytes (SIGXFSZ ignored)
  // A process group of its own with default signal dispositions, as a shell's job: the group
  // can be signalled as a whole (Child::signal_group) and is killed whole on a time-out.
  bool own_process_group = false;
  // The same address-space layout in every run (personality ADDR_NO_RANDOMIZE, as setarch -R;
  // inherited through exec): a program whose allocations depend on where its mappings land
  // (Python's pymalloc map of its arenas) allocates the same in every run.
  bool fixed_layout = false;
  double timeout_s = 120;
  std::string work_dir;  // where stdout/stderr are kept (default: a fresh temp dir)
};

struct Result {
  pid_t pid = -1;
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
};

class Child {
 public:
  explicit Child(const SpawnOptions &o) : opts_(o) {
    std::string dir = o.work_dir.empty() ? tmp_.path() : o.work_dir;
    out_path_ = dir + "/.stdout." + std::to_string(counter()++);
    err_path_ = out_path_ + ".err";
    // Everything the child needs is prepared before fork: it only calls async-signal-safe
    // functions until exec.
    std::vector<std::string> env;
    for (char **e = environ; *e; ++e) {
      std::string kv = *e;
      if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("ADPROF_", 0) == 0) continue;
      env.push_back(kv);
    }
    if (!o.trace.empty()) {
      env.push_back(std::string("LD_PRELOAD=") + preload_path());
      env.push_back("ADPROF_OUTPUT=" + o.trace);
    }
    for (const auto &setting : o.env) {
      // Named, not a structured binding: clang 14 cannot capture those in a lambda.
      const std::string prefix = setting.first + "=";
      std::erase_if(env, [&](const std::string &kv) { return kv.rfind(prefix, 0) == 0; });
      env.push_back(prefix + setting.second);
    }
    std::vector<char *> argv, envp;
    for (auto &a : o.argv) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    for (auto &e : env) envp.push_back(const_cast<char *>(e.c_str()));
    std::string root_kv = "ADPROF_ROOT_PID=";  // value filled in the child
    char root_buf[64];
    bool set_root = !o.trace.empty() && o.root_pid;
    size_t root_slot = envp.size();
    if (set_root) envp.push_back(root_buf);
    envp.push_back(nullptr);
    int out_fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err_fd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    start_ = std::chrono::steady_clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      if (set_root) {
        snprintf(root_buf, sizeof root_buf, "ADPROF_ROOT_PID=%d", static_cast<int>(getpid()));
        envp[root_slot] = root_buf;
      }
      dup2(out_fd, 1);
      dup2(err_fd, 2);
      if (o.umask_value >= 0) umask(static_cast<mode_t>(o.umask_value));
      if (o.own_process_group) {
        setpgid(0, 0);
        for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
      }
      if (o.fsize_limit >= 0) {
        signal(SIGXFSZ, SIG_IGN);
        rlimit rl{static_cast<rlim_t>(o.fsize_limit), static_cast<rlim_t>(o.fsize_limit)};
        setrlimit(RLIMIT_FSIZE, &rl);
      }
      if (o.fixed_layout)
        personality(static_cast<unsigned long>(personality(0xffffffff)) | ADDR_NO_RANDOMIZE);
      execve(argv[0], argv.data(), envp.data());
      _exit(126);
    }
    close(out_fd);
    close(err_fd);
  }
  Child(const Child &) = delete;
  Child &operator=(const Child &) = delete;
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void kill_with(int sig) { kill(pid_, sig); }
  void signal_group(int sig) { kill(-pid_, sig); }

  Result wait() {
    Result r;
    r.pid = pid_;
    int status = 0;
    for (;;) {
      pid_t w = waitpid(pid_, &status, WNOHANG);
      if (w == pid_) break;
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (elapsed > opts_.timeout_s) {
        r.timed_out = true;
        kill(opts_.own_process_group ? -pid_ : pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    reaped_ = true;
    if (WIFEXITED(status)) {
      r.exited = true;
      r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.signal = WTERMSIG(status);
    }
    r.out = read_file(out_path_);
    r.err = read_file(err_path_);
    return r;
  }

 private:
  static int &counter() {
    static int c = 0;
    return c;
  }
  SpawnOptions opts_;
  TempDir tmp_;
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point start_;
};

inline Result run(const SpawnOptions &o) {
  Child c(o);
  return c.wait();
}

// `argv` alone, then the same recorded into `trace`: the two runs a test compares to show that a
// program behaves the same under the interposer.
struct AloneAndUnder {
  Result alone, under;
};
inline AloneAndUnder run_alone_and_under(std::vector<std::string> argv, const std::string &trace) {
  SpawnOptions o;
  o.argv = std::move(argv);
  AloneAndUnder r;
  r.alone = run(o);
  o.trace = trace;
  r.under = run(o);
  return r;
}

// `adprof ARGS...`, not preloaded.
inline Result run_cli(std::vector<std::string> args, double timeout_s = 120) {
  SpawnOptions o;
  o.argv = {cli_path()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_s = timeout_s;
  return run(o);
}

// ---- a program started through the shell -----------------------------------------------------

struct ProcessResult {
  int code = -1;  // exit status; -1 when killed by a signal (or when the shell could not start)
  int signal = 0;
  std::string out, err;
  bool ok() const { return code == 0; }
};

// Runs `command` with /bin/sh -c (so it may set variables, redirect or exec), in `dir` when not
// empty, and returns its exit status and everything it wrote to stdout and stderr.
inline ProcessResult run_shell(const std::string &command, const std::filesystem::path &dir = {}) {
  ProcessResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return r;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return r;
  }
  const std::string where = dir.string();
  const pid_t pid = fork();
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    if (!where.empty() && chdir(where.c_str()) != 0) _exit(127);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return r;
  }
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string *sink[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sink[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd &f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// `s` quoted for the shell (single quotes).
inline std::string shell_quote(const std::string &s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace adprof_test
