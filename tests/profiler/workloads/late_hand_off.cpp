// A thread whose exit hands its buffer over just as the recording ends (Lifecycle.
// HandOffUnderWayWhenTheTraceIsFinishedLosesNothing): the hand-off began while the recording
// was on, and reaches the writer's queue only after the end of the recording has written it.
//
// A thread allocates 100 blocks of 4321 bytes in op "late_hand_off" (the odd ones kept) and
// returns. Its exit handler hands its buffer over; this program's own pthread_mutex_lock (it
// comes before glibc's in the lookup order, so the interposer's calls reach it) holds that
// hand-off at the queue's lock until the recording is being finished (adprof_active() is 0:
// main has returned), then 300 ms more. Meanwhile main returns as soon as the hand-off is
// held (`exit`), or raises SIGTERM (`signal`: the recording ends in the interposer's handler).
// Without a wait for hand-offs under way, the trace was finished without the thread's events,
// and the process ended during the 300 ms.
//
// usage: late_hand_off exit|signal
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include "adprof/context.h"

namespace {

thread_local bool t_hold_next_lock = false;  // this thread's next lock by the interposer
std::atomic<bool> g_held{false};             // the hand-off is held

bool called_from_the_interposer(void *caller) {
  Dl_info info;
  return dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libadprof_preload");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int pthread_mutex_lock(pthread_mutex_t *mutex) {
  if (t_hold_next_lock && called_from_the_interposer(__builtin_return_address(0))) {
    t_hold_next_lock = false;
    g_held.store(true);
    while (adprof_active()) sched_yield();
    timespec pause{0, 300'000'000};
    nanosleep(&pause, nullptr);
  }
  // glibc's own is not reachable by name from here (dlsym allocates, and would come back): a
  // lock taken by trying, as the process's mutexes are all of the default kind.
  int r;
  while ((r = pthread_mutex_trylock(mutex)) == EBUSY) sched_yield();
  return r;
}

int main(int argc, char **argv) {
  const bool by_signal = argc > 1 && !strcmp(argv[1], "signal");
  pthread_t t;
  pthread_create(
      &t, nullptr,
      [](void *) -> void * {
        static void *volatile keep[100];
        adprof_op_begin(adprof_name("late_hand_off"), 1);
        for (int i = 0; i < 100; ++i) {
          keep[i] = malloc(4321);
          memset(keep[i], i, 4321);
          if (i % 2 == 0) free(keep[i]);
        }
        adprof_op_end();
        t_hold_next_lock = true;
        return nullptr;
      },
      nullptr);
  pthread_detach(t);
  // (At most 10 s: a hand-off that never reaches the lock ends the run as it is.)
  for (int i = 0; i < 100000 && !g_held.load(); ++i) {
    timespec pause{0, 100'000};
    nanosleep(&pause, nullptr);
  }
  if (by_signal) raise(SIGTERM);
  return 0;
}
