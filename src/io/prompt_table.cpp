// CSV and TSV prompts files (io/prompt_file.h, parse_prompt_table): a header row, then
// one prompt per row.
//
// Read as Python's csv module reads them (Modules/_csv.c, dialect "excel" with
// strict=False), since that module and pandas write most such files: a quoted cell holds
// delimiters, newlines and doubled quotes; a quote inside an unquoted cell is a character
// of it (a "big" fox); text after a closing quote continues the cell ("a"b is ab); CR, LF
// and CRLF end a row. One difference: a quoted cell still open at the end of the file is
// an error here (Python returns it), since it has swallowed the rest of the file.
// Written here rather than taken from Debian's libcsv, which reads stray quotes otherwise
// (its strict mode refuses a "big" fox; its lax one runs "a"b,2 into the next row) and
// knows no line numbers, which every message here names.

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "dpinfer/io/prompt_file.h"
#include "prompt_columns.h"
#include "dpinfer/io/utf8.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

using prompt_columns::fail_at_line;

struct Row {
  int line = 0;  ///< where it begins
  std::vector<std::string> cells;
};

/// The rows of `content` (from `pos`), blank lines skipped. Throws InputError for a quoted
/// cell that never ends.
std::vector<Row> split_rows(const std::string& content, size_t pos, char delimiter, const std::string& name) {
  enum class State { kStartRow, kStartCell, kInCell, kInQuoted, kQuoteInQuoted };
  std::vector<Row> rows;
  Row row;
  std::string cell;
  State state = State::kStartRow;
  int line = 1;
  const auto end_cell = [&] {
    row.cells.push_back(std::move(cell));
    cell.clear();
  };
  const auto end_row = [&] {
    end_cell();
    rows.push_back(std::move(row));
    row = Row();
    state = State::kStartRow;
  };
  for (; pos < content.size(); ++pos) {
    const char c = content[pos];
    const bool newline = c == '\n' || c == '\r';
    switch (state) {
      case State::kStartRow:
        if (newline) break;  // a blank line, or the LF of a CRLF
        row.line = line;
        state = State::kStartCell;
        [[fallthrough]];
      case State::kStartCell:
        if (c == '"') state = State::kInQuoted;
        else if (c == delimiter) end_cell();
        else if (newline) end_row();
        else {
          cell += c;
          state = State::kInCell;
        }
        break;
      case State::kInCell:
        if (c == delimiter) {
          end_cell();
          state = State::kStartCell;
        } else if (newline) {
          end_row();
        } else {
          cell += c;
        }
        break;
      case State::kInQuoted:
        if (c == '"') state = State::kQuoteInQuoted;
        else cell += c;
        break;
      case State::kQuoteInQuoted:
        if (c == '"') {  // a doubled quote
          cell += c;
          state = State::kInQuoted;
        } else if (c == delimiter) {
          end_cell();
          state = State::kStartCell;
        } else if (newline) {
          end_row();
        } else {
          cell += c;
          state = State::kInCell;
        }
        break;
    }
    if (c == '\n') ++line;
  }
  if (state == State::kInQuoted)
    throw InputError(quote(name) + " line " + std::to_string(row.line) +
                     ": bad quoting: a quoted cell that begins on this row never ends; close it with a quote, and "
                     "write a quote inside a quoted cell twice (\"\")");
  if (state != State::kStartRow) end_row();
  return rows;
}

template <typename T>
T cell_integer(const std::string& cell, const std::string& column, const std::string& name, int line,
               IntRange range) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || end != cell.data() + cell.size())
    fail_at_line(name, line, "column " + quote(column, 60) + " must be an integer, got " + quote(cell, 60));
  if (!range.contains(v)) fail_at_line(name, line, "column " + quote(column, 60) + " must be in " + range.text() + ", got " + cell);
  return static_cast<T>(v);
}

double cell_number(const std::string& cell, const std::string& column, const std::string& name, int line) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (cell.empty() || end != cell.c_str() + cell.size() || !std::isfinite(v))
    fail_at_line(name, line, "column " + quote(column, 60) + " must be a finite number, got " + quote(cell, 60));
  return v;
}

}  // namespace

