#include "head/results_dir.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/json_parse.h"
#include "head/stored_result.h"

namespace ztune::head {
namespace {

// A path component from a name: letters, digits, '.', '-', '_' and '=' kept,
// anything else '_'; at most 100 characters; never "." or "..".
std::string PathPart(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 100)) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_' || c == '=';
    out += keep ? c : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

void FlattenInto(const Json& j, const std::string& prefix, std::map<std::string, Json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) FlattenInto(v, prefix.empty() ? k : prefix + "/" + k, out);
    return;
  }
  out[prefix] = j;
}

// One CSV field as Python's csv module writes it (Ray's CSV logger):
// quoted when it holds a comma, quote or line break; quotes doubled.
std::string CsvField(const Json& v) {
  std::string s;
  if (v.is_null()) return "";
  if (v.is_string()) {
    s = v.get<std::string>();
  } else if (v.is_boolean()) {
    s = v.get<bool>() ? "True" : "False";  // Python's str(bool)
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    s = v.dump();
  } else {
    s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    line += fields[i];
  }
  return line + "\r\n";  // csv.DictWriter's line terminator
}

// The header of an existing progress.csv, or empty.
std::vector<std::string> ReadHeader(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return {};
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> header;
  size_t from = 0;
  // Our own header: keys never hold a quote; a comma-free split is exact
  // unless a key holds a comma, which is then quoted.
  while (from <= line.size()) {
    if (from < line.size() && line[from] == '"') {
      std::string field;
      size_t i = from + 1;
      for (; i < line.size(); ++i) {
        if (line[i] == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else if (line[i] == '"') {
          break;
        } else {
          field += line[i];
        }
      }
      header.push_back(field);
      from = i + 2;
    } else {
      const size_t comma = line.find(',', from);
      header.push_back(line.substr(from, comma == std::string::npos ? comma : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  return header;
}

}  // namespace

ResultsDir::ResultsDir(std::string root) : root_(std::move(root)) {}

std::string ResultsDir::TrialDir(const std::string& experiment_id,
                                 const std::string& experiment_name, const std::string& trainable,
                                 const std::string& trial_id) const {
  const std::string experiment =
      experiment_name.empty() ? experiment_id : experiment_name + "_" + experiment_id;
  return (std::filesystem::path(root_) / PathPart(experiment) /
          PathPart(trainable + "_" + trial_id))
      .string();
}

void ResultsDir::Add(const std::string& experiment_id, const std::string& experiment_name,
                     const std::string& trainable, const std::string& trial_id, const Json& config,
                     std::string stored_result) {
  Pending& p = pending_[trial_id];
  if (p.dir.empty()) {
    p.dir = TrialDir(experiment_id, experiment_name, trainable, trial_id);
    p.config = config;
  }
  p.results.push_back(std::move(stored_result));
}

void ResultsDir::Write(const Rows& rows) {
  for (const auto& [trial_id, p] : rows) {
    if (Status s = WriteTrial(p); !s.ok()) {
      warnings_.Warn("--results-dir: results of " + trial_id + " not written: " + s.message() +
                     " (the store has them: ztune export)");
    }
  }
}

Status ResultsDir::WriteTrial(const Pending& p) {
  const std::string progress = p.dir + "/progress.csv";
  auto known = headers_.find(p.dir);
  if (known == headers_.end()) {
    // Once per trial directory and head start: the directory, params.json
    // and the header a previous head wrote; later turns only append.
    namespace fs = std::filesystem;
    std::error_code ec;
    // A directory made now holds nothing yet: no look for earlier files.
    const bool made = fs::create_directories(p.dir, ec);
    if (ec) return Status::IOError("cannot create " + p.dir + ": " + ec.message());
    const std::string params = p.dir + "/params.json";
    if (made || !fs::exists(params, ec)) {
      std::ofstream out(params, std::ios::trunc);
      out << p.config.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
      if (!out) return Status::IOError("cannot write " + params);
    }
    known = headers_.emplace(p.dir, made ? std::vector<std::string>() : ReadHeader(progress)).first;
  }
  // Kept only once the lines that hold it are written.
  std::vector<std::string> header = known->second;
  const std::string config = p.config.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string json_lines, csv_lines;
  for (const std::string& stored : p.results) {
    Result<std::string> as_text = StoredResultText(stored);
    if (!as_text.ok()) continue;  // the store's own value: never
    const std::string& text = *as_text;
    Result<Json> parsed = ParseJson(text, kMaxJsonDepth + 2);
    if (!parsed.ok() || !parsed->is_object()) continue;  // never, as above
    Json result = std::move(parsed).value();
    // Ray's result.json lines carry the trial's config.
    if (!result.contains("config")) {
      json_lines += text.substr(0, text.size() - 1);
      json_lines += text.size() > 2 ? ",\"config\":" : "\"config\":";
      json_lines += config;
      json_lines += "}\n";
    } else {
      json_lines += text + "\n";
    }
    result.erase("config");
    std::map<std::string, Json> flat;
    FlattenInto(result, "", flat);
    if (header.empty()) {
      for (const auto& [k, v] : flat) header.push_back(k);
      std::vector<std::string> names;
      for (const std::string& k : header) names.push_back(CsvField(Json(k)));
      csv_lines += CsvLine(names);
    }
    std::vector<std::string> fields;
    fields.reserve(header.size());
    for (const std::string& k : header) {
      auto it = flat.find(k);
      fields.push_back(it == flat.end() ? "" : CsvField(it->second));
    }
    csv_lines += CsvLine(fields);
  }
  RETURN_IF_ERROR(files_.Append(p.dir + "/result.json", json_lines));
  RETURN_IF_ERROR(files_.Append(progress, csv_lines));
  known->second = std::move(header);
  return Status::Ok();
}

}  // namespace ztune::head
