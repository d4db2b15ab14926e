// Element types and shapes.
#pragma once
#include <adprof/context.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace adcore {

// Same numbering as adprof_dtype (part of the trace format).
enum class DType : uint8_t {
  F32 = ADPROF_DTYPE_F32,
  F64 = ADPROF_DTYPE_F64,
  I32 = ADPROF_DTYPE_I32,
  I64 = ADPROF_DTYPE_I64,
  Bool = ADPROF_DTYPE_BOOL,
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }
constexpr bool is_index(DType t) { return t == DType::I32 || t == DType::I64; }
const char *dtype_name(DType t);

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};

inline constexpr int kMaxRank = 6;

// A small fixed-capacity shape (no heap: shapes are created on every op).
struct Shape {
  int64_t d[kMaxRank] = {};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
  int64_t &operator[](int i) { return d[i]; }
  int64_t operator[](int i) const { return d[i]; }
  bool operator==(const Shape &o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  bool operator!=(const Shape &o) const { return !(*this == o); }
  void push_back(int64_t v);
  std::string str() const;
};

// Row-major contiguous strides of a shape.
Shape contiguous_strides(const Shape &s);
// Broadcast result of two shapes (numpy rules); throws on mismatch.
Shape broadcast_shapes(const Shape &a, const Shape &b);

}  // namespace adcore
