// AccessLists (docs/security.md): the workers and clients allow-lists parse
// as documented ('#' comments only at the start of a line, since a key may
// hold '#'), every malformed line is refused naming its file and line, and a
// head started without the files creates them, allowing nobody.
#include "head/access_lists.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/security/curve_keys.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::head {
namespace {

using security::PublicKey;

PublicKey NewKey() {
  auto pair = security::GenerateKeyPair();
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return pair.ok() ? pair->public_key : PublicKey();
}

// A valid key holding '#' (built, not searched for, so the test is
// deterministic): the last 4-byte group is 84, Z85's '#', so the text ends
// "0000#". '#' can never start a 5-character group (84 * 85^4 > 2^32), so no
// key begins with it and a line's leading '#' is always a comment.
PublicKey KeyWithHash() {
  std::string raw(32, '\0');
  raw[31] = 84;
  auto key = PublicKey::FromBytes(raw);
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return key.ok() ? *key : PublicKey();
}

class AccessListsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Sub(name); }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  testing::TempDir tmp_{"ztune_access_lists_test."};
  const std::string& dir_ = tmp_.path();
};

TEST_F(AccessListsTest, KeyWithHashIsAValidKeyButNoKeyStartsWithHash) {
  const PublicKey hashed = KeyWithHash();
  EXPECT_EQ(hashed.z85(), std::string(35, '0') + "0000#");
  EXPECT_FALSE(PublicKey::FromZ85("#" + std::string(39, '0')).ok());
}

TEST_F(AccessListsTest, ParsesWorkersWithNamesCommentsAndBlankLines) {
  const PublicKey a = NewKey();
  const PublicKey b = NewKey();
  const PublicKey hashed = KeyWithHash();
  const PublicKey crlf = NewKey();
  const std::string text =
      "# workers\n"
      "   # an indented comment\n"
      "\n"
      "  \t \n" +
      a.z85() + " gpu box 1\n" + b.z85() + "\n\t" + hashed.z85() + "   hash   key  \n" +
      crlf.z85() + " windows\r\n\r\n";
  AccessLists::KeyMap workers;
  const Status parsed = AccessLists::ParseWorkers(text, "workers.allow", &workers);
  ASSERT_TRUE(parsed.ok()) << parsed.ToString();
  ASSERT_EQ(workers.size(), 4u);

  EXPECT_EQ(workers.at(a.z85()).key, a);
  EXPECT_EQ(workers.at(a.z85()).name, "gpu box 1");
  // No name: the fingerprint, which is what logs show for the key anyway.
  EXPECT_EQ(workers.at(b.z85()).name, b.Fingerprint());
  // The '#' inside the key is part of it, not a comment; runs of blanks in a
  // name become one space.
  ASSERT_TRUE(workers.contains(hashed.z85()));
  EXPECT_EQ(workers.at(hashed.z85()).name, "hash key");
  // A file edited on Windows: the '\r' is neither in the name nor a line.
  EXPECT_EQ(workers.at(crlf.z85()).name, "windows");
}

TEST_F(AccessListsTest, ParsesClientsWithTheirRoles) {
  const PublicKey reader = NewKey();
  const PublicKey submitter = NewKey();
  const PublicKey admin = NewKey();
  const PublicKey hashed = KeyWithHash();
  const std::string text = "# clients\n\n" + reader.z85() + " read\n" + submitter.z85() +
                           " submit Alice Smith\n" + "  # " + admin.z85() + " admin ignored\n" +
                           admin.z85() + " admin ops team\n" + hashed.z85() + " submit\n";
  AccessLists::KeyMap clients;
  const Status parsed = AccessLists::ParseClients(text, "clients.allow", &clients);
  ASSERT_TRUE(parsed.ok()) << parsed.ToString();
  ASSERT_EQ(clients.size(), 4u);
  EXPECT_EQ(clients.at(reader.z85()).role, ClientRole::kRead);
  EXPECT_EQ(clients.at(reader.z85()).name, reader.Fingerprint());
  EXPECT_EQ(clients.at(submitter.z85()).role, ClientRole::kSubmit);
  EXPECT_EQ(clients.at(submitter.z85()).name, "Alice Smith");
  // The commented-out line did not count: the key is listed once, as admin.
  EXPECT_EQ(clients.at(admin.z85()).role, ClientRole::kAdmin);
  EXPECT_EQ(clients.at(admin.z85()).name, "ops team");
  EXPECT_EQ(clients.at(hashed.z85()).role, ClientRole::kSubmit);
  EXPECT_EQ(clients.at(hashed.z85()).name, hashed.Fingerprint());
}

TEST_F(AccessListsTest, RoleNamesRoundTripAndAreOrdered) {
  for (ClientRole role : {ClientRole::kRead, ClientRole::kSubmit, ClientRole::kAdmin}) {
    auto parsed = ParseClientRole(ClientRoleName(role));
    ASSERT_TRUE(parsed.has_value()) << ClientRoleName(role);
    EXPECT_EQ(*parsed, role);
  }
  EXPECT_STREQ(ClientRoleName(ClientRole::kRead), "read");
  EXPECT_STREQ(ClientRoleName(ClientRole::kSubmit), "submit");
  EXPECT_STREQ(ClientRoleName(ClientRole::kAdmin), "admin");
  EXPECT_FALSE(ParseClientRole("root").has_value());
  EXPECT_FALSE(ParseClientRole("Admin").has_value());
  EXPECT_FALSE(ParseClientRole("").has_value());
  // Authorization compares roles: each may do what the one before it may.
  EXPECT_LT(ClientRole::kRead, ClientRole::kSubmit);
  EXPECT_LT(ClientRole::kSubmit, ClientRole::kAdmin);
}

