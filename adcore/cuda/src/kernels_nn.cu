// CUDA kernels: reductions, dot, softmax, convolution helpers (im2col/col2im), pooling and the
// index ops (launch.h). Scatter-style backward kernels use atomicAdd (sm_60+ for doubles).
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "kernel_util.cuh"

namespace adcore::cuda::k {

namespace {

// A reduction: output j walks the kept dims, each output reduces over the reduced dims.
struct RedGeo {
  int kr = 0, rr = 0;
  int64_t kshape[kRank] = {}, kst[kRank] = {},
          kcs[kRank] = {};  // kept: shape, x strides, x contiguous strides
  int64_t rshape[kRank] = {}, rst[kRank] = {}, rcs[kRank] = {};
  int64_t rcount = 1;
};

RedGeo make_red(const Geo &g, uint32_t mask) {
  RedGeo r;
  int64_t cs[kRank];
  int64_t acc = 1;
  for (int d = g.rank - 1; d >= 0; --d) {
    cs[d] = acc;
    acc *= g.shape[d];
  }
  for (int d = 0; d < g.rank; ++d) {
    if (mask & (1u << d)) {
      r.rshape[r.rr] = g.shape[d];
      r.rst[r.rr] = g.a[d];
      r.rcs[r.rr] = cs[d];
      ++r.rr;
      r.rcount *= g.shape[d];
    } else {
      r.kshape[r.kr] = g.shape[d];
      r.kst[r.kr] = g.a[d];
      r.kcs[r.kr] = cs[d];
      ++r.kr;
    }
  }
  return r;
}

__device__ inline void unravel(int64_t i, int n, const int64_t *shape, const int64_t *st1,
                               const int64_t *st2, int64_t &o1, int64_t &o2) {
  o1 = o2 = 0;
  for (int d = n - 1; d >= 0; --d) {
    const int64_t q = i % shape[d];
    i /= shape[d];
    o1 += q * st1[d];
    o2 += q * st2[d];
  }
}

template <class T>
__device__ inline T max_nan(T a, T b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  return b > a ? b : a;
}

template <class T>
__device__ T neg_inf() {
  return -static_cast<T>(INFINITY);
}

// One thread per output (small groups).
template <class T>
__global__ void reduce_thread(Red op, T *out, const T *x, int64_t on, RedGeo r, double scale) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < on;
       j += int64_t(blockDim.x) * gridDim.x) {
    int64_t base, unused;
    unravel(j, r.kr, r.kshape, r.kst, r.kcs, base, unused);
    if (op == Red::sum) {
      double acc = 0;
      for (int64_t i = 0; i < r.rcount; ++i) {
        int64_t o, u2;
        unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, u2);
        acc += static_cast<double>(x[base + o]);
      }
      out[j] = static_cast<T>(acc * scale);
    } else {
      T m = neg_inf<T>();
      for (int64_t i = 0; i < r.rcount; ++i) {
        int64_t o, u2;
        unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, u2);
        m = max_nan(m, x[base + o]);
      }
      if (op == Red::max) {
        out[j] = m;
      } else {
        const T mm = isfinite(m) ? m : T(0);
        T acc = 0;
        for (int64_t i = 0; i < r.rcount; ++i) {
          int64_t o, u2;
          unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, u2);
          acc += exp(x[base + o] - mm);
        }
        out[j] = mm + log(acc);
      }
    }
  }
}

