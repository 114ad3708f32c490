#include "client/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include "client/json_util.h"
#include "common/printable.h"

namespace ztune::client {
namespace {

// Display width of a UTF-8 string: counts code points, not bytes, so that
// "—" and non-ASCII names do not break alignment (wide glyphs are rare here).
size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

// Control characters would break the grid; a cell is shown on one line.
// A cell on one line: newlines and tabs become spaces, other control
// characters (escape sequences from a user's strings) are shown escaped.
std::string OneLine(const std::string& s) {
  std::string r = s;
  for (char& c : r) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return EscapeControl(r);
}

}  // namespace

void Table::Render(std::ostream& out) const {
  const size_t ncols = headers_.size();
  std::vector<size_t> widths(ncols, 0);
  for (size_t c = 0; c < ncols; ++c) widths[c] = DisplayWidth(headers_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < ncols && c < row.size(); ++c) {
      widths[c] = std::max(widths[c], DisplayWidth(OneLine(row[c])));
    }
  }
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < ncols; ++c) {
      const std::string cell = c < cells.size() ? OneLine(cells[c]) : std::string();
      line += cell;
      if (c + 1 < ncols) line.append(widths[c] - DisplayWidth(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  emit(headers_);
  std::vector<std::string> rule;
  rule.reserve(ncols);
  for (size_t c = 0; c < ncols; ++c) rule.emplace_back(widths[c], '-');
  emit(rule);
  for (const auto& row : rows_) emit(row);
}

std::string Table::ToString() const {
  std::ostringstream os;
  Render(os);
  return os.str();
}

std::string FormatNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string FormatAmount(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  return FormatNumber(v);
}

std::string FormatCell(const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return FormatNumber(v.get<double>());
  return DumpJson(v);
}

std::string FormatTime(const Json& unix_seconds) {
  std::optional<double> t = AsNumber(unix_seconds);
  if (!t.has_value() || !std::isfinite(*t)) return "-";
  const std::time_t secs = static_cast<std::time_t>(*t);
  std::tm tm{};
  if (localtime_r(&secs, &tm) == nullptr) return "-";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

namespace {

void FlattenInto(const Json& j, const std::string& prefix, std::map<std::string, Json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) {
      FlattenInto(v, prefix.empty() ? k : prefix + "/" + k, out);
    }
    return;
  }
  out[prefix.empty() ? "value" : prefix] = j;
}

}  // namespace

std::map<std::string, Json> Flatten(const Json& j, const std::string& prefix) {
  std::map<std::string, Json> out;
  if (j.is_object() && j.empty() && prefix.empty()) return out;
  FlattenInto(j, prefix, out);
  return out;
}

std::string CsvField(const std::string& s) {
  bool quote = s.find_first_of(",\"\r\n") != std::string::npos;
  if (!s.empty() && (s.front() == ' ' || s.back() == ' ')) quote = true;
  if (!quote) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  q += '"';
  return q;
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    line += CsvField(fields[i]);
  }
  line += '\n';
  return line;
}

std::string CsvValue(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    // Shortest representation that round-trips.
    char buf[64];
    for (int precision = 15; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    return buf;
  }
  if (v.is_number() || v.is_string() || v.is_boolean()) return FormatCell(v);
  return DumpJson(v);
}

std::string FirstLine(const std::string& s, size_t max_len) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > max_len) line = line.substr(0, max_len > 3 ? max_len - 3 : 0) + "...";
  return line;
}

}  // namespace ztune::client
