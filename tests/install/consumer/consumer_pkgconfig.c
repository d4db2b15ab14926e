/* The same context API from C, built with `pkg-config --cflags --libs adprof`. */
#include <adprof/context.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  adprof_set_phase(ADPROF_PHASE_FORWARD);
  adprof_op_begin(adprof_name("pkgconfig.op"), 1);
  adprof_role previous = adprof_set_role(ADPROF_ROLE_WORKSPACE);
  unsigned char *p = malloc(3 << 20);
  if (!p) return 1;
  memset(p, 1, 3 << 20);
  adprof_set_role(previous);
  adprof_op_end();
  printf("checksum %d\n", p[789]); /* read back: the allocation cannot be elided */
  free(p);
  return 0;
}