// One block per output (large groups), shared-memory tree reduction.
template <class T>
__global__ void reduce_block(Red op, T *out, const T *x, RedGeo r, double scale) {
  __shared__ double sh[kThreads];
  const int64_t j = blockIdx.x;
  int64_t base, unused;
  unravel(j, r.kr, r.kshape, r.kst, r.kcs, base, unused);
  auto combine_max = [](double a, double b) {
    return isnan(a) ? a : isnan(b) ? b : (b > a ? b : a);
  };
  double v = op == Red::sum ? 0.0 : -INFINITY;
  for (int64_t i = threadIdx.x; i < r.rcount; i += blockDim.x) {
    int64_t o, u2;
    unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, u2);
    const double xv = static_cast<double>(x[base + o]);
    v = op == Red::sum ? v + xv : combine_max(v, xv);
  }
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      sh[threadIdx.x] = op == Red::sum ? sh[threadIdx.x] + sh[threadIdx.x + w]
                                       : combine_max(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  const double total = sh[0];
  if (op != Red::logsumexp) {
    if (threadIdx.x == 0) out[j] = static_cast<T>(op == Red::sum ? total * scale : total);
    return;
  }
  // The max is computed in T's precision, as on the CPU.
  const T m = static_cast<T>(total);
  const T mm = isfinite(m) ? m : T(0);
  __syncthreads();
  double s = 0;
  for (int64_t i = threadIdx.x; i < r.rcount; i += blockDim.x) {
    int64_t o, u2;
    unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, u2);
    s += static_cast<double>(exp(x[base + o] - mm));
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[j] = mm + log(static_cast<T>(sh[0]));
}

template <class T>
__global__ void max_backward_kernel(T *out, const T *x, const T *m, const T *g, int64_t on,
                                    RedGeo r) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < on;
       j += int64_t(blockDim.x) * gridDim.x) {
    int64_t base, cbase;
    unravel(j, r.kr, r.kshape, r.kst, r.kcs, base, cbase);
    for (int64_t i = 0; i < r.rcount; ++i) {
      int64_t o, co;
      unravel(i, r.rr, r.rshape, r.rst, r.rcs, o, co);
      if (x[base + o] == m[j]) {
        out[cbase + co] = g[j];
        break;
      }
    }
  }
}

template <class T>
__global__ void dot_kernel(T *out, const T *x, int64_t ix, const T *y, int64_t iy, int64_t n) {
  __shared__ double sh[kThreads];
  double v = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    v += static_cast<double>(x[i * ix]) * static_cast<double>(y[i * iy]);
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<T>(sh[0]);
}

template <class T>
__global__ void softmax_kernel(bool lg, T *out, const T *x, int64_t outer, int64_t len,
                               int64_t inner) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < outer * inner;
       r += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = r / inner, i = r % inner;
    const T *row = x + o * len * inner + i;
    T *orow = out + o * len * inner + i;
    T m = neg_inf<T>();
    for (int64_t j = 0; j < len; ++j) m = row[j * inner] > m ? row[j * inner] : m;
    T s = 0;
    for (int64_t j = 0; j < len; ++j) s += exp(row[j * inner] - m);
    if (lg) {
      const T ls = log(s) + m;
      for (int64_t j = 0; j < len; ++j) orow[j * inner] = row[j * inner] - ls;
    } else {
      for (int64_t j = 0; j < len; ++j) orow[j * inner] = exp(row[j * inner] - m) / s;
    }
  }
}

template <class T>
__global__ void im2col_kernel(Conv d, const T *x, T *col) {
  const int64_t n = d.C * d.KH * d.KW * d.OH * d.OW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ow = i % d.OW, oh = (i / d.OW) % d.OH, r = i / (d.OW * d.OH);
    const int64_t kw = r % d.KW, kh = (r / d.KW) % d.KH, c = r / (d.KW * d.KH);
    const int64_t ih = oh * d.stride - d.pad + kh, iw = ow * d.stride - d.pad + kw;
    col[i] = (ih >= 0 && ih < d.H && iw >= 0 && iw < d.W) ? x[(c * d.H + ih) * d.W + iw] : T(0);
  }
}

// Each input element gathers the columns that read it (no atomics).
template <class T>
__global__ void col2im_kernel(Conv d, const T *col, T *x) {
  const int64_t n = d.C * d.H * d.W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t iw = i % d.W, ih = (i / d.W) % d.H, c = i / (d.W * d.H);
    T acc = 0;
    for (int64_t kh = 0; kh < d.KH; ++kh) {
      const int64_t t = ih + d.pad - kh;
      if (t < 0 || t % d.stride) continue;
      const int64_t oh = t / d.stride;
      if (oh >= d.OH) continue;
      for (int64_t kw = 0; kw < d.KW; ++kw) {
        const int64_t u = iw + d.pad - kw;
        if (u < 0 || u % d.stride) continue;
        const int64_t ow = u / d.stride;
        if (ow >= d.OW) continue;
        acc += col[(((c * d.KH + kh) * d.KW + kw) * d.OH + oh) * d.OW + ow];
      }
    }
    x[i] += acc;
  }
}

