// The boundary between the host side of the CUDA device (ops_cuda.cpp, plain C++ that reads
// adcore tensors) and the CUDA kernels (*.cu, which see only these POD descriptors). Every
// launcher runs on the device's stream (stream()) and checks the launch.
#pragma once
#include <cstddef>
#include <cstdint>

#include "adcore/op_table.h"

namespace adcore::cuda::k {

inline constexpr int kRank = 6;  // adcore::kMaxRank

// An iteration space (shape, row-major) and up to three stride sets over it (in elements).
struct Geo {
  int rank = 0;
  int64_t shape[kRank] = {};
  int64_t a[kRank] = {};
  int64_t b[kRank] = {};
  int64_t c[kRank] = {};
};

// The elementwise functions: the op table's BINARY and UNARY rows (adcore/op_table.h), whose CUDA
// expressions kernels_elementwise.cu compiles; then the unary functions of the ops with
// attributes (affine: s0 * x + s1; powf: x to the power s0).
#define ADCORE_CUDA_SKIP(...)
#define ADCORE_CUDA_ENUMERATOR(n, ...) n,
enum class Bin : int {
  ADCORE_OP_TABLE(ADCORE_CUDA_SKIP, ADCORE_CUDA_SKIP, ADCORE_CUDA_ENUMERATOR)
};
enum class Un : int {
  ADCORE_OP_TABLE(ADCORE_CUDA_SKIP, ADCORE_CUDA_ENUMERATOR, ADCORE_CUDA_SKIP) affine,
  powf
};
#undef ADCORE_CUDA_ENUMERATOR
enum class Red : int { sum, max, logsumexp };
// Type codes: adcore::DType values (1 f32, 2 f64, 3 i32, 4 i64, 5 bool).

void *stream();  // cudaStream_t of the device (defined in device_cuda.cpp)

// out[i] = f(a[geo.a], b[geo.b]) over geo.shape; out contiguous. f64: double else float.
void binary(Bin op, bool f64, void *out, const void *a, const void *b, int64_t n, const Geo &g);
// out[i] = f(x[geo.a]); s0, s1: affine alpha/beta or the exponent.
void unary(Un op, bool f64, void *out, const void *x, int64_t n, const Geo &g, double s0,
           double s1);
// out[geo.b] = x[geo.a] for element size 1/4/8 (strided copy, scatter into a region).
void copy(int elsize, void *out, const void *x, int64_t n, const Geo &g);
// out[i] = (D) x[geo.a], any dtypes.
void cast(int src, int dst, void *out, const void *x, int64_t n, const Geo &g);
// out[i] (+)= x[geo.a] (assign: =).
void accumulate(bool f64, void *out, const void *x, int64_t n, const Geo &g, bool assign);
void fill(int dtype, void *out, int64_t n, double value);
// p[i] -= lr * g[geo.a]
void sgd(bool f64, void *p, const void *grad, int64_t n, const Geo &g, double lr);
void adam(bool f64, void *p, const void *grad, void *m, void *v, int64_t n, double lr, double b1,
          double b2, double eps, int64_t t);

// Reductions. in: shape and strides of x (geo.shape, geo.a); `mask` the reduced axes; out
// contiguous keep-dim of `on` elements. scale multiplies the result (mean).
void reduce(Red op, bool f64, void *out, const void *x, int64_t on, const Geo &g, uint32_t mask,
            double scale);
// max backward: out (x-shaped, contiguous) gets g[j] at the first x == m[j] of each group.
void max_backward(bool f64, void *out, const void *x, const void *m, const void *grad, const Geo &g,
                  uint32_t mask);
// sum_i x[i*ix] * y[i*iy] into out[0]
void dot(bool f64, void *out, const void *x, int64_t ix, const void *y, int64_t iy, int64_t n);
// softmax / log_softmax over rows (outer, len, inner), contiguous.
void softmax(bool f64, bool log, void *out, const void *x, int64_t outer, int64_t len,
             int64_t inner);

struct Conv {
  int64_t N, C, H, W, O, KH, KW, OH, OW, stride, pad;
};
void im2col(bool f64, const Conv &d, const void *x, void *col);      // one image
void col2im_add(bool f64, const Conv &d, const void *col, void *x);  // one image
// Pooling over (N*C) planes; kernel k, stride s.
void max_pool(bool f64, void *out, const void *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
              int64_t OW, int64_t k, int64_t s);
void max_pool_backward(bool f64, void *out, const void *grad, const void *x, int64_t NC, int64_t H,
                       int64_t W, int64_t OH, int64_t OW, int64_t k, int64_t s);
void avg_pool(bool f64, void *out, const void *x, int64_t NC, int64_t H, int64_t W, int64_t OH,
              int64_t OW, int64_t k, int64_t s);
void avg_pool_backward(bool f64, void *out, const void *grad, int64_t NC, int64_t H, int64_t W,
                       int64_t OH, int64_t OW, int64_t k, int64_t s);

// Index ops (i64: indices are int64 else int32). Out-of-range indices set the error flag that
// index_error() reads (and clears) after a synchronisation.
void index_select(bool f64, bool i64, void *out, const void *x, const void *idx, int64_t outer,
                  int64_t D, int64_t inner, int64_t n, bool backward);
// gather/gather_backward/scatter_add along `dim` of a contiguous target of shape ts: for each
// element oi of idx (shape g.shape, strides g.a), target offset = (contiguous offset with dim
// zeroed, g.b) + idx * sdim. mode 0: out[oi] = t[off]; 1: t[off] += src[oi].
void gather_along(bool f64, bool i64, void *dst, const void *src, const void *idx, int64_t n,
                  const Geo &g, int64_t sdim, int64_t D, int mode);
void gather_nd(bool f64, bool i64, void *dst, const void *src, const void *idx, int64_t m, int k,
               int64_t inner, const int64_t *xshape, const int64_t *xstrides, bool backward);
// Returns the first out-of-range index seen since the last call (and its bound), or false.
bool index_error(int64_t *index, int64_t *bound);

}  // namespace adcore::cuda::k
