// A signal whose handler calls _exit, delivered while the process is ending (tests of the
// recording's end: exit_signal_test.cpp), as a DataLoader worker ends: PyTorch's SIGTERM handler
// in the worker calls _exit(0) when its parent sends SIGTERM, and the parent sends it to a worker
// that has not ended 5 s after it was told to (its exit, with the trace's end, still under way).
//
// usage: exit_signal BLOCKS
//
// Allocates and frees BLOCKS small blocks (work for the trace writer at exit), then exits with
// status 0. Its SIGTERM handler (SA_SIGINFO | SA_NODEFER, as PyTorch's) calls _exit(7). An exit
// handler registered before the loop tells a second thread, which blocks SIGTERM, that the main
// thread is exiting; that thread sends SIGTERM to the main thread once the main thread waits in
// a futex or a sleep (/proc/self/task/TID/syscall): past the exit handlers and stdio's flush,
// that is the trace's end waiting for its writer. Exit status 7: the handler ran and ended the
// process.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace {

pthread_t g_main;
pid_t g_main_tid;
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_exiting_cond = PTHREAD_COND_INITIALIZER;
bool g_exiting = false;

void on_sigterm(int, siginfo_t *, void *) { _exit(7); }

void *signal_main_when_exiting(void *) {
  pthread_mutex_lock(&g_mutex);
  while (!g_exiting) pthread_cond_wait(&g_exiting_cond, &g_mutex);
  pthread_mutex_unlock(&g_mutex);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(g_main_tid));
  for (int i = 0; i < 100000; ++i) {  // 10 s at most
    char text[32] = {};
    const int fd = open(path, O_RDONLY);
    if (fd < 0) break;
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    const long number = n > 0 ? atol(text) : -1;
    if (number == SYS_futex || number == SYS_nanosleep || number == SYS_clock_nanosleep) {
      pthread_kill(g_main, SIGTERM);
      return nullptr;
    }
    timespec pause{0, 100'000};
    nanosleep(&pause, nullptr);
  }
  fprintf(stderr, "exit_signal: the main thread never waited\n");
  return nullptr;
}

void exiting() {
  pthread_mutex_lock(&g_mutex);
  g_exiting = true;
  pthread_cond_signal(&g_exiting_cond);
  pthread_mutex_unlock(&g_mutex);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: exit_signal BLOCKS\n");
    return 2;
  }
  const long blocks = atol(argv[1]);
  g_main = pthread_self();
  g_main_tid = gettid();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigterm;
  sa.sa_flags = SA_RESTART | SA_SIGINFO | SA_NOCLDSTOP | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTERM, &sa, nullptr) != 0) return 1;
  // The second thread never takes SIGTERM: it goes to the main thread.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  pthread_t signaller;
  if (pthread_create(&signaller, nullptr, signal_main_when_exiting, nullptr) != 0) return 1;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  atexit(exiting);
  for (long i = 0; i < blocks; ++i) free(malloc(16 + i % 64));
  printf("exiting\n");
  fflush(stdout);
  return 0;
}
