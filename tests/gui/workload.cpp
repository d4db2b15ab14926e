// A tiny AD-shaped workload with known numbers, recorded under the preload by the GUI tests.
// Three training steps of a two-layer "network": parameters and inputs up front; each step a
// forward pass (activations, one of them saved as a forward cache, a widening i64 duplicate of
// the index array), a backward pass (adjoints, two gradient contributions held then summed) and
// an optimizer step (moments allocated in the first step only). Sizes are round MiB so the
// report's numbers are easy to check by eye.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "adprof/context.h"

namespace {

constexpr size_t kMiB = 1 << 20;

void *make(size_t bytes, uint32_t label, adprof_dtype dtype, std::vector<int64_t> shape) {
  void *p = malloc(bytes);
  memset(p, 1, bytes);  // touch it, and keep the compiler from eliding the allocation
  if (label) adprof_label(p, label);
  adprof_describe(p, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return p;
}

}  // namespace

int main(int argc, char **argv) {
  // --inplace: gradient contributions summed as they arrive (the base of the diff test).
  // --device: then a device's blocks, as a caching device allocator declares them: a forward
  // cache of 8 MiB and an adjoint of 16 MiB, live together (the device peak, 24 MiB).
  bool inplace = false, device = false;
  for (int i = 1; i < argc; ++i) {
    inplace |= strcmp(argv[i], "--inplace") == 0;
    device |= strcmp(argv[i], "--device") == 0;
  }
  const uint32_t matmul = adprof_name("matmul"), relu = adprof_name("relu"),
                 cast = adprof_name("cast"), add = adprof_name("add"),
                 matmul_bw = adprof_name("matmul_backward"), sgd = adprof_name("adam_step");
  void *w1, *w2, *x, *idx;
  {
    adprof::RoleScope role(ADPROF_ROLE_PARAMETER);
    w1 = make(4 * kMiB, adprof_name("w1"), ADPROF_DTYPE_F32, {1024, 1024});
    w2 = make(2 * kMiB, adprof_name("w2"), ADPROF_DTYPE_F32, {1024, 512});
  }
  {
    adprof::RoleScope role(ADPROF_ROLE_INPUT);
    x = make(1 * kMiB, adprof_name("x"), ADPROF_DTYPE_F32, {256, 1024});
    idx = make(1 * kMiB, adprof_name("idx"), ADPROF_DTYPE_I32, {262144});
  }
  void *m1 = nullptr, *m2 = nullptr;
  for (uint64_t step = 0; step < 3; ++step) {
    adprof_step(step);
    void *h, *a, *wide, *y;
    {
      adprof::PhaseScope phase(ADPROF_PHASE_FORWARD);
      adprof::RoleScope role(ADPROF_ROLE_ACTIVATION);
      {
        adprof::OpScope op(matmul, 10 * step + 1);
        void *scratch;
        {
          adprof::RoleScope ws(ADPROF_ROLE_WORKSPACE);
          scratch = make(kMiB / 2, 0, ADPROF_DTYPE_F32, {131072});
        }
        h = make(1 * kMiB, adprof_name("h"), ADPROF_DTYPE_F32, {256, 1024});
        free(scratch);  // a temporary of matmul
      }
      {
        adprof::OpScope op(relu, 10 * step + 2);
        a = make(1 * kMiB, adprof_name("a"), ADPROF_DTYPE_F32, {256, 1024});
      }
      adprof_retag(a, ADPROF_ROLE_FORWARD_CACHE, nullptr);  // the tape saves a
      {
        adprof::OpScope op(cast, 10 * step + 3);
        wide = make(2 * kMiB, 0, ADPROF_DTYPE_I64, {262144});
      }
      adprof_retag(wide, ADPROF_ROLE_DUPLICATE, idx);  // the widened copy of idx
      {
        adprof::OpScope op(matmul, 10 * step + 4);
        y = make(kMiB / 2, adprof_name("y"), ADPROF_DTYPE_F32, {256, 512});
      }
      free(h);
    }
    void *g1, *g2, *c1, *c2;
    {
      adprof::PhaseScope phase(ADPROF_PHASE_BACKWARD);
      {
        adprof::RoleScope role(ADPROF_ROLE_ADJOINT);
        adprof::OpScope op(matmul_bw, 10 * step + 5);
        g2 = make(2 * kMiB, adprof_name("grad.w2"), ADPROF_DTYPE_F32, {1024, 512});
      }
      c1 = c2 = nullptr;
      if (!inplace) {
        adprof::RoleScope role(ADPROF_ROLE_ACCUMULATION);
        adprof::OpScope op(matmul_bw, 10 * step + 6);
        c1 = make(4 * kMiB, adprof_name("grad.w1"), ADPROF_DTYPE_F32, {1024, 1024});
        c2 = make(4 * kMiB, adprof_name("grad.w1"), ADPROF_DTYPE_F32, {1024, 1024});
      }
      {
        adprof::RoleScope role(ADPROF_ROLE_ADJOINT);
        adprof::OpScope op(add, 10 * step + 7);
        g1 = make(4 * kMiB, adprof_name("grad.w1"), ADPROF_DTYPE_F32, {1024, 1024});
      }
      free(c1);
      free(c2);
      free(a);
      free(wide);
      free(y);
    }
    {
      adprof::PhaseScope phase(ADPROF_PHASE_OPTIMIZER);
      adprof::OpScope op(sgd, 10 * step + 8);
      if (!m1) {
        adprof::RoleScope role(ADPROF_ROLE_OPTIMIZER_STATE);
        m1 = make(4 * kMiB, adprof_name("adam.m.w1"), ADPROF_DTYPE_F32, {1024, 1024});
        m2 = make(2 * kMiB, adprof_name("adam.m.w2"), ADPROF_DTYPE_F32, {1024, 512});
      }
      free(g1);
      free(g2);
    }
  }
  if (device) {  // device addresses are never dereferenced: any distinct values do
    const auto *cache = reinterpret_cast<const void *>(uintptr_t{0x7e0000000000});
    const auto *adjoint = reinterpret_cast<const void *>(uintptr_t{0x7e0001000000});
    {
      adprof::PhaseScope phase(ADPROF_PHASE_FORWARD);
      adprof::RoleScope role(ADPROF_ROLE_FORWARD_CACHE);
      adprof_track_alloc(cache, 8 * kMiB, ADPROF_SPACE_DEVICE_BLOCK, 0);
    }
    {
      adprof::PhaseScope phase(ADPROF_PHASE_BACKWARD);
      adprof::RoleScope role(ADPROF_ROLE_ADJOINT);
      adprof_track_alloc(adjoint, 16 * kMiB, ADPROF_SPACE_DEVICE_BLOCK, 0);
      adprof_track_free(adjoint, ADPROF_SPACE_DEVICE_BLOCK, 0);
      adprof_track_free(cache, ADPROF_SPACE_DEVICE_BLOCK, 0);
    }
  }
  free(m1);
  free(m2);
  free(x);
  free(idx);
  free(w1);
  free(w2);
  return 0;
}