template <class T>
__global__ void pool_kernel(bool is_max, T *out, const T *x, int64_t NC, int64_t H, int64_t W,
                            int64_t OH, int64_t OW, int64_t k, int64_t s) {
  const int64_t n = NC * OH * OW;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n;
       o += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, nc = o / (OW * OH);
    const int64_t base = nc * H * W + oh * s * W + ow * s;
    T m = neg_inf<T>(), sum = 0;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const T v = x[base + i * W + j];
        m = v > m ? v : m;
        sum += v;
      }
    out[o] = is_max ? m : sum / static_cast<T>(k * k);
  }
}

template <class T>
__global__ void pool_backward_kernel(bool is_max, T *out, const T *g, const T *x, int64_t NC,
                                     int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t k,
                                     int64_t s) {
  const int64_t n = NC * OH * OW;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n;
       o += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, nc = o / (OW * OH);
    const int64_t base = nc * H * W + oh * s * W + ow * s;
    if (is_max) {
      int64_t best = base;
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j)
          if (x[base + i * W + j] > x[best]) best = base + i * W + j;
      atomicAdd(out + best, g[o]);
    } else {
      const T v = g[o] / static_cast<T>(k * k);
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) atomicAdd(out + base + i * W + j, v);
    }
  }
}

__device__ int g_bad = 0;
__device__ long long g_bad_index = 0, g_bad_bound = 0;

__device__ inline bool in_range(int64_t v, int64_t n) {
  if (v >= 0 && v < n) return true;
  if (atomicExch(&g_bad, 1) == 0) {
    g_bad_index = v;
    g_bad_bound = n;
  }
  return false;
}

template <class T, class I>
__global__ void index_select_kernel(T *out, const T *x, const I *idx, int64_t outer, int64_t D,
                                    int64_t inner, int64_t n, bool backward) {
  const int64_t total = outer * n * inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = e % inner, j = (e / inner) % n, o = e / (inner * n);
    const int64_t v = static_cast<int64_t>(idx[j]);
    if (!in_range(v, D)) continue;
    if (backward)
      atomicAdd(out + (o * D + v) * inner + i, x[e]);  // x: the gradient (select-shaped)
    else
      out[e] = x[(o * D + v) * inner + i];
  }
}

template <class T, class I>
__global__ void gather_along_kernel(T *dst, const T *src, const I *idx, int64_t n, Geo g,
                                    int64_t sdim, int64_t D, int mode) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(blockDim.x) * gridDim.x) {
    int64_t ioff, toff;
    offsets2(e, g, ioff, toff);
    const int64_t v = static_cast<int64_t>(idx[ioff]);
    if (!in_range(v, D)) continue;
    const int64_t t = toff + v * sdim;
    if (mode == 0)
      dst[e] = src[t];
    else
      atomicAdd(dst + t, src[e]);
  }
}

struct NdGeo {
  int64_t shape[kRank], st[kRank];
};

template <class T, class I>
__global__ void gather_nd_kernel(T *dst, const T *src, const I *idx, int64_t m, int k,
                                 int64_t inner, NdGeo x, bool backward) {
  const int64_t total = m * inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = e / inner, i = e % inner;
    int64_t off = 0;
    bool ok = true;
    for (int j = 0; j < k; ++j) {
      const int64_t v = static_cast<int64_t>(idx[r * k + j]);
      if (!in_range(v, x.shape[j])) {
        ok = false;
        break;
      }
      off += v * x.st[j];
    }
    if (!ok) continue;
    if (backward)
      atomicAdd(dst + off + i, src[e]);
    else
      dst[e] = src[off + i];
  }
}

