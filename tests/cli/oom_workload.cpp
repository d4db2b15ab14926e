// Writes the out-of-memory annotation a device allocator writes (adcore's caching allocator:
// "adcore.cuda.oom" {requested, reserved, allocated, limit, device, live bytes by role x 10}),
// so the report's decoding is tested without a GPU.
#include <adprof/context.h>

#include <cstdint>

int main() {
  const uint32_t kind = adprof_name("adcore.cuda.oom");
  uint64_t values[15] = {64u << 20, 96u << 20, 90u << 20, 100u << 20, 0};
  values[5 + ADPROF_ROLE_ACTIVATION] = 60u << 20;
  values[5 + ADPROF_ROLE_ADJOINT] = 30u << 20;
  adprof_annotate(kind, values, 15);
  return 0;
}