std::vector<PromptSpec> parse_prompt_table(const std::string& content, const std::string& name, char delimiter,
                                           const PromptFileOptions& options) {
  const std::string kind = delimiter == '\t' ? "TSV" : "CSV";
  const size_t bom = content.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const std::vector<Row> rows = split_rows(content, bom, delimiter, name);
  if (rows.empty()) return {};
  // The header: each column once, the prompt's among them.
  const int header_line = rows.front().line;
  const std::vector<std::string>& header = rows.front().cells;
  std::map<std::string, size_t> column_of;
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string& col = header[c];
    if (find_invalid_utf8(col) != std::string::npos) fail_at_line(name, header_line, "a column name is not valid UTF-8");
    if (!column_of.emplace(col, c).second)
      fail_at_line(name, header_line, "column " + quote(col, 60) + " appears twice in the header; keep one");
  }
  if (!column_of.count(options.prompt_column)) {
    std::string columns;
    for (const std::string& c : header) columns += (columns.empty() ? "" : ", ") + quote(c, 40);
    fail_at_line(name, header_line, "no column " + quote(options.prompt_column, 60) + " for the prompt (the header has " +
                                columns + "); name the prompt's column with --prompt-column");
  }

  for (const std::string& col : header) {
    if (col == options.prompt_column || prompt_columns::is_known(col)) continue;
    if (!options.keep_fields)
      fail_at_line(name, header_line,
           "unknown column " + quote(col, 60) + "; the prompt is in column " + quote(options.prompt_column, 60) +
               " (--prompt-column), and the others may be " + prompt_columns::kKnown +
               " (--keep-fields keeps unknown columns)");
    if (options.reserved_field && options.reserved_field(col))
      fail_at_line(name, header_line, "column " + quote(col, 60) +
                                  " is one that dpinfer writes in each image's record itself, so --keep-fields cannot "
                                  "keep it; rename it");
  }
  std::vector<PromptSpec> out;
  out.reserve(rows.size() - 1);
  for (size_t r = 1; r < rows.size(); ++r) {
    const int line = rows[r].line;
    const std::vector<std::string>& cells = rows[r].cells;
    if (cells.size() != header.size())
      fail_at_line(name, line, "this row has " + std::to_string(cells.size()) + " cell(s), the header " +
                           std::to_string(header.size()) + "; quote a cell that holds " +
                           (delimiter == '\t' ? "a tab" : "a comma") + " (\"a, b\"), or fix the row (" + kind + ")");
    PromptSpec s;
    s.line = line;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string& col = header[c];
      const std::string& cell = cells[c];
      if (const size_t bad = find_invalid_utf8(cell); bad != std::string::npos)
        fail_at_line(name, line, "column " + quote(col, 60) + " is not valid UTF-8 at byte " + std::to_string(bad + 1) +
                             " of its cell; save the file as UTF-8");
      if (cell.find('\0') != std::string::npos)
        fail_at_line(name, line, "column " + quote(col, 60) +
                             " contains a NUL character, which a PNG's text chunk cannot hold; remove it");
      if (col == options.prompt_column) {
        s.prompt = cell;
        continue;
      }
      if (!prompt_columns::is_known(col)) {
        s.fields[col] = cell;  // kept (the header check refused it otherwise)
        continue;
      }
      if (cell.empty()) continue;  // unset: the run's value
      if (col == "negative_prompt") s.negative_prompt = cell;
      else if (col == "id") s.id = cell;
      else if (col == "seed") s.seed = cell_integer<int64_t>(cell, col, name, line, {0, std::numeric_limits<int64_t>::max()});
      else if (col == "steps") s.steps = cell_integer<int>(cell, col, name, line, kStepsRange);
      else if (col == "width") s.width = cell_integer<int>(cell, col, name, line, kImageSizeRange);
      else if (col == "height") s.height = cell_integer<int>(cell, col, name, line, kImageSizeRange);
      else if (col == "num_images") s.num_images = cell_integer<int>(cell, col, name, line, kImagesPerLineRange);
      else if (col == "guidance_scale") s.guidance_scale = cell_number(cell, col, name, line);
      else if (col == "image") s.image = cell;
      else if (col == "mask") s.mask = cell;
      else if (col == "strength") {
        s.strength = cell_number(cell, col, name, line);
        if (!(*s.strength > kStrengthMin && *s.strength <= kStrengthMax))
          fail_at_line(name, line, "column 'strength' must be a number in (0, 1], got " + quote(cell, 60));
      }
    }
    // Image j of this row gets seed + j (as a .jsonl line's).
    if (s.seed && s.num_images && *s.seed > std::numeric_limits<int64_t>::max() - (*s.num_images - 1))
      fail_at_line(name, line, "'seed' + num_images - 1 must stay below 2^63; lower the seed");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dpinfer::io
