#include "common/json_parse.h"

#include <gtest/gtest.h>

namespace ztune {
namespace {

std::string Nested(int levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

TEST(JsonParseTest, ParsesDocumentsUpToTheDepthLimit) {
  auto j = ParseJson(R"({"op": "status", "rid": [1, {"a": [2]}]})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["op"], "status");
  auto deep = ParseJson(Nested(kMaxJsonDepth));
  ASSERT_TRUE(deep.ok()) << deep.status().ToString();
  EXPECT_EQ(deep->dump(), Nested(kMaxJsonDepth));
}

TEST(JsonParseTest, RefusesDeeperDocumentsWithoutBuildingThem) {
  auto one_more = ParseJson(Nested(kMaxJsonDepth + 1));
  ASSERT_FALSE(one_more.ok());
  EXPECT_NE(one_more.status().message().find("deeper than 64"), std::string::npos)
      << one_more.status().message();
  // 100,000 levels crashed the head when the tree was dumped.
  auto huge = ParseJson(R"({"op": "status", "rid": )" + Nested(100000) + "}");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

TEST(JsonParseTest, SyntaxErrorsAreValuesNotExceptions) {
  for (const char* bad : {"", "{", "{\"a\": }", "[1,]", "nul", "{\"a\": 1} x"}) {
    auto r = ParseJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JsonParseTest, DuplicateKeysAreRefusedOnlyWhenAsked) {
  const std::string twice = R"({"a": {"x": 1, "y": 2}, "b": [{"x": 1}, {"x": 2}], "a": {}})";
  auto lenient = ParseJson(twice);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ((*lenient)["a"], Json::object());  // nlohmann keeps the last
  auto strict = ParseJsonNoDuplicateKeys(twice);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(), "key 'a' appears twice in one object");
  // Nested, and the same key in sibling objects is fine.
  EXPECT_TRUE(
      ParseJsonNoDuplicateKeys(R"({"b": [{"x": 1}, {"x": 2}], "c": {"x": {"x": 3}}})").ok());
  auto nested = ParseJsonNoDuplicateKeys(R"({"c": {"env": {"P": "1", "P": "2"}}})");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("'P'"), std::string::npos);
  // The depth bound still holds.
  EXPECT_FALSE(ParseJsonNoDuplicateKeys(Nested(kMaxJsonDepth + 1)).ok());
}

}  // namespace
}  // namespace ztune
