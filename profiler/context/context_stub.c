/* libadprof_context.so: the context API when the program is not profiled. Every function is
 * empty; libadprof_preload.so, when preloaded, defines the same symbols and wins the lookup. */
#include "adprof/context.h"

int adprof_active(void) { return 0; }
uint32_t adprof_name(const char *name) {
  (void)name;
  return 0;
}
void adprof_op_begin(uint32_t name_id, uint64_t instance) {
  (void)name_id;
  (void)instance;
}
void adprof_op_end(void) {}
adprof_phase adprof_set_phase(adprof_phase phase) {
  (void)phase;
  return ADPROF_PHASE_OTHER;
}
adprof_role adprof_set_role(adprof_role role) {
  (void)role;
  return ADPROF_ROLE_FOREIGN;
}
void adprof_retag(const void *ptr, adprof_role role, const void *source) {
  (void)ptr;
  (void)role;
  (void)source;
}
void adprof_step(uint64_t step) { (void)step; }
void adprof_label(const void *ptr, uint32_t name_id) {
  (void)ptr;
  (void)name_id;
}
void adprof_describe(const void *ptr, adprof_dtype dtype, uint32_t rank, const int64_t *shape) {
  (void)ptr;
  (void)dtype;
  (void)rank;
  (void)shape;
}
void adprof_content_hash(const void *ptr, uint64_t hash) {
  (void)ptr;
  (void)hash;
}
void adprof_annotate(uint32_t kind_name_id, const uint64_t *values, uint32_t count) {
  (void)kind_name_id;
  (void)values;
  (void)count;
}
void adprof_track_alloc(const void *ptr, size_t size, adprof_space space, uint32_t device) {
  (void)ptr;
  (void)size;
  (void)space;
  (void)device;
}
void adprof_track_free(const void *ptr, adprof_space space, uint32_t device) {
  (void)ptr;
  (void)space;
  (void)device;
}
void adprof_device_memory_is_reserve(void) {}
