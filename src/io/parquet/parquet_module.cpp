// libdpinfer_parquet.so: io/parquet.h's reading and encoding, on Arrow and Parquet C++ from the
// pyarrow wheel (cmake/Arrow.cmake). Compiled as C++20, which the wheel's headers need; it links
// nothing of dpinfer and throws nothing across its one entry point (parquet_api.h).

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/util/compression.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "parquet_api.h"

namespace dpinfer::io {
namespace {

using Type = ParquetColumn::Type;

/// Thrown inside this file only: a value out of io/parquet.h's types, with its row.
struct CellError {
  int64_t row;
  std::string what;
};

void append_json_string(std::string& out, std::string_view s) {
  static const char* const kHex = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else {
        out += "\\u00";
        out += kHex[u >> 4];
        out += kHex[u & 15];
      }
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_json_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

/// Element `i` of `array` as JSON text, appended to `out` (the nested columns' values, --keep-fields).
void append_json(std::string& out, const arrow::Array& array, int64_t i) {
  if (array.IsNull(i)) {
    out += "null";
    return;
  }
  switch (array.type_id()) {
    case arrow::Type::BOOL:
      out += static_cast<const arrow::BooleanArray&>(array).Value(i) ? "true" : "false";
      return;
    case arrow::Type::INT8: out += std::to_string(static_cast<const arrow::Int8Array&>(array).Value(i)); return;
    case arrow::Type::INT16: out += std::to_string(static_cast<const arrow::Int16Array&>(array).Value(i)); return;
    case arrow::Type::INT32: out += std::to_string(static_cast<const arrow::Int32Array&>(array).Value(i)); return;
    case arrow::Type::INT64: out += std::to_string(static_cast<const arrow::Int64Array&>(array).Value(i)); return;
    case arrow::Type::UINT8: out += std::to_string(static_cast<const arrow::UInt8Array&>(array).Value(i)); return;
    case arrow::Type::UINT16: out += std::to_string(static_cast<const arrow::UInt16Array&>(array).Value(i)); return;
    case arrow::Type::UINT32: out += std::to_string(static_cast<const arrow::UInt32Array&>(array).Value(i)); return;
    case arrow::Type::UINT64: out += std::to_string(static_cast<const arrow::UInt64Array&>(array).Value(i)); return;
    case arrow::Type::FLOAT: append_json_double(out, static_cast<const arrow::FloatArray&>(array).Value(i)); return;
    case arrow::Type::DOUBLE: append_json_double(out, static_cast<const arrow::DoubleArray&>(array).Value(i)); return;
    case arrow::Type::STRING: append_json_string(out, static_cast<const arrow::StringArray&>(array).GetView(i)); return;
    case arrow::Type::LARGE_STRING:
      append_json_string(out, static_cast<const arrow::LargeStringArray&>(array).GetView(i));
      return;
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST: {
      std::shared_ptr<arrow::Array> values;
      int64_t begin = 0, end = 0;
      if (array.type_id() == arrow::Type::LIST) {
        const auto& list = static_cast<const arrow::ListArray&>(array);
        values = list.values();
        begin = list.value_offset(i);
        end = begin + list.value_length(i);
      } else if (array.type_id() == arrow::Type::LARGE_LIST) {
        const auto& large = static_cast<const arrow::LargeListArray&>(array);
        values = large.values();
        begin = large.value_offset(i);
        end = begin + large.value_length(i);
      } else {
        const auto& fixed = static_cast<const arrow::FixedSizeListArray&>(array);
        values = fixed.values();
        begin = fixed.value_offset(i);
        end = begin + fixed.value_length(i);
      }
      out += '[';
      for (int64_t k = begin; k < end; ++k) {
        if (k > begin) out += ", ";
        append_json(out, *values, k);
      }
      out += ']';
      return;
    }
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(array);
      out += '{';
      for (int f = 0; f < s.num_fields(); ++f) {
        if (f) out += ", ";
        append_json_string(out, s.struct_type()->field(f)->name());
        out += ": ";
        append_json(out, *s.field(f), i);
      }
      out += '}';
      return;
    }
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(array);
      append_json(out, *d.dictionary(), d.GetValueIndex(i));
      return;
    }
    default: {  // timestamps, dates, decimals, maps, ...: Arrow's text of the value
      const auto scalar = array.GetScalar(i);
      append_json_string(out, scalar.ok() ? (*scalar)->ToString() : std::string("?"));
      return;
    }
  }
}

bool is_string_type(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING || t.id() == arrow::Type::STRING_VIEW;
}

Type column_type(const arrow::DataType& t) {
  if (is_string_type(t)) return Type::kString;
  if (t.id() == arrow::Type::DICTIONARY)
    return is_string_type(*static_cast<const arrow::DictionaryType&>(t).value_type()) ? Type::kString : Type::kOther;
  if (arrow::is_integer(t.id())) return Type::kInt64;
  if (arrow::is_floating(t.id())) return Type::kDouble;
  if (t.id() == arrow::Type::BOOL) return Type::kBool;
  if (t.id() == arrow::Type::NA) return Type::kString;  // every value null
  if (t.id() == arrow::Type::LIST || t.id() == arrow::Type::LARGE_LIST || t.id() == arrow::Type::FIXED_SIZE_LIST ||
      t.id() == arrow::Type::STRUCT)
    return Type::kJson;
  return Type::kOther;
}

/// Appends the values of one chunk, whose first row is `row0`, to `col`.
void append_chunk(ParquetColumn& col, const arrow::Array& a, int64_t row0) {
  for (int64_t i = 0; i < a.length(); ++i) {
    const bool valid = a.IsValid(i);
    col.valid.push_back(valid ? 1 : 0);
    switch (col.type) {
      case Type::kString: {
        std::string v;
        if (valid) {
          if (a.type_id() == arrow::Type::STRING) v = static_cast<const arrow::StringArray&>(a).GetString(i);
          else if (a.type_id() == arrow::Type::LARGE_STRING) v = static_cast<const arrow::LargeStringArray&>(a).GetString(i);
          else if (a.type_id() == arrow::Type::STRING_VIEW) v = static_cast<const arrow::StringViewArray&>(a).GetString(i);
          else if (a.type_id() == arrow::Type::DICTIONARY) {
            const auto& d = static_cast<const arrow::DictionaryArray&>(a);
            const auto& dict = *d.dictionary();
            const int64_t k = d.GetValueIndex(i);
            if (dict.type_id() == arrow::Type::STRING) v = static_cast<const arrow::StringArray&>(dict).GetString(k);
            else if (dict.type_id() == arrow::Type::LARGE_STRING) v = static_cast<const arrow::LargeStringArray&>(dict).GetString(k);
            else v = static_cast<const arrow::StringViewArray&>(dict).GetString(k);
          }
        }
        col.strings.push_back(std::move(v));
        break;
      }
      case Type::kInt64:
      case Type::kBool: {
        int64_t v = 0;
        if (valid) {
          if (a.type_id() == arrow::Type::BOOL) v = static_cast<const arrow::BooleanArray&>(a).Value(i) ? 1 : 0;
          else if (a.type_id() == arrow::Type::UINT64) {
            const uint64_t u = static_cast<const arrow::UInt64Array&>(a).Value(i);
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
              throw CellError{row0 + i, std::to_string(u) + " is above 2^63-1, the largest value read"};
            v = static_cast<int64_t>(u);
          } else {
            switch (a.type_id()) {
              case arrow::Type::INT8: v = static_cast<const arrow::Int8Array&>(a).Value(i); break;
              case arrow::Type::INT16: v = static_cast<const arrow::Int16Array&>(a).Value(i); break;
              case arrow::Type::INT32: v = static_cast<const arrow::Int32Array&>(a).Value(i); break;
              case arrow::Type::INT64: v = static_cast<const arrow::Int64Array&>(a).Value(i); break;
              case arrow::Type::UINT8: v = static_cast<const arrow::UInt8Array&>(a).Value(i); break;
              case arrow::Type::UINT16: v = static_cast<const arrow::UInt16Array&>(a).Value(i); break;
              case arrow::Type::UINT32: v = static_cast<const arrow::UInt32Array&>(a).Value(i); break;
              default: break;
            }
          }
        }
        col.ints.push_back(v);
        break;
      }
      case Type::kDouble: {
        double v = 0;
        if (valid) {
          if (a.type_id() == arrow::Type::FLOAT) v = static_cast<const arrow::FloatArray&>(a).Value(i);
          else if (a.type_id() == arrow::Type::DOUBLE) v = static_cast<const arrow::DoubleArray&>(a).Value(i);
          else if (a.type_id() == arrow::Type::HALF_FLOAT) {
            const auto s = a.GetScalar(i);
            if (s.ok()) {
              const auto d = (*s)->CastTo(arrow::float64());
              if (d.ok()) v = static_cast<const arrow::DoubleScalar&>(**d).value;
            }
          }
        }
        col.doubles.push_back(v);
        break;
      }
      case Type::kJson: {
        std::string v;
        if (valid) append_json(v, a, i);
        col.strings.push_back(std::move(v));
        break;
      }
      case Type::kOther:
        break;
    }
  }
}

/// The same array with its text typed as bytes: `ValidateFull` then checks the offsets, lengths
/// and dictionary indices against the buffers (which Arrow's reader leaves to the caller: a damaged
/// file can hand back a string whose offsets run backwards) without Arrow's own UTF-8 check, so that
/// bad text is still reported by io/prompt_parquet.cpp with its row and column.
std::shared_ptr<arrow::DataType> text_as_bytes(const std::shared_ptr<arrow::DataType>& t) {
  switch (t->id()) {
    case arrow::Type::STRING: return arrow::binary();
    case arrow::Type::LARGE_STRING: return arrow::large_binary();
    case arrow::Type::STRING_VIEW: return arrow::binary_view();
    default: return t;
  }
}

arrow::Status validate_chunk(const arrow::Array& a) {
  std::shared_ptr<arrow::ArrayData> data = a.data()->Copy();
  if (a.type_id() == arrow::Type::DICTIONARY) {
    const auto& dict_type = static_cast<const arrow::DictionaryType&>(*a.type());
    if (!data->dictionary) return arrow::Status::Invalid("a dictionary column without its dictionary");
    data->type = arrow::dictionary(dict_type.index_type(), text_as_bytes(dict_type.value_type()));
    data->dictionary = data->dictionary->Copy();
    data->dictionary->type = text_as_bytes(data->dictionary->type);
  } else {
    data->type = text_as_bytes(data->type);
  }
  return arrow::MakeArray(data)->ValidateFull();
}

/// Arrow trusts a row group's row count when it sizes a column that stores no values (a null
/// column): a damaged footer that claims 6e10 rows for a 2 KB file has it allocate hundreds of
/// gigabytes. A file whose row groups disagree with their own columns, or with the file's total,
/// is damaged; refuse it before reading.
bool check_row_counts(const parquet::FileMetaData& meta, std::string& error) {
  int64_t total = 0;
  for (int g = 0; g < meta.num_row_groups(); ++g) {
    const std::unique_ptr<parquet::RowGroupMetaData> group = meta.RowGroup(g);
    const int64_t rows = group->num_rows();
    if (rows < 0 || rows > meta.num_rows() - total) {
      error = "damaged: row group " + std::to_string(g) + " claims " + std::to_string(rows) +
              " rows, more than the file's " + std::to_string(meta.num_rows()) + "; write the file again";
      return false;
    }
    total += rows;
    for (int c = 0; c < group->num_columns(); ++c) {
      // A column outside any list holds one value, null or not, per row.
      if (meta.schema()->Column(c)->max_repetition_level() != 0) continue;
      const int64_t values = group->ColumnChunk(c)->num_values();
      if (values != rows) {
        error = "damaged: row group " + std::to_string(g) + " has " + std::to_string(rows) + " rows but its column '" +
                meta.schema()->Column(c)->path()->ToDotString() + "' holds " + std::to_string(values) +
                " values; write the file again";
        return false;
      }
    }
  }
  if (total != meta.num_rows()) {
    error = "damaged: its row groups hold " + std::to_string(total) + " rows, its footer says " +
            std::to_string(meta.num_rows()) + "; write the file again";
    return false;
  }
  return true;
}

bool read(const std::string& path, ParquetTable& out, std::string& error, bool& input_error) {
  input_error = true;
  try {
    auto file = arrow::io::ReadableFile::Open(path);
    if (!file.ok()) {
      error = file.status().message();
      return false;
    }
    auto reader = parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
    if (!reader.ok()) {
      error = "not a parquet file, or a damaged one (" + reader.status().message() + ")";
      return false;
    }
    if (!check_row_counts(*(*reader)->parquet_reader()->metadata(), error)) return false;
    const arrow::Result<std::shared_ptr<arrow::Table>> read_table = (*reader)->ReadTable();
    if (!read_table.ok()) {
      error = "cannot read it as parquet (" + read_table.status().message() + ")";
      return false;
    }
    const std::shared_ptr<arrow::Table>& table = *read_table;
    out = ParquetTable();
    out.rows = table->num_rows();
    for (int c = 0; c < table->num_columns(); ++c) {
      ParquetColumn col;
      col.name = table->field(c)->name();
      col.arrow_type = table->field(c)->type()->ToString();
      col.type = column_type(*table->field(c)->type());
      col.valid.reserve(static_cast<size_t>(out.rows));
      int64_t row0 = 0;
      try {
        for (const auto& chunk : table->column(c)->chunks()) {
          if (const arrow::Status valid = validate_chunk(*chunk); !valid.ok()) {
            error = "damaged: column '" + col.name + "' (" + valid.message() + "); write the file again";
            return false;
          }
          append_chunk(col, *chunk, row0);
          row0 += chunk->length();
        }
      } catch (const CellError& e) {
        error = "row " + std::to_string(e.row) + ", column '" + col.name + "': " + e.what;
        return false;
      }
      out.columns.push_back(std::move(col));
    }
    return true;
  } catch (const std::exception& e) {  // parquet::ParquetException, std::bad_alloc
    error = std::string("cannot read it as parquet (") + e.what() + ")";
    return false;
  }
}

template <typename Builder, typename Append>
arrow::Result<std::shared_ptr<arrow::Array>> build(const ParquetColumn& col, int64_t rows, Append append) {
  Builder b;
  ARROW_RETURN_NOT_OK(b.Reserve(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const bool valid = static_cast<size_t>(i) < col.valid.size() && col.valid[static_cast<size_t>(i)];
    if (valid) ARROW_RETURN_NOT_OK(append(b, static_cast<size_t>(i)));
    else ARROW_RETURN_NOT_OK(b.AppendNull());
  }
  return b.Finish();
}

bool encode(const ParquetTable& table, std::string& bytes, std::string& error) {
  try {
    arrow::FieldVector fields;
    arrow::ArrayVector arrays;
    const int64_t rows = table.rows;
    for (const ParquetColumn& col : table.columns) {
      arrow::Result<std::shared_ptr<arrow::Array>> a;
      std::shared_ptr<arrow::DataType> type;
      const auto check = [&](size_t n) {
        if (n < static_cast<size_t>(rows)) throw std::invalid_argument("column '" + col.name + "' has too few values");
      };
      switch (col.type) {
        case Type::kString:
        case Type::kJson:
          check(col.strings.size());
          type = arrow::utf8();
          a = build<arrow::StringBuilder>(col, rows, [&](auto& b, size_t i) { return b.Append(col.strings[i]); });
          break;
        case Type::kInt64:
          check(col.ints.size());
          type = arrow::int64();
          a = build<arrow::Int64Builder>(col, rows, [&](auto& b, size_t i) { return b.Append(col.ints[i]); });
          break;
        case Type::kDouble:
          check(col.doubles.size());
          type = arrow::float64();
          a = build<arrow::DoubleBuilder>(col, rows, [&](auto& b, size_t i) { return b.Append(col.doubles[i]); });
          break;
        case Type::kBool:
          check(col.ints.size());
          type = arrow::boolean();
          a = build<arrow::BooleanBuilder>(col, rows, [&](auto& b, size_t i) { return b.Append(col.ints[i] != 0); });
          break;
        case Type::kOther:
          error = "column '" + col.name + "' has no type to write";
          return false;
      }
      if (!a.ok()) {
        error = a.status().message();
        return false;
      }
      fields.push_back(arrow::field(col.name, type));
      arrays.push_back(*a);
    }
    const auto t = arrow::Table::Make(arrow::schema(fields), arrays, rows);
    auto sink = arrow::io::BufferOutputStream::Create();
    if (!sink.ok()) {
      error = sink.status().message();
      return false;
    }
    parquet::WriterProperties::Builder props;
    if (arrow::util::Codec::IsAvailable(arrow::Compression::SNAPPY)) props.compression(arrow::Compression::SNAPPY);
    // The Arrow schema goes into the file's metadata, as pyarrow writes it.
    const auto arrow_props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
    if (const arrow::Status s = parquet::arrow::WriteTable(*t, arrow::default_memory_pool(), *sink,
                                                           std::max<int64_t>(rows, 1), props.build(), arrow_props);
        !s.ok()) {
      error = s.message();
      return false;
    }
    auto buffer = (*sink)->Finish();
    if (!buffer.ok()) {
      error = buffer.status().message();
      return false;
    }
    bytes.assign(reinterpret_cast<const char*>((*buffer)->data()), static_cast<size_t>((*buffer)->size()));
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

const ParquetApi kApi{kParquetApiVersion, &read, &encode};

}  // namespace
}  // namespace dpinfer::io

extern "C" __attribute__((visibility("default"))) const dpinfer::io::ParquetApi* dpinfer_parquet_api() {
  return &dpinfer::io::kApi;
}
