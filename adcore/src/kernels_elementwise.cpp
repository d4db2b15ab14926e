// CPU kernels: elementwise ops, copies and casts (numpy broadcasting through strides).
#include <cmath>
#include <cstring>

#include "internal.h"

namespace adcore::detail {
namespace {

template <class T, class F>
void binary(const KernelArgs &a, F f) {
  const Tensor &x = a.in[0], &y = a.in[1];
  Tensor &o = *a.out;
  T *po = static_cast<T *>(o.raw());
  const T *px = static_cast<const T *>(x.raw());
  const T *py = static_cast<const T *>(y.raw());
  const int64_t n = o.numel();
  if (n == 1) {  // scalars (0-d tensors and one-element broadcasts): no loop set-up
    *po = f(*px, *py);
    return;
  }
  const bool xc = x.numel() == n && x.is_contiguous(), yc = y.numel() == n && y.is_contiguous();
  auto scalar_like = [](const Tensor &t) {
    for (int i = 0; i < t.rank(); ++i)
      if (t.strides()[i] != 0 && t.shape()[i] != 1) return false;
    return true;
  };
  if (xc && yc) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(px[i], py[i]);
    return;
  }
  if (xc && scalar_like(y)) {
    const T v = *py;
    for (int64_t i = 0; i < n; ++i) po[i] = f(px[i], v);
    return;
  }
  if (yc && scalar_like(x)) {
    const T v = *px;
    for (int64_t i = 0; i < n; ++i) po[i] = f(v, py[i]);
    return;
  }
  const Shape sx = bstrides(x, o.shape()), sy = bstrides(y, o.shape());
  iterate2(o.shape(), sx.d, sy.d,
           [&](int64_t oi, int64_t i, int64_t j) { po[oi] = f(px[i], py[j]); });
}

template <class T, class F>
void unary(const KernelArgs &a, F f) {
  const Tensor &x = a.in[0];
  Tensor &o = *a.out;
  T *po = static_cast<T *>(o.raw());
  const T *px = static_cast<const T *>(x.raw());
  const int64_t n = o.numel();
  if (n == 1) {  // scalars: no loop set-up
    *po = f(*px);
    return;
  }
  if (x.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(px[i]);
    return;
  }
  const Shape zero{};
  const Shape sx = bstrides(x, o.shape());
  int64_t z[kMaxRank] = {};
  (void)zero;
  iterate2(o.shape(), sx.d, z, [&](int64_t oi, int64_t i, int64_t) { po[oi] = f(px[i]); });
}

// Loads/stores of any dtype, for cast.
template <class F>
void dispatch_any(DType t, F f) {
  switch (t) {
    case DType::F32:
      f(float{});
      break;
    case DType::F64:
      f(double{});
      break;
    case DType::I32:
      f(int32_t{});
      break;
    case DType::I64:
      f(int64_t{});
      break;
    case DType::Bool:
      f(bool{});
      break;
  }
}

}  // namespace

// The kernels of the table's UNARY and BINARY rows, from their CPU expressions (x, y of type T).
#define ADCORE_NO_KERNEL(...)
#define ADCORE_UNARY_KERNEL(n, backward, s0, cpu_expr, cuda_expr) \
  void k_##n(const KernelArgs &a) {                               \
    dispatch_float(a.out->dtype(), [&](auto tag) {                \
      using T = decltype(tag);                                    \
      unary<T>(a, [](T x) -> T { return cpu_expr; });             \
    });                                                           \
  }
#define ADCORE_BINARY_KERNEL(n, backward, inplace, s0, s1, cpu_expr, cuda_expr) \
  void k_##n(const KernelArgs &a) {                                             \
    dispatch_float(a.out->dtype(), [&](auto tag) {                              \
      using T = decltype(tag);                                                  \
      binary<T>(a, [](T x, T y) -> T { return cpu_expr; });                     \
    });                                                                         \
  }
ADCORE_OP_TABLE(ADCORE_NO_KERNEL, ADCORE_UNARY_KERNEL, ADCORE_BINARY_KERNEL)
#undef ADCORE_NO_KERNEL
#undef ADCORE_UNARY_KERNEL
#undef ADCORE_BINARY_KERNEL

