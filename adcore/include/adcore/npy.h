// Minimal NumPy .npy (format 1.0) writer and reader for f32/f64/i32/i64 tensors.
#pragma once
#include <string>

#include "adcore/tensor.h"

namespace adcore {

// Writes `t` (any strides) as a C-order .npy file; throws std::runtime_error on failure.
void save_npy(const std::string &path, const Tensor &t);
// Reads a C-order little-endian .npy file written by save_npy or NumPy.
Tensor load_npy(const std::string &path);

}  // namespace adcore
