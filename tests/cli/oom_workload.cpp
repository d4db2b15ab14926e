// Writes the out-of-memory annotation a device allocator writes (adcore's caching allocator:
// "adcore.cuda.oom" {requested, reserved, allocated, limit, device, live bytes by role x 10}),
// so the report's decoding is tested without a GPU, after declaring the device blocks it names.
#include <adprof/context.h>

#include <cstdint>

int main() {
  // What filled the device: a segment, and two blocks cut from it with their roles.
  static char device[96 << 20];  // stands in for device addresses (never touched)
  adprof_track_alloc(device, 96u << 20, ADPROF_SPACE_DEVICE_SEGMENT, 0);
  adprof_role before = adprof_set_role(ADPROF_ROLE_ACTIVATION);
  adprof_track_alloc(device, 60u << 20, ADPROF_SPACE_DEVICE_BLOCK, 0);
  adprof_set_role(ADPROF_ROLE_ADJOINT);
  adprof_track_alloc(device + (60 << 20), 30u << 20, ADPROF_SPACE_DEVICE_BLOCK, 0);
  adprof_set_role(before);
  const uint32_t kind = adprof_name("adcore.cuda.oom");
  uint64_t values[15] = {64u << 20, 96u << 20, 90u << 20, 100u << 20, 0};
  values[5 + ADPROF_ROLE_ACTIVATION] = 60u << 20;
  values[5 + ADPROF_ROLE_ADJOINT] = 30u << 20;
  adprof_annotate(kind, values, 15);
  return 0;
}