template <class F>
void fl(bool f64, F f) {
  if (f64)
    f(double{});
  else
    f(float{});
}
template <class F>
void fi(bool f64, bool i64, F f) {
  fl(f64, [&](auto t) {
    if (i64)
      f(t, int64_t{});
    else
      f(t, int32_t{});
  });
}

}  // namespace

void reduce(Red op, bool f64, void *out, const void *x, int64_t on, const Geo &g, uint32_t mask,
            double scale) {
  if (on == 0) return;
  const RedGeo r = make_red(g, mask);
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    if (r.rcount >= 64)
      reduce_block<T><<<static_cast<unsigned>(on), kThreads, 0, s()>>>(
          op, static_cast<T *>(out), static_cast<const T *>(x), r, scale);
    else
      reduce_thread<T><<<grid(on), kThreads, 0, s()>>>(op, static_cast<T *>(out),
                                                       static_cast<const T *>(x), on, r, scale);
  });
  check_launch("reduce");
}

void max_backward(bool f64, void *out, const void *x, const void *m, const void *grad, const Geo &g,
                  uint32_t mask) {
  const RedGeo r = make_red(g, mask);
  int64_t xn = 1, on = 1;
  for (int d = 0; d < g.rank; ++d) xn *= g.shape[d];
  for (int d = 0; d < r.kr; ++d) on *= r.kshape[d];
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    cudaMemsetAsync(out, 0, static_cast<size_t>(xn) * sizeof(T), s());
    if (on)
      max_backward_kernel<T><<<grid(on), kThreads, 0, s()>>>(
          static_cast<T *>(out), static_cast<const T *>(x), static_cast<const T *>(m),
          static_cast<const T *>(grad), on, r);
  });
  check_launch("max_backward");
}

void dot(bool f64, void *out, const void *x, int64_t ix, const void *y, int64_t iy, int64_t n) {
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    dot_kernel<T><<<1, kThreads, 0, s()>>>(static_cast<T *>(out), static_cast<const T *>(x), ix,
                                           static_cast<const T *>(y), iy, n);
  });
  check_launch("dot");
}

void softmax(bool f64, bool lg, void *out, const void *x, int64_t outer, int64_t len,
             int64_t inner) {
  if (outer * inner == 0) return;
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<grid(outer * inner), kThreads, 0, s()>>>(
        lg, static_cast<T *>(out), static_cast<const T *>(x), outer, len, inner);
  });
  check_launch("softmax");
}

void im2col(bool f64, const Conv &d, const void *x, void *col) {
  const int64_t n = d.C * d.KH * d.KW * d.OH * d.OW;
  if (!n) return;
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T>
        <<<grid(n), kThreads, 0, s()>>>(d, static_cast<const T *>(x), static_cast<T *>(col));
  });
  check_launch("im2col");
}

void col2im_add(bool f64, const Conv &d, const void *col, void *x) {
  const int64_t n = d.C * d.H * d.W;
  if (!n) return;
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T>
        <<<grid(n), kThreads, 0, s()>>>(d, static_cast<const T *>(col), static_cast<T *>(x));
  });
  check_launch("col2im");
}

void max_pool(bool f64, void *out, const void *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
              int64_t OW, int64_t k, int64_t st) {
  const int64_t n = NC * OH * OW;
  if (!n) return;
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    pool_kernel<T><<<grid(n), kThreads, 0, s()>>>(
        true, static_cast<T *>(out), static_cast<const T *>(x), NC, H, W, OH, OW, k, st);
  });
  check_launch("max_pool2d");
}

void avg_pool(bool f64, void *out, const void *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
              int64_t OW, int64_t k, int64_t st) {
  const int64_t n = NC * OH * OW;
  if (!n) return;
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    pool_kernel<T><<<grid(n), kThreads, 0, s()>>>(
        false, static_cast<T *>(out), static_cast<const T *>(x), NC, H, W, OH, OW, k, st);
  });
  check_launch("avg_pool2d");
}

