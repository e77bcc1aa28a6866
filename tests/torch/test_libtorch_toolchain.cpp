// The LibTorch toolchain itself: the PyPI wheel links, runs on a machine without
// a GPU, and ships what dpinfer relies on (SDPA, c10d's TCPStore).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

TEST(LibTorchToolchain, ScaledDotProductAttentionMatchesTheFormula) {
  at::manual_seed(0);
  at::Tensor q = at::randn({2, 3, 5, 8}), k = at::randn({2, 3, 7, 8}), v = at::randn({2, 3, 7, 8});
  at::Tensor out = at::scaled_dot_product_attention(q, k, v);
  at::Tensor ref = at::softmax(at::matmul(q, k.transpose(-1, -2)) / std::sqrt(8.0), -1).matmul(v);
  EXPECT_TRUE(at::allclose(out, ref, 1e-5, 1e-6));
}

TEST(LibTorchToolchain, TCPStoreServesOnAFreePort) {
  c10d::TCPStoreOptions opts;
  opts.port = 0;
  opts.isServer = true;
  opts.numWorkers = 1;
  opts.timeout = std::chrono::seconds(10);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  store->set("key", std::vector<uint8_t>{1, 2, 3});
  EXPECT_EQ(store->get("key"), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_GT(store->getPort(), 0);
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", 2), 7);
}

TEST(LibTorchToolchain, CudaQueryDoesNotThrowWithoutAGpu) {
  EXPECT_NO_THROW({
    bool available = torch::cuda::is_available();
    auto n = torch::cuda::device_count();
    EXPECT_EQ(available, n > 0);
  });
}

TEST(LibTorchToolchain, RunsOnTheGpu_CUDA) {
  at::Tensor x = at::ones({4}, at::device(at::kCUDA));
  EXPECT_EQ((x * 2).sum().item<float>(), 8.0f);
}
