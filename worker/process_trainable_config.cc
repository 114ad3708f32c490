#include "worker/process_trainable_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_parse.h"
#include "common/protocol/messages.h"
#include "common/utf8.h"

namespace ztune::worker {
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr double kMaxGraceS = 3600;

bool PrintableName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes || !IsValidUtf8(name)) return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<ProcessTrainableSpec>> ParseProcessTrainables(std::string_view json_text,
                                                                 const std::string& base_dir,
                                                                 const std::string& source) {
  auto doc = ParseJsonNoDuplicateKeys(json_text);
  if (!doc.ok()) return Status::InvalidArgument(source + ": " + doc.status().message());
  if (!doc->is_object()) {
    return Status::InvalidArgument(source +
                                   ": must be a JSON object of trainable name -> "
                                   "{\"argv\": [...], ...}");
  }
  std::vector<ProcessTrainableSpec> out;
  for (const auto& [name, entry] : doc->items()) {
    const std::string where = source + ": trainable '" + name + "'";
    if (!PrintableName(name)) {
      return Status::InvalidArgument(where + ": a name must be 1 to " +
                                     std::to_string(kMaxNameBytes) + " bytes of printable UTF-8");
    }
    if (name[0] == '@') {
      return Status::InvalidArgument(where + ": names starting with '@' are reserved (" +
                                     protocol::kSubmittedPythonTrainable +
                                     " is submitted code, --allow-submitted-code)");
    }
    if (!entry.is_object()) return Status::InvalidArgument(where + ": must be an object");
    ProcessTrainableSpec spec;
    spec.name = name;
    for (const auto& [key, value] : entry.items()) {
      const std::string at = where + ": " + key;
      if (key == "argv") {
        if (!value.is_array() || value.empty()) {
          return Status::InvalidArgument(at + " must be a non-empty array of strings");
        }
        for (const auto& a : value) {
          if (!a.is_string()) return Status::InvalidArgument(at + " must hold only strings");
          spec.argv.push_back(a.get<std::string>());
        }
        if (spec.argv[0].empty()) return Status::InvalidArgument(at + "[0] is empty");
        // A relative program path ("./train.sh", "bin/run") is relative to
        // the trainables file, as `cwd` is: the child's own working
        // directory (the trial's) is no place to look for it.
        if (spec.argv[0].find('/') != std::string::npos && spec.argv[0][0] != '/') {
          spec.argv[0] =
              (std::filesystem::path(base_dir) / spec.argv[0]).lexically_normal().string();
        }
      } else if (key == "env") {
        if (!value.is_object())
          return Status::InvalidArgument(at + " must be an object of strings");
        for (const auto& [k, v] : value.items()) {
          if (k.empty() || k.find('=') != std::string::npos) {
            return Status::InvalidArgument(at + ": '" + k + "' is not a variable name");
          }
          if (!v.is_string()) return Status::InvalidArgument(at + "." + k + " must be a string");
          spec.env[k] = v.get<std::string>();
        }
      } else if (key == "cwd") {
        if (value.is_null()) continue;
        if (!value.is_string() || value.get<std::string>().empty()) {
          return Status::InvalidArgument(at + " must be a non-empty string or null");
        }
        std::filesystem::path p(value.get<std::string>());
        if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
        spec.cwd = p.lexically_normal().string();
      } else if (key == "stop_grace_s") {
        if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0 ||
            value.get<double>() > kMaxGraceS) {
          return Status::InvalidArgument(at + " must be a number of seconds in [0, 3600]");
        }
        spec.stop_grace_ms = static_cast<int64_t>(std::llround(value.get<double>() * 1000));
      } else if (key == "export_formats") {
        if (!value.is_array()) return Status::InvalidArgument(at + " must be an array of strings");
        std::vector<std::string> formats;
        for (const auto& f : value) {
          if (!f.is_string() || !PrintableName(f.get<std::string>())) {
            return Status::InvalidArgument(at + " must hold format names of 1 to " +
                                           std::to_string(kMaxNameBytes) +
                                           " bytes of printable UTF-8");
          }
          formats.push_back(f.get<std::string>());
        }
        spec.export_formats = std::move(formats);
      } else {
        return Status::InvalidArgument(where + ": unknown key '" + key +
                                       "' (known: argv, env, cwd, stop_grace_s, export_formats)");
      }
    }
    if (spec.argv.empty()) return Status::InvalidArgument(where + ": argv is required");
    out.push_back(std::move(spec));
  }
  return out;
}

Result<std::vector<ProcessTrainableSpec>> LoadProcessTrainables(const std::string& path) {
  std::error_code ec;
  // An ifstream opens a directory without complaint and then reads nothing.
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::IOError("cannot read --trainables file " + path + ": " +
                           (ec ? ec.message() : std::string("not a regular file")));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read --trainables file " + path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::string base = ec ? std::string(".") : abs.parent_path().string();
  return ParseProcessTrainables(text.str(), base, path);
}

}  // namespace ztune::worker
