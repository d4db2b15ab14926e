// Tensors, shapes, creation functions.
#include "adcore/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "adcore/engine.h"
#include "adcore/ops.h"
#include "internal.h"

namespace adcore {

const char *dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) throw std::invalid_argument("rank too large");
  for (int64_t v : dims) d[rank++] = v;
}

void Shape::push_back(int64_t v) {
  if (rank >= kMaxRank) throw std::invalid_argument("rank too large");
  d[rank++] = v;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < rank; ++i) os << (i ? "," : "") << d[i];
  os << ')';
  return os.str();
}

Shape contiguous_strides(const Shape &s) {
  Shape st;
  st.rank = s.rank;
  int64_t acc = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    st.d[i] = acc;
    acc *= s.d[i];
  }
  return st;
}

Shape broadcast_shapes(const Shape &a, const Shape &b) {
  Shape r;
  r.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < r.rank; ++i) {
    int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument("shapes " + a.str() + " and " + b.str() + " do not broadcast");
    r.d[i] = da == 1 ? db : da;
  }
  return r;
}

// --- TensorImpl pool ---
// The hot path reads a plain thread-local pointer (no TLS initialisation guard); the pool itself
// is made, and registered for destruction, on a thread's first use.
namespace {
constexpr size_t kImplPoolCap = 1u << 14;
struct ImplPool;
thread_local ImplPool *g_impls = nullptr;
thread_local bool g_impls_gone = false;  // the thread's pool was destroyed (thread exit)
struct ImplPool {
  std::vector<TensorImpl *> free;
  ImplPool() {
    free.reserve(1u << 12);
    g_impls = this;
  }
  ~ImplPool() {
    for (TensorImpl *t : free) delete t;
    g_impls = nullptr;
    g_impls_gone = true;
  }
  ImplPool(const ImplPool &) = delete;
  ImplPool &operator=(const ImplPool &) = delete;
};
ImplPool *impls() {
  if (g_impls || g_impls_gone) return g_impls;
  thread_local ImplPool pool;
  return &pool;
}
}  // namespace

TensorImpl *TensorImpl::make() {
  ImplPool *p = impls();
  if (p && !p->free.empty()) {
    TensorImpl *t = p->free.back();
    p->free.pop_back();
    return t;
  }
  return new TensorImpl();
}

namespace detail {
void reserve_tensor_impls(size_t n) {
  ImplPool *p = impls();
  while (p && p->free.size() < n && p->free.size() < kImplPoolCap)
    p->free.push_back(new TensorImpl());
}
}  // namespace detail

void TensorImpl::destroy(TensorImpl *t) {
  t->storage.reset();
  t->grad.reset();
  t->offset = 0;
  t->requires_grad = false;
  t->tape = nullptr;
  t->tape_gen = 0;
  t->node = -1;
  t->refs = 0;
  ImplPool *p = impls();
  if (p && p->free.size() < kImplPoolCap) {
    p->free.push_back(t);
  } else {
    delete t;
  }
}

// --- Tensor ---
int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += rank();
  if (dim < 0 || dim >= rank()) throw std::invalid_argument("size: bad dim");
  return shape()[dim];
}

namespace {
template <class F>
void for_each_offset(const Tensor &t, F f) {
  const int r = t.rank();
  const int64_t n = t.numel();
  if (n == 0) return;
  int64_t idx[kMaxRank] = {};
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    f(off);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= t.strides()[d] * (t.shape()[d] - 1);
      idx[d] = 0;
    }
  }
}
double load(const void *base, DType t, int64_t off) {
  switch (t) {
    case DType::F32:
      return static_cast<const float *>(base)[off];
    case DType::F64:
      return static_cast<const double *>(base)[off];
    case DType::I32:
      return static_cast<const int32_t *>(base)[off];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t *>(base)[off]);
    case DType::Bool:
      return static_cast<const bool *>(base)[off] ? 1.0 : 0.0;
  }
  return 0;
}
void store(void *base, DType t, int64_t off, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float *>(base)[off] = static_cast<float>(v);
      break;
    case DType::F64:
      static_cast<double *>(base)[off] = v;
      break;
    case DType::I32:
      static_cast<int32_t *>(base)[off] = static_cast<int32_t>(v);
      break;
    case DType::I64:
      static_cast<int64_t *>(base)[off] = static_cast<int64_t>(v);
      break;
    case DType::Bool:
      static_cast<bool *>(base)[off] = v != 0;
      break;
  }
}
}  // namespace

