// CURVE key files (docs/security.md): a generated pair survives a write and a
// read, the secret file is 0600 and nothing wider is ever accepted, a key file
// whose halves do not belong together is refused, and a public key may be
// given as Z85 text or as the path of a .pub/.key file (a file wins).
#include "common/security/curve_keys.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/fakes/temp_dir.h"

namespace ztune::security {
namespace {

class CurveKeysTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Sub(name); }

  static KeyPair NewPair() {
    auto pair = GenerateKeyPair();
    EXPECT_TRUE(pair.ok()) << pair.status().ToString();
    return pair.ok() ? *pair : KeyPair{};
  }

  static unsigned ModeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Writes `text` to `path` and then sets `mode` (the test's own files, made
  // by hand the way a careless operator would).
  static void WriteWithMode(const std::string& path, const std::string& text, mode_t mode) {
    std::ofstream(path, std::ios::trunc) << text;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
  }

  // Only Z85 characters ('/', '.', letters, digits): the 40-character path
  // test needs a directory whose path is itself Z85 text.
  testing::TempDir tmp_{"zkeys."};
  const std::string& dir_ = tmp_.path();
};

TEST_F(CurveKeysTest, GeneratedPairRoundTripsThroughItsFiles) {
  ASSERT_TRUE(CurveAvailable());
  const KeyPair pair = NewPair();
  EXPECT_EQ(pair.public_key.z85().size(), 40u);
  EXPECT_EQ(pair.secret_z85.size(), 40u);
  const std::string base = Path("node");
  ASSERT_TRUE(WriteKeyPairFiles(base, pair, /*overwrite=*/false).ok());

  auto read = ReadKeyPairFile(base + ".key");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, pair.public_key);
  EXPECT_EQ(read->secret_z85, pair.secret_z85);

  const std::string secret_text = Slurp(base + ".key");
  EXPECT_NE(secret_text.find("public-key = " + pair.public_key.z85() + "\n"), std::string::npos);
  EXPECT_NE(secret_text.find("secret-key = " + pair.secret_z85 + "\n"), std::string::npos);
  // The shareable file must not carry the secret.
  const std::string public_text = Slurp(base + ".pub");
  EXPECT_NE(public_text.find("public-key = " + pair.public_key.z85()), std::string::npos);
  EXPECT_EQ(public_text.find(pair.secret_z85), std::string::npos);
  EXPECT_EQ(public_text.find("secret-key"), std::string::npos);

  // The temporaries the files are written through are gone.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    ++entries;
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
  EXPECT_EQ(entries, 2);
}

TEST_F(CurveKeysTest, SecretFileIsExactly0600AndPublicFileIsReadableWhateverTheUmask) {
  const KeyPair pair = NewPair();
  // A permissive umask must not widen the secret; a strict one must not hide
  // the .pub from the people it is meant for.
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{077}}) {
    const mode_t saved = ::umask(mask);
    const std::string base = Path("umask" + std::to_string(mask));
    const Status written = WriteKeyPairFiles(base, pair, /*overwrite=*/false);
    ::umask(saved);
    ASSERT_TRUE(written.ok()) << written.ToString();
    EXPECT_EQ(ModeOf(base + ".key"), 0600u) << "umask " << mask;
    EXPECT_EQ(ModeOf(base + ".pub"), 0644u) << "umask " << mask;
    EXPECT_TRUE(ReadKeyPairFile(base + ".key").ok());
  }
}

TEST_F(CurveKeysTest, WriteRefusesToOverwriteAKeyUnlessTold) {
  const KeyPair first = NewPair();
  const KeyPair second = NewPair();
  ASSERT_NE(first.public_key, second.public_key);
  const std::string base = Path("node");
  ASSERT_TRUE(WriteKeyPairFiles(base, first, /*overwrite=*/false).ok());

  const Status refused = WriteKeyPairFiles(base, second, /*overwrite=*/false);
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists) << refused.ToString();
  EXPECT_NE(refused.message().find(base + ".key"), std::string::npos) << refused.message();
  // Neither file was touched: a lost secret key cannot be recovered.
  auto kept = ReadKeyPairFile(base + ".key");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->secret_z85, first.secret_z85);
  auto kept_public = ReadPublicKey(base + ".pub");
  ASSERT_TRUE(kept_public.ok());
  EXPECT_EQ(*kept_public, first.public_key);

  ASSERT_TRUE(WriteKeyPairFiles(base, second, /*overwrite=*/true).ok());
  auto replaced = ReadKeyPairFile(base + ".key");
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(replaced->secret_z85, second.secret_z85);
  EXPECT_EQ(replaced->public_key, second.public_key);
  auto replaced_public = ReadPublicKey(base + ".pub");
  ASSERT_TRUE(replaced_public.ok());
  EXPECT_EQ(*replaced_public, second.public_key);
  EXPECT_EQ(ModeOf(base + ".key"), 0600u);
}

