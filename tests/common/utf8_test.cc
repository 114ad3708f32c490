#include "common/utf8.h"

#include <gtest/gtest.h>

#include "common/json.h"
#include "common/protocol/codec.h"

namespace ztune {
namespace {

TEST(Utf8Test, ValidTextIsKeptAsItIs) {
  for (const char* s : {"", "loss", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(Utf8OrReplaced(s), s);
  }
}

TEST(Utf8Test, InvalidSequencesAreReplacedByteByByte) {
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_EQ(Utf8OrReplaced("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));          // truncated
  EXPECT_TRUE(IsValidUtf8(Utf8OrReplaced("\xE2\x82\xC0\xAF\xED\xA0\x80")));
}

// The decode seam: a worker's result with bad bytes in a value and a key
// becomes JSON that can be dumped (nlohmann throws on invalid UTF-8).
TEST(Utf8Test, DecodedResultsCanAlwaysBeDumped) {
  protocol::ResultBatch batch;
  batch.rid = 1;
  batch.trial_id = "t";
  batch.attempt = 1;
  batch.error = "bad \xFF error";
  Json result{{"training_iteration", 1}, {"name", "x\xC3"}, {"k\xFE", 1}};
  batch.results.push_back({1, protocol::RawResult::FromJson(result)});
  // Encode does not validate: this is what a worker's bytes look like.
  auto decoded = protocol::Decode(protocol::Encode(protocol::Message{batch, {}}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& b = std::get<protocol::ResultBatch>(decoded->body);
  const Json decoded_result = b.results[0].result.ToJson();
  EXPECT_NO_THROW((void)decoded_result.dump());
  EXPECT_TRUE(IsValidUtf8(b.error));
  EXPECT_TRUE(IsValidUtf8(decoded_result["name"].get<std::string>()));
}

}  // namespace
}  // namespace ztune