namespace detail {
Tensor host_copy(const Tensor &t) { return to_device(t, cpu(), ADPROF_ROLE_WORKSPACE); }
}  // namespace detail

double Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item: tensor has " + std::to_string(numel()) + " elements");
  if (!device().host_accessible()) return detail::host_copy(*this).item();
  return load(raw(), dtype(), 0);
}

std::vector<double> Tensor::to_vector() const {
  if (!device().host_accessible()) return detail::host_copy(*this).to_vector();
  std::vector<double> v;
  v.reserve(static_cast<size_t>(numel()));
  const void *base = raw();
  for_each_offset(*this, [&](int64_t off) { v.push_back(load(base, dtype(), off)); });
  return v;
}

Tensor &Tensor::set_requires_grad(bool on) {
  if (on && !is_floating(dtype()))
    throw std::invalid_argument("requires_grad needs a floating dtype");
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl_->grad); }
void Tensor::zero_grad() { impl_->grad.reset(); }
void Tensor::backward() const { Tape::current().backward(*this); }

Tensor Tensor::detach() const {
  TensorImpl *t = TensorImpl::make();
  t->storage = impl_->storage;
  t->offset = impl_->offset;
  t->shape = impl_->shape;
  t->strides = impl_->strides;
  t->dtype = impl_->dtype;
  return Tensor(Ref<TensorImpl>(t));
}

Tensor &Tensor::label(const char *name) {
  if (profiled()) adprof_label(impl_->storage->data, adprof_name(name));
  return *this;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return detail::contiguous_copy(*this);
}

Tensor Tensor::to(DType t) const { return t == dtype() ? *this : cast(*this, t); }
Tensor Tensor::to(Device &dev) const { return to_device(*this, dev); }

Tensor to_device(const Tensor &t, Device &dev) {
  return to_device(t, dev, t.impl()->storage->role);
}

Tensor to_device(const Tensor &t, Device &dev, adprof_role role) {
  if (&t.device() == &dev) return t;
  // A strided view is made contiguous on its own device first (outside any tape).
  Tensor src = t;
  if (!t.is_contiguous()) {
    NoGrad ng;
    DeviceScope on_src(t.device());
    src = detail::contiguous_copy(t.detach());
  }
  Tensor out = empty(t.shape(), t.dtype(), role, dev);
  // The non-host side does the copy (it knows both directions).
  Device &copier = dev.host_accessible() ? t.device() : dev;
  if (out.nbytes()) copier.copy(out.raw(), src.raw(), out.nbytes());
  if (t.requires_grad()) out.set_requires_grad(true);
  return out;
}

bool Tensor::on_tape() const { return defined() && Tape::current().active(*this); }

Tensor make_view(const Tensor &base, const Shape &shape, const Shape &strides, int64_t offset) {
  TensorImpl *t = TensorImpl::make();
  t->storage = base.impl()->storage;
  t->offset = offset;
  t->shape = shape;
  t->strides = strides;
  t->dtype = base.dtype();
  return Tensor(Ref<TensorImpl>(t));
}

Tensor empty(const Shape &shape, DType dtype, adprof_role role, Device &dev) {
  TensorImpl *t = TensorImpl::make();
  t->storage = allocate_storage(dev, static_cast<size_t>(shape.numel()) * dtype_size(dtype), role,
                                dtype, shape);
  t->shape = shape;
  t->strides = contiguous_strides(shape);
  t->dtype = dtype;
  return Tensor(Ref<TensorImpl>(t));
}

