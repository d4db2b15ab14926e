// The IDX/gzip loader of samples/cnn: reads what it is given, and turns a missing, truncated or
// malformed Fashion-MNIST file into one line that names the file and the Debian package.
#include "idx_loader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../support/process.h"
#include "../support/temp_dir.h"

namespace fs = std::filesystem;
using samples::DataError;

namespace {

constexpr const char *kPackageHint = "install the Debian package dataset-fashion-mnist";

std::string idx_bytes(const std::vector<uint32_t> &dims, const std::vector<uint8_t> &data) {
  std::string s{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int sh = 24; sh >= 0; sh -= 8) s += static_cast<char>((d >> sh) & 0xff);
  s.append(data.begin(), data.end());
  return s;
}

void write_gz(const fs::path &p, const std::string &bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_raw(const fs::path &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::vector<uint8_t> pattern(size_t n, uint8_t mod) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7 + 3) % mod);
  return v;
}

class IdxLoader : public ::testing::Test {
 protected:
  // A complete synthetic Fashion-MNIST folder: n_train / n_test 28x28 images.
  void write_dataset(uint32_t n_train, uint32_t n_test) {
    write_gz(dir_ / "train-images-idx3-ubyte.gz",
             idx_bytes({n_train, 28, 28}, pattern(size_t{n_train} * 784, 251)));
    write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes({n_train}, pattern(n_train, 10)));
    write_gz(dir_ / "t10k-images-idx3-ubyte.gz",
             idx_bytes({n_test, 28, 28}, pattern(size_t{n_test} * 784, 13)));
    write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes({n_test}, pattern(n_test, 10)));
  }

  // The error of load_fashion_mnist on dir_ (fails the test when it loads).
  std::string load_error() {
    try {
      samples::load_fashion_mnist(dir_.string(), -1, -1);
    } catch (const DataError &e) {
      return e.what();
    }
    ADD_FAILURE() << "load_fashion_mnist succeeded";
    return {};
  }

  adprof_test::TempDir tmp_;  // removed with everything in it when the test ends
  const fs::path dir_{tmp_.path()};
};

TEST_F(IdxLoader, ReadsWhatWasWritten) {
  write_dataset(50, 20);
  samples::FashionMnist m = samples::load_fashion_mnist(dir_.string(), -1, -1);
  EXPECT_EQ(m.train_images.count, 50);
  EXPECT_EQ(m.train_images.rows, 28);
  EXPECT_EQ(m.train_images.cols, 28);
  EXPECT_EQ(m.train_images.pixels, pattern(50 * 784, 251));
  EXPECT_EQ(m.train_labels, pattern(50, 10));
  EXPECT_EQ(m.test_images.count, 20);
  EXPECT_EQ(m.test_labels, pattern(20, 10));
  // A prefix only.
  m = samples::load_fashion_mnist(dir_.string(), 7, 3);
  EXPECT_EQ(m.train_images.count, 7);
  EXPECT_EQ(m.train_images.pixels.size(), 7u * 784);
  EXPECT_EQ(m.train_labels.size(), 7u);
  EXPECT_EQ(m.test_images.count, 3);
}

TEST_F(IdxLoader, ReadsUncompressedIdxToo) {
  write_raw(dir_ / "x.idx", idx_bytes({4, 2, 3}, pattern(24, 200)));
  samples::IdxImages im = samples::load_idx_images((dir_ / "x.idx").string());
  EXPECT_EQ(im.count, 4);
  EXPECT_EQ(im.rows, 2);
  EXPECT_EQ(im.cols, 3);
  EXPECT_EQ(im.pixels, pattern(24, 200));
}