void k_contiguous(const KernelArgs &a) { k_copy(a); }

void k_affine(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T al = static_cast<T>(a.attrs->s[0]), be = static_cast<T>(a.attrs->s[1]);
    unary<T>(a, [al, be](T x) -> T { return al * x + be; });
  });
}

void k_pow_scalar(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const double p = a.attrs->s[0];
    if (p == 2.0)
      unary<T>(a, [](T x) -> T { return x * x; });
    else if (p == 3.0)
      unary<T>(a, [](T x) -> T { return x * x * x; });
    else if (p == 4.0)
      unary<T>(a, [](T x) -> T { return (x * x) * (x * x); });
    else if (p == 1.0)
      unary<T>(a, [](T x) -> T { return x; });
    else if (p == 0.0)
      unary<T>(a, [](T) -> T { return T(1); });
    else {
      const T pt = static_cast<T>(p);
      unary<T>(a, [pt](T x) -> T { return std::pow(x, pt); });
    }
  });
}

void k_copy(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  Tensor &o = *a.out;
  if (x.is_contiguous()) {
    std::memcpy(o.raw(), x.raw(), o.nbytes());
    return;
  }
  dispatch_any(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *po = static_cast<T *>(o.raw());
    const T *px = static_cast<const T *>(x.raw());
    int64_t z[kMaxRank] = {};
    iterate2(o.shape(), x.strides().d, z, [&](int64_t oi, int64_t i, int64_t) { po[oi] = px[i]; });
  });
}

void k_cast(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  Tensor &o = *a.out;
  dispatch_any(x.dtype(), [&](auto stag) {
    using S = decltype(stag);
    dispatch_any(o.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      D *po = static_cast<D *>(o.raw());
      const S *px = static_cast<const S *>(x.raw());
      if (x.is_contiguous()) {
        for (int64_t i = 0, n = o.numel(); i < n; ++i) po[i] = static_cast<D>(px[i]);
      } else {
        int64_t z[kMaxRank] = {};
        iterate2(o.shape(), x.strides().d, z,
                 [&](int64_t oi, int64_t i, int64_t) { po[oi] = static_cast<D>(px[i]); });
      }
    });
  });
}

void k_add_n(const KernelArgs &a) {
  Tensor &o = *a.out;
  dispatch_float(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *po = static_cast<T *>(o.raw());
    const int64_t n = o.numel();
    for (int k = 0; k < a.nin; ++k) {
      const Tensor &x = a.in[k];
      const T *px = static_cast<const T *>(x.raw());
      if (x.is_contiguous() && x.numel() == n) {
        if (k == 0)
          std::memcpy(po, px, o.nbytes());
        else
          for (int64_t i = 0; i < n; ++i) po[i] += px[i];
      } else {
        const Shape sx = bstrides(x, o.shape());
        int64_t z[kMaxRank] = {};
        if (k == 0)
          iterate2(o.shape(), sx.d, z, [&](int64_t oi, int64_t i, int64_t) { po[oi] = px[i]; });
        else
          iterate2(o.shape(), sx.d, z, [&](int64_t oi, int64_t i, int64_t) { po[oi] += px[i]; });
      }
    }
  });
}

void k_add_inplace(const KernelArgs &a) {
  Tensor &o = *a.out;  // == in[0], contiguous
  const Tensor &y = a.in[1];
  dispatch_float(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *po = static_cast<T *>(o.raw());
    const T *py = static_cast<const T *>(y.raw());
    const int64_t n = o.numel();
    if (y.is_contiguous() && y.numel() == n) {
      for (int64_t i = 0; i < n; ++i) po[i] += py[i];
    } else {
      const Shape sy = bstrides(y, o.shape());
      int64_t z[kMaxRank] = {};
      iterate2(o.shape(), sy.d, z, [&](int64_t oi, int64_t j, int64_t) { po[oi] += py[j]; });
    }
  });
}

}  // namespace adcore::detail
