// Tensors: a storage, an element offset, a shape and strides (views share the storage), a dtype
// and, for autodiff, the tape node that produced it (or requires_grad for a leaf).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <vector>

#include "adcore/device.h"
#include "adcore/dtype.h"
#include "adcore/ref.h"
#include "adcore/storage.h"

namespace adcore {

class Tape;

struct TensorImpl {
  int refs = 0;
  Storage storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::F32;
  bool requires_grad = false;
  // Autodiff: the node of `tape` (at generation `tape_gen`) that produced this value.
  Tape *tape = nullptr;
  uint64_t tape_gen = 0;
  int32_t node = -1;
  Ref<TensorImpl> grad;  // accumulated by backward() on leaves
  static void destroy(TensorImpl *t);
  static TensorImpl *make();  // from the thread's pool
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl *impl() const { return impl_.get(); }
  const Shape &shape() const { return impl_->shape; }
  const Shape &strides() const { return impl_->strides; }
  int rank() const { return impl_->shape.rank; }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  Device &device() const { return *impl_->storage->device; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const {
    int64_t acc = 1;
    for (int i = impl_->shape.rank - 1; i >= 0; --i) {
      if (impl_->shape.d[i] != 1 && impl_->strides.d[i] != acc) return false;
      acc *= impl_->shape.d[i];
    }
    return true;
  }
  // Address of element 0 (the profiler identifies buffers by their storage's base pointer).
  void *raw() const {
    return static_cast<char *>(impl_->storage->data) +
           impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
  }
  const void *storage_ptr() const { return impl_->storage->data; }
  template <class T>
  T *data() const {
    if (DTypeOf<T>::value != dtype()) throw std::invalid_argument("Tensor::data: dtype mismatch");
    if (!device().host_accessible())
      throw std::invalid_argument("Tensor::data: the tensor lives on a device; use to(cpu())");
    return static_cast<T *>(raw());
  }
  // Value of a one-element tensor, converted to double.
  double item() const;
  // Copies the values (converted to double) in row-major order.
  std::vector<double> to_vector() const;

  bool requires_grad() const { return impl_->requires_grad; }
  Tensor &set_requires_grad(bool on = true);
  Tensor grad() const;
  void zero_grad();
  // Reverse mode from this (one-element) tensor on its tape; leaves accumulate into grad().
  void backward() const;
  // Same storage, no autodiff history, requires_grad false.
  Tensor detach() const;
  // Profiler label (interned) for this tensor's storage, e.g. "densenet.x3".
  Tensor &label(const char *name);

  Tensor contiguous() const;
  Tensor to(DType t) const;
  // The same values on `dev` (this tensor itself when it is already there); see to_device.
  Tensor to(Device &dev) const;

  // Is this tensor's value produced by a node of the current tape generation, or a
  // requires-grad leaf?
  bool on_tape() const;

 private:
  Ref<TensorImpl> impl_;
};

// Creation (role: input unless given; the profiler sees the role at allocation), on the thread's
// default device (default_device(); values computed on the host are copied there).
Tensor empty(const Shape &shape, DType dtype = DType::F32, adprof_role role = ADPROF_ROLE_INPUT,
             Device &dev = default_device());
Tensor zeros(const Shape &shape, DType dtype = DType::F32, adprof_role role = ADPROF_ROLE_INPUT);
Tensor ones(const Shape &shape, DType dtype = DType::F32, adprof_role role = ADPROF_ROLE_INPUT);
Tensor full(const Shape &shape, double value, DType dtype = DType::F32,
            adprof_role role = ADPROF_ROLE_INPUT);
Tensor scalar(double value, DType dtype = DType::F64, adprof_role role = ADPROF_ROLE_INPUT);
Tensor from_vector(std::span<const double> values, const Shape &shape, DType dtype = DType::F64,
                   adprof_role role = ADPROF_ROLE_INPUT);
Tensor from_ints(std::span<const int64_t> values, const Shape &shape, DType dtype = DType::I64);
// Deterministic pseudo-random tensors (SplitMix64 + Box-Muller), seeded.
Tensor randn(const Shape &shape, uint64_t seed, DType dtype = DType::F64,
             adprof_role role = ADPROF_ROLE_INPUT);
Tensor rand_uniform(const Shape &shape, uint64_t seed, double lo, double hi,
                    DType dtype = DType::F64, adprof_role role = ADPROF_ROLE_INPUT);
Tensor randint(const Shape &shape, uint64_t seed, int64_t hi, DType dtype = DType::I64);
// Host<->device transfer: a contiguous copy of t on `dev` with the role of t's storage (or
// `role` when given) and t's requires_grad flag. Not recorded on the tape: a transferred tensor
// is a new leaf. Returns t itself when it is already on `dev`.
Tensor to_device(const Tensor &t, Device &dev);
Tensor to_device(const Tensor &t, Device &dev, adprof_role role);
// Internal: a tensor over an existing storage (views).
Tensor make_view(const Tensor &base, const Shape &shape, const Shape &strides, int64_t offset);

// Cheap 64-bit content hash (FNV-1a over 8-byte words) for adprof_content_hash.
uint64_t content_hash(const Tensor &t);

}  // namespace adcore
