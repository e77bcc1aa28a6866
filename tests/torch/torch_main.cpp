// gtest main for the LibTorch tests: tests named *_CUDA run only where a CUDA
// device is visible (the PyTorch C++ frontend's convention, test/cpp/api/main.cpp).
#include <gtest/gtest.h>
#include <torch/cuda.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!torch::cuda::is_available()) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += (filter.find('-') == std::string::npos ? "-" : ":");
    filter += "*_CUDA";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  return RUN_ALL_TESTS();
}
