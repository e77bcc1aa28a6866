#pragma once
// gtest parameter names from the fixtures' names that the parameterised suites run over.

#include <gtest/gtest.h>

#include <string>

namespace dpinfer::test {

/// `name` as a C identifier, as gtest wants a parameter's name: '-', '.' and '/' (a golden sub-folder, as in
/// "tiny-qwen-image-edit/edit") become '_', so "tiny-sd3.5-t5" is "tiny_sd3_5_t5".
inline std::string identifier_of(std::string name) {
  for (char& ch : name)
    if (ch == '-' || ch == '.' || ch == '/') ch = '_';
  return name;
}

/// INSTANTIATE_TEST_SUITE_P's name generator for a suite over fixture names.
struct FixtureParamName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& info) const { return identifier_of(info.param); }
};

}  // namespace dpinfer::test
