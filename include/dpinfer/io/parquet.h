#pragma once
// Parquet files: read whole (parquet prompts, io/prompt_parquet.cpp) and encoded from columns
// (the WebDataset indexes, io/shard_index.h).
//
// The work is done by Arrow and Parquet C++ from the pyarrow wheel, whose headers need C++20,
// in a shared module of its own (src/io/parquet/, libdpinfer_parquet.so) that this file loads
// with dlopen on first use. So no program links libarrow: the launcher `dpinfer` starts without
// loading it and pays its load (about 5 ms) only in a command that reads or writes parquet. The
// types below are the whole interface, plain C++17 on both sides.

#include <cstdint>
#include <string>
#include <vector>

namespace dpinfer::io {

/// One column, of one of a few plain types. A reader of `type` looks at the vector it names;
/// `valid[i] == 0` is a null in row i (its slot in that vector holds a default).
struct ParquetColumn {
  enum class Type {
    kString,  ///< strings: Arrow's string, large_string, string_view, dictionary of strings
    kInt64,   ///< ints: every integer type (a uint64 above 2^63-1 is refused when read)
    kDouble,  ///< doubles: float16, float, double
    kBool,    ///< ints, 0 or 1
    kJson,    ///< strings, each a JSON text: lists, structs and maps when read (written as a string column)
    kOther,   ///< when read: a type none of the above holds (binary, timestamps, ...); no values
  };
  std::string name;
  Type type = Type::kString;
  std::string arrow_type;  ///< when read: Arrow's name of the type ("int64", "list<item: string>")
  std::vector<uint8_t> valid;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
};

/// A table: columns of `rows` values each.
struct ParquetTable {
  int64_t rows = 0;
  std::vector<ParquetColumn> columns;
};

/// Reads the parquet file `path` whole. Throws InputError naming the file for one that cannot be
/// read as parquet (not parquet, truncated, damaged), or naming the row (from 0) and column of a
/// value out of the types above (a uint64 above 2^63-1), and Error when parquet support is missing
/// (parquet_support()).
ParquetTable read_parquet(const std::string& path);

/// `table` as the bytes of one parquet file (snappy-compressed, as pyarrow writes by default),
/// for io::write_file_atomically or AtomicFileWriter. Throws Error when parquet support is missing.
std::string encode_parquet(const ParquetTable& table);

/// Whether parquet support can be loaded; else why not, in `why` (the module was not built, or it
/// or libarrow does not load), with what to do. Loads it on the first call.
bool parquet_support(std::string* why);

}  // namespace dpinfer::io
