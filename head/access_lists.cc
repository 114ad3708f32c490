#include "head/access_lists.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

namespace ztune::head {
namespace {

constexpr char kWorkersHeader[] =
    "# ztune-head: worker keys allowed to connect, one per line:\n"
    "#   <public key> [name]\n"
    "# ('#' starts a comment only at the start of a line: keys may hold it)\n"
    "# Make a key pair with `ztune keygen --out NAME`, then add the line\n"
    "# printed for NAME.pub here. Reload with `kill -HUP <head pid>`.\n";
constexpr char kClientsHeader[] =
    "# ztune-head: client keys allowed to connect, one per line:\n"
    "#   <public key> <role> [name]      role: read | submit | admin\n"
    "# read: status, trials, results, workers, experiments\n"
    "# submit: also submit, add-trial, stop/pause/resume its own experiments\n"
    "# admin: everything, including other users' experiments\n"
    "# Reload with `kill -HUP <head pid>`.\n";

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

using LineFn =
    std::function<Status(const std::vector<std::string>& words, const std::string& where)>;

Status ForEachLine(std::string_view text, const std::string& what, const LineFn& fn) {
  std::istringstream in{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    // Comments are whole lines: '#' is a Z85 character, so it may occur in a key.
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    std::vector<std::string> words = Words(line);
    if (words.empty()) continue;
    RETURN_IF_ERROR(fn(words, what + ":" + std::to_string(number)));
  }
  return Status::Ok();
}

std::string JoinFrom(const std::vector<std::string>& words, size_t first) {
  std::string out;
  for (size_t i = first; i < words.size(); ++i) out += (out.empty() ? "" : " ") + words[i];
  return out;
}

Result<std::string> ReadOrCreate(const std::string& path, const char* header) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::ofstream out(path);
    out << header;
    if (!out) return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
    return std::string(header);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<AllowedKey> KeyOf(const std::string& word, const std::string& where) {
  auto key = security::PublicKey::FromZ85(word);
  if (!key.ok()) return Status::InvalidArgument(where + ": " + key.status().message());
  return AllowedKey{*key, key->Fingerprint(), ClientRole::kRead};
}

// Adds `entry` to `out`, refusing a key listed twice (at `where`).
Status AddOnce(AllowedKey entry, const std::string& where,
               std::map<std::string, AllowedKey, std::less<>>* out) {
  if (out->contains(entry.key.z85())) {
    return Status::InvalidArgument(where + ": key " + entry.key.Fingerprint() + " is listed twice");
  }
  out->emplace(entry.key.z85(), std::move(entry));
  return Status::Ok();
}

}  // namespace

const char* ClientRoleName(ClientRole role) {
  switch (role) {
    case ClientRole::kRead: return "read";
    case ClientRole::kSubmit: return "submit";
    case ClientRole::kAdmin: return "admin";
  }
  return "read";
}

std::optional<ClientRole> ParseClientRole(std::string_view name) {
  if (name == "read") return ClientRole::kRead;
  if (name == "submit") return ClientRole::kSubmit;
  if (name == "admin") return ClientRole::kAdmin;
  return std::nullopt;
}

Status AccessLists::ParseWorkers(std::string_view text, const std::string& what, KeyMap* out) {
  return ForEachLine(text, what,
                     [&](const std::vector<std::string>& words, const std::string& where) {
                       ASSIGN_OR_RETURN(AllowedKey entry, KeyOf(words[0], where));
                       if (words.size() > 1) entry.name = JoinFrom(words, 1);
                       return AddOnce(std::move(entry), where, out);
                     });
}

Status AccessLists::ParseClients(std::string_view text, const std::string& what, KeyMap* out) {
  return ForEachLine(
      text, what, [&](const std::vector<std::string>& words, const std::string& where) {
        ASSIGN_OR_RETURN(AllowedKey entry, KeyOf(words[0], where));
        if (words.size() < 2) {
          return Status::InvalidArgument(where +
                                         ": missing role after the key (read, submit or admin)");
        }
        auto role = ParseClientRole(words[1]);
        if (!role) {
          return Status::InvalidArgument(where + ": unknown role '" + words[1] +
                                         "' (known: read, submit, admin)");
        }
        entry.role = *role;
        if (words.size() > 2) entry.name = JoinFrom(words, 2);
        return AddOnce(std::move(entry), where, out);
      });
}

Result<AccessLists> AccessLists::Load(const std::string& workers_file,
                                      const std::string& clients_file) {
  AccessLists lists;
  ASSIGN_OR_RETURN(std::string workers, ReadOrCreate(workers_file, kWorkersHeader));
  ASSIGN_OR_RETURN(std::string clients, ReadOrCreate(clients_file, kClientsHeader));
  RETURN_IF_ERROR(ParseWorkers(workers, workers_file, &lists.workers_));
  RETURN_IF_ERROR(ParseClients(clients, clients_file, &lists.clients_));
  return lists;
}

const AllowedKey* AccessLists::FindWorker(std::string_view z85) const {
  auto it = workers_.find(z85);
  return it == workers_.end() ? nullptr : &it->second;
}

const AllowedKey* AccessLists::FindClient(std::string_view z85) const {
  auto it = clients_.find(z85);
  return it == clients_.end() ? nullptr : &it->second;
}

}  // namespace ztune::head
