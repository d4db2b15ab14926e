// Intrusive reference counting (no control block: tensors and storages come from pools so that
// repeated evaluations make no heap allocations). Single-threaded, like the rest of the engine.
#pragma once
#include <utility>

namespace adcore {

template <class T>
class Ref {
 public:
  Ref() = default;
  explicit Ref(T *p) : p_(p) {
    if (p_) ++p_->refs;
  }
  Ref(const Ref &o) : p_(o.p_) {
    if (p_) ++p_->refs;
  }
  Ref(Ref &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref &operator=(const Ref &o) {
    Ref(o).swap(*this);
    return *this;
  }
  Ref &operator=(Ref &&o) noexcept {
    Ref(std::move(o)).swap(*this);
    return *this;
  }
  ~Ref() { reset(); }
  void reset() {
    if (p_ && --p_->refs == 0) T::destroy(p_);
    p_ = nullptr;
  }
  void swap(Ref &o) noexcept { std::swap(p_, o.p_); }
  T *get() const { return p_; }
  T *operator->() const { return p_; }
  T &operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T *p_ = nullptr;
};

}  // namespace adcore
