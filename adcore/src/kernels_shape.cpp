// CPU kernels: copies into strided regions (concat, stack, slice backward).
#include <cstring>

#include "internal.h"

namespace adcore::detail {
namespace {

// Copies `src` (any strides) into dst + base with `dst_strides` (element size E bytes).
template <class E>
void copy_region(const Tensor &src, void *dst, int64_t base, const int64_t *dst_strides) {
  const E *ps = static_cast<const E *>(src.raw());
  E *pd = static_cast<E *>(dst) + base;
  iterate2(src.shape(), src.strides().d, dst_strides,
           [&](int64_t, int64_t i, int64_t j) { pd[j] = ps[i]; });
}

void copy_region_any(const Tensor &src, void *dst, int64_t base, const int64_t *dst_strides) {
  switch (dtype_size(src.dtype())) {
    case 1:
      copy_region<uint8_t>(src, dst, base, dst_strides);
      break;
    case 4:
      copy_region<uint32_t>(src, dst, base, dst_strides);
      break;
    default:
      copy_region<uint64_t>(src, dst, base, dst_strides);
      break;
  }
}

}  // namespace

void k_concat(const KernelArgs &a) {
  Tensor &o = *a.out;
  const int dim = static_cast<int>(a.attrs->i[0]);
  const Shape os = o.strides();
  int64_t off = 0;
  for (int k = 0; k < a.nin; ++k) {
    copy_region_any(a.in[k], o.raw(), off * os.d[dim], os.d);
    off += a.in[k].shape()[dim];
  }
}

void k_stack(const KernelArgs &a) {
  Tensor &o = *a.out;
  const int dim = static_cast<int>(a.attrs->i[0]);
  Shape rs;  // out strides without `dim`
  for (int d = 0; d < o.rank(); ++d)
    if (d != dim) rs.push_back(o.strides()[d]);
  for (int k = 0; k < a.nin; ++k) copy_region_any(a.in[k], o.raw(), k * o.strides()[dim], rs.d);
}

// in: g; attrs: i[0] dim, i[1] start. out: zeros of the input shape with g in the slice.
void k_slice_backward(const KernelArgs &a) {
  Tensor &o = *a.out;
  std::memset(o.raw(), 0, o.nbytes());
  const int dim = static_cast<int>(a.attrs->i[0]);
  copy_region_any(a.in[0], o.raw(), a.attrs->i[1] * o.strides()[dim], o.strides().d);
}

}  // namespace adcore::detail
