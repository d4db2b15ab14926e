// NumPy .npy format 1.0: magic, version, little-endian header length, a Python dict literal
// padded with spaces to a multiple of 64 bytes (newline-terminated), then the C-order data.
#include "adcore/npy.h"

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "internal.h"

namespace adcore {
namespace {
const char *descr(DType t) {
  switch (t) {
    case DType::F32:
      return "<f4";
    case DType::F64:
      return "<f8";
    case DType::I32:
      return "<i4";
    case DType::I64:
      return "<i8";
    case DType::Bool:
      return "|b1";
  }
  return "?";
}
}  // namespace

void save_npy(const std::string &path, const Tensor &t) {
  const Tensor c = detail::host_copy(t.contiguous());  // a device tensor's, to the host
  std::string shape = "(";
  for (int i = 0; i < c.rank(); ++i)
    shape += std::to_string(c.shape()[i]) + (c.rank() == 1 ? "," : i + 1 < c.rank() ? ", " : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + descr(c.dtype()) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  const auto len = static_cast<uint16_t>(header.size());
  const char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char *>(c.raw()), static_cast<std::streamsize>(c.nbytes()));
  if (!f) throw std::runtime_error("error writing " + path);
}

Tensor load_npy(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  char magic[10];
  f.read(magic, 10);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw std::runtime_error(path + ": not .npy");
  const size_t hl =
      static_cast<unsigned char>(magic[8]) | (static_cast<unsigned char>(magic[9]) << 8);
  std::string h(hl, ' ');
  f.read(h.data(), static_cast<std::streamsize>(hl));
  DType dt;
  if (h.find("<f4") != std::string::npos)
    dt = DType::F32;
  else if (h.find("<f8") != std::string::npos)
    dt = DType::F64;
  else if (h.find("<i4") != std::string::npos)
    dt = DType::I32;
  else if (h.find("<i8") != std::string::npos)
    dt = DType::I64;
  else
    throw std::runtime_error(path + ": unsupported dtype");
  if (h.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path + ": fortran order unsupported");
  const size_t a = h.find('(', h.find("'shape'")), b = h.find(')', a);
  Shape s;
  std::string dims = h.substr(a + 1, b - a - 1);
  size_t p = 0;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size()) break;
    size_t q = p;
    while (q < dims.size() && dims[q] >= '0' && dims[q] <= '9') ++q;
    s.push_back(std::stoll(dims.substr(p, q - p)));
    p = q;
  }
  Tensor t = empty(s, dt, ADPROF_ROLE_INPUT, cpu());
  f.read(static_cast<char *>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  if (!f) throw std::runtime_error(path + ": truncated");
  return to_device(t, default_device());
}

}  // namespace adcore
