// `ztune checkpoint`: what it writes for a packed directory and for a
// built-in trainable's bytes, and that a refusal or damaged bytes leave no
// directory behind (nothing the command made stays when it fails).
#include "client/checkpoint_download.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/checkpoint/checkpoint_envelope.h"
#include "common/checkpoint/directory_archive.h"
#include "tests/client/fake_head.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::client {
namespace {

namespace fs = std::filesystem;
using testing::FakeHead;

// The head's reply to `checkpoint`: the whole of `data` in one page.
Json CheckpointReply(const std::string& data, int64_t iteration) {
  checkpoint::CheckpointEnvelope envelope;
  envelope.trainable = "counter_class";
  envelope.trial_id = "e0001_00000";
  envelope.iteration = iteration;
  envelope.data = data;
  const std::string bytes = checkpoint::EncodeEnvelope(envelope);
  return Json{{"checkpoint_id", "c7"},
              {"iteration", iteration},
              {"size", bytes.size()},
              {"data", Base64Encode(bytes)},
              {"next_offset", nullptr}};
}

class CheckpointDownloadTest : public ::testing::Test {
 protected:
  // Runs `ztune checkpoint e0001_00000 -o <tmp>/out` against a head that
  // answers `reply`; the exit code.
  int Run(const Json& reply) {
    FakeHead head(FakeHead::Canned({{"checkpoint", reply}}));
    HeadClientOptions o;
    o.endpoint = head.endpoint();
    o.timeout_ms = 2000;
    HeadClient client(o);
    return RunCheckpoint(CommandContext{client, out_, err_}, "e0001_00000", std::nullopt, Out(),
                         /*json=*/false);
  }
  std::string Out() const { return tmp_.Sub("out"); }

  ztune::testing::TempDir tmp_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(CheckpointDownloadTest, APackedDirectoryIsWrittenAsTheTrainableSavedIt) {
  ztune::testing::TempDir saved;
  fs::create_directories(saved.Sub("sub"));
  std::ofstream(saved.Sub("state.json")) << R"({"value": 3})";
  std::ofstream(saved.Sub("sub/weights.bin")) << std::string(1000, 'w');
  auto packed = checkpoint::PackDirectory(saved.path(), 1 << 20);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();

  ASSERT_EQ(Run(CheckpointReply(*packed, 3)), kExitOk) << err_.str();
  std::ifstream state(Out() + "/state.json");
  std::stringstream text;
  text << state.rdbuf();
  EXPECT_EQ(text.str(), R"({"value": 3})");
  EXPECT_EQ(fs::file_size(Out() + "/sub/weights.bin"), 1000u);
  EXPECT_NE(out_.str().find("at iteration 3"), std::string::npos) << out_.str();
}

TEST_F(CheckpointDownloadTest, ABuiltInTrainablesBytesGoToCheckpointBin) {
  ASSERT_EQ(Run(CheckpointReply("opaque state", 2)), kExitOk) << err_.str();
  EXPECT_EQ(fs::file_size(Out() + "/checkpoint.bin"), 12u);
  EXPECT_NE(out_.str().find("checkpoint.bin"), std::string::npos) << out_.str();
}

// A packed directory whose bytes were damaged is reported as damaged (not
// written as checkpoint.bin), and the directory the command would have
// created is not left behind.
TEST_F(CheckpointDownloadTest, ADamagedPackedDirectoryIsRefusedAndLeavesNothing) {
  ztune::testing::TempDir saved;
  std::ofstream(saved.Sub("state.json")) << R"({"value": 3})";
  auto packed = checkpoint::PackDirectory(saved.path(), 1 << 20);
  ASSERT_TRUE(packed.ok());
  std::string damaged = *packed;
  damaged[damaged.size() / 2] ^= 0x40;

  EXPECT_EQ(Run(CheckpointReply(damaged, 3)), kExitUsage);
  EXPECT_NE(err_.str().find("is damaged"), std::string::npos) << err_.str();
  EXPECT_FALSE(fs::exists(Out()));
}

TEST_F(CheckpointDownloadTest, ARefusalLeavesNoDirectory) {
  EXPECT_EQ(Run(Json{{"ok", false},
                     {"error",
                      {{"code", "NotFound"},
                       {"message",
                        "trial e0001_00000 has no checkpoint at iteration 1 "
                        "(kept: 2, 3)"}}}}),
            kExitHeadError);
  EXPECT_NE(err_.str().find("kept: 2, 3"), std::string::npos) << err_.str();
  EXPECT_FALSE(fs::exists(Out()));
}

TEST_F(CheckpointDownloadTest, ANonEmptyDirectoryIsRefusedUntouched) {
  fs::create_directories(Out());
  std::ofstream(Out() + "/mine.txt") << "keep me";
  EXPECT_EQ(Run(CheckpointReply("opaque state", 2)), kExitUsage);
  EXPECT_NE(err_.str().find("is not empty"), std::string::npos) << err_.str();
  EXPECT_EQ(fs::file_size(Out() + "/mine.txt"), 7u);
  EXPECT_FALSE(fs::exists(Out() + "/checkpoint.bin"));
}

}  // namespace
}  // namespace ztune::client