TEST_F(CurveKeysTest, BaseMayAlreadyEndInDotKey) {
  EXPECT_EQ(SecretKeyPath("/k/head"), "/k/head.key");
  EXPECT_EQ(PublicKeyPath("/k/head"), "/k/head.pub");
  EXPECT_EQ(SecretKeyPath("/k/head.key"), "/k/head.key");
  EXPECT_EQ(PublicKeyPath("/k/head.key"), "/k/head.pub");

  const KeyPair pair = NewPair();
  ASSERT_TRUE(WriteKeyPairFiles(Path("head.key"), pair, /*overwrite=*/false).ok());
  EXPECT_TRUE(std::filesystem::exists(Path("head.key")));
  EXPECT_TRUE(std::filesystem::exists(Path("head.pub")));
  EXPECT_FALSE(std::filesystem::exists(Path("head.key.key")));
}

TEST_F(CurveKeysTest, ReadRefusesASecretFileOthersCanReadAndNamesTheFix) {
  const KeyPair pair = NewPair();
  const std::string base = Path("node");
  ASSERT_TRUE(WriteKeyPairFiles(base, pair, /*overwrite=*/false).ok());
  const std::string path = base + ".key";
  for (mode_t mode : {mode_t{0640}, mode_t{0644}, mode_t{0604}}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    auto read = ReadKeyPairFile(path);
    ASSERT_FALSE(read.ok()) << std::oct << mode;
    EXPECT_EQ(read.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(read.status().message().find("chmod 600 " + path), std::string::npos)
        << read.status().message();
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(read.status().message().find(octal), std::string::npos) << read.status().message();
  }
  // Narrower than 0600 is fine: only group and other bits matter.
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(ReadKeyPairFile(path).ok());
}

TEST_F(CurveKeysTest, ReadRefusesAPublicKeyThatIsNotTheSecretKeys) {
  const KeyPair mine = NewPair();
  const KeyPair other = NewPair();
  const std::string path = Path("mixed.key");
  WriteWithMode(
      path, "public-key = " + other.public_key.z85() + "\nsecret-key = " + mine.secret_z85 + "\n",
      0600);
  auto read = ReadKeyPairFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("does not belong"), std::string::npos)
      << read.status().message();

  // Without a public-key line the public key is derived from the secret.
  WriteWithMode(path, "secret-key = " + mine.secret_z85 + "\n", 0600);
  auto derived = ReadKeyPairFile(path);
  ASSERT_TRUE(derived.ok()) << derived.status().ToString();
  EXPECT_EQ(derived->public_key, mine.public_key);
}

