// Attribution workload: allocations whose op, phase and role are known in advance.
//
// usage: attribution scopes | known | helper_thread
//
// scopes: nested op scopes, phases and roles set both by the C calls and by the RAII scopes,
//         a retag, a label and a description, a duplicate naming its source; then the block
//         "peak_marker" (8 MiB) makes the peak, and everything is freed.
// known:  5 MiB as forward_cache in the forward phase, then 10 MiB as adjoint in the backward
//         phase (the peak: 15 MiB above the runtime's own baseline), then both are freed.
// copies_of_a_gradient: a gradient (adjoint, 4 KiB) copied twice in the optimizer phase, as
//         SGD makes its momentum buffer: one copy becomes optimizer state, one stays a
//         duplicate; the gradient is freed and its address taken by the next gradient; then
//         "peak_marker" (8 MiB) makes the peak.
// helper_thread: the main thread in the backward phase (1 MiB adjoint) waits for a thread that
//         names no phase (a library's worker) while it allocates 12 MiB (the peak); after the
//         main thread is back in "other", a second such thread allocates 2 MiB.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adprof/context.h"

namespace {

constexpr size_t kMiB = 1 << 20;

void *touch(void *p, size_t n) {
  memset(p, 1, n);
  return p;
}

int scopes() {
  using namespace adprof;
  uint32_t outer = adprof_name("outer"), inner = adprof_name("inner"), grad = adprof_name("grad");
  void *a, *b, *c, *d, *e, *f;
  adprof_op_begin(outer, 1);
  adprof_set_phase(ADPROF_PHASE_FORWARD);
  adprof_set_role(ADPROF_ROLE_ACTIVATION);
  a = touch(malloc(1 * kMiB), kMiB);  // outer#1 forward activation (retagged below)
  {
    OpScope op(inner, 2);
    RoleScope role(ADPROF_ROLE_FORWARD_CACHE);
    b = touch(malloc(2 * kMiB), 2 * kMiB);  // inner#2 forward forward_cache
  }
  c = touch(malloc(3 * kMiB), 3 * kMiB);  // outer#1 forward activation (role restored)
  adprof_op_end();
  adprof_set_role(ADPROF_ROLE_FOREIGN);
  {
    PhaseScope phase(ADPROF_PHASE_BACKWARD);
    OpScope op(grad, 3);
    RoleScope role(ADPROF_ROLE_ADJOINT);
    d = touch(malloc(4 * kMiB), 4 * kMiB);  // grad#3 backward adjoint
    {
      RoleScope dup(ADPROF_ROLE_ACTIVATION);
      e = touch(malloc(2 * kMiB), 2 * kMiB);  // grad#3 backward, retagged duplicate of b
    }
  }
  adprof_retag(a, ADPROF_ROLE_FORWARD_CACHE, nullptr);  // the tape saves a: 1 MiB moves
  adprof_label(b, adprof_name("net.x1"));
  int64_t shape[2] = {512, 1024};
  adprof_describe(b, ADPROF_DTYPE_F32, 2, shape);
  adprof_retag(e, ADPROF_ROLE_DUPLICATE, b);
  {
    PhaseScope phase(ADPROF_PHASE_OPTIMIZER);
    OpScope op(adprof_name("peak_marker"), 4);
    RoleScope role(ADPROF_ROLE_OPTIMIZER_STATE);
    f = touch(malloc(8 * kMiB), 8 * kMiB);  // the peak: every block above is live
  }
  free(f);
  free(e);
  free(d);
  free(c);
  free(b);
  free(a);
  return 0;
}

int known() {
  void *cache, *adjoint;
  adprof_set_phase(ADPROF_PHASE_FORWARD);
  adprof_set_role(ADPROF_ROLE_FORWARD_CACHE);
  cache = touch(malloc(5 * kMiB), 5 * kMiB);
  adprof_set_phase(ADPROF_PHASE_BACKWARD);
  adprof_set_role(ADPROF_ROLE_ADJOINT);
  adjoint = touch(malloc(10 * kMiB), 10 * kMiB);
  adprof_set_role(ADPROF_ROLE_FOREIGN);
  adprof_set_phase(ADPROF_PHASE_OTHER);
  free(adjoint);
  free(cache);
  return 0;
}

int copies_of_a_gradient() {
  constexpr size_t kGradient = 4096;
  adprof_set_phase(ADPROF_PHASE_BACKWARD);
  adprof_set_role(ADPROF_ROLE_ADJOINT);
  void *gradient = touch(malloc(kGradient), kGradient);
  adprof_label(gradient, adprof_name("w.grad"));
  int64_t shape[1] = {kGradient / 4};
  adprof_describe(gradient, ADPROF_DTYPE_F32, 1, shape);
  adprof_set_phase(ADPROF_PHASE_OPTIMIZER);
  adprof_set_role(ADPROF_ROLE_WORKSPACE);
  void *state = memcpy(malloc(kGradient), gradient, kGradient);
  adprof_retag(state, ADPROF_ROLE_DUPLICATE, gradient);
  adprof_retag(state, ADPROF_ROLE_OPTIMIZER_STATE, nullptr);  // stored as the state
  adprof_label(state, adprof_name("w.momentum_buffer"));
  void *copy = memcpy(malloc(kGradient), gradient, kGradient);
  adprof_retag(copy, ADPROF_ROLE_DUPLICATE, gradient);
  adprof_describe(copy, ADPROF_DTYPE_F32, 1, shape);
  free(gradient);
  adprof_set_phase(ADPROF_PHASE_BACKWARD);
  adprof_set_role(ADPROF_ROLE_ADJOINT);
  void *next = touch(malloc(kGradient), kGradient);  // the allocator's last freed block of its size
  adprof_label(next, adprof_name("next.grad"));
  printf("%s\n", next == gradient ? "address reused" : "address not reused");
  adprof_set_phase(ADPROF_PHASE_OTHER);
  adprof_set_role(ADPROF_ROLE_FOREIGN);
  void *peak = touch(malloc(8 * kMiB), 8 * kMiB);
  free(peak);
  free(next);
  free(copy);
  free(state);
  return 0;
}

void *helper_allocates(void *bytes) {
  const size_t n = *static_cast<size_t *>(bytes);
  free(touch(malloc(n), n));
  return nullptr;
}

int helper_thread() {
  adprof_set_phase(ADPROF_PHASE_BACKWARD);
  adprof_set_role(ADPROF_ROLE_ADJOINT);
  void *adjoint = touch(malloc(1 * kMiB), kMiB);
  size_t peak_bytes = 12 * kMiB, later_bytes = 2 * kMiB;
  pthread_t t;
  if (pthread_create(&t, nullptr, helper_allocates, &peak_bytes) || pthread_join(t, nullptr))
    return 1;
  adprof_set_role(ADPROF_ROLE_FOREIGN);
  adprof_set_phase(ADPROF_PHASE_OTHER);
  free(adjoint);
  if (pthread_create(&t, nullptr, helper_allocates, &later_bytes) || pthread_join(t, nullptr))
    return 1;
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "scopes")) return scopes();
  if (!strcmp(argv[1], "known")) return known();
  if (!strcmp(argv[1], "helper_thread")) return helper_thread();
  if (!strcmp(argv[1], "copies_of_a_gradient")) return copies_of_a_gradient();
  return 2;
}
