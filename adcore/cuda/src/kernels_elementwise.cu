// CUDA kernels: elementwise ops, copies, casts, fills and the optimizer updates (launch.h).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernel_util.cuh"

namespace adcore::cuda::k {

namespace {

// The op table's CUDA expressions (adcore/op_table.h): x, y of type T.
#define ADCORE_CUDA_BINARY_CASE(n, backward, inplace, s0, s1, cpu_expr, cuda_expr) \
  case Bin::n:                                                                     \
    return cuda_expr;
#define ADCORE_CUDA_UNARY_CASE(n, backward, s0_, cpu_expr, cuda_expr) \
  case Un::n:                                                         \
    return cuda_expr;

template <class T>
struct BinOp {
  Bin op;
  __device__ T operator()(T x, T y) const {
    switch (op) { ADCORE_OP_TABLE(ADCORE_CUDA_SKIP, ADCORE_CUDA_SKIP, ADCORE_CUDA_BINARY_CASE) }
    return T(0);
  }
};

template <class T>
__device__ T un(Un op, T x, T s0, T s1, double p) {
  switch (op) {
    ADCORE_OP_TABLE(ADCORE_CUDA_SKIP, ADCORE_CUDA_UNARY_CASE, ADCORE_CUDA_SKIP)
    case Un::affine:
      return s0 * x + s1;
    case Un::powf:
      // Same special cases as the CPU kernel (exact small integer powers).
      if (p == 2.0) return x * x;
      if (p == 3.0) return x * x * x;
      if (p == 4.0) return (x * x) * (x * x);
      if (p == 1.0) return x;
      if (p == 0.0) return T(1);
      return pow(x, s0);
  }
  return T(0);
}
#undef ADCORE_CUDA_BINARY_CASE
#undef ADCORE_CUDA_UNARY_CASE

template <class T>
__global__ void binary_kernel(Bin op, T *out, const T *a, const T *b, int64_t n, Geo g) {
  BinOp<T> f{op};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t oa, ob;
    offsets2(i, g, oa, ob);
    out[i] = f(a[oa], b[ob]);
  }
}

template <class T>
__global__ void unary_kernel(Un op, T *out, const T *x, int64_t n, Geo g, T s0, T s1, double p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = un<T>(op, x[offset(i, g, g.a)], s0, s1, p);
}

template <class E>
__global__ void copy_kernel(E *out, const E *x, int64_t n, Geo g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t oa, ob;
    offsets2(i, g, oa, ob);
    out[ob] = x[oa];
  }
}

template <class S, class D>
__global__ void cast_kernel(D *out, const S *x, int64_t n, Geo g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = static_cast<D>(x[offset(i, g, g.a)]);
}

template <class T>
__global__ void acc_kernel(T *out, const T *x, int64_t n, Geo g, bool assign) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const T v = x[offset(i, g, g.a)];
    out[i] = assign ? v : out[i] + v;
  }
}

template <class T>
__global__ void fill_kernel(T *out, int64_t n, T v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = v;
}

template <class T>
__global__ void sgd_kernel(T *p, const T *grad, int64_t n, Geo g, T lr) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    p[i] -= lr * grad[offset(i, g, g.a)];
}

template <class T>
__global__ void adam_kernel(T *p, const T *g, T *m, T *v, int64_t n, T lr, T b1, T b2, T eps, T c1,
                            T c2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] * c1) / (sqrt(v[i] * c2) + eps);
  }
}

template <class F>
void dispatch_any(int dt, F f) {
  switch (dt) {
    case 1:
      f(float{});
      break;
    case 2:
      f(double{});
      break;
    case 3:
      f(int32_t{});
      break;
    case 4:
      f(int64_t{});
      break;
    case 5:
      f(bool{});
      break;
    default:
      throw std::invalid_argument("cuda cast: bad dtype " + std::to_string(dt));
  }
}

}  // namespace

