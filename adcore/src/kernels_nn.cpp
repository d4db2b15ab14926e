// CPU kernels: softmax family, conv2d (im2col + BLAS), pooling, optimizer updates.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "internal.h"

namespace adcore::detail {
namespace {

void gemm_b(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
            float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
void gemm_b(bool ta, bool tb, int m, int n, int k, const double *a, int lda, const double *b,
            int ldb, double beta, double *c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

void split(const Shape &s, int axis, int64_t &outer, int64_t &len, int64_t &inner) {
  outer = inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s.d[d];
  len = s.d[axis];
  for (int d = axis + 1; d < s.rank; ++d) inner *= s.d[d];
}

template <class T, bool kLog>
void softmax_impl(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  int64_t outer, len, inner;
  split(x.shape(), static_cast<int>(a.attrs->i[0]), outer, len, inner);
  const T *px = static_cast<const T *>(x.raw());
  T *po = static_cast<T *>(a.out->raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T *row = px + o * len * inner + i;
      T *orow = po + o * len * inner + i;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < len; ++j) m = std::max(m, row[j * inner]);
      T s = 0;
      for (int64_t j = 0; j < len; ++j) s += std::exp(row[j * inner] - m);
      if (kLog) {
        const T ls = std::log(s) + m;
        for (int64_t j = 0; j < len; ++j) orow[j * inner] = row[j * inner] - ls;
      } else {
        for (int64_t j = 0; j < len; ++j) orow[j * inner] = std::exp(row[j * inner] - m) / s;
      }
    }
}

struct ConvDims {
  int64_t N, C, H, W, O, KH, KW, OH, OW, stride, pad;
};
ConvDims conv_dims(const Shape &x, const Shape &w, const Shape &out, const Attrs &a) {
  return ConvDims{x.d[0], x.d[1],   x.d[2],   x.d[3], w.d[0], w.d[2],
                  w.d[3], out.d[2], out.d[3], a.i[0], a.i[1]};
}

template <class T>
void im2col(const ConvDims &d, const T *x, T *col) {
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t kh = 0; kh < d.KH; ++kh)
      for (int64_t kw = 0; kw < d.KW; ++kw) {
        T *row = col + ((c * d.KH + kh) * d.KW + kw) * d.OH * d.OW;
        for (int64_t oh = 0; oh < d.OH; ++oh) {
          const int64_t ih = oh * d.stride - d.pad + kh;
          for (int64_t ow = 0; ow < d.OW; ++ow) {
            const int64_t iw = ow * d.stride - d.pad + kw;
            row[oh * d.OW + ow] =
                (ih >= 0 && ih < d.H && iw >= 0 && iw < d.W) ? x[(c * d.H + ih) * d.W + iw] : T(0);
          }
        }
      }
}

template <class T>
void col2im_add(const ConvDims &d, const T *col, T *x) {
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t kh = 0; kh < d.KH; ++kh)
      for (int64_t kw = 0; kw < d.KW; ++kw) {
        const T *row = col + ((c * d.KH + kh) * d.KW + kw) * d.OH * d.OW;
        for (int64_t oh = 0; oh < d.OH; ++oh) {
          const int64_t ih = oh * d.stride - d.pad + kh;
          if (ih < 0 || ih >= d.H) continue;
          for (int64_t ow = 0; ow < d.OW; ++ow) {
            const int64_t iw = ow * d.stride - d.pad + kw;
            if (iw >= 0 && iw < d.W) x[(c * d.H + ih) * d.W + iw] += row[oh * d.OW + ow];
          }
        }
      }
}

}  // namespace

void k_softmax(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto t) { softmax_impl<decltype(t), false>(a); });
}
void k_log_softmax(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto t) { softmax_impl<decltype(t), true>(a); });
}

