// The CUDA device is a plugin: a CPU run of adcore loads no CUDA library, and asking for the CUDA
// device loads it (or says in one line why it cannot: no GPU, plugin not built). Its own binary:
// the first test must run before anything in the process asks for a CUDA device.
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

#include "workloads.h"

using namespace adcore;

namespace {

// The CUDA libraries mapped into this process (one per line), empty when none.
std::string cuda_libraries_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  const std::regex cuda_lib(R"((^|/)lib(cuda|cudart|cublas|cublasLt)[^/]*\.so)");
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (std::regex_search(path, cuda_lib) && found.find(path) == std::string::npos)
      found += path + "\n";
  }
  return found;
}

TEST(AdcoreDevicePlugin, CpuRunLoadsNoCudaLibraryAndCudaIsLoadedOnDemand) {
  const Tensor args[1] = {rand_uniform(Shape{100}, 3, 0, 1)};
  const size_t wrt[1] = {0};
  Tensor g[1];
  Tape tape;
  for (int call = 0; call < 2; ++call) tape.value_and_grad(samples::eam_f, args, wrt, g);
  EXPECT_EQ(g[0].numel(), 100);
  EXPECT_EQ(cuda_libraries_mapped(), "");
  EXPECT_EQ(find_device("cuda"), nullptr);  // nothing registered it

  std::string error;
  Device *dev = nullptr;
  try {
    dev = &open_device("cuda");
  } catch (const std::runtime_error &e) {
    error = e.what();
  }
#ifdef ADCORE_TEST_HAVE_CUDA_PLUGIN
  // The plugin loaded (its CUDA libraries with it): the device is registered, and usable only
  // with a GPU; without one the error says so.
  EXPECT_NE(cuda_libraries_mapped().find("libcudart"), std::string::npos);
  ASSERT_NE(find_device("cuda"), nullptr);
  EXPECT_EQ(find_device("cuda"), find_device("cuda:0"));
  EXPECT_EQ(find_device("cuda")->kind(), DeviceKind::CUDA);
  if (dev) {
    EXPECT_EQ(error, "");
    EXPECT_EQ(dev, find_device("cuda"));
  } else {
    EXPECT_EQ(error.rfind("device 'cuda': no CUDA device: ", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  // Every op with a CPU kernel has one in the CUDA column (filled by the plugin).
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef &d = op_def(static_cast<OpId>(i));
    EXPECT_EQ(d.kernel[0] != nullptr, d.kernel[1] != nullptr) << d.name;
  }
#else
  EXPECT_EQ(dev, nullptr);
  EXPECT_NE(error.find("plugin libadcore_cuda.so is not installed"), std::string::npos) << error;
  EXPECT_EQ(cuda_libraries_mapped(), "");
#endif
}

TEST(AdcoreDevicePlugin, UnknownDevicesAreClearErrors) {
  for (const char *name : {"tpu9000", "Weird Name", ""}) {
    SCOPED_TRACE(name);
    try {
      (void)open_device(name);
      ADD_FAILURE() << "opened";
    } catch (const std::runtime_error &e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("device '") + name + "'"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  EXPECT_EQ(&open_device("cpu"), &cpu());
}

}  // namespace