void max_pool_backward(bool f64, void *out, const void *grad, const void *x, int64_t NC, int64_t H,
                       int64_t W, int64_t OH, int64_t OW, int64_t k, int64_t st) {
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    cudaMemsetAsync(out, 0, static_cast<size_t>(NC * H * W) * sizeof(T), s());
    const int64_t n = NC * OH * OW;
    if (n)
      pool_backward_kernel<T>
          <<<grid(n), kThreads, 0, s()>>>(true, static_cast<T *>(out), static_cast<const T *>(grad),
                                          static_cast<const T *>(x), NC, H, W, OH, OW, k, st);
  });
  check_launch("max_pool2d_backward");
}

void avg_pool_backward(bool f64, void *out, const void *grad, int64_t NC, int64_t H, int64_t W,
                       int64_t OH, int64_t OW, int64_t k, int64_t st) {
  fl(f64, [&](auto tag) {
    using T = decltype(tag);
    cudaMemsetAsync(out, 0, static_cast<size_t>(NC * H * W) * sizeof(T), s());
    const int64_t n = NC * OH * OW;
    if (n)
      pool_backward_kernel<T><<<grid(n), kThreads, 0, s()>>>(false, static_cast<T *>(out),
                                                             static_cast<const T *>(grad), nullptr,
                                                             NC, H, W, OH, OW, k, st);
  });
  check_launch("avg_pool2d_backward");
}

void index_select(bool f64, bool i64, void *out, const void *x, const void *idx, int64_t outer,
                  int64_t D, int64_t inner, int64_t n, bool backward) {
  fi(f64, i64, [&](auto ft, auto it) {
    using T = decltype(ft);
    using I = decltype(it);
    if (backward) cudaMemsetAsync(out, 0, static_cast<size_t>(outer * D * inner) * sizeof(T), s());
    const int64_t total = outer * n * inner;
    if (total)
      index_select_kernel<T, I><<<grid(total), kThreads, 0, s()>>>(
          static_cast<T *>(out), static_cast<const T *>(x), static_cast<const I *>(idx), outer, D,
          inner, n, backward);
  });
  check_launch("index_select");
}

void gather_along(bool f64, bool i64, void *dst, const void *src, const void *idx, int64_t n,
                  const Geo &g, int64_t sdim, int64_t D, int mode) {
  if (!n) return;
  fi(f64, i64, [&](auto ft, auto it) {
    using T = decltype(ft);
    using I = decltype(it);
    gather_along_kernel<T, I>
        <<<grid(n), kThreads, 0, s()>>>(static_cast<T *>(dst), static_cast<const T *>(src),
                                        static_cast<const I *>(idx), n, g, sdim, D, mode);
  });
  check_launch("gather");
}

void gather_nd(bool f64, bool i64, void *dst, const void *src, const void *idx, int64_t m, int k,
               int64_t inner, const int64_t *xshape, const int64_t *xstrides, bool backward) {
  NdGeo x{};
  for (int j = 0; j < k && j < kRank; ++j) {
    x.shape[j] = xshape[j];
    x.st[j] = xstrides[j];
  }
  const int64_t total = m * inner;
  if (!total) return;
  fi(f64, i64, [&](auto ft, auto it) {
    using T = decltype(ft);
    using I = decltype(it);
    gather_nd_kernel<T, I>
        <<<grid(total), kThreads, 0, s()>>>(static_cast<T *>(dst), static_cast<const T *>(src),
                                            static_cast<const I *>(idx), m, k, inner, x, backward);
  });
  check_launch("gather_nd");
}

bool index_error(int64_t *index, int64_t *bound) {
  int bad = 0;
  cudaStreamSynchronize(s());
  cudaMemcpyFromSymbol(&bad, g_bad, sizeof bad);
  if (!bad) return false;
  long long i = 0, b = 0;
  cudaMemcpyFromSymbol(&i, g_bad_index, sizeof i);
  cudaMemcpyFromSymbol(&b, g_bad_bound, sizeof b);
  const int zero = 0;
  cudaMemcpyToSymbol(g_bad, &zero, sizeof zero);
  *index = i;
  *bound = b;
  return true;
}

}  // namespace adcore::cuda::k
