#pragma once
// What the scheduler golden tests share: the goldens' layout that make_scheduler_goldens.py
// and make_flow_match_goldens.py both write (goldens.json, the float32 blob goldens.f32,
// configs/), and the checks of a one-line dpinfer::Error.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dpinfer/util/error.h"

namespace dpinfer::test {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

/// A goldens folder: the index, the float32 blob and its tensors' shape.
struct SchedulerGoldens {
  nlohmann::json index;
  std::vector<float> blob;
  std::vector<int64_t> shape;

  static SchedulerGoldens load(const std::string& dir) {
    SchedulerGoldens out;
    out.index = read_json(dir + "/goldens.json");
    std::ifstream in(dir + "/goldens.f32", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    out.blob.resize(bytes.size() / sizeof(float));
    std::memcpy(out.blob.data(), bytes.data(), out.blob.size() * sizeof(float));
    out.shape = out.index["shape"].get<std::vector<int64_t>>();
    return out;
  }

  // `count` tensors of `shape` from element `offset`.
  at::Tensor tensors(int64_t offset, int64_t count) const {
    std::vector<int64_t> dims = shape;
    dims.insert(dims.begin(), count);
    int64_t numel = count;
    for (int64_t d : shape) numel *= d;
    return at::from_blob(const_cast<float*>(blob.data()) + offset, {numel}, at::kFloat).clone().reshape(dims);
  }
  at::Tensor fixed() const { return tensors(index["fixed_offset"].get<int64_t>(), 1)[0]; }
  at::Tensor latents() const { return tensors(index["latents_offset"].get<int64_t>(), 1)[0]; }
};

/// The message of the dpinfer::Error `fn` throws; a test failure when it throws none.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const dpinfer::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no dpinfer::Error thrown";
  return "";
}

/// EXPECTs `message` to hold every part and to be one line.
inline void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace dpinfer::test
