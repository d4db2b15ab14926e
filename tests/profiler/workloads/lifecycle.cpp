// Process life cycle workload: normal exit, fork, exec, fork+exec, abort, and a sleep to be
// killed. Each mode allocates inside an op scope named after what it wants to show, so the test
// can find (or not find) those allocations in the trace.
//
// usage: lifecycle exit CODE | fork | exec | forkexec | abort | sleep MARKER_FILE | _exit |
//                  blocked_signal | cd_exec DIR | until_out_of_memory [HOLD_MS] |
//                  one_shot_handler | sigset_handler | library_destructor LIBRARY | quick_exit |
//                  main_thread_exits | failed_exec | failed_execs_alone | fork_from_thread FORKS |
//                  execveat | execve_syscall | exit_group_syscall | late_thread_destructors |
//                  threads_alive N join|exit | vmsize | fork_children | raise SIGNAL |
//                  kill SIGNAL | breakpoint | vfork_dispositions | print_ignored
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "adprof/context.h"

namespace {

// Per thread: threads that allocate side by side never free each other's blocks.
thread_local void *volatile g_keep[4096];

// `count` blocks of `size` inside op `name`; frees the even ones.
void allocate(const char *name, int count, size_t size) {
  adprof_op_begin(adprof_name(name), 1);
  for (int i = 0; i < count; ++i) {
    g_keep[i % 4096] = malloc(size);
    memset(g_keep[i % 4096], i, size);
    if (i % 2 == 0) {
      free(g_keep[i % 4096]);
      g_keep[i % 4096] = nullptr;
    }
  }
  adprof_op_end();
}

// glibc's name for `signal` in a strict ISO C program: a one-shot (System V) handler.
extern "C" sighandler_t __sysv_signal(int sig, sighandler_t handler);

volatile sig_atomic_t g_one_shot_runs = 0;
void on_term_once(int) { g_one_shot_runs = g_one_shot_runs + 1; }

std::atomic<int> g_handled_elsewhere{0};
std::atomic<int> g_handled{0};

void on_usr1(int) {
  if (syscall(SYS_gettid) != getpid()) ++g_handled_elsewhere;
  ++g_handled;
}

void count_signal(int) { ++g_handled; }

// Installs a SIGTERM handler (prints "installed yes|no": whether it reads it back), puts the
// default back (prints "then SIG_DFL|other"), then raises SIGTERM, whose default action ends
// the process: op "before_signal" (100 blocks) before, "after_signal" (10) after.
template <class Install, class BackToDefault>
int handler_then_sigterm(Install install, BackToDefault back_to_default) {
  allocate("before_signal", 100, 3131);
  install();
  struct sigaction seen;
  sigaction(SIGTERM, nullptr, &seen);
  printf("installed %s\n", seen.sa_handler == on_term_once ? "yes" : "no");
  back_to_default();
  sigaction(SIGTERM, nullptr, &seen);
  printf("then %s\n", seen.sa_handler == SIG_DFL ? "SIG_DFL" : "other");
  fflush(stdout);
  allocate("after_signal", 10, 3232);
  raise(SIGTERM);
  return 0;
}

// threads_alive: every thread is alive at once (the first barrier), then allocates and frees 4
// blocks in op "alive" and waits for all the others (the second). Small stacks: 8,000 threads
// take 1 GiB of address space, little of it touched.
pthread_barrier_t g_all_alive, g_all_allocated;
std::atomic<unsigned> g_allocated{0};
void *alive_thread(void *) {
  pthread_barrier_wait(&g_all_alive);
  adprof_op_begin(adprof_name("alive"), 1);
  for (int i = 0; i < 4; ++i) {
    void *volatile p = malloc(100 + static_cast<size_t>(i));
    free(p);
  }
  adprof_op_end();
  g_allocated.fetch_add(1);
  pthread_barrier_wait(&g_all_allocated);
  return nullptr;
}

const char *self() {
  static char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  path[n] = 0;
  return path;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  if (!strcmp(mode, "exit")) {
    allocate("main", 100, 1111);
    return argc > 2 ? atoi(argv[2]) : 0;
  }
  if (!strcmp(mode, "fork")) {
    allocate("parent", 1000, 2222);
    fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
      allocate("child", 2000, 777);
      exit(0);  // destructors run: the child must still write nothing
    }
    int status = 0;
    waitpid(child, &status, 0);
    allocate("after_fork", 10, 3333);
    printf("child %d\n", static_cast<int>(child));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  if (!strcmp(mode, "thread_ends_while_finishing")) {
    // A detached thread allocates 100 blocks of 4321 bytes in op "late_thread" (the odd ones
    // kept), then waits, allocating nothing, until the recording is ending (main has returned:
    // adprof_active() turns 0 when the trace starts to be finished) and only then ends: its
    // exit comes while the trace is being finished, as a Python thread's can (CPython's join
    // returns before the joined thread's own pthread_exit).
    static std::atomic<bool> allocated{false};
    pthread_t t;
    pthread_create(
        &t, nullptr,
        [](void *) -> void * {
          allocate("late_thread", 100, 4321);
          allocated.store(true);
          while (adprof_active()) sched_yield();
          return nullptr;
        },
        nullptr);
    pthread_detach(t);
    while (!allocated.load()) sched_yield();
    return 0;
  }
  if (!strcmp(mode, "fork_children")) {
    // Three children that do not exec, side by side: child k allocates (k+1)*100 blocks of
    // 1000+k bytes in op "child" (half freed) and frees a block its parent allocated before the
    // fork; child 0 ends with exit, 1 with _exit, 2 forks a grandchild (50 blocks of 555 in op
    // "grandchild") and waits for it. Prints "children A,B,C" and "grandchild G" (nothing else
    // allocates in the children). Steps are marked (parent: 1 and 2, each child: 3) for the
    // step-window test; they change nothing else.
    adprof_step(1);
    allocate("parent", 1000, 2222);
    adprof_step(2);
    void *inherited = malloc(4242);
    printf("parent %d\n", static_cast<int>(getpid()));  // stdout's buffer: the parent's
    fflush(nullptr);
    pid_t children[3];
    int failed = 0;
    for (int k = 0; k < 3; ++k) {
      children[k] = fork();
      if (children[k] != 0) continue;
      adprof_step(3);
      free(inherited);
      allocate("child", (k + 1) * 100, 1000 + static_cast<size_t>(k));
      if (k == 1) _exit(0);
      if (k == 2) {
        const pid_t grandchild = fork();
        if (grandchild == 0) {
          allocate("grandchild", 50, 555);
          _exit(0);
        }
        int status = 0;
        waitpid(grandchild, &status, 0);
        printf("grandchild %d\n", static_cast<int>(grandchild));
      }
      exit(0);
    }
    for (const pid_t child : children) {
      int status = 0;
      waitpid(child, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    allocate("after_fork", 10, 3333);
    free(inherited);
    printf("children %d,%d,%d\n", static_cast<int>(children[0]), static_cast<int>(children[1]),
           static_cast<int>(children[2]));
    return failed == 0 ? 0 : 1;
  }
  if (!strcmp(mode, "exec")) {
    allocate("before_exec", 10, 4444);
    execl(self(), "lifecycle", "exit", "0", static_cast<char *>(nullptr));
    return 3;
  }
  if (!strcmp(mode, "execveat")) {  // glibc's execveat, relative to a directory descriptor
    allocate("before_exec", 10, 4444);
    char *const args[] = {const_cast<char *>("lifecycle"), const_cast<char *>("exit"),
                          const_cast<char *>("0"), nullptr};
    execveat(AT_FDCWD, self(), args, environ, 0);
    return 3;
  }
  if (!strcmp(mode, "execve_syscall")) {  // the system call through glibc's syscall()
    allocate("before_exec", 10, 4444);
    char *const args[] = {const_cast<char *>("lifecycle"), const_cast<char *>("exit"),
                          const_cast<char *>("0"), nullptr};
    syscall(SYS_execve, self(), args, environ);
    return 3;
  }
  if (!strcmp(mode, "exit_group_syscall")) {
    // Other calls through glibc's syscall() behave as without the profiler (prints "same yes"):
    // a result, and -1 with errno.
    const bool same = syscall(SYS_gettid) == gettid() && syscall(SYS_getppid) == getppid() &&
                      syscall(SYS_close, -1) == -1 && errno == EBADF;
    printf("same %s\n", same ? "yes" : "no");
    fflush(stdout);
    allocate("before_exit", 300, 5151);
    syscall(SYS_exit_group, 0);
    return 3;
  }
  if (!strcmp(mode, "late_thread_destructors")) {
    // A thread on a stack of the program's own allocates, and its thread-specific data has a
    // destructor that frees a block and makes another, in every round glibc runs (4): each runs
    // after the profiler's own thread-exit handler (its key is older), so the thread records
    // again after that handler, the last time in the last round, when no handler follows.
    // Then the program unmaps the stack, and with it the thread's TLS.
    static pthread_key_t late_key;
    pthread_key_create(&late_key, [](void *block) {
      static int rounds = 0;
      free(block);
      if (++rounds < PTHREAD_DESTRUCTOR_ITERATIONS) {
        adprof_op_begin(adprof_name("late_blocks"), 1);
        pthread_setspecific(late_key, malloc(3333));
        adprof_op_end();
      }
    });
    const size_t stack_size = 1 << 20;
    void *stack =
        mmap(nullptr, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, stack_size);
    pthread_t t;
    pthread_create(
        &t, &attr,
        [](void *) -> void * {
          allocate("thread", 300, 4242);
          adprof_op_begin(adprof_name("late_blocks"), 1);
          pthread_setspecific(late_key, malloc(3333));
          adprof_op_end();
          return nullptr;
        },
        nullptr);
    pthread_join(t, nullptr);
    munmap(stack, stack_size);
    allocate("main", 100, 1111);
    return 0;
  }
  if (!strcmp(mode, "forkexec")) {
    allocate("parent", 10, 5555);
    fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
      execl(self(), "lifecycle", "exit", "0", static_cast<char *>(nullptr));
      _exit(3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %d\n", static_cast<int>(child));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  if (!strcmp(mode, "threads_alive") && argc > 3) {
    // threads_alive N join|exit: N threads alive at once; then joined, or the process exits
    // while they still wait (their last events are only in their buffers).
    const unsigned n = static_cast<unsigned>(atoi(argv[2]));
    const bool join = !strcmp(argv[3], "join");
    pthread_barrier_init(&g_all_alive, nullptr, n + 1);
    pthread_barrier_init(&g_all_allocated, nullptr, n + 1);  // main's turn: join only
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    std::vector<pthread_t> threads(n);
    for (unsigned i = 0; i < n; ++i)
      if (int err = pthread_create(&threads[i], &attr, alive_thread, nullptr); err != 0) {
        fprintf(stderr, "thread %u of %u: %s\n", i, n, strerror(err));
        _exit(2);
      }
    pthread_barrier_wait(&g_all_alive);
    if (join) {
      pthread_barrier_wait(&g_all_allocated);
      for (pthread_t t : threads) pthread_join(t, nullptr);
    } else {
      // Once every thread has allocated, exit while they all wait at a barrier that main
      // never reaches.
      while (g_allocated.load() < n) {
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, nullptr);
      }
    }
    allocate("main", 10, 64);
    printf("threads %u\n", n);
    return 0;
  }
  if (!strcmp(mode, "abort")) {
    allocate("before_abort", 500, 4242);
    abort();
  }
  if (!strcmp(mode, "vmsize")) {  // the address space the process holds once it runs
    struct timespec settle = {0, 200 * 1000 * 1000};  // the profiler's writer has started
    nanosleep(&settle, nullptr);
    char line[256];
    FILE *status = fopen("/proc/self/status", "r");
    while (status && fgets(line, sizeof line, status))
      if (!strncmp(line, "VmSize:", 7)) printf("vmsize_kib %ld\n", atol(line + 7));
    if (status) fclose(status);
    return 0;
  }
  if (!strcmp(mode, "until_out_of_memory")) {  // run it under an RLIMIT_AS
    // Allocates 1 MiB blocks until malloc fails. With HOLD_MS, holds them that long at the
    // limit (as a slow program there would, the profiler's flush ticks and samples coming
    // meanwhile), then frees them.
    const long hold_ms = argc > 2 ? atol(argv[2]) : -1;
    size_t total = 0;
    std::vector<void *> blocks;
    if (hold_ms >= 0) blocks.reserve(4096);  // before the limit is reached
    adprof_op_begin(adprof_name("greedy"), 1);
    while (void *p = malloc(1 << 20)) {
      memset(p, 1, 4096);
      total += 1 << 20;
      if (blocks.size() < blocks.capacity()) blocks.push_back(p);
    }
    adprof_op_end();
    if (hold_ms >= 0) {
      timespec hold{hold_ms / 1000, hold_ms % 1000 * 1000000};
      nanosleep(&hold, nullptr);
      for (void *p : blocks) free(p);
    }
    printf("allocated %zu\n", total >> 20);
    return 3;  // failure handled cleanly
  }
  if (!strcmp(mode, "main_thread_exits")) {
    // The main thread leaves with pthread_exit; the process ends when its other thread does
    // (glibc calls exit(0) there), running the atexit handler.
    atexit([] { allocate("atexit_handler", 10, 5454); });
    allocate("main", 100, 1111);
    pthread_t worker;
    pthread_create(
        &worker, nullptr,
        [](void *) -> void * {
          usleep(100000);  // after the main thread is gone
          allocate("worker", 200, 2121);
          return nullptr;
        },
        nullptr);
    pthread_exit(nullptr);
  }
  if (!strcmp(mode, "failed_execs_alone")) {
    // Only the main thread, whose execs fail for 50 ms or more (execvp through every directory
    // of PATH, every millisecond), then ends at once.
    allocate("before_exec", 10, 4444);
    char *const argv_missing[] = {const_cast<char *>("adprof-no-such-command"), nullptr};
    for (int i = 0; i < 50; ++i) {
      execvp("adprof-no-such-command", argv_missing);
      if (errno != ENOENT) return 5;
      usleep(1000);
    }
    allocate("after_failed_exec", 100, 4545);
    return 0;
  }
  if (!strcmp(mode, "failed_exec")) {
    // Execs that fail return to the program, which goes on: a block allocated before them is
    // freed after, and a worker thread records all along (2000 allocations, 1000 frees).
    allocate("before_exec", 10, 4444);
    adprof_op_begin(adprof_name("held"), 1);
    void *held = malloc(4242);
    adprof_op_end();
    pthread_t worker;
    pthread_create(
        &worker, nullptr,
        [](void *) -> void * {
          for (int i = 0; i < 500; ++i) {
            allocate("worker", 4, 1212);
            usleep(200);
          }
          return nullptr;
        },
        nullptr);
    char *const argv_missing[] = {const_cast<char *>("adprof-no-such-command"), nullptr};
    for (int i = 0; i < 50; ++i) {
      execvp("adprof-no-such-command", argv_missing);  // every directory of PATH
      if (errno != ENOENT) return 5;
      execl("/nonexistent/adprof", "adprof", static_cast<char *>(nullptr));
      if (errno != ENOENT) return 5;
      usleep(1000);
    }
    pthread_join(worker, nullptr);
    adprof_op_begin(adprof_name("held"), 1);
    free(held);
    adprof_op_end();
    allocate("after_failed_exec", 100, 4545);
    return 0;
  }
  if (!strcmp(mode, "fork_from_thread") && argc > 2) {
    // A thread forks while the program's other threads record (120 that each allocate now and
    // then, so that the profiler's writer snapshots them under its locks); in each child that
    // thread returns, and the child ends as its last thread leaves. A child that has not ended
    // within 5 s hangs: prints "hung N" of "forks N".
    static std::atomic<bool> stop{false};
    std::vector<pthread_t> idle(120);
    for (pthread_t &t : idle)
      pthread_create(
          &t, nullptr,
          [](void *) -> void * {
            while (!stop.load()) {
              allocate("idle_threads", 2, 3434);
              usleep(20000);
            }
            return nullptr;
          },
          nullptr);
    static int forks = atoi(argv[2]);
    static int hung = 0;
    pthread_t forker;
    pthread_create(
        &forker, nullptr,
        [](void *) -> void * {
          for (int i = 0; i < forks; ++i) {
            pid_t child = fork();
            if (child == 0) return nullptr;  // the child's only thread leaves: the child ends
            int status = 0;
            int waited = 0;
            while (waitpid(child, &status, WNOHANG) == 0 && waited < 5000) {
              usleep(1000);
              ++waited;
            }
            if (waited >= 5000) {
              ++hung;
              kill(child, SIGKILL);
              waitpid(child, &status, 0);
            }
          }
          return nullptr;
        },
        nullptr);
    pthread_join(forker, nullptr);
    stop = true;
    for (pthread_t t : idle) pthread_join(t, nullptr);
    printf("forks %d\nhung %d\n", forks, hung);
    return 0;
  }
  if (!strcmp(mode, "quick_exit")) {  // no destructor, no atexit handler: at_quick_exit's
    at_quick_exit([] { allocate("quick_exit_handler", 10, 5353); });
    allocate("before_quick_exit", 300, 5252);
    quick_exit(0);
  }
  if (!strcmp(mode, "_exit")) {  // no destructor runs
    allocate("before_exit", 300, 5151);
    _exit(0);
  }
  if (!strcmp(mode, "cd_exec") && argc > 2) {  // a relative trace name must not follow
    allocate("before_cd", 10, 6161);
    if (chdir(argv[2]) != 0) return 4;
    execl(self(), "lifecycle", "exit", "0", static_cast<char *>(nullptr));
    return 3;
  }
  if (!strcmp(mode, "blocked_signal")) {
    // Signals sent to the process while its only thread blocks them wait for that thread: a
    // thread of the profiler must never take them (prints "elsewhere N" and "handled N").
    signal(SIGUSR1, on_usr1);
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    for (int i = 0; i < 50; ++i) {
      sigprocmask(SIG_BLOCK, &usr1, &old);
      kill(getpid(), SIGUSR1);
      usleep(2000);  // time for another thread to take it
      sigprocmask(SIG_SETMASK, &old, nullptr);
    }
    allocate("signals", 10, 7171);
    printf("elsewhere %d\nhandled %d\n", g_handled_elsewhere.load(), g_handled.load());
    return 0;
  }
  if (!strcmp(mode, "one_shot_handler")) {
    // A one-shot handler: the kernel resets it when it runs (prints "runs N").
    return handler_then_sigterm([] { __sysv_signal(SIGTERM, on_term_once); },
                                [] {
                                  raise(SIGTERM);
                                  printf("runs %d\n", static_cast<int>(g_one_shot_runs));
                                });
  }
  if (!strcmp(mode, "sigset_handler")) {  // System V's sigset: a handler, then SIG_DFL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // sigset: what old programs call
    return handler_then_sigterm([] { sigset(SIGTERM, on_term_once); },
                                [] { sigset(SIGTERM, SIG_DFL); });
#pragma GCC diagnostic pop
  }
  if ((!strcmp(mode, "raise") || !strcmp(mode, "kill")) && argc > 2) {
    // A fault signal sent, not made by an instruction (faulthandler's _sigsegv, a test
    // harness's kill): its default action ends the process. Prints "survived" if it does not.
    allocate("before_signal", 100, 3131);
    fflush(stdout);
    const int sig = atoi(argv[2]);
    if (!strcmp(mode, "raise"))
      raise(sig);
    else
      kill(getpid(), sig);
    printf("survived\n");
    return 0;
  }
  if (!strcmp(mode, "breakpoint")) {  // a trap past its instruction: SIGTRAP ends the process
    allocate("before_signal", 100, 3131);
    fflush(stdout);
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("int3");
#else
    raise(SIGTRAP);
#endif
    printf("survived\n");
    return 0;
  }
  if (!strcmp(mode, "print_ignored")) {  // the kernel's word: is SIGPIPE ignored here?
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long ignored = 0;
    while (status && fgets(line, sizeof line, status))
      if (!strncmp(line, "SigIgn:", 7)) ignored = strtoull(line + 7, nullptr, 16);
    if (status) fclose(status);
    printf("SIGPIPE %s\n", ignored & (1ull << (SIGPIPE - 1)) ? "ignored" : "default");
    return 0;
  }
  if (!strcmp(mode, "vfork_dispositions")) {
    // As Python's subprocess: the program ignores SIGPIPE and handles SIGINT; each of two vfork
    // children sets both to SIG_DFL (restore_signals, the reset of handled signals) and execs
    // print_ignored. The children's settings are theirs: each sees SIGPIPE at its default, and
    // the parent keeps its handler (read back, and run by a SIGINT) until it sets SIG_DFL
    // itself, after which a SIGINT ends it.
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, count_signal);
    fflush(stdout);
    for (int k = 0; k < 2; ++k) {
      const pid_t child = vfork();
      if (child == 0) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, nullptr);
        sigaction(SIGINT, &dfl, nullptr);
        execl(self(), "lifecycle", "print_ignored", static_cast<char *>(nullptr));
        _exit(3);
      }
      int status = 0;
      waitpid(child, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) printf("child %d failed\n", k);
    }
    struct sigaction now;
    sigaction(SIGINT, nullptr, &now);
    printf("parent SIGINT %s\n", now.sa_handler == count_signal ? "handler" : "other");
    allocate("before_signal", 100, 3131);
    raise(SIGINT);
    printf("handled %d\n", g_handled.load());
    fflush(stdout);
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    printf("survived\n");
    return 0;
  }
  if (!strcmp(mode, "library_destructor") && argc > 2) {
    // A library, loaded and never closed, that frees its blocks in its destructors.
    void *library = dlopen(argv[2], RTLD_NOW);
    auto keep = library ? reinterpret_cast<void (*)(int, size_t)>(dlsym(library, "keep_until_exit"))
                        : nullptr;
    if (!keep) return 4;
    adprof_op_begin(adprof_name("library_blocks"), 1);
    keep(20, 2525);  // 40 blocks, and the one that holds half of them
    adprof_op_end();
    allocate("main", 100, 1111);
    return 0;
  }
  if (!strcmp(mode, "sleep") && argc > 2) {
    allocate("before_kill", 1000, 4343);
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", static_cast<int>(getpid()));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, text, static_cast<size_t>(n));
      (void)ignored;
      close(fd);
      rename(tmp, argv[2]);  // the marker appears with its content
    }
    for (;;) pause();
  }
  return 2;
}
