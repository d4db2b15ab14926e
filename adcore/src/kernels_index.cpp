// CPU kernels: gather / index_select / scatter_add with i32 or i64 indices read natively.
#include <cstring>
#include <string>

#include "internal.h"

namespace adcore::detail {
namespace {

template <class I>
int64_t checked(I v, int64_t n) {
  const auto i = static_cast<int64_t>(v);
  if (i < 0 || i >= n)
    throw std::out_of_range("index " + std::to_string(i) + " out of range [0, " +
                            std::to_string(n) + ")");
  return i;
}

template <class F>
void dispatch_fi(DType t, DType it, F f) {
  dispatch_float(t, [&](auto ft) { dispatch_index(it, [&](auto itag) { f(ft, itag); }); });
}

// (outer, D, inner) view of a contiguous shape around `dim`.
void split(const Shape &s, int dim, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s.d[d];
  for (int d = dim + 1; d < s.rank; ++d) inner *= s.d[d];
}

}  // namespace

// in: x (contiguous), idx (1-D contiguous); attrs i[0] = dim
void k_index_select(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1];
  dispatch_fi(x.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const int dim = static_cast<int>(a.attrs->i[0]);
    int64_t outer, inner;
    split(x.shape(), dim, outer, inner);
    const int64_t D = x.shape()[dim], n = idx.numel();
    const T *px = static_cast<const T *>(x.raw());
    const I *pi = static_cast<const I *>(idx.raw());
    T *po = static_cast<T *>(a.out->raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(po + (o * n + j) * inner, px + (o * D + checked(pi[j], D)) * inner,
                    static_cast<size_t>(inner) * sizeof(T));
  });
}

// in: g (contiguous, index_select's output shape), idx; attrs i[0] = dim; out: input shape
void k_index_select_backward(const KernelArgs &a) {
  const Tensor &g = a.in[0], &idx = a.in[1];
  Tensor &out = *a.out;
  dispatch_fi(g.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const int dim = static_cast<int>(a.attrs->i[0]);
    int64_t outer, inner;
    split(out.shape(), dim, outer, inner);
    const int64_t D = out.shape()[dim], n = idx.numel();
    const T *pg = static_cast<const T *>(g.raw());
    const I *pi = static_cast<const I *>(idx.raw());
    T *po = static_cast<T *>(out.raw());
    std::memset(po, 0, out.nbytes());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j) {
        T *dst = po + (o * D + checked(pi[j], D)) * inner;
        const T *src = pg + (o * n + j) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
      }
  });
}

namespace {
// Iterates idx (contiguous) and calls f(linear index, offset in `target` except along dim,
// index value) with target contiguous of shape `ts`.
template <class I, class F>
void along(const Shape &ts, const Tensor &idx, int dim, F f) {
  Shape st = contiguous_strides(ts);
  const int64_t sdim = st.d[dim];
  st.d[dim] = 0;
  const I *pi = static_cast<const I *>(idx.raw());
  const int64_t D = ts.d[dim];
  iterate2(idx.shape(), st.d, idx.strides().d, [&](int64_t oi, int64_t toff, int64_t ioff) {
    f(oi, toff + checked(pi[ioff], D) * sdim);
  });
}
}  // namespace

// torch.gather: in x (contiguous), idx (contiguous, same rank); attrs i[0] = dim
void k_gather(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1];
  dispatch_fi(x.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const T *px = static_cast<const T *>(x.raw());
    T *po = static_cast<T *>(a.out->raw());
    along<I>(x.shape(), idx, static_cast<int>(a.attrs->i[0]),
             [&](int64_t oi, int64_t xo) { po[oi] = px[xo]; });
  });
}

// in: g (contiguous, idx shape), idx; out: zeros of x shape, scatter-added
void k_gather_backward(const KernelArgs &a) {
  const Tensor &g = a.in[0], &idx = a.in[1];
  Tensor &out = *a.out;
  dispatch_fi(g.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const T *pg = static_cast<const T *>(g.raw());
    T *po = static_cast<T *>(out.raw());
    std::memset(po, 0, out.nbytes());
    along<I>(out.shape(), idx, static_cast<int>(a.attrs->i[0]),
             [&](int64_t oi, int64_t xo) { po[xo] += pg[oi]; });
  });
}

// in: x, idx, src (all contiguous); out = x with src scatter-added along dim
void k_scatter_add(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1], &src = a.in[2];
  Tensor &out = *a.out;
  dispatch_fi(x.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const T *ps = static_cast<const T *>(src.raw());
    T *po = static_cast<T *>(out.raw());
    std::memcpy(po, x.raw(), out.nbytes());
    along<I>(out.shape(), idx, static_cast<int>(a.attrs->i[0]),
             [&](int64_t oi, int64_t xo) { po[xo] += ps[oi]; });
  });
}

namespace {
template <class I>
int64_t nd_offset(const I *row, int k, const Shape &xs, const Shape &xst) {
  int64_t off = 0;
  for (int j = 0; j < k; ++j) off += checked(row[j], xs.d[j]) * xst.d[j];
  return off;
}
}  // namespace

// in: x (contiguous), idx (contiguous, (..., k)); out (..., x.shape[k:])
void k_gather_nd(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1];
  dispatch_fi(x.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const int k = static_cast<int>(idx.shape()[idx.rank() - 1]);
    const int64_t m = k ? idx.numel() / k : 0;
    int64_t inner = 1;
    for (int d = k; d < x.rank(); ++d) inner *= x.shape()[d];
    const Shape xst = contiguous_strides(x.shape());
    const T *px = static_cast<const T *>(x.raw());
    const I *pi = static_cast<const I *>(idx.raw());
    T *po = static_cast<T *>(a.out->raw());
    if (inner == 1) {
      for (int64_t r = 0; r < m; ++r) po[r] = px[nd_offset(pi + r * k, k, x.shape(), xst)];
    } else {
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(po + r * inner, px + nd_offset(pi + r * k, k, x.shape(), xst),
                    static_cast<size_t>(inner) * sizeof(T));
    }
  });
}

// in: g (contiguous), idx; out: zeros of x shape, scatter-added
void k_gather_nd_backward(const KernelArgs &a) {
  const Tensor &g = a.in[0], &idx = a.in[1];
  Tensor &out = *a.out;
  dispatch_fi(g.dtype(), idx.dtype(), [&](auto ft, auto itag) {
    using T = decltype(ft);
    using I = decltype(itag);
    const int k = static_cast<int>(idx.shape()[idx.rank() - 1]);
    const int64_t m = k ? idx.numel() / k : 0;
    int64_t inner = 1;
    for (int d = k; d < out.rank(); ++d) inner *= out.shape()[d];
    const Shape xst = contiguous_strides(out.shape());
    const T *pg = static_cast<const T *>(g.raw());
    const I *pi = static_cast<const I *>(idx.raw());
    T *po = static_cast<T *>(out.raw());
    std::memset(po, 0, out.nbytes());
    for (int64_t r = 0; r < m; ++r) {
      T *dst = po + nd_offset(pi + r * k, k, out.shape(), xst);
      for (int64_t i = 0; i < inner; ++i) dst[i] += pg[r * inner + i];
    }
  });
}

}  // namespace adcore::detail
