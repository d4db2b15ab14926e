// Terminating signals and the program's view of their dispositions.
//
// Every signal whose default action ends the process (SIGINT, SIGHUP, SIGTERM, SIGQUIT,
// SIGSEGV, SIGPIPE, SIGALRM, SIGUSR1, the real-time signals, ...) gets the profiler's handler
// while its disposition is the default: the handler finishes the trace (finish_in_handler) and
// the signal then takes the process with its default action, as it would have.
//
// The handler is invisible. A program that asks for a disposition (sigaction, signal, ...) is
// told the one it would have without the profiler: SIG_DFL where the profiler's handler is
// installed. Python, for one, installs its KeyboardInterrupt handler only where SIGINT is
// SIG_DFL. A program that installs its own handler or SIG_IGN replaces the profiler's; one
// that sets SIG_DFL again gets the profiler's back (Python does so before it re-raises SIGINT
// to die of it).
#include "signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include <atomic>

#include "recorder.h"

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace adprof::preload {

namespace {

using Sigaction = int (*)(int, const struct sigaction *, struct sigaction *);

// libc's sigaction, resolved when the handlers are installed (at start-up, before the program).
std::atomic<Sigaction> g_real_sigaction{nullptr};

// Signals that currently have the profiler's handler (the program believes: SIG_DFL).
std::atomic<bool> g_ours[NSIG];

// The default action ends the process: term and core signals, minus those that cannot be
// caught. SIGCHLD, SIGCONT, SIGURG, SIGWINCH (ignore) and the stop signals are left alone.
bool terminates_by_default(int sig) {
  switch (sig) {
    case SIGHUP:
    case SIGINT:
    case SIGQUIT:
    case SIGILL:
    case SIGTRAP:
    case SIGABRT:
    case SIGBUS:
    case SIGFPE:
    case SIGUSR1:
    case SIGSEGV:
    case SIGUSR2:
    case SIGPIPE:
    case SIGALRM:
    case SIGTERM:
    case SIGSTKFLT:
    case SIGXCPU:
    case SIGXFSZ:
    case SIGVTALRM:
    case SIGPROF:
    case SIGIO:
    case SIGPWR:
    case SIGSYS:
      return true;
    default:
      return sig >= SIGRTMIN && sig <= SIGRTMAX;
  }
}

Sigaction real_sigaction() {
  Sigaction f = g_real_sigaction.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<Sigaction>(dlsym(RTLD_NEXT, "sigaction"));
    g_real_sigaction.store(f, std::memory_order_release);
  }
  return f;
}

void on_terminating_signal(int sig, siginfo_t *, void *) {
  const int saved_errno = errno;
  finish_in_handler(sig);
  // Back to the default action; the signal, blocked while this handler runs, is raised again
  // and takes the process when the handler returns. A fault re-executes the instruction that
  // raised it instead, with the default action now, so a core dump shows the real state.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  real_sigaction()(sig, &dfl, nullptr);
  g_ours[sig].store(false, std::memory_order_release);
  if (sig != SIGSEGV && sig != SIGBUS && sig != SIGILL && sig != SIGFPE && sig != SIGTRAP &&
      sig != SIGSYS)
    raise(sig);
  errno = saved_errno;
}

struct sigaction profiler_action() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_terminating_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  return sa;
}

// Disposition the program would see without the profiler where ours is installed.
struct sigaction default_action() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  return sa;
}

}  // namespace

void install_signal_handlers() {
  Sigaction real = real_sigaction();
  if (!real) return;
  const struct sigaction ours = profiler_action();
  for (int sig = 1; sig < NSIG; ++sig) {
    if (!terminates_by_default(sig)) continue;
    struct sigaction old;
    if (real(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
      continue;
    if (real(sig, &ours, nullptr) == 0) g_ours[sig].store(true, std::memory_order_release);
  }
}

}  // namespace adprof::preload

using namespace adprof::preload;

ADPROF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  Sigaction real = real_sigaction();
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (sig <= 0 || sig >= NSIG || !g_ours[sig].load(std::memory_order_acquire)) {
    // Not ours, or no longer needed: but the program setting SIG_DFL on a terminating signal
    // while recording gets the profiler's handler (and still reads SIG_DFL back).
    if (act && recording() && sig > 0 && sig < NSIG && terminates_by_default(sig) &&
        !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL) {
      struct sigaction previous;
      const struct sigaction ours = profiler_action();
      if (real(sig, &ours, &previous) != 0) return -1;
      g_ours[sig].store(true, std::memory_order_release);
      if (old) *old = previous;
      return 0;
    }
    return real(sig, act, old);
  }
  // Ours is installed: the program's view is SIG_DFL.
  if (act && ((act->sa_flags & SA_SIGINFO) || act->sa_handler != SIG_DFL)) {
    if (real(sig, act, nullptr) != 0) return -1;
    g_ours[sig].store(false, std::memory_order_release);
  }
  if (old) *old = default_action();
  return 0;
}

// glibc's signal() and its variants call sigaction internally, past any hook: so they are
// hooked too, with signal()'s BSD semantics (SA_RESTART; the handler stays installed).
ADPROF_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

ADPROF_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) {
  return signal(sig, handler);
}

ADPROF_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = static_cast<int>(SA_ONESHOT | SA_NOMASK | SA_INTERRUPT);
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}