void binary(Bin op, bool f64, void *out, const void *a, const void *b, int64_t n, const Geo &g) {
  if (n == 0) return;
  if (f64)
    binary_kernel<<<grid(n), kThreads, 0, s()>>>(op, static_cast<double *>(out),
                                                 static_cast<const double *>(a),
                                                 static_cast<const double *>(b), n, g);
  else
    binary_kernel<<<grid(n), kThreads, 0, s()>>>(op, static_cast<float *>(out),
                                                 static_cast<const float *>(a),
                                                 static_cast<const float *>(b), n, g);
  check_launch("binary");
}

void unary(Un op, bool f64, void *out, const void *x, int64_t n, const Geo &g, double s0,
           double s1) {
  if (n == 0) return;
  if (f64)
    unary_kernel<<<grid(n), kThreads, 0, s()>>>(op, static_cast<double *>(out),
                                                static_cast<const double *>(x), n, g, s0, s1, s0);
  else
    unary_kernel<<<grid(n), kThreads, 0, s()>>>(op, static_cast<float *>(out),
                                                static_cast<const float *>(x), n, g,
                                                static_cast<float>(s0), static_cast<float>(s1), s0);
  check_launch("unary");
}

void copy(int elsize, void *out, const void *x, int64_t n, const Geo &g) {
  if (n == 0) return;
  switch (elsize) {
    case 1:
      copy_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<uint8_t *>(out),
                                                 static_cast<const uint8_t *>(x), n, g);
      break;
    case 4:
      copy_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<uint32_t *>(out),
                                                 static_cast<const uint32_t *>(x), n, g);
      break;
    default:
      copy_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<uint64_t *>(out),
                                                 static_cast<const uint64_t *>(x), n, g);
      break;
  }
  check_launch("copy");
}

void cast(int src, int dst, void *out, const void *x, int64_t n, const Geo &g) {
  if (n == 0) return;
  dispatch_any(src, [&](auto st) {
    using S = decltype(st);
    dispatch_any(dst, [&](auto dt) {
      using D = decltype(dt);
      cast_kernel<S, D>
          <<<grid(n), kThreads, 0, s()>>>(static_cast<D *>(out), static_cast<const S *>(x), n, g);
    });
  });
  check_launch("cast");
}

void accumulate(bool f64, void *out, const void *x, int64_t n, const Geo &g, bool assign) {
  if (n == 0) return;
  if (f64)
    acc_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<double *>(out),
                                              static_cast<const double *>(x), n, g, assign);
  else
    acc_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<float *>(out),
                                              static_cast<const float *>(x), n, g, assign);
  check_launch("accumulate");
}

void fill(int dtype, void *out, int64_t n, double value) {
  if (n == 0) return;
  dispatch_any(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<T *>(out), n, static_cast<T>(value));
  });
  check_launch("fill");
}

void sgd(bool f64, void *p, const void *grad, int64_t n, const Geo &g, double lr) {
  if (n == 0) return;
  if (f64)
    sgd_kernel<<<grid(n), kThreads, 0, s()>>>(static_cast<double *>(p),
                                              static_cast<const double *>(grad), n, g, lr);
  else
    sgd_kernel<<<grid(n), kThreads, 0, s()>>>(
        static_cast<float *>(p), static_cast<const float *>(grad), n, g, static_cast<float>(lr));
  check_launch("sgd_update");
}

void adam(bool f64, void *p, const void *grad, void *m, void *v, int64_t n, double lr, double b1,
          double b2, double eps, int64_t t) {
  if (n == 0) return;
  const double c1 = 1.0 / (1.0 - std::pow(b1, static_cast<double>(t)));
  const double c2 = 1.0 / (1.0 - std::pow(b2, static_cast<double>(t)));
  auto go = [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<<<grid(n), kThreads, 0, s()>>>(
        static_cast<T *>(p), static_cast<const T *>(grad), static_cast<T *>(m), static_cast<T *>(v),
        n, static_cast<T>(lr), static_cast<T>(b1), static_cast<T>(b2), static_cast<T>(eps),
        static_cast<T>(c1), static_cast<T>(c2));
  };
  if (f64)
    go(double{});
  else
    go(float{});
  check_launch("adam_update");
}

}  // namespace adcore::cuda::k
