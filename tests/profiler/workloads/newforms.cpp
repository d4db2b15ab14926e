// Every replaceable operator new/delete form, each once with a size of its own, inside the op
// scope "newforms". Prints the sizes it requested ("size N" lines), in order; exits 1 if an
// aligned form returned a misaligned pointer.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <new>

#include "adprof/context.h"

namespace {

void *volatile g_sink;  // keeps the compiler from eliding the pairs
int g_bad = 0;

void use(void *p, size_t size, size_t align = 1) {
  if (!p || reinterpret_cast<uintptr_t>(p) % align != 0) ++g_bad;
  if (p) memset(p, 0x5A, size);
  g_sink = p;
  printf("size %zu\n", size);
}

struct alignas(256) Wide {
  unsigned char bytes[768];
};

}  // namespace

int main() {
  using std::align_val_t;
  const std::nothrow_t &nt = std::nothrow;
  adprof_op_begin(adprof_name("newforms"), 1);
  void *p;
  p = ::operator new(1001);
  use(p, 1001);
  ::operator delete(p);
  p = ::operator new(1002);
  use(p, 1002);
  ::operator delete (p, size_t{1002});
  p = ::operator new[](1003);
  use(p, 1003);
  ::operator delete[](p);
  p = ::operator new[](1004);
  use(p, 1004);
  ::operator delete[](p, size_t{1004});
  p = ::operator new(1005, nt);
  use(p, 1005);
  ::operator delete(p, nt);
  p = ::operator new[](1006, nt);
  use(p, 1006);
  ::operator delete[](p, nt);
  p = ::operator new (1024, align_val_t{64});
  use(p, 1024, 64);
  ::operator delete (p, align_val_t{64});
  p = ::operator new (2048, align_val_t{128});
  use(p, 2048, 128);
  ::operator delete (p, size_t{2048}, align_val_t{128});
  p = ::operator new[](4096, align_val_t{256});
  use(p, 4096, 256);
  ::operator delete[](p, align_val_t{256});
  p = ::operator new[](5120, align_val_t{512});
  use(p, 5120, 512);
  ::operator delete[](p, size_t{5120}, align_val_t{512});
  p = ::operator new (1536, align_val_t{512}, nt);
  use(p, 1536, 512);
  ::operator delete (p, align_val_t{512}, nt);
  p = ::operator new[](3072, align_val_t{1024}, nt);
  use(p, 3072, 1024);
  ::operator delete[](p, align_val_t{1024}, nt);
  // new-expressions: a plain object array and an over-aligned type.
  auto *ints = new int[777];
  use(ints, 777 * sizeof(int));
  delete[] ints;
  auto *wide = new Wide;
  use(wide, sizeof(Wide), alignof(Wide));
  delete wide;
  adprof_op_end();
  return g_bad ? 1 : 0;
}
