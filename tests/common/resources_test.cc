#include "common/resources.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ztune {
namespace {

TEST(ResourcesTest, DropsZeroAmounts) {
  auto a = ResourceSet::FromJson(Json{{"CPU", 1}, {"GPU", 0}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->amounts().size(), 1u);
  EXPECT_EQ(*a, ResourceSet::FromDoubles({{"CPU", 1.0}}));
}

TEST(ResourcesTest, RejectsNegativeAndNonNumeric) {
  EXPECT_FALSE(ResourceSet::FromJson(Json{{"CPU", -1}}).ok());
  EXPECT_FALSE(ResourceSet::FromJson(Json{{"CPU", "one"}}).ok());
  EXPECT_FALSE(ResourceSet::FromJson(Json::array()).ok());
}

TEST(ResourcesTest, FractionalArithmeticIsExact) {
  ResourceSet total = ResourceSet::FromDoubles({{"GPU", 1}});
  ResourceSet tenth = ResourceSet::FromDoubles({{"GPU", 0.1}});
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(total.Contains(tenth));
    total.Subtract(tenth);
  }
  EXPECT_TRUE(total.empty());
  EXPECT_FALSE(total.Contains(tenth));
  total.Add(tenth);
  EXPECT_DOUBLE_EQ(total.Get("GPU"), 0.1);
}

TEST(ResourcesTest, RequestEqualityIgnoresKeyOrderZerosAndIntFloat) {
  auto a = PlacementRequest::FromJson(
      Json::parse(R"({"bundles":[{"CPU":1,"GPU":0,"custom":2}],"strategy":"PACK"})"));
  auto b = PlacementRequest::FromJson(Json::parse(R"({"bundles":[{"custom":2.0,"CPU":1.0}]})"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  auto c = PlacementRequest::FromJson(
      Json::parse(R"({"bundles":[{"CPU":1,"custom":2}],"strategy":"SPREAD"})"));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(*a == *c);
}

// Pool keys are unambiguous whatever the names hold (keys were built by
// concatenation, and these two requests shared a pool).
TEST(ResourcesTest, RequestKeysOfDifferentRequestsDiffer) {
  const char* specs[] = {
      R"({"bundles":[{"a=10000;b":1}]})",
      R"({"bundles":[{"a":1,"b":1}]})",
      R"({"bundles":[{"a":1},{"b":1}]})",
      R"({"bundles":[{"a];[b":1}]})",
      R"({"bundles":[{"a":1}]})",
      R"({"bundles":[{"a":1}],"strategy":"SPREAD"})",
  };
  std::set<std::string> keys;
  for (const char* spec : specs) {
    auto r = PlacementRequest::FromJson(Json::parse(spec));
    ASSERT_TRUE(r.ok()) << spec << ": " << r.status().ToString();
    EXPECT_TRUE(keys.insert(r->Key()).second) << spec << " shares the key " << r->Key();
  }
}

TEST(ResourcesTest, EmptyHeadBundleIsRemoved) {
  auto r = PlacementRequest::FromJson(Json::parse(R"({"bundles":[{"CPU":0},{"CPU":2}]})"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->head_bundle_empty);
  ASSERT_EQ(r->bundles.size(), 1u);
  EXPECT_DOUBLE_EQ(r->Total().Get("CPU"), 2);
  auto plain = PlacementRequest::FromJson(Json::parse(R"({"bundles":[{"CPU":2}]})"));
  EXPECT_FALSE(*r == *plain);
  EXPECT_FALSE(PlacementRequest::FromJson(Json::parse(R"({"bundles":[{}]})")).ok());
  EXPECT_FALSE(PlacementRequest::FromJson(Json::parse(R"({"bundles":[]})")).ok());
}

TEST(ResourcesTest, DefaultRequestIsOneCpu) {
  auto r = PlacementRequest::FromJson(Json());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Total(), ResourceSet::FromDoubles({{"CPU", 1}}));
}

TEST(ResourcesTest, RejectsUnknownStrategyAndKeys) {
  auto r = PlacementRequest::FromJson(Json::parse(R"({"strategy":"SCATTER"})"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SCATTER"), std::string::npos);
  EXPECT_FALSE(PlacementRequest::FromJson(Json::parse(R"({"cpu":1})")).ok());
}

}  // namespace
}  // namespace ztune
