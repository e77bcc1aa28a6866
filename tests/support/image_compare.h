#pragma once
// Comparing the images of end-to-end runs: every PNG of an output folder, and issue 4's bound
// between two renderings of one image (max |Δ| <= 1, >= 99% of the uint8 values identical).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "support/png_reader.h"

namespace dpinfer::test {

/// File name -> decoded pixels of every .png directly in `dir`.
inline std::map<std::string, std::vector<uint8_t>> png_pixels_in(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".png") out[e.path().filename().string()] = read_png(e.path().string()).pixels;
  return out;
}

/// Issue 4's bound between `got` and `want`: max |Δ| <= 1 and >= 99% of the values identical.
inline void expect_within_rounding(const uint8_t* got, const uint8_t* want, size_t n, const std::string& what) {
  size_t exact = 0;
  int worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const int d = std::abs(int(got[i]) - int(want[i]));
    worst = std::max(worst, d);
    exact += d == 0;
  }
  EXPECT_LE(worst, 1) << what;
  EXPECT_GE(static_cast<double>(exact) / static_cast<double>(n), 0.99) << what;
}

inline void expect_within_rounding(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_within_rounding(got.data(), want.data(), got.size(), what);
}

}  // namespace dpinfer::test