// in: x (N,C,H,W), w (O,C,KH,KW), both contiguous; attrs i[0] stride, i[1] padding.
void k_conv2d(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const ConvDims d = conv_dims(a.in[0].shape(), a.in[1].shape(), a.out->shape(), *a.attrs);
    const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
    std::vector<T> col(static_cast<size_t>(ckk * ohw));  // workspace
    const T *px = static_cast<const T *>(a.in[0].raw());
    const T *pw = static_cast<const T *>(a.in[1].raw());
    T *po = static_cast<T *>(a.out->raw());
    for (int64_t n = 0; n < d.N; ++n) {
      im2col(d, px + n * d.C * d.H * d.W, col.data());
      gemm_b(false, false, static_cast<int>(d.O), static_cast<int>(ohw), static_cast<int>(ckk), pw,
             static_cast<int>(ckk), col.data(), static_cast<int>(ohw), T(0), po + n * d.O * ohw,
             static_cast<int>(ohw));
    }
  });
}

// in: g (N,O,OH,OW) contiguous, w; out: input-shaped gradient.
void k_conv2d_backward_input(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const ConvDims d = conv_dims(a.out->shape(), a.in[1].shape(), a.in[0].shape(), *a.attrs);
    const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
    std::vector<T> col(static_cast<size_t>(ckk * ohw));
    const T *pg = static_cast<const T *>(a.in[0].raw());
    const T *pw = static_cast<const T *>(a.in[1].raw());
    T *po = static_cast<T *>(a.out->raw());
    std::memset(po, 0, a.out->nbytes());
    for (int64_t n = 0; n < d.N; ++n) {
      gemm_b(true, false, static_cast<int>(ckk), static_cast<int>(ohw), static_cast<int>(d.O), pw,
             static_cast<int>(ckk), pg + n * d.O * ohw, static_cast<int>(ohw), T(0), col.data(),
             static_cast<int>(ohw));
      col2im_add(d, col.data(), po + n * d.C * d.H * d.W);
    }
  });
}

// in: g (N,O,OH,OW) contiguous, x (N,C,H,W) contiguous; out: weight-shaped gradient.
void k_conv2d_backward_weight(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const ConvDims d = conv_dims(a.in[1].shape(), a.out->shape(), a.in[0].shape(), *a.attrs);
    const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
    std::vector<T> col(static_cast<size_t>(ckk * ohw));
    const T *pg = static_cast<const T *>(a.in[0].raw());
    const T *px = static_cast<const T *>(a.in[1].raw());
    T *po = static_cast<T *>(a.out->raw());
    for (int64_t n = 0; n < d.N; ++n) {
      im2col(d, px + n * d.C * d.H * d.W, col.data());
      gemm_b(false, true, static_cast<int>(d.O), static_cast<int>(ckk), static_cast<int>(ohw),
             pg + n * d.O * ohw, static_cast<int>(ohw), col.data(), static_cast<int>(ohw),
             n == 0 ? T(0) : T(1), po, static_cast<int>(ckk));
    }
  });
}

namespace {
template <class T, class F>
void pool_windows(const Shape &xs, const Shape &os, const Attrs &a, F f) {
  const int64_t N = xs.d[0], C = xs.d[1], H = xs.d[2], W = xs.d[3], OH = os.d[2], OW = os.d[3];
  const int64_t k = a.i[0], s = a.i[1];
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        f(nc * H * W + oh * s * W + ow * s, W, k, (nc * OH + oh) * OW + ow);
}
}  // namespace

// attrs i[0] kernel, i[1] stride; x contiguous
void k_max_pool2d(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *px = static_cast<const T *>(a.in[0].raw());
    T *po = static_cast<T *>(a.out->raw());
    pool_windows<T>(a.in[0].shape(), a.out->shape(), *a.attrs,
                    [&](int64_t base, int64_t W, int64_t k, int64_t o) {
                      T m = -std::numeric_limits<T>::infinity();
                      for (int64_t i = 0; i < k; ++i)
                        for (int64_t j = 0; j < k; ++j) m = std::max(m, px[base + i * W + j]);
                      po[o] = m;
                    });
  });
}

