// Ends of a process image that run no destructor: the exec family and _exit. The trace is
// closed first (footer "exec" or "exit"). glibc's execvp & co. reach execve internally, not
// through the PLT, so each entry point is hooked. An exec that fails returns here, and the
// trace goes on (recording_end.cpp, end_before_exec).
// A vfork child calling them shares the parent's memory: the recorder ignores it (finish()).
// quick_exit reaches _exit inside glibc too: the recorder registers an at_quick_exit handler.
// A program that makes the system call itself through glibc's syscall() (SYS_exit_group,
// SYS_execve, SYS_execveat) is seen on x86-64 (the syscall hook below). Not seen: the system
// call made inline (asm); the trace then reads up to its last complete chunk, at most one
// flush interval old, and says it was cut.
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "recorder.h"

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxListArgs = 4096;

template <typename F>
F next_symbol(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

using Execve = int (*)(const char *, char *const[], char *const[]);
using Execv = int (*)(const char *, char *const[]);

auto exec_with(auto &&call) {
  const bool ended = adprof::preload::end_before_exec();
  const auto result = call();  // returns only when the exec failed
  const int error = errno;
  if (ended) adprof::preload::resume_after_failed_exec();
  errno = error;
  return result;
}

}  // namespace

ADPROF_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  static auto real = next_symbol<Execve>("execve");
  return exec_with([&] { return real(path, argv, envp); });
}

ADPROF_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  static auto real = next_symbol<Execve>("execvpe");
  return exec_with([&] { return real(file, argv, envp); });
}

ADPROF_EXPORT int execv(const char *path, char *const argv[]) {
  static auto real = next_symbol<Execv>("execv");
  return exec_with([&] { return real(path, argv); });
}

ADPROF_EXPORT int execvp(const char *file, char *const argv[]) {
  static auto real = next_symbol<Execv>("execvp");
  return exec_with([&] { return real(file, argv); });
}

ADPROF_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  using Fexecve = int (*)(int, char *const[], char *const[]);
  static auto real = next_symbol<Fexecve>("fexecve");
  return exec_with([&] { return real(fd, argv, envp); });
}

// glibc 2.34 and later; a program that calls it (an exec relative to a directory descriptor)
// passes no other hook.
ADPROF_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                           int flags) {
  using Execveat = int (*)(int, const char *, char *const[], char *const[], int);
  static auto real = next_symbol<Execveat>("execveat");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return exec_with([&] { return real(dirfd, path, argv, envp, flags); });
}

// execl, execlp, execle: the variadic forms, collected into an argv on the stack.
#define ADPROF_COLLECT_ARGS(first, last_named, envp_out) \
  char *argv[kMaxListArgs + 1];                          \
  int argc = 0;                                          \
  va_list ap;                                            \
  va_start(ap, last_named);                              \
  argv[argc++] = const_cast<char *>(first);              \
  while (argv[argc - 1] != nullptr) {                    \
    if (argc == kMaxListArgs) {                          \
      va_end(ap);                                        \
      errno = E2BIG;                                     \
      return -1;                                         \
    }                                                    \
    argv[argc++] = va_arg(ap, char *);                   \
  }                                                      \
  envp_out;                                              \
  va_end(ap)

ADPROF_EXPORT int execl(const char *path, const char *arg, ...) {
  ADPROF_COLLECT_ARGS(arg, arg, (void)0);
  return execv(path, argv);
}

ADPROF_EXPORT int execlp(const char *file, const char *arg, ...) {
  ADPROF_COLLECT_ARGS(arg, arg, (void)0);
  return execvp(file, argv);
}

ADPROF_EXPORT int execle(const char *path, const char *arg, ...) {
  char *const *envp = nullptr;
  ADPROF_COLLECT_ARGS(arg, arg, envp = va_arg(ap, char *const *));
  return execve(path, argv, envp);
}

#if defined(__x86_64__)
namespace {

// A system call as glibc's syscall() makes it, without glibc: the hook below forwards every
// call so (finding glibc's syscall with dlsym would allocate, and jemalloc calls syscall()).
// Returns the kernel's result: -errno on failure.
long raw_syscall(long number, long a1, long a2, long a3, long a4, long a5, long a6) {
  long result;
  register long r10 asm("r10") = a4;
  register long r8 asm("r8") = a5;
  register long r9 asm("r9") = a6;
  asm volatile("syscall"
               : "=a"(result)
               : "a"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return result;
}

}  // namespace

// glibc's syscall(): a program that ends its process or replaces its image through it passes
// no other hook (before, the trace of `syscall(SYS_exit_group, 0)` was cut and lost its last
// events: Lifecycle.ExitGroupSystemCallIsComplete). Those calls end the trace as _exit and
// execve do; every call is forwarded as glibc's would be: six arguments read (glibc reads six
// too), -1 and errno for a result in -4095..-1.
ADPROF_EXPORT long syscall(long number, ...) noexcept {
  va_list args;
  va_start(args, number);
  long a[6];
  for (long &arg : a) arg = va_arg(args, long);
  va_end(args);
  auto call = [&] { return raw_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]); };
  long result;
  if (number == SYS_exit_group) {
    adprof::preload::finish_before_exit();
    result = call();
  } else if (number == SYS_execve || number == SYS_execveat) {
    result = exec_with(call);
  } else {
    result = call();
  }
  if (result < 0 && result > -4096) {
    errno = static_cast<int>(-result);
    return -1;
  }
  return result;
}
#endif

// fork: the child is not traced unless it execs (recording_end.cpp, on_fork_child); the parent
// notes the child's pid, so that the trace can say how many children were never traced
// (note_forked_child). glibc's fork is resolved before the program runs: a dlsym here would
// allocate, inside the program's call.
using Fork = pid_t (*)();
Fork g_real_fork = nullptr;
__attribute__((constructor(102))) void resolve_fork() {
  adprof::preload::ThreadState &ts = adprof::preload::t_state;
  ++ts.guard;
  g_real_fork = next_symbol<Fork>("fork");
  --ts.guard;
}

ADPROF_EXPORT pid_t fork() {
  const pid_t child = g_real_fork ? g_real_fork() : static_cast<pid_t>(syscall(SYS_fork));
  if (child > 0) {
    const int error = errno;
    adprof::preload::note_forked_child(child);
    errno = error;
  }
  return child;
}

ADPROF_EXPORT [[noreturn]] void _exit(int status) {
  adprof::preload::finish_before_exit();
  for (;;) syscall(SYS_exit_group, status);
}

ADPROF_EXPORT [[noreturn]] void _Exit(int status) { _exit(status); }
