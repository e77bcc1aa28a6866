#pragma once
// The table of functions that libdpinfer_parquet.so hands io/parquet.cpp: the one symbol it
// exports, dpinfer_parquet_api(). Both sides are built together by the same compiler (the module
// as C++20, for Arrow's headers; the loader as C++17), so the standard-library types of
// io/parquet.h cross as they are; kParquetApiVersion catches a module left from another build.

#include <string>

#include "dpinfer/io/parquet.h"

namespace dpinfer::io {

constexpr int kParquetApiVersion = 1;

struct ParquetApi {
  int version;
  /// Reads `path` into `out`. False on failure, with a one-line `error` that does not name the
  /// file (the caller does); `input_error` is false for a failure that is not the file's fault.
  bool (*read)(const std::string& path, ParquetTable& out, std::string& error, bool& input_error);
  /// Encodes `table` as a parquet file's bytes. False on failure, with `error`.
  bool (*encode)(const ParquetTable& table, std::string& bytes, std::string& error);
};

}  // namespace dpinfer::io

extern "C" const dpinfer::io::ParquetApi* dpinfer_parquet_api();
