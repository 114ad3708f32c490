// ClusterKeys: the CURVE keys of a local test or benchmark cluster, made the
// way an operator makes them (docs/security.md): the head's pair, a worker
// key, client keys and the two allow-lists naming them, all in `dir`/keys
// (outside the data directory, so that tests may open the store there
// before the head starts). The head gets them with HeadArgs(); workers and
// the CLI with --key/--head-key.
//
// Header-only, test-thread only. Aborts the test binary (CHECK-style) when a
// key cannot be written: nothing can run without them.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/security/curve_keys.h"
#include "common/security/curve_socket.h"

namespace ztune::testing {

class ClusterKeys {
 public:
  // Writes the head's pair, a worker key "worker" and an admin client key
  // "admin" into `dir`/keys, and the allow-lists listing both.
  explicit ClusterKeys(const std::string& dir) : keys_dir_(dir + "/keys") {
    std::filesystem::create_directories(keys_dir_);
    head_ = MakePair(keys_dir_ + "/head");
    std::ofstream(workers_allow_file(), std::ios::trunc) << "# test cluster\n";
    std::ofstream(clients_allow_file(), std::ios::trunc) << "# test cluster\n";
    worker_key_ = AddWorker("worker");
    admin_key_ = AddClient("admin", "admin");
  }

  // A new worker key listed in workers.allow; the path of its .key file.
  std::string AddWorker(const std::string& name) {
    const std::string base = keys_dir_ + "/" + name;
    security::KeyPair pair = MakePair(base);
    Append(workers_allow_file(), pair.public_key.z85() + " " + name);
    return base + ".key";
  }
  // A new client key with `role` listed in clients.allow; its .key path.
  std::string AddClient(const std::string& name, const std::string& role) {
    const std::string base = keys_dir_ + "/" + name;
    security::KeyPair pair = MakePair(base);
    Append(clients_allow_file(), pair.public_key.z85() + " " + role + " " + name);
    return base + ".key";
  }
  // A key pair that no allow-list names; its .key path.
  std::string MakeStrangerKey(const std::string& name) {
    const std::string base = keys_dir_ + "/" + name;
    MakePair(base);
    return base + ".key";
  }

  // Removes the key in `key_file` from both allow-lists (the head applies it
  // at its next SIGHUP).
  void Revoke(const std::string& key_file) {
    auto pair = security::ReadKeyPairFile(key_file);
    Check(pair.ok(), "read " + key_file + ": " + pair.status().ToString());
    for (const std::string& list : {workers_allow_file(), clients_allow_file()}) {
      std::ifstream in(list);
      std::string kept;
      for (std::string line; std::getline(in, line);) {
        if (line.find(pair->public_key.z85()) == std::string::npos) kept += line + "\n";
      }
      in.close();
      std::ofstream(list, std::ios::trunc) << kept;
    }
  }

  std::string head_public_file() const { return keys_dir_ + "/head.pub"; }
  const security::PublicKey& head_public_key() const { return head_.public_key; }
  const std::string& worker_key_file() const { return worker_key_; }
  const std::string& admin_key_file() const { return admin_key_; }
  std::string workers_allow_file() const { return keys_dir_ + "/workers.allow"; }
  std::string clients_allow_file() const { return keys_dir_ + "/clients.allow"; }

  // Flags of the head that use these keys and lists.
  std::vector<std::string> HeadArgs() const {
    return {"--key-file",         keys_dir_ + "/head.key", "--workers-allow",
            workers_allow_file(), "--clients-allow",       clients_allow_file()};
  }
  // Flags of a worker or the CLI that authenticate with `key_file`.
  std::vector<std::string> Args(const std::string& key_file) const {
    return {"--key", key_file, "--head-key", head_public_file()};
  }
  std::vector<std::string> WorkerArgs() const { return Args(worker_key_); }
  std::string CliArgs(const std::string& key_file) const {
    return "--key " + key_file + " --head-key " + head_public_file();
  }
  // For an in-process HeadClient or a raw socket.
  security::CurveClientKeys ClientKeys(const std::string& key_file) const {
    auto pair = security::ReadKeyPairFile(key_file);
    Check(pair.ok(), "read " + key_file + ": " + pair.status().ToString());
    return security::CurveClientKeys{head_.public_key, *pair};
  }

 private:
  static void Check(bool ok, const std::string& what) {
    if (ok) return;
    std::fprintf(stderr, "ClusterKeys: %s\n", what.c_str());
    std::abort();
  }
  static security::KeyPair MakePair(const std::string& base) {
    auto pair = security::GenerateKeyPair();
    Check(pair.ok(), "generate: " + pair.status().ToString());
    Status s = security::WriteKeyPairFiles(base, *pair, /*overwrite=*/true);
    Check(s.ok(), "write " + base + ": " + s.ToString());
    return *pair;
  }
  static void Append(const std::string& file, const std::string& line) {
    std::ofstream out(file, std::ios::app);
    out << line << "\n";
    Check(static_cast<bool>(out), "append to " + file);
  }

  std::string keys_dir_;
  security::KeyPair head_;
  std::string worker_key_;
  std::string admin_key_;
};

}  // namespace ztune::testing
