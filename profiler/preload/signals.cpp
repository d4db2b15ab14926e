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
//
// A one-shot handler (sysv_signal, and __sysv_signal: what `signal` is in a program built as
// strict ISO C) is reset to SIG_DFL by the kernel when it runs: the profiler's handler would
// be gone for the signal's next delivery, and the trace cut with it. Such a handler is
// installed as the profiler's trampoline, which puts the profiler's handler back (the
// program's SIG_DFL) and then calls the program's; the program is told of its own handler.
//
// A vfork child (Python's subprocess, posix_spawn's callers, shells) runs in its parent's memory
// with a copy of its dispositions until it execs: what it sets is its own, so there the hooks
// write nothing of the parent's view (g_ours, g_one_shot) and pass every change to the kernel,
// SIG_DFL included (the profiler's handler has nothing to finish in a vfork child).
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
// The program's one-shot handler of each signal whose disposition is the trampoline.
std::atomic<sighandler_t> g_one_shot[NSIG];

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

// True where returning from the handler runs the instruction that raised the signal again: the
// kernel made it for a fault of that instruction (si_code > 0), one that is not past it. A
// breakpoint's SIGTRAP, seccomp's SIGSYS, a machine check reported after the fact, and any signal
// sent by kill, raise, tgkill or sigqueue (si_code <= 0, faulthandler's _sigsegv among them)
// would not come again: the program would go on after them.
bool comes_again_on_return(int sig, const siginfo_t *info) {
  if (!info || info->si_code <= 0) return false;
  switch (sig) {
    case SIGSEGV:
    case SIGILL:
    case SIGFPE:
      return true;
    case SIGBUS:
      return info->si_code != BUS_MCEERR_AO;
    default:
      return false;
  }
}

void on_terminating_signal(int sig, siginfo_t *info, void *) {
  const int saved_errno = errno;
  finish_in_handler(sig);
  // Back to the default action; the signal, blocked while this handler runs, is raised again
  // and takes the process when the handler returns. A fault re-executes the instruction that
  // raised it instead, with the default action now, so a core dump shows the real state and
  // the fault's own siginfo.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  real_sigaction()(sig, &dfl, nullptr);
  if (!in_vfork_child()) g_ours[sig].store(false, std::memory_order_release);
  if (!comes_again_on_return(sig, info)) raise(sig);
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

// A one-shot handler's delivery: the disposition goes back to the program's SIG_DFL (the
// profiler's handler while recording), as the kernel would have reset it, then the program's
// handler runs.
void one_shot_trampoline(int sig) {
  const int saved_errno = errno;
  // A vfork child reads the parent's view and writes none of it: the reset is its own, to SIG_DFL.
  const bool shared = in_vfork_child();
  const sighandler_t handler = shared
                                   ? g_one_shot[sig].load(std::memory_order_acquire)
                                   : g_one_shot[sig].exchange(nullptr, std::memory_order_acq_rel);
  const bool ours = recording() && !shared;
  const struct sigaction next = ours ? profiler_action() : default_action();
  real_sigaction()(sig, &next, nullptr);
  if (!shared) g_ours[sig].store(ours, std::memory_order_release);
  errno = saved_errno;
  if (handler) {
    handler(sig);
  } else if (ours) {  // a delivery that came after another took the handler: SIG_DFL's
    on_terminating_signal(sig, nullptr, nullptr);
  } else {
    raise(sig);
  }
}

// What the program would read back where the kernel holds the trampoline: its own handler.
void as_the_program_set_it(int sig, struct sigaction *old) {
  if (old && !(old->sa_flags & SA_SIGINFO) && old->sa_handler == one_shot_trampoline) {
    old->sa_handler = g_one_shot[sig].load(std::memory_order_acquire);
    old->sa_flags |= SA_RESETHAND;
  }
}

// sigaction in a vfork child: the kernel's dispositions, as the program would read them (the
// profiler's handler, inherited, reads SIG_DFL).
int set_in_vfork_child(Sigaction real, int sig, const struct sigaction *act,
                       struct sigaction *old) {
  const int result = real(sig, act, old);
  if (result != 0 || !old) return result;
  if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction == on_terminating_signal)
    *old = default_action();
  else
    as_the_program_set_it(sig, old);
  return 0;
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
  if (sig > 0 && sig < NSIG && in_vfork_child()) return set_in_vfork_child(real, sig, act, old);
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
      as_the_program_set_it(sig, old);
      return 0;
    }
    const int result = real(sig, act, old);
    if (result == 0) as_the_program_set_it(sig, old);
    return result;
  }
  // Ours is installed: the program's view is SIG_DFL.
  if (act && ((act->sa_flags & SA_SIGINFO) || act->sa_handler != SIG_DFL)) {
    if (real(sig, act, nullptr) != 0) return -1;
    g_ours[sig].store(false, std::memory_order_release);
  }
  if (old) *old = default_action();
  return 0;
}

