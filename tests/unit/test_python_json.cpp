// Python's json.dump writes NaN/Infinity/-Infinity; diffusers' configs have them.
#include <gtest/gtest.h>

#include <cmath>

#include "dpinfer/io/python_json.h"

using dpinfer::io::parse_python_json;
using dpinfer::io::python_json_number;

TEST(PythonJson, ReadsTheNonFiniteTokensThatPythonWrites) {
  auto j = parse_python_json(R"({"lambda_min_clipped": -Infinity, "a": Infinity, "b": NaN, "c": [1, -Infinity]})");
  EXPECT_EQ(*python_json_number(j["lambda_min_clipped"]), -INFINITY);
  EXPECT_EQ(*python_json_number(j["a"]), INFINITY);
  EXPECT_TRUE(std::isnan(*python_json_number(j["b"])));
  EXPECT_EQ(*python_json_number(j["c"][1]), -INFINITY);
  EXPECT_EQ(*python_json_number(j["c"][0]), 1.0);
}

TEST(PythonJson, LeavesStringsAlone) {
  auto j = parse_python_json(R"({"s": "NaN and -Infinity \" Infinity", "Infinity": "x"})");
  EXPECT_EQ(j["s"], "NaN and -Infinity \" Infinity");
  EXPECT_EQ(j["Infinity"], "x");
  EXPECT_FALSE(python_json_number(j["Infinity"]).has_value());
}

TEST(PythonJson, StillRejectsWhatPythonWouldNot) {
  EXPECT_THROW(parse_python_json(R"({"a": inf})"), nlohmann::json::parse_error);
  EXPECT_THROW(parse_python_json(R"({"a": 1,})"), nlohmann::json::parse_error);
}
