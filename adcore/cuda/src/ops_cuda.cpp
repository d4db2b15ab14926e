// The CUDA column of the op registry: each kernel reads the adcore tensors' shapes and strides
// (the same layouts the CPU kernels get) and launches the device code in launch.h, or cuBLAS
// for matrix products. register_kernels() installs them; the table at the bottom is generated
// from the op table, and a static_assert checks it against the CPU column.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "cuda_internal.h"
#include "internal.h"  // adcore/src: bstrides, KernelArgs helpers
#include "launch.h"

namespace adcore::detail {
bool mat_layout(const Shape &sh, const Shape &st, int d0, int d1, bool &trans, int64_t &ld);
}

namespace adcore::cuda::detail {
namespace {

using adcore::detail::bstrides;
using adcore::detail::mat_layout;

bool f64(const Tensor &t) {
  if (t.dtype() == DType::F64) return true;
  if (t.dtype() == DType::F32) return false;
  throw std::invalid_argument(std::string("expected a floating dtype, got ") +
                              dtype_name(t.dtype()));
}
bool i64(const Tensor &idx) {
  if (idx.dtype() == DType::I64) return true;
  if (idx.dtype() == DType::I32) return false;
  throw std::invalid_argument(std::string("expected an index dtype, got ") +
                              dtype_name(idx.dtype()));
}

k::Geo geo(const Shape &shape) {
  k::Geo g;
  g.rank = shape.rank;
  for (int d = 0; d < shape.rank; ++d) g.shape[d] = shape.d[d];
  return g;
}
void put(int64_t *dst, const Shape &st) {
  for (int d = 0; d < st.rank; ++d) dst[d] = st.d[d];
}
char *at(const Tensor &t, int64_t elems) {
  return static_cast<char *>(t.raw()) + elems * static_cast<int64_t>(dtype_size(t.dtype()));
}

void check_indices() {
  int64_t i = 0, n = 0;
  if (k::index_error(&i, &n))
    throw std::out_of_range("index " + std::to_string(i) + " out of range [0, " +
                            std::to_string(n) + ")");
}

// ---- elementwise ----
template <k::Bin op>
void binary(const KernelArgs &a) {
  Tensor &o = *a.out;
  k::Geo g = geo(o.shape());
  put(g.a, bstrides(a.in[0], o.shape()));
  put(g.b, bstrides(a.in[1], o.shape()));
  k::binary(op, f64(o), o.raw(), a.in[0].raw(), a.in[1].raw(), o.numel(), g);
}

template <k::Un op>
void unary(const KernelArgs &a) {
  Tensor &o = *a.out;
  k::Geo g = geo(o.shape());
  put(g.a, bstrides(a.in[0], o.shape()));
  k::unary(op, f64(o), o.raw(), a.in[0].raw(), o.numel(), g, a.attrs->s[0], a.attrs->s[1]);
}

constexpr KernelFn k_affine = unary<k::Un::affine>;
constexpr KernelFn k_pow_scalar = unary<k::Un::powf>;

void k_copy(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  Tensor &o = *a.out;
  if (x.is_contiguous()) {
    check(cudaMemcpyAsync(o.raw(), x.raw(), o.nbytes(), cudaMemcpyDeviceToDevice, stream()),
          "copy");
    return;
  }
  k::Geo g = geo(o.shape());
  put(g.a, x.strides());
  put(g.b, contiguous_strides(o.shape()));
  k::copy(static_cast<int>(dtype_size(x.dtype())), o.raw(), x.raw(), o.numel(), g);
}

constexpr KernelFn k_contiguous = k_copy;

void k_cast(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  Tensor &o = *a.out;
  k::Geo g = geo(o.shape());
  put(g.a, x.strides());
  k::cast(static_cast<int>(x.dtype()), static_cast<int>(o.dtype()), o.raw(), x.raw(), o.numel(), g);
}

void k_add_n(const KernelArgs &a) {
  Tensor &o = *a.out;
  for (int i = 0; i < a.nin; ++i) {
    k::Geo g = geo(o.shape());
    put(g.a, bstrides(a.in[i], o.shape()));
    k::accumulate(f64(o), o.raw(), a.in[i].raw(), o.numel(), g, i == 0);
  }
}

void k_add_inplace(const KernelArgs &a) {
  Tensor &o = *a.out;
  k::Geo g = geo(o.shape());
  put(g.a, bstrides(a.in[1], o.shape()));
  k::accumulate(f64(o), o.raw(), a.in[1].raw(), o.numel(), g, false);
}

// ---- reductions ----
template <k::Red op, bool kMean = false>
void reduce(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  k::Geo g = geo(x.shape());
  put(g.a, x.strides());
  const auto mask = static_cast<uint32_t>(a.attrs->i[0]);
  double scale = 1;
  if (kMean) {
    int64_t c = 1;
    for (int d = 0; d < x.rank(); ++d)
      if (mask & (1u << d)) c *= x.shape()[d];
    scale = 1.0 / static_cast<double>(c);
  }
  k::reduce(op, f64(*a.out), a.out->raw(), x.raw(), a.out->numel(), g, mask, scale);
}

constexpr KernelFn k_sum = reduce<k::Red::sum>;
constexpr KernelFn k_mean = reduce<k::Red::sum, true>;
constexpr KernelFn k_max = reduce<k::Red::max>;
constexpr KernelFn k_logsumexp = reduce<k::Red::logsumexp>;

void k_max_backward(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  k::Geo g = geo(x.shape());
  put(g.a, x.strides());
  k::max_backward(f64(*a.out), a.out->raw(), x.raw(), a.in[1].raw(), a.in[2].raw(), g,
                  static_cast<uint32_t>(a.attrs->i[0]));
}

// ---- matrix products (cuBLAS, row-major through the transposed column-major product) ----
// C (m x n, row-major, ldc) = op(A) (m x k) * op(B) (k x n), A/B row-major with lda/ldb.
void gemm(bool dbl, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const void *A, int64_t lda,
          const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cublasHandle_t h = blas();
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(kk);
  if (dbl) {
    const double one = 1.0;
    check_blas(
        cublasDgemm(h, ob, oa, N, M, K, &one, static_cast<const double *>(B), static_cast<int>(ldb),
                    static_cast<const double *>(A), static_cast<int>(lda), &beta,
                    static_cast<double *>(C), static_cast<int>(ldc)),
        "dgemm");
  } else {
    const float one = 1.0f, b = static_cast<float>(beta);
    check_blas(
        cublasSgemm(h, ob, oa, N, M, K, &one, static_cast<const float *>(B), static_cast<int>(ldb),
                    static_cast<const float *>(A), static_cast<int>(lda), &b,
                    static_cast<float *>(C), static_cast<int>(ldc)),
        "sgemm");
  }
}

// A vector with element stride inc as a row-major (len x 1) matrix: ld = inc.
int64_t vinc(const Tensor &v) { return v.numel() == 1 ? 1 : v.strides()[0]; }

void k_matmul(const KernelArgs &args) {
  const Tensor &a = args.in[0], &b = args.in[1];
  Tensor &c = *args.out;
  const bool dbl = f64(c);
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  if (a.rank() == 2 && b.rank() == 2) {
    mat_layout(a.shape(), a.strides(), 0, 1, ta, lda);
    mat_layout(b.shape(), b.strides(), 0, 1, tb, ldb);
    gemm(dbl, ta, tb, a.shape()[0], b.shape()[1], a.shape()[1], a.raw(), lda, b.raw(), ldb, 0.0,
         c.raw(), b.shape()[1]);
  } else if (a.rank() == 2) {  // (m,k) @ (k): B is (k x 1) with ld = inc
    mat_layout(a.shape(), a.strides(), 0, 1, ta, lda);
    const int64_t inc = vinc(b);  // > 0: the op layer makes a broadcast vector contiguous
    gemm(dbl, ta, false, a.shape()[0], 1, a.shape()[1], a.raw(), lda, b.raw(), inc, 0.0, c.raw(),
         1);
  } else {  // (k) @ (k,n): A is (1 x k) with ld = k (one row)
    mat_layout(b.shape(), b.strides(), 0, 1, tb, ldb);
    const int64_t inc = vinc(a);
    if (inc != 1) {  // a strided vector: a (k x 1) matrix transposed
      gemm(dbl, true, tb, 1, b.shape()[1], b.shape()[0], a.raw(), inc, b.raw(), ldb, 0.0, c.raw(),
           b.shape()[1]);
    } else {
      gemm(dbl, false, tb, 1, b.shape()[1], b.shape()[0], a.raw(),
           std::max<int64_t>(1, b.shape()[0]), b.raw(), ldb, 0.0, c.raw(), b.shape()[1]);
    }
  }
}

void k_bmm(const KernelArgs &args) {
  const Tensor &a = args.in[0], &b = args.in[1];
  Tensor &c = *args.out;
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  mat_layout(a.shape(), a.strides(), 1, 2, ta, lda);
  mat_layout(b.shape(), b.strides(), 1, 2, tb, ldb);
  const int64_t batch = a.shape()[0], m = a.shape()[1], kk = a.shape()[2], n = b.shape()[2];
  if (batch == 0 || m == 0 || n == 0) return;
  cublasHandle_t h = blas();
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(kk);
  if (f64(c)) {
    const double one = 1.0, zero = 0.0;
    check_blas(cublasDgemmStridedBatched(
                   h, ob, oa, N, M, K, &one, static_cast<const double *>(b.raw()),
                   static_cast<int>(ldb), b.strides()[0], static_cast<const double *>(a.raw()),
                   static_cast<int>(lda), a.strides()[0], &zero, static_cast<double *>(c.raw()), N,
                   m * n, static_cast<int>(batch)),
               "dgemm batched");
  } else {
    const float one = 1.0f, zero = 0.0f;
    check_blas(cublasSgemmStridedBatched(
                   h, ob, oa, N, M, K, &one, static_cast<const float *>(b.raw()),
                   static_cast<int>(ldb), b.strides()[0], static_cast<const float *>(a.raw()),
                   static_cast<int>(lda), a.strides()[0], &zero, static_cast<float *>(c.raw()), N,
                   m * n, static_cast<int>(batch)),
               "sgemm batched");
  }
}

void k_dot(const KernelArgs &a) {
  const Tensor &x = a.in[0], &y = a.in[1];
  k::dot(f64(*a.out), a.out->raw(), x.raw(), vinc(x), y.raw(), vinc(y), x.numel());
}

// ---- regions ----
void copy_region(const Tensor &src, const Tensor &dst, int64_t base, const Shape &dst_strides) {
  k::Geo g = geo(src.shape());
  put(g.a, src.strides());
  put(g.b, dst_strides);
  k::copy(static_cast<int>(dtype_size(src.dtype())), at(dst, base), src.raw(), src.numel(), g);
}

void k_concat(const KernelArgs &a) {
  Tensor &o = *a.out;
  const int dim = static_cast<int>(a.attrs->i[0]);
  int64_t off = 0;
  for (int i = 0; i < a.nin; ++i) {
    copy_region(a.in[i], o, off * o.strides()[dim], o.strides());
    off += a.in[i].shape()[dim];
  }
}

void k_stack(const KernelArgs &a) {
  Tensor &o = *a.out;
  const int dim = static_cast<int>(a.attrs->i[0]);
  Shape rs;
  for (int d = 0; d < o.rank(); ++d)
    if (d != dim) rs.push_back(o.strides()[d]);
  for (int i = 0; i < a.nin; ++i) copy_region(a.in[i], o, i * o.strides()[dim], rs);
}

void k_slice_backward(const KernelArgs &a) {
  Tensor &o = *a.out;
  o.device().memset_zero(o.raw(), o.nbytes());
  const int dim = static_cast<int>(a.attrs->i[0]);
  copy_region(a.in[0], o, a.attrs->i[1] * o.strides()[dim], o.strides());
}

// ---- index ops ----
void split(const Shape &s, int dim, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s.d[d];
  for (int d = dim + 1; d < s.rank; ++d) inner *= s.d[d];
}

void k_index_select(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1];
  const int dim = static_cast<int>(a.attrs->i[0]);
  int64_t outer, inner;
  split(x.shape(), dim, outer, inner);
  k::index_select(f64(x), i64(idx), a.out->raw(), x.raw(), idx.raw(), outer, x.shape()[dim], inner,
                  idx.numel(), false);
  check_indices();
}

void k_index_select_backward(const KernelArgs &a) {
  const Tensor &g = a.in[0], &idx = a.in[1];
  Tensor &out = *a.out;
  const int dim = static_cast<int>(a.attrs->i[0]);
  int64_t outer, inner;
  split(out.shape(), dim, outer, inner);
  k::index_select(f64(g), i64(idx), out.raw(), g.raw(), idx.raw(), outer, out.shape()[dim], inner,
                  idx.numel(), true);
  check_indices();
}

// along `dim` of a contiguous target of shape ts (see kernels_index.cpp's along()).
void along(void *dst, const void *src, const Tensor &idx, const Shape &ts, int dim, bool dbl,
           int mode) {
  Shape st = contiguous_strides(ts);
  const int64_t sdim = st.d[dim];
  st.d[dim] = 0;
  k::Geo g = geo(idx.shape());
  put(g.a, idx.strides());
  put(g.b, st);
  k::gather_along(dbl, i64(idx), dst, src, idx.raw(), idx.numel(), g, sdim, ts.d[dim], mode);
  check_indices();
}

void k_gather(const KernelArgs &a) {
  const Tensor &x = a.in[0], &idx = a.in[1];
  along(a.out->raw(), x.raw(), idx, x.shape(), static_cast<int>(a.attrs->i[0]), f64(x), 0);
}

void k_gather_backward(const KernelArgs &a) {
  Tensor &out = *a.out;
  out.device().memset_zero(out.raw(), out.nbytes());
  along(out.raw(), a.in[0].raw(), a.in[1], out.shape(), static_cast<int>(a.attrs->i[0]), f64(out),
        1);
}

void k_scatter_add(const KernelArgs &a) {
  Tensor &out = *a.out;
  check(cudaMemcpyAsync(out.raw(), a.in[0].raw(), out.nbytes(), cudaMemcpyDeviceToDevice, stream()),
        "scatter_add copy");
  along(out.raw(), a.in[2].raw(), a.in[1], out.shape(), static_cast<int>(a.attrs->i[0]), f64(out),
        1);
}

void gather_nd_impl(const Tensor &idx, const Shape &xs, void *dst, const void *src, bool dbl,
                    bool backward) {
  const int kk = static_cast<int>(idx.shape()[idx.rank() - 1]);
  const int64_t m = kk ? idx.numel() / kk : 0;
  int64_t inner = 1;
  for (int d = kk; d < xs.rank; ++d) inner *= xs.d[d];
  const Shape xst = contiguous_strides(xs);
  k::gather_nd(dbl, i64(idx), dst, src, idx.raw(), m, kk, inner, xs.d, xst.d, backward);
  check_indices();
}

void k_gather_nd(const KernelArgs &a) {
  gather_nd_impl(a.in[1], a.in[0].shape(), a.out->raw(), a.in[0].raw(), f64(a.in[0]), false);
}

void k_gather_nd_backward(const KernelArgs &a) {
  Tensor &out = *a.out;
  out.device().memset_zero(out.raw(), out.nbytes());
  gather_nd_impl(a.in[1], out.shape(), out.raw(), a.in[0].raw(), f64(out), true);
}

// ---- nn ----
template <bool kLog>
void softmax(const KernelArgs &a) {
  const Tensor &x = a.in[0];
  const int axis = static_cast<int>(a.attrs->i[0]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
  k::softmax(f64(x), kLog, a.out->raw(), x.raw(), outer, x.shape()[axis], inner);
}

constexpr KernelFn k_softmax = softmax<false>;
constexpr KernelFn k_log_softmax = softmax<true>;

k::Conv conv_dims(const Shape &x, const Shape &w, const Shape &out, const Attrs &a) {
  return k::Conv{x.d[0], x.d[1],   x.d[2],   x.d[3], w.d[0], w.d[2],
                 w.d[3], out.d[2], out.d[3], a.i[0], a.i[1]};
}

void k_conv2d(const KernelArgs &a) {
  const bool dbl = f64(*a.out);
  const k::Conv d = conv_dims(a.in[0].shape(), a.in[1].shape(), a.out->shape(), *a.attrs);
  const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
  const size_t es = dtype_size(a.out->dtype());
  Scratch col(static_cast<size_t>(ckk * ohw) * es);
  for (int64_t n = 0; n < d.N; ++n) {
    k::im2col(dbl, d, at(a.in[0], n * d.C * d.H * d.W), col.get());
    gemm(dbl, false, false, d.O, ohw, ckk, a.in[1].raw(), ckk, col.get(), ohw, 0.0,
         at(*a.out, n * d.O * ohw), ohw);
  }
}

void k_conv2d_backward_input(const KernelArgs &a) {
  Tensor &out = *a.out;
  const bool dbl = f64(out);
  const k::Conv d = conv_dims(out.shape(), a.in[1].shape(), a.in[0].shape(), *a.attrs);
  const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
  Scratch col(static_cast<size_t>(ckk * ohw) * dtype_size(out.dtype()));
  out.device().memset_zero(out.raw(), out.nbytes());
  for (int64_t n = 0; n < d.N; ++n) {
    gemm(dbl, true, false, ckk, ohw, d.O, a.in[1].raw(), ckk, at(a.in[0], n * d.O * ohw), ohw, 0.0,
         col.get(), ohw);
    k::col2im_add(dbl, d, col.get(), at(out, n * d.C * d.H * d.W));
  }
}

void k_conv2d_backward_weight(const KernelArgs &a) {
  Tensor &out = *a.out;
  const bool dbl = f64(out);
  const k::Conv d = conv_dims(a.in[1].shape(), out.shape(), a.in[0].shape(), *a.attrs);
  const int64_t ckk = d.C * d.KH * d.KW, ohw = d.OH * d.OW;
  Scratch col(static_cast<size_t>(ckk * ohw) * dtype_size(out.dtype()));
  if (d.N == 0) out.device().memset_zero(out.raw(), out.nbytes());
  for (int64_t n = 0; n < d.N; ++n) {
    k::im2col(dbl, d, at(a.in[1], n * d.C * d.H * d.W), col.get());
    gemm(dbl, false, true, d.O, ckk, ohw, at(a.in[0], n * d.O * ohw), ohw, col.get(), ohw,
         n == 0 ? 0.0 : 1.0, out.raw(), ckk);
  }
}

struct Pool {
  int64_t NC, H, W, OH, OW, k, s;
};
Pool pool(const Shape &xs, const Shape &os, const Attrs &a) {
  return Pool{xs.d[0] * xs.d[1], xs.d[2], xs.d[3], os.d[2], os.d[3], a.i[0], a.i[1]};
}

void k_max_pool2d(const KernelArgs &a) {
  const Pool p = pool(a.in[0].shape(), a.out->shape(), *a.attrs);
  k::max_pool(f64(*a.out), a.out->raw(), a.in[0].raw(), p.NC, p.H, p.W, p.OH, p.OW, p.k, p.s);
}
void k_max_pool2d_backward(const KernelArgs &a) {
  const Pool p = pool(a.in[1].shape(), a.in[0].shape(), *a.attrs);
  k::max_pool_backward(f64(*a.out), a.out->raw(), a.in[0].raw(), a.in[1].raw(), p.NC, p.H, p.W,
                       p.OH, p.OW, p.k, p.s);
}
void k_avg_pool2d(const KernelArgs &a) {
  const Pool p = pool(a.in[0].shape(), a.out->shape(), *a.attrs);
  k::avg_pool(f64(*a.out), a.out->raw(), a.in[0].raw(), p.NC, p.H, p.W, p.OH, p.OW, p.k, p.s);
}
void k_avg_pool2d_backward(const KernelArgs &a) {
  const Pool p = pool(a.out->shape(), a.in[0].shape(), *a.attrs);
  k::avg_pool_backward(f64(*a.out), a.out->raw(), a.in[0].raw(), p.NC, p.H, p.W, p.OH, p.OW, p.k,
                       p.s);
}

// ---- optimizer updates ----
void k_sgd_update(const KernelArgs &a) {
  Tensor &p = *a.out;
  k::Geo g = geo(p.shape());
  put(g.a, bstrides(a.in[1], p.shape()));
  k::sgd(f64(p), p.raw(), a.in[1].raw(), p.numel(), g, a.attrs->s[0]);
}

void k_adam_update(const KernelArgs &a) {
  Tensor &p = *a.out;
  k::adam(f64(p), p.raw(), a.in[1].raw(), a.in[2].raw(), a.in[3].raw(), p.numel(), a.attrs->s[0],
          a.attrs->s[1], a.attrs->s[2], a.attrs->s[3], a.attrs->i[0]);
}

// The CUDA column, one entry per row of the op table (adcore/op_table.h): k_<name> above for an
// `OP` row with a kernel, the generated elementwise kernel for `UNARY`/`BINARY` rows.
#define ADCORE_CUDA_KERNEL_kernel(n) k_##n
#define ADCORE_CUDA_KERNEL_none(n) nullptr
#define ADCORE_CUDA_OP(n, kernel, ...) ADCORE_CUDA_KERNEL_##kernel(n),
#define ADCORE_CUDA_UNARY(n, ...) unary<k::Un::n>,
#define ADCORE_CUDA_BINARY(n, ...) binary<k::Bin::n>,
constexpr KernelFn kKernels[] = {
    ADCORE_OP_TABLE(ADCORE_CUDA_OP, ADCORE_CUDA_UNARY, ADCORE_CUDA_BINARY)};
#undef ADCORE_CUDA_KERNEL_kernel
#undef ADCORE_CUDA_KERNEL_none
#undef ADCORE_CUDA_OP
#undef ADCORE_CUDA_UNARY
#undef ADCORE_CUDA_BINARY

static_assert(std::size(kKernels) == static_cast<size_t>(kOpCount), "one CUDA entry per op");
// Which rows have a kernel, from the same table as kKernels: a function pointer's comparison with
// nullptr is not a constant expression under -fsanitize=address (GCC), a bool is.
#define ADCORE_CUDA_HAS_kernel true
#define ADCORE_CUDA_HAS_none false
#define ADCORE_CUDA_OP(n, kernel, ...) ADCORE_CUDA_HAS_##kernel,
#define ADCORE_CUDA_UNARY(n, ...) true,
#define ADCORE_CUDA_BINARY(n, ...) true,
constexpr bool kHasKernel[] = {
    ADCORE_OP_TABLE(ADCORE_CUDA_OP, ADCORE_CUDA_UNARY, ADCORE_CUDA_BINARY)};
#undef ADCORE_CUDA_HAS_kernel
#undef ADCORE_CUDA_HAS_none
#undef ADCORE_CUDA_OP
#undef ADCORE_CUDA_UNARY
#undef ADCORE_CUDA_BINARY
constexpr bool covers_the_cpu_column() {
  for (int i = 0; i < kOpCount; ++i)
    if (kHasKernel[i] != op_has_kernel(static_cast<OpId>(i))) return false;
  return true;
}
static_assert(covers_the_cpu_column(), "a CUDA kernel for exactly the ops that have a CPU kernel");

}  // namespace

int register_kernels() {
  int n = 0;
  for (int i = 0; i < kOpCount; ++i)
    if (kKernels[i]) {
      register_kernel(static_cast<OpId>(i), DeviceKind::CUDA, kKernels[i]);
      ++n;
    }
  return n;
}

}  // namespace adcore::cuda::detail
