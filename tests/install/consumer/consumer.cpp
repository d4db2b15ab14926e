// A two-op "engine": its forward op keeps a 4 MiB cache for the backward op, which makes a
// 2 MiB adjoint; both are live at the peak, so the report must name them with their roles.
#include <adprof/context.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Filled and read back, so that the compiler cannot elide the allocation.
unsigned char *touch(size_t bytes) {
  auto *p = static_cast<unsigned char *>(std::malloc(bytes));
  if (p) std::memset(p, 1, bytes);
  return p;
}

}  // namespace

int main() {
  unsigned char *cache = nullptr, *adjoint = nullptr;
  {
    adprof::PhaseScope phase(ADPROF_PHASE_FORWARD);
    adprof::OpScope op(adprof_name("consumer.forward"), 1);
    adprof::RoleScope role(ADPROF_ROLE_FORWARD_CACHE);
    cache = touch(4 << 20);
  }
  {
    adprof::PhaseScope phase(ADPROF_PHASE_BACKWARD);
    adprof::OpScope op(adprof_name("consumer.backward"), 1);
    adprof::RoleScope role(ADPROF_ROLE_ADJOINT);
    adjoint = touch(2 << 20);
  }
  if (!cache || !adjoint) return 1;
  std::printf("consumer: profiled %s, checksum %d\n", adprof_active() ? "yes" : "no",
              cache[123] + adjoint[456]);
  std::free(adjoint);
  std::free(cache);
  return 0;
}