TEST_F(IdxLoader, MissingFileNamesFileAndPackage) {
  const std::string e = load_error();
  EXPECT_NE(e.find("train-images-idx3-ubyte.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;
  EXPECT_NE(e.find(kPackageHint), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(IdxLoader, TruncatedCompressedFile) {
  write_dataset(200, 10);
  const fs::path p = dir_ / "train-images-idx3-ubyte.gz";
  fs::resize_file(p, fs::file_size(p) / 2);
  const std::string e = load_error();
  EXPECT_NE(e.find("train-images-idx3-ubyte.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(kPackageHint), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(IdxLoader, FewerItemsThanTheHeaderSays) {
  write_dataset(20, 10);
  // Header claims 100 images, the payload holds 20.
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", idx_bytes({100, 28, 28}, pattern(20 * 784, 9)));
  const std::string e = load_error();
  EXPECT_NE(e.find("t10k-images-idx3-ubyte.gz: truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(kPackageHint), std::string::npos) << e;
}

TEST_F(IdxLoader, TruncatedHeaderEmptyFileAndWrongKind) {
  write_dataset(20, 10);
  write_raw(dir_ / "train-labels-idx1-ubyte.gz", std::string("\0\0\x08", 3));
  std::string e = load_error();
  EXPECT_NE(e.find("train-labels-idx1-ubyte.gz: truncated"), std::string::npos) << e;
  write_raw(dir_ / "train-labels-idx1-ubyte.gz", "");
  e = load_error();
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // An image file where the labels belong.
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes({20, 28, 28}, pattern(20 * 784, 9)));
  e = load_error();
  EXPECT_NE(e.find("not an IDX file of unsigned bytes with 1 dimensions"), std::string::npos) << e;
  EXPECT_NE(e.find(kPackageHint), std::string::npos) << e;
}

TEST_F(IdxLoader, GarbageAndMismatchedCounts) {
  write_dataset(20, 10);
  write_raw(dir_ / "t10k-labels-idx1-ubyte.gz", "this is not a data set at all, just text\n");
  std::string e = load_error();
  EXPECT_NE(e.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << e;
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes({9}, pattern(9, 10)));
  e = load_error();
  EXPECT_NE(e.find("different numbers of items"), std::string::npos) << e;
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes({10}, pattern(10, 20)));
  e = load_error();
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  fs::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  fs::create_directory(dir_ / "t10k-labels-idx1-ubyte.gz");
  e = load_error();
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
}

// The sample itself: one line on stderr, exit status 1, no crash, for a missing folder and a
// truncated file; and it trains on a (synthetic) folder given with --data-dir.
TEST_F(IdxLoader, CnnSampleFailsWithOneLine) {
  using adprof_test::shell_quote;
  auto run = [&](const std::string &args, std::string &err) {
    const adprof_test::ProcessResult r = adprof_test::run_shell(std::string(CNN) + " " + args);
    err = r.err;
    return r.code;
  };
  std::string err;
  int code = run("--data-dir " + shell_quote((dir_ / "nowhere").string()), err);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.rfind("cnn: ", 0), 0u) << err;
  EXPECT_NE(err.find(kPackageHint), std::string::npos) << err;

  write_dataset(300, 20);
  code = run(
      "--data-dir " + shell_quote(dir_.string()) + " --steps 2 --batch 8 --test-images 20 -q", err);
  EXPECT_EQ(code, 0) << err;

  const fs::path p = dir_ / "train-images-idx3-ubyte.gz";
  fs::resize_file(p, fs::file_size(p) / 3);
  code = run("--data-dir " + shell_quote(dir_.string()), err);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_NE(err.find(kPackageHint), std::string::npos) << err;
}

TEST(FashionMnistPackage, InstalledFilesHaveTheExpectedShape) {
  if (!fs::exists(samples::kFashionMnistDir))
    GTEST_SKIP() << samples::kFashionMnistDir << " missing: " << kPackageHint;
  const samples::FashionMnist m = samples::load_fashion_mnist("", 100, 100);
  EXPECT_EQ(m.train_images.count, 100);
  EXPECT_EQ(m.train_images.rows, 28);
  EXPECT_EQ(m.test_images.cols, 28);
}

}  // namespace
