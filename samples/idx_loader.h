// IDX (the MNIST file format), plain or gzip-compressed, and the Fashion-MNIST files of Debian's
// dataset-fashion-mnist package. Errors are one line (DataError) naming the file, what is wrong
// and, for Fashion-MNIST, the package to install.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace samples {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// Reads the first min(max_count, stored count) items (max_count < 0: all). Throws DataError on a
// missing, unreadable, truncated or malformed file.
IdxImages load_idx_images(const std::string &path, int64_t max_count = -1);
std::vector<uint8_t> load_idx_labels(const std::string &path, int64_t max_count = -1);

inline constexpr const char *kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char *kFashionMnistPackage = "dataset-fashion-mnist";

struct FashionMnist {
  IdxImages train_images, test_images;
  std::vector<uint8_t> train_labels, test_labels;
};

// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`; the DataError's message ends with
// "install the Debian package dataset-fashion-mnist".
FashionMnist load_fashion_mnist(const std::string &dir, int64_t max_train, int64_t max_test);

}  // namespace samples
