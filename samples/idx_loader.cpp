#include "idx_loader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace samples {
namespace {

struct GzCloser {
  void operator()(gzFile_s *f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzCloser>;

Gz open(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DataError(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw DataError(path + ": not a regular file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw DataError(path + ": cannot open: " + std::strerror(errno));
  return Gz(f);
}

// Reads exactly n bytes or throws (truncated file, corrupt compressed stream).
void read_exact(gzFile f, const std::string &path, void *dst, size_t n, const char *what) {
  auto *p = static_cast<unsigned char *>(dst);
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int err = 0;
      const char *msg = gzerror(f, &err);
      throw DataError(path + ": corrupt or truncated while reading " + what + " (" +
                      (msg ? msg : "zlib error") + ")");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < n)
    throw DataError(path + ": truncated: " + what + " needs " + std::to_string(n) +
                    " bytes, file has " + std::to_string(got));
}

uint32_t be32(const unsigned char *b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Header: 0 0 dtype(0x08 = ubyte) ndims, then ndims big-endian u32 dimensions.
std::vector<int64_t> header(gzFile f, const std::string &path, int ndims) {
  unsigned char magic[4];
  read_exact(f, path, magic, 4, "the IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != ndims)
    throw DataError(path + ": not an IDX file of unsigned bytes with " + std::to_string(ndims) +
                    " dimensions (magic " + std::to_string(be32(magic)) + ")");
  std::vector<int64_t> dims(static_cast<size_t>(ndims));
  for (int64_t &d : dims) {
    unsigned char b[4];
    read_exact(f, path, b, 4, "the IDX header");
    d = be32(b);
    if (d == 0 || d > (int64_t{1} << 28)) throw DataError(path + ": implausible IDX dimension");
  }
  return dims;
}

}  // namespace

IdxImages load_idx_images(const std::string &path, int64_t max_count) {
  Gz f = open(path);
  const std::vector<int64_t> d = header(f.get(), path, 3);
  if (d[1] > 4096 || d[2] > 4096) throw DataError(path + ": implausible image size");
  IdxImages im;
  im.count = max_count < 0 ? d[0] : std::min(d[0], max_count);
  im.rows = d[1];
  im.cols = d[2];
  im.pixels.resize(static_cast<size_t>(im.count * im.rows * im.cols));
  read_exact(f.get(), path, im.pixels.data(), im.pixels.size(),
             (std::to_string(im.count) + " images").c_str());
  return im;
}

std::vector<uint8_t> load_idx_labels(const std::string &path, int64_t max_count) {
  Gz f = open(path);
  const std::vector<int64_t> d = header(f.get(), path, 1);
  std::vector<uint8_t> labels(
      static_cast<size_t>(max_count < 0 ? d[0] : std::min(d[0], max_count)));
  read_exact(f.get(), path, labels.data(), labels.size(),
             (std::to_string(labels.size()) + " labels").c_str());
  return labels;
}

FashionMnist load_fashion_mnist(const std::string &dir, int64_t max_train, int64_t max_test) {
  FashionMnist m;
  try {
    const std::string base = dir.empty() ? std::string(kFashionMnistDir) : dir;
    m.train_images = load_idx_images(base + "/train-images-idx3-ubyte.gz", max_train);
    m.train_labels = load_idx_labels(base + "/train-labels-idx1-ubyte.gz", max_train);
    m.test_images = load_idx_images(base + "/t10k-images-idx3-ubyte.gz", max_test);
    m.test_labels = load_idx_labels(base + "/t10k-labels-idx1-ubyte.gz", max_test);
    if (m.train_labels.size() != static_cast<size_t>(m.train_images.count) ||
        m.test_labels.size() != static_cast<size_t>(m.test_images.count))
      throw DataError(base + ": image and label files hold different numbers of items");
    for (const auto *labels : {&m.train_labels, &m.test_labels})
      for (uint8_t l : *labels)
        if (l > 9) throw DataError(base + ": a label is out of range 0..9");
  } catch (const DataError &e) {
    throw DataError(std::string(e.what()) + "; install the Debian package " + kFashionMnistPackage +
                    " (sudo apt-get install " + kFashionMnistPackage + ") or pass --data-dir");
  }
  return m;
}

}  // namespace samples
