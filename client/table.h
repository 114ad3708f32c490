// Text formatting for the ztune CLI: aligned tables, compact numbers, JSON
// flattening and CSV quoting. Pure functions and a plain value class;
// thread-compatible.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/json.h"

namespace ztune::client {

// An aligned text table: a header row, a dashed rule, then the rows. Columns
// are separated by two spaces; the last column is not padded. Rows shorter
// than the header are padded with empty cells; longer ones are cut.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t num_rows() const { return rows_.size(); }

  void Render(std::ostream& out) const;
  std::string ToString() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// %.4g: "0.00121", "1.235e+05", "3".
std::string FormatNumber(double v);

// Resource amounts: integral values in full ("128", "17179869184"), others
// with %.4g ("0.5").
std::string FormatAmount(double v);

// A JSON scalar for a table cell: integers in full, floats via FormatNumber,
// strings raw, booleans true/false, null as "-", objects/arrays as compact JSON.
std::string FormatCell(const Json& v);

// Unix seconds as local "YYYY-MM-DD HH:MM:SS"; "-" for null or non-numbers.
std::string FormatTime(const Json& unix_seconds);

// Flattens nested objects into "a/b/c" keys; arrays and scalars are leaves.
// An empty nested object is kept as a leaf {}. A non-object `j` yields one
// entry under `prefix` (or "value" if the prefix is empty).
std::map<std::string, Json> Flatten(const Json& j, const std::string& prefix = "");

// One CSV field per RFC 4180: quoted when it holds a comma, quote, CR, LF or
// leading/trailing space; quotes doubled.
std::string CsvField(const std::string& s);
// A CSV line of fields, terminated by "\n".
std::string CsvLine(const std::vector<std::string>& fields);

// Value for CSV: like FormatCell but numbers keep full precision (%.17g
// trimmed, integers exact) and null is empty.
std::string CsvValue(const Json& v);

// First line of `s`, cut to `max_len` characters with "..." when longer.
std::string FirstLine(const std::string& s, size_t max_len);

}  // namespace ztune::client