TEST_F(AccessListsTest, RefusesMalformedLinesNamingFileAndLine) {
  const PublicKey a = NewKey();
  const PublicKey b = NewKey();
  struct Case {
    bool clients;
    std::string text;
    std::string where;
    std::string says;
  } cases[] = {
      {false, "# w\n" + a.z85() + "\nnot-a-key name\n", "workers.allow:3", "not a CURVE"},
      {false, a.z85().substr(0, 39) + " short\n", "workers.allow:1", "not a CURVE"},
      {false, a.z85() + " one\n\n" + a.z85() + " two\n", "workers.allow:3", "listed twice"},
      {true, "\n\n" + a.z85() + "\n", "clients.allow:3", "missing role"},
      {true, a.z85() + " read\n" + b.z85() + " root admin-ish\n", "clients.allow:2",
       "unknown role 'root'"},
      {true, "# c\n" + a.z85() + " read x\n" + a.z85() + " admin y\n", "clients.allow:3",
       "listed twice"},
      {true, "# c\nnot-a-key read\n", "clients.allow:2", "not a CURVE"},
  };
  for (const Case& c : cases) {
    AccessLists::KeyMap out;
    const Status s = c.clients ? AccessLists::ParseClients(c.text, "clients.allow", &out)
                               : AccessLists::ParseWorkers(c.text, "workers.allow", &out);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(c.where + ":"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
}

TEST_F(AccessListsTest, LoadCreatesMissingFilesThatAllowNobody) {
  const std::string workers = Path("workers.allow");
  const std::string clients = Path("clients.allow");
  auto lists = AccessLists::Load(workers, clients);
  ASSERT_TRUE(lists.ok()) << lists.status().ToString();
  EXPECT_EQ(lists->num_workers(), 0u);
  EXPECT_EQ(lists->num_clients(), 0u);
  const PublicKey someone = NewKey();
  EXPECT_EQ(lists->FindWorker(someone.z85()), nullptr);
  EXPECT_EQ(lists->FindClient(someone.z85()), nullptr);

  // Each file says how to fill it, in comments only.
  for (const std::string& path : {workers, clients}) {
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const std::string text = Slurp(path);
    ASSERT_FALSE(text.empty()) << path;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_TRUE(line.empty() || line[0] == '#') << path << ": " << line;
    }
  }
  EXPECT_NE(Slurp(clients).find("read | submit | admin"), std::string::npos);

  // A second start reads the headers it wrote as the comments they are.
  auto again = AccessLists::Load(workers, clients);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->num_workers(), 0u);
  EXPECT_EQ(again->num_clients(), 0u);
}

TEST_F(AccessListsTest, LoadFindsListedKeysInTheirOwnListOnly) {
  const PublicKey worker = NewKey();
  const PublicKey client = NewKey();
  const PublicKey stranger = NewKey();
  Write(Path("workers.allow"), "# w\n" + worker.z85() + " node 7\n");
  Write(Path("clients.allow"), "# c\n" + client.z85() + " submit alice\n");
  auto lists = AccessLists::Load(Path("workers.allow"), Path("clients.allow"));
  ASSERT_TRUE(lists.ok()) << lists.status().ToString();
  EXPECT_EQ(lists->num_workers(), 1u);
  EXPECT_EQ(lists->num_clients(), 1u);

  const AllowedKey* w = lists->FindWorker(worker.z85());
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->name, "node 7");
  const AllowedKey* c = lists->FindClient(client.z85());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->name, "alice");
  EXPECT_EQ(c->role, ClientRole::kSubmit);
  // A worker key is no client key and the other way round.
  EXPECT_EQ(lists->FindClient(worker.z85()), nullptr);
  EXPECT_EQ(lists->FindWorker(client.z85()), nullptr);
  EXPECT_EQ(lists->FindWorker(stranger.z85()), nullptr);
  EXPECT_EQ(lists->FindClient(stranger.z85()), nullptr);
  EXPECT_EQ(lists->FindClient(""), nullptr);
}

TEST_F(AccessListsTest, LoadReturnsTheErrorOfAMalformedFile) {
  const PublicKey key = NewKey();
  Write(Path("workers.allow"), "# w\n" + key.z85() + " fine\n");
  Write(Path("clients.allow"), "# c\n" + key.z85() + " root\n");
  auto bad_clients = AccessLists::Load(Path("workers.allow"), Path("clients.allow"));
  ASSERT_FALSE(bad_clients.ok());
  EXPECT_EQ(bad_clients.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_clients.status().message().find(Path("clients.allow") + ":2:"), std::string::npos)
      << bad_clients.status().message();

  Write(Path("workers.allow"), "\n\n\nnonsense\n");
  Write(Path("clients.allow"), "# c\n" + key.z85() + " read\n");
  auto bad_workers = AccessLists::Load(Path("workers.allow"), Path("clients.allow"));
  ASSERT_FALSE(bad_workers.ok());
  EXPECT_NE(bad_workers.status().message().find(Path("workers.allow") + ":4:"), std::string::npos)
      << bad_workers.status().message();

  // A file that cannot be created (its directory is missing) is an error,
  // not an empty list.
  auto uncreatable = AccessLists::Load(Path("missing/workers.allow"), Path("clients.allow"));
  ASSERT_FALSE(uncreatable.ok());
  EXPECT_EQ(uncreatable.status().code(), StatusCode::kIOError) << uncreatable.status().ToString();
}

}  // namespace
}  // namespace ztune::head