TEST_F(CurveKeysTest, ReadRefusesAPublicFilePassedAsTheSecretOne) {
  const KeyPair pair = NewPair();
  const std::string base = Path("node");
  ASSERT_TRUE(WriteKeyPairFiles(base, pair, /*overwrite=*/false).ok());
  // As written (0644) the mode check refuses it first...
  auto as_written = ReadKeyPairFile(base + ".pub");
  ASSERT_FALSE(as_written.ok());
  EXPECT_EQ(as_written.status().code(), StatusCode::kFailedPrecondition);
  // ...and with a secret file's mode it is still no secret key.
  ASSERT_EQ(::chmod((base + ".pub").c_str(), 0600), 0);
  auto narrowed = ReadKeyPairFile(base + ".pub");
  ASSERT_FALSE(narrowed.ok());
  EXPECT_EQ(narrowed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(narrowed.status().message().find("no secret-key"), std::string::npos)
      << narrowed.status().message();
}

TEST_F(CurveKeysTest, ReadRefusesMissingAndMalformedSecretFiles) {
  auto missing = ReadKeyPairFile(Path("absent.key"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  const std::string path = Path("bad.key");
  WriteWithMode(path, "# comment\nsecret-key = tooshort\n", 0600);
  auto short_key = ReadKeyPairFile(path);
  ASSERT_FALSE(short_key.ok());
  EXPECT_EQ(short_key.status().code(), StatusCode::kInvalidArgument);

  WriteWithMode(path, "# comment\n\nprivate-key = x\n", 0600);
  auto unknown_field = ReadKeyPairFile(path);
  ASSERT_FALSE(unknown_field.ok());
  EXPECT_NE(unknown_field.status().message().find(path + ":3"), std::string::npos)
      << unknown_field.status().message();
}

TEST_F(CurveKeysTest, ReadPublicKeyAcceptsZ85TextAPubFileAndAKeyFile) {
  const KeyPair pair = NewPair();
  const std::string base = Path("node");
  ASSERT_TRUE(WriteKeyPairFiles(base, pair, /*overwrite=*/false).ok());
  for (const std::string& given : {pair.public_key.z85(), base + ".pub", base + ".key"}) {
    auto key = ReadPublicKey(given);
    ASSERT_TRUE(key.ok()) << given << ": " << key.status().ToString();
    EXPECT_EQ(*key, pair.public_key) << given;
  }
  // A public key needs no secrecy: a .key file read for its public half is
  // not refused for its mode.
  ASSERT_EQ(::chmod((base + ".key").c_str(), 0644), 0);
  EXPECT_TRUE(ReadPublicKey(base + ".key").ok());

  auto neither = ReadPublicKey(Path("absent.pub"));
  ASSERT_FALSE(neither.ok());
  EXPECT_EQ(neither.status().code(), StatusCode::kNotFound);
  auto empty = Path("empty.pub");
  std::ofstream(empty) << "# nothing here\n";
  auto no_key = ReadPublicKey(empty);
  ASSERT_FALSE(no_key.ok());
  EXPECT_EQ(no_key.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CurveKeysTest, ReadPublicKeyPrefersAnExistingFileWhosePathIsValidZ85) {
  // A file path of exactly 40 Z85 characters: it names a file and it is also
  // a well-formed key, and the file is what the user meant.
  const size_t name_length = 40 - dir_.size() - 1;
  ASSERT_GT(name_length, 4u) << dir_;
  const std::string path = Path(std::string(name_length - 4, 'k') + ".pub");
  ASSERT_EQ(path.size(), 40u);
  auto path_as_key = PublicKey::FromZ85(path);
  ASSERT_TRUE(path_as_key.ok()) << "the test needs a path that is valid Z85: " << path;

  const KeyPair pair = NewPair();
  ASSERT_NE(pair.public_key, *path_as_key);
  std::ofstream(path) << "# ztune CURVE public key\npublic-key = " << pair.public_key.z85() << "\n";
  auto key = ReadPublicKey(path);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(*key, pair.public_key);

  // Without the file the same text is a key.
  std::filesystem::remove(path);
  auto text = ReadPublicKey(path);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, *path_as_key);
}

TEST_F(CurveKeysTest, FromZ85AcceptsOnly40CharactersOfValidZ85) {
  const KeyPair pair = NewPair();
  const std::string good = pair.public_key.z85();
  auto parsed = PublicKey::FromZ85(good);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->z85(), good);
  EXPECT_FALSE(parsed->empty());

  EXPECT_FALSE(PublicKey::FromZ85(good.substr(0, 39)).ok());
  EXPECT_FALSE(PublicKey::FromZ85(good + "0").ok());
  EXPECT_FALSE(PublicKey::FromZ85("").ok());
  // Characters outside the Z85 alphabet, at the start and in the middle.
  for (char bad : {'_', '"', ' ', '~', ',', ';', '\\', '\''}) {
    std::string text = good;
    text[0] = bad;
    EXPECT_FALSE(PublicKey::FromZ85(text).ok()) << "'" << bad << "' at 0";
    text = good;
    text[17] = bad;
    EXPECT_FALSE(PublicKey::FromZ85(text).ok()) << "'" << bad << "' at 17";
  }
  // Valid characters whose 5-character group exceeds 32 bits encode no bytes.
  EXPECT_FALSE(PublicKey::FromZ85(std::string(40, '#')).ok());
  auto refused = PublicKey::FromZ85("not a key");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CurveKeysTest, FromBytesRoundTripsWithFromZ85) {
  std::string raw(32, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 37 + 11);
  auto from_bytes = PublicKey::FromBytes(raw);
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().ToString();
  EXPECT_EQ(from_bytes->z85().size(), 40u);
  auto from_text = PublicKey::FromZ85(from_bytes->z85());
  ASSERT_TRUE(from_text.ok());
  EXPECT_EQ(*from_text, *from_bytes);

  // All zeros is Z85 "0" * 40: fixes the encoding, not just its consistency.
  auto zeros = PublicKey::FromBytes(std::string(32, '\0'));
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(zeros->z85(), std::string(40, '0'));

  EXPECT_FALSE(PublicKey::FromBytes(std::string(31, 'x')).ok());
  EXPECT_FALSE(PublicKey::FromBytes(std::string(33, 'x')).ok());
  EXPECT_FALSE(PublicKey::FromBytes("").ok());
}

TEST_F(CurveKeysTest, FingerprintIsTwelveLowercaseHexDigitsOfTheRawKey) {
  const KeyPair a = NewPair();
  const KeyPair b = NewPair();
  for (const KeyPair* pair : {&a, &b}) {
    const std::string fp = pair->public_key.Fingerprint();
    ASSERT_EQ(fp.size(), 12u) << fp;
    for (char c : fp) {
      EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f')) << fp;
    }
  }
  EXPECT_NE(a.public_key.Fingerprint(), b.public_key.Fingerprint());

  // The first six raw bytes, in order.
  std::string raw(32, '\0');
  const unsigned char head[] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  for (size_t i = 0; i < sizeof(head); ++i) raw[i] = static_cast<char>(head[i]);
  auto key = PublicKey::FromBytes(raw);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->Fingerprint(), "0123456789ab");

  EXPECT_TRUE(PublicKey().empty());
  EXPECT_EQ(PublicKey().Fingerprint(), "(none)");
}

}  // namespace
}  // namespace ztune::security