// in: g (contiguous, pooled shape), x; out: x-shaped, gradient to the first max of each window
void k_max_pool2d_backward(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *pg = static_cast<const T *>(a.in[0].raw());
    const T *px = static_cast<const T *>(a.in[1].raw());
    T *po = static_cast<T *>(a.out->raw());
    std::memset(po, 0, a.out->nbytes());
    pool_windows<T>(a.in[1].shape(), a.in[0].shape(), *a.attrs,
                    [&](int64_t base, int64_t W, int64_t k, int64_t o) {
                      int64_t best = base;
                      for (int64_t i = 0; i < k; ++i)
                        for (int64_t j = 0; j < k; ++j)
                          if (px[base + i * W + j] > px[best]) best = base + i * W + j;
                      po[best] += pg[o];
                    });
  });
}

void k_avg_pool2d(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *px = static_cast<const T *>(a.in[0].raw());
    T *po = static_cast<T *>(a.out->raw());
    pool_windows<T>(a.in[0].shape(), a.out->shape(), *a.attrs,
                    [&](int64_t base, int64_t W, int64_t k, int64_t o) {
                      T s = 0;
                      for (int64_t i = 0; i < k; ++i)
                        for (int64_t j = 0; j < k; ++j) s += px[base + i * W + j];
                      po[o] = s / static_cast<T>(k * k);
                    });
  });
}

// in: g (contiguous, pooled shape); out: input shape
void k_avg_pool2d_backward(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *pg = static_cast<const T *>(a.in[0].raw());
    T *po = static_cast<T *>(a.out->raw());
    std::memset(po, 0, a.out->nbytes());
    pool_windows<T>(a.out->shape(), a.in[0].shape(), *a.attrs,
                    [&](int64_t base, int64_t W, int64_t k, int64_t o) {
                      const T v = pg[o] / static_cast<T>(k * k);
                      for (int64_t i = 0; i < k; ++i)
                        for (int64_t j = 0; j < k; ++j) po[base + i * W + j] += v;
                    });
  });
}

// in: param (contiguous, written), grad (broadcastable); attrs s[0] = lr
void k_sgd_update(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pp = static_cast<T *>(a.out->raw());
    const Tensor &g = a.in[1];
    const T *pg = static_cast<const T *>(g.raw());
    const T lr = static_cast<T>(a.attrs->s[0]);
    const Shape sg = bstrides(g, a.out->shape());
    int64_t z[kMaxRank] = {};
    iterate2(a.out->shape(), sg.d, z,
             [&](int64_t oi, int64_t j, int64_t) { pp[oi] -= lr * pg[j]; });
  });
}

// in: param, grad, m, v (all contiguous); attrs s = lr, b1, b2, eps; i[0] = step t (from 1)
void k_adam_update(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T *pp = static_cast<T *>(a.out->raw());
    const T *pg = static_cast<const T *>(a.in[1].raw());
    T *pm = static_cast<T *>(a.in[2].raw());
    T *pv = static_cast<T *>(a.in[3].raw());
    const double lr = a.attrs->s[0], b1 = a.attrs->s[1], b2 = a.attrs->s[2], eps = a.attrs->s[3];
    const auto t = static_cast<double>(a.attrs->i[0]);
    const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(b1, t)));
    const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(b2, t)));
    const T tb1 = static_cast<T>(b1), tb2 = static_cast<T>(b2), tlr = static_cast<T>(lr),
            teps = static_cast<T>(eps);
    for (int64_t i = 0, n = a.out->numel(); i < n; ++i) {
      pm[i] = tb1 * pm[i] + (T(1) - tb1) * pg[i];
      pv[i] = tb2 * pv[i] + (T(1) - tb2) * pg[i] * pg[i];
      pp[i] -= tlr * (pm[i] * c1) / (std::sqrt(pv[i] * c2) + teps);
    }
  });
}

}  // namespace adcore::detail
