// CPU kernels: reductions over an axis mask (attrs.i[0]); outputs are laid out keep-dim.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "internal.h"

namespace adcore::detail {
namespace {

uint32_t all_mask(int rank) { return rank >= 32 ? ~0u : ((1u << rank) - 1u); }

// Strides that map an input index to its (contiguous, keep-dim) output slot.
Shape out_strides(const Shape &in, uint32_t mask) {
  Shape keep = in;
  for (int d = 0; d < in.rank; ++d)
    if (mask & (1u << d)) keep.d[d] = 1;
  Shape st = contiguous_strides(keep);
  for (int d = 0; d < in.rank; ++d)
    if (mask & (1u << d)) st.d[d] = 0;
  return st;
}

template <class T>
void sum_into(const Tensor &x, T *po, int64_t on, uint32_t mask) {
  const T *px = static_cast<const T *>(x.raw());
  if ((mask & all_mask(x.rank())) == all_mask(x.rank()) && x.is_contiguous()) {
    // Four running sums (independent additions pipeline; the order is fixed, so results are
    // reproducible), in double.
    double acc[4] = {0, 0, 0, 0};
    const int64_t n = x.numel();
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(px[i + k]);
    for (; i < n; ++i) acc[0] += static_cast<double>(px[i]);
    po[0] = static_cast<T>((acc[0] + acc[1]) + (acc[2] + acc[3]));
    return;
  }
  std::memset(po, 0, static_cast<size_t>(on) * sizeof(T));
  const Shape os = out_strides(x.shape(), mask);
  iterate2(x.shape(), x.strides().d, os.d, [&](int64_t, int64_t i, int64_t j) { po[j] += px[i]; });
}

template <class T>
void max_into(const Tensor &x, T *po, int64_t on, uint32_t mask) {
  const T *px = static_cast<const T *>(x.raw());
  for (int64_t i = 0; i < on; ++i) po[i] = -std::numeric_limits<T>::infinity();
  const Shape os = out_strides(x.shape(), mask);
  iterate2(x.shape(), x.strides().d, os.d, [&](int64_t, int64_t i, int64_t j) {
    if (px[i] > po[j] || std::isnan(px[i])) po[j] = px[i];
  });
}

int64_t reduced_count(const Shape &in, uint32_t mask) {
  int64_t c = 1;
  for (int d = 0; d < in.rank; ++d)
    if (mask & (1u << d)) c *= in.d[d];
  return c;
}

}  // namespace

void k_sum(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    sum_into<T>(a.in[0], static_cast<T *>(a.out->raw()), a.out->numel(),
                static_cast<uint32_t>(a.attrs->i[0]));
  });
}

void k_mean(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto mask = static_cast<uint32_t>(a.attrs->i[0]);
    T *po = static_cast<T *>(a.out->raw());
    sum_into<T>(a.in[0], po, a.out->numel(), mask);
    const T inv = T(1) / static_cast<T>(reduced_count(a.in[0].shape(), mask));
    for (int64_t i = 0, n = a.out->numel(); i < n; ++i) po[i] *= inv;
  });
}

void k_max(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    max_into<T>(a.in[0], static_cast<T *>(a.out->raw()), a.out->numel(),
                static_cast<uint32_t>(a.attrs->i[0]));
  });
}

// in: x, m (keep-shaped max), g (keep-shaped, contiguous). The first maximal element of each
// group receives the gradient.
void k_max_backward(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor &x = a.in[0];
    const T *px = static_cast<const T *>(x.raw());
    const T *pm = static_cast<const T *>(a.in[1].raw());
    const T *pg = static_cast<const T *>(a.in[2].raw());
    T *po = static_cast<T *>(a.out->raw());
    std::memset(po, 0, a.out->nbytes());
    std::vector<char> taken(static_cast<size_t>(a.in[1].numel()), 0);
    const Shape os = out_strides(x.shape(), static_cast<uint32_t>(a.attrs->i[0]));
    iterate2(x.shape(), x.strides().d, os.d, [&](int64_t oi, int64_t i, int64_t j) {
      if (!taken[static_cast<size_t>(j)] && px[i] == pm[j]) {
        taken[static_cast<size_t>(j)] = 1;
        po[oi] = pg[j];
      }
    });
  });
}

void k_logsumexp(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor &x = a.in[0];
    const auto mask = static_cast<uint32_t>(a.attrs->i[0]);
    T *po = static_cast<T *>(a.out->raw());
    const int64_t on = a.out->numel();
    max_into<T>(x, po, on, mask);
    std::vector<T> s(static_cast<size_t>(on), T(0));  // workspace
    const T *px = static_cast<const T *>(x.raw());
    const Shape os = out_strides(x.shape(), mask);
    iterate2(x.shape(), x.strides().d, os.d, [&](int64_t, int64_t i, int64_t j) {
      const T m = std::isfinite(po[j]) ? po[j] : T(0);
      s[static_cast<size_t>(j)] += std::exp(px[i] - m);
    });
    for (int64_t j = 0; j < on; ++j) {
      const T m = std::isfinite(po[j]) ? po[j] : T(0);
      po[j] = m + std::log(s[static_cast<size_t>(j)]);
    }
  });
}

}  // namespace adcore::detail