// glibc's signal() and its variants (bsd_signal, ssignal, sysv_signal, __sysv_signal, sigset)
// call sigaction internally, past any hook: so they are hooked too, each with its semantics.
// signal()'s are BSD's (SA_RESTART; the handler stays installed).
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

// System V semantics: the handler is reset to SIG_DFL when it runs (SA_ONESHOT), and the
// signal is not blocked meanwhile. A terminating signal's handler is the trampoline's
// (one_shot_trampoline), so that the profiler's handler comes back with the SIG_DFL.
ADPROF_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = static_cast<int>(SA_ONESHOT | SA_NOMASK | SA_INTERRUPT);
  const bool one_shot = sig > 0 && sig < NSIG && terminates_by_default(sig) && handler != SIG_DFL &&
                        handler != SIG_IGN && handler != SIG_ERR && !in_vfork_child();
  if (!one_shot) {
    if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
    return old.sa_handler;
  }
  Sigaction real = real_sigaction();
  if (!real) return SIG_ERR;
  act.sa_handler = one_shot_trampoline;
  act.sa_flags = static_cast<int>(SA_NOMASK | SA_INTERRUPT);
  // The handler is in place before the trampoline can run; the previous one-shot handler is
  // what the program reads back if the trampoline held the signal.
  const sighandler_t previous_one_shot = g_one_shot[sig].exchange(handler);
  if (real(sig, &act, &old) != 0) {
    g_one_shot[sig].store(previous_one_shot);
    return SIG_ERR;
  }
  if (g_ours[sig].exchange(false, std::memory_order_acq_rel)) return SIG_DFL;
  if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == one_shot_trampoline)
    return previous_one_shot;
  return old.sa_handler;
}

// The name glibc's <signal.h> binds `signal` to in a strict ISO C program (no _DEFAULT_SOURCE).
ADPROF_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler) {
  return sysv_signal(sig, handler);
}

ADPROF_EXPORT sighandler_t ssignal(int sig, sighandler_t handler) { return signal(sig, handler); }

// System V's sigset, as glibc's (sysdeps/posix/sigset.c) but through the sigaction above:
// SIG_HOLD blocks the signal; any other disposition is set (no flags) and the signal
// unblocked. Returns SIG_HOLD where the signal was blocked, else the previous disposition.
ADPROF_EXPORT sighandler_t sigset(int sig, sighandler_t disposition) {
  sigset_t just_sig, old_mask;
  sigemptyset(&just_sig);
  if (sigaddset(&just_sig, sig) != 0) return SIG_ERR;
  struct sigaction old;
  if (disposition == SIG_HOLD) {
    if (sigaction(sig, nullptr, &old) != 0 || sigprocmask(SIG_BLOCK, &just_sig, &old_mask) != 0)
      return SIG_ERR;
  } else {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = disposition;
    sigemptyset(&act.sa_mask);
    if (sigaction(sig, &act, &old) != 0 || sigprocmask(SIG_UNBLOCK, &just_sig, &old_mask) != 0)
      return SIG_ERR;
  }
  return sigismember(&old_mask, sig) ? SIG_HOLD : old.sa_handler;
}
