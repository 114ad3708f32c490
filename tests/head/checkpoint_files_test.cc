// CheckpointFiles on a temporary directory: uploads round-trip byte for byte
// through both write paths (O_DIRECT with its padded last block, and the page
// cache), references encode and decode and refuse damage, and the start-up
// sweep removes partial and unreferenced files only.
#include "head/checkpoint_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/fakes/temp_dir.h"

namespace ztune::head {
namespace {

namespace fs = std::filesystem;

class CheckpointFilesTest : public ::testing::TestWithParam<bool> {
 protected:
  static std::string Bytes(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xff);
    return s;
  }
  std::string ReadAll(const std::string& name) const {
    std::ifstream in(dir_ / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  ztune::testing::TempDir tmp_;
  fs::path dir_{tmp_.path()};
};

// Sizes around the 1 MiB staging buffer and the 4 KiB block, fed in pieces
// that straddle both.
TEST_P(CheckpointFilesTest, UploadsRoundTripByteForByteInEitherWritePath) {
  CheckpointFiles files(dir_.string(), /*direct=*/GetParam());
  ASSERT_TRUE(files.Open().ok());
  for (size_t size : {size_t{1}, size_t{4095}, size_t{4096}, size_t{(1 << 20) - 1}, size_t{1 << 20},
                      size_t{(3 << 20) + 123}}) {
    const std::string payload = Bytes(size);
    auto upload = files.Begin(size);
    ASSERT_TRUE(upload.ok()) << upload.status().ToString();
    for (size_t at = 0; at < size;) {
      const size_t n = std::min<size_t>(size - at, 300'007);
      ASSERT_TRUE((*upload)->Append(std::string_view(payload).substr(at, n)).ok());
      at += n;
    }
    EXPECT_FALSE((*upload)->Append("x").ok()) << "more than announced";
    auto ref = (*upload)->Finish();
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    EXPECT_EQ(ref->size, size);
    EXPECT_EQ(fs::file_size(dir_ / ref->name), size) << "the padded last block was cut off";
    EXPECT_TRUE(ReadAll(ref->name) == payload) << size;
    auto source = files.Open(*ref);
    ASSERT_TRUE(source.ok());
    std::string back;
    ASSERT_TRUE((*source)->ReadAt(0, size, back).ok());
    EXPECT_TRUE(back == payload);
  }
}

TEST_P(CheckpointFilesTest, AnUnfinishedUploadLeavesNothingAndTheSweepKeepsOnlyWhatIsReferenced) {
  CheckpointFiles files(dir_.string(), GetParam());
  ASSERT_TRUE(files.Open().ok());
  {
    auto upload = files.Begin(10);
    ASSERT_TRUE(upload.ok());
    ASSERT_TRUE((*upload)->Append("01234").ok());
  }
  EXPECT_TRUE(fs::is_empty(dir_));
  auto finish = [&](const std::string& bytes) {
    auto upload = files.Begin(bytes.size());
    EXPECT_TRUE(upload.ok() && (*upload)->Append(bytes).ok());
    return (*upload)->Finish().value();
  };
  const CheckpointFileRef kept = finish("kept"), dropped = finish("dropped");
  std::ofstream(dir_ / "0abc-9.ckpt.part") << "cut short by a crash";
  std::ofstream(dir_ / "notes.txt") << "not ours";
  CheckpointFiles after_restart(dir_.string(), GetParam());
  ASSERT_TRUE(after_restart.Open().ok());
  EXPECT_FALSE(fs::exists(dir_ / "0abc-9.ckpt.part"));
  auto removed = after_restart.RemoveUnreferenced({kept.name});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_TRUE(fs::exists(dir_ / kept.name));
  EXPECT_FALSE(fs::exists(dir_ / dropped.name));
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
  auto listed = after_restart.List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<std::pair<std::string, uint64_t>>{{kept.name, 4}}));
}

INSTANTIATE_TEST_SUITE_P(WritePaths, CheckpointFilesTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Direct" : "PageCache"; });

TEST(CheckpointFileRefTest, EncodesDecodesAndRefusesDamage) {
  const CheckpointFileRef ref{"0123abcd-42.ckpt", 1ull << 33};
  auto back = DecodeCheckpointFileRef(EncodeCheckpointFileRef(ref));
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->name, ref.name);
  EXPECT_EQ((*back)->size, ref.size);
  // Inline bytes (an envelope) are not a reference.
  auto inline_bytes = DecodeCheckpointFileRef("ZTCKPT\x01\x00 ...");
  ASSERT_TRUE(inline_bytes.ok());
  EXPECT_FALSE(inline_bytes->has_value());
  const std::string good = EncodeCheckpointFileRef(ref);
  for (const std::string& bad :
       {good.substr(0, 10), EncodeCheckpointFileRef({"../etc/passwd", 5}),
        EncodeCheckpointFileRef({"0123.ckpt.part", 5}), EncodeCheckpointFileRef({"0a.ckpt", 0}),
        EncodeCheckpointFileRef({".ckpt", 5})}) {
    EXPECT_EQ(DecodeCheckpointFileRef(bad).status().code(), StatusCode::kCorruption) << bad;
  }
}

}  // namespace
}  // namespace ztune::head