Tensor full(const Shape &shape, double value, DType dtype, adprof_role role) {
  Tensor t = empty(shape, dtype, role);
  t.device().fill(t.raw(), static_cast<size_t>(t.numel()), dtype, value);
  return t;
}
Tensor zeros(const Shape &shape, DType dtype, adprof_role role) {
  Tensor t = empty(shape, dtype, role);
  t.device().memset_zero(t.raw(), t.nbytes());
  return t;
}
Tensor ones(const Shape &shape, DType dtype, adprof_role role) {
  return full(shape, 1.0, dtype, role);
}
Tensor scalar(double value, DType dtype, adprof_role role) {
  return full(Shape{}, value, dtype, role);
}

Tensor from_vector(std::span<const double> values, const Shape &shape, DType dtype,
                   adprof_role role) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw std::invalid_argument("from_vector: size mismatch");
  Tensor t = empty(shape, dtype, role, cpu());
  for (size_t i = 0; i < values.size(); ++i)
    store(t.raw(), dtype, static_cast<int64_t>(i), values[i]);
  return to_device(t, default_device());
}

Tensor from_ints(std::span<const int64_t> values, const Shape &shape, DType dtype) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw std::invalid_argument("from_ints: size mismatch");
  Tensor t = empty(shape, dtype, ADPROF_ROLE_INPUT, cpu());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::I64)
      static_cast<int64_t *>(t.raw())[i] = values[i];
    else
      store(t.raw(), dtype, static_cast<int64_t>(i), static_cast<double>(values[i]));
  }
  return to_device(t, default_device());
}

namespace {
uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double uniform01(uint64_t &s) { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53; }
}  // namespace

Tensor randn(const Shape &shape, uint64_t seed, DType dtype, adprof_role role) {
  Tensor t = empty(shape, dtype, role, cpu());
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u1 = uniform01(s), u2 = uniform01(s);
    if (u1 < 1e-300) u1 = 1e-300;
    store(t.raw(), dtype, i, std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return to_device(t, default_device());
}

Tensor rand_uniform(const Shape &shape, uint64_t seed, double lo, double hi, DType dtype,
                    adprof_role role) {
  Tensor t = empty(shape, dtype, role, cpu());
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 7;
  for (int64_t i = 0; i < t.numel(); ++i) store(t.raw(), dtype, i, lo + (hi - lo) * uniform01(s));
  return to_device(t, default_device());
}

Tensor randint(const Shape &shape, uint64_t seed, int64_t hi, DType dtype) {
  Tensor t = empty(shape, dtype, ADPROF_ROLE_INPUT, cpu());
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 3;
  for (int64_t i = 0; i < t.numel(); ++i) {
    auto v = static_cast<int64_t>(splitmix(s) % static_cast<uint64_t>(hi));
    if (dtype == DType::I64)
      static_cast<int64_t *>(t.raw())[i] = v;
    else
      store(t.raw(), dtype, i, static_cast<double>(v));
  }
  return to_device(t, default_device());
}

uint64_t content_hash(const Tensor &t) {
  // FNV-1a over 8-byte words of the contiguous bytes (strided tensors: element by element).
  if (!t.device().host_accessible()) return content_hash(detail::host_copy(t));
  uint64_t h = 1469598103934665603ULL;
  if (t.is_contiguous()) {
    const auto *p = static_cast<const unsigned char *>(t.raw());
    size_t n = t.nbytes(), i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * 1099511628211ULL;
    }
    for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  } else {
    for (double v : t.to_vector()) {
      uint64_t w;
      std::memcpy(&w, &v, 8);
      h = (h ^ w) * 1099511628211ULL;
    }
  }
  return h;
}

}  // namespace adcore
