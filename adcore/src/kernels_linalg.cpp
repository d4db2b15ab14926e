// CPU kernels: matrix products through (Debian's) OpenBLAS. Operands arrive in a BLAS layout
// (row-major, or transposed row-major, with a leading dimension; see mat_layout); OpenBLAS's own
// scratch is allocated inside the op scope and so counts as the op's workspace.
#include <cblas.h>

#include <algorithm>

#include "internal.h"

namespace adcore::detail {

bool mat_layout(const Shape &sh, const Shape &st, int d0, int d1, bool &trans, int64_t &ld) {
  const int64_t rows = sh.d[d0], cols = sh.d[d1], s0 = st.d[d0], s1 = st.d[d1];
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= std::max<int64_t>(1, cols))) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(1, cols) : s0;
    return true;
  }
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= std::max<int64_t>(1, rows))) {
    trans = true;
    ld = cols == 1 ? std::max<int64_t>(1, rows) : s1;
    return true;
  }
  return false;
}

namespace {

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
          const float *b, int64_t ldb, float *c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(n));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *a, int64_t lda,
          const double *b, int64_t ldb, double *c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0, c, static_cast<int>(n));
}
// y = op(A) x, with A stored row-major as (rows, cols).
void gemv(bool t, int64_t rows, int64_t cols, const float *a, int64_t lda, const float *x,
          int64_t incx, float *y) {
  cblas_sgemv(CblasRowMajor, t ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(cols), 1.0f, a, static_cast<int>(lda), x, static_cast<int>(incx),
              0.0f, y, 1);
}
void gemv(bool t, int64_t rows, int64_t cols, const double *a, int64_t lda, const double *x,
          int64_t incx, double *y) {
  cblas_dgemv(CblasRowMajor, t ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(cols), 1.0, a, static_cast<int>(lda), x, static_cast<int>(incx), 0.0,
              y, 1);
}
float vdot(int64_t n, const float *x, int64_t ix, const float *y, int64_t iy) {
  return cblas_sdot(static_cast<int>(n), x, static_cast<int>(ix), y, static_cast<int>(iy));
}
double vdot(int64_t n, const double *x, int64_t ix, const double *y, int64_t iy) {
  return cblas_ddot(static_cast<int>(n), x, static_cast<int>(ix), y, static_cast<int>(iy));
}

int64_t vinc(const Tensor &v) { return v.numel() == 1 ? 1 : v.strides()[0]; }

template <class T>
void matmul_impl(const KernelArgs &args) {
  const Tensor &a = args.in[0], &b = args.in[1];
  T *c = static_cast<T *>(args.out->raw());
  const T *pa = static_cast<const T *>(a.raw());
  const T *pb = static_cast<const T *>(b.raw());
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  if (a.rank() == 2 && b.rank() == 2) {
    mat_layout(a.shape(), a.strides(), 0, 1, ta, lda);
    mat_layout(b.shape(), b.strides(), 0, 1, tb, ldb);
    gemm(ta, tb, a.shape()[0], b.shape()[1], a.shape()[1], pa, lda, pb, ldb, c);
  } else if (a.rank() == 2) {  // (m,k) @ (k)
    mat_layout(a.shape(), a.strides(), 0, 1, ta, lda);
    if (!ta)
      gemv(false, a.shape()[0], a.shape()[1], pa, lda, pb, vinc(b), c);
    else
      gemv(true, a.shape()[1], a.shape()[0], pa, lda, pb, vinc(b), c);
  } else {  // (k) @ (k,n)
    mat_layout(b.shape(), b.strides(), 0, 1, tb, ldb);
    if (!tb)
      gemv(true, b.shape()[0], b.shape()[1], pb, ldb, pa, vinc(a), c);
    else
      gemv(false, b.shape()[1], b.shape()[0], pb, ldb, pa, vinc(a), c);
  }
}

template <class T>
void bmm_impl(const KernelArgs &args) {
  const Tensor &a = args.in[0], &b = args.in[1];
  T *c = static_cast<T *>(args.out->raw());
  const T *pa = static_cast<const T *>(a.raw());
  const T *pb = static_cast<const T *>(b.raw());
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  mat_layout(a.shape(), a.strides(), 1, 2, ta, lda);
  mat_layout(b.shape(), b.strides(), 1, 2, tb, ldb);
  const int64_t m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  for (int64_t i = 0; i < a.shape()[0]; ++i)
    gemm(ta, tb, m, n, k, pa + i * a.strides()[0], lda, pb + i * b.strides()[0], ldb,
         c + i * m * n);
}

}  // namespace

void k_matmul(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) { matmul_impl<decltype(tag)>(a); });
}
void k_bmm(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) { bmm_impl<decltype(tag)>(a); });
}
void k_dot(const KernelArgs &a) {
  dispatch_float(a.out->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor &x = a.in[0], &y = a.in[1];
    *static_cast<T *>(a.out->raw()) = vdot(x.numel(), static_cast<const T *>(x.raw()), vinc(x),
                                           static_cast<const T *>(y.raw()), vinc(y));
  });
}

}  // namespace adcore::detail
