// Flat keys ("eval/acc") in results.
#include "common/flat_key.h"

#include <gtest/gtest.h>

namespace ztune {
namespace {

TEST(FlatKeyTest, TopLevelAndNested) {
  const Json r{{"loss", 1}, {"eval", {{"acc", 0.5}, {"deep", {{"x", 2}}}}}, {"a/b", 7}};
  EXPECT_EQ(*FindFlatKey(r, "loss"), 1);
  EXPECT_EQ(*FindFlatKey(r, "eval/acc"), 0.5);
  EXPECT_EQ(*FindFlatKey(r, "eval/deep/x"), 2);
  EXPECT_EQ(*FindFlatKey(r, "a/b"), 7);  // a literal key wins
  EXPECT_EQ(FindFlatKey(r, "eval/nope"), nullptr);
  EXPECT_EQ(FindFlatKey(r, "loss/x"), nullptr);
  EXPECT_EQ(FindFlatKey(r, ""), nullptr);
  EXPECT_EQ(FindFlatKey(Json(5), "loss"), nullptr);
}

}  // namespace
}  // namespace ztune
